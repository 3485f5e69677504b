"""Component contracts: what a kernel entry point promises, and what was seen.

A *contract* describes one component (a varlen attention kernel, a KV-cache
write op, an LSE merge, ...) by the final symbols a resolved chain can end in
(``covers``), the meaning of its parameters, its *capabilities* (sinks,
sliding window, softcap, FP8 KV cache, head sizes, LSE base, ...) and the
*probe family* that can decide a capability on a real device.

``observations`` are versioned records of what someone saw (on which GPU,
runtime and package versions, with which evidence). They are prompts to
revalidate, never unconditional truths: a rule may quote them, but a
capability is "backed" only by the ``capabilities`` table (read from code)
or by a probe result for the environment at hand.

Files are TOML (``contracts/*.toml``)::

    schema_version = 1

    [[contract]]
    id = "vllm.reshape_and_cache_flash"
    family = "kv_cache_write"
    covers = ["_C_cache_ops::reshape_and_cache_flash"]
    probe = "kv_cache_write"
    [contract.parameters]
    slot_mapping = "int64 [num_tokens]; -1 = padding token (skipped)"
    [contract.capabilities]
    fp8_kv_cache = { value = "yes", notes = "kv_cache_dtype='fp8*' with k_scale/v_scale" }
    [[contract.observations]]
    text = "..."
    status = "observed"
    ...

The dataclasses below are the schema; ``python -m attnlens.rules.contracts
--schema`` prints the JSON Schema generated from them (committed as
``contracts/schema.json``). :func:`load_contracts` reports schema errors per
file with line numbers, and a bad file never stops the others.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import fnmatch
import hashlib
import json
import os
import re
import sys
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

try:
    import tomllib  # type: ignore[import-not-found]
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

SCHEMA_VERSION = 1
_UNIONS = (Union, types.UnionType)

Family = Literal[
    "varlen_attention",
    "paged_attention",
    "decode_attention",
    "triton_attention",
    "kv_cache_write",
    "kv_cache_gather",
    "lse_merge",
    "mla_decode",
    "mla_prefill",
    "sparse_topk",
]
# Probe families are named as the probe agent names them (``attnlens probe list``); the older contract
# spellings (varlen_attention, decode_attention, sparse_topk) are accepted and read as those names.
ProbeFamily = Literal["varlen", "kv_cache_write", "lse_merge", "decode", "topk",
                      "varlen_attention", "decode_attention", "sparse_topk"]
CapabilityName = Literal[
    "sinks",
    "sliding_window",
    "softcap",
    "alibi",
    "gqa",
    "fp8_kv_cache",
    "int8_kv_cache",
    "scale_layout",
    "head_sizes",
    "lse_base",
    "dcp",
    "return_lse",
    "kv_layout",
    "block_sizes",
    "diff_head_dims",
    "cuda_graph",
]
CapabilityValue = Literal["yes", "no", "partial", "unknown", "not_applicable"]
ObservationStatus = Literal["observed", "refuted", "needs_revalidation"]

CAPABILITY_NAMES: tuple[str, ...] = get_args(CapabilityName)
FAMILIES: tuple[str, ...] = get_args(Family)
PROBE_FAMILIES: tuple[str, ...] = ("varlen", "kv_cache_write", "lse_merge", "decode", "topk")

# Older spellings -> the one name of each probe family (the agent's module name).
PROBE_AGENT_FAMILY = {
    "varlen_attention": "varlen",
    "kv_cache_write": "kv_cache_write",
    "lse_merge": "lse_merge",
    "decode_attention": "decode",
    "sparse_topk": "topk",
}

# Which probe family decides a capability when the contract names none.
DEFAULT_PROBE_FOR_FAMILY = {
    "varlen_attention": "varlen",
    "paged_attention": "decode",
    "decode_attention": "decode",
    "triton_attention": "varlen",
    "kv_cache_write": "kv_cache_write",
    "kv_cache_gather": "kv_cache_write",
    "lse_merge": "lse_merge",
    "mla_decode": "decode",
    "mla_prefill": "varlen",
    "sparse_topk": "topk",
}


# --------------------------------------------------------------------------- the schema


@dataclass
class Capability:
    """One capability of a component, as read from code (or ``unknown``)."""

    value: CapabilityValue
    values: list[int | str] = field(default_factory=list)  # e.g. head sizes, ["e"] for lse_base
    notes: str = ""
    condition: str = ""  # when it holds, e.g. "fa_version == 3"
    probe: ProbeFamily | None = None  # the probe family that decides it (defaults to the entry's)
    source: str = ""  # where it was read: "vllm/vllm_flash_attn/flash_attn_interface.py:280"


@dataclass
class Environment:
    gpu: str = ""
    runtime: str = ""  # "CUDA 13.0", "MACA 3.x"
    driver: str = ""
    os: str = ""
    notes: str = ""


@dataclass
class Observation:
    """What someone saw. A prompt to revalidate, never an unconditional truth."""

    text: str
    status: ObservationStatus
    date: str  # ISO date (a TOML date is accepted)
    evidence: str  # a reference: file, probe record, issue, commit
    environment: Environment = field(default_factory=Environment)
    packages: dict[str, str] = field(default_factory=dict)  # vllm, torch, triton, plugin, ... -> version
    capability: CapabilityName | None = None


@dataclass
class Contract:
    id: str
    family: Family
    covers: list[str]
    title: str = ""
    summary: str = ""
    source: str = ""  # where the entry was read (package file, version)
    probe: ProbeFamily | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    capabilities: dict[CapabilityName, Capability] = field(default_factory=dict)
    observations: list[Observation] = field(default_factory=list)
    # filled by the loader (not part of the file format)
    file: str = field(default="", metadata={"internal": True})
    line: int = field(default=0, metadata={"internal": True})

    def capability(self, name: str) -> Capability | None:
        return self.capabilities.get(name)  # type: ignore[call-overload]

    def probe_for(self, capability: str | None = None) -> str | None:
        if capability:
            cap = self.capabilities.get(capability)  # type: ignore[call-overload]
            if cap is not None and cap.probe:
                return cap.probe
        fam = self.probe or DEFAULT_PROBE_FOR_FAMILY.get(self.family)
        return PROBE_AGENT_FAMILY.get(fam, fam) if fam else None

    def observations_for(self, capability: str | None) -> list[Observation]:
        return [o for o in self.observations if capability is None or o.capability in (None, capability)]

    def brief(self, capability: str | None = None) -> dict:
        d: dict[str, Any] = {"id": self.id, "family": self.family, "file": self.file, "line": self.line}
        if capability:
            cap = self.capability(capability)
            d["capability"] = capability
            d["value"] = cap.value if cap else "unknown"
            if cap and cap.values:
                d["values"] = list(cap.values)
            if cap and cap.notes:
                d["notes"] = cap.notes
            if cap and cap.condition:
                d["condition"] = cap.condition
            obs = self.observations_for(capability)
            if obs:
                d["observations"] = [
                    {"text": o.text, "status": o.status, "date": o.date, "evidence": o.evidence,
                     "environment": {k: v for k, v in dataclasses.asdict(o.environment).items() if v},
                     "packages": dict(o.packages)}
                    for o in obs
                ]
        return d


@dataclass
class ContractFile:
    """The top level of one ``contracts/*.toml`` file."""

    schema_version: int
    contract: list[Contract] = field(default_factory=list)


# --------------------------------------------------------------------------- JSON Schema


def _public_fields(cls) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if not f.metadata.get("internal")]


def _type_schema(tp, defs: dict) -> dict:
    origin = get_origin(tp)
    if tp is str:
        return {"type": "string"}
    if tp is int:
        return {"type": "integer"}
    if tp is bool:
        return {"type": "boolean"}
    if tp is float:
        return {"type": "number"}
    if tp is type(None):
        return {"type": "null"}
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin in _UNIONS:
        return {"anyOf": [_type_schema(a, defs) for a in get_args(tp)]}
    if origin is list:
        (item,) = get_args(tp)
        return {"type": "array", "items": _type_schema(item, defs)}
    if origin is dict:
        k, v = get_args(tp)
        d = {"type": "object", "additionalProperties": _type_schema(v, defs)}
        if get_origin(k) is Literal:
            d["propertyNames"] = {"enum": list(get_args(k))}
            d["additionalProperties"] = _type_schema(v, defs)
        return d
    if dataclasses.is_dataclass(tp):
        name = tp.__name__
        if name not in defs:
            defs[name] = {}  # placeholder against recursion
            defs[name] = _dataclass_schema(tp, defs)
        return {"$ref": f"#/$defs/{name}"}
    raise TypeError(f"no JSON Schema mapping for {tp!r}")


def _dataclass_schema(cls, defs: dict) -> dict:
    hints = typing.get_type_hints(cls)
    props = {}
    required = []
    for f in _public_fields(cls):
        s = _type_schema(hints[f.name], defs)
        if cls.__doc__ and f.name == "value" and cls is Capability:
            s = dict(s, description="yes | no | partial | unknown | not_applicable")
        props[f.name] = s
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
            required.append(f.name)
    out: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        out["required"] = required
    doc = (cls.__doc__ or "").strip().splitlines()
    if doc and not doc[0].startswith(cls.__name__ + "("):
        out["description"] = doc[0]
    return out


def json_schema() -> dict:
    """The JSON Schema of a contract file, generated from the dataclasses."""
    defs: dict = {}
    top = _dataclass_schema(ContractFile, defs)
    top["properties"]["schema_version"] = {"const": SCHEMA_VERSION}
    # ``date`` also accepts a TOML date, which JSON tools see as a string
    top.pop("description", None)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "https://attnlens.invalid/contracts/schema.json",
        "title": "AttnLens component contracts (contracts/*.toml)",
        "description": "Generated by `python -m attnlens.rules.contracts --schema` from attnlens/rules/contracts.py; do not edit.",
        **top,
        "$defs": dict(sorted(defs.items())),
    }


def schema_text() -> str:
    return json.dumps(json_schema(), indent=2, sort_keys=False) + "\n"


# --------------------------------------------------------------------------- loading


@dataclass
class SchemaError:
    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


class _Lines:
    """Approximate line numbers for TOML paths (tomllib keeps none)."""

    _HEADER = re.compile(r"^\s*\[\[\s*contract\s*\]\]\s*(#.*)?$")

    def __init__(self, text: str):
        self.lines = text.splitlines()
        self.entry_lines = [i + 1 for i, l in enumerate(self.lines) if self._HEADER.match(l)]

    def entry(self, idx: int) -> int:
        return self.entry_lines[idx] if idx < len(self.entry_lines) else 1

    def key(self, idx: int | None, *path) -> int:
        """Line of the innermost key of ``path`` (names and list indices), searched after the
        entry header; ``name, i`` moves to the i-th occurrence of ``name`` (arrays of tables)."""
        start = self.entry(idx) - 1 if idx is not None else 0
        end = self.entry_lines[idx + 1] - 1 if idx is not None and idx + 1 < len(self.entry_lines) else len(self.lines)
        pos = start  # 0-based line index to search from
        best = start + 1
        prev_pat = None
        for item in path:
            if isinstance(item, int):
                if prev_pat is None:
                    continue
                n = item
                i = pos + 1
                while n > 0 and i < end:
                    if prev_pat.search(self.lines[i]):
                        n -= 1
                        if n == 0:
                            pos = i
                            best = i + 1
                            break
                    i += 1
                continue
            pat = re.compile(r"(^|[\s{,.\[])" + re.escape(str(item)) + r"\s*(=|\]|\.)")
            for i in range(pos, end):
                if pat.search(self.lines[i]):
                    pos = i
                    best = i + 1
                    break
            prev_pat = pat
        return best


class _Conv:
    def __init__(self, file: str, lines: _Lines, errors: list[SchemaError]):
        self.file = file
        self.lines = lines
        self.errors = errors
        self.entry: int | None = None

    def err(self, path: list, message: str) -> None:
        line = self.lines.key(self.entry, *path) if path else (self.lines.entry(self.entry) if self.entry is not None else 1)
        where = ".".join(str(p) for p in path)
        self.errors.append(SchemaError(self.file, line, f"{where}: {message}" if where else message))

    def value(self, tp, data, path: list):
        origin = get_origin(tp)
        if tp is str:
            if isinstance(data, (_dt.date, _dt.datetime)):
                return data.isoformat()
            if not isinstance(data, str):
                self.err(path, f"expected a string, got {type(data).__name__}")
                return None
            return data
        if tp is int:
            if not isinstance(data, int) or isinstance(data, bool):
                self.err(path, f"expected an integer, got {type(data).__name__}")
                return None
            return data
        if tp is bool:
            if not isinstance(data, bool):
                self.err(path, f"expected true/false, got {type(data).__name__}")
                return None
            return data
        if origin is Literal:
            allowed = get_args(tp)
            if data not in allowed:
                self.err(path, f"{data!r} is not one of {', '.join(map(str, allowed))}")
                return None
            return data
        if origin in _UNIONS:
            args = get_args(tp)
            if data is None and type(None) in args:
                return None
            errs_before = len(self.errors)
            for a in args:
                if a is type(None):
                    continue
                trial: list[SchemaError] = []
                saved = self.errors
                self.errors = trial
                v = self.value(a, data, path)
                self.errors = saved
                if not trial:
                    return v
            del self.errors[errs_before:]
            names = " or ".join(getattr(a, "__name__", str(a)) for a in args if a is not type(None))
            if all(get_origin(a) is Literal or a is type(None) for a in args):
                allowed = [x for a in args if a is not type(None) for x in get_args(a)]
                self.err(path, f"{data!r} is not one of {', '.join(map(str, allowed))}")
            else:
                self.err(path, f"expected {names}, got {type(data).__name__}")
            return None
        if origin is list:
            (item,) = get_args(tp)
            if not isinstance(data, list):
                self.err(path, f"expected an array, got {type(data).__name__}")
                return None
            out = []
            for i, x in enumerate(data):
                v = self.value(item, x, path + [i])
                if v is not None:
                    out.append(v)
            return out
        if origin is dict:
            k, vt = get_args(tp)
            if not isinstance(data, dict):
                self.err(path, f"expected a table, got {type(data).__name__}")
                return None
            out = {}
            for key, x in data.items():
                if get_origin(k) is Literal and key not in get_args(k):
                    self.err(path + [key], f"unknown key {key!r} (one of {', '.join(get_args(k))})")
                    continue
                v = self.value(vt, x, path + [key])
                if v is not None:
                    out[key] = v
            return out
        if dataclasses.is_dataclass(tp):
            return self.dataclass(tp, data, path)
        raise TypeError(tp)  # pragma: no cover

    def dataclass(self, cls, data, path: list):
        if not isinstance(data, dict):
            self.err(path, f"expected a table, got {type(data).__name__}")
            return None
        hints = _hints(cls)
        fields = {f.name: f for f in _public_fields(cls)}
        kwargs = {}
        ok = True
        for key in data:
            if key not in fields:
                self.err(path + [key], f"unknown key {key!r}")
        for name, f in fields.items():
            if name not in data:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                    self.err(path, f"missing required key {name!r}")
                    ok = False
                continue
            n_err = len(self.errors)
            tp = hints[name]
            v = self.value(tp, data[name], path + [name])
            if len(self.errors) > n_err:
                if v is not None and get_origin(tp) in (list, dict):
                    kwargs[name] = v  # keep the valid items; the bad ones are reported
                    continue
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:  # type: ignore[misc]
                    ok = False
                continue
            kwargs[name] = v
        if not ok:
            return None
        return cls(**kwargs)


_HINTS: dict = {}  # dataclass -> its resolved type hints: the package's own classes


def _hints(cls) -> dict:
    h = _HINTS.get(cls)
    if h is None:
        h = _HINTS[cls] = typing.get_type_hints(cls)
    return h


def _one_probe_name(c: Contract) -> None:
    """Read an older probe spelling (``varlen_attention``) as the family's one name (``varlen``)."""
    if c.probe:
        c.probe = PROBE_AGENT_FAMILY.get(c.probe, c.probe)  # type: ignore[assignment]
    for cap in c.capabilities.values():
        if cap.probe:
            cap.probe = PROBE_AGENT_FAMILY.get(cap.probe, cap.probe)  # type: ignore[assignment]


def parse_contract_text(text: str, file: str = "<string>") -> tuple[list[Contract], list[SchemaError]]:
    errors: list[SchemaError] = []
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        m = re.search(r"line (\d+)", str(e))
        errors.append(SchemaError(file, int(m.group(1)) if m else 1, f"TOML syntax error: {e}"))
        return [], errors
    lines = _Lines(text)
    conv = _Conv(file, lines, errors)
    for key in data:
        if key not in ("schema_version", "contract"):
            conv.err([key], f"unknown top-level key {key!r} (expected schema_version and [[contract]] entries)")
    sv = data.get("schema_version")
    if sv is None:
        conv.err([], "missing required key 'schema_version'")
    elif sv != SCHEMA_VERSION:
        conv.err(["schema_version"], f"unsupported schema_version {sv!r} (this AttnLens reads {SCHEMA_VERSION})")
        return [], errors
    entries = data.get("contract", [])
    if not isinstance(entries, list):
        conv.err(["contract"], "use [[contract]] (an array of tables)")
        return [], errors
    out = []
    for i, raw in enumerate(entries):
        conv.entry = i
        c = conv.dataclass(Contract, raw, [])
        if c is None:
            continue
        c.file = file
        c.line = lines.entry(i)
        _one_probe_name(c)
        for j, pat in enumerate(c.covers):
            if not pat or pat != pat.strip():
                conv.err(["covers", j], f"empty or padded pattern {pat!r}")
        if not c.covers:
            conv.err(["covers"], "needs at least one final symbol or pattern")
            continue
        for j, o in enumerate(c.observations):
            if not re.match(r"^\d{4}-\d{2}-\d{2}", o.date):
                conv.err(["observations", j, "date"], f"date {o.date!r} is not an ISO date (YYYY-MM-DD)")
        out.append(c)
    return out, errors


@dataclass
class ContractSet:
    contracts: list[Contract] = field(default_factory=list)
    errors: list[SchemaError] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    fingerprint: str = ""

    def __post_init__(self):
        self._exact: dict[str, Contract] = {}
        self._patterns: list[tuple[str, Contract]] = []
        for c in self.contracts:
            for p in c.covers:
                if any(ch in p for ch in "*?["):
                    self._patterns.append((p, c))
                else:
                    self._exact.setdefault(p, c)

    def by_id(self, cid: str) -> Contract | None:
        for c in self.contracts:
            if c.id == cid:
                return c
        return None

    def match(self, symbol: str | None) -> Contract | None:
        """The contract covering a final symbol (exact first, then fnmatch patterns)."""
        if not symbol:
            return None
        c = self._exact.get(symbol)
        if c is not None:
            return c
        for p, c in self._patterns:
            if fnmatch.fnmatchcase(symbol, p):
                return c
        return None


def default_contract_dirs(root: str | os.PathLike | None = None) -> list[Path]:
    """Where contracts are read from, in order.

    ``$ATTNLENS_CONTRACTS`` (``os.pathsep``-separated folders), then
    ``<workspace>/.attnlens/contracts``, then the ``contracts/`` folder shipped
    next to the package (the repository checkout).
    """
    dirs: list[Path] = []
    env = os.environ.get("ATTNLENS_CONTRACTS")
    if env:
        dirs.extend(Path(p) for p in env.split(os.pathsep) if p)
    if root is not None:
        dirs.append(Path(root) / ".attnlens" / "contracts")
    here = Path(__file__).resolve()
    for parent in (here.parents[3], here.parents[1]):
        cand = parent / "contracts"
        if cand.is_dir():
            dirs.append(cand)
            break
    out = []
    seen = set()
    for d in dirs:
        r = os.path.realpath(d)
        if r not in seen:
            seen.add(r)
            out.append(d)
    return out


_PARSED: dict = {}  # (path, content sha) -> (contracts, errors): editors reload on every edit


def load_contracts(dirs: list[str | os.PathLike] | None = None, root: str | os.PathLike | None = None) -> ContractSet:
    """Read every ``*.toml`` under ``dirs``; schema errors are collected per file, never raised."""
    folders = [Path(d) for d in dirs] if dirs is not None else default_contract_dirs(root)
    contracts: list[Contract] = []
    errors: list[SchemaError] = []
    files: list[str] = []
    h = hashlib.sha256()
    seen_ids: dict[str, str] = {}
    for d in folders:
        if d.is_file() and d.suffix == ".toml":
            paths = [d]
        elif d.is_dir():
            paths = sorted(d.glob("*.toml"))
        else:
            continue
        for p in paths:
            try:
                data = p.read_bytes()
            except OSError as e:
                errors.append(SchemaError(str(p), 1, f"cannot read: {e.strerror}"))
                continue
            files.append(str(p))
            h.update(str(p).encode() + b"\0" + data + b"\0")
            key = (str(p), hashlib.sha256(data).hexdigest())
            parsed = _PARSED.get(key)
            if parsed is None:
                text = data.decode("utf-8", errors="replace")
                parsed = parse_contract_text(text, str(p))
                if len(_PARSED) > 256:
                    _PARSED.clear()
                _PARSED[key] = parsed
            cs, errs = parsed
            errors.extend(errs)
            for c in cs:
                if c.id in seen_ids:
                    errors.append(SchemaError(str(p), c.line, f"duplicate contract id {c.id!r} (first in {seen_ids[c.id]})"))
                    continue
                seen_ids[c.id] = str(p)
                contracts.append(c)
    return ContractSet(contracts, errors, files, h.hexdigest())


_SETS: dict = {}  # (root, contract files' stamps) -> the default contract set: their content; holds one


def _default_contracts(root) -> ContractSet:
    """The default contract set, reloaded only when a contract file's stamp changes."""
    dirs = default_contract_dirs(root)
    stamps = []
    for d in dirs:
        for p in ([d] if d.is_file() else sorted(d.glob("*.toml")) if d.is_dir() else []):
            try:
                st = p.stat()
                stamps.append((str(p), st.st_mtime_ns, st.st_size))
            except OSError:
                pass
    key = (str(root), tuple(stamps))
    got = _SETS.get(key)
    if got is None:
        _SETS.clear()
        got = _SETS[key] = load_contracts(dirs)
    return got


def probes_for_symbol(symbol: str | None, root: str | os.PathLike | None = None) -> list[str]:
    """Probe families (agent names) that can decide the contract covering ``symbol``."""
    c = _default_contracts(root).match(symbol)
    if c is None or not getattr(c, "probe", None):
        return []
    return [str(c.probe)]  # the loader already reads older spellings as the family's one name


# --------------------------------------------------------------------------- CLI


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m attnlens.rules.contracts", description="AttnLens component contracts")
    p.add_argument("--schema", action="store_true", help="print the JSON Schema generated from the dataclasses")
    p.add_argument("--check", nargs="*", metavar="DIR", help="load contract folders/files and report schema errors")
    p.add_argument("--write-schema", metavar="FILE", help="write the JSON Schema to FILE")
    args = p.parse_args(argv)
    if args.schema:
        sys.stdout.write(schema_text())
        return 0
    if args.write_schema:
        Path(args.write_schema).write_text(schema_text(), encoding="utf-8")
        return 0
    if args.check is not None:
        cs = load_contracts(args.check or None)
        for e in cs.errors:
            print(e)
        print(f"{len(cs.contracts)} contracts from {len(cs.files)} files, {len(cs.errors)} errors")
        return 1 if cs.errors else 0
    p.print_help()
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
