"""Quick fixes: the upgrade findings that have a mechanical answer, as an edit to review.

Four kinds, each from the findings of ``check`` and ``drift`` that describe it:

============ ================ ===============================================================
kind         findings         the edit
============ ================ ===============================================================
``import``   AL108, AL302     a removed or renamed upstream name: import it from where the two
                              upstream versions show it went (upstream's own code moved its
                              import there, or a same-body definition; uses are renamed with
                              it); with no replacement, "guard the import" only when the module
                              already handles the name's absence elsewhere; otherwise no fix
``hook``     AL111, AL303     a hook upstream's counterpart overrides and the plugin class does
                              not: an override pre-filled with upstream's body, under a comment
                              naming upstream's file:line, for the maintainer to decide (names
                              the body needs are imported the way upstream imports them)
``op_param`` AL120, AL308     a parameter upstream's custom op (or its fake) has and the
                              plugin's variant lacks: added with upstream's annotation and
                              default, after the parameter that precedes it upstream
``fields``   AL112, AL304     fields upstream's metadata dataclass has (AL304: gained) that
                              upstream code reads: added with upstream's type and default,
                              after the field that precedes them upstream
============ ================ ===============================================================

Two steps, so that nothing costs what it does not use:

* :func:`offers` / :func:`offer_for` decide *whether* a finding has a fix and *what* it would do
  (an :class:`Offer`: plain data, from the analysis; the inventory lists them). No libcst here;
* :func:`apply` computes the edit on a text with **libcst** (imported here only), so comments,
  blank lines and odd formatting outside the edited nodes are kept byte for byte, and raises
  :class:`FixError` with a message when the text no longer has the target.

Nothing is ever written here: the CLI (``attnlens fix --apply``) and the editor (a
``WorkspaceEdit`` the user accepts) do that. Offers carry the finding's id; a finding whose
target text changed since it was computed has another id (:mod:`attnlens.rules.ids`), and
:func:`select` refuses it with a message.
"""

from __future__ import annotations

import ast
import builtins
import difflib
import os
import re
from dataclasses import asdict, dataclass, field

from ..rules import ids as IDS
from ..rules import opvariants as OV

FIX_RULES = {"AL108": "import", "AL302": "import", "AL111": "hook", "AL303": "hook",
             "AL120": "op_param", "AL308": "op_param", "AL112": "fields", "AL304": "fields"}
_BUILTINS = frozenset(dir(builtins)) | {"__class__", "__name__", "__file__"}


class FixError(Exception):
    """The fix cannot be computed on this text (the message says why)."""


@dataclass
class Offer:
    id: str  # the finding's id
    rule: str
    kind: str  # import | hook | op_param | fields
    title: str
    path: str  # absolute
    line: int
    spec: dict
    key: tuple = ()  # what it changes (offers of several findings for one change share it)
    finding: dict = field(default_factory=dict)

    def to_json(self, root=None) -> dict:
        d = asdict(self)
        d["path"] = IDS.relpath(self.path, root)
        d["key"] = list(self.key)
        d.pop("finding")
        return d


# ----------------------------------------------------------------------------- findings


def _get(f, k, d=None):
    return f.get(k, d) if isinstance(f, dict) else getattr(f, k, d)


def _as_dict(f) -> dict:
    if isinstance(f, dict):
        return f
    return {k: getattr(f, k, None) for k in ("id", "rule", "severity", "path", "line", "col", "end_line", "end_col",
                                                "message", "data")}


def fixable(f) -> bool:
    return _get(f, "rule") in FIX_RULES


def collect_findings(ws, paths=None, drift=None) -> list[dict]:
    """The fixable findings of ``ws``: the rules engine's (AL108/AL111/AL112/AL120) and, when a
    drift report is given, drift's (AL302/AL303/AL304/AL308)."""
    from ..rules.engine import engine_for

    eng = engine_for(ws)
    out = [_as_dict(f) for f in eng.check_paths(paths) if fixable(f)]
    if drift is not None:
        wanted = {os.path.realpath(p) for p in eng.files_for(paths)} if paths else None
        out += [f for f in drift.findings() if fixable(f) and (wanted is None or os.path.realpath(f["path"]) in wanted)]
    return out


def offers(ws, findings, drift=None) -> list[Offer]:
    out = []
    for f in findings:
        try:
            o = offer_for(ws, f, drift)
        except (RecursionError, OSError, SyntaxError, ValueError):
            o = None
        if o is not None:
            out.append(o)
    return out


def one_per_change(candidates: list[Offer]) -> list[Offer]:
    """The first offer of each change (check's and drift's findings of one change share a key)."""
    first: dict = {}
    for o in candidates:
        first.setdefault(o.key, o)
    return list(first.values())


def offer_for(ws, f, drift=None) -> Offer | None:
    """The fix of one finding (a dict or a rules ``Finding``), or None when it has none."""
    f = _as_dict(f)
    kind = FIX_RULES.get(f.get("rule") or "")
    if kind is None or not f.get("id"):
        return None
    fn = {"import": _offer_import, "hook": _offer_hook, "op_param": _offer_op_param, "fields": _offer_fields}[kind]
    return fn(ws, f, f.get("data") or {}, drift)


