import * as vscode from "vscode";
import {
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

/** Settings whose change restarts the server. */
export const RESTART_SETTINGS = ["attnlens.interpreter", "attnlens.targetPython", "attnlens.cacheDir", "attnlens.trace.server"];

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
    this.stateEmitter.fire(state);
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

  private async failed(message: string, detail?: string): Promise<void> {
    this.lastError = message;
    this.output.error(`[client] ${message}${detail ? `\n${detail}` : ""}`);
    this.setState("failed");
    // Do not await: the notification stays until the user acts.
    void vscode.window.showErrorMessage(`AttnLens: ${message}`, OPEN_SETTINGS, SHOW_LOG).then((choice) => {
      if (choice === OPEN_SETTINGS) {
        void vscode.commands.executeCommand("workbench.action.openSettings", "attnlens.interpreter");
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
    const interpreter = await resolveServerInterpreter(folder?.uri);
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
        { scheme: "file", language: "cpp" },
        { scheme: "file", language: "c" },
        { scheme: "file", language: "cuda-cpp" },
      ],
      outputChannel: this.output,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      initializationOptions: { targetPython: this.targetPython, cacheDir },
      synchronize: { configurationSection: "attnlens" },
      markdown: {
        isTrusted: { enabledCommands: ["attnlens.runProbe", "attnlens.traceAtCursor", "attnlens.openLocation", "attnlens.showEnvironment"] },
        supportHtml: false,
      },
      connectionOptions: { maxRestartCount: 3 },
      initializationFailedHandler: (error) => {
        this.log(`initialize failed: ${describeError(error)}`);
        return false;
      },
      middleware: {
        handleWorkDoneProgress: (token, params, next) => {
          this.onWorkDoneProgress(token, params);
          next(token, params);
        },
      },
    };
    const client = new LanguageClient("attnlens", "AttnLens", serverOptions, clientOptions);
    this.client = client;

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
    if (payload.environment && typeof payload.environment === "object") {
      this.setEnvironment(payload.environment);
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
      const env = await this.executeCommand<EnvironmentRecord>("attnlens.environment");
      if (env && typeof env === "object") {
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
      return (await client.sendRequest(ExecuteCommandRequest.type, { command, arguments: args }, token)) as T;
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
