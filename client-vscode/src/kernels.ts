import * as vscode from "vscode";
import { ServerManager } from "./server";
import { errorMessage, mdCode, mdEscape, showCommandError, toUri } from "./util";

/** One distinct final target of a backend's kernel call sites (server command attnlens.kernels). */
export interface KernelTarget {
  name?: string;
  full?: string;
  kind?: string;
  tag?: string;
  path?: string | null;
  line?: number | null;
  reachability?: "live" | "runtime" | "dead" | string;
  reason?: string | null;
  /** call sites that reach it; `col` is 0-based here */
  sites?: { path?: string; line?: number; col?: number; call?: string }[];
}

export interface BackendKernels {
  name?: string;
  kind?: string;
  class?: string;
  counts?: string;
  targets?: KernelTarget[];
}

/** A position for attnlens.markdown: a hover link's argument, or a tree node's location. */
export interface MarkdownAt {
  uri: string;
  line: number;
  character: number;
}

const REACH_WORDS: Record<string, string> = {
  live: "taken on this platform",
  runtime: "decided at run time",
  dead: "not taken on this platform",
};

export function reachWords(r: string | undefined | null): string {
  return REACH_WORDS[r ?? ""] ?? "";
}

/** Markdown of one kernel target and its call sites (the tree's Copy as Markdown on a Kernels entry). */
export function targetMarkdown(backend: string, t: KernelTarget): string {
  const where = t.path ? ` — \`${t.path}${t.line ? `:${t.line}` : ""}\`` : "";
  const out = [
    `### ${mdCode(t.name)} (${mdEscape(t.tag ?? t.kind ?? "")}) — backend ${mdCode(backend)}`,
    "",
    `${mdCode(t.full)}${where}, ${reachWords(t.reachability)}${t.reason ? ` — ${mdEscape(t.reason)}` : ""}`,
    "",
    `Call sites (${(t.sites ?? []).length}):`,
    ...(t.sites ?? []).map((s) => `- ${mdCode(s.call)} — \`${vscode.workspace.asRelativePath(s.path ?? "")}:${s.line ?? ""}\``),
  ];
  return out.join("\n");
}

/**
 * attnlens.copyMarkdown: the whole tree at a position (hover link, call site, backend class) or a tree's Kernels
 * entry, as Markdown on the clipboard. attnlens.showKernels: the code lens' peek at a backend's or method's kernels.
 */
export function registerKernelCommands(context: vscode.ExtensionContext, mgr: ServerManager): void {
  const reg = (id: string, fn: (...args: any[]) => unknown) => context.subscriptions.push(vscode.commands.registerCommand(id, fn));

  reg("attnlens.copyMarkdown", async (arg?: unknown) => {
    try {
      const text = await markdownFor(mgr, arg);
      if (!text) {
        void vscode.window.showInformationMessage("AttnLens: nothing kernel-related to copy here.");
        return undefined;
      }
      await vscode.env.clipboard.writeText(text);
      void vscode.window.setStatusBarMessage("AttnLens: copied as Markdown", 3000);
      return text;
    } catch (e) {
      showCommandError("copy as Markdown", e, mgr.output);
      return undefined;
    }
  });

  reg("attnlens.showKernels", async (uri?: string, pos?: { line: number; character: number }, locs?: { uri: string; line: number }[]) => {
    if (!uri || !pos) {
      return;
    }
    const locations = (locs ?? []).map((l) => new vscode.Location(toUri(l.uri), new vscode.Position(Math.max(l.line, 0), 0)));
    await vscode.commands.executeCommand("editor.action.showReferences", toUri(uri), new vscode.Position(pos.line, pos.character), locations);
  });
}

async function markdownFor(mgr: ServerManager, arg: unknown): Promise<string | undefined> {
  const a = (Array.isArray(arg) ? arg[0] : arg) as Record<string, any> | undefined;
  if (!a || typeof a !== "object") {
    const ed = vscode.window.activeTextEditor;
    if (!ed) {
      return undefined;
    }
    return serverMarkdown(mgr, { uri: ed.document.uri.toString(), line: ed.selection.active.line, character: ed.selection.active.character });
  }
  if (typeof a.uri === "string" && typeof a.line === "number") {
    return serverMarkdown(mgr, { uri: a.uri, line: a.line, character: a.character ?? 0 });
  }
  // a node of the Attention backends view
  switch (a.type) {
    case "ktarget":
      return targetMarkdown(a.backend ?? "", a.target as KernelTarget);
    case "ksite":
    case "site": {
      const s = a.site ?? {};
      const col = a.type === "site" ? Math.max((s.col ?? 1) - 1, 0) : s.col ?? 0;
      return serverMarkdown(mgr, { uri: toUri(s.path).toString(), line: Math.max((s.line ?? 1) - 1, 0), character: col });
    }
    case "backend": {
      const b = a.backend ?? {};
      return b.path ? serverMarkdown(mgr, { uri: toUri(b.path).toString(), line: Math.max((b.line ?? 1) - 1, 0), character: 0 }) : undefined;
    }
    default:
      return undefined;
  }
}

async function serverMarkdown(mgr: ServerManager, at: MarkdownAt): Promise<string | undefined> {
  let got: { markdown?: string | null; error?: string } | undefined;
  try {
    got = await mgr.executeCommand<{ markdown?: string | null; error?: string }>("attnlens.markdown", [at]);
  } catch (e) {
    throw new Error(errorMessage(e));
  }
  return got?.markdown ?? undefined;
}
