// End-to-end test of the AttnLens VS Code extension in a real VS Code UI: code-server 4.100.3
// (VS Code 1.100.3) on 127.0.0.1, driven by playwright-core in Debian's Chromium.
//
//   node tests/e2e_vscode/ui.test.mjs
//
// Environment (all optional):
//   ATTNLENS_PYTHON         interpreter with attnlens installed   (default: <repo>/.venv/bin/python)
//   ATTNLENS_VSIX           the packaged extension                (default: client-vscode/attnlens.vsix)
//   ATTNLENS_E2E_DEPS       what setup.sh installed (DEST)        (default: <repo>/.e2e/deps)
//   ATTNLENS_E2E_ARTIFACTS  folder for screenshots and logs       (default: a new temp folder)
//   ATTNLENS_E2E_README_SHOT  also write the hover screenshot here (e.g. client-vscode/images/hover.png)
//   ATTNLENS_E2E_REQUIRE_DIAGNOSTICS=1  fail (not skip) scenario 1 when no diagnostic shows
//   CHROMIUM                browser binary                        (default: /usr/bin/chromium)
//
// Scenarios: (1) diagnostic squiggle in flash_attn.py, (2) hover over reshape_and_cache_flash( shows
// the chain down to _C_cache_ops::reshape_and_cache_flash, (3) Attention backends tree → click a
// kernel call site → editor at that line, (4) command palette: "AttnLens: Show environment",
// "AttnLens: Show inventory" (an error from the server is a notification) and "AttnLens: Trace at
// cursor" (a panel whose links open the code), (5) "AttnLens: Run probe…" → a row in "Probe runs" →
// its details,
// (5b) issue 16: the probe code action runs without re-asking and its notification / Probe runs row show the
// pre-flight's one-line reason; attnlens.interpreter in the User settings is on the User tab and survives
// 5 window reloads (resolved from the setting each time); "AttnLens: Select interpreter…" validates,
// (5c) issue 16, items 3 and 8: the hover's first line names the leaf, no hover on torch.empty / a local, the
// backend's code lens, inlay hints after kernel calls, the status bar text, Copy as Markdown, the Kernels grouping
// (screenshots vscode-hover.png, vscode-tree.png, vscode-problems.png for docs/vscode.md),
// (6) a bad attnlens.interpreter (Settings editor) → actionable error → fixed → server back, then in a
// second code-server with workspace trust on: (7) an untrusted copy whose .vscode/settings.json names
// another interpreter: the server still starts with the user's one, and probes are refused.
// The last line printed is "N passed, N failed".
// Everything it starts (code-server and the language server below it, Chromium) is stopped at exit.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import net from "node:net";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const HERE = path.dirname(fileURLToPath(import.meta.url));
const REPO = path.resolve(HERE, "..", "..");
const DEPS = path.resolve(process.env.ATTNLENS_E2E_DEPS || path.join(REPO, ".e2e", "deps"));
const PYTHON = process.env.ATTNLENS_PYTHON || path.join(REPO, ".venv", "bin", "python");
const VSIX = path.resolve(process.env.ATTNLENS_VSIX || path.join(REPO, "client-vscode", "attnlens.vsix"));
const CHROMIUM = process.env.CHROMIUM || "/usr/bin/chromium";
const CS = path.join(DEPS, "cs", "node_modules", ".bin", "code-server");
const WORK = fs.mkdtempSync(path.join(os.tmpdir(), "attnlens-e2e-"));
const ART = path.resolve(process.env.ATTNLENS_E2E_ARTIFACTS || path.join(WORK, "artifacts"));
fs.mkdirSync(ART, { recursive: true });

const t0 = Date.now();
const secs = (from = t0) => ((Date.now() - from) / 1000).toFixed(1);
const log = (...a) => console.log(`[${secs()}s]`, ...a);

const results = []; // {name, status: pass|fail|skip, detail, seconds}
let csProc;
let context;

// --- cleanup: kill the code-server process group (extension host and language server included)
function killGroup(signal = "SIGTERM") {
  if (csProc && csProc.pid) {
    try {
      process.kill(-csProc.pid, signal);
    } catch {
      // already gone
    }
  }
}
process.on("exit", () => killGroup("SIGKILL"));
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(sig, () => {
    killGroup("SIGKILL");
    process.exit(130);
  });
}

function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once("error", reject);
    srv.listen(0, "127.0.0.1", () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function waitHttp(url, timeoutMs) {
  const end = Date.now() + timeoutMs;
  while (Date.now() < end) {
    try {
      const r = await fetch(url);
      if (r.ok) return true;
    } catch {
      // not up yet
    }
    if (csProc.exitCode !== null) throw new Error(`code-server exited with ${csProc.exitCode}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not answer within ${timeoutMs / 1000} s`);
}

function preflight() {
  const missing = [];
  if (!fs.existsSync(CS)) missing.push(`code-server (${CS}): run tests/e2e_vscode/setup.sh ${DEPS}`);
  if (!fs.existsSync(path.join(DEPS, "pw", "node_modules", "playwright-core"))) missing.push(`playwright-core in ${DEPS}/pw: run setup.sh`);
  if (!fs.existsSync(CHROMIUM)) missing.push(`${CHROMIUM}: apt-get install chromium (setup.sh does)`);
  if (!fs.existsSync(VSIX)) missing.push(`${VSIX}: build it (cd client-vscode && npm ci && npm run build)`);
  if (!fs.existsSync(PYTHON)) missing.push(`${PYTHON}: set ATTNLENS_PYTHON`);
  if (missing.length) {
    for (const m of missing) console.log(`missing: ${m}`);
    console.log("0 passed, 1 failed");
    process.exit(2);
  }
}

async function scenario(name, fn) {
  const start = Date.now();
  log(`--- ${name}`);
  try {
    const r = await fn();
    if (r && r.skip) {
      results.push({ name, status: "skip", detail: r.skip, seconds: secs(start) });
      log(`SKIP ${name}: ${r.skip}`);
    } else {
      results.push({ name, status: "pass", detail: r?.detail ?? "", seconds: secs(start) });
      log(`PASS ${name} (${secs(start)} s)${r?.detail ? ` — ${r.detail}` : ""}`);
    }
  } catch (e) {
    results.push({ name, status: "fail", detail: e.message.split("\n")[0], seconds: secs(start) });
    log(`FAIL ${name} (${secs(start)} s): ${e.message}`);
  }
  const slug = name.replace(/[^a-z0-9]+/gi, "-").replace(/^-|-$/g, "").toLowerCase();
  await shot(`${String(results.length)}-${slug}.png`);
}

let page;
async function shot(file, opts = {}) {
  if (!page) return;
  try {
    await page.screenshot({ path: path.join(ART, file), ...opts });
  } catch (e) {
    log(`screenshot ${file} failed: ${e.message}`);
  }
}

// --- VS Code UI helpers
async function quickOpen(text) {
  await page.keyboard.press("Escape");
  await page.keyboard.press("Control+P");
  const input = page.locator(".quick-input-widget input");
  await input.waitFor({ timeout: 20000 });
  await input.fill(text);
  // the focused row, once it is the file (see openFileRetried)
  await page.locator(".quick-input-list .monaco-list-row.focused", { hasText: path.basename(text) }).first().waitFor({ timeout: 20000 });
  await page.keyboard.press("Enter");
}

async function runCommand(title) {
  // Retried: a keypress can land while the workbench moves focus (an editor opening, a toast).
  let last;
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      await page.keyboard.press("Escape");
      if (attempt > 1) {
        // F1 can be swallowed by a focused widget (the Settings editor's search box): click the title bar.
        await page.locator(".part.titlebar .window-title").first().click({ timeout: 3000 }).catch(() => {});
      }
      await page.keyboard.press("F1");
      const input = page.locator(".quick-input-widget input");
      await input.waitFor({ timeout: attempt === 1 ? 4000 : 8000 });
      await input.fill(`>${title}`, { timeout: 5000 });
      const row = page.locator(".quick-input-list .monaco-list-row", { hasText: title }).first();
      await row.waitFor({ timeout: 8000 });
      await row.click();
      return;
    } catch (e) {
      last = e;
      log(`command palette: "${title}" attempt ${attempt} failed: ${e.message.split("\n")[0]}`);
      await shot(`palette-retry-${attempt}.png`);
    }
  }
  throw last;
}

async function gotoLine(line, col) {
  let last;
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      await page.keyboard.press("Escape");
      if (attempt > 1) {
        // Put the focus back into the editor before the shortcut.
        await page.locator(".monaco-editor .view-lines").first().click({ position: { x: 400, y: 10 }, force: true, timeout: 5000 }).catch(() => {});
      }
      await page.keyboard.press("Control+G");
      const input = page.locator(".quick-input-widget input");
      await input.waitFor({ timeout: 5000 });
      await input.fill(col ? `:${line}:${col}` : `:${line}`, { timeout: 5000 });
      await page.keyboard.press("Enter");
      return;
    } catch (e) {
      last = e;
      log(`go to line ${line}: attempt ${attempt} failed: ${e.message.split("\n")[0]}`);
    }
  }
  throw last;
}

