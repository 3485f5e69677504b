"""Plain-text and Markdown renderings of chains (trees) and registry entries."""

from __future__ import annotations

import ast
import functools
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from . import model as M

KIND_LABEL = {
    M.FinalKind.PYTHON_FUNCTION: "Python function",
    M.FinalKind.PYTHON_CLASS: "Python class",
    M.FinalKind.TORCH_OP: "torch custom op",
    M.FinalKind.TRITON_KERNEL: "Triton kernel",
    M.FinalKind.EXTENSION_FUNCTION: "native extension",
    M.FinalKind.DUMMY: "DUMMY (does nothing)",
    M.FinalKind.NOT_INSTALLED: "NOT INSTALLED",
    M.FinalKind.UNRESOLVED: "unresolved",
    M.FinalKind.FORK: "fork",
}

# how a branch / leaf stands on this platform, in plain words
TAKEN = "taken on this platform"
DEAD = "DEAD on this platform"
RUNTIME = "decided at run time"
# ... and a branch that the call being followed decides (what it passes, or its own guards): not the platform
TAKEN_AT_CALL = "taken at this call"
DEAD_AT_CALL = "not taken at this call"


def _loc(path: str | None, line: int | None) -> str:
    if not path:
        return "-"
    return f"{path}:{line}" if line else path


def _reach(v) -> str:
    return reach_words(v)


def reach_words(v: bool | None, decided: str | None = None) -> str:
    """A branch's or leaf's reachability in plain words (``decided``: the call being followed decided it)."""
    if decided and v is not None:
        return TAKEN_AT_CALL if v else DEAD_AT_CALL
    return TAKEN if v is True else DEAD if v is False else RUNTIME


def short_symbol(f: M.Final) -> str:
    """The last name of a leaf's symbol (an op keeps its ``ns::name``)."""
    s = f.symbol or "?"
    if f.kind == M.FinalKind.TORCH_OP or "::" in s:
        return s
    return s.rpartition(".")[2] or s


def conditions_words(conds: list[str]) -> str:
    return M.and_joined(conds) if conds else "always"


# -- the tree, flattened with the hops on each leaf's path ---------------------


@dataclass(frozen=True)
class Cond:
    """A condition on the way to a leaf, where it is decided and how it stands on this platform."""

    text: str
    reachable: bool | None
    path: str | None
    line: int | None
    decided: str | None = None  # what the call being followed fixed that decided it (model.Branch.decided)
    fork: tuple | None = None  # (path, line, symbol) of the fork whose branch it is; None for a hop's guard
    raises: bool = False  # the branch is dead because the function raises before it (model.Branch.raises)
    held: tuple = ()  # operands the call being followed makes true (model.Branch.held): not what is open
    held_span: tuple = ()  # (path, first line, last line) of the function they hold in (model.Branch.held_span)


@dataclass
class LeafPath:
    """A :class:`model.Leaf` plus every hop from the root to it (trunk first)."""

    leaf: M.Leaf
    hops: list[M.Hop]
    branch_conds: tuple = ()  # Cond of each branch taken from the root

    def conds(self) -> list[Cond]:
        """The branch conditions from the root, then the guards of the hops on the way (once each; a text that
        stands differently at two places is two conditions: the caller's run-time `not (residual is None)` and the
        callee's same text, decided by the call)."""
        out: dict[tuple, Cond] = {}
        for c in self.branch_conds:
            out.setdefault((c.text, c.reachable), c)
        spans = [c for c in self.branch_conds if c.held]
        for h in self.hops:
            if h.condition:
                held = tuple(x for c in spans if _in_span(h, c.held_span) for x in c.held)
                out.setdefault((h.condition, h.reachable), Cond(h.condition, h.reachable, h.path or None, h.line or None, held=held))
        return list(out.values())

    @property
    def final(self) -> M.Final:
        return self.leaf.final

    def conditions(self) -> list[str]:
        """The branch conditions from the root, then the guards of hops on the way that are not
        known to hold (a runtime or dead guard on the trunk explains a runtime or dead leaf)."""
        out = list(self.leaf.conditions)
        for h in self.hops:
            if h.condition and h.reachable is not True and h.condition not in out:
                out.append(h.condition)
        return out

    def binding_import(self) -> M.Hop | None:
        """The last import statement hop on the way (the one that binds a not-installed name)."""
        for h in reversed(self.hops):
            if h.kind in M.IMPORT_HOP_KINDS and h.path and h.line:  # (where a not-installed leaf is "defined")
                return h
        return None


_LEAF_PATHS: dict[int, tuple] = {}  # id(chain) -> (chain, its leaf paths): the renderers ask several times


def leaf_paths(chain: M.Chain) -> list[LeafPath]:
    """``chain.leaves()`` in the same (depth-first) order, each with the hops and branch conditions on its path
    (memoised for the last few chains: a hover, its sections and the lens ask for the same tree)."""
    hit = _LEAF_PATHS.get(id(chain))
    if hit is not None and hit[0] is chain:
        return hit[1]
    out = _leaf_paths(chain)
    if len(_LEAF_PATHS) >= 512:
        _LEAF_PATHS.clear()
    _LEAF_PATHS[id(chain)] = (chain, out)
    return out


def _leaf_paths(chain: M.Chain) -> list[LeafPath]:
    walks: list[tuple[list[M.Hop], tuple]] = []

    def walk(c: M.Chain, hops: list[M.Hop], conds: tuple) -> None:
        hops = hops + list(c.hops)
        if c.final.fork is None:
            walks.append((hops, conds))
            return
        for b in c.final.fork.branches:
            # (a branch the call decided counts even without a condition of its own: "always", but not at this call)
            fk = c.final.fork
            more = (Cond(b.condition or "", b.reachable, b.path, b.line, b.decided, (fk.path, fk.line, fk.symbol), b.raises,
                         b.held, b.held_span),) \
                if b.condition or b.decided else ()
            walk(b.chain, hops, conds + more)

    walk(chain, [], ())
    leaves = chain.leaves()
    if len(leaves) != len(walks):  # pragma: no cover - both walk the same tree
        walks = [(list(chain.hops), ())] * len(leaves)
    return [LeafPath(lf, hs, cs) for lf, (hs, cs) in zip(leaves, walks)]


def leaf_summary(lf: M.Leaf, conditions: list[str] | None = None) -> str:
    """One plain line: kind, short symbol, file:line, condition path, reachability."""
    f = lf.final
    extra = f"  ({f.reason})" if f.kind in (M.FinalKind.UNRESOLVED, M.FinalKind.NOT_INSTALLED) and f.reason else ""
    conds = lf.conditions if conditions is None else conditions
    return (f"{f.kind} {short_symbol(f)} @ {_loc(f.path, f.line)}  if {conditions_words(conds)}"
            f" -> {reach_words(lf.reachable, 'call' if lf.dead_at_call else None)}{extra}")


def site_leaves_text(chain: M.Chain) -> str:
    """``1 leaf: kind symbol`` or ``N leaves: kind (dead), kind`` for census lines."""
    leaves = chain.leaves()
    if len(leaves) == 1:
        f = leaves[0].final
        r = leaves[0].reachable
        dead = " (dead)" if r is False else " (runtime)" if r is None else ""
        extra = f"  ({f.reason})" if f.kind == M.FinalKind.UNRESOLVED and f.reason else ""
        return f"1 leaf: {f.kind} {f.symbol}{dead}{extra}"
    parts = []
    for lf in leaves:
        mark = " (dead)" if lf.reachable is False else " (runtime)" if lf.reachable is None else ""
        parts.append(f"{lf.final.kind}{mark}")
    trunc = " (truncated)" if chain.truncated() else ""
    return f"{len(leaves)} leaves: {', '.join(parts)}{trunc}"


