import * as vscode from "vscode";
import { Chain, EnvironmentRecord, Final, ProbeRecord, ServerStatus } from "./types";
import { displayPath, finalLabel, hasLoc, mdCode, mdEscape, mdLink } from "./util";

export const SCHEME = "attnlens";

/** Read-only virtual documents (attnlens:/...): traces, probe records, inventory, environment. */
export class DocumentStore implements vscode.TextDocumentContentProvider, vscode.Disposable {
  private readonly docs = new Map<string, string>();
  private readonly emitter = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.emitter.event;
  private readonly registration: vscode.Disposable;

  constructor() {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(SCHEME, this);
  }

  provideTextDocumentContent(uri: vscode.Uri): string {
    return this.docs.get(uri.toString()) ?? "";
  }

  set(name: string, content: string): vscode.Uri {
    const uri = vscode.Uri.from({ scheme: SCHEME, path: `/${name}` });
    this.docs.set(uri.toString(), content);
    this.emitter.fire(uri);
    return uri;
  }

  /** Open a document; Markdown opens as a preview unless `preview: false`. */
  async show(name: string, content: string, opts: { preview?: boolean } = {}): Promise<vscode.Uri> {
    const uri = this.set(name, content);
    const markdown = name.endsWith(".md");
    const wantPreview = markdown && (opts.preview ?? true);
    if (wantPreview) {
      try {
        await vscode.commands.executeCommand("markdown.showPreview", uri);
        return uri;
      } catch {
        // no Markdown extension: fall back to the source
      }
    }
    const doc = await vscode.workspace.openTextDocument(uri);
    if (markdown && doc.languageId !== "markdown") {
      await vscode.languages.setTextDocumentLanguage(doc, "markdown");
    } else if (name.endsWith(".json") && doc.languageId !== "json") {
      await vscode.languages.setTextDocumentLanguage(doc, "json");
    }
    await vscode.window.showTextDocument(doc, { preview: true });
    return uri;
  }

  dispose(): void {
    this.registration.dispose();
    this.emitter.dispose();
  }
}

function reach(r: boolean | null | undefined): string {
  return r === true ? "live" : r === false ? "**dead**" : "unknown";
}

export function finalMarkdown(f: Final | null | undefined): string {
  if (!f) {
    return "_no final target_";
  }
  const out: string[] = [];
  out.push(`**${mdEscape(f.kind ?? "?")}** ${mdCode(f.symbol ?? "")}${hasLoc(f) ? ` — ${mdLink(f)}` : ""}`);
  if (f.detail) {
    out.push(`- ${mdEscape(f.detail)}`);
  }
  if (f.reason) {
    out.push(`- reason: ${mdEscape(f.reason)}`);
  }
  if (f.package) {
    out.push(`- package: ${mdCode(f.package)}`);
  }
  if (f.schema) {
    out.push(`- schema: ${mdCode(f.schema)}`);
  }
  for (const r of f.registrations ?? []) {
    const fn = r.function ? ` → ${mdCode(r.function)} ${r.function_path ? mdLink({ path: r.function_path, line: r.function_line }) : ""}` : "";
    out.push(`- registration: ${mdEscape(r.kind ?? "")}${r.dispatch_key ? ` ${mdEscape(r.dispatch_key)}` : ""} ${mdLink(r)}${fn}`);
  }
  for (const p of f.providers ?? []) {
    out.push(`- provided by: ${mdEscape(p)}`);
  }
  return out.join("\n");
}

