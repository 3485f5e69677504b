"""The rule API: what a check author imports (``from .api import Rule, check, rule``).

A rule is a :class:`Rule` registered with :func:`rule` (an id ``AL1xx``, a name, a default severity, a
one-line summary, documentation); a check is a function over a :class:`ModuleContext` registered with
:func:`check` for the rule ids it reports, adding :class:`Finding` objects through ``ctx.add``. A
whole-workspace table that several modules' checks share is registered with :func:`prepare`; a source
line pattern the checks read from the module facts with :func:`fact_prefilter`. Check modules are the
``checks_*`` modules of this package, found by name (:func:`engine.load_checks`); they import this module
and never the engine, which runs them (caching, the dependency recorder, the prefetch worker and the
second checker of a cold CLI run: :mod:`.engine`). Positions follow the core: 1-based lines, 0-based
code-point columns, exclusive end (``Finding.to_json`` gives 1-based columns).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import model as M
from ..pyindex import call_id
from ..walk import Val, ValKind, Walk
from . import facts as F
from .contracts import PROBE_AGENT_FAMILY

SEVERITIES = ("error", "warning", "info")
SEVERITY_RANK = {"error": 0, "warning": 1, "info": 2}


@dataclass
class Finding:
    rule: str
    severity: str
    path: str
    line: int
    col: int  # 0-based code points
    end_line: int
    end_col: int  # 0-based, exclusive
    message: str  # the Problems-panel line: problem and consequence first, the action last (short)
    data: dict = field(default_factory=dict)
    detail: str = ""  # the evidence (hover, `check --format text -v`, SARIF fullDescription of the result)
    # other places of the same cause: [{"path", "line", "col", "end_line", "end_col", "message"}] (LSP
    # relatedInformation, SARIF relatedLocations); one finding per cause, anchored where the fix belongs
    related: list = field(default_factory=list)
    unnecessary: bool = False  # the anchored code never runs on this platform (editor: greyed out)
    id: str = ""  # stable id (rules.ids): rule, file, anchored text and data; a text part for staleness

    def to_json(self, root: str | os.PathLike | None = None) -> dict:
        out = {
            "rule": self.rule, "severity": self.severity, "path": _rel_to(self.path, root),
            "line": self.line, "col": self.col + 1, "end_line": self.end_line, "end_col": self.end_col + 1,
            "message": self.message, "data": self.data,
        }
        if self.id:
            out["id"] = self.id
        if self.detail:
            out["detail"] = self.detail
        if self.related:
            out["related"] = [dict(r, path=_rel_to(r.get("path", ""), root), col=int(r.get("col", 0)) + 1,
                                   end_col=int(r.get("end_col", 0)) + 1) for r in self.related]
        if self.unnecessary:
            out["unnecessary"] = True
        return out

    def sort_key(self):
        return (self.path, self.line, self.col, self.rule, self.message)


_PATH_LOC = re.compile(r"(?<![\w.])(?:[\w.-]+/)+([\w.-]+\.(?:py|pyi|cpp|cc|cu|cuh|h|hpp)(?::\d+)?)")


def short_paths(message: str) -> str:
    """A Problems-panel line names files by their base name (``flashinfer.py:436``); the full paths
    are in the finding's detail, related locations and data."""
    return _PATH_LOC.sub(r"\1", message)


def short_list(items, limit: int, fmt: str = "`{}`") -> str:
    """``a, b, … (3 more)``: items formatted with ``fmt`` and joined while the text stays within ``limit``
    characters (at least one item is shown). The one list-clipping rule of Problems-panel messages."""
    items = list(items)
    out = ""
    for i, x in enumerate(items):
        part = (", " if out else "") + fmt.format(x)
        if out and len(out) + len(part) > limit:
            return out + f", … ({len(items) - i} more)"
        out += part
    return out


def _rel_to(path: str, root: str | os.PathLike | None) -> str:
    if root is None or not path:
        return path
    try:
        rel = os.path.relpath(path, root)
    except ValueError:
        return path
    return path if rel.startswith("..") else Path(rel).as_posix()


@dataclass(frozen=True)
class Rule:
    id: str
    name: str
    severity: str
    summary: str
    docs: str = ""
    tags: tuple = ()

    @property
    def anchor(self) -> str:
        return f"{self.id.lower()}-{self.name}"

    def to_json(self) -> dict:
        return {"id": self.id, "name": self.name, "severity": self.severity, "summary": self.summary,
                "docs": self.docs, "anchor": self.anchor, "tags": list(self.tags)}


RULES: dict[str, Rule] = {}
CHECKS: list[tuple[Callable, tuple]] = []
PREPARES: list[tuple[str, Callable]] = []  # (label, fn(engine)): the shared state every module's checks start from
FACT_PREFILTERS: list[re.Pattern] = []  # lines worth keeping in a module's facts (see facts.collect)


