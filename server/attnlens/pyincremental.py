"""Incremental summaries of an editor buffer: re-summarise only the top-level statements an edit touched.

An edit of a 5,000-line buffer used to cost a whole parse (with syntax recovery, one parse per broken
statement) and a whole summary: 0.3-1 s per keystroke on a pasted block, paid by the next hover. Here
the buffer is cut into top-level chunks (``pyrecover.ChunkSplitter``: one statement with its block,
comments and decorators; an edit rescans only from the chunk it touches); each chunk is summarised on
its own text, as a module starting at line 1, and kept by its text; the buffer's summary is the
chunks' summaries placed at their lines (a shifted copy when a chunk moved) and joined in order.

The result is the summary ``pyindex.summarize`` builds of the same text, field for field (tests
compare the two over every file of the installed vLLM and the examples, and over edit sequences):

* what a chunk's summary can depend on outside its text is recorded with it and checked before it is
  reused: the module's bindings of a name an assignment inside a function patches
  (``_Builder.prefix``/``deps``, "is it an import of the module"); a module-level ``if c: raise``
  guards what follows it, so from such a statement on the rest of the text is one piece;
* syntax recovery is per chunk in both (``pyrecover.parse_tolerant`` recovers chunk by chunk);
* what cannot be matched piecewise (NUL bytes, a parse or a summary too deep to finish, a lone
  ``\\r`` line end) is summarised whole.
"""

from __future__ import annotations

import re
import weakref

from .gcpolicy import paused
from .pyindex import (AttrPatch, Binding, CallSite, ClassInfo, Decorator, FunctionInfo, ModuleSummary, Ref, Stopped,
                      _Builder, import_only, summarize)
from .pyrecover import (MAX_ROUNDS, ChunkSplitter, SyntaxIssue, issue_error, moved_error, parse_chunk, parse_tolerant,
                        shift_issue, syntax_issue)

_LAMBDA = re.compile(r"<lambda:(\d+):")


class _Whole(Exception):
    """This text is summarised whole (see the module doc)."""


class _Broken(Exception):
    """A chunk whose syntax recovery fails (``parse_chunk`` raised ``error``, in the chunk's own lines): the
    whole text's parse fails on it too (``parse_tolerant`` recovers chunk by chunk, in order), so the
    buffer's summary is the one ``pyindex.summarize`` gives an unparsable text. The chunk is kept by its text as
    a :class:`_BrokenChunk`: a keystroke elsewhere in the buffer does not run the failing recovery (16 parses of
    the chunk) again."""

    def __init__(self, error: SyntaxError):
        super().__init__(error.msg)
        self.error = error


class _BrokenChunk:
    """What ``IncrementalSummary.frags`` keeps for a chunk whose recovery failed: its error (no traceback: a kept
    traceback would keep the frames of the failed parse, and the buffer's old text with them)."""

    __slots__ = ("error",)

    def __init__(self, error: SyntaxError):
        self.error = error


def _bare(e: BaseException) -> BaseException:
    """``e`` without its traceback and context, to be kept."""
    e.__context__ = e.__cause__ = None
    return e.with_traceback(None)


class _Fragment:
    """One chunk's summary at line 1 (``base``, its calls numbered from 0) and where it was placed lately
    (a text can hold the same chunk more than once: a pasted block)."""

    __slots__ = ("base", "deps", "pushes", "issues", "placed", "lines", "join", "uses", "__weakref__")

    def __init__(self, base: ModuleSummary, deps: dict, pushes: bool, issues: tuple):
        self.base = base
        self.deps = deps
        self.pushes = pushes
        self.issues = issues
        self.placed: dict = {}  # (first line, first call) -> [summary there, the join that last used it]
        self.lines: dict = {}  # first line -> a first call it was placed with
        self.join = 0
        self.uses = 0  # placements asked for by the current join

    def fits(self, bindings: dict) -> bool:
        return all(import_only(bindings.get(name)) == state for name, state in self.deps.items())

    def at(self, line0: int, call0: int, join: int) -> ModuleSummary:
        if self.join != join:
            self.join, self.uses = join, 0
        self.uses += 1
        key = (line0, call0)
        hit = self.placed.get(key)
        if hit is not None:
            hit[1] = join
            return hit[0]
        c_old = self.lines.get(line0)
        if c_old is not None and (line0, c_old) in self.placed:
            # the same lines, calls numbered from elsewhere (an edit above added or removed calls)
            placed = _renumbered(self.placed[(line0, c_old)][0], call0 - c_old)
        else:
            placed = _placed(self.base, line0, call0)
        if len(self.placed) > 2 * self.uses + 4:  # keep the placements of this text and the one before
            self.placed = {k: v for k, v in self.placed.items() if v[1] >= join - 1}
            self.lines = {k[0]: k[1] for k in self.placed}
        self.placed[key] = [placed, join]
        self.lines[line0] = call0
        return placed