def select(candidates: list[Offer], fid: str, current_ids) -> Offer:
    """The offer of finding ``fid``; raises FixError when it is stale or unknown."""
    for o in candidates:
        if o.id == fid:
            return o
    if IDS.split(fid) is None:
        raise FixError(f"`{fid}` is not a finding id (ids look like AL108-1a2b3c4d5e6f: see `attnlens check --format json`)")
    for cur in current_ids:
        if IDS.same_key(cur, fid):
            raise FixError(f"refused: the code of finding {fid} changed since it was computed (it is {cur} now); "
                           f"review it again: attnlens fix --finding {cur} --diff")
    if fid in set(current_ids):
        raise FixError(f"finding {fid} has no quick fix")
    raise FixError(f"no finding {fid} in the current analysis (already fixed, or another subject or upstream version)")


def _module_of(ws, path: str):
    return ws.index.module_for_path(path)


def _rel_upstream(path: str, module: str | None = None) -> str:
    """``.../site-packages/vllm/x.py`` -> ``vllm/x.py`` (the part from the top package on)."""
    norm = path.replace(os.sep, "/")
    if module:
        for rel in (module.replace(".", "/") + ".py", module.replace(".", "/") + "/__init__.py"):
            if norm.endswith("/" + rel):
                return rel
    parts = norm.split("/")
    for i in range(len(parts) - 1, 0, -1):
        if parts[i - 1].endswith(("site-packages", "dist-packages")) or re.match(r"vllm-[0-9]", parts[i - 1]):
            return "/".join(parts[i:])
    return path


def _loc(text: str | None) -> tuple[str, int]:
    path, _, line = (text or "").rpartition(":")
    return path, int(line) if line.isdigit() else 0


_TREES: dict = {}  # path -> ((mtime_ns, size), text, tree): code actions ask again on every cursor move


def _upstream_tree(path: str) -> tuple[str, ast.Module] | None:
    """(text, parsed tree) of an upstream file, memoised per file stamp; None when unreadable."""
    try:
        st = os.stat(path)
        stamp = (st.st_mtime_ns, st.st_size)
        hit = _TREES.get(path)
        if hit is not None and hit[0] == stamp:
            return hit[1], hit[2]
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
        tree = ast.parse(text)
    except (OSError, SyntaxError, ValueError):
        return None
    if len(_TREES) > 64:
        _TREES.clear()
    _TREES[path] = (stamp, text, tree)
    return text, tree


# ----------------------------------------------------------------------------- imports


def _offer_import(ws, f, data, drift) -> Offer | None:
    if f["rule"] == "AL302":
        if data.get("aspect") != "imports" or not data.get("import"):
            return None
        dotted = data["import"]
        repl, why = data.get("replacement"), data.get("replacement_evidence") or ""
    else:
        mod, name = data.get("module"), data.get("name")
        if not mod or not name or f.get("message", "").startswith("module "):
            return None
        dotted = f"{mod}.{name}"
        repl, why = _replacement_from_drift(drift, f["path"], dotted)
    module, _, name = dotted.rpartition(".")
    m = _module_of(ws, f["path"])
    if m is None:
        return None
    binding = next((b for bs in m.summary.bindings.values() for b in bs
                    if b.kind == "from" and b.attr == name and b.line == f["line"]), None)
    if binding is None:
        binding = next((b for bs in m.summary.bindings.values() for b in bs
                        if b.kind == "from" and b.attr == name and ws.query.abs_module(m, b.target or "", b.level) == module), None)
    local = binding.name if binding is not None else name
    spec = {"module": module, "name": name, "local": local, "line": f["line"]}
    if repl:
        rmod, _, rname = repl.rpartition(".")
        spec.update(mode="rewrite", replacement_module=rmod, replacement_name=rname, evidence=why)
        title = (f"Import {rname} from {rmod}" + (f" (renamed from {name})" if rname != name else "")
                 + (f": {why}" if why else ""))
    elif _handles_absence(ws, m, local, binding):
        spec.update(mode="guard")
        title = f"Guard the import of {name} from {module} (gone upstream; the module already handles its absence)"
    else:
        return None
    return Offer(f["id"], f["rule"], "import", title, f["path"], f["line"], spec, ("import", f["path"], module, name), f)


def _replacement_from_drift(drift, path: str, dotted: str) -> tuple[str | None, str]:
    if drift is None:
        return None, ""
    for it in drift.items:
        if os.path.realpath(it.path) != os.path.realpath(path):
            continue
        for ch in it.changes:
            if ch.aspect == "imports" and ch.data.get("import") == dotted and ch.data.get("replacement"):
                return ch.data["replacement"], ch.data.get("replacement_evidence") or ""
    return None, ""


