"""``attnlens check``: formats, exit codes, SARIF shape."""

from __future__ import annotations

import json

import pytest
from attnlens.cli import main

from .conftest import FIXTURES, PYTHON

CALLS = FIXTURES / "calls"
PLATFORM = FIXTURES / "platform"

# The parts of SARIF 2.1.0 that GitHub code scanning requires (a subset of the OASIS schema).
SARIF_SUBSET = {
    "type": "object",
    "required": ["version", "runs"],
    "properties": {
        "version": {"const": "2.1.0"},
        "$schema": {"type": "string"},
        "runs": {
            "type": "array", "minItems": 1,
            "items": {
                "type": "object",
                "required": ["tool", "results"],
                "properties": {
                    "tool": {
                        "type": "object", "required": ["driver"],
                        "properties": {"driver": {
                            "type": "object", "required": ["name", "rules"],
                            "properties": {
                                "name": {"type": "string"},
                                "rules": {"type": "array", "items": {
                                    "type": "object", "required": ["id", "shortDescription", "helpUri"],
                                    "properties": {
                                        "id": {"type": "string", "pattern": "^AL1[0-9]{2}$"},
                                        "shortDescription": {"type": "object", "required": ["text"]},
                                        "helpUri": {"type": "string", "pattern": "^[a-z][a-z0-9+.-]*:.*#al1[0-9]{2}-[a-z-]+$"},
                                        "defaultConfiguration": {"type": "object", "properties": {
                                            "level": {"enum": ["none", "note", "warning", "error"]}}},
                                    }}},
                            }}},
                    },
                    "results": {"type": "array", "items": {
                        "type": "object", "required": ["ruleId", "message", "locations"],
                        "properties": {
                            "ruleId": {"type": "string"},
                            "level": {"enum": ["none", "note", "warning", "error"]},
                            "message": {"type": "object", "required": ["text"]},
                            "locations": {"type": "array", "minItems": 1, "items": {
                                "type": "object", "required": ["physicalLocation"],
                                "properties": {"physicalLocation": {
                                    "type": "object", "required": ["artifactLocation", "region"],
                                    "properties": {
                                        "artifactLocation": {"type": "object", "required": ["uri"]},
                                        "region": {"type": "object", "required": ["startLine", "startColumn"],
                                                   "properties": {"startLine": {"type": "integer", "minimum": 1},
                                                                  "startColumn": {"type": "integer", "minimum": 1},
                                                                  "endLine": {"type": "integer", "minimum": 1},
                                                                  "endColumn": {"type": "integer", "minimum": 1}}},
                                    }}},
                            }},
                        }}},
                },
            },
        },
    },
}


def run(capsys, *args):
    code = main(["check", *args, "--python", PYTHON, "--no-cache"])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_format_and_exit_code(capsys):
    code, out, _err = run(capsys, "--root", str(CALLS), "--format", "json")
    data = json.loads(out)
    assert code == 1  # AL101/AL108/AL113 errors in the fixture
    assert data and all(set(d) >= {"rule", "severity", "path", "line", "col", "end_line", "end_col", "message", "data"} for d in data)
    assert all(d["subject"]["kind"] == "worktree" for d in data)  # every report names its subject
    d = next(d for d in data if d["rule"] == "AL101" and "bogus" in d["message"])
    assert d["path"] == "fxcalls/calls.py"
    line = (CALLS / "fxcalls/calls.py").read_text().splitlines()[d["line"] - 1]
    assert line[d["col"] - 1:].startswith("bogus"), "col is 1-based"
    assert d["end_col"] - d["col"] == len("bogus")


def test_exit_zero_without_errors(capsys):
    code, out, _ = run(capsys, "--root", str(PLATFORM), "--format", "json")
    data = json.loads(out)
    assert data and code == 0
    assert {d["severity"] for d in data} <= {"warning", "info"}


