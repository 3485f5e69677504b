"""The diagnostics of a file besides its syntax errors and rule findings: probe verdicts, upstream drift and
contract-file errors (worker thread, plain data).

Its own module so that :mod:`.diagnostics` (which collects them) and :mod:`.runtime_actions` (which records
probe verdicts and asks :mod:`.diagnostics` to publish them) import each other's parts without a circle.
"""

from __future__ import annotations

import logging

from lsprotocol import types as T

from ..analysis import Analysis
from ..answers import Diag
from ..convert import Span
from ..request import View

log = logging.getLogger("attnlens.lsp")

DRIFT_SOURCE = "attnlens-drift"


def extra_diagnostics(a: Analysis, view: View, path: str, probe=()) -> list[Diag]:
    """Probe, drift and contract-file diagnostics of one file (worker thread). ``probe``: the file's probe
    verdicts (``diagnostics.probe_verdicts``), taken on the loop thread."""
    if path.endswith(".toml"):
        return _contract_diagnostics(a, path)
    out = list(probe)
    out.extend(_drift_diagnostics(a, view, path))
    return out


CONTRACT_SOURCE = "attnlens-contracts"


def _whole_line(path: str, line: int) -> Span:
    return Span(path, line, 0, line, 10_000)


def _contract_diagnostics(a: Analysis, path: str) -> list[Diag]:
    """Schema errors of a contract file (the rest of the contracts still load)."""
    try:
        from ...rules.contracts import load_contracts
    except Exception:  # noqa: BLE001 - rules part optional
        return []
    text = a.q.source_text(path)
    try:
        if text is not None and a.q.overlay_text(path) is not None:
            from ...rules.contracts import parse_contract_text

            _, errors = parse_contract_text(text, path)
        else:
            errors = load_contracts([path]).errors
    except Exception as e:  # noqa: BLE001 - a broken file must give a message, not an exception
        return [Diag(Span(path, 0, 0, 0, 1), f"cannot read contracts: {e}", T.DiagnosticSeverity.Error,
                     CONTRACT_SOURCE)]
    out = []
    for e in errors:
        line = max(int(getattr(e, "line", 1) or 1) - 1, 0)
        out.append(Diag(_whole_line(path, line), str(getattr(e, "message", e)), T.DiagnosticSeverity.Error,
                        CONTRACT_SOURCE, "contract-schema"))
    return out


def _drift_diagnostics(a: Analysis, view: View, path: str) -> list[Diag]:
    try:
        from ...upgrade.drift import drift_findings  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001
        return []
    try:
        findings = drift_findings(a.ws, None) or []
    except Exception as e:  # noqa: BLE001 - no configured old version, download refused, ...
        log.debug("drift findings unavailable: %s", e)
        return []
    conv = view.positions(a)
    out = []
    for f in findings:
        get = f.get if isinstance(f, dict) else (lambda k, d=None, _f=f: getattr(_f, k, d))
        if get("path") != path:
            continue
        line = int(get("line", 1) or 1)
        try:
            rng = conv.span(path, line, int(get("col", 0) or 0), line, len(conv.line_text(path, line)))
        except Exception:  # noqa: BLE001
            continue
        sev = {"error": T.DiagnosticSeverity.Error, "warning": T.DiagnosticSeverity.Warning,
               "info": T.DiagnosticSeverity.Information}.get(str(get("severity", "info")), T.DiagnosticSeverity.Information)
        out.append(Diag(rng, str(get("message", "")), sev, DRIFT_SOURCE, get("rule"), data=get("data")))
    return out