/** Screen box of the first occurrence of `word` in a rendered editor line (independent of tokenization). */
async function textBox(line, word) {
  const box = await line.evaluate((el, word) => {
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    const nodes = [];
    let full = "";
    while (walker.nextNode()) {
      nodes.push([walker.currentNode, full.length]);
      full += walker.currentNode.textContent;
    }
    const i = full.replace(/\u00a0/g, " ").indexOf(word);
    if (i < 0) return null;
    const at = (k) => {
      for (const [n, start] of nodes) if (k >= start && k <= start + n.textContent.length) return [n, k - start];
      return null;
    };
    const range = document.createRange();
    range.setStart(...at(i));
    range.setEnd(...at(i + word.length));
    const r = range.getBoundingClientRect();
    return { x: r.x, y: r.y, width: r.width, height: r.height };
  }, word);
  if (!box) throw new Error(`"${word}" is not in the rendered line`);
  return box;
}

/** The frame (of any webview: the trace panel, a Markdown preview) whose text matches `re`. */
async function webviewFrame(re, timeout) {
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    for (const f of page.frames()) {
      const t = await f.evaluate(() => document.body?.innerText ?? "").catch(() => "");
      if (re.test(t)) return f;
    }
    await page.waitForTimeout(200);
  }
  throw new Error(`no webview shows ${re} within ${timeout / 1000} s`);
}

/** The chain text the extension logged after a line matching `header` (newest first), or undefined. */
function traceFromExtensionLog(header) {
  if (!current) return undefined;
  const root = path.join(current.ud, "logs");
  const files = [];
  const walk = (d) => {
    for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name === "AttnLens.log") files.push(p);
    }
  };
  walk(root);
  for (const f of files.reverse()) {
    const lines = fs.readFileSync(f, "utf8").split("\n");
    for (let i = lines.length - 1; i >= 0; i--) {
      if (header.test(lines[i])) {
        const out = [];
        for (let j = i + 1; j < lines.length && !/^\d{4}-\d\d-\d\d /.test(lines[j]); j++) out.push(lines[j]);
        return out.join("\n");
      }
    }
  }
  return undefined;
}

async function cursorText() {
  const el = page.locator(".statusbar-item", { hasText: /Ln \d+, Col \d+/ }).first();
  return (await el.textContent({ timeout: 5000 }))?.trim() ?? "";
}

async function activeTabTitle() {
  return (await page.locator(".tabs-container .tab.active").first().textContent({ timeout: 5000 }))?.trim() ?? "";
}

/**
 * Wait for a notification whose text matches `re`: as a toast, else (toasts can be hidden by the
 * workbench while focus moves) in the notification center. Returns its message.
 */
async function waitToast(re, timeout) {
  const toast = page.locator(".notification-toast", { hasText: re }).first();
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    if (await toast.waitFor({ timeout: Math.min(8000, Math.max(end - Date.now(), 1)) }).then(() => true, () => false)) {
      return (await toast.locator(".notification-list-item-message").innerText())?.trim() ?? "";
    }
    await runCommand("Notifications: Show Notifications");
    const item = page.locator(".notifications-center .notification-list-item", { hasText: re }).first();
    if (await item.waitFor({ timeout: 2000 }).then(() => true, () => false)) {
      const text = (await item.locator(".notification-list-item-message").innerText())?.trim() ?? "";
      log(`(notification found in the notification center, not as a toast: ${text.slice(0, 80)})`);
      await shot(`notification-center-${Date.now()}.png`);
      await page.keyboard.press("Escape");
      return text;
    }
    await page.keyboard.press("Escape");
  }
  throw new Error(`no notification matching ${re} within ${timeout / 1000} s`);
}

