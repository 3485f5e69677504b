import * as vscode from "vscode";
import { ServerManager } from "./server";
import { EnvironmentRecord, ServerStatus } from "./types";
import { mdCode, mdEscape } from "./util";

/** `vLLM 0.26` from the environment record's packages (major.minor only: the status bar is narrow). */
export function vllmWords(env: EnvironmentRecord | undefined): string | undefined {
  const packages = env?.packages as Record<string, { version?: string }> | undefined;
  const v = packages?.vllm?.version;
  if (!v) {
    return undefined;
  }
  const m = /^(\d+)\.(\d+)/.exec(String(v));
  return `vLLM ${m ? `${m[1]}.${m[2]}` : v}`;
}

/** `CPU`, `H200`, `2× H200`: the devices the target environment sees. */
export function deviceWords(env: EnvironmentRecord | undefined): string | undefined {
  const gpu = env?.gpu as { count?: number; models?: string[]; vendor?: string | null } | undefined;
  if (!gpu) {
    return undefined;
  }
  if (!gpu.count) {
    return "CPU";
  }
  const model = (gpu.models?.[0] ?? gpu.vendor ?? "GPU").replace(/^(NVIDIA|AMD|MetaX|Intel)\s+/i, "");
  return gpu.count > 1 ? `${gpu.count}× ${model}` : model;
}

/** `AttnLens · vLLM 0.26 · CPU` (what is known of it). */
export function statusText(env: EnvironmentRecord | undefined): string {
  return ["AttnLens", vllmWords(env), deviceWords(env)].filter(Boolean).join(" · ");
}

/** The full record behind the status bar item, as Markdown. */
export function environmentTooltip(status: ServerStatus | undefined, env: EnvironmentRecord | undefined): vscode.MarkdownString {
  const tip = new vscode.MarkdownString(undefined, true);
  const rows: [string, string][] = [];
  const add = (k: string, v: unknown) => {
    if (v !== undefined && v !== null && v !== "") {
      rows.push([k, typeof v === "string" ? v : JSON.stringify(v)]);
    }
  };
  tip.appendMarkdown(`**${statusText(env)}**\n\n`);
  if (env?.summary) {
    tip.appendMarkdown(`${mdEscape(env.summary)}\n\n`);
  }
  const py = env?.python as { version?: string; executable?: string } | undefined;
  add("target Python", py?.executable ? `${py.executable} (${py.version ?? "?"})` : status?.targetPython);
  const torch = env?.torch as { version?: string; error?: string; cuda?: string; hip?: string } | undefined;
  add("torch", torch?.version ? `${torch.version}${torch.cuda ? ` (CUDA ${torch.cuda})` : torch.hip ? ` (HIP ${torch.hip})` : ""}` : torch?.error);
  const triton = env?.triton as { present?: boolean; version?: string } | undefined;
  add("triton", triton ? (triton.present ? triton.version ?? "present" : "not installed") : undefined);
  const gpu = env?.gpu as { count?: number; models?: string[] } | undefined;
  add("devices", gpu ? (gpu.count ? `${gpu.count}× ${(gpu.models ?? []).join(", ")}` : "no GPU (CPU only)") : undefined);
  const packages = env?.packages as Record<string, { version?: string }> | undefined;
  for (const [name, p] of Object.entries(packages ?? {})) {
    add(name, p?.version ?? "?");
  }
  if (env?.hash) {
    add("environment record", String(env.hash).slice(0, 12));
  }
  if (status) {
    add("workspace", status.root ?? "?");
    const platform = status.platform as { classes?: string[]; enum?: string | null } | null | undefined;
    add("platform", platform?.classes?.length ? `${platform.classes.join(", ")}${platform.enum ? ` (${platform.enum})` : ""}` : undefined);
    add("modules indexed", status.indexedModules);
    add("backends", status.backends);
    add("index generation", status.generation);
    add("server", status.serverVersion);
    add("target error", status.targetError);
  }
  if (rows.length) {
    tip.appendMarkdown("| | |\n|---|---|\n" + rows.map(([k, v]) => `| ${mdEscape(k)} | ${mdCode(v)} |`).join("\n") + "\n\n");
  }
  tip.appendMarkdown("Click for the environment details.");
  return tip;
}

/** Status bar item: `AttnLens · vLLM 0.26 · CPU`, the full record in the tooltip, the indexing progress. */
export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly subs: vscode.Disposable[] = [];

  constructor(private readonly server: ServerManager) {
    this.item = vscode.window.createStatusBarItem("attnlens.status", vscode.StatusBarAlignment.Left, 50);
    this.item.name = "AttnLens";
    this.item.command = "attnlens.showEnvironment";
    this.subs.push(
      server.onDidChangeState(() => this.update()),
      server.onStatus(() => this.update()),
      server.onProgress(() => this.update()),
      server.onEnvironment(() => this.update()),
      vscode.workspace.onDidChangeConfiguration((e) => {
        if (e.affectsConfiguration("attnlens.statusBar")) {
          this.update();
        }
      }),
    );
    this.update();
  }

  update(): void {
    const s = this.server;
    const status = s.lastStatus;
    const progress = s.currentProgress;
    const env = s.environment;
    this.item.backgroundColor = undefined;
    if (s.state === "failed") {
      this.item.text = "$(error) AttnLens";
      this.item.command = "attnlens.showOutput";
      this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.errorBackground");
      this.item.tooltip = new vscode.MarkdownString(`**AttnLens**\n\nServer failed: ${mdEscape(s.lastError ?? "see the AttnLens output")}\n\nClick for the log.`);
    } else if (s.state === "starting") {
      this.item.text = "$(loading~spin) AttnLens: starting";
      this.item.command = "attnlens.showOutput";
      this.item.tooltip = "Starting the language server…";
    } else if (s.state === "stopped") {
      this.item.text = "$(circle-slash) AttnLens: stopped";
      this.item.command = "attnlens.restartServer";
      this.item.tooltip = "The language server is not running. Click to restart it.";
    } else {
      this.item.command = "attnlens.showEnvironment";
      if (progress) {
        const pct = progress.percentage !== undefined ? ` ${Math.round(progress.percentage)}%` : "";
        const title = progress.title.replace(/^AttnLens:\s*/i, "");
        this.item.text = `$(sync~spin) AttnLens: ${title}${pct}`;
      } else if (status?.targetError) {
        this.item.text = `$(warning) ${statusText(env)}`;
        this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.warningBackground");
      } else if (status || env) {
        this.item.text = statusText(env);
      } else {
        this.item.text = "$(sync~spin) AttnLens: indexing";
      }
      this.item.tooltip = environmentTooltip(status, env);
    }
    const show = vscode.workspace.getConfiguration("attnlens").get<boolean>("statusBar") ?? true;
    if (show) {
      this.item.show();
    } else {
      this.item.hide();
    }
  }

  dispose(): void {
    this.subs.forEach((d) => d.dispose());
    this.item.dispose();
  }
}