def rule(r: Rule) -> Rule:
    RULES[r.id] = r
    return r


def check(*ids: str):
    """Register a check function producing findings for the given rule ids. A check may be a generator that
    yields (nothing in particular) between its items: the engine can stop it at a yield when the editor has a
    request waiting and go on from there on the next call for the same text (``Engine._drain``). Long loops
    of a check yield per item; a computation they share is written as steps (:func:`run_steps`)."""

    def deco(fn):
        CHECKS.append((fn, ids))
        return fn

    return deco


def run_steps(steps):
    """The value of a computation written as steps (a generator that yields between its items, the stop
    points of a check that drives it with ``value = yield from steps``, and returns its value), run to the
    end by a caller that does not stop."""
    while True:
        try:
            next(steps)
        except StopIteration as e:
            return e.value


def prepare(label: str):
    """Register ``fn(engine)``, computed once per engine before any module is checked (and before the
    cold CLI check forks its second checker, so both inherit it): a whole-workspace table that many
    modules' checks read (the registry pairs, ...). Its failure is a warning named ``label``."""

    def deco(fn):
        PREPARES.append((label, fn))
        return fn

    return deco


def fact_prefilter(pattern: re.Pattern) -> re.Pattern:
    """Register a pattern of source lines a check reads from :class:`facts.AstFacts` (comments with
    claims, ...); facts keep the lines that match any registered pattern (case-insensitive)."""
    FACT_PREFILTERS.append(pattern)
    return pattern


# --------------------------------------------------------------------------- suppression

_IGNORE = re.compile(r"#\s*attnlens\s*:\s*ignore(?:\[([A-Za-z0-9_,\s-]*)\])?")


def suppressed(lines: list[str], f: Finding) -> bool:
    last = max(f.line, min(f.end_line, f.line + 50))
    for ln in range(f.line, last + 1):
        if ln - 1 >= len(lines) or ln < 1:
            break
        text = lines[ln - 1]
        if "attnlens" not in text:
            continue
        for m in _IGNORE.finditer(text):
            ids = m.group(1)
            if ids is None:
                return True
            if f.rule.upper() in {x.strip().upper() for x in ids.split(",") if x.strip()}:
                return True
    return False


# --------------------------------------------------------------------------- per-module context


class ModuleContext:
    """What checks see: one workspace module plus cached helpers. ``ctx.ws.query`` answers the workspace's
    questions; ``ctx.r`` holds the resolver's evaluation primitives (``Query.evaluator``) for checks that walk
    values step by step with a ``Walk`` of their own."""

    def __init__(self, engine: Engine, mod):
        self.engine = engine
        self.ws = engine.ws
        self.r = engine.ws.query.evaluator()
        self.mod = mod
        self.s = mod.summary
        self.path = mod.path
        self._facts: F.AstFacts | None = None
        self._lines: list[str] | None = None
        self.hard_deps: dict | None = None  # set while the checks run (the dependency recorder's)
        self._resolved: dict = {}
        self._traced: dict = {}
        self.findings: list[Finding] = []

    # -- source facts ------------------------------------------------------
    @property
    def facts(self) -> F.AstFacts:
        if self._facts is None:
            self._facts = self.engine.facts_of(self.mod)
        return self._facts

    @property
    def lines(self) -> list[str]:
        """The module's lines (those of its facts; without collecting them when no check needed them yet)."""
        if self._facts is not None:
            return self._facts.lines
        if self._lines is None:
            self._lines = F.split_lines(self.engine.ws.index.source_text(self.path) or "")
        return self._lines

    def note_dep(self, name: str, sha: str) -> None:
        """Record that the findings depend on module ``name`` with content ``sha`` when a check
        reads its text directly instead of through the index."""
        if self.hard_deps is not None:
            self.hard_deps[name] = sha

    # -- resolution ----------------------------------------------------------
    def resolve_call(self, cs) -> Val:
        """The direct callee of a call site (monkey patches applied)."""
        key = call_id(cs)
        hit = self._resolved.get(key)
        if hit is None:
            w = Walk()
            try:
                v = self.r.resolve_dotted(self.mod, cs.scope, cs.func, w, line=cs.line) if cs.func else Val(ValKind.UNKNOWN)
                v = self.engine.apply_patch(v)
            except RecursionError:
                v = Val(ValKind.UNKNOWN, reason="resolution recursed too deeply")
            uncertain = any(h.condition and h.reachable is None for h in w.hops)
            hit = (v, uncertain)
            self._resolved[key] = hit
        return hit[0]

    def uncertain(self, cs) -> bool:
        """Did resolving the callee pick one of several bindings under a guard that the platform
        profile cannot decide (``if FLAG:`` / ``else:`` alternatives)?"""
        self.resolve_call(cs)
        return self._resolved[call_id(cs)][1]

    def trace(self, cs) -> M.Chain | None:
        key = call_id(cs)
        if key not in self._traced:
            try:
                self._traced[key] = self.r.trace_call(self.mod, cs)
            except RecursionError:
                self._traced[key] = None
        return self._traced[key]

    def call_dead(self, cs) -> bool:
        """Is the call site under a guard that is False on this platform?"""
        if not cs.guards:
            return False
        try:
            return self.r.guard_value(self.mod, cs.guards, cs.scope) is False
        except RecursionError:
            return False

    def is_workspace(self, v: Val | None) -> bool:
        return v is not None and v.module is not None and bool(v.module.workspace)

    # -- findings ----------------------------------------------------------
    def add(self, rule_id: str, line: int, col: int, end_line: int, end_col: int, message: str,
            severity: str | None = None, chain: M.Chain | None = None, contract: str | None = None,
            probe: str | None = None, detail: str = "", related: list | None = None, unnecessary: bool = False,
            **extra) -> Finding:
        r = RULES[rule_id]
        data: dict = {"chain": chain.to_json() if chain is not None else None, "contract": contract, "probe": probe}
        if probe:
            data["probe_agent_family"] = PROBE_AGENT_FAMILY.get(probe, probe)
        data.update(extra)
        f = Finding(rule_id, severity or r.severity, self.path, line, col, end_line, end_col, short_paths(message), data,
                    detail=detail, related=list(related or ()), unnecessary=unnecessary)
        self.findings.append(f)
        return f

    def site(self, line: int, col: int, end_line: int, end_col: int, message: str, path: str | None = None) -> dict:
        """A related location (``Finding.related``) in this module, or in ``path``."""
        return {"path": path or self.path, "line": line, "col": col, "end_line": end_line, "end_col": end_col,
                "message": message}

    def add_at_call(self, rule_id: str, cs, message: str, **kw) -> Finding:
        return self.add(rule_id, cs.line, cs.col, cs.end_line, cs.end_col, message, **kw)

    def line_text(self, line: int) -> str:
        return self.lines[line - 1] if 0 < line <= len(self.lines) else ""

    def name_range(self, line: int, name: str, start_col: int = 0) -> tuple[int, int, int, int]:
        """Range of ``name`` on ``line`` (first occurrence at or after start_col)."""
        text = self.line_text(line)
        m = re.search(r"\b" + re.escape(name) + r"\b", text[start_col:]) if name else None
        if m is None:
            stripped = len(text) - len(text.lstrip())
            return line, stripped, line, max(len(text), stripped + 1)
        return line, start_col + m.start(), line, start_col + m.end()

    def def_range(self, f) -> tuple[int, int, int, int]:
        return self.name_range(f.line, f.name, 0)


