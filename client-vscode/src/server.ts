import * as vscode from "vscode";
import {
  DefinitionRequest,
  ExecuteCommandOptions,
  ExecuteCommandRequest,
  LanguageClient,
  LanguageClientOptions,
  ProgressToken,
  RevealOutputChannelOn,
  ServerOptions,
  State,
  TransportKind,
  WorkDoneProgressBegin,
  WorkDoneProgressEnd,
  WorkDoneProgressReport,
} from "vscode-languageclient/node";
import { checkInterpreter, expandPath, Interpreter, resolveServerInterpreter, resolveTargetPython } from "./interpreter";
import { EnvironmentRecord, ServerStatus } from "./types";
import { openSettings } from "./util";

export type ServerState = "stopped" | "starting" | "running" | "failed";

export interface IndexProgress {
  title: string;
  message?: string;
  percentage?: number;
}

/** Client-side commands that share an id with a server command: the extension owns them. */
export const CLIENT_OWNED_COMMANDS = new Set<string>([
  "attnlens.runProbe",
  "attnlens.restartServer",
  "attnlens.refreshBackends",
  "attnlens.showEnvironment",
  "attnlens.showInventory",
  "attnlens.traceAtCursor",
]);

/** Top-level keys of the "attnlens" section that only the client reads. */
const CLIENT_ONLY_SETTINGS = ["interpreter", "trace", "probe", "kernelsView", "statusBar"];

/** Settings whose change restarts the server. */
export const RESTART_SETTINGS = [
  "attnlens.interpreter",
  "attnlens.targetPython",
  "attnlens.cacheDir",
  "attnlens.trace.server",
  "attnlens.definitionProvider",
];

/** Python language servers that answer Go to Definition themselves (extension id, name). */
const OTHER_PYTHON_SERVERS: [string, string][] = [
  ["ms-pyright.pyright", "Pyright"],
  ["detachhead.basedpyright", "basedpyright"],
  ["astral-sh.ty", "ty"],
  ["pyrefly.pyrefly", "Pyrefly"],
];

/** The other Python language server that is enabled in this window, if any (Pylance, Jedi via the Python extension, Pyright, ...). */
export function otherPythonServer(): string | undefined {
  const choice = vscode.workspace.getConfiguration("python").get<string>("languageServer") ?? "Default";
  if (vscode.extensions.getExtension("ms-python.vscode-pylance") && choice !== "None" && choice !== "Jedi") {
    return "Pylance";
  }
  if (vscode.extensions.getExtension("ms-python.python") && choice === "Jedi") {
    return "Jedi (Python extension)";
  }
  return OTHER_PYTHON_SERVERS.find(([id]) => vscode.extensions.getExtension(id))?.[1];
}

/** attnlens.definitionProvider: "on", "off", or "auto" (off while another Python server answers F12). */
export function definitionProviderOn(): { on: boolean; why: string } {
  const mode = vscode.workspace.getConfiguration("attnlens").get<string>("definitionProvider") ?? "auto";
  if (mode === "on" || mode === "off") {
    return { on: mode === "on", why: `attnlens.definitionProvider is "${mode}"` };
  }
  const other = otherPythonServer();
  return other ? { on: false, why: `auto: ${other} answers Go to Definition` } : { on: true, why: "auto: no other Python language server" };
}

const OPEN_SETTINGS = "Open Settings";
const SHOW_LOG = "Show Log";

function describeError(e: unknown): string {
  if (e instanceof Error) {
    return e.message;
  }
  if (e && typeof e === "object" && "message" in e) {
    return String((e as { message: unknown }).message);
  }
  return String(e);
}

/** Owns the LanguageClient: start, stop, debounced restart, status/progress events. */
export class ServerManager implements vscode.Disposable {
  client: LanguageClient | undefined;
  state: ServerState = "stopped";
  interpreter: Interpreter | undefined;
  targetPython: string | null = null;
  lastStatus: ServerStatus | undefined;
  environment: EnvironmentRecord | undefined;
  lastError: string | undefined;

  private readonly progress = new Map<ProgressToken, IndexProgress>();
  private readonly stateEmitter = new vscode.EventEmitter<ServerState>();
  private readonly statusEmitter = new vscode.EventEmitter<ServerStatus>();
  private readonly progressEmitter = new vscode.EventEmitter<IndexProgress | undefined>();
  private readonly environmentEmitter = new vscode.EventEmitter<EnvironmentRecord | undefined>();
  readonly onDidChangeState = this.stateEmitter.event;
  readonly onStatus = this.statusEmitter.event;
  readonly onProgress = this.progressEmitter.event;
  readonly onEnvironment = this.environmentEmitter.event;

