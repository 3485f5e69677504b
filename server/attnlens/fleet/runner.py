"""Running a campaign: on a Ray cluster (one Ray task per cell, pinned to its node) or locally.

Ray is imported only inside :func:`run_ray`. Hosts are the nodes Ray lists as alive, filtered by
the campaign's host specs (nothing runs on a node that the user did not name, when hosts are
named, or that Ray does not list). Each task is pinned with a hard
``NodeAffinitySchedulingStrategy``, asks for ``num_gpus=1`` when the cell runs on a device
(device ``cuda*``, or ``auto`` on a node with GPUs), and is never retried by Ray: faults are
results. A task whose node dies is recorded as ``lost``; a task past its deadline is cancelled
and recorded as ``timeout``; the agent's own crash / timeout / import-error verdicts come back
as evidence. Every result is written to the campaign state (``fleet/<campaign-id>.json`` in the
workspace cache) as soon as it arrives, so a campaign that is interrupted keeps what it has and
``resume=True`` runs only the missing or failed cells.
"""

from __future__ import annotations

import datetime as _dt
import logging
import socket
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from ..cache import Cache
from ..runtime import evidence as ev
from . import task as taskmod
from .campaign import Campaign, CampaignError, Cell, HostSpec

STATE_SCHEMA = 1
# statuses that are measurements (kept by --resume); the others are faults (run again)
MEASURED = ("pass", "fail", "inconclusive", "import_error")
FAULTS = ("lost", "timeout", "crashed", "error")
STATUSES = ("pass", "fail", "inconclusive", "import_error", "crashed", "timeout", "error", "lost")
DEADLINE_GRACE_S = 180.0  # beyond the cell timeout: environment record, agent start, queueing


class FleetUnavailable(RuntimeError):
    """Ray is not installed (``pip install 'attnlens[fleet]'``) or the cluster cannot be reached."""


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def describe_environment(record: dict | None) -> dict:
    """The columns' header: GPU model, runtime, torch, kernel package versions, env hash."""
    if not record:
        return {}
    from ..runtime import environment as envmod

    t = record.get("torch") or {}
    gpu = record.get("gpu") or {}
    rt = record.get("runtime") or {}
    maca = (record.get("maca") or {}).get("version")
    runtime = []
    if maca:
        runtime.append(f"MACA {maca}")
    for k, label in (("cuda_runtime", "CUDA rt"), ("maca_runtime", "MACA rt"), ("hip_runtime", "HIP rt")):
        v = (rt.get(k) or {}).get("value")
        if v:
            runtime.append(f"{label} {v}")
    if not runtime and t.get("cuda"):
        runtime.append(f"CUDA {t['cuda']} (torch build)")
    if not runtime and t.get("hip"):
        runtime.append(f"HIP {t['hip']} (torch build)")
    pk: dict = {}
    for k, v in sorted((record.get("packages") or {}).items()):
        name = k.replace("-", "_")  # flash-attn and flash_attn name the same distribution
        if v.get("version") and name not in pk:
            pk[name] = v.get("version")
    return {
        "env_hash": record.get("hash"),
        "summary": envmod.summary(record),
        "gpu": ", ".join(gpu.get("models") or []) if gpu.get("count") else "no GPU",
        "gpu_count": int(gpu.get("count") or 0),
        "runtime": ", ".join(runtime) or "-",
        "torch": t.get("version") or (f"not importable: {t.get('error')}"[:80] if t.get("error") else None),
        "triton": (record.get("triton") or {}).get("version"),
        "python_version": (record.get("python") or {}).get("version"),
        "packages": {k: v for k, v in pk.items() if k not in ("torch", "numpy")},
    }


# ----------------------------------------------------------------------------- state


