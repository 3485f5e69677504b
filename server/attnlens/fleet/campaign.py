"""Campaigns: what to probe (cells) and where (host specs).

A campaign file is TOML and only data::

    name = "fa-upgrade"            # optional; the stored state is found by it (for --resume)
    timeout = 300                  # seconds per cell (default: the probe default)
    device = "auto"                # default device of every cell

    [[probe]]
    family = "varlen"              # a probe family (aliases such as varlen_attention accepted)
    target = "flash_attn:flash_attn_varlen_func"
    options = { dtype = "bfloat16" }
    # device, module, load_library, timeout, env = { NAME = "value" } are optional

    [[host]]
    name = "c500-maca-3.1"         # the column of the matrix
    resource = "c500"              # selectors, all optional, all must match a node Ray lists:
    # node_id = "...", address = "10.0.0.5", hostname = "gpu07", labels = { accelerator = "c500" }
    python = "/opt/conda/bin/python"   # the node's target interpreter (default: the Ray worker's)
    env = { MACA_PATH = "/opt/maca" }
    # num_gpus = 1 (default: 1 when the cell runs on a device), parallel = N (tasks at once)

Unknown keys and wrong types are errors (with the key named); nothing in the file is
evaluated. Campaigns can also be built from the workspace: :func:`from_findings` takes the
findings of ``attnlens check --format json`` (their ``probe`` field, the family the code actions
offer) and :func:`from_inventory` the ``probe`` items of ``attnlens inventory --format json``;
both deduplicate by (family, resolved target).
"""

from __future__ import annotations

from ..runtime.probes import target_spec

import hashlib
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

try:  # Python 3.11+
    import tomllib as _toml
except ImportError:  # pragma: no cover - 3.10
    import tomli as _toml  # type: ignore[no-redef]

from ..runtime import probes as probemod


class CampaignError(ValueError):
    """A campaign (file or arguments) that cannot be used; the message names the key."""


_SAFE_ENV = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_target(t: Any, where: str) -> str:
    if not isinstance(t, str) or not t.strip() or any(c in t for c in "\n\r\0"):
        raise CampaignError(f"{where}: target must be a non-empty one-line string")
    return t.strip()


def _check_env(env: Any, where: str) -> dict:
    if env is None:
        return {}
    if not isinstance(env, dict):
        raise CampaignError(f"{where}: env must be a table of NAME = \"value\"")
    out = {}
    for k, v in env.items():
        if not isinstance(k, str) or not _SAFE_ENV.match(k):
            raise CampaignError(f"{where}: bad environment variable name {k!r}")
        if v is not None and not isinstance(v, (str, int, float, bool)):
            raise CampaignError(f"{where}: env {k} must be a string")
        out[k] = None if v is None else str(v)  # "" sets the variable to the empty string
    return out


def _plain(v: Any, where: str) -> Any:
    """Options are JSON-like data (TOML dates are refused)."""
    if isinstance(v, (str, int, float, bool)) or v is None:
        return v
    if isinstance(v, list):
        return [_plain(x, where) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x, where) for k, x in v.items()}
    raise CampaignError(f"{where}: option value {v!r} is not plain data")


@dataclass
class Cell:
    """One probe case set: a family on a target, with its options."""

    family: str
    target: str
    options: dict = field(default_factory=dict)
    device: str = "auto"
    module: str | None = None
    load_library: str | None = None
    timeout: float = probemod.DEFAULT_TIMEOUT_S
    env: dict = field(default_factory=dict)
    origin: list = field(default_factory=list)  # where a workspace campaign found it (path:line rule)

    @property
    def key(self) -> str:
        """Stable id of the cell within a campaign (family, target, and a hash of the rest)."""
        rest = [self.options, self.device, self.module, self.load_library, self.env]
        h = hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()[:6]
        return f"{self.family}:{self.target}#{h}"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "probe") -> "Cell":
        allowed = {"family", "target", "options", "device", "module", "load_library", "timeout", "env", "origin"}
        unknown = set(d) - allowed
        if unknown:
            raise CampaignError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                                f"(allowed: {', '.join(sorted(allowed))})")
        fam = d.get("family")
        if not isinstance(fam, str):
            raise CampaignError(f"{where}: family must be a string")
        fam = probemod.canonical_family(fam)
        if fam not in probemod.family_names():
            raise CampaignError(f"{where}: unknown probe family {d.get('family')!r}; known: "
                                f"{', '.join(probemod.family_names())}")
        opts = d.get("options") or {}
        if not isinstance(opts, dict):
            raise CampaignError(f"{where}: options must be a table")
        dev = d.get("device") or "auto"
        if not isinstance(dev, str) or not re.match(r"^(auto|cpu|cuda(:\d+)?)$", dev):
            raise CampaignError(f"{where}: device must be auto, cpu, cuda or cuda:N")
        timeout = d.get("timeout", probemod.DEFAULT_TIMEOUT_S)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
            raise CampaignError(f"{where}: timeout must be a positive number of seconds")
        for k in ("module", "load_library"):
            v = d.get(k)
            if v is not None and (not isinstance(v, str) or any(c in v for c in "\n\r\0")):
                raise CampaignError(f"{where}: {k} must be a one-line string")
        return cls(family=fam, target=_check_target(d.get("target"), where), options=_plain(opts, where),
                   device=dev, module=d.get("module") or None, load_library=d.get("load_library") or None,
                   timeout=float(timeout), env=_check_env(d.get("env"), where), origin=list(d.get("origin") or []))