def _handles_absence(ws, m, local: str, binding) -> bool:
    """Does the module already cope with ``local`` being absent elsewhere: another binding of it under
    try/except, or a hasattr/getattr test of it?"""
    for b in m.summary.bindings.get(local, []):
        if binding is not None and b.line == binding.line:
            continue
        if any(g[0] in ("try", "except") for g in b.guards):
            return True
    text = ws.index.source_text(m.path) or ""
    return re.search(r"\b(?:hasattr|getattr)\([^)]*['\"]" + re.escape(local) + r"['\"]", text) is not None


# ----------------------------------------------------------------------------- hooks


def _offer_hook(ws, f, data, drift) -> Offer | None:
    hook = data.get("hook")
    upath, uline = _loc(data.get("upstream_location"))
    override = data.get("upstream_override") or ""
    if not hook or not upath or not uline or (f["rule"] == "AL303" and not data.get("counterpart_overrides")):
        return None
    m = _module_of(ws, f["path"])
    if m is None:
        return None
    if f["rule"] == "AL303":
        qual = (data.get("symbol") or "")[len(m.name) + 1:]
    else:
        qual = next((q for q, c in m.summary.classes.items() if c.line == f["line"]), "")
    if not qual or qual not in m.summary.classes:
        return None
    parsed = _upstream_tree(upath)
    if parsed is None:
        return None
    utext, tree = parsed
    ucls_qual = override.rpartition(".")[0]
    ucls = _find_class(tree, ucls_qual.rpartition(".")[2])
    node = next((n for n in (ucls.body if ucls else []) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                 and n.name == hook), None)
    if node is None:
        return None
    lines = utext.splitlines()
    start = min([d.lineno for d in node.decorator_list] + [node.lineno])
    source = "\n".join(lines[start - 1:node.end_lineno])  # as upstream indents it (string contents stay exact)
    order = [n.name for n in ucls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    before = list(reversed(order[:order.index(hook)]))
    where = f"{_rel_upstream(upath, ucls_qual.rpartition('.')[0])}:{node.lineno}"
    imports = _needed_imports(ws, m, node, tree, ucls_qual.rpartition(".")[0])
    spec = {"class": qual, "hook": hook, "source": source, "after": before, "upstream": where,
            "upstream_class": ucls_qual, "imports": imports}
    title = f"Override {hook}() in {qual.rpartition('.')[2]} with upstream's body ({where}), to decide"
    return Offer(f["id"], f["rule"], "hook", title, f["path"], f["line"], spec, ("hook", f["path"], qual, hook), f)


def _find_class(tree, name: str):
    for n in ast.walk(tree):
        if isinstance(n, ast.ClassDef) and n.name == name:
            return n
    return None


def _needed_imports(ws, m, fn, utree, umodule: str) -> list[list]:
    """``[kind, module, name, local]`` for the free names of upstream's method that the plugin module
    does not bind, imported the way upstream's module imports them."""
    bound = {a.arg for a in ast.walk(fn.args) if isinstance(a, ast.arg)}
    for n in ast.walk(fn):
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            bound.add(n.id)
    used = sorted({n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound - _BUILTINS)
    s = m.summary
    have = set(s.bindings) | {q for q in s.classes if "." not in q} | {q for q in s.functions if "." not in q}
    out = []
    for name in used:
        if name in have:
            continue
        for st in utree.body:
            if isinstance(st, ast.ImportFrom) and st.module and not st.level:
                for a in st.names:
                    if (a.asname or a.name) == name:
                        out.append(["from", st.module, a.name, name])
            elif isinstance(st, ast.Import):
                for a in st.names:
                    if (a.asname or a.name.split(".")[0]) == name:
                        out.append(["import", a.name, None, name])
            elif isinstance(st, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) and st.name == name and umodule:
                out.append(["from", umodule, name, name])
    return out


# ----------------------------------------------------------------------------- custom op parameters


def _offer_op_param(ws, f, data, drift) -> Offer | None:
    lacks = list(data.get("missing") or [])
    qual = data.get("variant") or ""
    if f["rule"] == "AL120" and drift is not None:
        it = drift.item(f"{getattr(_module_of(ws, f['path']), 'name', '')}.{qual}")
        gained = {x for ch in (it.changes if it is not None else []) if ch.rule == "AL308" for x in ch.data.get("missing", [])}
        lacks = [x for x in lacks if x in gained]
    upath, uline = _loc(data.get("upstream_location"))
    m = _module_of(ws, f["path"])
    if not lacks or not qual or m is None or qual not in m.summary.functions or not upath:
        return None
    parsed = _upstream_tree(upath)
    if parsed is None:
        return None
    tree = parsed[1]
    node = next((n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.lineno == uline), None)
    if node is None:
        return None
    from .astsyms import signature

    usig = signature(node)
    uparams = [p for p in usig.params if p.kind not in ("vararg", "kwarg")]
    unames = [p.name for p in uparams]
    pnames = OV.param_names(m.summary.functions[qual])
    mapping = OV.align(pnames, unames)
    params = []
    for i, p in enumerate(uparams):
        if p.name not in lacks:
            continue
        after = next((mapping[u] for u in reversed(unames[:i]) if u in mapping), None)
        params.append({"name": p.name, "kind": p.kind, "annotation": p.annotation, "default": p.default, "after": after})
        mapping[p.name] = p.name
    if not params:
        return None
    fname = qual.rpartition(".")[2]
    where = f"{_rel_upstream(upath, (data.get('upstream_function') or '').rpartition('.')[0])}:{uline}"
    title = f"Add upstream's {', '.join(p['name'] for p in params)} to {fname}() ({where})"
    spec = {"function": qual, "params": params, "upstream": where}
    return Offer(f["id"], f["rule"], "op_param", title, f["path"], f["line"], spec,
                 ("op_param", f["path"], qual, tuple(p["name"] for p in params)), f)


# ----------------------------------------------------------------------------- metadata fields


def _offer_fields(ws, f, data, drift) -> Offer | None:
    m = _module_of(ws, f["path"])
    if m is None:
        return None
    if f["rule"] == "AL304":
        qual = (data.get("symbol") or "")[len(m.name) + 1:]
        new = [tuple(x) for x in data.get("new_fields") or []]
        old = {x[0] for x in data.get("old_fields") or []}
        wanted = [x[0] for x in new if x[0] not in old]
        ucls = data.get("counterpart_new") or ""
    else:
        qual = next((q for q, c in m.summary.classes.items() if c.line == f["line"]), "")
        wanted = list(data.get("missing") or [])
        ucls = data.get("upstream") or ""
        new = None
    c = m.summary.classes.get(qual)
    if c is None or not wanted or not ucls:
        return None
    upath, unode, ufields, umod = _upstream_dataclass(ws, ucls)
    if unode is None:
        return None
    if new is None:
        new = ufields
    have = {x[0] for x in c.fields} | set(c.attrs) | set(c.methods)
    if f["rule"] == "AL112" and drift is not None:
        gained = _gained_fields(drift, f"{m.name}.{qual}")  # two versions known: only what upstream added
        wanted = [n for n in wanted if n in gained]
    order = [x[0] for x in new]
    types = {x[0]: x for x in new}
    readers = _readers(ws, upath, unode, umod, [n for n in wanted if n not in have])
    for n, (p, ln) in (data.get("read_at") or {}).items():  # AL112 names the read that runs with the plugin
        if n in readers:
            readers[n] = f"{_rel_upstream(p, umod if os.path.realpath(p) == os.path.realpath(upath) else None)}:{ln}"
    todo = []
    for i, name in enumerate(order):
        if name not in wanted or name in have or name not in readers:
            continue
        after = next((x for x in reversed(order[:i]) if x in have or x in {t["name"] for t in todo}), None)
        _n, ann, default = types[name][:3]
        todo.append({"name": name, "annotation": ann, "default": default, "after": after, "read_at": readers[name]})
    if not todo:
        return None
    names = ", ".join(t["name"] for t in todo)
    title = f"Add upstream's field{'s' if len(todo) > 1 else ''} {names} to {qual.rpartition('.')[2]} (read by upstream at {todo[0]['read_at']})"
    spec = {"class": qual, "fields": todo, "upstream": f"{_rel_upstream(upath, umod)}:{unode.lineno}"}
    return Offer(f["id"], f["rule"], "fields", title, f["path"], f["line"], spec,
                 ("fields", f["path"], qual, tuple(t["name"] for t in todo)), f)


def _gained_fields(drift, symbol: str) -> set:
    it = drift.item(symbol)
    for ch in (it.changes if it is not None else []):
        if ch.aspect == "fields" and ch.data.get("new_fields") is not None:
            old = {x[0] for x in ch.data.get("old_fields") or []}
            return {x[0] for x in ch.data["new_fields"]} - old
    return set()


def _upstream_dataclass(ws, dotted: str):
    """(path, ClassDef node, [(name, annotation, default)], module name) of an upstream (nested) class."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        mod = ".".join(parts[:i])
        loc = ws.index.locate(mod)
        if loc is None or loc.kind != "py":
            continue
        parsed = _upstream_tree(loc.path)
        if parsed is None:
            return None, None, [], mod
        body, node = parsed[1].body, None
        for name in parts[i:]:
            node = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
            if node is None:
                break
            body = node.body
        if node is None:
            return loc.path, None, [], mod
        from .astsyms import class_shape

        sh = class_shape(node)
        return loc.path, node, [tuple(x) for x in (sh.fields if sh else ())], mod
    return None, None, [], ""


def _readers(ws, upath: str, unode, umod: str, names: list[str]) -> dict:
    """field -> ``file:line`` of the first read of ``.field`` by upstream code (``rules.readers``)."""
    from ..rules.readers import field_reads

    reads = field_reads(ws, upath, unode.name, umod, names)
    return {n: f"{_rel_upstream(p, umod if p == upath else None)}:{ln}" for n, ((p, ln), *_r) in reads.items()}


# ----------------------------------------------------------------------------- edits (libcst)


def apply(offer: Offer, text: str) -> str:
    """The text after the fix (libcst; comments and formatting outside the edit kept). FixError
    when the text does not have the fix's target, or the fix would not leave valid Python."""
    import libcst as cst

    fn = {"import": _apply_import, "hook": _apply_hook, "op_param": _apply_op_param, "fields": _apply_fields}[offer.kind]
    try:
        new = _apply_in_segments(cst, text, offer, fn)
    except cst.CSTValidationError as e:
        raise FixError(f"the fix would not leave valid Python ({e}): edit by hand") from None
    except (cst.ParserSyntaxError, ValueError, KeyError, TypeError, AttributeError) as e:
        raise FixError(f"cannot compute the fix on this text: {type(e).__name__}: {e}") from None
    if new == text:
        raise FixError(f"nothing to change: {offer.title}")
    try:
        ast.parse(new)
    except SyntaxError as e:
        raise FixError(f"the fix would not leave valid Python ({e.msg}, line {e.lineno}): edit by hand") from None
    return new


def _top_span(tree, name: str) -> tuple[int, int] | None:
    """1-based (first, last) lines of the top-level class/def ``name`` (decorators included)."""
    for st in tree.body:
        if isinstance(st, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and st.name == name:
            return min([d.lineno for d in st.decorator_list] + [st.lineno]), st.end_lineno
    return None


def _import_span(tree) -> tuple[int, int] | None:
    spans = [(st.lineno, st.end_lineno) for st in tree.body if isinstance(st, (ast.Import, ast.ImportFrom))]
    return (spans[0][0], spans[-1][1]) if spans else None


def _edit_span(cst, text: str, span, fn, what: str) -> str:
    """Parse only the lines ``span`` (whole top-level statements) with libcst, edit them, splice them
    back: libcst's cost is that of the statement, not of the file."""
    lines = text.splitlines(keepends=True)
    a, b = span if span is not None else (1, len(lines))
    seg = "".join(lines[a - 1:b])
    try:
        mod = cst.parse_module(seg)
    except cst.ParserSyntaxError as e:
        raise FixError(f"cannot parse {what}: {e.message} (line {a - 1 + e.raw_line})") from None
    return "".join(lines[:a - 1]) + fn(mod).code + "".join(lines[b:])


def _apply_in_segments(cst, text: str, offer: Offer, fn) -> str:
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError) as e:
        raise FixError(f"cannot parse {offer.path}: {e}") from None
    spec = offer.spec
    if offer.kind == "import":
        return _edit_span(cst, text, None, lambda m: fn(cst, m, spec), offer.path)
    top = (spec.get("class") or spec.get("function") or "").split(".")[0]
    span = _top_span(tree, top)
    if span is None:
        raise FixError(f"no {'class' if spec.get('class') else 'function'} {spec.get('class') or spec.get('function')} "
                       "in the current text")
    body_spec = dict(spec, imports=[])
    text = _edit_span(cst, text, span, lambda m: fn(cst, m, body_spec), offer.path)
    if spec.get("imports"):
        text = _edit_span(cst, text, _import_span(ast.parse(text)), lambda m: _add_imports(cst, m, spec["imports"]),
                          offer.path)
    return text


def unified_diff(path: str, before: str, after: str, root=None) -> str:
    rel = IDS.relpath(path, root)
    return "".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True), f"a/{rel}", f"b/{rel}"))