@dataclass
class CampaignState:
    campaign: Campaign
    hosts: dict = field(default_factory=dict)  # name -> descriptor
    results: dict = field(default_factory=dict)  # host name -> cell key -> result
    runs: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"schema": STATE_SCHEMA, "campaign": self.campaign.to_dict(), "hosts": self.hosts,
                "results": self.results, "runs": self.runs}

    def result(self, host: str, cell: Cell) -> dict | None:
        return (self.results.get(host) or {}).get(cell.key)

    def todo(self, host: str, cells: list[Cell], retry_verdicts: bool = False) -> list[Cell]:
        keep = ("pass",) if retry_verdicts else MEASURED
        return [c for c in cells if (self.result(host, c) or {}).get("status") not in keep]


def load_state(cache: Cache, campaign: Campaign) -> CampaignState:
    d = cache.load_json("fleet", f"{campaign.id}.json") if cache.enabled else None
    st = CampaignState(campaign=campaign)
    if isinstance(d, dict) and d.get("schema") == STATE_SCHEMA:
        st.hosts = d.get("hosts") or {}
        st.results = d.get("results") or {}
        st.runs = d.get("runs") or []
    return st


def save_state(cache: Cache, st: CampaignState) -> None:
    if cache.enabled:
        cache.store_json("fleet", f"{st.campaign.id}.json", st.to_dict())


def read_state(cache: Cache, campaign_id: str) -> dict | None:
    from ..cache import is_safe_id

    if not is_safe_id(campaign_id + ".json"):
        raise CampaignError(f"invalid campaign id {campaign_id!r}")
    return cache.load_json("fleet", f"{campaign_id}.json") if cache.enabled else None


# ----------------------------------------------------------------------------- recording


def _spec(cell: Cell, host: HostSpec, python: str | None, pin: bool) -> dict:
    env = dict(host.env)
    env.update(cell.env)
    return {"family": cell.family, "target": cell.target, "options": dict(cell.options), "device": cell.device,
            "module": cell.module, "load_library": cell.load_library, "timeout": cell.timeout, "env": env,
            "python": host.python or python, "pin_devices": pin}


class _Recorder:
    def __init__(self, st: CampaignState, cache: Cache, progress: Callable[[str], None] | None):
        import threading

        self.st, self.cache, self.progress = st, cache, progress
        self.ran = 0
        self.lock = threading.RLock()  # the local runner records from one thread per host

    def host(self, name: str, **info) -> None:
        with self.lock:
            d = self.st.hosts.setdefault(name, {"name": name})
            d.update({k: v for k, v in info.items() if v is not None})

    def ok(self, name: str, cell: Cell, out: dict, node_id: str | None) -> None:
        evd = dict(out.get("evidence") or {})
        envrec = out.get("environment")
        node = out.get("node") or {}
        desc = describe_environment(envrec)
        self.host(name, node_id=node_id, hostname=node.get("hostname"), python=node.get("python"),
                  worker_python=node.get("worker_python"), **desc)
        if envrec:
            with self.lock:
                self.st.hosts[name]["environment"] = envrec
        details = dict(evd.get("details") or {})
        details["host"] = {"name": name, "node_id": node_id, "hostname": node.get("hostname"),
                           "campaign": self.st.campaign.id, "cell": cell.key,
                           "visible_devices": node.get("visible_devices")}
        evd["details"] = details
        rid = evd.get("id")
        try:
            rec = ev.EvidenceRecord.from_dict(evd)
            ev.write(self.cache, rec)
        except (TypeError, ValueError):
            rid = None
        verdict = evd.get("verdict") or "error"
        msg = evd.get("message") or ""
        if not msg and verdict != "pass":
            bad = [c for c in evd.get("cases") or [] if c.get("status") not in ("pass", "skip") and
                   c.get("required", True)]
            if bad:
                msg = f"{bad[0].get('name')}: {str(bad[0].get('note') or bad[0].get('status'))[:200]}"
        self._put(name, cell, {"status": verdict if verdict in STATUSES else "error", "evidence_id": rid,
                               "message": msg, "elapsed_s": out.get("elapsed_s"), "node_id": node_id,
                               "env_hash": desc.get("env_hash"),
                               "cases": {str(c.get("name")): {"status": c.get("status"),
                                                              "note": str(c.get("note") or "")[:300],
                                                              "max_abs_err": c.get("max_abs_err"),
                                                              "required": c.get("required", True)}
                                         for c in evd.get("cases") or []}})

    def fault(self, name: str, cell: Cell, status: str, message: str, node_id: str | None = None,
              elapsed: float | None = None) -> None:
        self._put(name, cell, {"status": status, "evidence_id": None, "message": message[:2000],
                               "elapsed_s": round(elapsed, 3) if elapsed is not None else None, "node_id": node_id})

    def _put(self, name: str, cell: Cell, res: dict) -> None:
        with self.lock:
            prev = self.st.result(name, cell) or {}
            res["attempts"] = int(prev.get("attempts") or 0) + 1
            res["ended"] = _now()
            self.st.results.setdefault(name, {})[cell.key] = res
            self.ran += 1
            save_state(self.cache, self.st)
        if self.progress:
            el = res.get("elapsed_s")
            self.progress(f"[{name}] {cell.family} {cell.target}: {res['status']}"
                          + (f" ({el:.1f} s)" if isinstance(el, (int, float)) else "")
                          + (f" - {res['message'][:160]}" if res.get("message") and res["status"] != "pass" else ""))


