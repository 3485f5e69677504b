-- Headless Neovim end-to-end check of `attnlens serve` (Neovim 0.7+).
-- Run: ATTNLENS_PYTHON=... ATTNLENS_ROOT=.../examples/mini-metax nvim --headless -u attnlens_nvim.lua
-- Exit code: 0 = all checks passed; N = N failed checks; 99 = Lua error.
local python = assert(os.getenv('ATTNLENS_PYTHON'), 'ATTNLENS_PYTHON')
local root = assert(os.getenv('ATTNLENS_ROOT'), 'ATTNLENS_ROOT')
local target = os.getenv('ATTNLENS_TARGET_PYTHON') or python
local timeout = tonumber(os.getenv('ATTNLENS_TIMEOUT_MS') or '20000')
local file = root .. '/mini_metax/attention/backends/flash_attn.py'
local needle = 'reshape_and_cache_flash(key, value'

local function out(s) io.stdout:write(s .. '\n') end
local failures = 0
local function check(ok, what)
  out((ok and 'PASS ' or 'FAIL ') .. what)
  if not ok then failures = failures + 1 end
end

local messages = {}
vim.lsp.handlers['window/showMessage'] = function(_, result) table.insert(messages, result.message) end

local function find(bufnr, text)
  for i, line in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    local c = line:find(text, 1, true)
    if c then return i, c - 1 end -- 1-based line, 0-based byte column
  end
end

local function request(bufnr, method, params)
  local deadline = vim.loop.now() + timeout
  while vim.loop.now() < deadline do
    local res = vim.lsp.buf_request_sync(bufnr, method, params, timeout)
    for _, r in pairs(res or {}) do
      if r.result ~= nil then return r.result end
      if r.err then return nil, r.err end
    end
    vim.wait(100)
  end
end

