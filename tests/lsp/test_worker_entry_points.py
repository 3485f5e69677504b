"""No function that runs on the analysis thread takes the server (issue 12): an AST scan of ``attnlens.lsp``.

The worker-side entry points of every feature, and the helpers they call there, take the analysis and a frozen
snapshot (``lsp/request.py``), never the server object; every function the handlers hand to the worker
(``ls.call`` / ``ls.idle`` / ``ls.mutate``) is one of them (or a method of the analysis, or a small closure that
does not name the server), and no handler passes the server along as an argument."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.helpers import REPO

LSP = REPO / "server" / "attnlens" / "lsp"
SERVER_NAMES = {"ls", "server", "self"}  # what the server object is called where it is at hand
BANNED_PARAMS = {"ls", "server"}

# per module: the functions that run on the analysis thread (entry points first, then their helpers there)
WORKER_SIDE = {
    "features/hover.py": ["compute"],
    "features/navigation.py": ["_definition", "_implementation", "_spans", "definition_targets"],
    "features/lens.py": ["_step", "lenses", "hints", "hint_tooltip", "kernels_json", "markdown_at", "_lens"],
    "features/diagnostics.py": ["check", "syntax_diagnostics", "_rule_diagnostics", "to_diagnostic",
                                "dead_code_hint", "rule_href"],
    "features/fixes.py": ["warm_offers", "fix_actions", "resolve_fix", "_with_edit", "_workspace_edit", "text_edit",
                          "_current_offer", "_finding", "_fixable"],
    "features/runtime_actions.py": ["code_actions", "_matrix_context", "probe_requires", "probe_candidates"],
    "features/file_diagnostics.py": ["extra_diagnostics", "_drift_diagnostics", "_contract_diagnostics"],
    "features/call_hierarchy.py": ["_prepare", "_outgoing", "_incoming", "call_item", "_ranges", "_called"],
    "features/symbols.py": ["_workspace_symbols", "_document_symbols"],
    "features/commands.py": ["_trace", "_inventory", "_context"],
    "installed.py": ["installed_kernels", "scan_file"],
}


def _tree(rel: str) -> ast.Module:
    return ast.parse((LSP / rel).read_text(encoding="utf-8"), rel)


def _functions(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def _params(fn) -> list[ast.arg]:
    a = fn.args
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *([a.vararg] if a.vararg else []), *([a.kwarg] if a.kwarg else [])]


def _names_server(node: ast.AST) -> list[str]:
    """The parameters or annotations of ``node`` (a def or lambda) that name the server."""
    out = []
    for p in _params(node):
        if p.arg in BANNED_PARAMS:
            out.append(f"parameter {p.arg!r}")
        if p.annotation is not None and "AttnLensServer" in ast.unparse(p.annotation):
            out.append(f"parameter {p.arg!r}: {ast.unparse(p.annotation)}")
    return out


def test_no_worker_side_function_takes_the_server():
    found = []
    for rel, names in WORKER_SIDE.items():
        defs = _functions(_tree(rel))
        for name in names:
            assert name in defs, f"{rel}: {name} is listed but not defined (update WORKER_SIDE)"
            found += [f"{rel}:{defs[name].lineno} {name}: {w}" for w in _names_server(defs[name])]
    assert found == []


def _imports(tree: ast.Module) -> dict[str, str]:
    """name -> the lsp module (relative path) it is imported from, for ``from .x import name`` anywhere."""
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.ImportFrom) and n.level in (1, 2) and n.module:
            base = "features/" if n.level == 1 else ""
            for a in n.names:
                out[a.asname or a.name] = base + n.module.replace(".", "/") + ".py"
    return out


def _hops(tree: ast.Module):
    """Every ``<server>.call(f, ...)`` / ``.idle(f, ...)`` / ``.mutate(f)``: (the call, f)."""
    for n in ast.walk(tree):
        if (isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("call", "idle", "mutate")
                and isinstance(n.func.value, ast.Name) and n.func.value.id in SERVER_NAMES and n.args):
            yield n, n.args[0]
        # diagnostics.call_check(<server>, f, ...): server.call(f, ...) again after each rules interruption
        elif (isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "call_check" and len(n.args) > 1
              and isinstance(n.args[0], ast.Name) and n.args[0].id in SERVER_NAMES):
            yield n, n.args[1]


def _local_defs(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}


def test_every_function_handed_to_the_worker_is_worker_side():
    """What a handler sends to the analysis thread: a listed function, a method of the analysis
    (``Analysis.status``), or a closure (lambda, local def) that neither takes nor names the server; and the
    server is never one of the arguments."""
    modules = [p.relative_to(LSP).as_posix() for p in sorted(LSP.rglob("*.py"))]
    listed = {(rel, n) for rel, names in WORKER_SIDE.items() for n in names}
    found, seen = [], 0
    for rel in modules:
        tree = _tree(rel)
        top, imported, local = _functions(tree), _imports(tree), _local_defs(tree)
        params = {p.arg for f in local.values() for p in _params(f)}  # server.call/idle forward their `fn`
        for call, fn in _hops(tree):
            seen += 1
            where = f"{rel}:{call.lineno}"
            for arg in [*call.args[1:], *(k.value for k in call.keywords)]:
                if isinstance(arg, ast.Name) and arg.id in SERVER_NAMES:
                    found.append(f"{where}: the server ({arg.id}) handed to the worker")
            if isinstance(fn, ast.Attribute):  # Analysis.status and the like: the analysis' own methods
                continue
            if isinstance(fn, ast.Name) and fn.id in top:
                if (rel, fn.id) not in listed:
                    found.append(f"{where}: {fn.id} runs on the worker but is not in WORKER_SIDE[{rel!r}]")
                continue
            if isinstance(fn, ast.Name) and fn.id in imported:
                if (imported[fn.id], fn.id) not in listed:
                    found.append(f"{where}: {fn.id} (from {imported[fn.id]}) runs on the worker but is not listed")
                continue
            if isinstance(fn, ast.Name) and fn.id not in local and fn.id in params:
                continue  # a parameter passed on (AttnLensServer.idle -> call): checked where it is chosen
            body = fn if isinstance(fn, ast.Lambda) else local.get(fn.id) if isinstance(fn, ast.Name) else None
            if body is None:
                found.append(f"{where}: cannot tell what runs on the worker: {ast.unparse(fn)}")
                continue
            found += [f"{where}: {w}" for w in _names_server(body)]
            found += [f"{where}: the closure names the server ({n.id})" for n in ast.walk(body)
                      if isinstance(n, ast.Name) and n.id in SERVER_NAMES]
    assert found == []
    assert seen >= 30  # the scan sees the handlers (a rename of ls.call would make it vacuous)