# -- the verdict: what runs, one line per leaf that can run ------------------------------------

# a leaf's kind in one or two words (verdict lines, link titles)
KIND_TAG = {
    M.FinalKind.PYTHON_FUNCTION: "Python", M.FinalKind.PYTHON_CLASS: "class", M.FinalKind.TORCH_OP: "torch op",
    M.FinalKind.TRITON_KERNEL: "Triton", M.FinalKind.EXTENSION_FUNCTION: "extension", M.FinalKind.DUMMY: "dummy",
    M.FinalKind.NOT_INSTALLED: "not installed here", M.FinalKind.UNRESOLVED: "unresolved", M.FinalKind.FORK: "fork",
}
# a leaf's kind in plain words (link titles, the folded chain)
KIND_WORDS = {
    M.FinalKind.PYTHON_FUNCTION: "Python function", M.FinalKind.PYTHON_CLASS: "Python class", M.FinalKind.TORCH_OP: "torch op",
    M.FinalKind.TRITON_KERNEL: "Triton kernel", M.FinalKind.EXTENSION_FUNCTION: "native extension function",
    M.FinalKind.DUMMY: "dummy", M.FinalKind.NOT_INSTALLED: "not installed", M.FinalKind.UNRESOLVED: "unresolved", M.FinalKind.FORK: "fork",
}
# a hop's kind in plain words (the folded chain, the full tree)
HOP_WORDS = {
    M.HopKind.CALL: "call", M.HopKind.IMPORT: "import", M.HopKind.CONDITIONAL_IMPORT: "import", M.HopKind.LAZY_IMPORT: "lazy import",
    M.HopKind.DYNAMIC_IMPORT: "importlib", M.HopKind.REEXPORT: "re-export", M.HopKind.ALIAS: "alias", M.HopKind.WRAPPER: "wrapper",
    M.HopKind.DECORATOR: "decorator", M.HopKind.AUTOGRAD_APPLY: "autograd", M.HopKind.PATCH: "patched",
    M.HopKind.TORCH_OP: "torch dispatcher", M.HopKind.OP_REGISTRATION: "registration", M.HopKind.DEFINITION: "def",
    M.HopKind.TRITON_LAUNCH: "launch", M.HopKind.EXTENSION: "extension", M.HopKind.PLATFORM: "platform",
    M.HopKind.SELECTION: "never selected", M.HopKind.REGISTRY: "registry", M.HopKind.DUMMY: "dummy",
    M.HopKind.NOT_INSTALLED: "not installed", M.HopKind.UNRESOLVED: "unresolved",
}
MAX_RUNS = 5  # verdict lines of leaves that can run before "… and N more"
MAX_DEAD = 3  # leaves named in the "not taken on this platform" line


@dataclass
class Defaults:
    """What the platform's default configuration (no environment flag set) decides:
    ``condition(text, path, line)`` evaluates a guard with the flags at their defaults; ``provider_for(ns)`` is
    the kernel module loaded by default that holds torch-op namespace ``ns`` (``envflags.DefaultProvider``, or
    None). ``Query.platform_defaults()`` gives the real one (one per workspace); tests build this one by hand."""

    condition: object = None  # Callable[[str, str | None, int | None], bool | None]
    provider_for: object = None  # Callable[[str], DefaultProvider | None]
    platform_fact: object = None  # Callable[[str, str | None, int | None], bool | None]: the platform alone


@dataclass(frozen=True)
class LeafName:
    short: str  # the name a verdict shows
    full: str  # the full name (a link's title)
    path: str | None  # the leaf's definition; for a missing package, the import that names it
    line: int | None


def _last(name: str) -> str:
    for sep in ("::", "."):
        if sep in name:
            name = name.rpartition(sep)[2] or name
    return name or "?"


def leaf_name(lp: LeafPath) -> LeafName:
    """What a leaf is called where it runs: a torch op by the function its registration binds (the C++
    or Python kernel), a missing package by the name imported from it, others by their last name."""
    f = lp.final
    if f.kind == M.FinalKind.TORCH_OP:
        bound = next((h for h in reversed(lp.hops) if h.kind == M.HopKind.DEFINITION and h.path and h.line
                      and h.detail.startswith("C++")), None)
        if bound is not None:
            return LeafName(_last(bound.symbol), f"{f.symbol} → {bound.symbol}", bound.path, bound.line)
        reg = next((r for r in f.registrations if r.function and r.function_path and r.kind in ("cpp_impl", "python")), None)
        if reg is not None:
            return LeafName(_last(reg.function), f"{f.symbol} → {reg.function}", reg.function_path, reg.function_line)
        return LeafName(_last(f.symbol), f.symbol, f.path, f.line)
    if f.kind == M.FinalKind.NOT_INSTALLED:
        hop = next((h for h in reversed(lp.hops) if h.kind == M.HopKind.NOT_INSTALLED and h.symbol), None)
        full = hop.symbol if hop is not None else f.symbol
        imp = lp.binding_import() if not f.path else None
        where = (imp.path, imp.line) if imp is not None else (f.path, f.line)
        return LeafName(_last(full), full, *where)
    parts = (f.symbol or "").split(".")
    if f.kind in (M.FinalKind.PYTHON_FUNCTION, M.FinalKind.DUMMY) and len(parts) >= 2 and parts[-2].lstrip("_")[:1].isupper():
        return LeafName(f"{parts[-2]}.{parts[-1]}", f.symbol, f.path, f.line)  # a method: with its class
    return LeafName(_last(f.symbol), f.symbol, f.path, f.line)


@dataclass
class Verdict:
    """One line of the verdict: a leaf (or several paths to the same leaf) and how it stands here."""

    name: LeafName
    lp: LeafPath
    reachable: bool | None
    runtime: list  # Cond decided at run time on the way
    by_default: bool | None = None  # the runtime conditions with no environment flag set
    # where those are not decided with no flag set but some of them hold then: the others (what decides it by default)
    default_when: tuple = ()
    paths: int = 1
    shared: tuple = ()  # runtime conditions every leaf that can run has (said once, after the verdict lines)
    common: list = field(default_factory=list)  # the runtime conditions every path to this leaf has
    path_texts: list = field(default_factory=list)  # the runtime conditions of each path to it (texts)
    # the tree hit its bounds: a cut path may reach this leaf under other conditions (its conditions, and "not taken",
    # hold on the listed paths; "taken" holds whatever was cut)
    cut: bool = False

    @property
    def own(self) -> list:
        """The runtime conditions of this leaf that every path to it has and not every other leaf shares."""
        return [c for c in self.common if c.text not in {x.text for x in self.shared}]

    @property
    def final(self) -> M.Final:
        return self.lp.final


# `"vllm_c" in kernel_config.ir_op_priority.rms_norm`: a provider in an IR op's priority list (envflags decides it
# with no --kernel-config from the platform's default priority)
_IR_LISTED = re.compile(r"\sin\s+[\w.]*\bir_op_priority\.\w+$")


