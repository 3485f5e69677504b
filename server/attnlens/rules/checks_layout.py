"""AL121 strided-kv-view: a KV-cache view that is not contiguous reaches a kernel that ignores strides.

The layout is derived, not guessed: the backend's effective ``get_kv_cache_shape`` (through its MRO: a
plugin backend that inherits upstream's gets upstream's, and an upstream change of it) gives the
cache's logical shape; the impl's methods in the workspace are followed from their ``kv_cache``
parameter through the view operations that keep sharing storage (``unbind``, ``split``, ``chunk``,
``transpose``, ``permute``, integer and slice indexing, dtype ``view``). A view is contiguous when it
keeps a contiguous tensor's order and the selection or split is along the outermost dimension (or
the dimensions before it have size 1); ``contiguous()``, ``clone()`` and ``reshape()`` give contiguous
tensors; any other operation stops the tracking (no claim).

A call that passes a non-contiguous view is traced; its live leaves decide: a Triton kernel whose
parameters include no stride, or a torch op whose workspace C++ function never reads a stride,
treats the view as contiguous (its addressing is wrong for this layout). Kernels with stride
parameters, C++ that reads strides, and kernels whose contract says strides are honoured are fine;
a kernel whose code is not here (not installed) is not judged. The finding names the probe case
that has exactly this layout (``kv_cache_write`` / ``varlen``: ``kv_packed_head_stride`` for K|V
halves of the last dimension, ``kv_packed`` for ``[:, i]`` views, ``hnd_strided`` for a transposed
cache) so a run can decide it on the device.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from .. import model as M
from ..walk import ValKind
from .checks_calls import _short
from .classes import class_attr
from .api import Rule, check, rule
from .probe_routing import best_family

AL121 = rule(Rule(
    "AL121", "strided-kv-view", "warning",
    "A non-contiguous view of the KV cache (derived from get_kv_cache_shape and the view operations on the "
    "path) is passed to a kernel that takes no strides.",
    "A kernel that computes addresses from base pointers and the logical shape reads and writes the wrong "
    "elements of a strided view (a packed K|V cache split into halves has head stride 2*D, a [:, i] view skips "
    "the other half of every block). Upstream changing a backend's cache shape or the way forward splits it "
    "changes what the plugin's kernels receive.",
    ("layout", "kv_cache"),
))


@dataclass(frozen=True)
class Layout:
    """A tensor derived from the cache: its dimensions (source texts) and how it was made."""

    dims: tuple
    contiguous: bool
    how: str  # the operations from ``kv_cache``, as text
    kind: str = ""  # why it is not contiguous: "split_last" | "select_inner" | "permuted" | "split_inner"


def _dims_of_return(fn: ast.FunctionDef) -> tuple | None:
    """The dimensions of the last ``return (a, b, ...)`` of ``get_kv_cache_shape`` (the default path)."""
    found = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and isinstance(node.value, (ast.Tuple, ast.List)):
            if found is None or node.lineno > found.lineno:
                found = node
    if found is None:
        return None
    return tuple(ast.unparse(e) for e in found.value.elts)


def _norm_dim(d, n: int) -> int | None:
    if isinstance(d, int):
        return d + n if d < 0 else d
    return None


def _const_int(node) -> int | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value if isinstance(node.operand.value, int) else None
    return None


def _kwarg(call: ast.Call, name: str, pos: int):
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return call.args[pos] if len(call.args) > pos else None


def _select(lay: Layout, d: int, what: str, kind: str) -> Layout:
    """A selection along dim ``d`` (the dimension goes away)."""
    outer_one = all(x.strip() == "1" for x in lay.dims[:d])
    dims = lay.dims[:d] + lay.dims[d + 1:]
    contig = lay.contiguous and outer_one
    return Layout(dims, contig, f"{lay.how}{what}", lay.kind if not lay.contiguous else ("" if contig else kind))


def _apply(lay: Layout, node, text: str) -> Layout | None:
    """The layout after expression ``node`` applied to a tensor of layout ``lay`` (None: not tracked)."""
    n = len(lay.dims)
    if isinstance(node, ast.Subscript):
        idx = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        cur, d = lay, 0
        for it in idx:
            if isinstance(it, ast.Slice) and it.lower is None and it.upper is None and it.step is None:
                d += 1
            elif _const_int(it) is not None or isinstance(it, ast.Name):
                cur = _select(cur, d, "", "select_inner")  # an integer index: the dimension goes away
            else:
                return None  # a partial slice, Ellipsis, a tensor index: not followed
        return Layout(cur.dims, cur.contiguous, f"{lay.how}[{text}]", cur.kind)
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return None
    m = node.func.attr
    if m in ("contiguous", "clone", "reshape"):
        return Layout(lay.dims if m != "reshape" else tuple("?" for _ in node.args), True, lay.how + f".{m}()")
    if m == "view":
        if len(node.args) == 1 and not isinstance(node.args[0], (ast.Tuple, ast.Constant)) and not node.keywords:
            return Layout(lay.dims, lay.contiguous, lay.how, lay.kind)  # x.view(dtype): the same layout
        return None
    if m in ("transpose", "swapaxes"):
        a = _norm_dim(_const_int(node.args[0]) if node.args else None, n)
        b = _norm_dim(_const_int(node.args[1]) if len(node.args) > 1 else None, n)
        if a is None or b is None:
            return None
        dims = list(lay.dims)
        dims[a], dims[b] = dims[b], dims[a]
        same = a == b
        return Layout(tuple(dims), lay.contiguous and same, f"{lay.how}.transpose({a}, {b})",
                      lay.kind or ("" if same else "permuted"))
    if m == "permute":
        perm = [_norm_dim(_const_int(a), n) for a in node.args]
        if None in perm or sorted(perm) != list(range(n)):
            return None
        return Layout(tuple(lay.dims[p] for p in perm), lay.contiguous and perm == list(range(n)),
                      f"{lay.how}.permute({', '.join(map(str, perm))})",
                      lay.kind or ("" if perm == list(range(n)) else "permuted"))
    if m == "unbind":
        d = _norm_dim(_const_int(_kwarg(node, "dim", 0)) if _kwarg(node, "dim", 0) is not None else 0, n)
        if d is None:
            return None
        return _select(lay, d, f".unbind({d})", "select_inner")
    if m in ("split", "chunk"):
        dn = _kwarg(node, "dim", 1)
        d = _norm_dim(_const_int(dn) if dn is not None else 0, n)
        if d is None:
            return None
        outer_one = all(x.strip() == "1" for x in lay.dims[:d])
        contig = lay.contiguous and outer_one
        kind = lay.kind if not lay.contiguous else ("" if contig else ("split_last" if d == n - 1 else "split_inner"))
        arg = ast.unparse(node.args[0]) if node.args else ""
        return Layout(lay.dims, contig, f"{lay.how}.{m}({arg}, dim={d})", kind)
    return None


def _unwind(expr) -> tuple[ast.AST, list]:
    """(the innermost operand, the method calls / subscripts applied to it, innermost first)."""
    ops = []
    cur = expr
    while True:
        if isinstance(cur, ast.Call) and isinstance(cur.func, ast.Attribute):
            ops.append(cur)
            cur = cur.func.value
        elif isinstance(cur, ast.Subscript):
            ops.append(cur)
            cur = cur.value
        else:
            return cur, list(reversed(ops))


def _track(fn, start: Layout) -> dict[str, Layout]:
    """name -> layout of the names derived from ``kv_cache`` in ``fn`` (assignments in source order; a
    name rebound to anything not followed is dropped)."""
    env: dict[str, Layout] = {"kv_cache": start}
    stmts = sorted((n for n in ast.walk(fn) if isinstance(n, ast.Assign)), key=lambda n: (n.lineno, n.col_offset))
    for st in stmts:
        base, ops = _unwind(st.value)
        lay = env.get(base.id) if isinstance(base, ast.Name) else None
        for op in ops:
            if lay is None:
                break
            text = ast.unparse(op.slice) if isinstance(op, ast.Subscript) else ""
            lay = _apply(lay, op, text)
        targets = list(st.targets)
        names = [e for t in targets for e in ([t] if isinstance(t, ast.Name) else
                                             t.elts if isinstance(t, (ast.Tuple, ast.List)) else [])]
        for nm in names:
            if isinstance(nm, ast.Name):
                env.pop(nm.id, None)
        if lay is None or len(targets) != 1:
            continue
        tgt = targets[0]
        if isinstance(tgt, ast.Name):
            env[tgt.id] = lay
        elif isinstance(tgt, (ast.Tuple, ast.List)) and ops and isinstance(ops[-1], ast.Call) \
                and ops[-1].func.attr in ("unbind", "split", "chunk"):
            for e in tgt.elts:  # each part of the unbind / split has the part's layout
                if isinstance(e, ast.Name):
                    env[e.id] = lay
    return env


_STRIDE = re.compile(r"stride", re.I)


def _kernel_verdict(ctx, leaf: M.Final) -> tuple[str, str] | None:
    """("blind", why) when the leaf addresses its tensors without strides; None when it takes strides or
    cannot be judged here."""
    if leaf.kind == M.FinalKind.TRITON_KERNEL and leaf.path:
        mod = ctx.ws.index.module_for_path(leaf.path)
        q = leaf.symbol[len(mod.name) + 1:] if mod is not None and leaf.symbol.startswith(mod.name + ".") else None
        f = mod.summary.functions.get(q) if mod is not None and q else None
        if f is None or not mod.workspace:
            return None
        if any(_STRIDE.search(p.name) for p in f.params):
            return None
        return "blind", f"Triton kernel `{f.name}` ({_short(leaf.path)}:{f.line}) takes no stride parameters"
    if leaf.kind == M.FinalKind.TORCH_OP:
        for r in leaf.registrations:
            if not (r.function_path and r.function_line) or not ctx.ws.index.is_workspace_path(r.function_path):
                continue
            body = _cpp_body(ctx, r.function_path, r.function_line)
            if body is None or _STRIDE.search(body):
                return None
            return "blind", (f"torch op `{leaf.symbol}` is bound to `{r.function}` "
                             f"({_short(r.function_path)}:{r.function_line}), which reads no stride")
    return None


def _cpp_body(ctx, path: str, line: int) -> str | None:
    """The C++ function starting at ``line``: its text up to the brace that closes it."""
    text = ctx.ws.index.source_text(path)
    if text is None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
        except OSError:
            return None
    lines = text.splitlines()[line - 1:line + 400]
    depth, out, opened = 0, [], False
    for ln in lines:
        out.append(ln)
        depth += ln.count("{") - ln.count("}")
        opened = opened or "{" in ln
        if opened and depth <= 0:
            return "\n".join(out)
    return None


_CASES = {"split_last": "kv_packed_head_stride", "select_inner": "kv_packed", "permuted": "hnd_strided",
          "split_inner": "kv_packed"}


def _backends_of(ctx, impl_name: str) -> list:
    """Backend classes (Vals) whose ``get_impl_cls`` returns the class named ``impl_name``: read from the
    workspace summaries (no registry refresh after every edit)."""
    out = []
    for mod in ctx.ws.index.workspace_modules_matching(rb"def\s+get_impl_cls"):
        s = mod.summary
        for q, f in s.functions.items():
            if f.name == "get_impl_cls" and f.class_name and any(
                    r.rpartition(".")[2].strip("'\"") == impl_name for r in f.returns if r):
                cq = q.rpartition(".")[0]
                if cq in s.classes:
                    out.append(ctx.r.resolve_symbol(f"{mod.name}.{cq}"))
    return [v for v in out if v.kind == ValKind.CLASS]


@check("AL121")
def strided_kv_views(ctx):
    # the impl classes of this module: a method with a `kv_cache` parameter (cheap test first)
    methods = [(q, f) for q, f in ctx.s.functions.items()
               if f.class_name and f.class_name in ctx.s.classes and any(p.name == "kv_cache" for p in f.params)]
    if not methods:
        return
    shapes: dict = {}
    for q, f in methods:
        cq = f.class_name
        if cq not in shapes:
            shapes[cq] = None
            for bv in _backends_of(ctx, ctx.s.classes[cq].name):
                fv, _owner = class_attr(ctx.engine, bv, "get_kv_cache_shape")
                dims = _shape_of(ctx, fv) if fv is not None and fv.module is not None else None
                if dims:
                    shapes[cq] = (dims, fv)
                    break  # one backend's shape per impl
        if shapes[cq] is None:
            continue
        dims, fv = shapes[cq]
        fn = _function_node(ctx.lines, f.deco_line, f.end_line, f.name)
        if fn is None:
            continue
        env = _track(fn, Layout(dims, True, "kv_cache"))
        bad = {n: lay for n, lay in env.items() if not lay.contiguous and lay.kind}
        if bad:
            _report_calls(ctx, q, bad, f"({', '.join(dims)})", fv)


def _function_node(lines: list[str], first: int, last: int, name: str):
    """The ``def`` spanning ``first..last`` (1-based, decorators included), parsed alone: the cost is the
    function's, not the module's."""
    import textwrap

    text = textwrap.dedent("\n".join(lines[first - 1:last]))
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name),
                None)


def _shape_of(ctx, fv) -> tuple | None:
    """The dimensions ``get_kv_cache_shape`` (function ``fv``) returns, memoised by its module's content."""
    from .api import content_memo

    f = fv.func
    mod = fv.module
    if f is None:
        return None

    def compute():
        text = ctx.ws.index.source_text(mod.path) or ""
        node = _function_node(text.splitlines(), f.deco_line, f.end_line, f.name)
        return _dims_of_return(node) if node is not None else None

    return content_memo(("AL121 shape", mod.path, mod.summary.sha, fv.qual), compute)


