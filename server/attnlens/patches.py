"""Monkey patches of the plugin, read from its code.

Two forms are recognised, without naming any plugin:

* a *patch decorator*: a decorator call whose first argument is a literal
  module path (``@patch("vllm.x.y")``, ``@patch("vllm.x.y", "Cls.attr")``)
  and whose callee is a workspace function that rebinds attributes
  (its module calls ``setattr``); the replaced attribute defaults to the
  decorated function's name;
* assignments and ``setattr`` calls on attributes of imported modules or
  upstream classes, at module level or inside a function (a patch applied
  when that function runs): ``iu.has_triton_kernels = lambda: False``,
  ``mod.get_backend = my_selector``, ``setattr(mod, "fn", lambda cfg: X)``.
  A lambda is summarised as a function of one return (``ModuleSummary.lambdas``),
  so calls of the replaced attribute return what the lambda returns.

Result: ``{(module, attribute path): (replacement Val, path, line, text)}``. Several
replacements of one attribute, or replacements under conditions, give a ``patched``
fork: each replacement with its condition, and the original when none is unconditional.
"""

from __future__ import annotations

import bisect
import re

from . import model as M
from .lookup import Lookup
from .pyindex import Decorator
from .walk import Alt, Val, ValKind, Walk, alts_value


def _module_rebinds(resolver: Lookup, mod) -> bool:
    key = ("rebinds", mod.path, mod.sha)
    cache = resolver.rebind_cache
    if key in cache:
        return cache[key]
    ok = any(c.func in ("setattr", "builtins.setattr") for c in mod.summary.calls)
    cache[key] = ok
    return ok


def is_patch_decorator(resolver: Lookup, mod, d: Decorator) -> str | None:
    """The patched module path when ``d`` is a patch decorator, else None."""
    if not d.is_call or not d.str_args or not d.str_args[0]:
        return None
    target_mod = d.str_args[0]
    if "." not in target_mod and resolver.index.locate(target_mod) is None:
        return None
    v = resolver.resolve_dotted(mod, "", d.func, Walk(), line=d.line)
    if v.kind != ValKind.FUNCTION or v.module is None or not v.module.workspace:
        return None
    if not _module_rebinds(resolver, v.module):
        return None
    return target_mod


def lambda_text(mod, q: str) -> str:
    """`lambda cfg: X` from a lambda's summary (its parameters and returned text)."""
    f = mod.summary.lambdas.get(q)
    if f is None:
        return "lambda ...: ..."
    params = ", ".join(p.name for p in f.params)
    body = f.return_alts[0][0] if f.return_alts and f.return_alts[0][0] else "..."
    return f"lambda{' ' + params if params else ''}: {body}"


# Which module texts can hold a patch (``patch_candidate``, a superset decided on the text alone): a decorator call
# whose first argument is a module-path string (a patch decorator), a ``setattr`` call, ``sys.modules``, or an
# assignment to an attribute chain whose root the module binds other than as a parameter (an import, an assignment,
# a def, a loop, ``with``/``except`` target; inside a ``def`` only an import counts). Only those modules are summarised
# for the patch table: every module was, which made the first request on upstream vLLM (2,234 modules) wait 10-20 s.
# Left out by design: the root ``self``/``cls`` (never a patch inside a function or class body; a module-level
# variable of that name is not seen in practice). Each pattern starts with a literal or a small set, so that ``re``
# scans fast (upstream's 33 MB in ~0.4 s).
_PATCH_DECO = re.compile(r"@[\w.]+[ \t]*\(\s*[rRuU]?['\"][A-Za-z_][\w.]*['\"]")
_TARGET = r"(?!self\.|cls\.)([A-Za-z_]\w*)\.[\w.]+[ \t]*(?::[^=\n]*)?=(?!=)"
# the end of an attribute-chain assignment target (``.attr =``, ``.attr: T =``): a literal first character, so that
# ``re`` scans fast; the statement around each is then read on its line: the target starts a statement (the line,
# after `;`, or after the `=` of a chained assignment) or follows a one-line compound header (``if c: m.x = v``),
# and is not an annotation (``x: tl.constexpr = 4``)
_ASSIGN_END = re.compile(r"\.\w+[ \t]*(?::[^=\n]*)?=(?!=)")
_AT_STATEMENT = re.compile(r"(?:^|[;=])[ \t]*" + _TARGET + r"$")
_AFTER_HEADER = re.compile(r"[ \t]*(?:async[ \t]+)?(?:if|elif|else|while|for|with|try|except|finally|def|class)\b"
                           r"[^\n]*:[ \t]*" + _TARGET + r"$")