def _dotted(cst, node) -> str:
    if node is None:
        return ""
    if isinstance(node, cst.Name):
        return node.value
    if isinstance(node, cst.Attribute):
        return f"{_dotted(cst, node.value)}.{node.attr.value}"
    return ""


def _import_line(cst, module: str, names: list[tuple[str, str | None]]):
    text = ", ".join(n if not a or a == n else f"{n} as {a}" for n, a in names)
    return cst.parse_statement(f"from {module} import {text}\n")


def _bare(cst, comma):
    """A comma like ``comma`` without the comment its line may carry (a comment stays on its own line)."""
    ws = getattr(comma, "whitespace_after", None)
    if isinstance(ws, cst.ParenthesizedWhitespace) and ws.first_line.comment is not None:
        return comma.with_changes(whitespace_after=ws.with_changes(first_line=cst.TrailingWhitespace(newline=ws.first_line.newline)))
    return comma


def _with_alias(cst, imp, name: str, asname: str | None):
    """``imp`` (an ImportFrom) with ``name`` appended, in its own style (one per line when it is so)."""
    names = list(imp.names)
    last = names[-1]
    comma = _bare(cst, names[-2].comma) if len(names) > 1 else cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    alias = cst.ImportAlias(name=cst.Name(name), asname=cst.AsName(name=cst.Name(asname)) if asname and asname != name else None)
    if isinstance(last.comma, cst.Comma):  # a trailing comma (one name per line): keep it last
        alias = alias.with_changes(comma=_bare(cst, last.comma))
    else:
        names[-1] = last.with_changes(comma=comma)
    names.append(alias)
    return imp.with_changes(names=names)


