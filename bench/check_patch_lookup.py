"""The per-key patch lookup after edits (``Resolver.patch_entry``) against a fresh workspace's whole table.

    .venv/bin/python bench/check_patch_lookup.py --root /path/to/plugin --python .venv/bin/python \
        [--files 'GLOB'] [--trials 6] [--seed 3]

Each trial pastes the editing session's 5,000-line block (the ``--files`` texts cycled, as ``fuzz_lsp.py --session``
pastes) at a random line of one of those files, half of the time with an added replacement of an upstream attribute,
and looks up every key of the table before the edit, the added key and one no module replaces. Every entry must equal
the one a fresh workspace with the same buffer collects; prints how often the per-key path was taken.
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

from attnlens.patches import entry_facts as facts  # noqa: E402
from attnlens.workspace import Workspace  # noqa: E402

ADDED = ("vllm.v1.attention.backends.utils", "get_kv_cache_layout")
EXTRA = "\nimport vllm.v1.attention.backends.utils as _u\n_u.get_kv_cache_layout = lambda: 'HND'\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--root", required=True)
    p.add_argument("--python", default=sys.executable)
    p.add_argument("--files", default="vllm_metax/v1/attention/backends/*.py")
    p.add_argument("--trials", type=int, default=6)
    p.add_argument("--seed", type=int, default=3)
    args = p.parse_args()
    root = Path(args.root)
    files = sorted(str(f) for f in root.glob(args.files) if f.is_file())
    if not files:
        print(f"no files match {args.files} under {root}", file=sys.stderr)
        return 2
    lines: list[str] = []
    for f in files:
        lines += Path(f).read_text(encoding="utf-8").splitlines(True)
    paste = "".join(lines[i % len(lines)] for i in range(5000))
    rng = random.Random(args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(root, python=args.python, cache_dir=Path(tmp) / "ws")
        r, idx = ws.resolver, ws.index
        before = list(r.patches())
        per_key = compared = 0
        for trial in range(args.trials):
            f = rng.choice(files)
            base = idx.source_text(f)
            at = rng.choice([m.start() for m in re.finditer(r"(?m)^", base)])
            idx.set_overlay(f, base[:at] + paste + base[at:] + rng.choice(["", EXTRA]))
            keys = before + [ADDED, ("torch", "no_such_attribute")]
            got = {k: facts(r.patch_entry(k)) for k in keys}
            per_key += r._patch_gen != idx.generation  # noqa: SLF001 - the whole table was not built
            fresh = Workspace(root, python=args.python, cache_dir=Path(tmp) / f"fresh{trial}")
            try:
                fresh.index.set_overlay(f, idx.source_text(f))
                want = fresh.resolver.patches()
            finally:
                fresh.close()
            extra_keys = set(want) - set(keys)
            bad = [k for k in keys if got[k] != facts(want.get(k))]
            if bad or extra_keys:
                print(f"trial {trial}: differs at {bad[:3]}, keys not looked up {sorted(extra_keys)[:3]}")
                return 1
            compared += len(keys)
            idx.set_overlay(f, None)
        ws.close()
    print(f"{args.trials} pastes: the per-key lookup taken after {per_key}; {compared} entries equal a fresh table's "
          f"(table of {len(before)} keys)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
