"""How much of a file's summary survives one typing mistake (pyrecover), and what recovery costs.

    .venv/bin/python bench/bench_recovery.py [--files N] [--edits K] [--seed S] DIR...

For each Python file under DIR (the first N, sorted), K random one-place edits of the kinds a
user makes while typing (a stray ``)``, an unclosed ``(``, ``ops.``, a deleted character, a
missing ``:``, an opened ``\"\"\"``) that make the file fail ``ast.parse``. For each broken text:

* recovered: the summary has no ``error`` (the file is still analysed);
* kept: among the functions and classes that do not hold the edited line, the share whose
  summary (calls and bindings included) is identical to the error-free file's;
* the time of ``summarize`` on the broken text against the error-free text.

Prints one line per edit kind and a total; ``--json`` for the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from attnlens import pyindex  # noqa: E402


def edits(line: str, rng: random.Random) -> dict[str, str]:
    """The broken versions of one code line, by kind."""
    code = line.rstrip()
    ind = len(code) - len(code.lstrip())
    body = code[ind:]
    out = {}
    if len(body) > 2:
        i = ind + rng.randrange(1, len(body))
        out["stray )"] = code[:i] + ")" + code[i:]
        out["unclosed ("] = code[:i] + "(" + code[i:]
        out["deleted char"] = code[:i] + code[i + 1:]
    out["ops."] = code + " ops."
    if code.endswith(":"):
        out["missing :"] = code[:-1]
    out['opened """'] = code[:ind] + 'x = """' + code[ind:]
    return out


def view(s) -> dict:
    """Per function/class qualname: a comparable summary (calls resolved from their indices)."""
    out = {}
    for q, f in s.functions.items():
        d = asdict(f)
        d["calls"] = [asdict(s.calls[i]) for i in f.calls]
        out["f:" + q] = (f.deco_line, f.end_line, repr(d))
    for q, c in s.classes.items():
        out["c:" + q] = (c.deco_line, c.end_line, repr(asdict(c)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dirs", nargs="+")
    ap.add_argument("--files", type=int, default=40)
    ap.add_argument("--edits", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    files = sorted(p for d in args.dirs for p in Path(d).rglob("*.py") if p.stat().st_size > 2000)[: args.files]
    stats: dict[str, dict] = {}
    for p in files:
        text = p.read_text(encoding="utf-8", errors="replace")
        t0 = time.perf_counter()
        base = pyindex.summarize(text, str(p), "")
        t_ok = time.perf_counter() - t0
        if base.error:
            continue
        good = view(base)
        lines = text.split("\n")
        code_lines = [i for i, ln in enumerate(lines) if ln.strip() and not ln.strip().startswith(("#", '"', "'"))]
        for _ in range(args.edits):
            i = rng.choice(code_lines)
            for kind, new in edits(lines[i], rng).items():
                broken = "\n".join(lines[:i] + [new] + lines[i + 1:])
                try:
                    compile(broken, "<x>", "exec", flags=0x400, dont_inherit=True)  # ast only
                    continue  # still valid: not a syntax-error case
                except SyntaxError:
                    pass
                except ValueError:
                    continue
                pyindex.parse_source.cache_clear()
                t0 = time.perf_counter()
                s = pyindex.summarize(broken, str(p), "")
                t_bad = time.perf_counter() - t0
                st = stats.setdefault(kind, {"n": 0, "recovered": 0, "reported": 0, "kept": 0, "others": 0, "ratio": []})
                st["n"] += 1
                st["ratio"].append(t_bad / max(t_ok, 1e-6))
                if s.error:
                    continue
                st["recovered"] += 1
                st["reported"] += bool(s.syntax_errors)
                now = view(s)
                for k, (a, b, r) in good.items():
                    if a <= i + 1 <= b:
                        continue  # holds the edited line
                    st["others"] += 1
                    st["kept"] += now.get(k, (0, 0, None))[2] == r
    total = {"n": 0, "recovered": 0, "reported": 0, "kept": 0, "others": 0, "ratio": []}
    for st in stats.values():
        for k in total:
            total[k] += st[k]
    stats["all"] = total
    if args.json:
        print(json.dumps({k: {**v, "ratio": statistics.median(v["ratio"]) if v["ratio"] else None} for k, v in stats.items()}, indent=1))
        return 0
    print(f"{len(files)} files, {args.edits} lines each, seed {args.seed}")
    print(f"{'edit':14} {'broken':>7} {'recovered':>10} {'reported':>9} {'untouched defs kept':>20} {'time vs ok (median)':>20}")
    for kind, st in stats.items():
        kept = f"{st['kept']}/{st['others']} ({100 * st['kept'] / max(st['others'], 1):.1f}%)"
        ratio = statistics.median(st["ratio"]) if st["ratio"] else 0
        print(f"{kind:14} {st['n']:7} {st['recovered']:10} {st['reported']:9} {kept:>20} {ratio:19.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