  private queue: Promise<void> = Promise.resolve();
  private restartTimer: NodeJS.Timeout | undefined;
  private environmentGeneration: unknown = undefined;
  private disposed = false;
  /** The interpreter the last failed start used ("" when none resolved). */
  private failedInterpreter: string | undefined;

  constructor(
    private readonly context: vscode.ExtensionContext,
    readonly output: vscode.LogOutputChannel,
  ) {}

  log(message: string): void {
    this.output.info(`[client] ${message}`);
  }

  get running(): boolean {
    return this.state === "running" && this.client !== undefined && this.client.isRunning();
  }

  get currentProgress(): IndexProgress | undefined {
    const all = [...this.progress.values()];
    return all.length ? all[all.length - 1] : undefined;
  }

  private setState(state: ServerState): void {
    this.state = state;
    // for the views' welcome content ("when": "attnlens.serverState == failed")
    void vscode.commands.executeCommand("setContext", "attnlens.serverState", state);
    this.stateEmitter.fire(state);
  }

  /**
   * After a configuration change that restarts nothing by itself: a server that could not start (no
   * interpreter, a wrong one) starts again when the interpreters resolve to something else now.
   */
  async reresolve(e?: vscode.ConfigurationChangeEvent): Promise<void> {
    if (this.state !== "failed" || (e && !e.affectsConfiguration("attnlens") && !e.affectsConfiguration("python"))) {
      return;
    }
    const folder = vscode.workspace.workspaceFolders?.[0];
    const now = await resolveServerInterpreter(folder?.uri);
    if (now && now.path !== this.failedInterpreter) {
      this.scheduleRestart(`the server interpreter now resolves to ${now.path} (${now.source})`);
    }
  }