# ----------------------------------------------------------------------------- local runner


def run_local(campaign: Campaign, cache: Cache, *, python: str | None = None, resume: bool = False,
              retry_verdicts: bool = False, progress: Callable[[str], None] | None = None,
              pool=None, parallel_hosts: bool = True) -> CampaignState:
    """Every host is an interpreter on this machine (no Ray): each host's cells run one after another,
    hosts side by side (one thread each; every host has its own agent)."""
    import threading

    hosts = campaign.hosts or [HostSpec(name="local", python=python)]
    for h in hosts:
        if h.selectors():
            raise CampaignError(f"host {h.name}: node selectors ({', '.join(h.selectors())}) need the Ray runner")
    st = load_state(cache, campaign) if resume else CampaignState(campaign=campaign)
    rec = _Recorder(st, cache, progress)
    t0 = time.monotonic()

    def one_host(h: HostSpec) -> None:
        for cell in (st.todo(h.name, campaign.cells, retry_verdicts) if resume else campaign.cells):
            t1 = time.monotonic()
            try:
                out = taskmod.run_cell(_spec(cell, h, python or sys.executable, False), pool=pool)
            except Exception as e:  # noqa: BLE001 - a fault is a result
                rec.fault(h.name, cell, "error", f"{type(e).__name__}: {e}", elapsed=time.monotonic() - t1)
                continue
            rec.ok(h.name, cell, out, None)

    for h in hosts:
        rec.host(h.name, hostname=socket.gethostname(), node_id=None, spec=h.to_dict())
    if parallel_hosts and len(hosts) > 1:
        threads = [threading.Thread(target=one_host, args=(h,), name=f"attnlens-fleet-{h.name}", daemon=True)
                   for h in hosts]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        for h in hosts:
            one_host(h)
    st.runs.append({"started": _now(), "runner": "local", "cells_run": rec.ran,
                    "elapsed_s": round(time.monotonic() - t0, 3), "ray_start_s": None})
    save_state(cache, st)
    return st


# ----------------------------------------------------------------------------- Ray runner


def _import_ray():
    try:
        import ray  # noqa: F401
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy  # noqa: F401
    except ImportError as e:
        raise FleetUnavailable(f"Ray is not installed ({e}); install the optional extra: "
                               f"pip install 'attnlens[fleet]' (or use --runner local)") from None
    return sys.modules["ray"]


def node_name(node: dict, nodes: list[dict]) -> str:
    host = node.get("NodeManagerHostname") or node.get("NodeManagerAddress") or "node"
    same = [n for n in nodes if (n.get("NodeManagerHostname") or n.get("NodeManagerAddress")) == host]
    return host if len(same) == 1 else f"{host}-{str(node.get('NodeID'))[:6]}"