# (chunk text, tail?) -> a fragment some open buffer holds: the chunks of every buffer, shared (a chunk's summary
# is a function of its text and of the bindings it read, which ``fits`` checks). A block pasted from another
# open file is placed, not parsed: a 5,000-line paste from the workspace's files 70-80 ms -> ~30 ms
_SHARED: "weakref.WeakValueDictionary[tuple, _Fragment]" = weakref.WeakValueDictionary()


class IncrementalSummary:
    """The summaries of successive texts of one buffer (``refs`` as in ``pyindex.summarize``)."""

    def __init__(self, refs: bool = True):
        self.refs = refs
        self.splitter = ChunkSplitter()
        self.frags: dict[str, _Fragment | _BrokenChunk] = {}
        self._used: set = set()
        self._joins = 0

    def summarize(self, text: str, path: str, sha: str, should_stop=None) -> ModuleSummary:
        if "\x00" in text:
            return summarize(text, path, sha, refs=self.refs, should_stop=should_stop)
        # the cyclic collector paused while the pieces are built: summaries hold no cycles, and on a big
        # buffer its full collections walked every new fragment again (50,000 lines: 6.1 s with it, 3.2 s
        # without; the whole-file summary took 4.4 s); reference counting frees what is dropped
        with paused():
            try:
                return self._join(text, path, sha, should_stop)
            except _Whole:
                return summarize(text, path, sha, refs=self.refs, should_stop=should_stop)

    # -- the pieces --------------------------------------------------------------------
    def _join(self, text: str, path: str, sha: str, should_stop) -> ModuleSummary:
        chunks = self.splitter.split(text)
        self._joins += 1
        s = ModuleSummary(path=path, sha=sha, n_lines=_n_lines(text))
        used: set = set()
        errors: list = []
        i = 0
        while i < len(chunks):
            if should_stop is not None and not i & 15 and should_stop():
                self._keep(used)
                raise Stopped(f"{path}: summary stopped at line {chunks[i][2] + 1}")
            a, b, line0 = chunks[i]
            piece = text[a:b]
            try:
                frag = self._fragment(piece, s.bindings, False, should_stop)
            except _Broken as x:
                self._keep(used | {piece})
                return _broken_summary(text, path, sha, x.error, line0)
            if frag.pushes and i + 1 < len(chunks):
                # a module-level `if c: raise`: what follows it is guarded by it, so the rest is one piece
                piece = text[a:]
                frag = self._fragment(piece, s.bindings, True, should_stop)
                i = len(chunks)
            else:
                i += 1
            used.add(piece)
            if frag.issues:
                errors.extend(shift_issue(e, line0) for e in frag.issues)
            self._merge(s, frag.at(line0, len(s.calls), self._joins))
        self._keep(used)
        if len(errors) > MAX_ROUNDS:
            return _unparsable(text, path, sha, errors[0])
        s.syntax_errors = tuple(errors)
        s.has_getattr = "__getattr__" in s.bindings
        return s

    def _fragment(self, piece: str, bindings: dict, tail: bool, should_stop) -> _Fragment:
        frag = self.frags.get(piece)
        if type(frag) is _BrokenChunk:
            if tail:
                raise _Whole
            raise _Broken(frag.error)
        if frag is not None and frag.fits(bindings):
            return frag
        other = _SHARED.get((piece, tail))
        if other is not None and other is not frag and other.fits(bindings):
            # another buffer's summary of this text (its placements are its own)
            frag = _Fragment(other.base, other.deps, other.pushes, other.issues)
            self.frags[piece] = frag
            return frag
        try:
            parsed = parse_tolerant(piece) if tail else parse_chunk(piece, 0)
        except SyntaxError as e:
            if tail:
                raise _Whole from None  # the rest of the text as one piece: the whole text's summary says so
            e = _bare(e)
            self.frags[piece] = _BrokenChunk(e)
            raise _Broken(e) from None
        except (ValueError, RecursionError, MemoryError):
            raise _Whole from None  # an absurd statement: the whole text's summary says so
        b = _Builder(parsed.text, "", "")
        b.want_refs = self.refs
        b.prefix = bindings
        b.deps = {}
        b.should_stop = should_stop
        b._src = parsed.text
        try:
            b.body(parsed.tree.body)
        except RecursionError:
            raise _Whole from None
        b._src = ""
        b.prefix = None
        frag = _Fragment(b.s, b.deps, b.module_guard, parsed.errors)
        self.frags[piece] = frag  # pruned after each text (_keep)
        _SHARED[(piece, tail)] = frag
        return frag

    def _keep(self, used: set) -> None:
        """Keep the fragments of this text and of the one before (an undo goes back to it)."""
        keep = used | self._used
        if len(self.frags) > 2 * len(keep) + 64:
            self.frags = {k: v for k, v in self.frags.items() if k in keep}
        self._used = used

    @staticmethod
    def _merge(s: ModuleSummary, f: ModuleSummary) -> None:
        for name, bl in f.bindings.items():
            have = s.bindings.get(name)
            if have is None:
                s.bindings[name] = list(bl)
            else:
                have.extend(bl)
        s.functions.update(f.functions)
        s.classes.update(f.classes)
        s.calls.extend(f.calls)
        s.refs.extend(f.refs)
        s.attr_patches.extend(f.attr_patches)
        s.lambdas.update(f.lambdas)
        s.global_ann.update(f.global_ann)
        if f.all_exports is not None:
            s.all_exports = f.all_exports