  /** Run start/stop operations one after another. */
  private enqueue(op: () => Promise<void>): Promise<void> {
    this.queue = this.queue.then(op, op).catch((e) => this.log(`unexpected: ${describeError(e)}`));
    return this.queue;
  }

  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop());
  }

  restart(reason: string): Promise<void> {
    if (this.restartTimer) {
      clearTimeout(this.restartTimer);
      this.restartTimer = undefined;
    }
    return this.enqueue(async () => {
      this.log(`restarting: ${reason}`);
      await this.doStop();
      await this.doStart();
    });
  }

  /** Restart ~500 ms after the last of a burst of setting changes. */
  scheduleRestart(reason: string, delayMs = 500): void {
    if (this.restartTimer) {
      clearTimeout(this.restartTimer);
    }
    this.restartTimer = setTimeout(() => {
      this.restartTimer = undefined;
      void this.restart(reason);
    }, delayMs);
  }

  private waitForInterpreter(resource: vscode.Uri | undefined, ms: number): Promise<Interpreter | undefined> {
    return new Promise((resolve) => {
      const done = (v: Interpreter | undefined) => {
        clearTimeout(timer);
        sub.dispose();
        resolve(v);
      };
      const timer = setTimeout(() => done(undefined), ms);
      const sub = vscode.workspace.onDidChangeConfiguration(async (e) => {
        if (e.affectsConfiguration("attnlens.interpreter")) {
          const now = await resolveServerInterpreter(resource);
          if (now) {
            done(now);
          }
        }
      });
    });
  }

  private async failed(message: string, detail?: string): Promise<void> {
    this.lastError = message;
    this.output.error(`[client] ${message}${detail ? `\n${detail}` : ""}`);
    this.setState("failed");
    // Do not await: the notification stays until the user acts.
    void vscode.window.showErrorMessage(`AttnLens: ${message}`, OPEN_SETTINGS, SHOW_LOG).then((choice) => {
      if (choice === OPEN_SETTINGS) {
        void openSettings("attnlens.interpreter");
      } else if (choice === SHOW_LOG) {
        this.output.show(true);
      }
    });
  }

  private async doStart(): Promise<void> {
    if (this.disposed) {
      return;
    }
    this.lastError = undefined;
    this.lastStatus = undefined;
    this.environment = undefined;
    this.environmentGeneration = undefined;
    this.progress.clear();
    this.setState("starting");
    const folder = vscode.workspace.workspaceFolders?.[0];
    // Re-resolved on every start (Restart server included): never a value remembered from an earlier start.
    let interpreter = await resolveServerInterpreter(folder?.uri);
    if (!interpreter) {
      // Settings can still be arriving while the window loads: wait briefly for a change before giving up.
      interpreter = await this.waitForInterpreter(folder?.uri, 3000);
    }
    this.failedInterpreter = interpreter?.path ?? "";
    if (!interpreter) {
      await this.failed(
        "no Python interpreter to run the language server. Set \"attnlens.interpreter\" to a Python " +
          "that has attnlens installed (pip install attnlens), or select one with the Python extension.",
      );
      return;
    }
    this.interpreter = interpreter;
    this.targetPython = await resolveTargetPython(folder?.uri);
    this.log(`server interpreter: ${interpreter.path} (from ${interpreter.source})`);
    this.log(`target interpreter: ${this.targetPython ?? "(server default)"}`);
    const check = await checkInterpreter(interpreter.path);
    if (!check.ok) {
      await this.failed(
        `cannot start the language server: ${check.message}. Set "attnlens.interpreter" ` +
          "(from " + interpreter.source + ") to a Python with attnlens installed.",
      );
      return;
    }
    this.log(`attnlens ${check.version} found`);
    this.failedInterpreter = undefined;

    const cfg = vscode.workspace.getConfiguration("attnlens", folder?.uri);
    const cacheDir = expandPath(cfg.get<string>("cacheDir") ?? "") || null;
    const serverOptions: ServerOptions = {
      command: interpreter.path,
      args: ["-m", "attnlens", "serve"],
      transport: TransportKind.stdio,
      options: {
        cwd: folder?.uri.fsPath,
        env: { ...process.env, PYTHONUNBUFFERED: "1", PYTHONIOENCODING: "utf-8" },
      },
    };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [
        { scheme: "file", language: "python" },
        { scheme: "untitled", language: "python" }, // an unsaved new buffer is analysed too
        { scheme: "file", language: "cpp" },
        { scheme: "file", language: "c" },
        { scheme: "file", language: "cuda-cpp" },
      ],
      outputChannel: this.output,
      traceOutputChannel: traceChannel(this.output, cfg.get<string>("trace.server") ?? "off"),
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: { targetPython: this.targetPython, cacheDir },
      markdown: {
        isTrusted: { enabledCommands: ["attnlens.runProbe", "attnlens.traceAtCursor", "attnlens.openLocation", "attnlens.showEnvironment", "attnlens.copyMarkdown"] },
        supportHtml: false,
      },
      connectionOptions: { maxRestartCount: 3 },
      initializationFailedHandler: (error) => {
        this.log(`initialize failed: ${describeError(error)}`);
        return false;
      },
      middleware: {
        workspace: {
          // The server pulls the "attnlens" section; give it its own keys only (it warns about
          // unknown ones) and the interpreter/cache paths as resolved here.
          configuration: async (params, token, next) => {
            const result = await next(params, token);
            if (!Array.isArray(result)) {
              return result;
            }
            return result.map((value, i) => (params.items[i]?.section === "attnlens" ? this.serverSettings(value, cacheDir) : value));
          },
        },
        handleWorkDoneProgress: (token, params, next) => {
          this.onWorkDoneProgress(token, params);
          next(token, params);
        },
      },
    };
    const client = new LanguageClient("attnlens", "AttnLens", serverOptions, clientOptions);
    this.client = client;

    // Go to Definition next to another Python server: its answer alone (AttnLens keeps Go to Implementation).
    const definition = definitionProviderOn();
    this.log(`definition provider: ${definition.on ? "on" : "off"} (${definition.why})`);
    if (!definition.on) {
      const feature = client.getFeature(DefinitionRequest.method);
      feature.initialize = () => undefined;
      feature.register = () => undefined;
    }

    // languageclient registers every command the server lists in executeCommandProvider as a
    // VS Code command; skip the ids the extension owns (attnlens.runProbe has a UI here).
    const execFeature = client.getFeature(ExecuteCommandRequest.method);
    const register = execFeature.register.bind(execFeature);
    execFeature.register = (data) => {
      const opts: ExecuteCommandOptions = data.registerOptions;
      const commands = (opts.commands ?? []).filter((c) => !CLIENT_OWNED_COMMANDS.has(c));
      register({ ...data, registerOptions: { ...opts, commands } });
    };

    client.onNotification("attnlens/status", (payload: ServerStatus) => this.handleStatus(payload));
    client.onDidChangeState((e) => {
      if (this.client !== client) {
        return;
      }
      if (e.newState === State.Stopped && this.state === "running") {
        this.log("server stopped");
        this.progress.clear();
        this.progressEmitter.fire(undefined);
        this.setState("stopped");
      } else if (e.newState === State.Running && this.state !== "running") {
        this.setState("running");
      }
    });

    try {
      await client.start();
    } catch (e) {
      if (this.client === client) {
        this.client = undefined;
      }
      try {
        await client.dispose(2000);
      } catch {
        // already dead
      }
      await this.failed(`the language server did not start: ${describeError(e)}`);
      return;
    }
    this.log(`server started (pid ${(client as unknown as { _serverProcess?: { pid?: number } })._serverProcess?.pid ?? "?"})`);
    this.setState("running");
    // The server also pushes attnlens/status after indexing; ask once now for what it knows.
    void this.refreshStatus();
  }

  /** The "attnlens" configuration section as the server should see it. */
  private serverSettings(value: unknown, cacheDir: string | null): unknown {
    if (!value || typeof value !== "object" || Array.isArray(value)) {
      return value;
    }
    const out: Record<string, unknown> = { ...(value as Record<string, unknown>) };
    for (const key of CLIENT_ONLY_SETTINGS) {
      delete out[key];
    }
    out.targetPython = this.targetPython;
    out.cacheDir = cacheDir;
    return out;
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    this.progress.clear();
    this.progressEmitter.fire(undefined);
    if (client) {
      try {
        await client.stop(3000);
      } catch (e) {
        this.log(`stop: ${describeError(e)}`);
      }
      try {
        await client.dispose(1000);
      } catch {
        // ignore
      }
    }
    if (this.state !== "failed") {
      this.setState("stopped");
    }
  }

  private onWorkDoneProgress(
    token: ProgressToken,
    params: WorkDoneProgressBegin | WorkDoneProgressReport | WorkDoneProgressEnd,
  ): void {
    if (params.kind === "begin") {
      this.progress.set(token, { title: params.title, message: params.message, percentage: params.percentage });
    } else if (params.kind === "report") {
      const p = this.progress.get(token) ?? { title: "AttnLens" };
      if (params.message !== undefined) {
        p.message = params.message;
      }
      if (params.percentage !== undefined) {
        p.percentage = params.percentage;
      }
      this.progress.set(token, p);
    } else {
      this.progress.delete(token);
    }
    this.progressEmitter.fire(this.currentProgress);
  }

  private handleStatus(payload: ServerStatus): void {
    if (!payload || typeof payload !== "object") {
      return;
    }
    this.lastStatus = payload;
    this.statusEmitter.fire(payload);
    const env = normalizeEnvironment(payload.environment);
    if (env) {
      this.setEnvironment(env);
    } else if (this.environmentGeneration !== (payload.generation ?? null)) {
      this.environmentGeneration = payload.generation ?? null;
      void this.fetchEnvironment();
    }
  }

  private setEnvironment(env: EnvironmentRecord | undefined): void {
    this.environment = env;
    this.environmentEmitter.fire(env);
  }

  async refreshStatus(): Promise<ServerStatus | undefined> {
    try {
      const status = await this.executeCommand<ServerStatus>("attnlens.status");
      this.handleStatus(status);
      return status;
    } catch (e) {
      this.log(`attnlens.status: ${describeError(e)}`);
      return undefined;
    }
  }

  async fetchEnvironment(): Promise<EnvironmentRecord | undefined> {
    try {
      const env = normalizeEnvironment(await this.executeCommand<unknown>("attnlens.environment"));
      if (env) {
        this.setEnvironment(env);
      }
      return env;
    } catch (e) {
      this.log(`attnlens.environment: ${describeError(e)}`);
      return undefined;
    }
  }

  /** workspace/executeCommand; throws an Error with a readable message when it fails. */
  async executeCommand<T>(command: string, args: unknown[] = [], token?: vscode.CancellationToken): Promise<T> {
    const client = this.client;
    if (!client || !this.running) {
      const why =
        this.state === "starting"
          ? "the AttnLens server is still starting"
          : `the AttnLens server is not running${this.lastError ? ` (${this.lastError})` : ""}`;
      throw new Error(why);
    }
    try {
      const result: unknown = await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }, token);
      return parseMaybeJson(result) as T;
    } catch (e) {
      throw new Error(`${command} failed: ${describeError(e)}`);
    }
  }

  dispose(): void {
    this.disposed = true;
    if (this.restartTimer) {
      clearTimeout(this.restartTimer);
    }
    this.stateEmitter.dispose();
    this.statusEmitter.dispose();
    this.progressEmitter.dispose();
    this.environmentEmitter.dispose();
  }

  /** For deactivate(): stop the server process. */
  async shutdown(): Promise<void> {
    this.disposed = true;
    await this.enqueue(() => this.doStop());
  }

  get extensionContext(): vscode.ExtensionContext {
    return this.context;
  }
}

