"""The matrix of a campaign: rows = probe cases, columns = hosts; JSON, Markdown and HTML.

For every cell (family, target) there is a verdict row and one row per case. A host's entry is
the case status (``pass``, ``fail`` with the note), or, when the cell did not measure anything
there, the cell's status (``import_error``, ``crashed``, ``timeout``, ``lost``, ``error``) with its
message. The headline lists the rows where hosts differ, and names the host attribute (package
version, torch, GPU, runtime) that separates them when one does, e.g. "sinks_must_differ fails
on hosts with flash_attn 2.6.3 (h1), passes on flash_attn 2.7.4 (h2)".
"""

from __future__ import annotations

import html
import json
from typing import Any

from .runner import CampaignState

VERDICT_ROW = "(verdict)"
_CELL_ONLY = ("import_error", "crashed", "timeout", "lost", "error", "inconclusive")


def _host_attrs(d: dict) -> list[tuple[str, str]]:
    """(attribute, value) pairs that may explain a difference, packages first."""
    out = [(k, str(v)) for k, v in sorted((d.get("packages") or {}).items()) if k not in ("torch",)]
    for k in ("torch", "gpu", "runtime", "python_version", "python"):
        if d.get(k):
            out.append((k, str(d[k])))
    return out


def build(st: CampaignState) -> dict:
    camp = st.campaign
    host_names = list(st.hosts)
    hosts = []
    for n in host_names:
        d = st.hosts[n]
        hosts.append({k: d.get(k) for k in ("name", "node_id", "hostname", "address", "python", "gpu", "gpu_count",
                                             "runtime", "torch", "triton", "packages", "env_hash", "summary")})
    rows: list[dict] = []
    counts: dict[str, int] = {}
    for cell in camp.cells:
        per_host = {n: (st.results.get(n) or {}).get(cell.key) for n in host_names}
        vrow = {"family": cell.family, "target": cell.target, "cell": cell.key, "case": VERDICT_ROW,
                "required": True, "origin": list(cell.origin), "hosts": {}}
        case_names: list[str] = []
        for n, r in per_host.items():
            if r is None:
                vrow["hosts"][n] = {"status": "missing", "message": "not run yet"}
                counts["missing"] = counts.get("missing", 0) + 1
                continue
            vrow["hosts"][n] = {"status": r.get("status"), "message": r.get("message") or "",
                                "evidence_id": r.get("evidence_id"), "elapsed_s": r.get("elapsed_s")}
            counts[r.get("status")] = counts.get(r.get("status"), 0) + 1
            for c in r.get("cases") or {}:
                if c not in case_names:
                    case_names.append(c)
        rows.append(vrow)
        for cname in case_names:
            row = {"family": cell.family, "target": cell.target, "cell": cell.key, "case": cname, "required": True,
                   "hosts": {}}
            for n, r in per_host.items():
                if r is None:
                    row["hosts"][n] = {"status": "missing", "message": "not run yet"}
                    continue
                c = (r.get("cases") or {}).get(cname)
                if c is None:
                    st_ = r.get("status")
                    row["hosts"][n] = ({"status": st_, "message": r.get("message") or ""} if st_ in _CELL_ONLY
                                       else {"status": "n/a", "message": "case not reported"})
                    continue
                row["required"] = row["required"] and c.get("required", True)
                row["hosts"][n] = {"status": c.get("status"), "message": c.get("note") or "",
                                   "max_abs_err": c.get("max_abs_err")}
            rows.append(row)
    return {"campaign": camp.id, "name": camp.name, "hosts": hosts, "rows": rows, "counts": counts,
            "headline": headline(rows, st.hosts), "runs": st.runs,
            "cells": [c.to_dict() | {"key": c.key} for c in camp.cells]}


def _separating(groups: dict[str, list[str]], hosts: dict) -> tuple[str, dict[str, set]] | None:
    """An attribute whose values do not overlap between the status groups."""
    if len(groups) < 2:
        return None
    names = [n for g in groups.values() for n in g]
    if any(not (hosts.get(n) or {}).get("env_hash") for n in names):
        return None  # a host without an environment record (lost, unreachable): nothing to compare
    keys: list[str] = []
    for n in names:
        for k, _ in _host_attrs(hosts.get(n) or {}):
            if k not in keys:
                keys.append(k)
    for k in keys:
        vals = {status: {dict(_host_attrs(hosts.get(n) or {})).get(k, "absent") for n in g}
                for status, g in groups.items()}
        seen: set = set()
        overlap = False
        for v in vals.values():
            if v & seen:
                overlap = True
                break
            seen |= v
        if not overlap:
            return k, vals
    return None


