import * as path from "path";
import * as vscode from "vscode";
import { BackendsProvider, callSiteLoc, Node, probeTargetFor } from "./backendsView";
import { chainMarkdown, chainPlain, DocumentStore, environmentMarkdown, probeMarkdown } from "./documents";
import { onPythonInterpreterChanged } from "./interpreter";
import { registerKernelCommands } from "./kernels";
import { runProbeFlow } from "./probeFlow";
import { ProbeRun, ProbesProvider } from "./probesView";
import { registerSelectCommands } from "./select";
import { normalizeEnvironment, RESTART_SETTINGS, ServerManager } from "./server";
import { StatusBar } from "./statusBar";
import { TracePanel } from "./tracePanel";
import { Chain, EnvironmentRecord, Loc, ProbeRecord, ProbeRequest } from "./types";
import { errorMessage, hasLoc, openLocation, showCommandError, toUri } from "./util";

let server: ServerManager | undefined;

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const output = vscode.window.createOutputChannel("AttnLens", { log: true });
  const mgr = new ServerManager(context, output);
  server = mgr;
  const documents = new DocumentStore();
  const backends = new BackendsProvider(mgr);
  const probes = new ProbesProvider(context.workspaceState);
  const backendsView = vscode.window.createTreeView("attnlens.backends", { treeDataProvider: backends, showCollapseAll: true });
  backends.attach(backendsView);
  const probesView = vscode.window.createTreeView("attnlens.probes", { treeDataProvider: probes });
  const statusBar = new StatusBar(mgr);
  registerKernelCommands(context, mgr); // Copy as Markdown (hovers, tree), the code lens' peek at kernels
  context.subscriptions.push(output, mgr, documents, backends, probes, backendsView, probesView, statusBar);

  // --- server lifecycle -> views
  context.subscriptions.push(
    mgr.onDidChangeState((state) => {
      if (state === "running") {
        void backends.refresh(false);
      } else if (state === "failed" || state === "stopped") {
        backends.clear(state === "failed" ? `The AttnLens server is not running: ${mgr.lastError ?? "see the log"}` : "The AttnLens server is stopped.");
      }
    }),
    mgr.onStatus((status) => {
      if (status.generation !== undefined && status.generation !== null) {
        backends.onGeneration(status.generation);
      }
    }),
  );

  // --- settings, trust and interpreter changes -> debounced restart
  context.subscriptions.push(
    vscode.workspace.onDidChangeConfiguration((e) => {
      const hit = RESTART_SETTINGS.filter((s) => e.affectsConfiguration(s));
      if (hit.length) {
        mgr.log(`settings changed: ${hit.join(", ")}`);
        mgr.scheduleRestart(`settings changed (${hit.join(", ")})`);
      } else {
        void mgr.reresolve(e); // any other change: a server that could not start tries again if the interpreter resolves now
      }
    }),
    vscode.workspace.onDidGrantWorkspaceTrust(() => mgr.scheduleRestart("workspace trusted")),
    vscode.workspace.onDidChangeWorkspaceFolders(() => mgr.scheduleRestart("workspace folders changed")),
  );
  void onPythonInterpreterChanged(() => {
    const cfg = vscode.workspace.getConfiguration("attnlens");
    if (!cfg.get<string>("interpreter") || !cfg.get<string>("targetPython")) {
      mgr.scheduleRestart("the Python extension's interpreter changed");
    }
  }).then((d) => d && context.subscriptions.push(d));

  // --- commands
  const reg = (id: string, fn: (...args: any[]) => unknown) => context.subscriptions.push(vscode.commands.registerCommand(id, fn));

  reg("attnlens.restartServer", () =>
    vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: "AttnLens: restarting server" }, () => mgr.restart("command")),
  );
  reg("attnlens.showOutput", () => output.show(true));
  registerSelectCommands(context, mgr);
  reg("attnlens.openLocation", (loc: Loc) => openLocation(loc));
  reg("attnlens.refreshBackends", () => backends.refresh(true));
  reg("attnlens.reindex", async () => {
    try {
      await vscode.window.withProgress({ location: vscode.ProgressLocation.Window, title: "AttnLens: re-indexing" }, () =>
        mgr.executeCommand("attnlens.restartIndex"),
      );
    } catch (e) {
      showCommandError("re-index", e, output);
    }
  });

  reg("attnlens.showEnvironment", async () => {
    let env: EnvironmentRecord | undefined;
    let envError: string | undefined;
    await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: "AttnLens: reading the target environment…" },
      async () => {
        await mgr.refreshStatus();
        try {
          env = normalizeEnvironment(await mgr.executeCommand<unknown>("attnlens.environment"));
          if (env) {
            mgr.environment = env;
          }
        } catch (e) {
          envError = errorMessage(e);
          env = normalizeEnvironment(mgr.lastStatus?.environment);
        }
      },
    );
    statusBar.update();
    const details = () => documents.show("environment.md", environmentMarkdown(mgr.lastStatus, env, mgr.interpreter?.path));
    if (env?.summary) {
      const c = await vscode.window.showInformationMessage(`AttnLens environment: ${env.summary}`, "Details");
      if (c === "Details") {
        await details();
      }
    } else {
      const c = await vscode.window.showWarningMessage(
        `AttnLens: environment unavailable: ${envError ?? "the server returned no summary"}`,
        "Details",
        "Show Log",
      );
      if (c === "Details") {
        await details();
      } else if (c === "Show Log") {
        output.show(true);
      }
    }
  });

  const trace = async (uri: vscode.Uri, pos: vscode.Position) => {
    let chain: Chain | null = null;
    try {
      chain = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Window, title: "AttnLens: tracing" },
        () => mgr.executeCommand<Chain | null>("attnlens.trace", [uri.toString(), pos.line, pos.character]),
      );
    } catch (e) {
      showCommandError("trace", e, output);
      return;
    }
    const where = `${path.basename(uri.fsPath)}:${pos.line + 1}:${pos.character + 1}`;
    if (!chain || typeof chain !== "object" || (!chain.hops?.length && !chain.final)) {
      void vscode.window.showInformationMessage(`AttnLens: nothing to trace at ${where}${chain?.error ? ` (${chain.error})` : ""}.`);
      return;
    }
    output.info(`[trace ${where}]\n${chainPlain(chain)}`);
    const name = `trace ${where.replace(/:/g, "_")}.md`;
    TracePanel.show(chain, where, chainMarkdown(chain, where), (md) => void documents.show(name, md, { preview: false }));
  };
  reg("attnlens.traceAtCursor", async () => {
    const editor = vscode.window.activeTextEditor;
    if (!editor || editor.document.uri.scheme !== "file") {
      void vscode.window.showInformationMessage("AttnLens: open a Python file and put the cursor on a call to trace it.");
      return;
    }
    await trace(editor.document.uri, editor.selection.active);
  });
  reg("attnlens.traceItem", async (node?: Node) => {
    const loc = node?.type === "site" ? callSiteLoc(node.site) : undefined;
    if (hasLoc(loc)) {
      await trace(toUri(loc.path), new vscode.Position(Math.max((loc.line ?? 1) - 1, 0), loc.col ?? 0));
    }
  });

  // args: [{scope?: string[] (globs)}]; the server's default format is Markdown.
  reg("attnlens.showInventory", async (arg?: { scope?: string[] }) => {
    const spec: { scope?: string[] } = Array.isArray(arg?.scope) ? { scope: arg.scope } : {};
    try {
      const res = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: "AttnLens: building the inventory…" },
        () => mgr.executeCommand<{ markdown?: string } | string>("attnlens.inventory", [spec]),
      );
      const md = typeof res === "string" ? res : res?.markdown;
      if (!md) {
        throw new Error("the server returned no markdown");
      }
      await documents.show("inventory.md", md);
    } catch (e) {
      showCommandError("inventory", e, output);
    }
  });

  // Asks only for what the caller did not name; the server's pre-flight check may answer "not run" (why, next step).
  const runProbe = (prefill: Partial<ProbeRequest> = {}) =>
    runProbeFlow({ mgr, probes, probesView: probesView as vscode.TreeView<unknown>, output }, prefill);
  // Also the target of server code actions / hover links: args [{family?, target?, device?}].
  reg("attnlens.runProbe", (arg?: unknown) => {
    if (arg && typeof arg === "object" && !Array.isArray(arg)) {
      return runProbe(arg as Partial<ProbeRequest>);
    }
    return runProbe(typeof arg === "string" ? { target: arg } : {});
  });
  reg("attnlens.probeItem", (node?: Node) => runProbe(node?.type === "site" ? { target: probeTargetFor(node.site) } : {}));
  reg("attnlens.showProbe", (run?: ProbeRun) => {
    const r = run?.record ?? probes.all[0]?.record;
    if (!r) {
      return;
    }
    const at = run ? new Date(run.at).toTimeString().slice(0, 8).replace(/:/g, "-") : "";
    const name = `probe ${r.family ?? ""} ${(r.target ?? "").replace(/[/:\\]/g, "_")} ${at}`.trim();
    return documents.show(`${name}.md`, probeMarkdown(r));
  });
  reg("attnlens.clearProbes", () => probes.clear());
  reg("attnlens.runProbeMatrix", async (arg?: unknown) => {
    if (!vscode.workspace.isTrusted) {
      void vscode.window.showWarningMessage("AttnLens: probes are disabled in an untrusted workspace (a probe runs this workspace's code).");
      return undefined;
    }
    let req: Record<string, unknown> | undefined = arg && typeof arg === "object" ? (arg as Record<string, unknown>) : undefined;
    if (!req) {
      const file = vscode.window.activeTextEditor?.document.uri;
      const picks = [
        { label: "Campaign file (TOML)\u2026", value: "campaign" },
        ...(file?.scheme === "file" ? [{ label: "Every probe `attnlens check` asks for in this file", value: "check" }] : []),
      ];
      const pick = await vscode.window.showQuickPick(picks, { title: "AttnLens: run probe matrix" });
      if (!pick) return undefined;
      if (pick.value === "campaign") {
        const f = await vscode.window.showOpenDialog({ filters: { "Probe campaign": ["toml"] }, canSelectMany: false });
        if (!f?.[0]) return undefined;
        req = { campaign: f[0].fsPath };
      } else {
        req = { fromCheck: [file!.fsPath] };
      }
      const ray = vscode.workspace.getConfiguration("attnlens").get<string>("probe.rayAddress");
      if (ray) req.rayAddress = ray;
    }
    type MatrixReply = { matrix?: { headline?: string[]; campaign?: string }; records?: ProbeRecord[] };
    let reply: MatrixReply | undefined;
    try {
      reply = await vscode.window.withProgress(
        { location: vscode.ProgressLocation.Notification, title: "AttnLens: probe matrix", cancellable: true },
        (_p, token) => mgr.executeCommand<MatrixReply>("attnlens.probeMatrix", [req], token),
      );
    } catch (e) {
      showCommandError("probe matrix", e, output);
      return undefined;
    }
    probes.addMany(reply?.records ?? []);
    const head = reply?.matrix?.headline ?? [];
    void vscode.window.showInformationMessage(
      `AttnLens probe matrix ${reply?.matrix?.campaign ?? ""}: ${head.length ? head[0].replace(/`/g, "") : "no difference between hosts"}`,
    );
    return reply;
  });

  // Not awaited: activation must not wait for the interpreter check and the server's initialize.
  void mgr.start();
}

export async function deactivate(): Promise<void> {
  await server?.shutdown();
  server = undefined;
}