def _top_imports(cst, body) -> list[int]:
    out = []
    for i, st in enumerate(body):
        if isinstance(st, cst.SimpleStatementLine) and st.body and isinstance(st.body[0], (cst.Import, cst.ImportFrom)):
            out.append(i)
    return out


def _add_imports(cst, mod, wanted: list) -> object:
    """Add ``from M import N [as L]`` / ``import M`` at module level: into an existing ``from M import``
    of the same module when there is one, else after the last module-level import."""
    body = list(mod.body)
    for kind, module, name, local in wanted:
        done = False
        for i in _top_imports(cst, body):
            imp = body[i].body[0]
            if kind == "from" and isinstance(imp, cst.ImportFrom) and not imp.relative and _dotted(cst, imp.module) == module \
                    and not isinstance(imp.names, cst.ImportStar):
                if not any(a.evaluated_name == name for a in imp.names):
                    body[i] = body[i].with_changes(body=[_with_alias(cst, imp, name, local)])
                done = True
                break
        if done:
            continue
        stmt = _import_line(cst, module, [(name, local)]) if kind == "from" else cst.parse_statement(
            f"import {module}\n" if local == module.split(".")[0] else f"import {module} as {local}\n")
        tops = _top_imports(cst, body)
        at = tops[-1] + 1 if tops else 0
        body.insert(at, stmt)
    return mod.with_changes(body=body)


