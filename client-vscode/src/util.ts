import * as path from "path";
import * as vscode from "vscode";
import { Final, Loc } from "./types";

/** True when the location names a real file (path set, line >= 1). */
export function hasLoc(loc: Loc | null | undefined): loc is Loc & { path: string } {
  return !!loc && typeof loc.path === "string" && loc.path.length > 0;
}

/** 1-based line, 0-based column (server convention) -> vscode.Position. */
export function toPosition(line?: number | null, col?: number | null): vscode.Position {
  return new vscode.Position(Math.max((line ?? 1) - 1, 0), Math.max(col ?? 0, 0));
}

export function toUri(p: string): vscode.Uri {
  return /^[a-z][a-z0-9+.-]+:\/\//i.test(p) ? vscode.Uri.parse(p) : vscode.Uri.file(p);
}

/** Path relative to the workspace folder when it is inside it, else the absolute path. */
export function displayPath(p: string | null | undefined): string {
  if (!p) {
    return "";
  }
  const fsPath = toUri(p).fsPath;
  for (const f of vscode.workspace.workspaceFolders ?? []) {
    const rel = path.relative(f.uri.fsPath, fsPath);
    if (rel && !rel.startsWith("..") && !path.isAbsolute(rel)) {
      return rel;
    }
  }
  const sp = fsPath.lastIndexOf(`${path.sep}site-packages${path.sep}`);
  if (sp >= 0) {
    return fsPath.slice(sp + "/site-packages/".length);
  }
  return fsPath;
}

export function locLabel(loc: Loc | null | undefined): string {
  if (!hasLoc(loc)) {
    return "";
  }
  return loc.line ? `${path.basename(loc.path)}:${loc.line}` : path.basename(loc.path);
}

/** Open `path` at 1-based `line` (0-based `col`) and select that position. */
export async function openLocation(
  loc: Loc | null | undefined,
  opts: { preview?: boolean; viewColumn?: vscode.ViewColumn } = {},
): Promise<void> {
  if (!hasLoc(loc)) {
    void vscode.window.showInformationMessage("AttnLens: this item has no source location.");
    return;
  }
  const pos = toPosition(loc.line, loc.col);
  try {
    const doc = await vscode.workspace.openTextDocument(toUri(loc.path));
    await vscode.window.showTextDocument(doc, {
      selection: new vscode.Range(pos, pos),
      preview: opts.preview ?? true,
      viewColumn: opts.viewColumn ?? vscode.ViewColumn.Active,
    });
  } catch (e) {
    void vscode.window.showErrorMessage(`AttnLens: cannot open ${loc.path}: ${e instanceof Error ? e.message : String(e)}`);
  }
}

/** `torch_op _C_cache_ops::reshape_and_cache_flash` */
export function finalLabel(f: Final | null | undefined): string {
  if (!f) {
    return "?";
  }
  const kind = f.kind ?? "?";
  const sym = f.symbol ?? "";
  return sym ? `${kind} ${sym}` : kind;
}

/** Last dotted component: a.b.C -> C */
export function shortName(dotted: string | null | undefined): string {
  if (!dotted) {
    return "";
  }
  const i = dotted.lastIndexOf(".");
  return i >= 0 ? dotted.slice(i + 1) : dotted;
}

export function errorMessage(e: unknown): string {
  return e instanceof Error ? e.message : String(e);
}

/** Show an error from a command as a notification, with a button to the log. */
export function showCommandError(what: string, e: unknown, output?: vscode.LogOutputChannel): void {
  const msg = `AttnLens: ${what}: ${errorMessage(e)}`;
  output?.error(`[client] ${msg}`);
  void vscode.window.showErrorMessage(msg, ...(output ? ["Show Log"] : [])).then((c) => {
    if (c === "Show Log") {
      output?.show(true);
    }
  });
}

export function mdEscape(s: string | null | undefined): string {
  return (s ?? "").replace(/([\\`*_{}[\]<>|])/g, "\\$1");
}

export function mdCode(s: string | null | undefined): string {
  const v = s ?? "";
  return v.includes("`") ? `\`\` ${v} \`\`` : `\`${v}\``;
}

/** Markdown link to a file location (opens in the editor from a Markdown preview). */
export function mdLink(loc: Loc | null | undefined): string {
  if (!hasLoc(loc)) {
    return "—";
  }
  const uri = toUri(loc.path).with({ fragment: loc.line ? `L${loc.line}` : "" });
  const label = `${displayPath(loc.path)}${loc.line ? `:${loc.line}` : ""}`;
  return `[${mdEscape(label)}](${uri.toString()})`;
}

/**
 * Open the Settings editor on `query`. The interpreter settings are machine-scoped, so in a remote
 * window (Remote-SSH, code-server) they live in the Remote tab: open that one there.
 */
export async function openSettings(query: string): Promise<void> {
  if (vscode.env.remoteName) {
    try {
      await vscode.commands.executeCommand("workbench.action.openRemoteSettings", { query });
      return;
    } catch {
      // older VS Code: fall through
    }
  }
  await vscode.commands.executeCommand("workbench.action.openSettings", query);
}