@dataclass
class HostSpec:
    """A column of the matrix: which Ray node(s) (selectors) and which target interpreter there."""

    name: str
    node_id: str | None = None
    address: str | None = None
    hostname: str | None = None
    resource: str | None = None
    labels: dict = field(default_factory=dict)
    python: str | None = None  # None: the interpreter the Ray worker runs
    env: dict = field(default_factory=dict)
    num_gpus: float | None = None
    parallel: int | None = None

    def selectors(self) -> dict:
        return {k: v for k, v in (("node_id", self.node_id), ("address", self.address), ("hostname", self.hostname),
                                  ("resource", self.resource), ("labels", self.labels or None)) if v}

    def matches(self, node: dict) -> bool:
        """``node``: an entry of ``ray.nodes()`` (NodeID, NodeManagerAddress, NodeManagerHostname, Resources, Labels)."""
        if self.node_id and not str(node.get("NodeID", "")).startswith(self.node_id):
            return False
        if self.address and node.get("NodeManagerAddress") != self.address:
            return False
        if self.hostname and node.get("NodeManagerHostname") != self.hostname:
            return False
        if self.resource and not (node.get("Resources") or {}).get(self.resource):
            return False
        labels = node.get("Labels") or {}
        return all(labels.get(k) == v for k, v in (self.labels or {}).items())

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict, where: str = "host") -> "HostSpec":
        allowed = {"name", "node_id", "address", "hostname", "resource", "labels", "python", "env", "num_gpus",
                   "parallel"}
        unknown = set(d) - allowed
        if unknown:
            raise CampaignError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} "
                                f"(allowed: {', '.join(sorted(allowed))})")
        name = d.get("name")
        if not isinstance(name, str) or not re.match(r"^[A-Za-z0-9][A-Za-z0-9_.:@+-]{0,63}$", name):
            raise CampaignError(f"{where}: name must be 1-64 characters of letters, digits and _.:@+-")
        for k in ("node_id", "address", "hostname", "resource", "python"):
            v = d.get(k)
            if v is not None and (not isinstance(v, str) or not v or any(c in v for c in "\n\r\0")):
                raise CampaignError(f"{where}: {k} must be a one-line string")
        labels = d.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items()):
            raise CampaignError(f"{where}: labels must be a table of strings")
        ng = d.get("num_gpus")
        if ng is not None and (not isinstance(ng, (int, float)) or isinstance(ng, bool) or ng < 0):
            raise CampaignError(f"{where}: num_gpus must be a number >= 0")
        par = d.get("parallel")
        if par is not None and (not isinstance(par, int) or isinstance(par, bool) or par < 1):
            raise CampaignError(f"{where}: parallel must be an integer >= 1")
        return cls(name=name, node_id=d.get("node_id"), address=d.get("address"), hostname=d.get("hostname"),
                   resource=d.get("resource"), labels=dict(labels), python=d.get("python"),
                   env=_check_env(d.get("env"), where), num_gpus=ng, parallel=par)


