"""Which probe family can decide a call: routing by the arguments the call passes.

A contract names the probe family of a kernel family, but one package (``flash_mla.*``) holds a decode
kernel, a sparse-prefill kernel and a metadata helper: a decode probe drives only the first. A family's
metadata (``agent/probes/*.py``: ``FAMILY["keywords"]``) lists the argument names its calling conventions
pass; a call whose keywords are mostly outside that list is not something the family can reproduce, and a
finding says so ("no probe family covers `x` yet") instead of recommending a probe that cannot decide it.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field


@functools.lru_cache(maxsize=1)
def _families() -> tuple[dict, dict, object]:
    """(family -> keywords it passes, family -> names of the callables it drives, canonical_family)."""
    from ..runtime.catalog import canonical_family, families

    kws, names = {}, {}
    for f in families():
        kws[f["name"]] = frozenset(f.get("keywords") or ())
        names[f["name"]] = frozenset(m for u in f.get("upstream") or () for m in re.findall(r"(?:\w+\.)+(\w+)", u))
    return kws, names, canonical_family


@dataclass(frozen=True)
class Route:
    probe: str | None  # the family name to recommend (as the contract spells it), None when none fits
    uncovered: tuple = field(default=())  # keywords of the call that the family does not pass
    needs: tuple = field(default=())  # when no family fits: the call's keywords (what a new family must pass)

    def text(self, symbol: str) -> str:
        """The action sentence of a finding."""
        if self.probe is None:
            needs = f" (needs: {_kw_list(self.needs, 4)})" if self.needs else ""
            return f"No probe family covers `{symbol}` yet{needs}."
        if self.uncovered:
            return f"Decide with the `{self.probe}` probe (it passes no {_kw_list(self.uncovered, 2)})."
        return f"Decide with the `{self.probe}` probe."


def _kw_list(kws: tuple, n: int) -> str:
    return ", ".join(k + "=" for k in kws[:n]) + (", …" if len(kws) > n else "")


def route(probe: str | None, keywords, name: str = "") -> Route:
    """Can the family ``probe`` reproduce a call of ``name`` passing ``keywords``? The family must drive a
    callable of that name (its ``upstream`` list) and pass most of the call's keywords."""
    kws = tuple(dict.fromkeys(k for k in keywords if k))
    if not probe:
        return Route(None, needs=kws)
    fam_kws, fam_names, canonical = _families()
    fam = canonical(probe)  # type: ignore[operator]
    known = fam_kws.get(fam)
    if known is None:
        return Route(probe)  # a family this build does not describe: trust the contract
    if name and fam_names.get(fam) and name not in fam_names[fam]:
        return Route(None, needs=kws)
    inside = [k for k in kws if k in known]
    outside = tuple(k for k in kws if k not in known)
    if kws and (len(inside) < len(outside) or not inside):
        return Route(None, needs=kws)
    return Route(probe, uncovered=outside)


def best_family(words, among: tuple[str, ...]) -> str | None:
    """The family of ``among`` whose calling conventions pass most of ``words`` (argument names and texts of a
    call), None when none passes any."""
    fam_kws = _families()[0]
    score = {f: len(set(words) & fam_kws.get(f, frozenset())) for f in among}
    best = max(among, key=lambda f: (score[f], -among.index(f)))
    return best if score[best] else None