_BOUND = (  # what binds a name other than as a parameter (supersets: ``has x`` counts as ``as x``)
    re.compile(r"import[ \t]+\(?([^#\n)]*(?:\n[^#)]*\))?)"),  # import lists, parenthesised ones across lines
    re.compile(r"as[ \t]+(\w+)"),  # import ... as x, with ... as x, except ... as x
    re.compile(r"def[ \t]+(\w+)"),
    re.compile(r"class[ \t]+(\w+)"),
)
_FOR = re.compile(r"for[ \t]+([^\n]{0,120})")
_STAR = re.compile(r"import[ \t]+\*")
_NAME = re.compile(r"[A-Za-z_]\w*")


def _assigned(text: str, name: str) -> bool:
    """Does ``text`` assign ``name`` (``name = ``, ``a, name = ``, ``(a, name) = ``, ``name: T = ``, a chain)? A
    superset: any text where the name (or a name ending with it) is followed by an assignment's ``=``."""
    return re.search(re.escape(name) + r"[)\]]?[ \t]*(?:,[^=\n]*)?(?::[^=\n]*)?=(?!=)", text) is not None


_DEF_HEADER = re.compile(r"[ \t]*(?:async[ \t]+)?def\b")


def _inside_def(text: str, pos: int) -> bool:
    """Is the statement at ``pos`` inside a ``def``, by indentation: some line above it, less indented than every
    line between, starts with ``def``? (Blank, comment and closing-bracket lines are skipped; a line of a multi-line
    string or bracket can only make a module-level statement look like one inside a def when it starts with ``def``.)"""
    ls = text.rfind("\n", 0, pos) + 1
    line = text[ls:pos]
    indent = len(line) - len(line.lstrip(" \t"))
    while indent > 0 and ls > 0:
        end = ls - 1
        ls = text.rfind("\n", 0, end) + 1
        prev = text[ls:end]
        body = prev.lstrip(" \t")
        if not body or body.startswith(("#", ")", "]", "}")):  # blank, comment, the end of a multi-line header
            continue
        ind = len(prev) - len(body)
        if ind < indent:
            if _DEF_HEADER.match(prev):
                return True
            indent = ind
    return False


class _DefLines:
    """:func:`_inside_def` for every line of a text at once: one pass keeps the stack of the lines a statement's
    upward walk would meet (each the nearest line above, less indented than every line between, blank, comment
    and closing-bracket lines skipped), so a text with thousands of attribute assignments in methods is not
    walked up once per assignment (quadratic in a long method: 8.4 s for 6,000 assignments in one). Equal to
    :func:`_inside_def` at every position (which the tests keep as the reference)."""

    def __init__(self, text: str):
        self.starts = [0]
        self.inside: list[bool] = []
        stack: list[tuple[int, bool]] = []  # (indent, a def header or inside one) of the lines met going down
        pos = 0
        for line in text.split("\n"):
            body = line.lstrip(" \t")
            ind = len(line) - len(body)
            # a statement on this line (at its indentation): the nearest less indented line above decides
            if body and not body.startswith(("#", ")", "]", "}")):
                while stack and stack[-1][0] >= ind:
                    stack.pop()
                up = ind > 0 and bool(stack) and stack[-1][1]
                self.inside.append(up)
                stack.append((ind, up or _DEF_HEADER.match(line) is not None))
            else:  # a line the walk skips: it leaves the stack as it is
                k = len(stack) - 1
                while k >= 0 and stack[k][0] >= ind:
                    k -= 1
                self.inside.append(ind > 0 and k >= 0 and stack[k][1])
            pos += len(line) + 1
            self.starts.append(pos)

    def at(self, pos: int) -> bool:
        return self.inside[bisect.bisect_right(self.starts, pos) - 1]