async function clearToasts() {
  const close = page.locator(".notification-toast .codicon-notifications-clear, .notification-toast .codicon-close");
  for (let i = 0; i < 5 && (await close.count()) > 0; i++) {
    await close.first().click({ timeout: 2000 }).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------
preflight();
const require = createRequire(path.join(DEPS, "pw", "package.json"));
const { chromium } = require("playwright-core");

const csVersion = spawnSync(CS, ["--version"], { encoding: "utf8" }).stdout.trim().split("\n").pop();
log(`code-server ${csVersion}`);
log(`extension ${VSIX} (${(fs.statSync(VSIX).size / 1024).toFixed(0)} KB), python ${PYTHON}`);
log(`artifacts: ${ART}`);

const cfgFile = path.join(WORK, "code-server.yaml");
fs.writeFileSync(cfgFile, "auth: none\n");
let current; // {name, ud, exts} of the running code-server

/** A copy of examples/mini-metax and a fresh VS Code profile with the extension installed. */
function prepare(name, { trust }) {
  const dir = path.join(WORK, name);
  const ws = path.join(dir, "mini-metax");
  fs.cpSync(path.join(REPO, "examples", "mini-metax"), ws, { recursive: true });
  const ud = path.join(dir, "user-data");
  const exts = path.join(dir, "extensions");
  fs.mkdirSync(path.join(ud, "User"), { recursive: true });
  const settings = {
    "attnlens.interpreter": PYTHON,
    "attnlens.targetPython": PYTHON,
    "attnlens.cacheDir": path.join(dir, "cache"),
    "attnlens.trace.server": "messages",
    "workbench.startupEditor": "none",
    "workbench.tips.enabled": false,
    "workbench.enableExperiments": false,
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoCheckUpdates": false,
    "extensions.autoUpdate": false,
    "extensions.ignoreRecommendations": true,
    "security.workspace.trust.enabled": trust,
    "security.workspace.trust.startupPrompt": "never",
    "security.workspace.trust.banner": "never",
    "chat.disableAIFeatures": true,
    "git.enabled": false,
    "editor.hover.delay": 200,
    "editor.minimap.enabled": false,
    "window.commandCenter": false,
  };
  fs.writeFileSync(path.join(ud, "User", "settings.json"), JSON.stringify(settings, null, 2));
  const t = Date.now();
  const inst = spawnSync(CS, ["--config", cfgFile, "--user-data-dir", ud, "--extensions-dir", exts, "--install-extension", VSIX], {
    encoding: "utf8",
  });
  if (inst.status !== 0) throw new Error(`--install-extension failed: ${inst.stdout}${inst.stderr}`);
  log(`[${name}] installed the extension (${secs(t)} s)`);
  return { name, dir, ws, ud, exts, trust };
}

/** Start code-server (own process group = setsid, loopback, dead gallery) and open `prof.ws` in Chromium. */
async function startWorkbench(prof) {
  current = prof;
  const port = await freePort();
  const csLog = fs.openSync(path.join(ART, `code-server-${prof.name}.log`), "w");
  let t = Date.now();
  csProc = spawn(
    CS,
    [
      "--config", cfgFile, "--auth", "none", "--bind-addr", `127.0.0.1:${port}`,
      "--disable-telemetry", "--disable-update-check", ...(prof.trust ? [] : ["--disable-workspace-trust"]),
      "--disable-getting-started-override", "--user-data-dir", prof.ud, "--extensions-dir", prof.exts, prof.ws,
    ],
    {
      detached: true,
      stdio: ["ignore", csLog, csLog],
      env: {
        ...process.env,
        EXTENSIONS_GALLERY: JSON.stringify({ serviceUrl: "http://127.0.0.1:9/gallery", itemUrl: "http://127.0.0.1:9/item" }),
        ATTNLENS_CACHE_DIR: path.join(prof.dir, "cache"),
      },
    },
  );
  await waitHttp(`http://127.0.0.1:${port}/healthz`, 30000);
  log(`[${prof.name}] code-server up on 127.0.0.1:${port} (${secs(t)} s)`);
  t = Date.now();
  context = await chromium.launchPersistentContext(path.join(prof.dir, "chromium"), {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1280, height: 800 },
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  page = context.pages()[0] || (await context.newPage());
  page.setDefaultTimeout(15000);
  page.on("pageerror", (e) => log("pageerror:", e.message));
  const consoleLog = fs.createWriteStream(path.join(ART, `browser-console-${prof.name}.log`));
  page.on("console", (m) => {
    if (m.type() === "error" || m.type() === "warning") consoleLog.write(`[${secs()}s] ${m.type()}: ${m.text()}\n`);
  });
  await page.goto(`http://127.0.0.1:${port}/?folder=${encodeURIComponent(prof.ws)}`);
  await page.locator(".monaco-workbench").waitFor({ timeout: 60000 });
  await page.locator(".statusbar").waitFor({ timeout: 30000 });
  log(`[${prof.name}] workbench loaded (${secs(t)} s)`);
  await page.locator(".monaco-workbench").click({ position: { x: 640, y: 400 } }).catch(() => {});
}

/** Close the browser, kill code-server's process group (extension host + server), keep its logs. */
async function stopWorkbench() {
  if (context) await context.close().catch(() => {});
  context = undefined;
  page = undefined;
  killGroup("SIGTERM");
  if (csProc) {
    const proc = csProc;
    await new Promise((r) => {
      if (proc.exitCode !== null || proc.signalCode !== null) return r();
      const timer = setTimeout(() => {
        killGroup("SIGKILL");
        r();
      }, 3000);
      proc.once("exit", () => {
        clearTimeout(timer);
        r();
      });
    });
    killGroup("SIGKILL"); // stragglers in the group (extension host, language server)
    csProc = undefined;
  }
  if (current) {
    try {
      const logs = path.join(current.ud, "logs");
      if (fs.existsSync(logs)) fs.cpSync(logs, path.join(ART, `vscode-logs-${current.name}`), { recursive: true });
    } catch {
      // ignore
    }
    if (!process.env.ATTNLENS_E2E_KEEP) fs.rmSync(current.dir, { recursive: true, force: true });
    current = undefined;
  }
}

// ---- issue 16 (item 2): a syntax error mid-line keeps the other diagnostics and hovers and shows a
// syntax-error diagnostic; an unsaved new (untitled) buffer gets a hover. Self-contained: needs only the
// main profile with flash_attn.py's findings.
const FA_LINES = fs.readFileSync(path.join(REPO, "examples", "mini-metax", "mini_metax", "attention", "backends", "flash_attn.py"), "utf8").split("\n");
const BREAK_LINE = FA_LINES.findIndex((l, i) => l === "        n = md.num_actual_tokens" && FA_LINES[i + 1].includes("prefix_out")) + 1;
const BREAK_COL = "        n = md.num_act".length + 1; // 1-based: the `)` goes before this column
const RESHAPE_LINE = FA_LINES.findIndex((l) => l.includes("reshape_and_cache_flash(key, value")) + 1;
const UNTITLED_TEXT = [
  "from mini_metax.attention.backends.fa_utils import reshape_and_cache_flash",
  "",
  "",
  "def write_kv_demo(key, value, key_cache, value_cache, slot_mapping):",
  '    reshape_and_cache_flash(key, value, key_cache, value_cache, slot_mapping, "auto", 1.0, 1.0)',
  "",
].join("\n");

/** [errors, warnings, infos] of the Problems status bar item. */
async function problemCounts() {
  const item = page.locator("#status\\.problems, .statusbar-item[id='status.problems']").first();
  const label = (await item.getAttribute("aria-label", { timeout: 2000 }).catch(() => "")) || "";
  const text = label || ((await item.innerText({ timeout: 2000 }).catch(() => "")) ?? "");
  if (/no problems/i.test(text)) return [0, 0, 0];
  const num = (word) => Number((text.match(new RegExp(`(\\d+)\\s+${word}`, "i")) ?? text.match(new RegExp(`${word}s?:\\s*(\\d+)`, "i")) ?? [0, 0])[1]);
  return label ? [num("error"), num("warning"), num("info")]
    : [...(text.match(/\d+/g) ?? []).map(Number), 0, 0, 0].slice(0, 3);
}

async function waitCounts(pred, timeout, what) {
  const end = Date.now() + timeout;
  let c;
  while (Date.now() < end) {
    c = await problemCounts();
    if (pred(c)) return c;
    await page.waitForTimeout(300);
  }
  throw new Error(`${what}: the Problems counts stayed ${JSON.stringify(c)}`);
}

async function hoverShows(lineLocator, word, want, timeout) {
  const hover = page.locator(".monaco-hover:visible", { hasText: want }).first();
  const end = Date.now() + timeout;
  while (Date.now() < end) {
    const box = await textBox(lineLocator, word);
    await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
    const raw = await hover.waitFor({ timeout: 4000 }).then(() => hover.innerText({ timeout: 2000 }), () => null).catch(() => null);
    if (raw !== null) return raw.split("\n")[0];
    await page.mouse.move(1200, 780);
    await page.waitForTimeout(300);
  }
  throw new Error(`no hover containing ${want} within ${timeout / 1000} s`);
}

async function syntaxErrorFlows() {
  await scenario("a ) typed mid-line: the other diagnostics and hovers stay, a SyntaxError diagnostic shows", async () => {
    await runCommand("View: Close All Editors");
    await openFlashAttn();
    // the file's findings, once they are stable
    let before = await waitCounts((c) => c[0] + c[1] + c[2] > 0, 60000, "no findings in flash_attn.py");
    for (let same = 0; same < 3;) {
      await page.waitForTimeout(700);
      const now = await problemCounts();
      same = JSON.stringify(now) === JSON.stringify(before) ? same + 1 : 0;
      before = now;
    }
    await gotoLine(BREAK_LINE, BREAK_COL);
    await page.keyboard.type(")");
    const after = await waitCounts((c) => c[0] === before[0] + 1, 30000, "no new error after typing )");
    if (after[1] !== before[1] || after[2] !== before[2]) {
      throw new Error(`the other findings changed: ${JSON.stringify(before)} → ${JSON.stringify(after)}`);
    }
    // the new error is the syntax error, at the `)`
    await gotoLine(BREAK_LINE - 1);
    await runCommand("Go to Next Problem (Error, Warning, Info)");
    const widget = page.locator(".marker-widget").first();
    await widget.waitFor({ timeout: 10000 });
    const msg = ((await widget.locator(".descriptioncontainer").innerText().catch(() => "")) || "").replace(/\s+/g, " ").trim();
    const pos = await cursorText();
    await shot("syntax-error.png");
    await page.keyboard.press("Escape");
    // (the widget renders message and source in separate elements: compared without white space)
    if (!msg.replace(/\s+/g, "").startsWith("SyntaxError:unmatched')'attnlens(syntax-error)")) throw new Error(`the problem at the ) is "${msg}"`);
    if (!pos.startsWith(`Ln ${BREAK_LINE}, Col ${BREAK_COL}`)) throw new Error(`the syntax error is at "${pos}", not Ln ${BREAK_LINE}, Col ${BREAK_COL}`);
    // a hover elsewhere in the file still answers
    await gotoLine(RESHAPE_LINE);
    const line = page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key" }).first();
    await line.waitFor({ timeout: 10000 });
    const first = await hoverShows(line, "reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache_flash", 30000);
    await page.mouse.move(1200, 780);
    await page.keyboard.press("Escape");
    // undone: the counts of the error-free file again
    await gotoLine(BREAK_LINE, BREAK_COL + 1);
    await page.keyboard.press("Control+Z");
    const undone = await waitCounts((c) => JSON.stringify(c) === JSON.stringify(before), 30000, "after undo");
    return { detail: `Problems ${JSON.stringify(before)} → ${JSON.stringify(after)} → undone ${JSON.stringify(undone)}; ` +
                     `problem at ${pos}: ${msg.slice(0, 80)}; hover with the error in the file: ${first.slice(0, 80)}` };
  });
  await page.keyboard.press("Escape");

  await scenario("an unsaved untitled Python buffer gets a hover", async () => {
    await runCommand("View: Close All Editors");
    await runCommand("File: New Untitled Text File");
    await page.locator(".tabs-container .tab.active", { hasText: /Untitled-\d+/ }).waitFor({ timeout: 15000 });
    await runCommand("Change Language Mode");
    const input = page.locator(".quick-input-widget input");
    await input.waitFor({ timeout: 10000 });
    await input.fill("python");
    await page.locator(".quick-input-list .monaco-list-row", { hasText: "(python)" }).first().click();
    await page.locator(".editor-instance .monaco-editor .view-lines").first().click({ position: { x: 200, y: 10 } });
    await page.keyboard.insertText(UNTITLED_TEXT);
    const title = await activeTabTitle();
    const line = page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key, value, key_cache" }).first();
    await line.waitFor({ timeout: 10000 });
    const first = await hoverShows(line, "reshape_and_cache_flash", "_C_cache_ops::reshape_and_cache_flash", 60000);
    await shot("untitled-hover.png");
    await page.mouse.move(1200, 780);
    await page.keyboard.press("Escape");
    await runCommand("View: Revert and Close Editor");
    return { detail: `tab "${title}" (never saved): hover ${first.slice(0, 100)}` };
  });
  await page.keyboard.press("Escape");
}

async function openFlashAttn() {
  await quickOpen("mini_metax/attention/backends/flash_attn.py");
  await page.locator(".tabs-container .tab.active", { hasText: "flash_attn.py" }).waitFor({ timeout: 30000 });
  // (Reopened, the editor keeps its scroll position: wait for any rendered line of it.)
  await page.locator(".editor-instance .monaco-editor .view-line").first().waitFor({ timeout: 30000 });
}


// ---- issue 16 (items 6 and 7): the probe action runs without re-asking; interpreter settings in User scope
// survive reloads; "AttnLens: Select interpreter…" validates. Self-contained: needs only the main profile.
const FLOW_TITLE = "Run probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash";

/** The pre-flight reason the server must give for FLOW_TITLE on $ATTNLENS_PYTHON, computed here independently. */
function expectedPreflightReason() {
  const code = [
    "import sys, tempfile",
    "from attnlens.cache import Cache",
    "from attnlens.runtime import environment as E, preflight as P",
    "rec = E.load_or_collect(sys.argv[1], Cache(tempfile.mkdtemp()))[0]",
    "req = P.requires_from_final('torch_op', dispatch_keys=['CUDA'], providers=['minikern._C', 'mini_metax._C'])",
    "print(P.check(rec, 'kv_cache_write', '_C_cache_ops::reshape_and_cache_flash', req).reason)",
  ].join("\n");
  const r = spawnSync(PYTHON, ["-c", code, PYTHON], { encoding: "utf8", timeout: 120000 });
  if (r.status !== 0) throw new Error(`cannot compute the expected pre-flight reason: ${r.stderr.slice(-400)}`);
  return r.stdout.trim();
}

/** How many times the extension logged that it resolved the server interpreter from the setting. */
function resolvedFromSettingCount() {
  if (!current) return 0;
  let n = 0;
  const walk = (d) => {
    for (const e of fs.existsSync(d) ? fs.readdirSync(d, { withFileTypes: true }) : []) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name === "AttnLens.log") n += fs.readFileSync(p, "utf8").split(`server interpreter: ${PYTHON} (from setting attnlens.interpreter)`).length - 1;
    }
  };
  walk(path.join(current.ud, "logs"));
  return n;
}

async function attnlensStatusText() {
  const items = await page.locator(".statusbar-item").evaluateAll((els) => els.map((e) => [e.id, e.innerText])).catch(() => []);
  return (items.find(([id]) => id.endsWith("attnlens.status"))?.[1] ?? "").trim();
}

/** Open flash_attn.py, retried: after a webview or the Settings editor had the focus, Ctrl+P can go astray. */
async function openFlashAttnRetried() {
  let last;
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      // through the command palette (its helper retries a swallowed F1), then the file picker
      await runCommand("Go to File...");
      const input = page.locator(".quick-input-widget input");
      await input.fill("mini_metax/attention/backends/flash_attn.py", { timeout: 5000 });
      // Enter only once the search has answered: on a loaded machine the first row is still a recent file for a while
      const first = page.locator(".quick-input-list .monaco-list-row").first();
      const end = Date.now() + 15000;
      let text = "";
      while (Date.now() < end) {
        text = ((await first.innerText({ timeout: 2000 }).catch(() => "")) ?? "").replace(/\s+/g, " ");
        if (/^flash_attn\.py/.test(text) && /attention\/backends/.test(text) && !/mla/.test(text)) break;
        await page.waitForTimeout(250);
      }
      if (!/^flash_attn\.py/.test(text)) throw new Error(`the file picker's first row is "${text}"`);
      await page.keyboard.press("Enter");
      await page.locator(".tabs-container .tab.active", { hasText: "flash_attn.py" }).waitFor({ timeout: 15000 });
      await page.locator(".editor-instance .monaco-editor .view-line").first().waitFor({ timeout: 15000 });
      return;
    } catch (e) {
      last = e;
      log(`open flash_attn.py: attempt ${attempt} failed: ${e.message.split("\n")[0]}`);
      await shot(`open-flash-attn-retry-${attempt}.png`);
      await page.keyboard.press("Escape");
    }
  }
  throw last;
}

