import * as vscode from "vscode";
import { ProbeRecord } from "./types";

const STATE_KEY = "attnlens.probeRuns";
const MAX_RUNS = 50;

export interface ProbeRun {
  record: ProbeRecord;
  at: number;
}

/** A host of the "Probe runs" view: runs from a probe matrix carry details.host; single runs are "this machine". */
export interface HostGroup {
  host: string;
}

type Item = ProbeRun | HostGroup;

export function hostOf(r: ProbeRecord): string {
  const d = r.details as { host?: { name?: unknown } } | undefined;
  return typeof d?.host?.name === "string" && d.host.name ? d.host.name : "this machine";
}

/** "Probe runs" view: evidence records returned by attnlens.runProbe and attnlens.probeMatrix (kept in
 * workspace state), grouped by host when more than one host has runs. */
export class ProbesProvider implements vscode.TreeDataProvider<Item>, vscode.Disposable {
  private runs: ProbeRun[];
  private readonly emitter = new vscode.EventEmitter<Item | undefined | void>();
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

  addMany(records: ProbeRecord[]): void {
    const at = Date.now();
    this.runs = [...records.map((record) => ({ record, at })), ...this.runs].slice(0, MAX_RUNS * 4);
    void this.memento.update(STATE_KEY, this.runs);
    this.emitter.fire();
  }

  hosts(): string[] {
    return [...new Set(this.runs.map((r) => hostOf(r.record)))];
  }

  clear(): void {
    this.runs = [];
    void this.memento.update(STATE_KEY, this.runs);
    this.emitter.fire();
  }

  getChildren(item?: Item): Item[] {
    const hosts = this.hosts();
    if (!item) {
      return hosts.length > 1 ? hosts.map((host) => ({ host })) : this.runs;
    }
    return "host" in item ? this.runs.filter((r) => hostOf(r.record) === item.host) : [];
  }

  getParent(item: Item): Item | undefined {
    return "record" in item && this.hosts().length > 1 ? { host: hostOf(item.record) } : undefined;
  }

  getTreeItem(item: Item): vscode.TreeItem {
    if ("host" in item) {
      const runs = this.runs.filter((r) => hostOf(r.record) === item.host);
      const failed = runs.filter((r) => (r.record.verdict ?? "").toString() !== "pass").length;
      const g = new vscode.TreeItem(item.host, vscode.TreeItemCollapsibleState.Expanded);
      const env = runs[0]?.record.environment;
      g.description = `${runs.length} run(s)${failed ? `, ${failed} not passing` : ""}`;
      g.tooltip = `${item.host}\n${env?.summary ?? ""}`;
      g.iconPath = new vscode.ThemeIcon("server");
      g.id = `host:${item.host}`;
      g.contextValue = "probeHost";
      return g;
    }
    const run = item;
    const r = run.record;
    const node = this.runItem(run, r);
    return node;
  }

  private runItem(run: ProbeRun, r: ProbeRecord): vscode.TreeItem {
    const verdict = (r.verdict ?? "?").toString();
    const item = new vscode.TreeItem(`${r.family ?? "?"} · ${r.target ?? "?"}`, vscode.TreeItemCollapsibleState.None);
    const hash = r.environment?.hash ? r.environment.hash.slice(0, 10) : "?";
    // the verdict, then the server's one-line reason (why it failed, or why it was not run)
    item.description = `${verdict === "not_run" ? "not run" : verdict}${r.reason ? ` · ${r.reason}` : ""} · env ${hash}`;
    const v = verdict.toLowerCase();
    item.iconPath =
      v.startsWith("pass") || v === "ok" || v === "conformant"
        ? new vscode.ThemeIcon("pass", new vscode.ThemeColor("testing.iconPassed"))
        : v.startsWith("fail") || v.includes("mismatch") || v.includes("error")
          ? new vscode.ThemeIcon("error", new vscode.ThemeColor("testing.iconFailed"))
          : new vscode.ThemeIcon("warning", new vscode.ThemeColor("testing.iconSkipped"));
    const cases = r.cases ?? [];
    const passed = cases.filter((c) => c.passed === true || c.status === "pass").length;
    const why = `${r.reason ? `\nreason: ${r.reason}` : ""}${r.next ? `\nnext step: ${r.next}` : ""}`;
    item.tooltip = `${r.family} on ${r.target}\nverdict: ${verdict}${why}\ncases: ${passed}/${cases.length} passed\nenvironment: ${r.environment?.summary ?? "?"} (${r.environment?.hash ?? "?"})\n${new Date(run.at).toLocaleString()}`;
    item.command = { command: "attnlens.showProbe", title: "Show probe details", arguments: [run] };
    item.contextValue = "probeRun";
    return item;
  }

  dispose(): void {
    this.emitter.dispose();
  }
}