def patch_candidate(text: str | None) -> bool:
    """Can this module text hold a patch? A superset decided on the text alone; ``collect_patches`` decides."""
    if not text:
        return False
    if "setattr" in text or "sys.modules" in text or _PATCH_DECO.search(text):
        return True
    # roots of attribute assignments inside a def (they patch only through a name bound by an import) and elsewhere
    in_def: set = set()
    roots: set = set()
    lines = None
    for m in _ASSIGN_END.finditer(text):
        ls = text.rfind("\n", 0, m.start()) + 1
        seg = text[ls:m.end()]
        t = _AT_STATEMENT.search(seg) or _AFTER_HEADER.match(seg)
        if t is not None:
            if lines is None:
                lines = _DefLines(text)
            (in_def if lines.at(ls + t.start(1)) else roots).add(t.group(1))
    if not roots and not in_def:
        return False
    imported = set()
    for g in _BOUND[0].findall(text):
        imported.update(_NAME.findall(g))
    if not in_def.isdisjoint(imported):
        return True
    if not roots:
        return False
    if not roots.isdisjoint(imported) or _STAR.search(text):
        return True  # ``from m import *`` binds names no text shows
    bound = set()
    for rx in _BOUND[1:]:
        for g in rx.findall(text):
            bound.update(_NAME.findall(g))
    for g in _FOR.findall(text):
        bound.update(_NAME.findall(g.split(" in ", 1)[0]))
    i = text.find(":=")
    while i >= 0:  # walrus targets
        bound.update(_NAME.findall(text[max(0, i - 80):i])[-1:])
        i = text.find(":=", i + 2)
    return not roots.isdisjoint(bound) or any(_assigned(text, r) for r in roots - bound)


def collect_patches(resolver: Lookup) -> dict:
    """Every replacement of an upstream attribute, by (module, attribute path). One unconditional
    replacement is ``(Val, path, line, text)``; several, or replacements under conditions, are a
    ``patched`` fork (the original is a branch when no replacement is unconditional)."""
    found: dict = {}  # key -> [(replacement Val, mod, guards, scope, line, text)]
    idx = resolver.index
    for mod in idx.workspace_modules_matching(patch_candidate):
        # each module's replacements are carried across edits on their own (``Index.carried``): an edit of one
        # module that holds a patch collects that module's again, not every module's (0.03-0.06 s per keystroke
        # on the real checkout, the resolver's memos being new in each index generation)
        for key, item in idx.carried(("patch-items", mod.name), lambda m=mod: _module_items(resolver, m), reads=(mod.name,)):
            found.setdefault(key, []).append(item)
    return {key: _entry(resolver, key, items) for key, items in found.items()}


def _word(c: str) -> bool:
    return c.isalnum() or c == "_"


def may_replace(text: str, name: str) -> bool:
    """Can a module of ``text`` replace an attribute named ``name`` (``_module_items``)? A superset decided on the
    text: ``name`` as a whole word that is an attribute written to (``.name`` then ``=`` or ``:``, line breaks and
    backslashes skipped), a string (``"name"``, ``"Cls.name"``: a decorator's or ``setattr``'s argument), or the name
    of a ``def`` or ``class`` (a decorated replacement named after what it replaces)."""
    n, end = len(name), len(text)
    i = text.find(name)
    while i >= 0:
        j = i + n
        if (j == end or not _word(text[j])) and (i == 0 or not _word(text[i - 1])):
            k = i - 1
            while k >= 0 and text[k] in " \t\r\n\\":
                k -= 1
            before = text[k] if k >= 0 else ""
            if before == ".":
                m = j
                while m < end and text[m] in " \t\r\n\\":
                    m += 1
                if m < end and text[m] in "=:":
                    return True
            if j < end and text[j] in "'\"" and i and text[i - 1] in "'\".":
                return True
            if text.endswith(("def", "class"), 0, k + 1):
                return True
        i = text.find(name, i + 1)
    return False