@dataclass
class Campaign:
    cells: list[Cell]
    hosts: list[HostSpec] = field(default_factory=list)
    name: str | None = None
    num_cpus: float = 1.0  # Ray CPUs per task

    @property
    def id(self) -> str:
        """Where the state is stored: the name (slug) and a hash of the cells and host specs."""
        body = json.dumps([[c.key for c in self.cells], [h.to_dict() for h in self.hosts]], sort_keys=True,
                          default=str)
        h = hashlib.sha256(body.encode()).hexdigest()[:10]
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", self.name or "campaign").strip("._-")[:40] or "campaign"
        return f"{slug}-{h}" if not self.name else slug

    def to_dict(self) -> dict:
        return {"name": self.name, "id": self.id, "num_cpus": self.num_cpus,
                "cells": [dict(c.to_dict(), key=c.key) for c in self.cells],
                "hosts": [h.to_dict() for h in self.hosts]}

    @classmethod
    def from_dict(cls, d: dict) -> "Campaign":
        return cls(cells=[Cell.from_dict({k: v for k, v in c.items() if k != "key"}) for c in d.get("cells") or []],
                   hosts=[HostSpec.from_dict(h) for h in d.get("hosts") or []], name=d.get("name"),
                   num_cpus=float(d.get("num_cpus", 1.0)))


def dedup(cells: Iterable[Cell], *, by_target: bool = False) -> list[Cell]:
    """Keep the first cell per key (``by_target``: per (family, target), merging origins)."""
    out: dict[Any, Cell] = {}
    for c in cells:
        k = (c.family, c.target) if by_target else c.key
        if k in out:
            for o in c.origin:
                if o not in out[k].origin:
                    out[k].origin.append(o)
            continue
        out[k] = c
    return list(out.values())


_TOP_KEYS = {"name", "timeout", "device", "num_cpus", "probe", "host"}


def parse_toml(text: str, where: str = "campaign") -> Campaign:
    try:
        data = _toml.loads(text)
    except _toml.TOMLDecodeError as e:
        raise CampaignError(f"{where}: not valid TOML: {e}") from None
    unknown = set(data) - _TOP_KEYS
    if unknown:
        raise CampaignError(f"{where}: unknown key(s) {', '.join(sorted(unknown))} (allowed: "
                            f"{', '.join(sorted(_TOP_KEYS))})")
    name = data.get("name")
    if name is not None and (not isinstance(name, str) or not name.strip()):
        raise CampaignError(f"{where}: name must be a non-empty string")
    defaults = {k: data[k] for k in ("timeout", "device") if k in data}
    probes = data.get("probe") or []
    hosts = data.get("host") or []
    if not isinstance(probes, list) or not all(isinstance(p, dict) for p in probes):
        raise CampaignError(f"{where}: probes are given as [[probe]] tables")
    if not isinstance(hosts, list) or not all(isinstance(h, dict) for h in hosts):
        raise CampaignError(f"{where}: hosts are given as [[host]] tables")
    cells = [Cell.from_dict(dict(defaults, **p), f"{where}: probe #{i + 1}") for i, p in enumerate(probes)]
    specs = [HostSpec.from_dict(h, f"{where}: host #{i + 1}") for i, h in enumerate(hosts)]
    names = [h.name for h in specs]
    if len(set(names)) != len(names):
        raise CampaignError(f"{where}: host names must be unique")
    num_cpus = data.get("num_cpus", 1.0)
    if not isinstance(num_cpus, (int, float)) or isinstance(num_cpus, bool) or num_cpus < 0:
        raise CampaignError(f"{where}: num_cpus must be a number >= 0")
    return Campaign(cells=dedup(cells), hosts=specs, name=name.strip() if name else None, num_cpus=float(num_cpus))


def load_toml(path: str | os.PathLike) -> Campaign:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CampaignError(f"cannot read campaign {p}: {e}") from None
    return parse_toml(text, str(p))


def parse_host_arg(text: str) -> HostSpec:
    """``--host name=h1,resource=good,python=/x/bin/python,label.accel=c500,env.NAME=V``."""
    d: dict = {}
    for part in [x for x in (text or "").split(",") if x.strip()]:
        if "=" not in part:
            raise CampaignError(f"--host expects KEY=VALUE items separated by commas, got {part!r}")
        k, v = part.split("=", 1)
        k = k.strip()
        if k.startswith("label."):
            d.setdefault("labels", {})[k[6:]] = v
        elif k.startswith("env."):
            d.setdefault("env", {})[k[4:]] = v
        elif k in ("num_gpus",):
            d[k] = float(v)
        elif k == "parallel":
            d[k] = int(v)
        else:
            d[k] = v
    return HostSpec.from_dict(d, f"--host {text}")


# ----------------------------------------------------------------------------- from the workspace


