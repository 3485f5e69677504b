import * as vscode from "vscode";
import { ProbeRecord } from "./types";

const STATE_KEY = "attnlens.probeRuns";
const MAX_RUNS = 50;

export interface ProbeRun {
  record: ProbeRecord;
  at: number;
}

/** "Probe runs" view: evidence records returned by attnlens.runProbe (kept in workspace state). */
export class ProbesProvider implements vscode.TreeDataProvider<ProbeRun>, vscode.Disposable {
  private runs: ProbeRun[];
  private readonly emitter = new vscode.EventEmitter<ProbeRun | undefined | void>();
  readonly onDidChangeTreeData = this.emitter.event;

  constructor(private readonly memento: vscode.Memento) {
    this.runs = memento.get<ProbeRun[]>(STATE_KEY, []);
  }

  get all(): readonly ProbeRun[] {
    return this.runs;
  }

  add(record: ProbeRecord): ProbeRun {
    const run = { record, at: Date.now() };
    this.runs = [run, ...this.runs].slice(0, MAX_RUNS);
    void this.memento.update(STATE_KEY, this.runs);
    this.emitter.fire();
    return run;
  }

  clear(): void {
    this.runs = [];
    void this.memento.update(STATE_KEY, this.runs);
    this.emitter.fire();
  }

  getChildren(run?: ProbeRun): ProbeRun[] {
    return run ? [] : this.runs;
  }

  getParent(): undefined {
    return undefined;
  }

  getTreeItem(run: ProbeRun): vscode.TreeItem {
    const r = run.record;
    const verdict = (r.verdict ?? "?").toString();
    const item = new vscode.TreeItem(`${r.family ?? "?"} · ${r.target ?? "?"}`, vscode.TreeItemCollapsibleState.None);
    const hash = r.environment?.hash ? r.environment.hash.slice(0, 10) : "?";
    item.description = `${verdict} · env ${hash}`;
    const v = verdict.toLowerCase();
    item.iconPath =
      v.startsWith("pass") || v === "ok" || v === "conformant"
        ? new vscode.ThemeIcon("pass", new vscode.ThemeColor("testing.iconPassed"))
        : v.startsWith("fail") || v.includes("mismatch") || v.includes("error")
          ? new vscode.ThemeIcon("error", new vscode.ThemeColor("testing.iconFailed"))
          : new vscode.ThemeIcon("warning", new vscode.ThemeColor("testing.iconSkipped"));
    const cases = r.cases ?? [];
    const passed = cases.filter((c) => c.passed === true || c.status === "pass").length;
    item.tooltip = `${r.family} on ${r.target}\nverdict: ${verdict}\ncases: ${passed}/${cases.length} passed\nenvironment: ${r.environment?.summary ?? "?"} (${r.environment?.hash ?? "?"})\n${new Date(run.at).toLocaleString()}`;
    item.command = { command: "attnlens.showProbe", title: "Show probe details", arguments: [run] };
    item.contextValue = "probeRun";
    return item;
  }

  dispose(): void {
    this.emitter.dispose();
  }
}