def verdicts(chain: M.Chain, defaults: Defaults | None = None) -> tuple[list[Verdict], list[Verdict]]:
    """(leaves that can run, leaves that cannot), one Verdict per distinct leaf, depth-first order."""
    live: dict[tuple, Verdict] = {}
    dead: dict[tuple, Verdict] = {}
    cond_of = defaults.condition if defaults is not None else None
    fact_of = _fact_of(defaults)
    def default_of(runtime: list) -> tuple:
        """(the runtime conditions with no flag set: True / False / None, the operands left to decide when some
        hold then and the rest are not decided)"""
        if not runtime or cond_of is None:
            return None, ()
        vals = [cond_of(c.text, c.path, c.line) for c in runtime]
        if any(x is False for x in vals):
            return False, ()
        if all(x is True for x in vals):
            return True, ()
        # what is left to decide is said only of an IR op provider the default priority lists first of the op's
        # providers (the rest is its argument check): of any leaf, the conditions left once the defaults decided
        # some were most of them again
        listed = [(p, c) for c in runtime for p in M.conjuncts(c.text) if _IR_LISTED.search(p)]
        if not any(cond_of(p, c.path, c.line) is True for p, c in listed):
            return None, ()
        parts = [(p, cond_of(p, c.path, c.line)) for c in runtime for p in M.conjuncts(c.text)]
        return None, tuple(p for p, x in parts if x is not True)

    for lp in leaf_paths(chain):
        nm = leaf_name(lp)
        r = lp.leaf.reachable
        # (a leaf not taken on this platform on one path and only at this call on another is said both ways)
        key = (lp.final.kind, nm.full, nm.path, nm.line, r is False and lp.leaf.dead_at_call)
        table = dead if r is False else live
        runtime = _runtime_parts([c for c in lp.conds() if c.reachable is None], fact_of) if r is None else []
        if key in table:
            v = table[key]
            v.paths += 1
            if r is True and v.reachable is not True:
                v.reachable, v.runtime, v.common, v.by_default, v.default_when = True, [], [], None, ()
            if v.reachable is None:
                # a condition only some paths to the leaf have is not one the leaf needs (`if w: self.attn = A(...)
                # else: self.attn = B(...)`, both running one inherited `forward`); taken by default when any path is
                theirs = {c.text for c in runtime}
                v.common = [c for c in v.common if c.text in theirs]
                v.path_texts.append(frozenset((c.text, c.fork) for c in runtime))
                d, when = default_of(runtime)
                v.by_default = True if True in (d, v.by_default) else False if d is False and v.by_default is False else None
                v.default_when = v.default_when if v.by_default is None and when == v.default_when else ()
            continue
        d, when = default_of(runtime)
        table[key] = Verdict(nm, lp, r, runtime, d, when, common=list(runtime),
                             path_texts=[frozenset((c.text, c.fork) for c in runtime)])
    for v in live.values():
        if v.reachable is None and v.paths > 1 and not v.common and _complementary_paths(v.path_texts):
            # (reached under `enabled` on one path and `not enabled` on another: whichever holds, it runs)
            v.reachable, v.runtime, v.by_default, v.default_when = True, [], None, ()
    if chain.truncated():
        live_cut = chain.truncated_live()  # (cut only inside paths not taken: what runs is complete)
        for v in live.values():
            v.cut = live_cut
        for v in dead.values():
            v.cut = True
    lv = list(live.values())
    # a leaf that runs on one path and not on another is said once, where it runs (the tree keeps the other path)
    running = {(v.final.kind, v.name.full) for v in lv}
    dead = {k: v for k, v in dead.items() if (v.final.kind, v.name.full) not in running}
    if len(lv) > 1:  # the trunk's guards, on every line, would hide what tells the leaves apart
        need = [{c.text for c in v.common} for v in lv]
        common = [c for c in lv[0].runtime if all(c.text in n for n in need)]
        for v in lv:
            v.shared = tuple(common)
    return lv, list(dead.values())


def _complementary_paths(paths: list) -> bool:
    """Do two of these paths need exactly one condition each, the branches of one fork whose conditions negate
    each other (an `if` and its `else`: one of them is always taken)? ``paths``: sets of (text, fork)."""
    single = {next(iter(p)) for p in paths if len(p) == 1}
    return any(fk is not None and (_double_negation(f"not ({t})"), fk) in single for t, fk in single)


def _fact_of(defaults):
    return getattr(defaults, "platform_fact", None) if defaults is not None else None


def _runtime_parts(conds: list, fact_of) -> list:
    """The run-time conditions of a leaf as a verdict says them: each without the top-level ``and`` operands the
    platform alone makes true (``not (current_platform.is_rocm())`` of a CustomOp's dispatch chain,
    decided here), ``not (not x)`` said as ``x``, and each operand once (``is_last_rank`` checked twice on the
    way). ``fact_of``: :meth:`envflags.PlatformDefaults.platform_fact`; without it, the conditions as they are."""
    if fact_of is None:
        return conds
    out, seen = [], set()
    for c in conds:
        parts = [p.strip() for p in M.conjuncts(c.text)]
        kept = []
        for part in parts:
            if part in c.held:
                continue  # (true at this call)
            part = _double_negation(_negation_open(part, lambda t: fact_of(t, c.path, c.line)))
            if not part or part in seen or fact_of(part, c.path, c.line) is True:
                continue
            seen.add(part)
            kept.append(part)
        if kept == parts:
            out.append(c)
        elif kept:
            out.append(Cond(M.and_joined(kept), c.reachable, c.path, c.line, c.decided, c.fork))
    return out or conds


def _negation_open(text: str, fact) -> str:
    """``not (a and b and c)`` without the operands the platform alone decides (``fact(operand)``): an operand made
    true is dropped (``not (b and c)``); one made false makes the whole text true (said as ""). Likewise ``not (a or
    b)`` without an operand made false. Other texts, and a negation with nothing decided, as they are: vLLM-MetaX's
    ``merge_attn_states`` Triton arm was said to run "by not (current_platform.is_out_of_tree() and
    supported_dtypes(prefix_output) and ...)" although the platform is out of tree."""
    if not text.startswith("not (") or (" and " not in text and " or " not in text):
        return text
    inner = _negated_boolop(text)
    if inner is None:
        return text
    is_and, ops = inner
    kept = []
    for op in ops:
        v = fact(op)
        if v is (not is_and):
            return "" if is_and else text  # (`not (.. and False ..)` is true; `not (.. or True ..)` is false: kept)
        if v is None:
            kept.append(op)
    if len(kept) == len(ops):
        return text
    if not kept:
        return text  # (every operand decided: the platform decides the whole, which the caller asks next)
    joined = M.and_joined(kept) if is_and else M.or_joined(kept)
    return f"not ({joined})"


@functools.lru_cache(maxsize=4096)
def _negated_boolop(text: str) -> tuple | None:
    """(is an ``and``, its operands as written) of ``not (x and y ...)`` / ``not (x or y ...)``; None otherwise."""
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return None
    inner = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else None
    if not isinstance(inner, ast.BoolOp):
        return None
    ops = tuple((ast.get_source_segment(text, v) or "").strip() for v in inner.values)
    if not all(ops):
        return None
    return isinstance(inner.op, ast.And), ops


@functools.lru_cache(maxsize=4096)
def _double_negation(text: str) -> str:
    """``not (not x)`` -> ``x``; ``not (x is None)`` -> ``x is not None`` (and the other way round), so that one
    condition written two ways is said once."""
    if not text.startswith("not ("):
        return text
    try:
        node = ast.parse(text, mode="eval").body
    except (SyntaxError, ValueError):
        return text
    inner = node.operand if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not) else None
    if isinstance(inner, ast.UnaryOp) and isinstance(inner.op, ast.Not):
        return (ast.get_source_segment(text, inner.operand) or text).strip()
    if isinstance(inner, ast.Compare) and len(inner.ops) == 1 and isinstance(inner.ops[0], (ast.Is, ast.IsNot)) \
            and isinstance(inner.comparators[0], ast.Constant) and inner.comparators[0].value is None:
        left = (ast.get_source_segment(text, inner.left) or "").strip()
        if not left:
            return text
        if not isinstance(inner.left, (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)):
            left = f"({left})"  # (`(a or b) is None`, `(x := f()) is None` keep their brackets)
        return f"{left} is {'not ' if isinstance(inner.ops[0], ast.Is) else ''}None"
    return text