local function run()
  vim.cmd('edit ' .. vim.fn.fnameescape(file))
  local bufnr = vim.api.nvim_get_current_buf()
  local config = {
    name = 'attnlens',
    cmd = { python, '-m', 'attnlens.lsp' },
    root_dir = root,
    init_options = { targetPython = target },
  }
  local client_id
  if vim.lsp.start then
    client_id = vim.lsp.start(config)
  else
    client_id = vim.lsp.start_client(config)
    vim.lsp.buf_attach_client(bufnr, client_id)
  end
  check(client_id ~= nil, 'client started (id ' .. tostring(client_id) .. ')')
  local ready = vim.wait(timeout, function()
    local c = vim.lsp.get_client_by_id(client_id)
    return c ~= nil and c.server_capabilities ~= nil and c.server_capabilities.hoverProvider ~= nil
  end, 50)
  check(ready, 'server initialized')

  -- 1. hover on the reshape_and_cache_flash( call shows the chain down to the C++ op
  local line, col = find(bufnr, needle)
  check(line ~= nil, 'found the call in the buffer')
  vim.api.nvim_win_set_cursor(0, { line, col })
  local params = vim.lsp.util.make_position_params()
  local hover = request(bufnr, 'textDocument/hover', params)
  local value = hover and hover.contents and (hover.contents.value or hover.contents) or ''
  if type(value) ~= 'string' then value = vim.inspect(value) end
  check(value:find('_C_cache_ops::reshape_and_cache_flash', 1, true) ~= nil, 'hover names the torch op')
  -- the folded chain: each hop a link named in plain words ("import fa_utils.py:26", "alias ...")
  check(value:find('[import ', 1, true) ~= nil and value:find('[alias ', 1, true) ~= nil,
    'hover lists the import and alias hops')

  -- 2. a `)` typed mid-line (in _forward_cascade): the other diagnostics of the file stay, a
  --    syntax-error diagnostic appears on that line, and hovers elsewhere still answer
  local function diags()
    local out = {}
    for _, d in ipairs(vim.diagnostic.get(bufnr)) do
      if d.source == 'attnlens' then table.insert(out, d) end
    end
    table.sort(out, function(a, b) return a.lnum < b.lnum or (a.lnum == b.lnum and a.message < b.message) end)
    return out
  end
  local function keys(list, skip_line)
    local out = {}
    for _, d in ipairs(list) do
      if d.lnum ~= skip_line and not d.message:find('^SyntaxError') then
        table.insert(out, d.lnum .. ':' .. d.col .. ':' .. d.message)
      end
    end
    return table.concat(out, '\n')
  end
  check(vim.wait(timeout, function() return #diags() > 0 end, 100), 'diagnostics published (' .. #diags() .. ')')
  local before = diags()
  local eline, ecol
  for i, l in ipairs(vim.api.nvim_buf_get_lines(bufnr, 0, -1, false)) do
    if l == '        n = md.num_actual_tokens' and (vim.api.nvim_buf_get_lines(bufnr, i, i + 1, false)[1] or ''):find('prefix_out', 1, true) then
      eline, ecol = i, #'        n = md.num_act'
    end
  end
  check(eline ~= nil, 'found the statement to break (line ' .. tostring(eline) .. ')')
  vim.api.nvim_buf_set_text(bufnr, eline - 1, ecol, eline - 1, ecol, { ')' })
  local syntax
  vim.wait(timeout, function()
    for _, d in ipairs(diags()) do
      if d.message:find('^SyntaxError') then syntax = d end
    end
    return syntax ~= nil
  end, 100)
  check(syntax ~= nil and syntax.lnum == eline - 1 and syntax.col == ecol and syntax.severity == vim.diagnostic.severity.ERROR,
    'syntax error reported at ' .. (syntax and (syntax.lnum + 1 .. ':' .. syntax.col .. ' ' .. syntax.message) or 'nowhere'))
  check(keys(diags(), eline - 1) == keys(before, eline - 1) and #diags() == #before + 1,
    'the other ' .. #before .. ' diagnostics of the file stay (now ' .. #diags() .. ')')
  vim.api.nvim_win_set_cursor(0, { line, col })
  hover = request(bufnr, 'textDocument/hover', vim.lsp.util.make_position_params())
  value = hover and hover.contents and (hover.contents.value or hover.contents) or ''
  if type(value) ~= 'string' then value = vim.inspect(value) end
  check(value:find('_C_cache_ops::reshape_and_cache_flash', 1, true) ~= nil, 'hover still answers with the syntax error in the file')
  vim.api.nvim_buf_set_text(bufnr, eline - 1, ecol, eline - 1, ecol + 1, { '' })
  check(vim.wait(timeout, function()
    for _, d in ipairs(diags()) do if d.message:find('^SyntaxError') then return false end end
    return #diags() == #before
  end, 100), 'syntax error gone when undone')

  -- 3. a new file that is not on disk (never written): symbols and hover
  local newfile = root .. '/mini_metax/attention/backends/brand_new_nvim.py'
  check(vim.loop.fs_stat(newfile) == nil, 'the new file is not on disk')
  vim.cmd('edit ' .. vim.fn.fnameescape(newfile))
  local nbuf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(nbuf, 0, -1, false, {
    'from mini_metax.attention.backends.fa_utils import reshape_and_cache_flash',
    '',
    '',
    'def write_kv_demo(key, value, key_cache, value_cache, slot_mapping):',
    '    reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "auto", 1.0, 1.0)',
  })
  if not vim.lsp.buf_is_attached(nbuf, client_id) then vim.lsp.buf_attach_client(nbuf, client_id) end
  local syms = request(nbuf, 'textDocument/documentSymbol', { textDocument = vim.lsp.util.make_text_document_params(nbuf) })
  local names = {}
  for _, sym in ipairs(syms or {}) do table.insert(names, sym.name .. '@' .. ((sym.range or sym.location.range).start.line + 1)) end
  check(table.concat(names, ',') == 'write_kv_demo@4', 'new buffer symbols: ' .. table.concat(names, ','))
  vim.api.nvim_win_set_cursor(0, { 5, 4 })
  local nh = request(nbuf, 'textDocument/hover', vim.lsp.util.make_position_params())
  local nv = nh and nh.contents and (nh.contents.value or nh.contents) or ''
  if type(nv) ~= 'string' then nv = vim.inspect(nv) end
  check(nv:find('_C_cache_ops::reshape_and_cache_flash', 1, true) ~= nil, 'new buffer hover names the torch op')
  vim.cmd('buffer ' .. bufnr)

  -- 4. implementation through the real UI path: vim.lsp.buf.implementation() jumps
  vim.lsp.buf.implementation()
  local jumped = vim.wait(timeout, function()
    return vim.api.nvim_buf_get_name(0) ~= file
  end, 50)
  local name = vim.api.nvim_buf_get_name(0)
  local cur = vim.api.nvim_get_current_line()
  check(jumped and (name:match('%.cu$') or name:match('%.cpp$') or name:match('%.py$')) ~= nil,
    'implementation jumped to ' .. name)
  check(cur:find('reshape_and_cache_flash', 1, true) ~= nil, 'landed on the target: ' .. cur)

  out('nvim ' .. vim.version().major .. '.' .. vim.version().minor .. '.' .. vim.version().patch)
  if #messages > 0 then out('messages: ' .. vim.inspect(messages)) end
  vim.lsp.stop_client(client_id)
  vim.wait(3000, function() return vim.lsp.get_client_by_id(client_id) == nil end, 50)
  if failures == 0 then vim.cmd('qall!') else vim.cmd('cquit ' .. failures) end
end

vim.api.nvim_create_autocmd('VimEnter', {
  once = true,
  callback = function()
    local ok, err = pcall(run)
    if not ok then out('ERROR ' .. tostring(err)); vim.cmd('cquit 99') end
  end,
})
