import * as vscode from "vscode";
import { BackendKernels, KernelTarget, reachWords } from "./kernels";
import { ServerManager } from "./server";
import { Backend, CallSite, ClassRef, Final, Loc, OpRegistration } from "./types";
import { displayPath, errorMessage, hasLoc, locLabel, mdCode, shortName, toUri } from "./util";

type Role = "impl" | "builder" | "metadata" | "upstream";
const ROLES: Role[] = ["impl", "builder", "metadata", "upstream"];

export type Node =
  | { type: "backend"; backend: Backend; key: string }
  | { type: "registrations"; backend: Backend; key: string }
  | { type: "registration"; loc: Loc & { form?: string | null; registrar?: string | null }; key: string }
  | { type: "class"; role: Role; ref: ClassRef; sites: CallSite[]; key: string }
  | { type: "sites"; label: string; sites: CallSite[]; key: string }
  | { type: "site"; site: CallSite; key: string }
  | { type: "target"; final: Final; key: string }
  | { type: "opreg"; reg: OpRegistration; key: string }
  | { type: "kernels"; backend: string; group: BackendKernels; key: string }
  | { type: "ktarget"; backend: string; target: KernelTarget; key: string }
  | { type: "ksite"; site: NonNullable<KernelTarget["sites"]>[number]; key: string };

const KIND_ICONS: Record<string, string> = {
  torch_op: "symbol-event",
  triton_kernel: "zap",
  cuda_kernel: "zap",
  cpp_function: "symbol-method",
  extension_function: "symbol-method",
  python_function: "symbol-function",
  python_class: "symbol-class",
  dummy: "circle-slash",
  not_installed: "warning",
  unresolved: "question",
};

/** A final target's kind in plain words (the server's render.KIND_WORDS). */
const KIND_WORDS: Record<string, string> = {
  torch_op: "torch op",
  triton_kernel: "Triton kernel",
  extension_function: "native extension",
  python_function: "Python",
  python_class: "class",
  dummy: "dummy",
  not_installed: "not installed",
  unresolved: "unresolved",
  fork: "several targets",
};

/** `reshape_and_cache_flash (torch op)`: a final target by its last name and its kind in words. */
export function readableFinal(f: Final | null | undefined): string {
  if (!f) {
    return "?";
  }
  const sym = f.symbol ?? "";
  const name = sym.includes("::") ? sym : shortName(sym);
  const kind = KIND_WORDS[f.kind ?? ""] ?? f.kind ?? "?";
  return name ? `${name} (${kind})` : kind;
}

/** Whether the Kernels grouping is shown (setting attnlens.kernelsView). */
function kernelsViewOn(): boolean {
  return vscode.workspace.getConfiguration("attnlens").get<boolean>("kernelsView") ?? true;
}

function className(ref: ClassRef | null | undefined): string {
  return ref?.class ?? ref?.cls ?? "";
}

function openCommand(loc: Loc | null | undefined): vscode.Command | undefined {
  if (!hasLoc(loc)) {
    return undefined;
  }
  return { command: "attnlens.openLocation", title: "Open", arguments: [{ path: loc.path, line: loc.line, col: loc.col }] };
}

/** Call sites in attnlens.backends carry a 1-based `col` (like the CLI's FILE:LINE:COL). */
export function callSiteLoc(site: CallSite): Loc {
  return { path: site.path, line: site.line, col: site.col ? site.col - 1 : 0 };
}

/** Call-site label: `reshape_and_cache_flash → _C_cache_ops::reshape_and_cache_flash (torch op)` */
export function callSiteLabel(site: CallSite): string {
  return `${site.call ?? "?"} → ${readableFinal(site.final)}`;
}

/** Split a backend's call sites by the class (impl, builder, ...) whose method contains them. */
function groupSites(b: Backend): { byRole: Map<Role, CallSite[]>; other: CallSite[] } {
  const byRole = new Map<Role, CallSite[]>();
  const other: CallSite[] = [];
  const names = new Map<string, Role>();
  for (const role of ROLES) {
    const n = shortName(className(b[role]));
    if (n && !names.has(n)) {
      names.set(n, role);
    }
  }
  for (const s of b.call_sites ?? []) {
    const owner = (s.scope ?? "").split(".")[0];
    const role = names.get(owner);
    if (role) {
      byRole.set(role, [...(byRole.get(role) ?? []), s]);
    } else {
      other.push(s);
    }
  }
  return { byRole, other };
}