def shared_conditions(live: list[Verdict]) -> list:
    return list(live[0].shared) if live else []


def has_kernel_story(chain: M.Chain) -> bool:
    """Is there anything kernel-related to say: a leaf that is a kernel, an op, a dummy or a missing package
    (dead ones count: the code the platform no longer takes), or a torch op / patch on the way?"""
    for lp in leaf_paths(chain):
        if lp.final.kind in M.RUNTIME_LEAF_KINDS or any(h.kind in (M.HopKind.TORCH_OP, M.HopKind.PATCH) for h in lp.hops):
            return True
    return False


def unreadable_code(chain: M.Chain) -> bool:
    """Does a leaf stop because a file could not be read (a permission, an I/O error)? Then the user must be told,
    whatever else the chain has to say."""
    return any(lp.final.kind == M.FinalKind.UNRESOLVED and "cannot read" in (lp.final.reason or "") for lp in leaf_paths(chain))


def _dead_reason(lp: LeafPath, fact_of=None) -> tuple[str, str, str]:
    """(kind, text, what the call fixed) of the first thing on the way that is false: a selection, a condition the
    platform decides, or a branch the call being followed decided (kind "call", with ``Branch.decided``). With
    ``fact_of`` (:meth:`envflags.PlatformDefaults.platform_fact`), a condition the platform decides is said by its
    ``and`` operands that are false here (``current_platform.is_rocm()``, not the dispatch chain before it)."""
    for h in lp.hops:
        if h.kind == M.HopKind.SELECTION and h.reachable is False:
            return "selection", h.detail.removeprefix("never selected on this platform: "), ""
    conds = lp.conds()
    for c in conds:
        if c.reachable is False and not c.decided:
            # (the platform's reason first: the leaf is dead here whatever a call passes)
            return "condition", _false_parts(c, fact_of), ""
    for c in conds:
        if c.reachable is False:
            return "call", c.text, c.decided
    return "", "", ""


def _false_here(dead: list, defaults, code=lambda s: s, most: int = 3) -> str:
    """``X is false here; Y is false here``: the conditions the platform makes false that rule out the leaves
    ``dead`` (each once, in order; at most ``most``, then "…"): a function that runs without its kernels, which two
    flags rule out, names both (where the call itself is not made, its own guard alone says why)."""
    out: list = []
    for v in dead:
        kind, why, _by = _dead_reason(v.lp, _fact_of(defaults))
        if kind == "condition" and why and why not in out:
            out.append(why)
    return "; ".join(f"{code(w)} is false here" for w in out[:most]) + ("; …" if len(out) > most else "")


def _false_parts(c: Cond, fact_of) -> str:
    if fact_of is None:
        return c.text
    false = [p for p in (_double_negation(x.strip()) for x in M.conjuncts(c.text)) if fact_of(p, c.path, c.line) is False]
    return M.and_joined(false) if false else c.text


def _status_words(status: str) -> str:
    return "not installed here" if status == "not installed" else "installed" if status.startswith("installed") else status


_GETENV_TEXT = re.compile(r"""^(?:os\.)?(?:getenv|environ\.get)\(\s*(['"])([^'"]+)\1""")


def _flag_words(fl, code) -> str:
    m = _GETENV_TEXT.match(fl.text)
    if m:
        return f"{code(m.group(2))} is unset"
    from .envflags import UNKNOWN

    val = "unknown" if fl.value is UNKNOWN else repr(fl.value)
    return f"{code(fl.text)} defaults to {val}"


def provider_words(defaults: Defaults | None, live: list, code=lambda s: s) -> str | None:
    """``mcoplib._C (not installed here; mx_envs.USE_PRECOMPILED_KERNEL defaults to True)``: the kernel modules loaded
    by default that hold the namespaces of the torch ops that can run (``live`` verdicts), once each; None when
    none is (a namespace only a flag that is off by default would load)."""
    find = getattr(defaults, "provider_for", None) if defaults is not None else None
    if find is None:
        return None
    spaces = dict.fromkeys(v.final.symbol.partition("::")[0] for v in live
                           if v.final.kind == M.FinalKind.TORCH_OP and v.final.providers and "::" in (v.final.symbol or ""))
    found = [dp for dp in dict.fromkeys(find(ns) for ns in spaces) if dp is not None]
    return "; ".join(f"{code(dp.module)} ({'; '.join([_status_words(dp.status)] + [_flag_words(fl, code) for fl in dp.flags])})"
                     for dp in found) or None


# plain text (the CLI) -----------------------------------------------------------------------------


def _cond_plain(v: Verdict) -> str:
    return _cond(v, _PLAIN)

def _where_plain(v: Verdict) -> str:
    return _where(v, _PLAIN)

def _missing_providers(f: M.Final) -> list[str]:
    """The not-installed packages a torch op with no registration in reach would come from (its ``detail``
    names them: ``provided by `a` or `b` (not installed)``)."""
    if "(not installed)" not in (f.detail or ""):
        return []
    return re.findall(r"`([^`]+)`", f.detail)


def dummy_reason(f: M.Final) -> str:
    """What a dummy does (``only logs and returns None``), without the dummy's name in front."""
    reason = (f.reason or "").strip()
    return reason[len(f.symbol):].strip() if f.symbol and reason.startswith(f.symbol) else reason


def verdict_text(chain: M.Chain, defaults: Defaults | None = None) -> list[str]:
    """The verdict as plain lines (`attnlens trace`): the same lines as the hover's, every leaf listed."""
    live, dead = verdicts(chain, defaults)
    out = [f"Runs: {v.name.short} ({_where_plain(v)}, {_cond_plain(v)})" for v in live]
    common = shared_conditions(live)
    if common:
        out.append("All of them only if " + M.and_joined([c.text for c in common]) + f" ({RUNTIME})")
    if not live:
        out.append(_no_leaf_runs(chain, dead, defaults, _PLAIN))
    pw = provider_words(defaults, live)
    if pw:
        out.append(f"Loaded by default from: {pw}")
    twins = _twins(dead + live)  # (a dead op named like one that runs: its full op)
    for v in dead:
        kind, why, by = _dead_reason(v.lp, _fact_of(defaults))
        out.append(f"Not taken {_where_dead(kind, v.cut)}: {v.name.short} ({_dead_tag(v, twins)}"
                   + (f", never selected" if kind == "selection" else f", if {why}" if why else "")
                   + (f"; decided by {by}" if by else "") + ")")
    if chain.truncated():
        out.append(_truncated_words(chain))
    return out


# (a leaf's conditions are those of the paths that were expanded: a path cut off may reach it under others)
TRUNCATED_WORDS = ("The tree hit its bounds: more leaves and paths exist than are listed; the conditions above, and what is "
                   "not taken, hold on the listed paths.")
TRUNCATED_DEAD_WORDS = ("The tree hit its bounds inside paths that are not taken here: what runs is complete; more of what is "
                        "not taken exists than is listed.")


def _truncated_words(chain: M.Chain) -> str:
    """The verdict's last line for a tree its bounds cut: whether the cut reaches what can run."""
    return TRUNCATED_WORDS if chain.truncated_live() else TRUNCATED_DEAD_WORDS


def _dead_tag(v: Verdict, twins: set) -> str:
    """The kind of a leaf that does not run, and a torch op's full name when another such leaf has the same short
    name (``twins``: several providers' ops are often named alike, `vllm_aiter::rms_norm`, `_C::rms_norm`)."""
    f = v.final
    tag = KIND_TAG.get(f.kind, f.kind)
    return f"{tag} {f.symbol}" if f.kind == M.FinalKind.TORCH_OP and v.name.short in twins and f.symbol != v.name.short else tag