def _report_calls(ctx, scope: str, bad: dict, shape: str, fv) -> None:
    for cs in ctx.s.calls_in(scope):
        if ctx.call_dead(cs):
            continue
        args = [a for a in cs.arg_texts if a] + [t for _k, t in cs.kw_texts]
        hit = next((a for a in args if a in bad), None)
        if hit is None:
            continue
        chain = ctx.trace(cs)
        if chain is None:
            continue
        for lf in chain.leaves():
            if lf.reachable is False:
                continue
            v = _kernel_verdict(ctx, lf.final)
            if v is None:
                continue
            lay = bad[hit]
            words = [k for k in cs.keywords] + [a.rpartition(".")[2] for a in args]
            fam = best_family(words, ("kv_cache_write", "varlen")) or "kv_cache_write"
            case = _CASES.get(lay.kind, "kv_packed")
            where = f"{_short(fv.module.path)}:{fv.line}"
            note = {"split_last": f"head stride {lay.dims[-1]}", "permuted": "permuted dimensions",
                    "select_inner": "a slice of every block", "split_inner": "a slice of every block"}[lay.kind]
            kernel = lf.final.symbol.rpartition(".")[2] if lf.final.kind != M.FinalKind.TORCH_OP else lf.final.symbol
            msg = (f"`{hit}` = `{lay.how}` is not contiguous ({note}) and reaches `{kernel}`, which takes no "
                   "strides: it reads or writes the wrong elements.")
            ctx.add_at_call("AL121", cs, msg, chain=chain, probe=fam,
                            detail=(f"{v[1]}. The cache is {shape} (`get_kv_cache_shape` at {where}); the view "
                                    f"is made in {scope}. Decide it on the device: probe {fam}, case {case}."),
                            view=hit, layout=lay.how, cache_shape=list(lay.dims), probe_case=case)
            break