/**
 * Accept the shapes an environment answer comes in: the record itself ({summary, hash, ...}),
 * the CLI's {record, hash, summary, changed} wrapper, or a [record, changed, previousHash] tuple.
 * Builds a summary ("NVIDIA H200 ×1 · torch 2.11 · vLLM 0.26.0") when the server sends none.
 */
export function normalizeEnvironment(value: unknown): EnvironmentRecord | undefined {
  let v: unknown = value;
  if (Array.isArray(v)) {
    v = v[0];
  }
  if (!v || typeof v !== "object") {
    return undefined;
  }
  const o = v as Record<string, unknown>;
  let rec: EnvironmentRecord = o;
  if (o.record && typeof o.record === "object") {
    rec = { ...(o.record as Record<string, unknown>) };
    rec.hash ??= o.hash as string | undefined;
    rec.summary ??= o.summary as string | undefined;
  }
  if (typeof rec.summary !== "string" || !rec.summary) {
    rec = { ...rec, summary: buildSummary(rec) };
  }
  return rec;
}

function buildSummary(rec: Record<string, unknown>): string {
  const parts: string[] = [];
  const gpu = rec.gpu as { count?: number; models?: string[]; vendor?: string | null } | undefined;
  if (gpu && gpu.count) {
    const model = gpu.models?.[0] ?? gpu.vendor ?? "GPU";
    parts.push(`${model} ×${gpu.count}`);
  } else if (gpu) {
    parts.push("no GPU");
  }
  const torch = rec.torch as { version?: string; importable?: boolean; error?: string } | undefined;
  if (torch) {
    parts.push(torch.version ? `torch ${String(torch.version).split("+")[0]}` : "torch n/a");
  }
  const packages = rec.packages as Record<string, { version?: string }> | undefined;
  const vllm = packages?.vllm?.version;
  if (vllm) {
    parts.push(`vLLM ${vllm}`);
  }
  return parts.length ? parts.join(" · ") : rec.hash ? `environment ${String(rec.hash).slice(0, 8)}` : "environment";
}