async function issue16Flows() {
  await scenario("probe code action runs without re-asking; the toast and the Probe runs row show the one-line reason", async () => {
    const reason = expectedPreflightReason();
    await clearToasts();
    await runCommand("View: Close All Editors");
    await openFlashAttnRetried();
    await gotoLine(194, 13);
    const menu = page.locator(".action-widget .monaco-list-row", { hasText: FLOW_TITLE }).first();
    let shown = false;
    for (let i = 0; i < 3 && !shown; i++) {
      if (i === 0) await page.keyboard.press("Control+.");
      else await runCommand("Quick Fix...");
      shown = await menu.waitFor({ timeout: 8000 }).then(() => true, () => false);
    }
    if (!shown) throw new Error(`the Quick Fix menu did not offer "${FLOW_TITLE}"`);
    // the menu's pointer block swallows clicks in headless Chromium: choose with the keyboard, as users do
    for (let i = 0; i < 12 && !/\bfocused\b/.test((await menu.getAttribute("class")) ?? ""); i++) await page.keyboard.press("ArrowDown");
    await page.keyboard.press("Enter");
    // nothing is asked again: no family pick, no target input
    const asked = page.locator(".quick-input-widget:visible", { hasText: /run probe — (family|kv_cache_write target)/ });
    const text = await waitToast(/AttnLens probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash:/, 120000);
    if (await asked.count()) throw new Error("the probe action asked for the family or the target again");
    const want = `AttnLens probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash: not run — ${reason}`;
    if (text !== want) throw new Error(`toast "${text}" is not "${want}"`);
    const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Probe runs" }) }).first();
    const row = pane.locator(".monaco-list-row", { hasText: "kv_cache_write · _C_cache_ops::reshape_and_cache_flash" }).first();
    await row.waitFor({ timeout: 10000 });
    const desc = ((await row.locator(".label-description").textContent().catch(() => "")) ?? "").trim();
    if (!desc.startsWith(`not run · ${reason} · env `)) throw new Error(`Probe runs row says "${desc}"`);
    return { detail: `toast: ${text.slice(0, 170)}…; row: "${desc.slice(0, 60)}…"; buttons: ${(await page.locator(".notification-toast .monaco-button").allInnerTexts()).join(", ")}` };
  });
  await clearToasts();

  await scenario("attnlens.interpreter in User settings: found on the User tab, resolved on each of 5 reloads", async () => {
    const machine = path.join(current.ud, "Machine", "settings.json");
    if (fs.existsSync(machine) && /attnlens\./.test(fs.readFileSync(machine, "utf8"))) throw new Error("Remote settings already name attnlens keys");
    const user = JSON.parse(fs.readFileSync(path.join(current.ud, "User", "settings.json"), "utf8"));
    if (user["attnlens.interpreter"] !== PYTHON) throw new Error("the User settings do not name the interpreter");
    // the Settings editor's User tab finds it
    await runCommand("Preferences: Open User Settings");
    const editor = page.locator(".settings-editor").first();
    await editor.waitFor({ timeout: 15000 });
    await page.waitForTimeout(300);
    await page.keyboard.press("Control+A");
    await page.keyboard.type("attnlens interpreter");
    const tab = ((await editor.locator(".settings-tabs-widget .action-label.checked").first().textContent().catch(() => "")) ?? "").trim();
    const item = editor.locator(".setting-item").filter({ has: page.locator(".setting-item-label", { hasText: /^Interpreter$/ }) }).first();
    await item.waitFor({ timeout: 15000 });
    const shownValue = await item.locator("input").first().inputValue();
    if (shownValue !== PYTHON) throw new Error(`the User tab shows "${shownValue}" for attnlens.interpreter`);
    await runCommand("View: Close All Editors");
    const seen = [];
    for (let i = 1; i <= 5; i++) {
      const before = resolvedFromSettingCount();
      // the way a user reloads (the workbench shuts its extension host down first)
      const navigated = page.waitForNavigation({ timeout: 30000 }).catch(() => undefined);
      await runCommand("Developer: Reload Window");
      await navigated;
      await page.locator(".monaco-workbench").waitFor({ timeout: 60000 });
      await page.locator(".statusbar").waitFor({ timeout: 30000 });
      await openFlashAttnRetried();
      const end = Date.now() + 90000;
      let sb = "";
      while (Date.now() < end) {
        sb = await attnlensStatusText();
        if (/vLLM|GPU/.test(sb) && resolvedFromSettingCount() > before) break;
        if (await page.locator(".notification-toast", { hasText: /no Python interpreter/ }).count()) {
          throw new Error(`reload ${i}: "no Python interpreter" (status bar "${sb}")`);
        }
        await page.waitForTimeout(300);
      }
      if (!/vLLM|GPU/.test(sb) || resolvedFromSettingCount() <= before) {
        throw new Error(`reload ${i}: the server did not start from the User setting (status bar "${sb}", resolved ${resolvedFromSettingCount() - before}x)`);
      }
      seen.push(sb);
    }
    const servers = spawnSync("ps", ["-eo", "pgid=,args="], { encoding: "utf8" }).stdout.split("\n")
      .filter((l) => l.trim().startsWith(`${csProc.pid} `) && / -m attnlens serve/.test(l)).length;
    return { detail: `User tab ("${tab}") shows ${PYTHON}; 5 reloads, each resolved from the setting; status bar: ${seen[4]}; ` +
                     `language servers running now: ${servers}` };
  });

  await scenario("AttnLens: Select interpreter… validates (import attnlens) before it writes the setting", async () => {
    await clearToasts();
    const bad = path.join(WORK, "not-a-python");
    const input = page.locator(".quick-input-widget input");
    await runCommand("AttnLens: Select interpreter…");
    await page.locator(".quick-input-list .monaco-list-row", { hasText: "Enter interpreter path" }).first().click();
    await page.locator(".quick-input-widget", { hasText: "Path of the server Python" }).waitFor({ timeout: 10000 });
    await input.fill(bad);
    await page.keyboard.press("Enter");
    const err = await waitToast(/cannot be used as the server Python/, 30000);
    if (err !== `AttnLens: ${bad} cannot be used as the server Python: ${bad} does not exist or is not executable`) throw new Error(`error: ${err}`);
    const after = JSON.parse(fs.readFileSync(path.join(current.ud, "User", "settings.json"), "utf8"));
    if (after["attnlens.interpreter"] !== PYTHON) throw new Error(`a refused interpreter was written: ${after["attnlens.interpreter"]}`);
    await clearToasts();
    await runCommand("AttnLens: Select interpreter…");
    const row = page.locator(".quick-input-list .monaco-list-row", { hasText: PYTHON }).first();
    await row.waitFor({ timeout: 10000 });
    const rowText = (await row.innerText()).replace(/\s+/g, " ").trim();
    await row.click();
    const ok = await waitToast(/server Python set to/, 60000);
    if (!new RegExp(`^AttnLens: server Python set to ${PYTHON.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")} \\(attnlens \\S+\\) in the user settings$`).test(ok)) throw new Error(`ok: ${ok}`);
    return { detail: `refused: "${err.slice(0, 110)}…"; picked "${rowText}": "${ok}"` };
  });
  await clearToasts();
}

