"""SARIF 2.1.0 output (the subset GitHub code scanning reads)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from .. import __version__

LEVEL = {"error": "error", "warning": "warning", "info": "note"}
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"


def docs_base() -> str:
    env = os.environ.get("ATTNLENS_DOCS_URL")
    if env:
        return env
    here = Path(__file__).resolve()
    cand = here.parents[3] / "docs" / "rules.md"
    if cand.exists():
        return cand.as_uri()
    return "https://attnlens.invalid/docs/rules.md"


def _uri_relative(path: str, root: Path) -> tuple[str, bool]:
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return Path(path).as_uri(), False
    if rel.startswith(".."):
        return Path(path).resolve().as_uri(), False
    return Path(rel).as_posix(), True


def to_sarif(findings, rules, root) -> dict:
    root = Path(root)
    base = docs_base()
    rule_list = list(rules)
    index = {r.id: i for i, r in enumerate(rule_list)}
    driver_rules = []
    for r in rule_list:
        driver_rules.append({
            "id": r.id,
            "name": r.name,
            "shortDescription": {"text": r.summary},
            "fullDescription": {"text": r.docs or r.summary},
            "help": {"text": f"{r.summary}\n\n{r.docs}".strip(), "markdown": f"**{r.id} {r.name}**: {r.summary}\n\n{r.docs}".strip()},
            "helpUri": f"{base}#{r.anchor}",
            "defaultConfiguration": {"level": LEVEL.get(r.severity, "warning")},
            "properties": {"tags": list(r.tags), "precision": "high"},
        })
    results = []
    for f in findings:
        uri, relative = _uri_relative(f.path, root)
        loc = {"uri": uri}
        if relative:
            loc["uriBaseId"] = "SRCROOT"
        region = {"startLine": f.line, "startColumn": f.col + 1, "endLine": max(f.end_line, f.line),
                  "endColumn": max(f.end_col + 1, 1)}
        if region["endLine"] == region["startLine"] and region["endColumn"] <= region["startColumn"]:
            region["endColumn"] = region["startColumn"] + 1
        fp = hashlib.sha256(f"{f.rule}|{uri}|{f.message}".encode()).hexdigest()[:32]
        res = {
            "ruleId": f.rule,
            "level": LEVEL.get(f.severity, "warning"),
            "message": {"text": f.message},
            "locations": [{"physicalLocation": {"artifactLocation": loc, "region": region}}],
            "partialFingerprints": {"attnlensFinding/v1": fp},
            "properties": {"severity": f.severity,
                           "contract": (f.data or {}).get("contract"), "probe": (f.data or {}).get("probe")},
        }
        if f.rule in index:
            res["ruleIndex"] = index[f.rule]
        rel_locs = []
        for i, r in enumerate(getattr(f, "related", None) or ()):
            ruri, rrel = _uri_relative(r.get("path") or f.path, root)
            rloc = {"uri": ruri}
            if rrel:
                rloc["uriBaseId"] = "SRCROOT"
            rl = int(r.get("line", 1) or 1)
            rel_locs.append({"id": i + 1, "message": {"text": r.get("message", "")},
                             "physicalLocation": {"artifactLocation": rloc, "region": {
                                 "startLine": rl, "startColumn": int(r.get("col", 0)) + 1,
                                 "endLine": max(int(r.get("end_line") or rl), rl),
                                 "endColumn": max(int(r.get("end_col", 0)) + 1, int(r.get("col", 0)) + 2)}}})
        if rel_locs:
            res["relatedLocations"] = rel_locs
        if getattr(f, "detail", ""):
            res["message"]["markdown"] = f"{f.message}\n\n{f.detail}"
        results.append(res)
    return {
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": "AttnLens", "version": __version__, "semanticVersion": __version__,
                                "informationUri": base.split("#")[0], "rules": driver_rules}},
            "originalUriBaseIds": {"SRCROOT": {"uri": root.resolve().as_uri().rstrip("/") + "/"}},
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    }
