"""Code-action latency with and without quick fixes, on a real plugin file.

``python bench/bench_fix_actions.py --root R --python PY FILE [--rule AL108] [-n 7]``

Times ``runtime_actions.code_actions`` (the handler behind ``textDocument/codeAction``) on the
worker's Analysis, at the position of a fixable finding of FILE:

* ``before``: the request without that diagnostic in its context (what every code-action request
  cost before quick fixes: the probe actions of the chain under the cursor);
* ``after, first``: with the diagnostic, the first request (imports libcst, computes the fix);
* ``after``: with the diagnostic, later requests (median).

With ``--resolve`` the client resolves code actions (VS Code does): the offers are computed in the
background after the diagnostics (``fixes.warm_offers``, timed), the request returns titles only, and ``resolve first`` / ``resolve`` time ``codeAction/resolve`` (``fixes.resolve_fix``: the libcst
edit, computed when the user picks the fix; the first one imports libcst).

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
    p.add_argument("--resolve", action="store_true", help="a client that resolves the edit (codeAction/resolve)")
    args = p.parse_args()
    from lsprotocol import types as T

    from attnlens.lsp.analysis import Analysis
    from attnlens.lsp.capabilities import ClientCaps
    from attnlens.lsp.convert import Positions
    from attnlens.lsp.features.diagnostics import to_diagnostic
    from attnlens.lsp.features.fixes import FixDocument
    from attnlens.lsp.features.runtime_actions import code_actions
    from attnlens.lsp.request import Request
    from attnlens.rules.engine import check_module
    from attnlens.workspace import Workspace

    caps = ClientCaps.from_lsp(T.ClientCapabilities(text_document=T.TextDocumentClientCapabilities(
        code_action=T.CodeActionClientCapabilities(resolve_support=T.ClientCodeActionResolveOptions(
            properties=["edit"])))) if args.resolve else T.ClientCapabilities())
    ws = Workspace(args.root, python=args.python)
    path = os.path.realpath(os.path.join(args.root, args.file))
    a = Analysis(ws)
    f = next(f for f in check_module(ws, path) if f.rule == args.rule)
    d = to_diagnostic(Positions(a.line_text), path, f)  # plain (what the handler hands the worker)
    uri = "file://" + path
    req = Request(uri, path, 1, d.span.line, d.span.character, caps=caps)  # what the handler takes on the loop

    def once(diags):
        t0 = time.perf_counter()
        sent = [x.to_lsp() for x in diags]
        got = [act.to_lsp(sent) for act in code_actions(a, req, tuple(diags))]
        return (time.perf_counter() - t0) * 1000, got

    code_actions(a, req, ())  # warm the chain under the cursor
    before = [once([])[0] for _ in range(args.n)]
    warm = None
    if args.resolve:  # the server computes the offers in the background once the diagnostics are sent
        from attnlens.lsp.features.fixes import warm_offers

        t0 = time.perf_counter()
        warm_offers(a, path, [d])
        warm = (time.perf_counter() - t0) * 1000
    first, got = once([d])
    after = [once([d])[0] for _ in range(args.n)]
    titles = [x.title for x in got if x.edit is not None or (x.data and "fix" in x.data)]
    line = (f"{args.file} {args.rule}: before {statistics.median(before):.1f} ms; after, first {first:.1f} ms; "
            f"after {statistics.median(after):.1f} ms (median of {args.n})")
    if args.resolve:
        from attnlens.lsp.features.fixes import resolve_fix

        line += f"; background offer after the diagnostics {warm:.1f} ms"
        todo = [x for x in got if x.data and "fix" in x.data]
        if todo:
            times = []
            for _ in range(args.n + 1):
                t0 = time.perf_counter()
                _edit, why = resolve_fix(a, FixDocument(uri, 1, caps.document_changes), todo[0].title, todo[0].data,
                                         path)
                times.append((time.perf_counter() - t0) * 1000)
            line += f"; resolve first {times[0]:.1f} ms, resolve {statistics.median(times[1:]):.1f} ms ({why or 'edit'})"
    print(f"{line}; actions: {titles}; load {os.getloadavg()[0]:.2f}")
    ws.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