def test_paths_select_ignore(capsys):
    code, out, _ = run(capsys, "fxcalls/schema_calls.py", "--root", str(CALLS), "--format", "json")
    data = json.loads(out)
    assert data and {d["rule"] for d in data} == {"AL113"} and code == 1
    code, out, _ = run(capsys, "--root", str(CALLS), "--format", "json", "--select", "AL102")
    assert {d["rule"] for d in json.loads(out)} == {"AL102"} and code == 0
    code, out, _ = run(capsys, "--root", str(CALLS), "--format", "json", "--ignore", "AL101,AL108,AL113")
    assert code == 0 and not {d["rule"] for d in json.loads(out)} & {"AL101", "AL108", "AL113"}
    code, _out, err = run(capsys, "--root", str(CALLS), "--select", "AL999")
    assert code == 2 and "unknown rule" in err


def test_text_format(capsys):
    _code, out, _ = run(capsys, "--root", str(PLATFORM))
    lines = out.strip().splitlines()
    assert lines[-1].endswith("info") or "finding(s)" in lines[-1]
    assert any(":" in l and " AL105 [nvidia-capability-check] " in l for l in lines)


def _check_sarif_required(doc):
    assert doc["version"] == "2.1.0" and doc["runs"]
    run_ = doc["runs"][0]
    rules = run_["tool"]["driver"]["rules"]
    ids = {r["id"] for r in rules}
    for r in rules:
        assert r["shortDescription"]["text"] and "#" in r["helpUri"]
    for res in run_["results"]:
        assert res["ruleId"] in ids and res["message"]["text"]
        assert res["level"] in ("error", "warning", "note")
        loc = res["locations"][0]["physicalLocation"]
        assert loc["artifactLocation"]["uriBaseId"] == "SRCROOT" and not loc["artifactLocation"]["uri"].startswith("/")
        reg = loc["region"]
        assert reg["startLine"] >= 1 and reg["startColumn"] >= 1
        assert (reg["endLine"], reg["endColumn"]) > (reg["startLine"], reg["startColumn"]) or reg["endLine"] > reg["startLine"]
    assert run_["originalUriBaseIds"]["SRCROOT"]["uri"].startswith("file://")


def test_sarif_shape(capsys):
    code, out, _ = run(capsys, "--root", str(CALLS), "--format", "sarif")
    doc = json.loads(out)
    _check_sarif_required(doc)
    assert code == 1
    levels = {r["level"] for r in doc["runs"][0]["results"]}
    assert "error" in levels and "note" in levels


def test_sarif_against_schema_subset(capsys):
    jsonschema = pytest.importorskip("jsonschema")
    _code, out, _ = run(capsys, "--root", str(CALLS), "--format", "sarif")
    jsonschema.validate(json.loads(out), SARIF_SUBSET)


def test_rules_command(capsys):
    assert main(["rules", "--format", "json"]) == 0
    rules = json.loads(capsys.readouterr().out)
    assert [r["id"] for r in rules] == sorted(r["id"] for r in rules)
    assert all(r["severity"] in ("error", "warning", "info") for r in rules)


def test_real_process_leaves_fast_with_output_and_cache_complete(tmp_path):
    """The console entry point leaves with os._exit after analysis-only commands: the output is
    whole, the exit code kept, and every pending cache write is on disk."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    argv = [sys.executable, "-m", "attnlens", "check", "--root", str(CALLS), "--python", PYTHON,
            "--format", "json", "--cache-dir", str(cache)]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 1, p.stderr  # errors in the fixture
    data = json.loads(p.stdout)
    assert any(d["rule"] == "AL101" for d in data)
    folder = next(cache.iterdir())
    rules = list((folder / "rules").glob("*.pickle"))
    assert len(rules) >= 2 and not list(folder.rglob("*.tmp"))  # findings stored, no torn writes
    assert list((folder / "py").glob("*.pickle"))
    # a second process finds every module in the cache and gives the same answer
    p2 = subprocess.run(argv + ["--timing"], capture_output=True, text=True, timeout=300)
    assert p2.returncode == 1 and json.loads(p2.stdout) == data
    assert "modules checked 0" in p2.stderr, p2.stderr