// ---- issue 16 (items 3 and 8): the hover leads with the leaf, no hover without kernels, code lens, inlay hints,
// the Kernels grouping, Copy as Markdown, the status bar. Self-contained: needs only the main profile. The
// expected values are computed here from the example's sources and the target interpreter.
const EX = path.join(REPO, "examples", "mini-metax");
const lineOfText = (rel, text) => fs.readFileSync(path.join(EX, rel), "utf8").split("\n").findIndex((l) => l.includes(text)) + 1;
const CU_RESHAPE = lineOfText("csrc/cache_kernels.cu", "void reshape_and_cache_flash(");
const HOVER_FIRST = "Runs: reshape_and_cache_flash (torch op _C_cache_ops::reshape_and_cache_flash, " +
  `cache_kernels.cu:${CU_RESHAPE}, decided at run time by attn_metadata is not None and self.kv_sharing_target_layer_name is None)`;
const LENS_BACKEND = "5 kernels · 1 not installed · 1 dummy · 1 not taken here";

/** `AttnLens · vLLM X.Y · CPU|<GPU>`, from the target interpreter's vLLM and its environment record. */
function expectedStatusText() {
  const code = [
    "import sys, tempfile, importlib.metadata as md",
    "from attnlens.cache import Cache",
    "from attnlens.runtime import environment as E",
    "rec = E.load_or_collect(sys.argv[1], Cache(tempfile.mkdtemp()))[0]",
    "v = '.'.join(md.version('vllm').split('.')[:2])",
    "g = rec.get('gpu') or {}",
    "dev = 'CPU' if not g.get('count') else (g.get('models') or ['GPU'])[0].replace('NVIDIA ', '')",
    "print(f'AttnLens · vLLM {v} · {dev}')",
  ].join("\n");
  const r = spawnSync(PYTHON, ["-c", code, PYTHON], { encoding: "utf8", timeout: 120000 });
  if (r.status !== 0) throw new Error(`cannot compute the expected status bar text: ${r.stderr.slice(-400)}`);
  return r.stdout.trim();
}

/** Open a workspace file through the command palette's Go to File (retried, like openFlashAttnRetried). */
async function openFileRetried(rel, name) {
  let last;
  for (let attempt = 1; attempt <= 3; attempt++) {
    try {
      await runCommand("Go to File...");
      const input = page.locator(".quick-input-widget input");
      await input.fill(rel, { timeout: 5000 });
      // The *focused* row: until the picker has filtered, the list shows the recently opened files, the
      // file may be one of them, and Enter would open whichever was first.
      await page.locator(".quick-input-list .monaco-list-row.focused", { hasText: name }).first().waitFor({ timeout: 15000 });
      await page.keyboard.press("Enter");
      await page.locator(".tabs-container .tab.active", { hasText: name }).waitFor({ timeout: 15000 });
      await page.locator(".editor-instance .monaco-editor .view-line").first().waitFor({ timeout: 15000 });
      return;
    } catch (e) {
      last = e;
      log(`open ${rel}: attempt ${attempt} failed: ${e.message.split("\n")[0]}`);
    }
  }
  throw last;
}

