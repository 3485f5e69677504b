// Shapes of the JSON returned by the AttnLens server's workspace/executeCommand commands.
// Line numbers are 1-based and columns 0-based (as in `attnlens trace --json`); line 0 or an
// empty path means "no source location".  Every field is optional on purpose: the client must
// survive an older or newer server.

export interface Loc {
  path?: string | null;
  line?: number | null;
  col?: number | null;
}

export interface ClassRef extends Loc {
  class?: string | null;
  cls?: string | null;
  note?: string | null;
}

export interface Registration extends Loc {
  form?: string | null;
  registrar?: string | null;
}

export interface OpRegistration extends Loc {
  kind?: string | null;
  dispatch_key?: string | null;
  function?: string | null;
  function_path?: string | null;
  function_line?: number | null;
  schema?: string | null;
}

export interface Final extends Loc {
  kind?: string | null;
  symbol?: string | null;
  package?: string | null;
  reason?: string | null;
  detail?: string | null;
  schema?: string | null;
  registrations?: OpRegistration[];
  providers?: string[];
}

/** A kernel call site of attnlens.backends: unlike chain hops, its `col` is 1-based. */
export interface CallSite extends Loc {
  call?: string | null;
  scope?: string | null;
  final?: Final | null;
  reachable?: boolean | null;
  hops?: number | null;
}

export interface Backend extends Loc {
  name?: string;
  kind?: string | null;
  enum?: string | null;
  class?: string | null;
  registered_at?: Registration[];
  impl?: ClassRef | null;
  builder?: ClassRef | null;
  metadata?: ClassRef | null;
  upstream?: ClassRef | null;
  call_sites?: CallSite[];
}

export interface Hop extends Loc {
  kind?: string | null;
  symbol?: string | null;
  detail?: string | null;
  condition?: string | null;
  reachable?: boolean | null;
}

export interface Chain {
  hops?: Hop[];
  final?: Final | null;
  reachable?: boolean | null;
  error?: string;
}

export interface EnvironmentRecord {
  hash?: string;
  summary?: string;
  [key: string]: unknown;
}

export interface ServerStatus {
  root?: string | null;
  targetPython?: string | null;
  targetError?: string | null;
  generation?: number | null;
  profile?: unknown;
  environment?: EnvironmentRecord | null;
  [key: string]: unknown;
}

export interface ProbeCase {
  name?: string;
  description?: string;
  status?: string;
  passed?: boolean | null;
  [key: string]: unknown;
}

export interface ProbeRecord {
  id?: string;
  family?: string;
  target?: string;
  /** pass, fail, ..., or not_run when the server's pre-flight check found the probe cannot succeed here */
  verdict?: string;
  /** One line: why the probe came out as it did (or why it was not run). */
  reason?: string;
  /** One line: what to do when it was not run. */
  next?: string;
  cases?: ProbeCase[];
  environment?: { hash?: string; summary?: string; [key: string]: unknown } | null;
  error?: unknown;
  [key: string]: unknown;
}

export interface ProbeRequest {
  family: string;
  target: string;
  device?: string;
  /** Where the code action was offered (the server publishes the verdict on that line). */
  uri?: string;
  line?: number;
  character?: number;
  /** What the pre-flight check verifies (from the chain), and an extension to import first. */
  requires?: Record<string, unknown>;
  module?: string;
  /** Skip the pre-flight check ("Run anyway"). */
  force?: boolean;
}

/** Older family names (contracts, earlier diagnostics) -> the one name (attnlens.runtime.probes.FAMILY_ALIASES). */
export const FAMILY_ALIASES: Record<string, string> = {
  varlen_attention: "varlen",
  decode_attention: "decode",
  sparse_topk: "topk",
  kv_write: "kv_cache_write",
  merge_states: "lse_merge",
};

export function canonicalFamily(name: string): string {
  return FAMILY_ALIASES[name] ?? name;
}

/** Probe families known to the server (attnlens.agent.probes.FAMILY_MODULES). */
export const PROBE_FAMILIES: { name: string; description: string; hint: RegExp }[] = [
  { name: "varlen", description: "varlen / paged attention (causal, sliding window, GQA, softcap, sinks)", hint: /varlen|flash_attn|unified_attention|paged_attention|attention_fwd/i },
  { name: "kv_cache_write", description: "KV cache write (reshape_and_cache / slot mapping / fp8 scales)", hint: /cache/i },
  { name: "lse_merge", description: "merge of attention states by log-sum-exp", hint: /merge|lse/i },
  { name: "decode", description: "decode attention (single query token, paged KV)", hint: /decode/i },
  { name: "topk", description: "top-k selection (sparse indexer)", hint: /topk|top_k|indexer/i },
];