def _n_lines(text: str) -> int:
    """``len(_NEWLINE.split(text))`` (pyindex's count) without splitting."""
    n = text.count("\n")
    if "\r" in text:
        n += text.count("\r") - text.count("\r\n")
    return n + 1


def _broken_summary(text: str, path: str, sha: str, e: SyntaxError, line0: int) -> ModuleSummary:
    """What ``pyindex.summarize`` says of ``text`` whose chunk at ``line0`` fails recovery with ``e`` (raised
    for the chunk's own text): ``parse_chunk`` moves the line numbers of its error, not its message."""
    err = moved_error(e, line0)
    s = ModuleSummary(path=path, sha=sha, n_lines=_n_lines(text))
    s.error = f"syntax error: {err.msg}"
    s.error_line = err.lineno or 0
    s.syntax_errors = (syntax_issue(text, err),)
    return s


def _unparsable(text: str, path: str, sha: str, first: SyntaxIssue) -> ModuleSummary:
    """What ``pyindex.summarize`` says of a file with too many broken statements."""
    e = issue_error(first)
    s = ModuleSummary(path=path, sha=sha, n_lines=_n_lines(text))
    s.error = f"syntax error: {e.msg}"
    s.error_line = e.lineno
    s.syntax_errors = (syntax_issue(text, e),)
    return s


# -- placing a chunk's summary at its line -------------------------------------------------------


def _placed(base: ModuleSummary, d: int, c: int) -> ModuleSummary:
    """``base`` (a chunk summarised at line 1, calls from 0) moved ``d`` lines down, its calls numbered
    from ``c``: shifted copies; ``base`` itself when nothing moves."""
    if not d and not c:
        return base
    if not d:
        return _renumbered(base, c)
    st = (lambda v: _lam(v, d)) if base.lambdas else _same
    return ModuleSummary(
        path=base.path, sha=base.sha,
        bindings={n: [_binding(b, d, st) for b in bl] for n, bl in base.bindings.items()},
        functions={st(q): _func(f, d, c, st) for q, f in base.functions.items()},
        classes={st(q): _cls(k, d, st) for q, k in base.classes.items()},
        calls=[_call(x, d, st) for x in base.calls],
        refs=[_ref(r, d, st) for r in base.refs],
        attr_patches=[AttrPatch(p.target, st(p.value), p.line + d, p.col, _guards(p.guards, d), st(p.scope))
                      for p in base.attr_patches],
        all_exports=base.all_exports,
        lambdas={st(q): _func(f, d, c, st) for q, f in base.lambdas.items()},
        global_ann=base.global_ann,
    )


def _same(v):
    return v


def _renumbered(f: ModuleSummary, c: int) -> ModuleSummary:
    """``f`` with its functions' call indices moved by ``c`` (the rest shared)."""
    if not c or not f.calls:
        return f
    return ModuleSummary(path=f.path, sha=f.sha, bindings=f.bindings,
                         functions={q: _func_calls(x, c) for q, x in f.functions.items()}, classes=f.classes,
                         calls=f.calls, refs=f.refs, attr_patches=f.attr_patches, all_exports=f.all_exports,
                         lambdas={q: _func_calls(x, c) for q, x in f.lambdas.items()} if f.lambdas else f.lambdas,
                         global_ann=f.global_ann)


def _lam(v, d: int):
    """A text naming a lambda by its line (``<lambda:12:4>``), moved ``d`` lines."""
    if v and type(v) is str and "<lambda:" in v:
        return _LAMBDA.sub(lambda m: f"<lambda:{int(m.group(1)) + d}:", v)
    return v