async function lensFlows() {
  await scenario("hover: the first line names the leaf; no hover on torch.empty or a local variable", async () => {
    await runCommand("View: Close All Editors");
    await openFileRetried("mini_metax/attention/backends/flash_attn.py", "flash_attn.py");
    await gotoLine(RESHAPE_LINE);
    const line = page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key" }).first();
    await line.waitFor({ timeout: 10000 });
    const first = await hoverShows(line, "reshape_and_cache_flash", "Runs:", 60000);
    const hover = page.locator(".monaco-hover:visible", { hasText: "Runs:" }).first();
    const hb = await hover.boundingBox();
    await shot("vscode-hover.png", { clip: { x: Math.max(0, hb.x - 20), y: Math.max(0, hb.y - 40), width: Math.min(1280 - Math.max(0, hb.x - 20), hb.width + 40), height: Math.min(800 - Math.max(0, hb.y - 40), hb.height + 80) } });
    if (first !== HOVER_FIRST) throw new Error(`the hover's first line is "${first}", expected "${HOVER_FIRST}"`);
    const copy = await hover.locator("a", { hasText: "Copy as Markdown" }).count();
    if (copy !== 1) throw new Error(`the hover has ${copy} Copy as Markdown links`);
    await page.mouse.move(1200, 780);
    await page.keyboard.press("Escape");
    // torch.empty and a local variable: nothing kernel-related, no hover; a kernel call in the same file has one
    await openFileRetried("mini_metax/attention/backends/mla/triton_mla.py", "triton_mla.py");
    await gotoLine(lineOfText("mini_metax/attention/backends/mla/triton_mla.py", "decode_attention_fwd("));
    const call = page.locator(".monaco-editor .view-line", { hasText: "decode_attention_fwd(" }).first();
    await call.waitFor({ timeout: 10000 });
    const control = await hoverShows(call, "decode_attention_fwd", "Runs:", 30000);
    await page.mouse.move(1200, 780);
    await page.keyboard.press("Escape");
    const shown = [];
    for (const [text, word] of [["torch.empty(", "empty"], ["attn_logits = torch.empty(", "attn_logits"]]) {
      const l = page.locator(".monaco-editor .view-line", { hasText: text }).first();
      await l.waitFor({ timeout: 10000 });
      const box = await textBox(l, word);
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      await page.waitForTimeout(2500); // editor.hover.delay is 200 ms
      const n = await page.locator(".monaco-hover:visible").count();
      const t = n ? ((await page.locator(".monaco-hover:visible").first().innerText({ timeout: 2000 }).catch(() => "")) || "").slice(0, 80) : "";
      if (n && t.trim()) shown.push(`${word}: ${t}`);
      await page.mouse.move(1200, 780);
      await page.waitForTimeout(300);
    }
    if (shown.length) throw new Error(`hovers where nothing is kernel-related: ${shown.join(" | ")}`);
    return { detail: `first line: ${first.slice(0, 90)}…; control hover on decode_attention_fwd: ${control.slice(0, 60)}; none on torch.empty / attn_logits` };
  });
  await page.keyboard.press("Escape");

  await scenario("code lens over the backend class, inlay hints after kernel calls, the status bar", async () => {
    await runCommand("View: Close All Editors");
    await openFileRetried("mini_metax/attention/backends/flash_attn.py", "flash_attn.py");
    await gotoLine(lineOfText("mini_metax/attention/backends/flash_attn.py", "class MiniFlashAttentionBackend("));
    const lens = page.locator(".codelens-decoration", { hasText: LENS_BACKEND }).first();
    await lens.waitFor({ timeout: 60000 });
    const lensText = (await lens.innerText()).trim();
    await gotoLine(RESHAPE_LINE);
    const line = page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key" }).first();
    const want = `→ cache_kernels.cu:${CU_RESHAPE}`;
    let text = "";
    const end = Date.now() + 30000;
    while (Date.now() < end) {
      text = ((await line.innerText().catch(() => "")) || "").replace(/\u00a0/g, " ");
      if (text.includes(want)) break;
      await page.waitForTimeout(500);
    }
    if (!text.includes(want)) throw new Error(`no inlay hint "${want}" on line ${RESHAPE_LINE}: "${text}"`);
    // (the hint's padding may be a space, a no-break or a zero-width character, or only CSS)
    const tail = text.replace(/[\s\u00a0\u200b-\u200f\u2060\ufeff]+/g, " ").trim();
    if (!tail.endsWith(`layer._v_scale) ${want}`) && !tail.endsWith(`layer._v_scale)${want}`)) {
      throw new Error(`the hint is not after the call's closing parenthesis: ${JSON.stringify(text.slice(-60))}`);
    }
    const wantStatus = expectedStatusText();
    let status = "";
    const end2 = Date.now() + 60000;
    while (Date.now() < end2 && (status = await attnlensStatusText()) !== wantStatus) await page.waitForTimeout(500);
    if (status !== wantStatus) throw new Error(`status bar "${status}", expected "${wantStatus}"`);
    await shot("vscode-lens-hints.png");
    return { detail: `lens "${lensText}"; hint "${want}"; status bar "${status}"` };
  });

  await scenario("Copy as Markdown copies the whole tree at the cursor", async () => {
    await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: new URL(page.url()).origin }).catch(() => {});
    await gotoLine(RESHAPE_LINE, FA_LINES[RESHAPE_LINE - 1].indexOf("reshape_and_cache_flash") + 3);
    await runCommand("AttnLens: Copy as Markdown");
    let clip = "";
    const end = Date.now() + 20000;
    while (Date.now() < end && !clip.startsWith("### AttnLens")) {
      clip = await page.evaluate(() => navigator.clipboard.readText()).catch((e) => `(clipboard: ${e.message})`);
      if (!clip.startsWith("### AttnLens")) await page.waitForTimeout(500);
    }
    const lines = clip.split("\n");
    if (!lines[0].startsWith("### AttnLens: `reshape_and_cache_flash(key, value") || !lines[1].startsWith("Runs: `reshape_and_cache_flash` (torch op `_C_cache_ops::reshape_and_cache_flash`, [cache_kernels.cu:")) {
      throw new Error(`clipboard: ${clip.slice(0, 200)}`);
    }
    return { detail: `${lines.length} lines copied; ${lines[1].slice(0, 80)}…` };
  });

  await scenario("Kernels grouping per backend: distinct targets, call-site counts, readable labels", async () => {
    await runCommand("View: Close All Editors");
    await runCommand("AttnLens: Focus on Attention backends View"); // (the activity bar icon would toggle an open side bar)
    const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Attention backends" }) }).first();
    await pane.waitFor({ timeout: 15000 });
    const rows = pane.locator(".monaco-list-row");
    const backend = rows.filter({ hasText: "FLASH_ATTN" }).first();
    await backend.waitFor({ timeout: 60000 });
    if ((await backend.getAttribute("aria-expanded")) !== "true") await backend.locator(".monaco-tl-twistie").click();
    const kernels = rows.filter({ hasText: /^\s*Kernels/ }).first();
    await kernels.waitFor({ timeout: 10000 });
    const counts = ((await kernels.locator(".label-description").textContent()) ?? "").trim();
    if (counts !== LENS_BACKEND) throw new Error(`Kernels: "${counts}", expected "${LENS_BACKEND}"`);
    await kernels.locator(".monaco-tl-twistie").click();
    const target = rows.filter({ hasText: /^\s*reshape_and_cache_flash/ }).first();
    await target.waitFor({ timeout: 10000 });
    const desc = ((await target.locator(".label-description").textContent()) ?? "").trim();
    const wantDesc = `torch op · cache_kernels.cu:${CU_RESHAPE} · 1 call site · at run time`;
    if (desc !== wantDesc) throw new Error(`target row: "${desc}", expected "${wantDesc}"`);
    const varlen = rows.filter({ hasText: /^\s*flash_attn_varlen_func/ }).first();
    const vdesc = ((await varlen.locator(".label-description").textContent()) ?? "").trim();
    if (!vdesc.startsWith("not installed here · fa_utils.py:") || !vdesc.includes("· 5 call sites")) throw new Error(`varlen row: "${vdesc}"`);
    await shot("vscode-tree.png");
    return { detail: `Kernels (${counts}); reshape_and_cache_flash: ${desc}; flash_attn_varlen_func: ${vdesc}` };
  });

  await scenario("Problems panel (screenshot for docs/vscode.md)", async () => {
    await openFileRetried("mini_metax/attention/backends/flash_attn.py", "flash_attn.py");
    await runCommand("View: Toggle Problems");
    const panel = page.locator(".markers-panel").first();
    await panel.waitFor({ timeout: 15000 });
    const row = panel.locator(".monaco-list-row", { hasText: "attnlens" }).first();
    await row.waitFor({ timeout: 60000 });
    await shot("vscode-problems.png");
    const text = ((await row.innerText()) || "").replace(/\s+/g, " ").trim();
    await runCommand("View: Toggle Problems");
    return { detail: `first attnlens row: ${text.slice(0, 120)}` };
  });
  await page.keyboard.press("Escape");
}

