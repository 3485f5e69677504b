"""Code-action latency with and without quick fixes, on a real plugin file.

``python bench/bench_fix_actions.py --root R --python PY FILE [--rule AL108] [-n 7]``

Times ``runtime_actions.code_actions`` (the handler behind ``textDocument/codeAction``) on the
worker's Analysis, at the position of a fixable finding of FILE:

* ``before``: the request without that diagnostic in its context (what every code-action request
  cost before quick fixes: the probe actions of the chain under the cursor);
* ``after, first``: with the diagnostic, the first request (imports libcst, computes the fix);
* ``after``: with the diagnostic, later requests (median).

Prints medians in ms. The rules' findings of the file are computed once before timing (the
diagnostics did that already in the editor).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("file")
    p.add_argument("--root", required=True)
    p.add_argument("--python", default=None)
    p.add_argument("--rule", default="AL108")
    p.add_argument("-n", type=int, default=7)
    args = p.parse_args()
    from lsprotocol import types as T

    from attnlens.lsp.analysis import Analysis
    from attnlens.lsp.convert import Positions
    from attnlens.lsp.features.diagnostics import to_diagnostic
    from attnlens.lsp.features.runtime_actions import code_actions
    from attnlens.rules.engine import check_module
    from attnlens.workspace import Workspace

    class LS:
        encoding = "utf-16"
        client_capabilities = T.ClientCapabilities()

        def positions(self, a):
            return Positions(a.line_text, self.encoding)

        def doc_version(self, uri):
            return 1

    ws = Workspace(args.root, python=args.python)
    path = os.path.realpath(os.path.join(args.root, args.file))
    a, ls = Analysis(ws), LS()
    f = next(f for f in check_module(ws, path) if f.rule == args.rule)
    d = to_diagnostic(ls.positions(a), path, f)
    uri = "file://" + path

    def once(diags):
        t0 = time.perf_counter()
        got = code_actions(a, ls, path, uri, d.range, diags)
        return (time.perf_counter() - t0) * 1000, got

    code_actions(a, ls, path, uri, d.range, [])  # warm the chain under the cursor
    before = [once([])[0] for _ in range(args.n)]
    first, got = once([d])
    after = [once([d])[0] for _ in range(args.n)]
    titles = [x.title for x in got if x.edit is not None]
    print(f"{args.file} {args.rule}: before {statistics.median(before):.1f} ms; after, first {first:.1f} ms; "
          f"after {statistics.median(after):.1f} ms (median of {args.n}); actions with an edit: {titles}; "
          f"load {os.getloadavg()[0]:.2f}")
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