export function chainMarkdown(chain: Chain, where: string): string {
  const out: string[] = [];
  const hops = chain.hops ?? [];
  const first = hops[0];
  out.push(`# AttnLens trace: ${mdCode(first?.symbol ?? where)}`);
  out.push("");
  out.push(`From ${where} — reachable on this platform: ${reach(chain.reachable)}`);
  out.push("");
  out.push(`## Final target`);
  out.push("");
  out.push(finalMarkdown(chain.final));
  out.push("");
  out.push(`## Hops (${hops.length})`);
  out.push("");
  out.push("| # | kind | symbol | location | condition |");
  out.push("|---|---|---|---|---|");
  hops.forEach((h, i) => {
    const cond = h.condition ? `${mdCode(h.condition)} → ${reach(h.reachable)}` : "";
    out.push(`| ${i} | ${mdEscape(h.kind ?? "")} | ${mdCode(h.symbol ?? "")} | ${hasLoc(h) && h.line ? mdLink(h) : "—"} | ${cond} |`);
  });
  const details = hops.filter((h) => h.detail);
  if (details.length) {
    out.push("");
    out.push("## Details");
    out.push("");
    hops.forEach((h, i) => {
      if (h.detail) {
        out.push(`${i}. ${mdEscape(h.detail)}`);
      }
    });
  }
  out.push("");
  return out.join("\n");
}

export function chainPlain(chain: Chain): string {
  const hops = chain.hops ?? [];
  const lines = hops.map((h, i) => {
    const where = hasLoc(h) && h.line ? `${displayPath(h.path)}:${h.line}` : "-";
    return `${String(i).padStart(2)}. ${(h.kind ?? "").padEnd(18)} ${h.symbol ?? ""}  @ ${where}${h.condition ? `  [if ${h.condition}]` : ""}`;
  });
  lines.push(`==> ${finalLabel(chain.final)}${hasLoc(chain.final) ? `  @ ${displayPath(chain.final.path)}:${chain.final.line ?? ""}` : ""}`);
  return lines.join("\n");
}

export function probeMarkdown(rec: ProbeRecord): string {
  const out: string[] = [];
  out.push(`# Probe ${mdCode(rec.family ?? "?")} on ${mdCode(rec.target ?? "?")}`);
  out.push("");
  out.push(`- verdict: **${mdEscape(rec.verdict ?? "?")}**`);
  if (rec.reason) {
    out.push(`- reason: ${mdEscape(rec.reason)}`);
  }
  if (rec.next) {
    out.push(`- next step: ${mdEscape(rec.next)}`);
  }
  if (rec.id) {
    out.push(`- id: ${mdCode(rec.id)}`);
  }
  if (rec.environment) {
    out.push(`- environment: ${mdEscape(rec.environment.summary ?? "")} (hash ${mdCode(rec.environment.hash ?? "?")})`);
  }
  const cases = rec.cases ?? [];
  if (cases.length) {
    out.push("");
    out.push("| case | status | description |");
    out.push("|---|---|---|");
    for (const c of cases) {
      const status = c.status ?? (c.passed === true ? "pass" : c.passed === false ? "fail" : "?");
      out.push(`| ${mdCode(c.name ?? "")} | ${mdEscape(status)} | ${mdEscape(c.description ?? "")} |`);
    }
  }
  out.push("");
  out.push("## Record");
  out.push("");
  out.push("```json");
  out.push(JSON.stringify(rec, null, 2));
  out.push("```");
  out.push("");
  return out.join("\n");
}

export function environmentMarkdown(status: ServerStatus | undefined, env: EnvironmentRecord | undefined, serverPython?: string): string {
  const out: string[] = ["# AttnLens environment", ""];
  if (env?.summary) {
    out.push(`**${mdEscape(env.summary)}**`, "");
  }
  out.push(`- server interpreter: ${mdCode(serverPython ?? "?")}`);
  if (status) {
    out.push(`- workspace root: ${mdCode(status.root ?? "?")}`);
    out.push(`- target interpreter: ${mdCode(status.targetPython ?? "(default)")}`);
    if (status.targetError) {
      out.push(`- target error: ${mdEscape(status.targetError)}`);
    }
    out.push(`- index generation: ${status.generation ?? "?"}`);
  }
  if (env) {
    out.push("", "## Environment record", "", "```json", JSON.stringify(env, null, 2), "```");
  }
  if (status) {
    out.push("", "## Server status", "", "```json", JSON.stringify(status, null, 2), "```");
  }
  out.push("");
  return out.join("\n");
}