def _twins(vs: list) -> set:
    """The short names that more than one of the verdicts ``vs`` has."""
    seen: set = set()
    out: set = set()
    for v in vs:
        (out if v.name.short in seen else seen).add(v.name.short)
    return out


def _no_leaf_runs(chain: M.Chain, dead: list, defaults, fmt) -> str:
    """The verdict's line when no leaf can run: nothing (why: never selected, decided by the call, a condition false
    here), nothing because the function called raises, or the function's other code (:func:`_own_code_only`)."""
    kind, why, by = _dead_reason(dead[0].lp, _fact_of(defaults)) if dead else ("", "", "")
    runs, raises = _own_code_only(chain, dead, kind)
    where = _where_dead(kind, chain.truncated())
    head = (f"Runs: nothing {where}: {fmt.code(runs)} raises" if raises else
            f"Runs: other code of {fmt.code(runs)} {where}, no kernel or op of its tree" if runs else f"Runs: nothing {where}")
    if kind == "selection":
        return head + (f" ({fmt.never}{fmt.prose(why, 100)})" if why else "")
    if kind == "call":
        return head + f" (decided by {fmt.prose(by, 100)})"
    if why:
        return head + f" ({_false_here(dead, defaults, fmt.code) if runs else fmt.code(why) + ' is false here'})"
    return head


def _own_code_only(chain: M.Chain, dead: list, kind: str) -> tuple[str | None, bool]:
    """(the function that runs at this call although none of its tree's kernels or ops is taken, or None; whether
    it raises instead: every leaf is behind an `if c: raise` of its body that is taken here). The function: the trunk
    ends in a fork of that function's body calls, no hop of the trunk is ruled out (the call is made and reaches the
    function), every leaf is ruled out by a condition inside the tree (not by the backend selection), and the tree
    is whole (a branch cut by the bounds could reach one). Then the function runs its other code, which reaches no
    kernel or op the tree holds (``swiglu_limit_func``'s PyTorch fallback when the call passes no ``topk_ids``):
    "nothing" would be false. (Not "only PyTorch": a call the resolver cannot follow is not in the tree.)"""
    f = chain.final
    if not dead or kind not in ("call", "condition") or f.kind != M.FinalKind.FORK or f.fork is None \
            or f.fork.kind != M.ForkKind.CALLS or not f.symbol:
        return None, False
    if any(h.reachable is False or h.kind == M.HopKind.SELECTION for h in chain.hops):
        return None, False
    if any(not any(c.reachable is False and c.fork is not None for c in v.lp.conds()) for v in dead):
        return None, False  # a leaf ruled out by a guard on the trunk, not by a branch of the tree
    name = _last(f.symbol)
    # (the root's own `if c: raise`: a branch of its fork, where the root raises)
    root = (f.fork.path, f.fork.line, f.fork.symbol)
    if all(any(c.reachable is False and c.raises and c.fork == root for c in v.lp.conds()) for v in dead):
        return name, True
    return (None if chain.truncated() else name), False


def _where_dead(kind: str, cut: bool = False) -> str:
    """Where a leaf is not taken: on this platform, or at this call (what the call being followed passes, or its own
    guards, decided the branch: the same code can run from another call); in a tree cut by its bounds, on the listed
    paths (a cut path may reach it)."""
    return ("at this call" if kind == "call" else "on this platform") + (f" {LISTED}" if cut else "")


LISTED = "on the listed paths"  # (a tree cut by its bounds: what a verdict line says holds where the tree was expanded)


# Markdown (the hover) ------------------------------------------------------------------------------


def md_link(label: str, target: str, title: str | None = None) -> str:
    """``[label](target "title")`` with the label escaped, the target safe for Markdown and the title quoted."""
    target = target.replace("(", "%28").replace(")", "%29").replace(" ", "%20")
    t = ""
    if title:
        t = ' "' + title.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ") + '"'
    return f"[{md_escape(label)}]({target}{t})"


def _loc_md(path: str | None, line: int | None, link, title: str | None = None) -> str:
    if not path:
        return ""
    label = f"{os.path.basename(path)}:{line}" if line else os.path.basename(path)
    return md_link(label, link(path, line or 1), title)