# content-addressed results, shared by every engine of every workspace (see content_memo): each key names the
# content its value is computed from (a path and that file's content sha), so two workspaces can share a value
# only for the same content; bounded by _CONTENT_MEMO_MAX
_CONTENT_MEMO: dict = {}
_CONTENT_MEMO_MAX = 50_000


def content_memo(key: tuple, fn):
    """Memoise ``fn()`` under a key that names the content it reads (a module's path *and* its
    content sha, a qualname...): such a result outlives the engine of one index generation, so an
    edit re-analyses only what the edited file's new content needs."""
    try:
        return _CONTENT_MEMO[key]
    except KeyError:
        pass
    val = fn()
    if len(_CONTENT_MEMO) >= _CONTENT_MEMO_MAX:
        _CONTENT_MEMO.clear()
    _CONTENT_MEMO[key] = val
    return val


def content_memo_peek(key: tuple):
    """The value :func:`content_memo` holds under ``key``, else None (nothing is computed or stored)."""
    return _CONTENT_MEMO.get(key)


def tree_items(ctx, path: str, sha: str, name: str, fn, shift) -> list:
    """``fn(tree)`` (a list of items) of module ``path`` with content ``sha`` when its text parses without
    error, else ``[]``; memoised by content (:func:`content_memo`). An unsaved buffer is read per
    top-level chunk (``facts.IncrementalFacts.each_chunk``: a keystroke parses only the chunk it
    changed), each chunk's items moved to its lines by ``shift(item, lines down)``."""
    idx = ctx.ws.index

    def compute() -> list:
        text = idx.source_text(path) or ""
        if idx.overlay_text(path) is None:
            tree = _valid_tree(text)
            return [] if tree is None else fn(tree)
        inc = F.buffer_facts(path)
        with inc.lock:
            parts = inc.each_chunk(text, name, fn)
        if parts is None:
            return []
        return [x if not d else shift(x, d) for items, d in parts for x in items]

    return content_memo((name, path, sha), compute)


def _valid_tree(text: str):
    """The module's tree when its text parses without error, else None; the parse is shared with the
    index summary and the expression facts of the same text (``pyindex.parse_source``; not mutated)."""
    from ..pyindex import parse_source

    try:
        parsed = parse_source(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return None if parsed.errors else parsed.tree