/** Some commands answer a JSON document as a string: parse it. */
function parseMaybeJson(value: unknown): unknown {
  if (typeof value === "string") {
    const t = value.trim();
    if ((t.startsWith("{") && t.endsWith("}")) || (t.startsWith("[") && t.endsWith("]"))) {
      try {
        return JSON.parse(t);
      } catch {
        return value;
      }
    }
  }
  return value;
}

/**
 * languageclient only traces when its channel's log level is Trace; this view of the AttnLens
 * channel reports Trace while attnlens.trace.server is on and writes the trace at info level,
 * so the setting alone turns the LSP trace on.
 */
export function traceChannel(out: vscode.LogOutputChannel, setting: string): vscode.LogOutputChannel {
  const on = setting === "messages" || setting === "verbose";
  return {
    get name() {
      return out.name;
    },
    get logLevel() {
      return on ? vscode.LogLevel.Trace : out.logLevel;
    },
    onDidChangeLogLevel: out.onDidChangeLogLevel,
    trace: (message: string, ...args: unknown[]) => (on ? out.info(`[lsp] ${message}`, ...args) : out.trace(message, ...args)),
    debug: (message: string, ...args: unknown[]) => out.debug(message, ...args),
    info: (message: string, ...args: unknown[]) => out.info(message, ...args),
    warn: (message: string, ...args: unknown[]) => out.warn(message, ...args),
    error: (error: string | Error, ...args: unknown[]) => out.error(error, ...args),
    append: (value: string) => out.append(value),
    appendLine: (value: string) => out.appendLine(value),
    replace: (value: string) => out.replace(value),
    clear: () => out.clear(),
    show: (...args: unknown[]) => (out.show as (...a: unknown[]) => void)(...args),
    hide: () => out.hide(),
    dispose: () => undefined,
  };
}