def _short_text(text: str | None, n: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _cond_md(v: Verdict) -> str:
    return _cond(v, _MarkdownFormat(None))


def _cond(v: Verdict, fmt) -> str:
    """How a leaf stands on this platform: taken, or decided at run time by its own conditions (the hover shows
    one, cut to 90 characters; the CLI all), and what the default configuration does."""
    if v.reachable is True:
        text = TAKEN
    elif v.own:
        shown = v.own if fmt.conditions is None else v.own[:fmt.conditions]
        more = len(v.own) - len(shown)
        words = [fmt.code(fmt.cut(c.text, 90)) for c in shown]
        if len(words) > 1:  # (`x or y` among others: in parentheses)
            words = [f"({x})" if M.loose_condition(c.text) else x for x, c in zip(words, shown)]
        text = f"{RUNTIME} by " + " and ".join(words) \
            + (f" and {more} more" if more else "")
    else:
        text = RUNTIME
    text += {True: "; taken by default", False: "; not taken by default"}.get(v.by_default, "")
    when = _default_when(v)
    if when:
        text += "; taken by default when " + " and ".join(
            fmt.code(fmt.cut(t, 90)) if len(when) == 1 or not M.loose_condition(t) else f"({fmt.code(fmt.cut(t, 90))})"
            for t in when)
    text += f"; {v.paths} paths" if v.paths > 1 else ""
    return text + (f", {LISTED}" if v.cut and v.reachable is not True else "")

def _default_when(v: Verdict) -> list:
    """What decides a leaf with no flag set (``Verdict.default_when``), less the conditions every leaf shares (said
    once, after the verdict lines)."""
    if not v.default_when or v.by_default is not None or v.reachable is True:
        return []
    shared = {p for c in v.shared for p in M.conjuncts(c.text)}
    return [t for t in v.default_when if t not in shared]


def _where_md(v: Verdict, link) -> str:
    return _where(v, _MarkdownFormat(link))


class _PlainFormat:
    """How :func:`_where` and :func:`_cond` write a name, a prose text and a location in plain text (`attnlens
    trace`): everything in full."""

    conditions: int | None = None  # conditions shown per leaf (None: all)
    never = ""  # before why a leaf is never selected (plain text says the reason alone)

    def code(self, text: str) -> str:
        return text

    def cut(self, text: str, n: int) -> str:
        return text

    def prose(self, text: str | None, n: int) -> str:
        return text or ""

    def loc(self, path: str | None, line: int | None, title: str) -> str:
        return _loc(path, line) if path else ""


class _MarkdownFormat(_PlainFormat):
    """The same in Markdown (the hover): code spans, escaped prose cut to ``n`` characters, file:line links."""

    conditions = 1  # one condition per line (the hover is not the place for every guard: Copy as Markdown)
    never = "never selected: "

    def __init__(self, link):
        self.link = link

    def cut(self, text: str, n: int) -> str:
        return _short_text(text, n)

    def code(self, text: str) -> str:
        return md_code(text)

    def prose(self, text: str | None, n: int) -> str:
        return md_escape(_short_text(text, n))

    def loc(self, path: str | None, line: int | None, title: str) -> str:
        return _loc_md(path, line, self.link, title)


_PLAIN = _PlainFormat()


def _where(v: Verdict, fmt: _PlainFormat) -> str:
    """Where a leaf is, in the verdict: its kind, the op it is reached through, its file:line, what it is."""
    f, nm = v.final, v.name
    loc = fmt.loc(nm.path, nm.line, f"{KIND_WORDS.get(f.kind, f.kind)}: {nm.full}")
    if f.kind == M.FinalKind.NOT_INSTALLED:
        return f"not installed here: {fmt.code(f.package or f.symbol)}" + (f", imported at {loc}" if loc else "")
    if f.kind == M.FinalKind.UNRESOLVED:
        return f"unresolved: {fmt.prose(f.reason or '?', 80)}" + (f", {loc}" if loc else "")
    if f.kind == M.FinalKind.TORCH_OP and not f.registrations and (f.detail or f.reason):
        missing = _missing_providers(f)
        if missing:
            more = f" (or {len(missing) - 1} more)" if len(missing) > 1 else ""
            return f"torch op {fmt.code(f.symbol)}, not installed here: {fmt.code(missing[0])}{more}"
        return f"torch op {fmt.code(f.symbol)}: no registration found"
    tag = f"torch op {fmt.code(f.symbol)}" if f.kind == M.FinalKind.TORCH_OP else KIND_TAG.get(f.kind, f.kind)
    parts = [tag] + ([loc] if loc else [])
    if f.kind == M.FinalKind.DUMMY and f.reason:
        parts.append(fmt.prose(dummy_reason(f), 60))
    return ", ".join(parts)

def verdict_markdown(chain: M.Chain, link, defaults: Defaults | None = None, max_runs: int = MAX_RUNS) -> list[str]:
    """The lead of a hover: ``Runs: <leaf> (<where>, <condition on this platform>)`` per leaf that can run
    (at most ``max_runs``, then one line naming the others), the kernel module loaded first by default,
    and one line for the leaves that do not run on this platform."""
    live, dead = verdicts(chain, defaults)
    out = [f"Runs: {md_code(v.name.short)} ({_where_md(v, link)}, {_cond_md(v)})" for v in live[:max_runs]]
    if len(live) > max_runs:
        rest = live[max_runs:]
        names = ", ".join(md_code(v.name.short) for v in rest[:6]) + (", …" if len(rest) > 6 else "")
        out.append(f"… and {len(rest)} more that can run: {names}")
    common = shared_conditions(live)
    if common:
        more = f" and {len(common) - 2} more" if len(common) > 2 else ""
        out.append("All of them only if " + " and ".join(md_code(_short_text(c.text, 90)) for c in common[:2])
                   + f"{more} ({RUNTIME})")
    if not live:
        out.append(_no_leaf_runs(chain, dead, defaults, _MarkdownFormat(link)))
    pw = provider_words(defaults, live, md_code)
    if pw:
        out.append(f"Loaded by default from: {pw}")
    if dead and live:
        groups: dict = {}  # on this platform / at this call -> the dead leaves named there
        twins = _twins(dead + live)  # (a dead op named like one that runs: its full op)
        for v in dead:
            kind, why, by = _dead_reason(v.lp, _fact_of(defaults))
            groups.setdefault(_where_dead(kind, v.cut), []).append(
                f"{md_code(v.name.short)} ({md_escape(_dead_tag(v, twins))}"
                + (", never selected" if kind == "selection" else f", if {md_code(_short_text(why, 60))}" if why else "")
                + (f"; decided by {md_escape(_short_text(by, 80))}" if by else "") + ")")
        for where, items in groups.items():
            more = f"; {len(items) - MAX_DEAD} more" if len(items) > MAX_DEAD else ""
            out.append(f"Not taken {where}: {'; '.join(items[:MAX_DEAD])}{more}")
    elif dead:
        names = ", ".join(md_code(v.name.short) for v in dead[:MAX_DEAD])
        more = f" and {len(dead) - MAX_DEAD} more" if len(dead) > MAX_DEAD else ""
        out.append(f"Would run elsewhere: {names}{more}")
    if chain.truncated():
        out.append(f"*{_truncated_words(chain)}*")
    return out


def _hop_step_md(h: M.Hop, link, same_file: bool = False) -> str:
    word = HOP_WORDS.get(h.kind, h.kind.replace("_", " "))
    if h.kind == M.HopKind.OP_REGISTRATION:
        word = "schema" if h.detail.startswith("ops.def") else "impl" if h.detail.startswith("ops.impl") else word
    if not h.path or not h.line:
        return md_escape(word)
    title = f"{h.symbol} — {h.detail}" if h.detail else h.symbol
    where = f":{h.line}" if same_file else f"{os.path.basename(h.path)}:{h.line}"
    return md_link(f"{word} {where}", link(h.path, h.line), _short_text(title, 300))


def chain_folded_markdown(chain: M.Chain, link) -> str:
    """The trunk of the chain on one line (each hop a link), then the first fork in words."""
    steps, prev = [], None
    for h in chain.hops:
        steps.append(_hop_step_md(h, link, same_file=bool(h.path) and h.path == prev))
        prev = h.path or prev
    f = chain.final
    if f.fork is not None:
        fk = f.fork
        n = len(fk.branches)
        taken = sum(1 for b in fk.branches if b.reachable is True)
        later = sum(1 for b in fk.branches if b.reachable is None)
        counts = ", ".join(x for x in (f"{taken} taken here" if taken else "", f"{later} at run time" if later else "",
                                       f"{n - taken - later} not taken" if n - taken - later else "") if x)
        where = _loc_md(fk.path, fk.line, link, fk.symbol)
        decided = f" by {md_code(_short_text(fk.decided_by, 80))}" if fk.decided_by else ""
        steps.append(f"{FORK_WORDS.get(fk.kind, fk.kind)} {where}{decided}: {n} branch{'es' if n != 1 else ''} ({counts})")
    n = len(chain.hops)
    return f"Chain ({n} hop{'s' if n != 1 else ''}): " + " → ".join(steps)


FORK_WORDS = {
    M.ForkKind.CALLS: "chooses among calls", M.ForkKind.IFEXP: "chooses by a conditional expression",
    M.ForkKind.DICT: "chooses by a dict key", M.ForkKind.FACTORY: "chooses by what a factory returns",
    M.ForkKind.RETURNS: "chooses among returns", M.ForkKind.DISPATCH_KEY: "chooses by dispatch key",
    M.ForkKind.SELECTED_BACKEND: "chooses by the selected backend", M.ForkKind.SUBCLASS: "chooses by subclass",
    M.ForkKind.ASSIGNMENTS: "chooses among assignments", M.ForkKind.IR_PROVIDER: "chooses by IR op provider",
}


def signature_markdown(name: str, params, doc: str | None, is_async: bool = False, max_params: int = 12) -> str:
    """A ``def`` line in a Python code block (long parameter lists shortened), then the first docstring line."""
    ps = []
    for p in params[:max_params]:
        star = "*" if p.kind == "vararg" else "**" if p.kind == "kwarg" else ""
        ann = f": {p.annotation}" if p.annotation else ""
        ps.append(f"{star}{p.name}{ann}{(' = …' if ann else '=…') if p.has_default else ''}")
    if len(params) > max_params:
        ps.append(f"… {len(params) - max_params} more")
    sig = f"{'async ' if is_async else ''}def {name}({', '.join(ps)})"
    if len(sig) > 120:  # a long parameter list: the names only
        ps = [p.split(":")[0].split("=")[0].rstrip() + ("=…" if "=" in p else "") for p in ps]
        sig = f"{'async ' if is_async else ''}def {name}({', '.join(ps)})"
    out = f"```python\n{sig}\n```"
    if doc:
        out += f"\n{md_escape(_short_text(doc, 200))}"
    return out


# -- plain text -----------------------------------------------------------------


def _final_text(f: M.Final, pad: str) -> list[str]:
    out = [f"{pad}==> {KIND_LABEL.get(f.kind, f.kind)}: {f.symbol}  @ {_loc(f.path, f.line)}"]
    if f.reason:
        out.append(f"{pad}    reason: {f.reason}")
    if f.schema:
        out.append(f"{pad}    schema: {f.schema}")
    for r in f.registrations:
        extra = f" -> {r.function} @ {_loc(r.function_path, r.function_line)}" if r.function else ""
        cond = f"  [if {r.condition}]" if r.condition else ""
        out.append(f"{pad}    registration: {r.kind} {r.dispatch_key or ''} @ {_loc(r.path, r.line)}{extra}{cond}")
    if f.providers:
        out.append(f"{pad}    provided by: {'; '.join(f.providers)}")
    if f.constexprs:
        out.append(f"{pad}    constexpr: {', '.join(f.constexprs)}")
    return out


def open_condition(text: str | None, path: str | None, line: int | None, fact_of, held: tuple = ()) -> str | None:
    """What of a run-time condition written at ``path:line`` the platform leaves open, said as a verdict says it
    (:func:`_runtime_parts`: without the operands the platform alone decides, ``not (not x)`` as ``x``, nor those
    ``held``: true at the call being followed); None when that is the text itself or nothing is known of the platform."""
    if fact_of is None or not text:
        return None
    kept = _runtime_parts([Cond(text, None, path, line, held=held)], fact_of)
    return kept[0].text if len(kept) == 1 and kept[0].text != text else None


def _by(text: str | None, path: str | None, line: int | None, reach, fact_of, code=str, held: tuple = ()) -> str:
    """`` by X`` after "decided at run time" when the platform (and the call being followed: ``held``) leaves ``X`` of
    ``text`` open, else ''; ``code`` writes ``X`` (Markdown: a code span)."""
    if reach is not None:
        return ""
    left = open_condition(text, path, line, fact_of, held)
    return f" by {code(left)}" if left else ""


def _in_span(h: M.Hop, span: tuple) -> bool:
    """Is hop ``h`` in the function ``span`` (model.Branch.held_span) covers?"""
    return bool(span) and h.path == span[0] and span[1] <= (h.line or 0) <= span[2]


def _held(h: M.Hop, by_call: M.Branch | None) -> tuple:
    """What the call being followed makes true of hop ``h``'s condition (:attr:`model.Branch.held`), when ``h`` is in
    the function the call fixed parameters of (that branch's own call included)."""
    return by_call.held if by_call is not None and _in_span(h, by_call.held_span) else ()


def _node_text(chain: M.Chain, pad: str, out: list[str], by_call: M.Branch | None = None, fact_of=None) -> None:
    """``by_call``: the branch this chain is, when the call being followed decided it (:func:`_hop_reach`);
    ``fact_of``: the platform's facts (a run-time condition says what of it is open)."""
    for i, h in enumerate(chain.hops):
        cond = f"  [if {h.condition} -> {_hop_reach(h, by_call)}{_by(h.condition, h.path, h.line, h.reachable, fact_of, held=_held(h, by_call))}]" \
            if h.condition else ""
        out.append(f"{pad}{i:2d}. {h.kind:<18} {h.symbol}  @ {_loc(h.path, h.line)}{cond}")
        if h.detail:
            out.append(f"{pad}    {'':<18} {h.detail}")
    f = chain.final
    fk = f.fork
    if fk is None:
        out.extend(_final_text(f, pad))
        return
    decided = f", decided by {fk.decided_by}" if fk.decided_by else ""
    out.append(f"{pad}==> fork ({fk.kind}) {fk.symbol} @ {_loc(fk.path, fk.line)}{decided}")
    if f.detail:
        out.append(f"{pad}    {f.detail}")
    for b in fk.branches:
        cond = f"if {b.condition}" if b.condition else "always"
        where = f"  @ {_loc(b.path, b.line)}" if b.path else ""
        by = _by(b.condition, b.path, b.line, b.reachable, fact_of, held=b.held) if b.condition else ""
        out.append(f"{pad}    [{cond} -> {reach_words(b.reachable, b.decided)}{by}] {b.label}{where}")
        _node_text(b.chain, pad + "        ", out, b if (b.decided or b.held) and b.condition else None, fact_of)
    if fk.truncated:
        out.append(f"{pad}    TRUNCATED: {fk.truncated} (more branches exist than are shown)")


def chain_text(chain: M.Chain, defaults: Defaults | None = None) -> str:
    """The verdict (the hover's first lines, in plain text), the chain as an indented tree, then one line per leaf."""
    out: list[str] = verdict_text(chain, defaults) + [""]
    fact_of = _fact_of(defaults)
    _node_text(chain, "", out, fact_of=fact_of)
    out.append(f"    reachable on this platform: {_reach(chain.reachable)}" + ("  (PARTIAL: time budget hit)" if chain.partial else ""))
    lps = leaf_paths(chain)
    live = sum(1 for lp in lps if lp.leaf.reachable is not False)
    out.append(f"leaves: {len(lps)} ({live} can run on this platform)"
               + ("  TRUNCATED: the tree hit its bounds, more leaves exist" if chain.truncated() else ""))
    for lp in lps:
        conds = lp.conditions()
        if lp.leaf.reachable is None and fact_of is not None:
            # (a leaf decided at run time: its conditions as the verdict says them, what the platform decides left out)
            conds = [c.text for c in _runtime_parts(lp.conds(), fact_of) if c.reachable is not True]
        out.append(f"  - {leaf_summary(lp.leaf, conds)}")
    return "\n".join(out)


def _rel(path: str | None, root: Path) -> str:
    if not path:
        return "-"
    try:
        return os.path.relpath(path, root) if path.startswith(str(root)) else path
    except ValueError:
        return path


def backends_table(entries, root: Path) -> str:
    lines = []
    for e in entries:
        lines.append(f"{e.kind}:{e.name}  {e.cls}  ({_rel(e.path, root)}:{e.line})")
        for r in e.registered_at:
            lines.append(f"    registered ({r['form']}) at {_rel(r['path'], root)}:{r['line']}")
        for sel in getattr(e, "selected", None) or []:
            cond = " and ".join(sel["conditions"]) or "always"
            lines.append(f"    selected if {cond} -> {reach_words({M.Reach.LIVE: True, M.Reach.DEAD: False}.get(sel['reachability']))}"
                         f"  ({_rel(sel['path'], root)}:{sel['line']}, {sel['via']})"
                         + (f"  [{sel['reason']}]" if sel.get("reason") else ""))
        for wmsg in getattr(e, "warnings", None) or []:
            lines.append(f"    WARNING: {wmsg}")
        for label, ref in (("impl", e.impl), ("builder", e.builder), ("metadata", e.metadata), ("upstream", e.upstream)):
            if ref is None:
                continue
            note = f"  [{ref.note}]" if ref.note else ""
            lines.append(f"    {label:<9} {ref.cls or '-'}  ({_rel(ref.path, root)}:{ref.line}){note}")
        if e.error:
            lines.append(f"    ERROR: {e.error}")
        if e.call_sites:
            lines.append(f"    kernel call sites: {len(e.call_sites)}")
            for c in e.call_sites:
                dead = "  (dead branch)" if c.chain.reachable is False else ""
                if c.chain.is_tree():
                    lines.append(f"      {_rel(c.path, root)}:{c.line}  {c.call} -> {site_leaves_text(c.chain)}{dead}")
                    for lf in c.chain.leaves():
                        f = lf.final
                        lines.append(f"        - {f.kind} {f.symbol}  if {conditions_words(lf.conditions)}"
                                     f" -> {reach_words(lf.reachable, 'call' if lf.dead_at_call else None)}")
                else:
                    f = c.chain.final
                    lines.append(f"      {_rel(c.path, root)}:{c.line}  {c.call} -> {f.kind} {f.symbol}{dead}")
        lines.append("")
    return "\n".join(lines)


# -- Markdown -------------------------------------------------------------------

_MD_SPECIAL = re.compile(r"([\\`*\[\]<>~])")
_MD_UNDERSCORE = re.compile(r"(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_escape(text: str) -> str:
    """Escape Markdown syntax in plain text (``kernel[grid]``, ``__init__``).

    Underscores inside a word (``merge_attn_states``) cannot start emphasis and stay as they are.
    """
    text = _MD_SPECIAL.sub(r"\\\1", text or "")
    return _MD_UNDERSCORE.sub(lambda m: "\\_", text)


def md_code(text: str) -> str:
    """``text`` as an inline code span, safe for backticks inside."""
    text = text or ""
    if "`" not in text:
        return f"`{text}`"
    n = max(len(m) for m in re.findall(r"`+", text)) + 1
    fence = "`" * n
    return f"{fence} {text} {fence}"


def _final_md_details(f: M.Final, link) -> list[str]:
    out = []
    if f.schema:
        out.append(f"schema: {md_code(f.schema)}")
    if f.registrations:
        regs = []
        for r in f.registrations:
            fn = (f" → {md_code(r.function or '?')} {_loc_md(r.function_path, r.function_line, link)}" if r.function_path
                  else (f" → {md_code(r.function)}" if r.function else ""))
            cond = f" *if* {md_code(r.condition)}" if r.condition else ""
            regs.append(f"{r.kind} {r.dispatch_key or ''} {_loc_md(r.path, r.line, link)}{fn}{cond}")
        out.append("registrations:")
        out.extend(f"- {x}" for x in regs)
    if f.providers:
        out.append("provided by: " + "; ".join(md_escape(p) for p in f.providers))
    if f.kind == M.FinalKind.TRITON_KERNEL:
        out.append(f"parameters: {md_code(', '.join(f.params))}")
        out.append(f"constexpr: {md_code(', '.join(f.constexprs))}" if f.constexprs else "constexpr: none")
    return out


def _hop_reach(h: M.Hop, by_call: M.Branch | None) -> str:
    """A hop's guard in words; ``by_call``: the branch the hop is on, when the call being followed decided it (a hop
    under that branch's own guard says so too: not "on this platform", the same code runs from other calls)."""
    if by_call is not None and h.condition == by_call.condition:
        return reach_words(by_call.reachable, by_call.decided)
    held = _held(h, by_call)
    if held and h.reachable is None and h.condition and all(p.strip() in held for p in M.conjuncts(h.condition)):
        return TAKEN_AT_CALL  # (a guard of that function the call makes true: `pynccl_comm = ...` after `if dim == 0: return`)
    return reach_words(h.reachable)


def _hop_md(h: M.Hop, link, by_call: M.Branch | None = None, fact_of=None) -> str:
    where = _loc_md(h.path, h.line, link)
    word = HOP_WORDS.get(h.kind, h.kind.replace("_", " "))
    cond = f" — *if* {md_code(h.condition)}: {_hop_reach(h, by_call)}{_by(h.condition, h.path, h.line, h.reachable, fact_of, md_code, _held(h, by_call))}" \
        if h.condition else ""
    detail = f" — {md_escape(h.detail)}" if h.detail else ""
    return f"{word} {md_code(h.symbol)} {where}{cond}{detail}"


def _leaf_md(f: M.Final, link) -> str:
    reason = f" — {md_escape(f.reason)}" if f.reason else ""
    return f"⇒ **{KIND_LABEL.get(f.kind, f.kind)}** {md_code(f.symbol)} {_loc_md(f.path, f.line, link)}{reason}".rstrip()


def _fork_md(f: M.Final, link) -> str:
    fk = f.fork
    decided = f" by {md_code(fk.decided_by)}" if fk.decided_by else ""
    return f"⇒ {md_code(fk.symbol)} {FORK_WORDS.get(fk.kind, fk.kind)}{decided} {_loc_md(fk.path, fk.line, link)}".rstrip()


def _branch_head_md(b: M.Branch, link, fact_of=None) -> str:
    cond = f"*if* {md_code(b.condition)}" if b.condition else "*always*"
    where = _loc_md(b.path, b.line, link)
    by = _by(b.condition, b.path, b.line, b.reachable, fact_of, md_code, b.held)
    return f"{cond} — **{reach_words(b.reachable, b.decided)}**{by}: {md_escape(b.label)} {where}".rstrip()


def _branch_md(b: M.Branch, link, pad: str, out: list[str], fact_of=None) -> None:
    head = _branch_head_md(b, link, fact_of)
    if b.reachable is False:
        # folded: the dead branch in one line (what it would have reached)
        lvs = b.chain.leaves()
        what = ", ".join(f"{KIND_LABEL.get(lf.final.kind, lf.final.kind)} {md_code(short_symbol(lf.final))}" for lf in lvs)
        hops = sum(1 for _ in _all_hops(b.chain))
        out.append(f"{pad}- {head} — folded ({hops} hop{'s' if hops != 1 else ''}): would reach {what}")
        return
    out.append(f"{pad}- {head}")
    _subtree_md(b.chain, link, pad + "  ", out, b if (b.decided or b.held) and b.condition else None, fact_of)


def _all_hops(chain: M.Chain):
    yield from chain.hops
    if chain.final.fork is not None:
        for b in chain.final.fork.branches:
            yield from _all_hops(b.chain)


def _subtree_md(chain: M.Chain, link, pad: str, out: list[str], by_call: M.Branch | None = None, fact_of=None) -> None:
    for h in chain.hops:
        out.append(f"{pad}- {_hop_md(h, link, by_call, fact_of)}")
    f = chain.final
    if f.fork is None:
        out.append(f"{pad}- {_leaf_md(f, link)}")
        for d in _final_md_details(f, link):
            out.append(f"{pad}  {d}" if d.startswith("- ") else f"{pad}  - {d}")
        return
    out.append(f"{pad}- {_fork_md(f, link)}")
    for b in f.fork.branches:
        _branch_md(b, link, pad + "  ", out, fact_of)
    if f.fork.truncated:
        out.append(f"{pad}  - *truncated: {md_escape(f.fork.truncated)}*")


def chain_markdown(chain: M.Chain, title: str | None = None, link=None, defaults: Defaults | None = None) -> str:
    """The whole tree in Markdown (Copy as Markdown, the trace document). ``link(path, line)`` builds a link target.

    Leads with the verdict (the hover's first lines), then the trunk's hops and, for a tree, every fork
    and branch (dead branches folded into one line each).
    """
    link = link or (lambda p, l: f"file://{p}#L{l}")
    out = [title] if title else []
    out.extend(line + "  " for line in verdict_markdown(chain, link, defaults, max_runs=10_000))  # hard line breaks
    fact_of = _fact_of(defaults)
    out.append("")
    for i, h in enumerate(chain.hops):
        out.append(f"{i + 1}. {_hop_md(h, link, None, fact_of)}")
    f = chain.final
    if f.fork is None:
        out.append("")
        out.append(_leaf_md(f, link))
        for d in _final_md_details(f, link):
            out.append(d if d.startswith("- ") else f"\n{d}")
    else:
        out.append("")
        out.append(_fork_md(f, link))
        if f.detail:
            out.append(f"\n{md_escape(f.detail)}\n")
        for b in f.fork.branches:
            _branch_md(b, link, "", out, fact_of)
        if f.fork.truncated:
            out.append(f"- *truncated: {md_escape(f.fork.truncated)}*")
    if chain.partial:
        out.append("\n*partial answer: the time budget ran out*")
    return "\n".join(out)