class _Finder:
    """Locate a ``from M import name`` statement (any depth) by its first line, or by module and name."""

    def __init__(self, cst, mod, module: str, name: str, line: int):
        from libcst.metadata import MetadataWrapper, PositionProvider

        self.wrapper = MetadataWrapper(mod, unsafe_skip_copy=True)
        self.pos = self.wrapper.resolve(PositionProvider)
        self.hits = []
        for node, rng in self.pos.items():
            if isinstance(node, cst.SimpleStatementLine) and node.body and isinstance(node.body[0], cst.ImportFrom):
                imp = node.body[0]
                if imp.relative or _dotted(cst, imp.module) != module or isinstance(imp.names, cst.ImportStar):
                    continue
                if any(a.evaluated_name == name for a in imp.names):
                    self.hits.append((abs(rng.start.line - line), rng.start.line, node))
        self.hits.sort(key=lambda h: (h[0], h[1]))

    def best(self):
        return self.hits[0][2] if self.hits else None


def _replace_stmt(cst, mod, target, new_nodes: list):
    """Replace statement ``target`` (identity) by ``new_nodes`` wherever it is."""

    class T(cst.CSTTransformer):
        def on_leave(self, original, updated):
            if original is target:
                if not new_nodes:
                    return cst.RemovalSentinel.REMOVE
                return cst.FlattenSentinel(new_nodes) if len(new_nodes) > 1 else new_nodes[0]
            return updated

    return mod.visit(T())


def _without_alias(cst, stmt, name: str):
    imp = stmt.body[0]
    names = [a for a in imp.names if a.evaluated_name != name]
    if not names:
        return None
    gone = imp.names[-1].comma if imp.names[-1].evaluated_name == name else None
    if gone is not None:  # the last one goes: the new last keeps its comment, and takes the line end of the gone one
        prev = names[-1].comma
        pw = getattr(prev, "whitespace_after", None)
        gw = getattr(gone, "whitespace_after", None)
        if isinstance(pw, cst.ParenthesizedWhitespace) and isinstance(gw, cst.ParenthesizedWhitespace):
            names[-1] = names[-1].with_changes(comma=prev.with_changes(whitespace_after=pw.with_changes(last_line=gw.last_line)))
        else:
            names[-1] = names[-1].with_changes(comma=gone)
    return stmt.with_changes(body=[imp.with_changes(names=names)])


def _apply_import(cst, mod, spec):
    name, local, module = spec["name"], spec["local"], spec["module"]
    stmt = _Finder(cst, mod, module, name, spec.get("line", 0)).best()
    if stmt is None:
        raise FixError(f"no `from {module} import {name}` in the current text")
    kept = _without_alias(cst, stmt, name)
    if spec["mode"] == "guard":
        guard = cst.parse_statement(
            f"try:\n    from {module} import {name}{'' if local == name else ' as ' + local}\n"
            f"except ImportError:  # gone upstream (attnlens fix: guarded; the module handles its absence)\n"
            f"    {local} = None\n")
        return _replace_stmt(cst, mod, stmt, ([kept] if kept is not None else []) + [guard])
    rmod, rname = spec["replacement_module"], spec["replacement_name"]
    new_local = local if local != name else rname  # an alias stays; a plain import takes the new name
    mod = _replace_stmt(cst, mod, stmt, [kept] if kept is not None else [_import_line(cst, rmod, [(rname, None)])])
    if kept is not None:
        mod = _add_near(cst, mod, kept, rmod, rname, None if new_local == rname else new_local)
    if new_local != local:
        mod = _rename_uses(cst, mod, local, new_local)
    return mod