class LazyPatches:
    """The patch table's entry of one key, for an index generation whose whole table would first need the summary of
    an edited buffer (a 5,000-line paste, a keystroke in a long class): the entry ``collect_patches`` gives, read
    from each candidate module's replacements kept across edits (``Index.carried``), and for a module whose kept
    ones no longer stand, its replacements now only when its text can replace the key's last attribute name
    (:func:`may_replace`). A module's replacement of ``(m, a.b)`` names ``b`` in its own text (an assignment target,
    the decorated def or class, or a string argument of the decorator or of ``setattr``), so a module whose text
    does not has none of that key, whatever else the edit changed; the answer is the whole table's. Used only where
    no dependency recorder observes the reads."""

    def __init__(self, resolver: Lookup):
        idx = resolver.index
        self.resolver = resolver
        self.generation = idx.generation
        self.by_key: dict = {}  # key -> [((module order, item order), item)]
        self.pending: dict = {}  # module name -> (order, its text) of the modules whose replacements are not known
        self.entries: dict = {}  # key -> entry (or None)
        self.busy = False  # collecting a module's replacements: lookups meanwhile see none (``Resolver.patch_entry``)
        for order, name in enumerate(idx.matching_names(patch_candidate)):
            kept = idx.carried_valid(("patch-items", name))
            if kept is None:
                self.pending[name] = (order, idx.source_text(idx.ws_files[name]) or "")
            else:
                self._add(order, kept[0])

    def _add(self, order: int, items: tuple) -> None:
        for i, (key, item) in enumerate(items):
            self.by_key.setdefault(key, []).append(((order, i), item))

    def entry(self, key) -> tuple | None:
        if key in self.entries:
            return self.entries[key]
        last = key[1].rpartition(".")[2]
        idx = self.resolver.index
        for name in [n for n, (_o, text) in self.pending.items() if may_replace(text, last)]:
            order = self.pending.pop(name)[0]
            self.busy = True
            try:
                items = idx.carried(("patch-items", name), lambda n=name: _module_items(self.resolver, idx.module(n)),
                                    reads=(name,))
            finally:
                self.busy = False
            self._add(order, items)
            self.entries.clear()  # (another key's entry may have gained an item)
        found = self.by_key.get(key)
        out = _entry(self.resolver, key, [item for _o, item in sorted(found, key=lambda x: x[0])]) if found else None
        self.entries[key] = out
        return out


def _module_items(resolver: Lookup, mod) -> tuple:
    """((module, attribute path), (replacement Val, mod, guards, scope, line, text)) of every replacement ``mod``
    makes, in source order of its summary."""
    found: dict = {}
    s = mod.summary
    for q, f in s.functions.items():
        for d in f.decorators:
            tm = is_patch_decorator(resolver, mod, d)
            if tm is None:
                continue
            attr = d.str_args[1] if len(d.str_args) > 1 and d.str_args[1] else dict(d.kw_texts).get("target_attribute_name", "").strip("'\"") or f.name
            rep = Val(ValKind.FUNCTION, mod, q, mod.path, f.line)
            args = ", ".join(repr(a) for a in d.str_args if a)
            found.setdefault((tm, attr), []).append((rep, mod, (), "", d.line, f"@{d.func}({args})"))
    for q, c in s.classes.items():
        for d in c.decorators:
            tm = is_patch_decorator(resolver, mod, d)
            if tm is None:
                continue
            attr = d.str_args[1] if len(d.str_args) > 1 and d.str_args[1] else c.name
            rep = Val(ValKind.CLASS, mod, q, mod.path, c.line)
            args = ", ".join(repr(a) for a in d.str_args if a)
            found.setdefault((tm, attr), []).append((rep, mod, (), "", d.line, f"@{d.func}({args})"))
    for ap in s.attr_patches:
        base, _, attr = ap.target.rpartition(".")
        if not base:
            continue
        bv = resolver.resolve_dotted(mod, ap.scope, base, Walk(), line=ap.line)
        if bv.kind != ValKind.MODULE or bv.module is None or bv.module.workspace:
            if not (bv.kind == ValKind.CLASS and bv.module is not None and not bv.module.workspace):
                continue
            tm, attr = bv.module.name, f"{bv.qual}.{attr}"
        else:
            tm = bv.module.name
        if ap.value.rpartition(".")[2].startswith("<lambda:"):
            lf = s.lambdas.get(ap.value)
            rv = Val(ValKind.FUNCTION, mod, ap.value, mod.path, lf.line if lf else ap.line)
            vtext = lambda_text(mod, ap.value)
        elif ap.value:
            rv = resolver.resolve_dotted(mod, ap.scope, ap.value, Walk(), line=ap.line)
            vtext = ap.value
        else:
            rv = Val(ValKind.UNKNOWN, mod, ap.target, mod.path, ap.line,
                     reason=f"{ap.target} is replaced by a computed value (expression) at {mod.path}:{ap.line}")
            vtext = "<expression>"
        text = f"{ap.target} = {vtext}" + (f" (in {ap.scope}(), when it runs)" if ap.scope else "")
        found.setdefault((tm, attr), []).append((rv, mod, ap.guards, ap.scope, ap.line, text))
    return tuple((key, item) for key, items in found.items() for item in items)


