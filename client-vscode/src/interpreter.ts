import { execFile } from "child_process";
import * as os from "os";
import * as path from "path";
import * as vscode from "vscode";

export interface Interpreter {
  /** Absolute path (or command name) of the Python that runs the server. */
  path: string;
  /** Where it came from, for messages: "setting attnlens.interpreter", "Python extension", ... */
  source: string;
}

/** Expand `~`, `${workspaceFolder}`, `${userHome}` and `${env:NAME}` in a path setting. */
export function expandPath(value: string, folder?: vscode.WorkspaceFolder): string {
  let v = value.trim();
  if (!v) {
    return v;
  }
  const ws = folder ?? vscode.workspace.workspaceFolders?.[0];
  v = v.replace(/\$\{workspaceFolder\}/g, ws ? ws.uri.fsPath : "");
  v = v.replace(/\$\{userHome\}/g, os.homedir());
  v = v.replace(/\$\{env:([^}]+)\}/g, (_m, name: string) => process.env[name] ?? "");
  if (v === "~" || v.startsWith("~/")) {
    v = path.join(os.homedir(), v.slice(1));
  }
  if (!path.isAbsolute(v) && v.includes(path.sep) && ws) {
    v = path.resolve(ws.uri.fsPath, v);
  }
  return v;
}

interface PythonExtensionApi {
  environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): { id: string; path: string } | undefined;
    onDidChangeActiveEnvironmentPath?: vscode.Event<unknown>;
  };
  settings?: {
    getExecutionDetails?(resource?: vscode.Uri): { execCommand: string[] | undefined };
  };
}

/** The interpreter selected in the Python extension (ms-python.python), if it is installed. */
export async function pythonExtensionInterpreter(resource?: vscode.Uri): Promise<string | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (!ext) {
    return undefined;
  }
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    const env = api?.environments?.getActiveEnvironmentPath(resource);
    if (env?.path) {
      return env.path;
    }
    const cmd = api?.settings?.getExecutionDetails?.(resource)?.execCommand;
    if (cmd && cmd.length === 1) {
      return cmd[0];
    }
  } catch {
    // The Python extension failed to activate: behave as if it were not installed.
  }
  return undefined;
}

/** Subscribe to interpreter changes in the Python extension (no-op when it is absent). */
export async function onPythonInterpreterChanged(listener: () => void): Promise<vscode.Disposable | undefined> {
  const ext = vscode.extensions.getExtension<PythonExtensionApi>("ms-python.python");
  if (!ext) {
    return undefined;
  }
  try {
    const api = ext.isActive ? ext.exports : await ext.activate();
    return api?.environments?.onDidChangeActiveEnvironmentPath?.(() => listener());
  } catch {
    return undefined;
  }
}

/** attnlens.interpreter, else the Python extension's interpreter, else undefined. */
export async function resolveServerInterpreter(resource?: vscode.Uri): Promise<Interpreter | undefined> {
  const cfg = vscode.workspace.getConfiguration("attnlens", resource);
  const configured = expandPath(cfg.get<string>("interpreter") ?? "");
  if (configured) {
    return { path: configured, source: "setting attnlens.interpreter" };
  }
  const fromExt = await pythonExtensionInterpreter(resource);
  if (fromExt) {
    return { path: fromExt, source: "the Python extension's selected interpreter" };
  }
  return undefined;
}

/** attnlens.targetPython, else the Python extension's interpreter, else null (server default). */
export async function resolveTargetPython(resource?: vscode.Uri): Promise<string | null> {
  const cfg = vscode.workspace.getConfiguration("attnlens", resource);
  const configured = expandPath(cfg.get<string>("targetPython") ?? "");
  if (configured) {
    return configured;
  }
  return (await pythonExtensionInterpreter(resource)) ?? null;
}

export interface ProbeResult {
  ok: boolean;
  version?: string;
  executable?: string;
  message?: string;
}

/**
 * Check that `python` starts and can import `modules` (argv only, never a shell), within `timeoutMs`.
 * `version` is the first module's `__version__`; `executable` the interpreter's `sys.executable`.
 */
export function checkImports(python: string, modules: string[], timeoutMs = 20000, what = modules.join(", ")): Promise<ProbeResult> {
  const script =
    "import sys, importlib\n" +
    "try:\n" +
    `    mods = [importlib.import_module(m) for m in ${JSON.stringify(modules)}]\n` +
    "except BaseException as e:\n" +
    "    print('%s: %s' % (type(e).__name__, e)); sys.exit(3)\n" +
    "print(getattr(mods[0], '__version__', '?'))\n" +
    "print(sys.executable)\n";
  return new Promise((resolve) => {
    execFile(python, ["-c", script], { timeout: timeoutMs, windowsHide: true }, (err, stdout, stderr) => {
      if (!err) {
        const [version, executable] = stdout.trim().split("\n");
        resolve({ ok: true, version: version?.trim(), executable: executable?.trim() });
        return;
      }
      const code = (err as NodeJS.ErrnoException).code;
      if (code === "ENOENT") {
        resolve({ ok: false, message: `${python} does not exist or is not executable` });
      } else if (code === "EACCES") {
        resolve({ ok: false, message: `${python} is not executable (permission denied)` });
      } else if ((err as { killed?: boolean }).killed) {
        resolve({ ok: false, message: `${python} did not answer within ${timeoutMs / 1000} s` });
      } else {
        const why = (stdout.trim() || stderr.trim().split("\n").slice(-1)[0] || err.message).trim();
        resolve({ ok: false, message: `${python} cannot import ${what} (${why})` });
      }
    });
  });
}

/**
 * Check that `python` starts and can import attnlens and pygls, so that a wrong interpreter
 * gives one clear message instead of a crash loop.
 */
export function checkInterpreter(python: string, timeoutMs = 20000): Promise<ProbeResult> {
  return checkImports(python, ["attnlens", "pygls"], timeoutMs, "attnlens");
}