def _add_near(cst, mod, anchor, module: str, name: str, asname):
    """Add ``name`` to an existing ``from module import`` in the anchor's block, else a new
    statement right after the anchor statement."""
    body = list(mod.body)
    if any(st is anchor for st in body):
        for i in _top_imports(cst, body):
            imp = body[i].body[0]
            if isinstance(imp, cst.ImportFrom) and not imp.relative and _dotted(cst, imp.module) == module \
                    and not isinstance(imp.names, cst.ImportStar):
                body[i] = body[i].with_changes(body=[_with_alias(cst, imp, name, asname)])
                return mod.with_changes(body=body)
    return _replace_stmt(cst, mod, anchor, [anchor, _import_line(cst, module, [(name, asname)])])


def _rename_uses(cst, mod, old: str, new: str):
    """Rename the uses of an imported name (plain names only: not ``x.old`` attributes, not ``old=``
    keywords, not import statements)."""

    class Rename(cst.CSTTransformer):
        def leave_Name(self, original, updated):
            return updated.with_changes(value=new) if updated.value == old else updated

        def leave_Attribute(self, original, updated):
            return updated.with_changes(attr=original.attr)

        def leave_Arg(self, original, updated):
            return updated.with_changes(keyword=original.keyword) if original.keyword is not None else updated

        def leave_ImportAlias(self, original, updated):
            return original

    return mod.visit(Rename())


def _class_path(cst, mod, qual: str):
    """The ClassDef nodes from the module down to ``qual`` (nested classes), or FixError."""
    body = mod.body
    chain = []
    for name in qual.split("."):
        node = next((st for st in body if isinstance(st, cst.ClassDef) and st.name.value == name), None)
        if node is None:
            raise FixError(f"no class {qual} in the current text")
        chain.append(node)
        body = node.body.body
    return chain


def _replace_class(cst, mod, chain, new_cls):
    """Put ``new_cls`` in place of the innermost class of ``chain`` (rebuilding the outer ones)."""
    for outer, inner in zip(reversed(chain[:-1]), reversed(chain[1:])):
        body = [new_cls if st is inner else st for st in outer.body.body]
        new_cls = outer.with_changes(body=outer.body.with_changes(body=body))
    return mod.with_changes(body=[new_cls if st is chain[0] else st for st in mod.body])


def _apply_hook(cst, mod, spec):
    chain = _class_path(cst, mod, spec["class"])
    cls = chain[-1]
    body = list(cls.body.body)
    names = [st.name.value for st in body if isinstance(st, cst.FunctionDef)]
    if spec["hook"] in names:
        raise FixError(f"{spec['class']} already defines {spec['hook']}()")
    src = spec["source"]
    indent = src[:len(src) - len(src.lstrip())]
    code = (f"class _AttnlensFix:\n{indent}# Upstream {spec['upstream_class'].rpartition('.')[2]}.{spec['hook']} "
            f"({spec['upstream']}), copied by attnlens fix: state this platform's answer\n{src}\n")
    try:
        fn = cst.parse_module(code).body[0].body.body[0]
    except (cst.ParserSyntaxError, IndexError, AttributeError) as e:
        raise FixError(f"upstream's {spec['hook']}() does not parse on its own: {e}") from None
    fn = fn.with_changes(leading_lines=[cst.EmptyLine(indent=False)] + list(fn.leading_lines))
    at = len(body)
    for prev in spec["after"]:
        idx = next((i for i, st in enumerate(body) if isinstance(st, cst.FunctionDef) and st.name.value == prev), None)
        if idx is not None:
            at = idx + 1
            break
    body.insert(at, fn)
    mod = _replace_class(cst, mod, chain, cls.with_changes(body=cls.body.with_changes(body=body)))
    return _add_imports(cst, mod, spec.get("imports") or [])


def _function_node(cst, mod, qual: str):
    parts = qual.split(".")
    chain = _class_path(cst, mod, ".".join(parts[:-1])) if len(parts) > 1 else []
    body = chain[-1].body.body if chain else mod.body
    node = next((st for st in body if isinstance(st, cst.FunctionDef) and st.name.value == parts[-1]), None)
    if node is None:
        raise FixError(f"no function {qual} in the current text")
    return chain, node


def _new_param(cst, template, spec: dict):
    ann = cst.Annotation(annotation=cst.parse_expression(spec["annotation"])) if spec.get("annotation") else None
    default = cst.parse_expression(spec["default"]) if spec.get("default") is not None else None
    eq = cst.MaybeSentinel.DEFAULT
    if default is not None:
        sp = cst.SimpleWhitespace(" ") if ann is not None else cst.SimpleWhitespace("")
        eq = cst.AssignEqual(whitespace_before=sp, whitespace_after=sp)
    base = template if template is not None else cst.Param(name=cst.Name("x"))
    return base.with_changes(name=cst.Name(spec["name"]), annotation=ann, default=default, equal=eq, star="")