def _target_from_final(final: dict, hops: list) -> str | None:
    """The same rule as the editor's probe actions (lsp.features.runtime_actions.probe_target), on JSON."""
    kind = final.get("kind")
    sym = final.get("symbol") or ""
    if kind == "torch_op" and sym:
        return sym
    if kind in ("python_function", "triton_kernel", "extension_function") and sym:
        mod, _, attr = sym.rpartition(".")
        return f"{mod}:{attr}" if mod else sym
    if kind == "not_installed":
        for h in reversed(hops or []):
            s = h.get("symbol") or ""
            if h.get("kind") == "not_installed" and "." in s:
                mod, _, attr = s.rpartition(".")
                return f"{mod}:{attr}"
    return None




def _contract_covers(root: str | None) -> dict:
    """contract id -> the symbols it covers (read with the rules' own loader; {} when unavailable)."""
    try:
        from ..rules.contracts import load_contracts

        return {c.id: list(c.covers or []) for c in load_contracts(root=root).contracts}
    except Exception:  # noqa: BLE001 - the rules part is optional here
        return {}


def finding_cell(f: dict, covers: dict | None = None) -> Cell | None:
    """A cell for one ``attnlens check --format json`` finding that names a probe family (the target:
    the chain's final callable, as the editor's probe action picks it, else the callee, else the
    first symbol the finding's contract covers)."""
    data = f.get("data") or {}
    fam = data.get("probe_agent_family") or data.get("probe")
    if isinstance(fam, dict):
        fam = fam.get("family") or fam.get("name")
    if not isinstance(fam, str) or not fam:
        return None
    fam = probemod.canonical_family(fam)
    if fam not in probemod.family_names():
        return None
    target = data.get("probe_target")
    chain = data.get("chain") if isinstance(data.get("chain"), dict) else None
    if not target and chain:
        target = _target_from_final(chain.get("final") or {}, chain.get("hops") or [])
    if not target:
        for k in ("callee", "symbol"):
            v = data.get(k)
            if isinstance(v, str) and "." in v.replace("::", "."):
                target = target_spec(v)
                break
    if not target and covers and isinstance(data.get("contract"), str):
        cov = [x for x in covers.get(data["contract"]) or [] if isinstance(x, str) and "*" not in x]
        if cov:
            target = target_spec(cov[0])
    if not isinstance(target, str) or not target:
        return None
    origin = f"{f.get('path')}:{f.get('line')} {f.get('rule')}"
    return Cell(family=fam, target=target, origin=[origin])


def from_findings(findings: list[dict], root: str | None = None) -> list[Cell]:
    covers = _contract_covers(root) if any(isinstance(f, dict) and (f.get("data") or {}).get("contract")
                                           for f in findings) else {}
    return dedup((c for c in (finding_cell(f, covers) for f in findings if isinstance(f, dict)) if c),
                 by_target=True)


def check_findings(root: str, paths: list[str], python: str | None = None, timeout: float = 600.0,
                   extra: list[str] | None = None) -> list[dict]:
    """Run ``attnlens check --format json`` (the existing check, in a subprocess; argv only)."""
    argv = [sys.executable, "-m", "attnlens.cli", "check", "--root", root, "--format", "json"]
    if python:
        argv += ["--python", python]
    argv += list(extra or [])
    argv += ["--", *paths] if paths else []
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=root)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise CampaignError(f"attnlens check failed: {e}") from None
    if p.returncode not in (0, 1):
        raise CampaignError(f"attnlens check exited {p.returncode}: {p.stderr.strip()[-800:]}")
    try:
        out = json.loads(p.stdout)
    except ValueError:
        raise CampaignError(f"attnlens check printed no JSON: {p.stderr.strip()[-800:]}") from None
    return out if isinstance(out, list) else []


_VALIDATION = re.compile(r"attnlens probe run (?P<family>[A-Za-z_]+) --target (?P<target>[^\s`]+)")


def from_inventory(inv: dict) -> list[Cell]:
    """Cells named by the ``probe`` items of an upgrade inventory (``attnlens inventory --format json``)."""
    cells = []
    for f in inv.get("files") or []:
        for it in f.get("items") or []:
            if it.get("action") != "probe":
                continue
            for m in _VALIDATION.finditer(str(it.get("validation") or "")):
                fam = probemod.canonical_family(m.group("family"))
                if fam in probemod.family_names():
                    cells.append(Cell(family=fam, target=target_spec(m.group("target")),
                                      origin=[f"{f.get('path')}:{it.get('line')} inventory"]))
    return dedup(cells, by_target=True)