let exitCode = 1;
try {
  const main = prepare("main", { trust: false });
  await startWorkbench(main);
  const { ud } = main;

  // Sample the AttnLens status bar item while the server starts (indexing progress, then the
  // environment summary); reported with scenario 2.
  const statusSeen = [];
  const sampler = setInterval(async () => {
    // The extension's own item (id attnlens.status), not VS Code's progress item.
    if (!page) return;
    const items = await page.locator(".statusbar-item").evaluateAll((els) => els.map((e) => [e.id, e.innerText])).catch(() => []);
    for (const [id, text] of items) {
      const t = (text || "").trim();
      if (id.endsWith("attnlens.status") && t && !statusSeen.includes(t)) statusSeen.push(t);
    }
  }, 100);

  // Open flash_attn.py; the extension activates on Python and starts the server.
  await openFlashAttn();
  log("flash_attn.py open");

  // ---- (2) hover first: it also tells us the server is up and indexed
  let hoverSeenAt = 0;
  await scenario("hover shows the chain to _C_cache_ops::reshape_and_cache_flash", async () => {
    await gotoLine(194);
    const line = page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key" }).first();
    await line.waitFor({ timeout: 10000 });
    const hover = page.locator(".monaco-hover:visible", { hasText: "_C_cache_ops::reshape_and_cache_flash" }).first();
    // The server may still be starting/indexing: re-hover until the chain shows (or 90 s).
    // The text is read inside the loop: the widget can close (re-layout as the editor settles)
    // between showing and being read, and then the next pass hovers again.
    const end = Date.now() + 90000;
    let raw = null;
    while (Date.now() < end && raw === null) {
      const box = await textBox(line, "reshape_and_cache_flash");
      await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
      raw = await hover.waitFor({ timeout: 4000 }).then(() => hover.innerText({ timeout: 2000 }), () => null).catch(() => null);
      if (raw === null) {
        await page.mouse.move(1200, 780);
        await page.waitForTimeout(300);
      }
    }
    if (raw === null) throw new Error("no hover containing _C_cache_ops::reshape_and_cache_flash within 90 s");
    hoverSeenAt = Date.now();
    const text = raw.replace(/\s+\n/g, "\n");
    fs.writeFileSync(path.join(ART, "hover.txt"), text);
    const firstLines = text.split("\n").filter(Boolean).slice(0, 3).join(" | ");
    clearInterval(sampler);
    // A small screenshot around the hover for the README. The hover can close between reading
    // its text and measuring it (the widget re-lays out as the editor settles): hover again, a
    // few times; the screenshot is for docs, so a hover that will not stay only skips it.
    let hb = null;
    for (let i = 0; i < 5 && !hb; i++) {
      hb = await hover.boundingBox().catch(() => null);
      if (!hb) {
        const box = await textBox(line, "reshape_and_cache_flash");
        await page.mouse.move(box.x + box.width / 2, box.y + box.height / 2);
        await hover.waitFor({ timeout: 4000 }).catch(() => {});
      }
    }
    if (hb) {
      const wb = await textBox(line, "reshape_and_cache_flash");
      const x = Math.max(0, Math.min(hb.x, wb.x) - 60);
      const y = Math.max(0, Math.min(hb.y, wb.y) - 40);
      const w = Math.min(1280 - x, Math.max(hb.x + hb.width, wb.x + wb.width) - x + 60);
      const h = Math.min(800 - y, Math.max(hb.y + hb.height, wb.y + wb.height) - y + 40);
      await shot("hover.png", { clip: { x, y, width: w, height: h } });
      if (process.env.ATTNLENS_E2E_README_SHOT) {
        fs.copyFileSync(path.join(ART, "hover.png"), process.env.ATTNLENS_E2E_README_SHOT);
      }
    } else {
      log("hover closed before it could be measured five times: no hover.png this run");
    }
    return { detail: `hover: ${firstLines.slice(0, 160)}; status bar went: ${statusSeen.map((t) => JSON.stringify(t)).join(" → ")}` };
  });
  clearInterval(sampler); // also when the hover scenario failed
  await page.mouse.move(1200, 780);
  await page.keyboard.press("Escape");

  // ---- (1) diagnostics
  await scenario("diagnostic squiggle in flash_attn.py", async () => {
    // Diagnostics exist only when the server has the rules engine (the server's own test).
    const rules = spawnSync(PYTHON, ["-c", "import attnlens.rules.engine"], { encoding: "utf8" });
    const hasRules = rules.status === 0;
    const problems = page.locator("#status\\.problems, .statusbar-item[id='status.problems']").first();
    const problemsText = async () => ((await problems.innerText({ timeout: 2000 }).catch(() => "")) || "").replace(/\s+/g, " ").trim();
    // Go to the first problem of this file from line 1: the marker widget shows it with its squiggle.
    const timeout = hoverSeenAt ? 30000 : 60000;
    const end = Date.now() + timeout;
    const widget = page.locator(".marker-widget").first();
    let found = false;
    while (Date.now() < end) {
      if (/[1-9]/.test(await problemsText())) {
        await gotoLine(1);
        await runCommand("Go to Next Problem (Error, Warning, Info)");
        if (await widget.waitFor({ timeout: 3000 }).then(() => true, () => false)) {
          found = true;
          break;
        }
      }
      await page.waitForTimeout(1000);
    }
    if (!found) {
      if (!hasRules && process.env.ATTNLENS_E2E_REQUIRE_DIAGNOSTICS !== "1") {
        return { skip: `no diagnostic within ${timeout / 1000} s and the server has no rules engine (import attnlens.rules.engine fails)` };
      }
      throw new Error(`no diagnostic in flash_attn.py within ${timeout / 1000} s (status bar problems: "${await problemsText()}")`);
    }
    const squiggle = page.locator(".monaco-editor .squiggly-error, .monaco-editor .squiggly-warning, .monaco-editor .squiggly-info");
    await squiggle.first().waitFor({ timeout: 5000 });
    const msg = ((await widget.locator(".descriptioncontainer").innerText().catch(() => "")) || "").replace(/\s+/g, " ").trim();
    const pos = await cursorText();
    const n = await squiggle.count();
    await shot("diagnostic.png");
    await page.keyboard.press("Escape");
    if (!/attnlens/i.test(msg)) throw new Error(`the first problem is not from attnlens: ${msg}`);
    return { detail: `${n} squiggle(s) in view; first problem at ${pos}: ${msg.slice(0, 200)} (status bar problems: ${await problemsText()})` };
  });
  await page.keyboard.press("Escape");

  await syntaxErrorFlows();

  // ---- (3) Attention backends tree → click a kernel call site
  await scenario("backends tree: click a kernel call site opens the file at its line", async () => {
    // Close the editors first so that the click has to open the file.
    await runCommand("View: Close All Editors");
    await page.locator(".tabs-container .tab").first().waitFor({ state: "detached", timeout: 10000 }).catch(() => {});
    const icon = page.locator(".activitybar .action-item a[aria-label^='AttnLens'], .activitybar .action-item[aria-label^='AttnLens'] a").first();
    if (await icon.count()) {
      await icon.click();
    } else {
      await runCommand("AttnLens: Focus on Attention backends View");
    }
    const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Attention backends" }) }).first();
    await pane.waitFor({ timeout: 15000 });
    const rows = pane.locator(".monaco-list-row");
    const backend = rows.filter({ hasText: "FLASH_ATTN" }).first();
    await backend.waitFor({ timeout: 60000 });
    const rowCount0 = await rows.count();
    await backend.locator(".monaco-tl-twistie").click();
    const impl = rows.filter({ hasText: /^\s*impl MiniFlashAttentionImpl/ }).first();
    await impl.waitFor({ timeout: 10000 });
    await impl.locator(".monaco-tl-twistie").click();
    const label = "reshape_and_cache_flash → _C_cache_ops::reshape_and_cache_flash (torch op)";
    const site = rows.filter({ hasText: label }).first();
    await site.waitFor({ timeout: 10000 });
    const desc = ((await site.locator(".label-description").textContent().catch(() => "")) ?? "").trim();
    await site.locator(".label-name").click();
    await page.locator(".tabs-container .tab.active", { hasText: "flash_attn.py" }).waitFor({ timeout: 15000 });
    // The editor must show the call line with the cursor on it.
    await page.locator(".monaco-editor .view-line", { hasText: "reshape_and_cache_flash(key" }).first().waitFor({ timeout: 10000 });
    let pos = "";
    const end = Date.now() + 5000;
    while (Date.now() < end) {
      pos = await cursorText();
      if (pos.startsWith("Ln 194,")) break;
      await page.waitForTimeout(200);
    }
    if (!pos.startsWith("Ln 194,")) throw new Error(`editor opened at "${pos}", expected Ln 194`);
    return { detail: `${rowCount0} top rows; clicked "${label}" (${desc}) → ${await activeTabTitle()} ${pos}` };
  });

  // ---- (4) command palette: Show environment, Trace at cursor
  await scenario("command palette: AttnLens: Show environment", async () => {
    await clearToasts();
    await runCommand("AttnLens: Show environment");
    const text = await waitToast(/AttnLens environment:|environment unavailable/, 90000);
    const sb = ((await page.locator(".statusbar-item", { hasText: /AttnLens|·/ }).first().textContent().catch(() => "")) ?? "").trim();
    if (/environment unavailable/.test(text)) {
      return { detail: `notification (server error shown, no crash): ${text.slice(0, 200)}; status bar: ${sb}` };
    }
    return { detail: `notification: ${text.slice(0, 160)}; status bar: ${sb}` };
  });
  await clearToasts();

  await scenario("command palette: AttnLens: Show inventory (markdown, or the server's error as a notification)", async () => {
    await clearToasts();
    await runCommand("AttnLens: Show inventory");
    const tab = page.locator(".tabs-container .tab", { hasText: "inventory.md" }).first();
    if (await tab.waitFor({ timeout: 3000 }).then(() => true, () => false)) return { detail: `opened "${(await tab.textContent()).trim()}"` };
    let text;
    try {
      text = await waitToast(/AttnLens: inventory/, 30000);
    } catch (e) {
      if (await tab.isVisible().catch(() => false)) return { detail: `opened "${(await tab.textContent()).trim()}"` };
      throw e;
    }
    // The extension must still answer afterwards.
    await clearToasts();
    await runCommand("AttnLens: Refresh backends");
    await page.locator(".pane .monaco-list-row", { hasText: "FLASH_ATTN" }).first().waitFor({ timeout: 15000 });
    return { detail: `server error shown as a notification: ${text.slice(0, 160)}; the extension still works (backends refreshed)` };
  });
  await clearToasts();

  await scenario("command palette: AttnLens: Trace at cursor", async () => {
    // Only flash_attn.py open, the cursor on the reshape_and_cache_flash call.
    await runCommand("View: Close All Editors");
    await openFlashAttn();
    await gotoLine(194, 13);
    await runCommand("AttnLens: Trace at cursor");
    const tab = page.locator(".tabs-container .tab", { hasText: "Trace: reshape_and_cache_flash" }).first();
    await tab.waitFor({ timeout: 30000 });
    // The trace panel is a webview (nested iframes); other webviews (Markdown previews) may be open.
    const want = /AttnLens trace[\s\S]*_C_cache_ops::reshape_and_cache_flash/;
    let frame = await webviewFrame(want, 10000).catch(() => undefined);
    if (!frame) {
      // code-server sometimes leaves a webview that opened in the background blank until it is shown.
      log("trace panel still blank after 10 s: clicking its tab");

      await tab.click();
      frame = await webviewFrame(want, 15000).catch(() => undefined);
    }
    if (!frame) {
      // Seen on freshly installed code-server in headless Chromium: the webview frame never
      // renders although the command ran. The extension logs every trace it shows; accept the
      // scenario only if that log holds the full chain for this position, and say so.
      const chain = traceFromExtensionLog(/\[trace flash_attn\.py:194:13\]/);
      if (!chain || !/_C_cache_ops::reshape_and_cache_flash/.test(chain) || !/cache_kernels\.cu:31/.test(chain)) {
        throw new Error("trace panel stayed blank and the extension log has no chain for flash_attn.py:194:13");
      }
      return { detail: `panel "${(await tab.textContent()).trim()}" opened but its webview stayed blank in this browser; ` +
                       `the chain it was given (extension log): ${chain.split("\n").filter(Boolean).length} lines ending in ` +
                       `${(chain.match(/==> .*/) ?? [""])[0].slice(0, 80)}` };
    }
    const lines = (await frame.locator("body").innerText()).split("\n").filter(Boolean);
    const hops = lines.find((l) => /^Hops \(\d+\)/.test(l)) ?? "";
    // Its locations are links: the CUDA function bound by ops.impl opens at its line.
    await frame.locator("a.loc", { hasText: "cache_kernels.cu:31" }).first().click();
    await page.locator(".tabs-container .tab.active", { hasText: "cache_kernels.cu" }).waitFor({ timeout: 15000 });
    let pos = "";
    for (let i = 0; i < 25 && !pos.startsWith("Ln 31,"); i++) {
      // the status bar's "Ln, Col" item is sometimes not rendered yet right after a webview link opened the file
      // (seen once in CI): then the editor's own gutter says which line holds the cursor
      pos = await cursorText().catch(async () => {
        const n = await page.locator(".editor-group-container.active .line-numbers.active-line-number").first()
          .textContent({ timeout: 2000 }).catch(() => "");
        return n ? `Ln ${n.trim()}, (the gutter's active line)` : "";
      });
      if (!pos.startsWith("Ln 31,")) await page.waitForTimeout(200);
    }
    if (!pos.startsWith("Ln 31,")) throw new Error(`cache_kernels.cu opened at "${pos}", expected Ln 31`);
    const title = (await tab.textContent({ timeout: 5000 }).catch(() => "") || "Trace: reshape_and_cache_flash").trim();
    return { detail: `panel "${title}": ${lines[0]} | ${hops}; link → cache_kernels.cu ${pos}` };
  });

  // ---- (5) Run probe: quick pick + input box → evidence record in the "Probe runs" view
  await scenario("command palette: AttnLens: Run probe… fills the Probe runs view", async () => {
    await clearToasts();
    const target = "vllm._custom_ops:reshape_and_cache_flash";
    await runCommand("AttnLens: Run probe…");
    const input = page.locator(".quick-input-widget input");
    await page.locator(".quick-input-list .monaco-list-row", { hasText: "kv_cache_write" }).first().waitFor({ timeout: 10000 });
    await input.fill("kv_cache_write");
    await page.keyboard.press("Enter");
    await page.locator(".quick-input-widget", { hasText: "kv_cache_write target" }).waitFor({ timeout: 10000 });
    await input.fill(target);
    await page.keyboard.press("Enter");
    const text = await waitToast(/AttnLens probe kv_cache_write|AttnLens: probe kv_cache_write/, 180000);
    if (/failed/.test(text) && !/AttnLens probe/.test(text)) throw new Error(`probe failed: ${text}`);
    const pane = page.locator(".pane", { has: page.locator(".pane-header", { hasText: "Probe runs" }) }).first();
    const row = pane.locator(".monaco-list-row", { hasText: `kv_cache_write · ${target}` }).first();
    await row.waitFor({ timeout: 10000 });
    const desc = ((await row.locator(".label-description").textContent().catch(() => "")) ?? "").trim();
    await row.locator(".label-name").click();
    await page.locator(".tabs-container .tab.active", { hasText: /probe kv_cache_write/ }).waitFor({ timeout: 10000 });
    // The details (a Markdown preview) show the verdict.
    await webviewFrame(/kv_cache_write[\s\S]*verdict:\s*\S+/, 10000);
    return { detail: `notification: ${text.slice(0, 120)}; Probe runs row: "kv_cache_write · ${target}" (${desc}); details opened` };
  });

  await issue16Flows();
  await lensFlows();

  // ---- (6) settings change → debounced restart; a bad interpreter → actionable error; recovery
  await scenario("bad attnlens.interpreter: error with Open Settings, then recovery", async () => {
    await clearToasts();
    // Change the setting the way a user does: the Settings editor.
    const setInterpreter = async (value) => {
      const editor = page.locator(".settings-editor").first();
      // attnlens.interpreter is machine-scoped: in code-server (a remote window) it is in the Remote tab.
      await runCommand("Preferences: Open Remote Settings"); // focuses its search box
      await editor.waitFor({ timeout: 15000 });
      await page.waitForTimeout(300);
      await page.keyboard.press("Control+A");
      await page.keyboard.type("attnlens.interpreter");
      const item = editor.locator(".setting-item").filter({ has: page.locator(".setting-item-label", { hasText: /^Interpreter$/ }) }).first();
      await item.waitFor({ timeout: 15000 });
      const input = item.locator("input").first();
      await input.fill(value);
      await input.press("Tab");
    };
    const bad = path.join(WORK, "no-such-python");
    await setInterpreter(bad);
    const err = await waitToast(/cannot start the language server/, 30000);
    if (!err.includes(bad)) throw new Error(`the error does not name the interpreter: ${err}`);
    const sbBroken = ((await page.locator(".statusbar-item", { hasText: "AttnLens" }).first().textContent().catch(() => "")) ?? "").trim();
    await runCommand("View: Close All Editors");
    const toast = page.locator(".notification-toast", { hasText: /cannot start the language server/ }).first();
    await toast.locator(".monaco-button", { hasText: "Open Settings" }).first().click();
    await page.locator(".settings-editor .setting-item-label", { hasText: /^Interpreter$/ }).first().waitFor({ timeout: 15000 });
    await shot("bad-interpreter.png");
    // Put the good interpreter back: the server restarts and answers again.
    await setInterpreter(PYTHON);
    const end = Date.now() + 60000;
    let sb = "";
    while (Date.now() < end) {
      sb = ((await page.locator(".statusbar-item", { hasText: /vLLM|AttnLens|GPU/ }).first().textContent().catch(() => "")) ?? "").trim();
      if (/vLLM|GPU/.test(sb)) break;
      await page.waitForTimeout(500);
    }
    if (!/vLLM|GPU/.test(sb)) throw new Error(`the server did not come back (status bar: "${sb}")`);
    await runCommand("View: Close All Editors");
    return { detail: `error: "${err.slice(0, 150)}…"; status bar broken: "${sbBroken}"; after the fix: "${sb}"` };
  });

  await stopWorkbench();

  // ---- (7) untrusted workspace: workspace values of the restricted settings are ignored, no probes
  if (process.env.ATTNLENS_E2E_SKIP_UNTRUSTED !== "1") {
    const untrusted = prepare("untrusted", { trust: true });
    // A hostile checkout: its .vscode/settings.json names an interpreter to run.
    const evil = path.join(untrusted.dir, "evil-python");
    fs.mkdirSync(path.join(untrusted.ws, ".vscode"), { recursive: true });
    fs.writeFileSync(path.join(untrusted.ws, ".vscode", "settings.json"), JSON.stringify({ "attnlens.interpreter": evil, "attnlens.targetPython": evil }));
    await startWorkbench(untrusted);
    await scenario("untrusted workspace: workspace interpreter ignored, probes refused", async () => {
      // Decline the trust prompt if this VS Code shows one anyway.
      const no = page.locator(".monaco-dialog-box .monaco-button", { hasText: /don't trust|No/ }).first();
      if (await no.isVisible().catch(() => false)) await no.click();
      await openFlashAttn();
      // The server starts with the user's interpreter (the workspace's evil-python is not used).
      const end = Date.now() + 60000;
      let sb = "";
      while (Date.now() < end) {
        if (!page) return;
    const items = await page.locator(".statusbar-item").evaluateAll((els) => els.map((e) => [e.id, e.innerText])).catch(() => []);
        sb = (items.find(([id]) => id.endsWith("attnlens.status"))?.[1] ?? "").trim();
        if (/vLLM|GPU/.test(sb)) break;
        await page.waitForTimeout(300);
      }
      if (!/vLLM|GPU/.test(sb)) throw new Error(`the server did not start with the user interpreter (status bar: "${sb}")`);
      await clearToasts();
      await runCommand("AttnLens: Run probe…");
      const text = await waitToast(/untrusted workspace/, 15000);
      const picks = await page.locator(".quick-input-widget .monaco-list-row", { hasText: "kv_cache_write" }).count();
      if (picks) throw new Error("the probe family quick pick opened in an untrusted workspace");
      return { detail: `status bar: "${sb}"; notification: ${text.slice(0, 140)}` };
    });
    await stopWorkbench();
  }

  exitCode = results.some((r) => r.status === "fail") ? 1 : 0;
} catch (e) {
  log(`ERROR ${e.stack || e.message}`);
  results.push({ name: "setup", status: "fail", detail: e.message, seconds: secs() });
  await shot("error.png");
  exitCode = 1;
} finally {
  await stopWorkbench().catch(() => {});
  if (!process.env.ATTNLENS_E2E_KEEP && !ART.startsWith(WORK + path.sep)) fs.rmSync(WORK, { recursive: true, force: true });
}

const passed = results.filter((r) => r.status === "pass").length;
const failed = results.filter((r) => r.status === "fail").length;
const skipped = results.filter((r) => r.status === "skip").length;
console.log("");
for (const r of results) console.log(`${r.status.toUpperCase().padEnd(4)} ${r.name} (${r.seconds} s)${r.detail ? ` — ${r.detail}` : ""}`);
console.log(`total ${secs()} s; screenshots and logs: ${ART}`);
if (skipped) console.log(`${skipped} skipped`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(exitCode || (failed ? 1 : 0));