def headline(rows: list[dict], hosts: dict) -> list[str]:
    """The rows where hosts differ (case rows first; a verdict row when none of its cases differ)."""
    out = []
    differing_cells = set()
    for row in rows:
        if row["case"] == VERDICT_ROW:
            continue
        line = _diff_line(row, hosts, skip=_CELL_ONLY)  # cell-level faults are reported once, below
        if line:
            out.append(line)
            differing_cells.add(row["cell"])
    for row in rows:
        faults = any((c.get("status") in _CELL_ONLY) for c in row["hosts"].values())
        if row["case"] == VERDICT_ROW and (row["cell"] not in differing_cells or faults):
            line = _diff_line(row, hosts)
            if line:
                out.append(line)
    return out


def _diff_line(row: dict, hosts: dict, skip: tuple = ()) -> str | None:
    groups: dict[str, list[str]] = {}
    for n, c in row["hosts"].items():
        s = c.get("status")
        if s in ("missing", "n/a", None) or s in skip:
            continue
        groups.setdefault(s, []).append(n)
    if len(groups) < 2:
        return None
    what = f"`{row['family']}` on `{row['target']}`" + ("" if row["case"] == VERDICT_ROW else f" · {row['case']}")
    sep = _separating(groups, hosts)
    parts = []
    for status in sorted(groups, key=lambda s: (s == "pass", s)):
        hs = ", ".join(groups[status])
        if sep:
            k, vals = sep
            vs = " / ".join(sorted(vals[status]))
            parts.append(f"{_verb(status)} on hosts with {k} {vs} ({hs})")
        else:
            parts.append(f"{_verb(status)} on {hs}")
    return f"{what}: " + "; ".join(parts)


def _verb(status: str) -> str:
    return {"pass": "passes", "fail": "fails", "import_error": "cannot import", "crashed": "crashes",
            "timeout": "times out", "lost": "was lost", "error": "errors"}.get(status, status)


# ----------------------------------------------------------------------------- renderers


def to_json(m: dict) -> str:
    return json.dumps(m, indent=1, sort_keys=True, default=str)


def _cell_text(c: dict, limit: int = 140) -> str:
    s = str(c.get("status") or "?")
    msg = " ".join(str(c.get("message") or "").split())
    if s in ("pass", "missing", "n/a", "skip") or not msg:
        return "**FAIL**" if s == "fail" else s
    label = "**FAIL**" if s == "fail" else f"**{s}**"
    return f"{label}: {msg[:limit]}{'…' if len(msg) > limit else ''}"


def _md_escape(s: str) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def _host_header(h: dict) -> str:
    pk = ", ".join(f"{k} {v}" for k, v in sorted((h.get("packages") or {}).items()))
    return f"{h.get('gpu') or '?'} · {h.get('runtime') or '-'} · torch {h.get('torch') or '?'}" + (f" · {pk}" if pk else "")