def _guards(g: tuple, d: int) -> tuple:
    return tuple((k, t, ln + d) for k, t, ln in g) if g else g


def _binding(b: Binding, d: int, st) -> Binding:
    g = _copy_binding(b)
    g.line = b.line + d
    if b.guards:
        g.guards = _guards(b.guards, d)
    if st is not _same:
        g.target, g.attr, g.scope = st(b.target), st(b.attr), st(b.scope)
        if b.alternatives:
            g.alternatives = tuple(st(a) for a in b.alternatives)
    return g


def _deco(x: Decorator, d: int) -> Decorator:
    g = _copy_deco(x)
    g.line = x.line + d
    return g


def _call(x: CallSite, d: int, st) -> CallSite:
    g = _copy_call(x)
    g.line, g.end_line, g.fline, g.fend_line = x.line + d, x.end_line + d, x.fline + d, x.fend_line + d
    if x.guards:
        g.guards = _guards(x.guards, d)
    if st is not _same:
        g.scope, g.assigned_to = st(x.scope), st(x.assigned_to)
    return g


def _ref(r: Ref, d: int, st) -> Ref:
    g = _copy_ref(r)
    g.line = r.line + d
    if st is not _same:
        g.scope = st(r.scope)
    return g


def _func_calls(f: FunctionInfo, c: int) -> FunctionInfo:
    if not f.calls:
        return f
    g = _copy_func(f)
    g.calls = [i + c for i in f.calls]
    return g


def _copier(cls):
    """A function copying a slotted ``cls`` instance attribute by attribute (ten times faster than
    ``copy.copy`` on these)."""
    lines = [f"    g.{k} = o.{k}" for k in cls.__slots__]
    ns = {"_new": cls.__new__, "_cls": cls}
    exec("def copy(o):\n    g = _new(_cls)\n" + "\n".join(lines) + "\n    return g\n", ns)  # noqa: S102 - fixed text
    return ns["copy"]


_copy_func = _copier(FunctionInfo)
_copy_class = _copier(ClassInfo)
_copy_binding = _copier(Binding)
_copy_call = _copier(CallSite)
_copy_ref = _copier(Ref)
_copy_deco = _copier(Decorator)


def _func(f: FunctionInfo, d: int, c: int, st) -> FunctionInfo:
    g = _copy_func(f)
    g.qualname = st(f.qualname)
    g.line, g.end_line, g.deco_line = f.line + d, f.end_line + d, f.deco_line + d
    if f.decorators:
        g.decorators = tuple(_deco(x, d) for x in f.decorators)
    g.calls = [i + c for i in f.calls] if c else f.calls
    if f.locals:
        g.locals = {n: [_binding(b, d, st) for b in bl] for n, bl in f.locals.items()}
    if f.returns:
        g.returns = tuple(st(r) for r in f.returns)
    if f.return_alts:
        g.return_alts = tuple((st(t), _guards(gs, d), ln + d) for t, gs, ln in f.return_alts)
    if f.raise_ifs:
        g.raise_ifs = frozenset(ln + d for ln in f.raise_ifs)
    if f.asserts:
        g.asserts = tuple((ln + d, t) for ln, t in f.asserts)
    if f.attr_sets:
        g.attr_sets = tuple((t, v, ln + d, _guards(gs, d)) for t, v, ln, gs in f.attr_sets)
    if f.inner_defs:
        g.inner_defs = tuple(st(q) for q in f.inner_defs)
    if f.returns_names:
        g.returns_names = tuple(st(q) for q in f.returns_names)
    g.class_name = st(f.class_name)
    return g


def _cls(k: ClassInfo, d: int, st) -> ClassInfo:
    g = _copy_class(k)
    g.qualname = st(k.qualname)
    g.line, g.end_line, g.deco_line = k.line + d, k.end_line + d, k.deco_line + d
    if k.decorators:
        g.decorators = tuple(_deco(x, d) for x in k.decorators)
    g.methods = {n: st(q) for n, q in k.methods.items()}
    g.attrs = {n: _binding(b, d, st) for n, b in k.attrs.items()}
    g.inst_attrs = {n: _binding(b, d, st) for n, b in k.inst_attrs.items()}
    if k.fields:
        g.fields = tuple((n, ann, dflt, ln + d) for n, ann, dflt, ln in k.fields)
    if k.inst_more:
        g.inst_more = {n: tuple(_binding(b, d, st) for b in bs) for n, bs in k.inst_more.items()}
    return g


__all__ = ["IncrementalSummary"]
