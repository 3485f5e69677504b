"""The probe families' catalog and their names, without the machinery that runs probes.

Analysis code (the rules' probe routing, the upgrade inventory) asks which families exist and what they
drive; importing :mod:`.probes` for that brought asyncio, the agent pool and the evidence store into every
``attnlens check`` (40 ms of its serial start). :mod:`.probes` re-exports these names.
"""

from __future__ import annotations

from ..agent import probes as _agent_probes


def families() -> list[dict]:
    """Catalog: name, title, component, upstream callables, calling convention, cases, options, tolerance."""
    return _agent_probes.catalog()


# names the contracts (and the issue text) use for the same families
FAMILY_ALIASES = {"varlen_attention": "varlen", "decode_attention": "decode", "sparse_topk": "topk",
                  "kv_write": "kv_cache_write", "merge_states": "lse_merge"}


def canonical_family(name: str) -> str:
    return FAMILY_ALIASES.get(name, name)


def family_names() -> list[str]:
    return list(_agent_probes.FAMILY_MODULES)


def get_family(name: str) -> dict:
    for f in families():
        if f["name"] == name:
            return f
    raise KeyError(name)