def to_markdown(m: dict) -> str:
    names = [h["name"] for h in m["hosts"]]
    lines = [f"# Probe matrix: {m.get('name') or m['campaign']}", ""]
    if m["headline"]:
        lines.append("**Differences between hosts**")
        lines.append("")
        lines += [f"- {_md_escape(x)}" for x in m["headline"]]
    else:
        lines.append("No difference between hosts.")
    lines += ["", "| host | GPU | runtime | torch | triton | kernel packages | env |", "|---|---|---|---|---|---|---|"]
    for h in m["hosts"]:
        pk = ", ".join(f"{k} {v}" for k, v in sorted((h.get("packages") or {}).items()) if k != "triton") or "-"
        lines.append(f"| {_md_escape(h['name'])} | {_md_escape(h.get('gpu') or '?')} | {_md_escape(h.get('runtime') or '-')} "
                     f"| {_md_escape(h.get('torch') or '?')} | {_md_escape(h.get('triton') or '-')} | {_md_escape(pk)} "
                     f"| `{str(h.get('env_hash') or '?')[:8]}` |")
    lines += ["", "| probe | case | " + " | ".join(_md_escape(n) for n in names) + " |",
              "|---|---|" + "---|" * len(names)]
    for r in m["rows"]:
        probe = f"`{r['family']}` `{r['target']}`" if r["case"] == "(verdict)" else ""
        case = r["case"] + ("" if r.get("required", True) else " (advisory)")
        cells = [_md_escape(_cell_text(r["hosts"].get(n) or {"status": "missing"})) for n in names]
        lines.append(f"| {_md_escape(probe)} | {_md_escape(case)} | " + " | ".join(cells) + " |")
    c = m.get("counts") or {}
    lines += ["", "cells: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())) if c else "cells: none"]
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px system-ui,sans-serif;margin:1.5em}table{border-collapse:collapse;margin:1em 0}
th,td{border:1px solid #bbb;padding:3px 6px;vertical-align:top;text-align:left}
th.host{max-width:22em;font-weight:normal}td.pass{background:#dff5df}td.fail{background:#f8d4d4}
td.import_error,td.crashed,td.timeout,td.lost,td.error{background:#fbe7c6}td.missing,td.n\\/a{color:#888}
tr.verdict td{border-top:2px solid #666}.msg{display:block;font-size:12px;color:#333;max-width:30em}
"""

_JS = """
(function(){var cells=document.querySelectorAll('#matrix td[data-status]');var c={};
for(var i=0;i<cells.length;i++){var s=cells[i].getAttribute('data-status');c[s]=(c[s]||0)+1;}
var k=Object.keys(c).sort();var t=[];for(var j=0;j<k.length;j++){t.push(k[j]+' '+c[k[j]]);}
document.getElementById('summary').textContent='entries: '+t.join(', ');})();
"""


def to_html(m: dict) -> str:
    e = html.escape
    names = [h["name"] for h in m["hosts"]]
    out = ["<!DOCTYPE html><html><head><meta charset='utf-8'>",
           "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
           "script-src 'unsafe-inline'\">",
           f"<title>Probe matrix: {e(m.get('name') or m['campaign'])}</title><style>{_CSS}</style></head><body>",
           f"<h1>Probe matrix: {e(m.get('name') or m['campaign'])}</h1>"]
    if m["headline"]:
        out.append("<h2>Differences between hosts</h2><ul id='headline'>")
        out += [f"<li>{e(x.replace('`', ''))}</li>" for x in m["headline"]]
        out.append("</ul>")
    else:
        out.append("<p id='headline'>No difference between hosts.</p>")
    out.append("<table id='matrix'><thead><tr><th>probe</th><th>case</th>")
    for h in m["hosts"]:
        out.append(f"<th class='host' data-host='{e(h['name'], quote=True)}'><b>{e(h['name'])}</b><br>"
                   f"{e(_host_header(h))}<br><code>{e(str(h.get('env_hash') or '?')[:8])}</code></th>")
    out.append("</tr></thead><tbody>")
    for r in m["rows"]:
        verdict = r["case"] == "(verdict)"
        out.append(f"<tr class='{'verdict' if verdict else 'case'}'>")
        out.append(f"<td>{'<code>' + e(r['family']) + '</code> <code>' + e(r['target']) + '</code>' if verdict else ''}</td>"
                   f"<td>{e(r['case'])}{'' if r.get('required', True) else ' (advisory)'}</td>")
        for n in names:
            c = r["hosts"].get(n) or {"status": "missing"}
            s = str(c.get("status") or "?")
            msg = " ".join(str(c.get("message") or "").split())
            inner = e(s) + (f"<span class='msg'>{e(msg[:400])}</span>" if msg and s not in ("pass", "n/a") else "")
            out.append(f"<td class='{e(s, quote=True)}' data-status='{e(s, quote=True)}' "
                       f"data-host='{e(n, quote=True)}'>{inner}</td>")
        out.append("</tr>")
    out.append("</tbody></table><p id='summary'></p>")
    out.append(f"<script>{_JS}</script></body></html>")
    return "\n".join(out) + "\n"


def render(m: dict, fmt: str) -> str:
    if fmt == "json":
        return to_json(m)
    if fmt == "html":
        return to_html(m)
    return to_markdown(m)


def summary_counts(m: dict) -> dict[str, Any]:
    return dict(m.get("counts") or {})