def _place(cst, plist: list, todo: list) -> list:
    """``plist`` (libcst Params) with the ``todo`` specs inserted after their ``after`` name (first
    when None); commas follow the list's own style, the last one keeps the original last's."""
    if not todo:
        return plist
    entries = list(plist)
    last_comma = entries[-1].comma if entries else cst.MaybeSentinel.DEFAULT
    sep = next((_bare(cst, e.comma) for e in entries[:-1] if isinstance(e.comma, cst.Comma)), None) or \
        cst.Comma(whitespace_after=cst.SimpleWhitespace(" "))
    was_last = entries[-1] if entries else None
    kept = {id(e) for e in entries[:-1]}  # original parameters that are not the last keep their comma
    for t in todo:
        names = [e.name.value for e in entries]
        at = names.index(t["after"]) + 1 if t.get("after") in names else (len(entries) if t.get("after") else 0)
        template = entries[at - 1] if at > 0 else (entries[0] if entries else None)
        entries.insert(at, _new_param(cst, template, t))
    trailing = isinstance(last_comma, cst.Comma) and isinstance(last_comma.whitespace_after, cst.ParenthesizedWhitespace)
    for i, e in enumerate(entries):
        if i < len(entries) - 1:
            # an original parameter keeps its comma (and its comment); so does a former last one with a
            # trailing comma on its own line
            keep = isinstance(e.comma, cst.Comma) and (id(e) in kept or (e is was_last and trailing))
            comma = e.comma if keep else sep
            if keep and e is was_last and isinstance(getattr(sep, "whitespace_after", None), cst.ParenthesizedWhitespace):
                # its line end led to the closing parenthesis; now it leads to a parameter
                comma = comma.with_changes(whitespace_after=comma.whitespace_after.with_changes(
                    last_line=sep.whitespace_after.last_line))
            entries[i] = e.with_changes(comma=comma)
        else:
            entries[i] = e.with_changes(comma=_bare(cst, last_comma) if e is not was_last else last_comma)
    return entries


def _apply_op_param(cst, mod, spec):
    chain, fn = _function_node(cst, mod, spec["function"])
    params = fn.params
    pos = list(params.params)
    kwo = list(params.kwonly_params)
    have = {p.name.value for p in pos + kwo + list(params.posonly_params)}
    todo = [p for p in spec["params"] if p["name"] not in have]
    if not todo:
        raise FixError(f"{spec['function']}() already has {', '.join(p['name'] for p in spec['params'])}")
    has_star = kwo or isinstance(params.star_arg, (cst.Param, cst.ParamStar))
    kw_todo = [p for p in todo if p["kind"] == "kwonly" and has_star]
    pos_todo = [p for p in todo if p not in kw_todo]
    try:
        new_params = params.with_changes(params=_place(cst, pos, pos_todo), kwonly_params=_place(cst, kwo, kw_todo))
    except cst.CSTValidationError:
        raise FixError(f"upstream's required parameter would follow one with a default in {spec['function']}(): "
                       "edit by hand") from None
    new_fn = fn.with_changes(params=new_params)
    if chain:
        cls = chain[-1]
        return _replace_class(cst, mod, chain, cls.with_changes(body=cls.body.with_changes(
            body=[new_fn if st is fn else st for st in cls.body.body])))
    return mod.with_changes(body=[new_fn if st is fn else st for st in mod.body])


def _field_name(cst, st) -> str | None:
    if isinstance(st, cst.SimpleStatementLine) and len(st.body) == 1 and isinstance(st.body[0], cst.AnnAssign) \
            and isinstance(st.body[0].target, cst.Name):
        return st.body[0].target.value
    return None


def _apply_fields(cst, mod, spec):
    chain = _class_path(cst, mod, spec["class"])
    cls = chain[-1]
    body = list(cls.body.body)
    have = {n for n in (_field_name(cst, st) for st in body) if n}
    todo = [t for t in spec["fields"] if t["name"] not in have]
    if not todo:
        raise FixError(f"{spec['class']} already has {', '.join(t['name'] for t in spec['fields'])}")
    for t in todo:
        fields = [(i, _field_name(cst, st), st) for i, st in enumerate(body) if _field_name(cst, st)]
        if not fields:
            at = next((i for i, st in enumerate(body) if not (isinstance(st, cst.SimpleStatementLine)
                                                                and isinstance(st.body[0], cst.Expr))), len(body))
        else:
            idx = next((i for i, n, _st in fields if n == t.get("after")), None)
            at = idx + 1 if idx is not None else fields[-1][0] + 1
            if t.get("default") is None:
                first_default = next((i for i, _n, st in fields if st.body[0].value is not None), None)
                if first_default is not None and first_default < at:
                    at = first_default  # a field without a default cannot follow one with a default
        line = f"{t['name']}: {t['annotation']}" + (f" = {t['default']}" if t.get("default") is not None else "")
        body.insert(at, cst.parse_statement(line + "\n", config=mod.config_for_parsing))
    return _replace_class(cst, mod, chain, cls.with_changes(body=cls.body.with_changes(body=body)))