def _entry(resolver: Lookup, key, items: list) -> tuple:
    """The table entry of one replaced attribute: the replacements that can be what runs (the last
    unconditional one in source order and the conditional ones after it), as one value or a fork."""
    items = sorted(items, key=lambda it: (it[1].path, it[4]))
    last = max((i for i, it in enumerate(items) if not it[2]), default=None)
    live = items[last:] if last is not None else items
    if len(live) == 1 and not live[0][2]:
        rv, mod, _g, _s, line, text = live[0]
        return (rv, mod.path, line, text)
    arms, conds, reaches = [], [], []
    for rv, mod, guards, scope, line, text in live:
        c = resolver.guard_text(guards)
        r = resolver.guard_value(mod, guards, scope) if guards else True
        if c:
            conds.append(c)
            reaches.append(r)
        arms.append(Alt(rv, c, r, text, mod.path, line))
    tm, attr = key
    if last is None and not _exhaustive([it[2] for it in live]):
        # no unconditional replacement: when no condition holds, the original runs
        ov = resolver.module_value(tm, Walk(), quiet=True)
        for part in attr.split("."):
            ov = resolver.attr(ov, part, Walk())
        ov.extra = dict(ov.extra, unpatched=True)
        r = False if any(x is True for x in reaches) else (True if all(x is False for x in reaches) else None)
        arms.append(Alt(ov, " and ".join(f"not ({c})" for c in conds), r, f"the original {tm}.{attr}", ov.path, ov.line))
    first = live[0]
    text = "; ".join(f"{it[5]}" + (f" (if {resolver.guard_text(it[2])})" if it[2] else "") for it in live)
    fv = alts_value(M.ForkKind.PATCHED, "; ".join(conds) or None, first[1], f"{tm}.{attr}", first[4], arms)
    fv.extra["patch_symbol"] = first[0].dotted  # what the patch hop names: the (first) replacement
    return (fv, first[1].path, first[4], text)


def entry_facts(entry: tuple | None) -> tuple | None:
    """What a patch-table entry says, comparable across workspaces: the replacement, where and its text (a fork: each
    arm's text, place and condition)."""
    if entry is None:
        return None
    if len(entry) == 4:
        return (entry[0].dotted, entry[1], entry[2], entry[3])
    return tuple((a.text, a.path, a.line, a.condition) for a in entry[0].alts)


def _exhaustive(guard_lists: list) -> bool:
    """Do the replacements' guards cover every case: the `if` and the `else` of one statement, under the same
    outer guards?"""
    for g in guard_lists:
        if not g or g[-1][0] != "if":
            continue
        _k, text, line = g[-1]
        if any(h == g[:-1] + (("else", text, line),) for h in guard_lists):
            return True
    return False


def _freeze_val(v) -> tuple:
    """A plain tuple for the on-disk cache; kinds as their plain strings (an enum member would pickle as a
    reference to its class)."""
    arms = None
    if v.kind == ValKind.ALTS:
        arms = [(_freeze_val(a.val), a.condition, a.reachable, a.label, a.path, a.line) for a in v.extra["alts"]]
    fk = v.extra.get("fork_kind")
    return (str(v.kind), v.module.name if v.module is not None else None, v.qual, v.path, v.line, v.reason,
            bool(v.extra.get("unpatched")), arms, None if fk is None else str(fk), v.extra.get("decided_by"),
            v.extra.get("patch_symbol"))


def _thaw_val(resolver: Lookup, t: tuple):
    kind, modname, qual, vpath, vline, reason, unpatched, arms, fork_kind, decided_by, sym = t
    mod = resolver.index.module(modname) if modname else None
    extra: dict = {"unpatched": True} if unpatched else {}
    if arms is not None:
        extra.update(alts=[Alt(_thaw_val(resolver, a[0]), *a[1:]) for a in arms],
                     fork_kind=None if fork_kind is None else M.ForkKind(fork_kind), decided_by=decided_by, patch_symbol=sym)
    return Val(ValKind(kind), mod, qual, vpath, vline, reason=reason or "", extra=extra)


def freeze_patches(table: dict) -> list:
    return [(key, _freeze_val(rv), path, line, text) for key, (rv, path, line, text) in table.items()]


def thaw_patches(resolver: Lookup, frozen: list) -> dict:
    class Lazy(dict):
        def get(self, key, default=None):
            item = dict.get(self, key)
            if item is None:
                return default
            if len(item) == 5:
                _, fv, path, line, text = item
                item = (_thaw_val(resolver, fv), path, line, text)
                self[key] = item
            return item

    lazy = Lazy()
    for item in frozen:
        lazy[item[0]] = item
    return lazy