export class BackendsProvider implements vscode.TreeDataProvider<Node>, vscode.Disposable {
  private backends: Backend[] | undefined;
  private kernels = new Map<string, BackendKernels>(); // "kind:name" -> the backend's Kernels grouping
  private readonly emitter = new vscode.EventEmitter<Node | undefined | void>();
  readonly onDidChangeTreeData = this.emitter.event;
  view: vscode.TreeView<Node> | undefined;
  private loading: Promise<void> | undefined;
  private lastNotified: string | undefined;
  private loadedGeneration: unknown = undefined;

  private readonly configSub: vscode.Disposable;

  constructor(private readonly server: ServerManager) {
    this.configSub = vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("attnlens.kernelsView")) {
        void this.refresh(false);
      }
    });
  }

  attach(view: vscode.TreeView<Node>): void {
    this.view = view;
  }

  get count(): number {
    return this.backends?.length ?? 0;
  }

  /** Fetch attnlens.backends. `explicit`: user asked (always notify on error). */
  refresh(explicit = false, generation?: unknown): Promise<void> {
    if (this.loading) {
      return this.loading;
    }
    this.loading = this.load(explicit, generation).finally(() => {
      this.loading = undefined;
    });
    return this.loading;
  }

  /** Refresh when the index generation changed (attnlens/status). */
  onGeneration(generation: unknown): void {
    if (generation === undefined || generation !== this.loadedGeneration) {
      void this.refresh(false, generation);
    }
  }

  private async load(explicit: boolean, generation?: unknown): Promise<void> {
    const task = async () => {
      try {
        const result = await this.server.executeCommand<Backend[]>("attnlens.backends");
        this.backends = Array.isArray(result) ? result : [];
        this.kernels = await this.loadKernels();
        this.loadedGeneration = generation ?? this.server.lastStatus?.generation;
        this.lastNotified = undefined;
        if (this.view) {
          this.view.message = this.backends.length ? undefined : "The server found no registered attention backends in this workspace.";
          this.view.description = this.backends.length ? `${this.backends.length}` : undefined;
        }
      } catch (e) {
        const msg = errorMessage(e);
        this.server.log(`backends: ${msg}`);
        if (this.view) {
          this.view.message = `Could not list backends: ${msg}`;
        }
        if (explicit || msg !== this.lastNotified) {
          this.lastNotified = msg;
          void vscode.window.showWarningMessage(`AttnLens: could not list backends: ${msg}`, "Show Log").then((c) => {
            if (c === "Show Log") {
              this.server.output.show(true);
            }
          });
        }
      }
      this.emitter.fire();
    };
    await vscode.window.withProgress({ location: { viewId: "attnlens.backends" }, title: "Listing attention backends" }, task);
  }

  /** attnlens.kernels (per backend: distinct final targets -> their call sites); empty when off or unavailable. */
  private async loadKernels(): Promise<Map<string, BackendKernels>> {
    const out = new Map<string, BackendKernels>();
    if (!kernelsViewOn()) {
      return out;
    }
    try {
      const got = await this.server.executeCommand<BackendKernels[]>("attnlens.kernels");
      for (const k of Array.isArray(got) ? got : []) {
        out.set(`${k.kind ?? ""}:${k.name ?? ""}`, k);
      }
    } catch (e) {
      this.server.log(`kernels: ${errorMessage(e)}`); // an older server: the view works without the grouping
    }
    return out;
  }

  clear(message?: string): void {
    this.backends = undefined;
    this.loadedGeneration = undefined;
    if (this.view) {
      this.view.message = message;
      this.view.description = undefined;
    }
    this.emitter.fire();
  }

  getChildren(node?: Node): Node[] {
    if (!node) {
      return (this.backends ?? []).map((b, i) => ({ type: "backend", backend: b, key: `b${i}` }));
    }
    switch (node.type) {
      case "backend": {
        const b = node.backend;
        const out: Node[] = [];
        const group = this.kernels.get(`${b.kind ?? ""}:${b.name ?? ""}`);
        if (group && (group.targets ?? []).length) {
          out.push({ type: "kernels", backend: b.name ?? "", group, key: `${node.key}/kernels` });
        }
        if ((b.registered_at ?? []).length) {
          out.push({ type: "registrations", backend: b, key: `${node.key}/reg` });
        }
        const { byRole, other } = groupSites(b);
        for (const role of ROLES) {
          const ref = b[role];
          if (ref && (className(ref) || hasLoc(ref))) {
            out.push({ type: "class", role, ref, sites: byRole.get(role) ?? [], key: `${node.key}/${role}` });
          }
        }
        if (other.length) {
          out.push({ type: "sites", label: "other kernel call sites", sites: other, key: `${node.key}/other` });
        }
        return out;
      }
      case "registrations":
        return (node.backend.registered_at ?? []).map((r, i) => ({ type: "registration", loc: r, key: `${node.key}/${i}` }));
      case "kernels":
        return (node.group.targets ?? []).map((t, i) => ({ type: "ktarget", backend: node.backend, target: t, key: `${node.key}/${i}` }));
      case "ktarget":
        return (node.target.sites ?? []).map((s, i) => ({ type: "ksite", site: s, key: `${node.key}/${i}` }));
      case "class":
      case "sites":
        return node.sites.map((s, i) => ({ type: "site", site: s, key: `${node.key}/${i}` }));
      case "site": {
        const f = node.site.final;
        if (!f) {
          return [];
        }
        const out: Node[] = [{ type: "target", final: f, key: `${node.key}/t` }];
        for (const [i, r] of (f.registrations ?? []).entries()) {
          out.push({ type: "opreg", reg: r, key: `${node.key}/r${i}` });
        }
        return out;
      }
      default:
        return [];
    }
  }

  getTreeItem(node: Node): vscode.TreeItem {
    const C = vscode.TreeItemCollapsibleState;
    switch (node.type) {
      case "backend": {
        const b = node.backend;
        const item = new vscode.TreeItem(b.name ?? shortName(b.class) ?? "?", C.Collapsed);
        item.description = `${b.kind ?? ""} · ${shortName(b.class)}`;
        item.iconPath = new vscode.ThemeIcon("symbol-class");
        item.tooltip = new vscode.MarkdownString(
          [`**${b.name ?? ""}** (${b.kind ?? "?"})`, "", `\`${b.class ?? ""}\``, b.enum ? `\n\nenum: \`${b.enum}\`` : "", hasLoc(b) ? `\n\n${displayPath(b.path)}:${b.line ?? ""}` : ""].join(""),
        );
        item.command = openCommand(b);
        item.contextValue = "backend";
        item.id = node.key;
        return item;
      }
      case "registrations": {
        const regs = node.backend.registered_at ?? [];
        const item = new vscode.TreeItem("registered at", C.Collapsed);
        item.description = `${regs.length}`;
        item.iconPath = new vscode.ThemeIcon("references");
        item.id = node.key;
        return item;
      }
      case "registration": {
        const r = node.loc;
        const item = new vscode.TreeItem(locLabel(r) || "?", C.None);
        item.description = [r.form, shortName(r.registrar)].filter(Boolean).join(" · ");
        item.tooltip = `${displayPath(r.path)}:${r.line ?? ""}${r.registrar ? `\n${r.registrar}` : ""}`;
        item.iconPath = new vscode.ThemeIcon("location");
        item.command = openCommand(r);
        item.resourceUri = hasLoc(r) ? toUri(r.path) : undefined;
        item.id = node.key;
        return item;
      }
      case "class": {
        const name = className(node.ref);
        const item = new vscode.TreeItem(`${node.role} ${shortName(name) || "?"}`, node.sites.length ? C.Collapsed : C.None);
        item.description = [hasLoc(node.ref) ? locLabel(node.ref) : "", node.sites.length ? `${node.sites.length} call sites` : ""].filter(Boolean).join(" · ");
        item.tooltip = `${name}${hasLoc(node.ref) ? `\n${displayPath(node.ref.path)}:${node.ref.line ?? ""}` : ""}${node.ref.note ? `\n${node.ref.note}` : ""}`;
        item.iconPath = new vscode.ThemeIcon(node.role === "upstream" ? "cloud" : "symbol-class");
        item.command = openCommand(node.ref);
        item.contextValue = `class.${node.role}`;
        item.id = node.key;
        return item;
      }
      case "sites": {
        const item = new vscode.TreeItem(node.label, C.Collapsed);
        item.description = `${node.sites.length}`;
        item.iconPath = new vscode.ThemeIcon("list-flat");
        item.id = node.key;
        return item;
      }
      case "site": {
        const s = node.site;
        const f = s.final;
        const hasChildren = !!f;
        const item = new vscode.TreeItem(callSiteLabel(s), hasChildren ? C.Collapsed : C.None);
        item.description = `${locLabel(s)}${s.reachable === false ? " · unreachable" : ""}`;
        const tip = new vscode.MarkdownString();
        tip.appendMarkdown(`\`${s.call ?? ""}\` in \`${s.scope ?? ""}\`\n\n`);
        tip.appendMarkdown(`→ **${f?.kind ?? "?"}** \`${f?.symbol ?? ""}\``);
        if (hasLoc(f)) {
          tip.appendMarkdown(` — ${displayPath(f.path)}:${f.line ?? ""}`);
        }
        if (f?.reason) {
          tip.appendMarkdown(`\n\n${f.reason}`);
        }
        if (s.hops) {
          tip.appendMarkdown(`\n\n${s.hops} hops · reachable: ${s.reachable === true ? "yes" : s.reachable === false ? "no" : "unknown"}`);
        }
        item.tooltip = tip;
        item.iconPath = new vscode.ThemeIcon(KIND_ICONS[f?.kind ?? ""] ?? "symbol-event", s.reachable === false ? new vscode.ThemeColor("disabledForeground") : undefined);
        item.command = openCommand(callSiteLoc(s));
        item.contextValue = "callSite";
        item.id = node.key;
        return item;
      }
      case "kernels": {
        const item = new vscode.TreeItem("Kernels", C.Collapsed);
        item.description = node.group.counts ?? `${(node.group.targets ?? []).length}`;
        item.tooltip = "The distinct code the backend's call sites finally run, each with the call sites that reach it";
        item.iconPath = new vscode.ThemeIcon("circuit-board");
        item.contextValue = "kernels";
        item.id = node.key;
        return item;
      }
      case "ktarget": {
        const t = node.target;
        const n = (t.sites ?? []).length;
        const dead = t.reachability === "dead";
        const item = new vscode.TreeItem(t.name ?? "?", n ? C.Collapsed : C.None);
        item.description = [t.tag ?? KIND_WORDS[t.kind ?? ""] ?? t.kind, t.path ? locLabel({ path: t.path, line: t.line }) : "", `${n} call site${n === 1 ? "" : "s"}`,
          dead ? "not taken here" : t.reachability === "runtime" ? "at run time" : ""].filter(Boolean).join(" · ");
        const tip = new vscode.MarkdownString();
        tip.appendMarkdown(`${mdCode(t.full)} — ${KIND_WORDS[t.kind ?? ""] ?? t.kind ?? "?"}, ${reachWords(t.reachability)}`);
        if (t.path) {
          tip.appendMarkdown(`\n\n${displayPath(t.path)}:${t.line ?? ""}`);
        }
        if (t.reason) {
          tip.appendMarkdown(`\n\n${t.reason}`);
        }
        item.tooltip = tip;
        item.iconPath = new vscode.ThemeIcon(KIND_ICONS[t.kind ?? ""] ?? "target", dead ? new vscode.ThemeColor("disabledForeground") : undefined);
        item.command = openCommand({ path: t.path, line: t.line });
        item.contextValue = "kernelTarget";
        item.id = node.key;
        return item;
      }
      case "ksite": {
        const s = node.site;
        const item = new vscode.TreeItem(s.call ?? "?", C.None);
        item.description = locLabel(s);
        item.tooltip = `${displayPath(s.path)}:${s.line ?? ""}`;
        item.iconPath = new vscode.ThemeIcon("call-outgoing");
        item.command = openCommand({ path: s.path, line: s.line, col: s.col });
        item.contextValue = "kernelCallSite";
        item.id = node.key;
        return item;
      }
      case "target": {
        const f = node.final;
        const item = new vscode.TreeItem(`→ ${readableFinal(f)}`, C.None);
        item.description = hasLoc(f) ? locLabel(f) : (f.reason ?? f.detail ?? "");
        item.tooltip = [f.detail, f.reason, f.schema, ...(f.providers ?? [])].filter(Boolean).join("\n") || undefined;
        item.iconPath = new vscode.ThemeIcon(KIND_ICONS[f.kind ?? ""] ?? "target");
        item.command = openCommand(f);
        item.id = node.key;
        return item;
      }
      case "opreg": {
        const r = node.reg;
        const fn = r.function ? ` → ${r.function}` : "";
        const item = new vscode.TreeItem(`${r.kind ?? "registration"}${r.dispatch_key ? ` ${r.dispatch_key}` : ""}${fn}`, C.None);
        const target: Loc = r.function_path ? { path: r.function_path, line: r.function_line } : r;
        item.description = hasLoc(target) ? locLabel(target) : "";
        item.tooltip = [r.schema, hasLoc(r) ? `${displayPath(r.path)}:${r.line ?? ""}` : ""].filter(Boolean).join("\n") || undefined;
        item.iconPath = new vscode.ThemeIcon("link");
        item.command = openCommand(target);
        item.id = node.key;
        return item;
      }
    }
  }

  dispose(): void {
    this.configSub.dispose();
    this.emitter.dispose();
  }
}

/** Probe target for a call site's final target: `ns::op` for torch ops, the dotted symbol otherwise. */
export function probeTargetFor(site: CallSite): string {
  const f = site.final;
  if (f?.symbol && f.kind && f.kind !== "unresolved" && f.kind !== "not_installed") {
    return f.symbol;
  }
  return site.call ?? "";
}
