"""Issue 16, items 3 and 8: the hover's verdict, no hover where there is nothing kernel-related, code
lens, inlay hints, the Kernels grouping, Copy as Markdown, installed kernels in workspace symbols and
call hierarchy items named after the called symbol, end to end over stdio on examples/mini-metax.

Every expected value was checked by hand against the example's code: the call under the cursor, the
chain the README documents and the C++ / Triton definitions it ends in. Lines are found from the
source text, never written down.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from urllib.parse import unquote

import pytest
import pytest_asyncio
from lsprotocol import types as T

from .conftest import EXAMPLE, PYTHON, position_of, start_session, stop_session, uri

pytestmark = pytest.mark.asyncio(loop_scope="module")

BACKENDS, OPS, CSRC = (EXAMPLE / "mini_metax/attention/backends", EXAMPLE / "mini_metax/attention/ops", EXAMPLE / "csrc")
FA, FA_UTILS, TRITON_ATTN, MLA = (BACKENDS / n for n in ("flash_attn.py", "fa_utils.py", "triton_attn.py", "mla/triton_mla.py"))
MERGE, DECODE, DUMMY = OPS / "merge_attn_states.py", OPS / "decode.py", EXAMPLE / "mini_metax/_dummy_ops.py"
RESHAPE_CALL = "reshape_and_cache_flash(key, value, key_cache, value_cache, attn_metadata.slot_mapping"
MERGE_CALL = "merge_attn_states(output[:n], prefix_out, prefix_lse, suffix_out, suffix_lse)"


def line_of(path: Path, text: str) -> int:
    """1-based line of the first line of ``path`` that contains ``text``."""
    for i, ln in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if text in ln:
            return i
    raise AssertionError(f"{text!r} not in {path}")


def call_end_line(path: Path, start: str) -> int:
    """1-based line of the parenthesis that closes the call starting at ``start``."""
    text = path.read_text(encoding="utf-8")
    i = text.index(start) + len(start.split("(")[0])
    depth = 0
    for j in range(i, len(text)):
        depth += {"(": 1, ")": -1}.get(text[j], 0)
        if depth == 0 and text[j] == ")":
            return text.count("\n", 0, j) + 1
    raise AssertionError(f"unbalanced call {start!r}")


def visible(md: str, code: bool = True) -> str:
    """What a Markdown renderer shows as text: link targets and titles dropped (and code spans, unless ``code``:
    Markdown syntax inside them is shown as it is)."""
    text = re.sub(r"\]\([^)]*\)", "]", md)
    return text if code else re.sub(r"`[^`\n]*`", "", text)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tmp_path_factory):
    s = await start_session(tmp_path_factory.mktemp("companion"),
                            init_options={"targetPython": PYTHON, "hoverCopyLink": True})
    await s.wait_indexed()
    yield s
    await stop_session(s)


# -- hover: the verdict first ------------------------------------------------------------------


async def test_hover_first_line_names_the_cpp_kernel(lsp):
    md = await lsp.hover_text(FA, position_of(FA, RESHAPE_CALL))
    cu = CSRC / "cache_kernels.cu"
    k = line_of(cu, "void reshape_and_cache_flash(")
    first = md.splitlines()[0].rstrip()  # (lines end in a Markdown hard break)
    assert first == (
        f"Runs: `reshape_and_cache_flash` (torch op `_C_cache_ops::reshape_and_cache_flash`, [cache_kernels.cu:{k}]({uri(cu)}#L{k} "
        f"\"torch op: _C_cache_ops::reshape_and_cache_flash → reshape_and_cache_flash\"), decided at run time by "
        "`attn_metadata is not None and self.kv_sharing_target_layer_name is None`)")
    # the provider the default configuration loads: MINI_USE_PRECOMPILED unset -> the workspace extension
    assert md.splitlines()[1] == "Loaded by default from: `mini_metax._C` (not built in this checkout; `MINI_USE_PRECOMPILED` is unset)"
    # the final Python function: vLLM's wrapper in _custom_ops.py, whose body calls the op
    # (annotated, longer than 120 characters: the names only)
    assert "```python\ndef reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, kv_cache_dtype, " \
           "k_scale, v_scale)\n```" in md
    # the chain, folded into one line; plain words, no `live` / `unknown` / `reexport`
    chain = next(ln for ln in md.splitlines() if ln.startswith("Chain ("))
    assert chain.startswith(f"Chain (9 hops): [call flash_attn.py:{line_of(FA, RESHAPE_CALL)}](")  # `_` in a word: kept
    assert " → torch dispatcher → [schema torch_bindings.cpp:" in chain
    assert re.search(r"\]\([^)]*\) → \[def cache_kernels.cu:%d\]" % k, chain)
    for word in ("live", "unknown", "reexport"):
        assert not re.search(rf"\b{word}\b", visible(md)), word


async def test_hover_tree_one_line_per_leaf_then_the_dead_ones(lsp):
    md = await lsp.hover_text(FA, position_of(FA, MERGE_CALL))
    lines = [ln.rstrip() for ln in md.splitlines()]
    k = line_of(MERGE, "def merge_attn_states_kernel(")
    assert lines[0] == (f"Runs: `merge_attn_states_kernel` (Triton, [merge_attn_states.py:{k}]({uri(MERGE)}#L{k} "
                        "\"Triton kernel: mini_metax.attention.ops.merge_attn_states.merge_attn_states_kernel\"), "
                        "taken on this platform)")
    assert lines[1] == "Not taken on this platform: `merge_attn_states` (torch op, if `current_platform.is_cuda()`)"
    assert sum(ln.startswith("Runs:") for ln in lines) == 1
    # one leaf can run: the final Python function is the Triton kernel itself (constexpr annotations make the
    # line long: the names only)
    assert ("```python\ndef merge_attn_states_kernel(output, output_lse, prefix_output, prefix_lse, suffix_output, "
            "suffix_lse, num_tokens, token_stride, head_stride, HEAD_SIZE, PADDED_HEAD_SIZE, OUTPUT_LSE)\n```") in md
    # several leaves can run: the function where they part
    md = await lsp.hover_text(FA, position_of(FA, "self._forward_cascade(", len("self.")))
    lines = [ln.rstrip() for ln in md.splitlines()]
    assert [ln.split(" (")[0] for ln in lines[:2]] == ["Runs: `flash_attn_varlen_func`", "Runs: `merge_attn_states_kernel`"]
    # the guard both share (the early returns of forward) is said once; each line keeps what tells it apart
    # (`not (attn_metadata is None)`, an early return's `else`, said as `attn_metadata is not None`)
    guard = "attn_metadata is not None and not (md.max_query_len == 1) and not (md.is_spec_decode) and md.common_prefix_len > 0"
    assert [ln.rsplit(", ", 1)[1] for ln in lines[:2]] == ["decided at run time)", "decided at run time)"]
    assert lines[2] == f"All of them only if `{guard[:89]}…` (decided at run time)"  # (long guards: 90 characters)
    assert lines[3] == "Not taken on this platform: `merge_attn_states` (torch op, if `current_platform.is_cuda()`)"
    assert "```python\ndef _forward_cascade(self, query, key_cache, value_cache, output, md)\n```" in md


async def test_hover_not_installed_and_dummy_in_plain_words(lsp):
    md = await lsp.hover_text(FA, position_of(FA, "return flash_attn_varlen_func(", len("return ")))
    imp = line_of(FA_UTILS, "from miniflash import flash_attn_varlen_func")
    assert md.splitlines()[0].rstrip() == (
        f"Runs: `flash_attn_varlen_func` (not installed here: `miniflash`, imported at [fa_utils.py:{imp}]"
        f"({uri(FA_UTILS)}#L{imp} \"not installed: miniflash.flash_attn_varlen_func\"), taken on this platform)")
    call = "get_scheduler_metadata("
    md = await lsp.hover_text(FA, position_of(FA, call, 3))
    d = line_of(DUMMY, "def get_scheduler_metadata(")
    assert md.splitlines()[0].rstrip() == (
        f"Runs: `_DummyOps.get_scheduler_metadata` (dummy, [\\_dummy_ops.py:{d}]({uri(DUMMY)}#L{d} "
        "\"dummy: mini_metax._dummy_ops._DummyOps.get_scheduler_metadata\"), only logs and returns None, "
        "taken on this platform)")


async def test_hover_escapes_markdown(lsp):
    # the call goes through the package __init__ (a re-export) into a Triton launch `kernel[grid]`
    md = await lsp.hover_text(TRITON_ATTN, position_of(TRITON_ATTN, "        mini_unified_attention_fwd(", 8))
    shown = visible(md)
    assert "[re-export \\_\\_init\\_\\_.py:" in shown
    assert "__init__" not in shown
    assert "[launch :" in shown  # (in the same file as the hop before it: the line only)  # kernel[grid] is in the link's title only, never a link of its own
    assert "[grid]" not in shown
    # the whole tree (Copy as Markdown) escapes labels too
    pos = position_of(FA, MERGE_CALL)
    got = await lsp.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="attnlens.markdown", arguments=[uri(FA), pos.line, pos.character]))
    full = visible(got["markdown"], code=False)
    launch = line_of(MERGE, "merge_attn_states_kernel[grid](")
    assert f"merge_attn_states_triton runs merge_attn_states_kernel\\[grid\\]" in full
    assert "[grid]" not in full.replace("\\[grid\\]", "")
    assert launch > 0


async def test_no_hover_without_anything_kernel_related(lsp):
    assert await lsp.hover(MLA, position_of(MLA, "torch.empty(", len("torch.em"))) is None
    assert await lsp.hover(MLA, position_of(MLA, "torch.zeros(num_tokens, num_heads, self.kv_lora_rank", 8)) is None
    # a local variable, where it is bound and where it is read
    assert await lsp.hover(MLA, position_of(MLA, "attn_logits = torch.empty(", 3)) is None
    assert await lsp.hover(FA, position_of(FA, "n = md.num_actual_tokens", 0)) is None


async def test_copy_as_markdown_link_and_command(lsp):
    pos = position_of(FA, RESHAPE_CALL)
    md = await lsp.hover_text(FA, pos)
    m = re.search(r"\[Copy as Markdown\]\(command:attnlens\.copyMarkdown\?([^ )]+) ", md)
    assert m is not None, md

    assert json.loads(unquote(m.group(1))) == [{"uri": uri(FA), "line": pos.line, "character": pos.character}]
    got = await lsp.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="attnlens.markdown", arguments=[{"uri": uri(FA), "line": pos.line, "character": pos.character}]))
    text = got["markdown"].splitlines()
    call = FA.read_text().splitlines()[pos.line].strip()[:80]
    assert text[0] == f"### AttnLens: `{call}` (flash_attn.py:{pos.line + 1})"
    k = line_of(CSRC / "cache_kernels.cu", "void reshape_and_cache_flash(")
    # relative links (for pasting into an issue), the same verdict as the hover
    assert text[1].startswith(f"Runs: `reshape_and_cache_flash` (torch op `_C_cache_ops::reshape_and_cache_flash`, [cache_kernels.cu:{k}](csrc/cache_kernels.cu#L{k} ")


# -- code lens, inlay hints, the Kernels grouping ---------------------------------------------------


async def _lenses(lsp, path: Path):
    got = await lsp.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri(path))))
    return [(c.range.start.line + 1, c.command.title) for c in got or []], got


async def test_code_lens_counts_on_backend_classes_and_impl_methods(lsp):
    lenses, raw = await _lenses(lsp, FA)
    assert lenses == [
        (line_of(FA, "class MiniFlashAttentionBackend("), "5 kernels · 1 not installed · 1 dummy · 1 not taken here"),
        (line_of(FA, "    def build("), "1 dummy"),
        (line_of(FA, "    def forward("), "5 kernels · 1 not installed · 1 not taken here"),
        (line_of(FA, "    def _flash_varlen("), "1 not installed"),
        (line_of(FA, "    def _forward_cascade("), "1 kernel · 1 not installed · 1 not taken here"),
        (line_of(FA, "    def _forward_spec_decode("), "1 kernel"),
    ]
    # a click peeks at the kernels: the backend's 7 targets that can run, each at its definition
    backend = raw[0].command
    assert backend.command == "attnlens.showKernels"
    locs = {(x["uri"], x["line"] + 1) for x in backend.arguments[2]}
    assert (uri(CSRC / "cache_kernels.cu"), line_of(CSRC / "cache_kernels.cu", "void reshape_and_cache_flash(")) in locs
    assert len(locs) == 7


async def test_inlay_hints_after_kernel_calls(lsp):
    got = await lsp.client.text_document_inlay_hint_async(T.InlayHintParams(
        T.TextDocumentIdentifier(uri(FA)), T.Range(T.Position(0, 0), T.Position(10_000, 0))))
    hints = [(h.position.line + 1, h.label[0].value) for h in got]
    lines = FA.read_text().splitlines()
    cu = CSRC / "cache_kernels.cu"
    dk = line_of(DECODE, "def _decode_kernel(")
    mk = line_of(MERGE, "def merge_attn_states_kernel(")
    assert hints == [
        (call_end_line(FA, "get_scheduler_metadata("), "→ dummy"),
        (line_of(FA, "apply_rotary(md.positions"), f"→ pos_encoding.cu:{line_of(CSRC / 'pos_encoding.cu', 'void rotary_embedding(')}"),
        (line_of(FA, RESHAPE_CALL), f"→ cache_kernels.cu:{line_of(cu, 'void reshape_and_cache_flash(')}"),
        (call_end_line(FA, "torch.ops._mini_C.paged_attention_v2("),
         f"→ paged_attention.cu:{line_of(CSRC / 'attention/paged_attention.cu', 'void paged_attention_v2(')}"),
        (line_of(FA, "self._forward_spec_decode("), f"→ decode.py:{dk}"),
        (line_of(FA, "self._forward_cascade("), f"→ not installed | merge_attn_states.py:{mk}"),
        (line_of(FA, "self._flash_varlen(query[:n], key_cache, value_cache, md, out=output[:n])"), "→ not installed"),
        (call_end_line(FA, "return flash_attn_varlen_func("), "→ not installed"),
        (call_end_line(FA, "prefix_out, prefix_lse = self._flash_varlen("), "→ not installed"),
        (call_end_line(FA, "suffix_out, suffix_lse = self._flash_varlen("), "→ not installed"),
        (line_of(FA, MERGE_CALL), f"→ merge_attn_states.py:{mk}"),
        (line_of(FA, "decode_attention_fwd(q, key_cache"), f"→ decode.py:{dk}"),
    ]
    # the hint is placed after the call's closing parenthesis and links to the kernel
    h = next(h for h in got if h.label[0].value.startswith("→ cache_kernels.cu"))
    assert lines[h.position.line][:h.position.character].endswith("layer._v_scale)")
    assert h.label[0].location.uri == uri(cu) and h.label[0].location.range.start.line + 1 == line_of(cu, "void reshape_and_cache_flash(")
    # the tooltip (the hover's verdict) comes with inlayHint/resolve
    assert h.label[0].tooltip is None
    resolved = await lsp.client.inlay_hint_resolve_async(h)
    assert resolved.label[0].tooltip.value.startswith(
        "Runs: `reshape_and_cache_flash` (torch op `_C_cache_ops::reshape_and_cache_flash`, [cache_kernels.cu:")


async def test_after_an_edit_lenses_and_hints_move_with_their_calls(lsp):
    """An edit above the calls: the answer comes at once from the last complete sites, moved to where the same
    calls are now (the file is traced again in the background)."""
    params = T.InlayHintParams(T.TextDocumentIdentifier(uri(FA)), T.Range(T.Position(0, 0), T.Position(10_000, 0)))
    before = [(h.position.line, h.position.character, h.label[0].value)
              for h in await lsp.client.text_document_inlay_hint_async(params)]
    lenses_before, _ = await _lenses(lsp, FA)
    text = FA.read_text(encoding="utf-8")
    lsp.open(FA, "# an edit\n" + text, version=2)
    try:
        after = [(h.position.line, h.position.character, h.label[0].value)
                 for h in await lsp.client.text_document_inlay_hint_async(params)]
        assert after == [(ln + 1, c, label) for ln, c, label in before]
        lenses_after, _ = await _lenses(lsp, FA)
        assert lenses_after == [(ln + 1, title) for ln, title in lenses_before]
    finally:
        lsp.client.text_document_did_close(T.DidCloseTextDocumentParams(T.TextDocumentIdentifier(uri(FA))))


async def test_kernels_grouping_per_backend(lsp):
    got = await lsp.client.workspace_execute_command_async(T.ExecuteCommandParams(command="attnlens.kernels"))
    fa = next(b for b in got if b["name"] == "FLASH_ATTN" and b["kind"] == "attention")
    assert fa["counts"] == "5 kernels · 1 not installed · 1 dummy · 1 not taken here"
    rows = [(t["name"], t["tag"], t["reachability"], len(t["sites"])) for t in fa["targets"]]
    assert rows == [
        ("rotary_embedding", "torch op", "runtime", 1),
        ("reshape_and_cache_flash", "torch op", "runtime", 1),
        ("paged_attention_v2", "torch op", "runtime", 1),
        ("_decode_kernel", "Triton", "live", 2),
        ("flash_attn_varlen_func", "not installed here", "live", 5),
        ("merge_attn_states_kernel", "Triton", "live", 2),
        ("merge_attn_states", "torch op", "dead", 2),
        ("_DummyOps.get_scheduler_metadata", "dummy", "live", 1),
    ]
    varlen = next(t for t in fa["targets"] if t["name"] == "flash_attn_varlen_func")
    assert varlen["full"] == "miniflash.flash_attn_varlen_func"
    assert (Path(varlen["path"]).name, varlen["line"]) == ("fa_utils.py", line_of(FA_UTILS, "from miniflash import flash_attn_varlen_func"))


# -- workspace symbols, call hierarchy ------------------------------------------------------------------


async def test_workspace_symbols_find_installed_kernels(lsp):
    got = await lsp.client.workspace_symbol_async(T.WorkspaceSymbolParams(query="reshape_and_cache_kernel_flash"))
    inst = [s for s in got if "site-packages" in s.location.uri]
    assert inst, [s.name for s in got]
    s = inst[0]
    assert s.name == "reshape_and_cache_kernel_flash" and s.kind == T.SymbolKind.Function
    assert s.container_name.endswith("— Triton kernel · installed vllm")
    text = Path(s.location.uri.replace("file://", "")).read_text().splitlines()
    assert text[s.location.range.start.line].lstrip().startswith("def reshape_and_cache_kernel_flash(")


async def test_call_hierarchy_items_named_after_the_called_symbol(lsp):
    items = await lsp.client.text_document_prepare_call_hierarchy_async(T.CallHierarchyPrepareParams(
        T.TextDocumentIdentifier(uri(FA)), position_of(FA, "self._flash_varlen(query[:n], key_cache, value_cache, md, out=",
                                                       len("self."))))
    assert [(i.name, i.detail.split(" · ")[0]) for i in items] == [("_flash_varlen", "→ miniflash")]
    items = await lsp.client.text_document_prepare_call_hierarchy_async(T.CallHierarchyPrepareParams(
        T.TextDocumentIdentifier(uri(FA)), position_of(FA, "    def _forward_cascade(", 8)))
    out = await lsp.client.call_hierarchy_outgoing_calls_async(T.CallHierarchyOutgoingCallsParams(items[0]))
    names = sorted((c.to.name, (c.to.detail or "").split(" · ")[0]) for c in out)
    # (the missing package is one item per call site: it has no definition of its own to go to)
    assert names == [("_flash_varlen", "→ miniflash"), ("_flash_varlen", "→ miniflash"),
                     ("merge_attn_states", "→ _C::merge_attn_states"), ("merge_attn_states", "→ merge_attn_states_kernel")]


# -- settings --------------------------------------------------------------------------------------------


async def test_settings_turn_code_lens_inlay_hints_and_copy_link_off(tmp_path):
    s = await start_session(tmp_path, init_options={"targetPython": PYTHON, "codeLens": False, "inlayHints": False,
                                                    "installedSymbols": False})
    try:
        await s.wait_indexed()
        assert await s.client.text_document_code_lens_async(T.CodeLensParams(T.TextDocumentIdentifier(uri(FA)))) is None
        assert await s.client.text_document_inlay_hint_async(T.InlayHintParams(
            T.TextDocumentIdentifier(uri(FA)), T.Range(T.Position(0, 0), T.Position(10_000, 0)))) is None
        md = await s.hover_text(FA, position_of(FA, RESHAPE_CALL))
        assert "Copy as Markdown" not in md  # the server's default: no command: link for editors other than VS Code
        got = await s.client.workspace_symbol_async(T.WorkspaceSymbolParams(query="reshape_and_cache_kernel_flash"))
        assert not [x for x in got or [] if "site-packages" in x.location.uri]
    finally:
        await stop_session(s)
