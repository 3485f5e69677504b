import * as vscode from "vscode";
import { ProbesProvider } from "./probesView";
import { ServerManager } from "./server";
import { canonicalFamily, PROBE_FAMILIES, ProbeRecord, ProbeRequest } from "./types";
import { showCommandError } from "./util";

export interface ProbeFlow {
  mgr: ServerManager;
  probes: ProbesProvider;
  probesView: vscode.TreeView<unknown>;
  output: vscode.LogOutputChannel;
}

const RUN_ANYWAY = "Run anyway";
const SELECT_TARGET = "Select target Python…";
const DETAILS = "Details";

/** What the user sees first: the verdict in words, then the server's one-line reason. */
export function probeHeadline(r: ProbeRecord): string {
  const verdict = r.verdict === "not_run" ? "not run" : (r.verdict ?? "?");
  return `AttnLens probe ${r.family ?? "?"} on ${r.target ?? "?"}: ${verdict}${r.reason ? ` — ${r.reason}` : ""}`;
}

async function askFamily(target: string): Promise<string | undefined> {
  const guess = PROBE_FAMILIES.find((f) => target && f.hint.test(target))?.name;
  const items = PROBE_FAMILIES.map((f) => ({ label: f.name, description: f.description, picked: f.name === guess }));
  items.sort((a, b) => Number(b.picked) - Number(a.picked));
  const pick = await vscode.window.showQuickPick(items, {
    title: "AttnLens: run probe — family",
    placeHolder: "Which contract should the target be checked against?",
    matchOnDescription: true,
  });
  return pick?.label;
}

async function askTarget(family: string, value: string): Promise<string | undefined> {
  const t = await vscode.window.showInputBox({
    title: `AttnLens: run probe — ${family} target`,
    prompt: "Symbol to probe: package.module:attr, package.module.attr, ns::op or torch.ops.ns.op",
    value,
    ignoreFocusOut: true,
    validateInput: (v) => (v.trim() ? undefined : "Enter the symbol to probe"),
  });
  return t?.trim() || undefined;
}

/**
 * AttnLens: Run probe. Asks only for what the caller did not give: a code action (or a hover link)
 * names the family and the target, so it runs at once. The server checks first whether the probe can
 * succeed in the target environment; when it cannot, the notification says why in one line and offers
 * the next step (select another target Python, or run anyway).
 */
export async function runProbeFlow(flow: ProbeFlow, prefill: Partial<ProbeRequest> = {}): Promise<ProbeRecord | undefined> {
  if (!vscode.workspace.isTrusted) {
    const c = await vscode.window.showWarningMessage(
      "AttnLens: probes are disabled in an untrusted workspace. A probe imports and runs this workspace's code " +
        "(the plugin and its kernels) in the target interpreter; trust the workspace to run probes.",
      "Manage Workspace Trust",
    );
    if (c) {
      await vscode.commands.executeCommand("workbench.trust.manage");
    }
    return undefined;
  }
  const target0 = (prefill.target ?? "").trim();
  const family = prefill.family ? canonicalFamily(prefill.family) : await askFamily(target0);
  if (!family) {
    return undefined;
  }
  const target = target0 || (await askTarget(family, target0));
  if (!target) {
    return undefined;
  }
  const device = prefill.device || vscode.workspace.getConfiguration("attnlens").get<string>("probe.device") || undefined;
  const req: ProbeRequest = { ...prefill, family, target, ...(device ? { device } : {}) };
  flow.mgr.log(`probe ${family} on ${target}${req.force ? " (run anyway)" : ""}`);
  let record: ProbeRecord;
  try {
    record = await vscode.window.withProgress(
      { location: vscode.ProgressLocation.Notification, title: `AttnLens: probing ${family} on ${target}`, cancellable: true },
      (_p, token) => flow.mgr.executeCommand<ProbeRecord>("attnlens.runProbe", [req], token),
    );
  } catch (e) {
    showCommandError(`probe ${family} on ${target}`, e, flow.output);
    return undefined;
  }
  if (!record || typeof record !== "object" || (record.error && !record.verdict)) {
    const why = record && typeof record === "object" ? JSON.stringify(record.error) : "no record returned";
    showCommandError(`probe ${family} on ${target}`, new Error(why), flow.output);
    return undefined;
  }
  record.family ??= family;
  record.target ??= target;
  const run = flow.probes.add(record);
  void flow.probesView.reveal(run, { select: true, focus: false }).then(undefined, () => undefined);
  const headline = probeHeadline(record);
  flow.mgr.log(headline + (record.next ? `\n  next: ${record.next}` : ""));
  const details = () => vscode.commands.executeCommand("attnlens.showProbe", run);
  // Not awaited: the command resolves with the record while the notification waits for the user.
  if (record.verdict === "not_run") {
    void vscode.window.showWarningMessage(headline, SELECT_TARGET, RUN_ANYWAY, DETAILS).then((c) => {
      if (c === SELECT_TARGET) {
        void vscode.commands.executeCommand("attnlens.selectTargetPython");
      } else if (c === RUN_ANYWAY) {
        void runProbeFlow(flow, { ...req, force: true });
      } else if (c === DETAILS) {
        void details();
      }
    });
  } else {
    const show = record.verdict === "pass" ? vscode.window.showInformationMessage : vscode.window.showWarningMessage;
    void show(headline, DETAILS).then((c) => c === DETAILS && details());
  }
  return record;
}

