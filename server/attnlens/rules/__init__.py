"""Contract rules: findings over resolved chains, component contracts, CLI ``attnlens check``.

Submodules: :mod:`.contracts` (contract files), :mod:`.engine` (rules, findings,
``check_module``/``check_paths``), :mod:`.sarif`, :mod:`.cli_cmds`. Names are
loaded lazily so ``python -m attnlens.rules.contracts`` runs cleanly.
"""

_EXPORTS = {
    "Contract": "contracts", "ContractSet": "contracts", "load_contracts": "contracts",
    "Engine": "engine", "Finding": "engine", "Rule": "engine", "check_module": "engine",
    "check_paths": "engine", "rules_table": "engine",
}

__all__ = ["Contract", "ContractSet", "Engine", "Finding", "Rule", "check_module", "check_paths", "load_contracts",
           "rules_table"]


def __getattr__(name):
    mod = _EXPORTS.get(name)
    if mod is None:
        raise AttributeError(name)
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{mod}"), name)
