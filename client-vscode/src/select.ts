import * as fs from "fs";
import * as path from "path";
import * as vscode from "vscode";
import { checkImports, expandPath, pythonExtensionInterpreter } from "./interpreter";
import { ServerManager } from "./server";

/** One of the two interpreter settings, with what a valid choice must import. */
interface Which {
  key: "interpreter" | "targetPython";
  command: string;
  title: string;
  role: string;
  modules: string[];
  /** A choice that fails the import check can still be used (the target is analysed statically). */
  usableAnyway: boolean;
}

const SERVER: Which = {
  key: "interpreter",
  command: "attnlens.selectInterpreter",
  title: "AttnLens: Select interpreter (runs the language server)",
  role: "server Python",
  modules: ["attnlens", "pygls"],
  usableAnyway: false,
};
const TARGET: Which = {
  key: "targetPython",
  command: "attnlens.selectTargetPython",
  title: "AttnLens: Select target Python (where vLLM and the plugin's kernels are installed)",
  role: "target Python",
  modules: ["vllm"],
  usableAnyway: true,
};

export interface SelectResult {
  ok: boolean;
  python?: string;
  message: string;
}

const ENTER = "$(edit) Enter interpreter path…";
const BROWSE = "$(folder-opened) Browse…";

function venvPython(dir: string): string {
  return process.platform === "win32" ? path.join(dir, "Scripts", "python.exe") : path.join(dir, "bin", "python");
}

/** Interpreters worth offering: the current value, the Python extension's, workspace venvs, $VIRTUAL_ENV. */
async function candidates(which: Which, mgr: ServerManager): Promise<{ label: string; description: string }[]> {
  const seen = new Map<string, string>();
  const add = (p: string | undefined | null, why: string) => {
    if (p && !seen.has(p)) {
      seen.set(p, why);
    }
  };
  const folder = vscode.workspace.workspaceFolders?.[0];
  add(expandPath(vscode.workspace.getConfiguration("attnlens").get<string>(which.key) ?? ""), "current setting");
  add(await pythonExtensionInterpreter(folder?.uri), "selected in the Python extension");
  if (which === TARGET) {
    add(mgr.interpreter?.path, "the server's interpreter");
  }
  for (const f of vscode.workspace.workspaceFolders ?? []) {
    for (const name of [".venv", "venv", ".venv-target", "env"]) {
      const p = venvPython(path.join(f.uri.fsPath, name));
      if (fs.existsSync(p)) {
        add(p, `${name} in ${f.name}`);
      }
    }
  }
  if (process.env.VIRTUAL_ENV) {
    add(venvPython(process.env.VIRTUAL_ENV), "$VIRTUAL_ENV");
  }
  return [...seen].map(([label, description]) => ({ label, description }));
}

/** Where to write: the workspace when it already sets the key (it would win over the user value), else the user settings. */
function writeTarget(key: string): vscode.ConfigurationTarget {
  const info = vscode.workspace.getConfiguration("attnlens").inspect(key);
  return info?.workspaceValue !== undefined ? vscode.ConfigurationTarget.Workspace : vscode.ConfigurationTarget.Global;
}

async function pick(which: Which, mgr: ServerManager): Promise<string | undefined> {
  const items: vscode.QuickPickItem[] = [...(await candidates(which, mgr)), { label: ENTER, description: "" }, { label: BROWSE, description: "" }];
  const choice = await vscode.window.showQuickPick(items, { title: which.title, placeHolder: `The ${which.role}: checked with "import ${which.modules[0]}" before it is saved` });
  if (!choice) {
    return undefined;
  }
  if (choice.label === ENTER) {
    const v = await vscode.window.showInputBox({
      title: which.title,
      prompt: `Path of the ${which.role} (~ and \${workspaceFolder} are expanded)`,
      ignoreFocusOut: true,
      validateInput: (t) => (t.trim() ? undefined : "Enter a path"),
    });
    return v?.trim() || undefined;
  }
  if (choice.label === BROWSE) {
    const f = await vscode.window.showOpenDialog({ canSelectMany: false, openLabel: `Use as ${which.role}` });
    return f?.[0]?.fsPath;
  }
  return choice.label;
}

/** Validate `python` (import check with a timeout) and write the setting; report in a notification. */
export async function selectPython(which: Which, mgr: ServerManager, given?: string): Promise<SelectResult> {
  const raw = given ?? (await pick(which, mgr));
  if (!raw) {
    return { ok: false, message: "cancelled" };
  }
  const python = expandPath(raw);
  const check = await vscode.window.withProgress(
    { location: vscode.ProgressLocation.Notification, title: `AttnLens: checking ${python} (import ${which.modules.join(", ")})…` },
    () => checkImports(python, which.modules, 60000, which.modules[0]),
  );
  if (!check.ok) {
    const message = `AttnLens: ${python} cannot be used as the ${which.role}: ${check.message}`;
    mgr.log(message);
    if (!which.usableAnyway) {
      void vscode.window.showErrorMessage(message);
      return { ok: false, python, message };
    }
    const c = await vscode.window.showWarningMessage(`${message}. Static analysis still works; probes need it to import.`, "Use anyway", "Cancel");
    if (c !== "Use anyway") {
      return { ok: false, python, message };
    }
  }
  const target = writeTarget(which.key);
  await vscode.workspace.getConfiguration("attnlens").update(which.key, raw, target);
  const where = target === vscode.ConfigurationTarget.Workspace ? "workspace" : "user";
  const version = check.ok ? ` (${which.modules[0]} ${check.version ?? "?"})` : "";
  const message = `AttnLens: ${which.role} set to ${python}${version} in the ${where} settings`;
  mgr.log(message);
  void vscode.window.showInformationMessage(message);
  return { ok: true, python, message };
}

export function registerSelectCommands(context: vscode.ExtensionContext, mgr: ServerManager): void {
  for (const which of [SERVER, TARGET]) {
    context.subscriptions.push(
      vscode.commands.registerCommand(which.command, (arg?: unknown) =>
        selectPython(which, mgr, typeof arg === "string" && arg.trim() ? arg.trim() : undefined),
      ),
    );
  }
}
