import * as vscode from "vscode";
import { ServerManager } from "./server";

/** Status bar item: environment summary, indexing progress, server state. Click: show environment. */
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
    );
    this.update();
    this.item.show();
  }

  update(): void {
    const s = this.server;
    const status = s.lastStatus;
    const progress = s.currentProgress;
    const summary = s.environment?.summary;
    const tip = new vscode.MarkdownString(undefined, true);
    tip.appendMarkdown("**AttnLens**\n\n");
    this.item.backgroundColor = undefined;
    if (s.state === "failed") {
      this.item.text = "$(error) AttnLens";
      this.item.command = "attnlens.showOutput";
      this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.errorBackground");
      tip.appendMarkdown(`Server failed: ${s.lastError ?? "see the AttnLens output"}\n\nClick for the log.`);
    } else if (s.state === "starting") {
      this.item.text = "$(loading~spin) AttnLens: starting";
      this.item.command = "attnlens.showOutput";
      tip.appendMarkdown("Starting the language server…");
    } else if (s.state === "stopped") {
      this.item.text = "$(circle-slash) AttnLens: stopped";
      this.item.command = "attnlens.restartServer";
      tip.appendMarkdown("The language server is not running. Click to restart it.");
    } else {
      this.item.command = "attnlens.showEnvironment";
      if (progress) {
        const pct = progress.percentage !== undefined ? ` ${Math.round(progress.percentage)}%` : "";
        const msg = progress.message ? ` ${progress.message}` : "";
        const title = progress.title.replace(/^AttnLens:\s*/i, "");
        this.item.text = `$(sync~spin) AttnLens: ${title}${msg}${pct}`;
      } else if (status?.targetError) {
        this.item.text = `$(warning) AttnLens${summary ? `: ${summary}` : ""}`;
        this.item.backgroundColor = new vscode.ThemeColor("statusBarItem.warningBackground");
      } else if (summary) {
        this.item.text = `$(pulse) ${summary}`;
      } else if (status) {
        this.item.text = "$(check) AttnLens";
      } else {
        this.item.text = "$(sync~spin) AttnLens: indexing";
      }
      if (summary) {
        tip.appendMarkdown(`Environment: ${summary}\n\n`);
      }
      if (status) {
        tip.appendMarkdown(`Root: \`${status.root ?? "?"}\`\n\nTarget Python: \`${status.targetPython ?? "(default)"}\`\n\n`);
        if (status.targetError) {
          tip.appendMarkdown(`Target error: ${status.targetError}\n\n`);
        }
        tip.appendMarkdown(`Index generation: ${status.generation ?? "?"}\n\n`);
      }
      tip.appendMarkdown("Click to show the environment.");
    }
    this.item.tooltip = tip;
  }

  dispose(): void {
    this.subs.forEach((d) => d.dispose());
    this.item.dispose();
  }
}
