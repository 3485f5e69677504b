import { randomBytes } from "crypto";
import * as vscode from "vscode";
import { Chain, Final, Hop, Loc } from "./types";
import { displayPath, hasLoc, openLocation } from "./util";

function esc(s: unknown): string {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] as string);
}

function link(loc: Loc | null | undefined, label?: string): string {
  if (!hasLoc(loc) || !loc.line) {
    return hasLoc(loc) ? esc(displayPath(loc.path)) : "—";
  }
  const text = label ?? `${displayPath(loc.path)}:${loc.line}`;
  return `<a href="#" class="loc" data-path="${esc(loc.path)}" data-line="${esc(loc.line)}" data-col="${esc(loc.col ?? 0)}" title="${esc(loc.path)}:${esc(loc.line)}">${esc(text)}</a>`;
}

function reach(r: boolean | null | undefined): string {
  return r === true ? `<span class="live">live</span>` : r === false ? `<span class="dead">dead</span>` : `<span class="unknown">unknown</span>`;
}

function finalHtml(f: Final | null | undefined): string {
  if (!f) {
    return "<p><em>no final target</em></p>";
  }
  const rows: string[] = [];
  if (f.detail) rows.push(`<li>${esc(f.detail)}</li>`);
  if (f.reason) rows.push(`<li>reason: ${esc(f.reason)}</li>`);
  if (f.package) rows.push(`<li>package: <code>${esc(f.package)}</code></li>`);
  if (f.schema) rows.push(`<li>schema: <code>${esc(f.schema)}</code></li>`);
  for (const r of f.registrations ?? []) {
    const fn = r.function
      ? ` → <code>${esc(r.function)}</code> ${r.function_path ? link({ path: r.function_path, line: r.function_line }) : ""}`
      : "";
    rows.push(`<li>registration: ${esc(r.kind ?? "")}${r.dispatch_key ? ` <b>${esc(r.dispatch_key)}</b>` : ""} ${link(r)}${fn}</li>`);
  }
  for (const p of f.providers ?? []) rows.push(`<li>provided by: ${esc(p)}</li>`);
  return `<p class="final"><span class="kind">${esc(f.kind ?? "?")}</span> <code>${esc(f.symbol ?? "")}</code> ${hasLoc(f) ? link(f) : ""}</p><ul>${rows.join("")}</ul>`;
}

function hopRow(h: Hop, i: number): string {
  const cond = h.condition ? `<code>${esc(h.condition)}</code> → ${reach(h.reachable)}` : "";
  return `<tr><td>${i}</td><td class="kind">${esc(h.kind ?? "")}</td><td><code>${esc(h.symbol ?? "")}</code>${h.detail ? `<div class="detail">${esc(h.detail)}</div>` : ""}</td><td>${link(h)}</td><td>${cond}</td></tr>`;
}

/** The "AttnLens trace" webview: the chain with clickable locations. */
export class TracePanel {
  private static current: TracePanel | undefined;
  private readonly panel: vscode.WebviewPanel;
  private markdown = "";
  private editorColumn: vscode.ViewColumn = vscode.ViewColumn.One;

  private constructor(private readonly onMarkdown: (md: string) => void) {
    this.panel = vscode.window.createWebviewPanel("attnlens.trace", "AttnLens trace", { viewColumn: vscode.ViewColumn.Beside, preserveFocus: true }, {
      enableScripts: true,
      enableFindWidget: true,
      localResourceRoots: [],
    });
    this.panel.onDidDispose(() => {
      if (TracePanel.current === this) {
        TracePanel.current = undefined;
      }
    });
    this.panel.webview.onDidReceiveMessage((m: { type?: string; path?: string; line?: string; col?: string }) => {
      if (m?.type === "open" && m.path) {
        void openLocation({ path: m.path, line: Number(m.line) || 1, col: Number(m.col) || 0 }, { viewColumn: this.editorColumn, preview: true });
      } else if (m?.type === "markdown") {
        this.onMarkdown(this.markdown);
      }
    });
  }

  static show(chain: Chain, where: string, markdown: string, onMarkdown: (md: string) => void): void {
    const column = vscode.window.activeTextEditor?.viewColumn ?? vscode.ViewColumn.One;
    const reuse = TracePanel.current !== undefined;
    if (!TracePanel.current) {
      TracePanel.current = new TracePanel(onMarkdown);
    }
    const p = TracePanel.current;
    p.editorColumn = column;
    p.markdown = markdown;
    const first = chain.hops?.[0];
    p.panel.title = `Trace: ${first?.symbol ?? where}`;
    p.panel.webview.html = p.html(chain, where);
    // A new panel is already shown; revealing it again while its iframe loads can leave it blank.
    if (reuse && !p.panel.visible) {
      p.panel.reveal(p.panel.viewColumn, true);
    }
  }

  private html(chain: Chain, where: string): string {
    const nonce = randomBytes(16).toString("base64");
    const csp = `default-src 'none'; style-src 'unsafe-inline'; script-src 'nonce-${nonce}';`;
    const hops = chain.hops ?? [];
    const first = hops[0];
    return `<!DOCTYPE html><html lang="en"><head><meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<style>
body { font-family: var(--vscode-font-family); font-size: var(--vscode-font-size); color: var(--vscode-foreground); padding: 0 16px 16px; }
code { font-family: var(--vscode-editor-font-family); background: var(--vscode-textCodeBlock-background); padding: 0 3px; border-radius: 3px; }
a.loc { color: var(--vscode-textLink-foreground); text-decoration: none; cursor: pointer; white-space: nowrap; }
a.loc:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; vertical-align: top; padding: 4px 8px; border-bottom: 1px solid var(--vscode-widget-border, rgba(128,128,128,.3)); }
.kind { font-weight: 600; white-space: nowrap; }
.detail { opacity: .75; font-size: .92em; margin-top: 2px; }
.live { color: var(--vscode-testing-iconPassed, green); } .dead { color: var(--vscode-errorForeground, red); font-weight: 600; } .unknown { opacity: .7; }
.final { font-size: 1.1em; } button { margin-left: 12px; }
</style></head><body>
<h2>AttnLens trace: <code>${esc(first?.symbol ?? where)}</code><button id="md" title="Open this trace as Markdown">Open as Markdown</button></h2>
<p>From ${first ? link(first, where) : esc(where)} — reachable on this platform: ${reach(chain.reachable)}</p>
<h3>Final target</h3>
${finalHtml(chain.final)}
<h3>Hops (${hops.length})</h3>
<table><thead><tr><th>#</th><th>kind</th><th>symbol</th><th>location</th><th>condition</th></tr></thead>
<tbody>${hops.map(hopRow).join("")}</tbody></table>
<script nonce="${nonce}">
const vscode = acquireVsCodeApi();
document.addEventListener("click", (e) => {
  const a = e.target.closest("a.loc");
  if (a) { e.preventDefault(); vscode.postMessage({ type: "open", path: a.dataset.path, line: a.dataset.line, col: a.dataset.col }); }
});
document.getElementById("md").addEventListener("click", () => vscode.postMessage({ type: "markdown" }));
</script></body></html>`;
  }
}