def resolve_hosts(specs: list[HostSpec], nodes: list[dict]) -> tuple[list[tuple[str, HostSpec, dict]], list[HostSpec]]:
    """(host name, spec, node) for every alive node the specs select, and the specs that select none.
    Without specs, every alive node that can run a task is a host (the interpreter of its Ray worker)."""
    alive = [n for n in nodes if n.get("Alive")]
    if not specs:
        usable = [n for n in alive if (n.get("Resources") or {}).get("CPU") or (n.get("Resources") or {}).get("GPU")]
        return [(node_name(n, usable), HostSpec(name=node_name(n, usable)), n) for n in usable], []
    out, missing = [], []
    for s in specs:
        hit = [n for n in alive if s.matches(n)]
        if not hit:
            missing.append(s)
        for n in hit:
            out.append((s.name if len(hit) == 1 else f"{s.name}-{str(n.get('NodeID'))[:6]}", s, n))
    return out, missing


@dataclass
class _Host:
    name: str
    spec: HostSpec
    node: dict
    queue: list
    slots: int
    inflight: int = 0


def run_ray(campaign: Campaign, cache: Cache, *, address: str | None = None, python: str | None = None,
            resume: bool = False, retry_verdicts: bool = False, progress: Callable[[str], None] | None = None,
            init_kwargs: dict | None = None, poll_s: float = 1.0,
            deadline_grace_s: float = DEADLINE_GRACE_S) -> CampaignState:
    ray = _import_ray()
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    st = load_state(cache, campaign) if resume else CampaignState(campaign=campaign)
    rec = _Recorder(st, cache, progress)
    t0 = time.monotonic()
    started_here = False
    if not ray.is_initialized():
        kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.WARNING}
        if address:
            kw["address"] = address
        else:  # a local cluster on this machine: small object store, we only pass small dicts
            kw["object_store_memory"] = 128 * 2**20
        kw.update(init_kwargs or {})
        try:
            ray.init(**kw)
        except Exception as e:  # noqa: BLE001 - ConnectionError, RuntimeError...
            raise FleetUnavailable(f"cannot connect to the Ray cluster {address or '(local)'}: {e}") from None
        started_here = True
    ray_start_s = time.monotonic() - t0
    try:
        nodes = ray.nodes()
        selected, missing = resolve_hosts(campaign.hosts, nodes)
        for s in missing:
            rec.host(s.name, spec=s.to_dict(), node_id=None)
            for cell in (st.todo(s.name, campaign.cells, retry_verdicts) if resume else campaign.cells):
                rec.fault(s.name, cell, "lost", f"no alive Ray node matches host {s.name} "
                                                f"({s.selectors() or 'no selectors'}): nothing was run")
        remote = ray.remote(taskmod.run_cell)
        hosts: list[_Host] = []
        for name, spec, node in selected:
            cells = st.todo(name, campaign.cells, retry_verdicts) if resume else list(campaign.cells)
            res = node.get("Resources") or {}
            gpus = int(res.get("GPU") or 0)
            needs = any(_needs_gpu(c, gpus) for c in cells)
            slots = spec.parallel or (max(1, gpus) if needs and spec.num_gpus != 0 else 1)
            rec.host(name, node_id=node.get("NodeID"), address=node.get("NodeManagerAddress"),
                     hostname=node.get("NodeManagerHostname"), ray_resources={k: v for k, v in res.items()
                                                                             if not k.startswith("node:")},
                     spec=spec.to_dict())
            hosts.append(_Host(name, spec, node, cells, slots))
        inflight: dict = {}  # ref -> (host, cell, deadline, t_submit)

        def submit(h: _Host) -> None:
            while h.queue and h.inflight < h.slots:
                cell = h.queue.pop(0)
                gpus = int((h.node.get("Resources") or {}).get("GPU") or 0)
                ng = h.spec.num_gpus if h.spec.num_gpus is not None else (1 if _needs_gpu(cell, gpus) else 0)
                opts = {"scheduling_strategy": NodeAffinitySchedulingStrategy(h.node["NodeID"], soft=False),
                        "max_retries": 0, "retry_exceptions": False, "num_cpus": campaign.num_cpus, "num_gpus": ng}
                ref = remote.options(**opts).remote(_spec(cell, h.spec, python, bool(ng)))
                now = time.monotonic()
                inflight[ref] = (h, cell, now + cell.timeout + deadline_grace_s, now)
                h.inflight += 1

        for h in hosts:
            submit(h)
        last_nodes = time.monotonic()
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=poll_s)
            for ref in ready:
                h, cell, _, ts = inflight.pop(ref)
                h.inflight -= 1
                try:
                    out = ray.get(ref, timeout=60)
                    rec.ok(h.name, cell, out, h.node.get("NodeID"))
                except ray.exceptions.RayTaskError as e:  # an exception inside run_cell
                    rec.fault(h.name, cell, "error", f"task raised: {str(e).strip().splitlines()[-1][:500]}",
                              h.node.get("NodeID"), time.monotonic() - ts)
                except ray.exceptions.GetTimeoutError:
                    rec.fault(h.name, cell, "lost", "result could not be fetched within 60 s",
                              h.node.get("NodeID"), time.monotonic() - ts)
                except ray.exceptions.RayError as e:  # worker or node died, object lost, unschedulable
                    rec.fault(h.name, cell, "lost", f"{type(e).__name__}: {str(e).strip()[:500]}",
                              h.node.get("NodeID"), time.monotonic() - ts)
                submit(h)
            now = time.monotonic()
            for ref, (h, cell, deadline, ts) in list(inflight.items()):
                if now > deadline:
                    _cancel(ray, ref)
                    inflight.pop(ref)
                    h.inflight -= 1
                    rec.fault(h.name, cell, "timeout", f"no result after {now - ts:.0f} s (cell timeout "
                                                       f"{cell.timeout:g} s + {deadline_grace_s:g} s): task cancelled",
                              h.node.get("NodeID"), now - ts)
                    submit(h)
            if now - last_nodes >= max(poll_s, 1.0):
                last_nodes = now
                alive = {n.get("NodeID") for n in ray.nodes() if n.get("Alive")}
                for h in hosts:
                    if h.node.get("NodeID") in alive:
                        continue
                    for ref, (hh, cell, _, ts) in list(inflight.items()):
                        if hh is h:
                            _cancel(ray, ref)
                            inflight.pop(ref)
                            h.inflight -= 1
                            rec.fault(h.name, cell, "lost", f"node {str(h.node.get('NodeID'))[:12]} died while the "
                                                            f"cell ran", h.node.get("NodeID"), now - ts)
                    for cell in h.queue:
                        rec.fault(h.name, cell, "lost", f"node {str(h.node.get('NodeID'))[:12]} died before the cell "
                                                        f"started", h.node.get("NodeID"))
                    h.queue = []
    finally:
        st.runs.append({"started": _now(), "runner": "ray", "address": address or "local", "cells_run": rec.ran,
                        "elapsed_s": round(time.monotonic() - t0, 3), "ray_start_s": round(ray_start_s, 3)})
        save_state(cache, st)
        if started_here:
            ray.shutdown()
    return st


def _needs_gpu(cell: Cell, node_gpus: int) -> bool:
    return cell.device.startswith("cuda") or (cell.device == "auto" and node_gpus > 0)


def ray_available() -> bool:
    try:
        import importlib.util

        return importlib.util.find_spec("ray") is not None
    except (ImportError, ValueError):
        return False


def _cancel(ray, ref) -> None:
    try:
        ray.cancel(ref, force=True)
    except Exception:  # noqa: BLE001 - the task's node may be gone already
        pass
