"""The architecture contract (`.importlinter`, import-linter) holds, and it catches a wrong import."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import REPO

LINT = Path(sys.executable).with_name("lint-imports")
pytestmark = pytest.mark.skipif(not LINT.exists(), reason="import-linter is not installed (pip install import-linter)")


def _lint(server_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(server_dir))
    return subprocess.run([str(LINT), str(REPO / ".importlinter"), "--no-cache"], cwd=server_dir, env=env,
                          capture_output=True, text=True, timeout=300)


def test_contracts_are_kept():
    r = _lint(REPO / "server")
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "9 kept, 0 broken" in r.stdout


def _lint_with_wrong_import(tmp_path, module: str, statement: str) -> subprocess.CompletedProcess:
    """The contract checked on a copy of the package where ``module`` has ``statement`` inside a function."""
    shutil.copytree(REPO / "server" / "attnlens", tmp_path / "attnlens", ignore=shutil.ignore_patterns("__pycache__"))
    src = tmp_path / "attnlens" / module
    src.write_text(src.read_text() + f"\n\ndef _wrong():\n    {statement}  # noqa: F401\n")
    return _lint(tmp_path)


def test_a_core_module_importing_the_lsp_breaks_the_contract(tmp_path):
    r = _lint_with_wrong_import(tmp_path, "resolver.py", "from .lsp import server")
    assert r.returncode != 0
    assert "Core analysis does not import the features above it BROKEN" in r.stdout
    assert "attnlens.resolver -> attnlens.lsp.server" in r.stdout


def test_a_check_importing_the_engine_breaks_the_contract(tmp_path):
    """Checks are written against the rule API (`rules/api.py`); the engine finds and runs them. A check
    that reaches into the engine (a hidden circle: the engine imports the checks) fails the contract."""
    r = _lint_with_wrong_import(tmp_path, "rules/checks_shapes.py", "from .engine import Engine")
    assert r.returncode != 0
    assert "Check modules use the rule API, never the engine that runs them BROKEN" in r.stdout
    assert "attnlens.rules.checks_shapes -> attnlens.rules.engine" in r.stdout


def test_every_check_module_is_found_and_under_the_contract():
    """One mechanism finds the checks (every `checks_*` module of the package), and the contract above
    covers each of them: a new check module that is not listed there fails here."""
    import configparser

    from attnlens.rules.engine import check_modules

    found = {f"attnlens.rules.{m}" for m in check_modules()}
    on_disk = {f"attnlens.rules.{p.stem}" for p in (REPO / "server" / "attnlens" / "rules").glob("checks_*.py")}
    assert found == on_disk and len(found) >= 8
    cfg = configparser.ConfigParser()
    cfg.read(REPO / ".importlinter")
    listed = set(cfg["importlinter:contract:checks-use-the-rule-api"]["source_modules"].split())
    assert found <= listed, sorted(found - listed)


def test_a_helper_importing_the_resolver_breaks_the_contract(tmp_path):
    """The import that used to dodge the circle (`from .resolver import Walk` inside a function of patches.py)
    breaks the contract: the helpers see the resolver through lookup.Lookup only."""
    r = _lint_with_wrong_import(tmp_path, "patches.py", "from .resolver import Walk")
    assert r.returncode != 0
    assert "The walk state and the resolver's helpers do not import the resolver BROKEN" in r.stdout
    assert "attnlens.patches -> attnlens.resolver" in r.stdout
    assert "Core analysis does not import the features above it KEPT" in r.stdout  # (only that contract breaks)


def _used_on_the_resolver(tree) -> set:
    """Names the code reads on the resolver it is given: `self.r.X`, `resolver.X`, `getattr(resolver, "X")`."""
    import ast

    def is_resolver(node) -> bool:
        return (isinstance(node, ast.Name) and node.id == "resolver") or (
            isinstance(node, ast.Attribute) and node.attr == "r" and isinstance(node.value, ast.Name) and node.value.id == "self")

    used = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and is_resolver(node.value):
            used.add(node.attr)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
              and len(node.args) >= 2 and is_resolver(node.args[0]) and isinstance(node.args[1], ast.Constant)):
            used.add(node.args[1].value)
    return used


def test_the_helpers_use_exactly_the_lookup_interface():
    """profile, patches, torchops and envflags read on the resolver only what `lookup.Lookup` lists (and it lists
    nothing they do not read); the Resolver has every member."""
    import ast

    from attnlens.lookup import Lookup
    from attnlens.resolver import Resolver

    members = {n for n in vars(Lookup) if not n.startswith("_")} | set(Lookup.__annotations__)
    used = set()
    for name in ("profile", "patches", "torchops", "envflags"):
        src = (REPO / "server" / "attnlens" / f"{name}.py").read_text(encoding="utf-8")
        used |= _used_on_the_resolver(ast.parse(src))
    assert used == members
    cls = next(n for n in ast.parse((REPO / "server" / "attnlens" / "resolver.py").read_text(encoding="utf-8")).body
               if isinstance(n, ast.ClassDef) and n.name == "Resolver")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    targets = [t for n in ast.walk(init) if isinstance(n, (ast.Assign, ast.AnnAssign))
               for t in (n.targets if isinstance(n, ast.Assign) else [n.target])]
    assigned = {t.attr for t in targets if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}
    missing = sorted(m for m in members if not callable(getattr(Resolver, m, None)) and m not in assigned)
    assert missing == []


def test_the_lsp_importing_the_resolver_breaks_the_query_contract(tmp_path):
    """The editor asks the core through attnlens.query only: a feature module that imports a module behind
    that door fails the `lsp-cli-through-query` contract (and only that one)."""
    r = _lint_with_wrong_import(tmp_path, "lsp/features/hover.py", "from ...resolver import Resolver")
    assert r.returncode != 0
    assert "The editor and the CLI ask the analysis core through attnlens.query only BROKEN" in r.stdout
    assert "attnlens.lsp.features.hover -> attnlens.resolver" in r.stdout
    assert "8 kept, 1 broken" in r.stdout


def test_a_check_importing_the_resolver_breaks_the_query_contract(tmp_path):
    """The rules and the upgrade code ask the core through the query and the rule API: a check that imports
    the resolver fails `rules-upgrade-through-query` (and only that contract)."""
    r = _lint_with_wrong_import(tmp_path, "rules/checks_shapes.py", "from ..resolver import Resolver")
    assert r.returncode != 0
    assert "The rules and the upgrade code ask the analysis core through attnlens.query and" in r.stdout
    assert "attnlens.rules.checks_shapes -> attnlens.resolver" in r.stdout
    assert "8 kept, 1 broken" in r.stdout


# the analysis core: what lies behind attnlens.query (and the query itself)
_CORE = {"model", "pyindex", "pyrecover", "index", "cache", "target", "profile", "resolver", "selection", "customops",
         "patches", "torchops", "cppindex", "elfscan", "registry", "callindex", "envflags", "workspace", "query",
         "render", "gcpolicy"}

# reads of `.resolver` off a workspace that are left outside the core, per file (a ratchet: the count may
# only go down). None is left (issue 12): the rules and the upgrade code ask `ws.query`; the rule API's
# `ModuleContext.r` gets the resolver's evaluation primitives from `Query.evaluator()` (see below).
_RESOLVER_READS_LEFT: dict[str, int] = {}

# who may take the resolver's evaluation primitives from the query (`.evaluator()`), and why
_EVALUATOR_CALLERS = {
    "rules/api.py": "ModuleContext.r: checks that walk values step by step with a Walk of their own",
}


def _outside_the_core():
    import ast

    base = REPO / "server" / "attnlens"
    for py in sorted(base.rglob("*.py")):
        rel = py.relative_to(base)
        if len(rel.parts) == 1 and py.stem in _CORE:
            continue
        yield rel.as_posix(), ast.parse(py.read_text(encoding="utf-8"), str(py))


def _reads_off_a_workspace(tree, attr: str) -> list[int]:
    """Lines where ``<something>.<attr>`` is read and the something is not ``self``/``cls``."""
    import ast

    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == attr
            and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))]


def test_no_module_outside_the_core_reads_the_resolver_off_a_workspace():
    """Issue 12: modules outside the core ask through ``ws.query``; none reads ``ws.resolver`` (an AST scan of
    the package). The language server and the CLI read it nowhere; the rules and the upgrade code only
    where ``_RESOLVER_READS_LEFT`` says (new reads fail here)."""
    over = []
    for rel, tree in _outside_the_core():
        lines = _reads_off_a_workspace(tree, "resolver")
        allowed = 0 if rel.startswith("lsp/") or rel == "cli.py" else _RESOLVER_READS_LEFT.get(rel, 0)
        if len(lines) > allowed:
            over.append(f"{rel}: {len(lines)} reads of .resolver (allowed {allowed}) at lines {lines}")
    assert over == []


def test_only_the_rule_api_takes_the_evaluator():
    """``Query.evaluator()`` hands out the resolver itself: one caller (the rule API's ``ModuleContext``)
    takes it, and a new caller fails here (ask a question of the query instead)."""
    import ast

    callers = {}
    for rel, tree in _outside_the_core():
        n = sum(1 for c in ast.walk(tree) if isinstance(c, ast.Call) and isinstance(c.func, ast.Attribute)
                and c.func.attr == "evaluator")
        if n:
            callers[rel] = n
    assert callers == {rel: 1 for rel in _EVALUATOR_CALLERS}


def test_the_lsp_and_the_cli_read_no_index_off_a_workspace():
    """Documents, modules and the call index go through the query too: no ``ws.index`` / ``a.ws.index`` in
    the language server or the CLI (``.index`` read off anything named ``ws``/``workspace``)."""
    import ast

    found = []
    for rel, tree in _outside_the_core():
        if not (rel.startswith("lsp/") or rel == "cli.py"):
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Attribute) and n.attr in ("index", "resolver"):
                v = n.value
                name = v.id if isinstance(v, ast.Name) else v.attr if isinstance(v, ast.Attribute) else ""
                if name in ("ws", "workspace", "q", "query"):
                    found.append(f"{rel}:{n.lineno} {ast.unparse(n)}")
    assert found == []


# private state of the core that other modules reached into (issue 12); each has a public accessor now
_PRIVATE = {"_overlays": "Index.overlay_text", "_sha_memo": "Index.known_sha / has_known_sha",
            "_path_to_name": "Index.module_name_of", "_cpp_files": "OpRegistry.cpp_files", "_part": "Registry.part",
            "_gen": "Engine.generation"}


def test_no_module_reaches_into_the_cores_private_state():
    """`obj._overlays`, `getattr(obj, "_sha_memo", ...)` and the like outside `self`/`cls` (an AST scan of the
    package): the reach-ins issue 12 lists go through public methods now, and new ones fail here."""
    import ast

    found = []
    for py in sorted((REPO / "server" / "attnlens").rglob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"), str(py))
        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Attribute) and node.attr in _PRIVATE:
                if not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
                    name = node.attr
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr")
                  and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant) and node.args[1].value in _PRIVATE):
                name = node.args[1].value
            if name:
                found.append(f"{py.relative_to(REPO)}:{node.lineno} {name} (use {_PRIVATE[name]})")
    assert found == []


# module-level memos and registries of the package, each with why it may be shared by every workspace of
# the process (issue 12): a value that is a pure function of its key's content (file bytes, a content sha,
# a text, a file's stamp standing for its content), bounded; a registry of declarations made at import; a
# fact of the analyser's own code or of an interpreter. Per-workspace state lives on the workspace
# (its Index, its Engine, `Query.state`) instead: two workspaces in one process share none of it.
_MODULE_CACHES = {
    "index.py:_compiled()": "compiled text-scan patterns, a pure function of the pattern",
    "profile.py:_EP_MEMO": "(root, stamps of pyproject.toml/setup.cfg/setup.py) -> their entry points",
    "profile.py:_GUARDS": "guard text -> parsed expression (bounded)",
    "profile.py:constant_of()": "a literal's text -> its bool/int/str value (lru_cache, 4096)",
    "model.py:loose_condition()": "a condition's text -> does it bind looser than `and` (lru_cache, 4096)",
    "model.py:conjuncts()": "a condition's text -> its top-level `and` operands (lru_cache, 4096)",
    "pyindex.py:_INTS": "int -> one object of that value for the summaries read from the cache (line numbers: a few thousand)",
    "pyindex.py:_parse_memo()": "text -> its tolerant parse or the SyntaxError of a failed recovery (lru_cache, 2)",
    "pyrecover.py:_chunk_memo()": "chunk text -> its tolerant parse at line 1 or the SyntaxError of a failed recovery (lru_cache, 4)",
    "render.py:_LEAF_PATHS": "a chain (identity-checked) -> its leaf paths (bounded)",
    "render.py:_double_negation()": "a condition's text -> the same condition said one way (lru_cache, 4096)",
    "render.py:_negated_boolop()": "a condition's text -> the operands of the `and` / `or` it negates (lru_cache, 4096)",
    "rules/api.py:RULES": "the rules the check modules declare at import",
    "rules/api.py:CHECKS": "the check functions the check modules declare at import",
    "rules/api.py:PREPARES": "the shared preparation steps the check modules declare at import",
    "rules/api.py:FACT_PREFILTERS": "the line patterns the check modules declare at import",
    "rules/api.py:_CONTENT_MEMO": "keys name a path and its content sha (bounded)",
    "rules/contracts.py:_HINTS": "a contract dataclass -> its type hints",
    "rules/contracts.py:_PARSED": "(path, content sha) -> the parsed contracts (bounded)",
    "rules/contracts.py:_SETS": "(root, contract files' stamps) -> the contract set (holds one)",
    "rules/engine.py:_prefilter_of()": "the registered patterns -> one regex (lru_cache, 1)",
    "rules/engine.py:_OVERLAY_FACTS": "(path, buffer text) -> its rule facts, a function of the text (the latest 8)",
    "rules/facts.py:_BUFFERS": "path -> the chunk facts of its latest buffer texts, each keyed by chunk text (8 paths)",
    "rules/engine.py:_rules_code_hash()": "the rules' own code (lru_cache, 1)",
    "rules/engine.py:check_modules()": "the package's check modules (lru_cache, 1)",
    "rules/engine.py:load_checks()": "imports the check modules once (lru_cache, 1)",
    "rules/opvariants.py:_REG_FACTS": "file bytes -> the op names it registers (bounded)",
    "rules/probe_routing.py:_families()": "the probe families' static catalog (lru_cache, 1)",
    "rules/readers.py:_TREES": "(path, mtime) -> parsed tree (bounded)",
    "runtime/environment.py:_MEMO": "an interpreter's key -> its environment record, when the cache is off",
    "runtime/evidence.py:_FOLDER_MEMO": "an evidence folder -> its records, per listing stamp",
    "upgrade/astsyms.py:_HASHES": "an AST node (identity-checked) -> its hash (bounded)",
    "upgrade/fixes.py:_TREES": "path -> (stamp, text, tree) of an upstream file (bounded)",
    "upgrade/scope.py:_glob_re()": "glob text -> regex (lru_cache, 256)",
    "workspace.py:_CODE_STAMP": "the analyser's own code stamp",
    "workspace.py:_REG_SIGS": "summary content sha -> registry signature (bounded)",
    "pyincremental.py:_SHARED": "(chunk text, tail?) -> a chunk fragment an open buffer holds (weak values; a function of the text, checked against the bindings it read)",
    "lsp/features/runtime_actions.py:_family_names()": "the probe families' static catalog (lru_cache, 1)",
}


def _module_level_caches() -> set[str]:
    """``path:NAME`` of every module-level empty container (``{}``, ``[]``, ``dict()``, weak dictionaries ...)
    and ``lru_cache``d function of the package (``path:name()`` for a decorated function)."""
    import ast

    containers = {"dict", "set", "list", "OrderedDict", "defaultdict", "deque", "Counter", "WeakKeyDictionary",
                  "WeakValueDictionary", "WeakSet"}
    decos = {"lru_cache", "cache"}

    def name(f):
        return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None

    def cache_like(v) -> bool:
        if isinstance(v, ast.Dict):
            return not v.keys
        if isinstance(v, (ast.List, ast.Set)):
            return not v.elts
        if isinstance(v, ast.Call):
            if isinstance(v.func, ast.Call):
                return name(v.func.func) in decos  # functools.lru_cache(maxsize=8)(fn)
            return name(v.func) in decos or (name(v.func) in containers and not v.args and not v.keywords)
        return False

    base = REPO / "server" / "attnlens"
    found = set()
    for py in sorted(base.rglob("*.py")):
        rel = py.relative_to(base).as_posix()
        for n in ast.parse(py.read_text(encoding="utf-8"), str(py)).body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and cache_like(n.value):
                for t in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                    if isinstance(t, ast.Name):
                        found.add(f"{rel}:{t.id}")
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
                    name(d.func if isinstance(d, ast.Call) else d) in decos for d in n.decorator_list):
                found.add(f"{rel}:{n.name}()")
    return found


def test_module_level_caches_are_the_allowed_ones():
    """A new module-level memo fails here: per-workspace state goes on the workspace (``Query.state``, the
    Index, the Engine); a memo whose value is a pure function of its key's content may be listed in
    ``_MODULE_CACHES`` with why. Entries that are gone are struck off (the language server's excepted)."""
    found = _module_level_caches()
    assert sorted(found - set(_MODULE_CACHES)) == []
    assert sorted(k for k in set(_MODULE_CACHES) - found if not k.startswith("lsp/")) == []


def test_checks_read_only_the_evaluator_interface_on_ctx_r():
    """What a check reads on the resolver it gets as ``ctx.r`` (or a local bound to it) is a member of
    ``lookup.Evaluator``, the documented face of ``Query.evaluator()``; and the resolver has each member."""
    import ast

    from attnlens.lookup import Evaluator
    from attnlens.resolver import Resolver

    members = {n for c in Evaluator.__mro__ if c.__name__ in ("Evaluator", "Lookup")
               for n in list(vars(c)) + list(getattr(c, "__annotations__", {})) if not n.startswith("_")}
    used: dict[str, list] = {}
    for py in sorted((REPO / "server" / "attnlens" / "rules").glob("*.py")):
        tree = ast.parse(py.read_text(encoding="utf-8"))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            aliases = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign)
                       and isinstance(n.value, ast.Attribute) and n.value.attr == "r"
                       and isinstance(n.value.value, ast.Name) and n.value.value.id == "ctx"
                       for t in n.targets if isinstance(t, ast.Name)}
            for n in ast.walk(fn):
                if not isinstance(n, ast.Attribute):
                    continue
                v = n.value
                on_ctx_r = isinstance(v, ast.Attribute) and v.attr == "r" and isinstance(v.value, ast.Name) and v.value.id == "ctx"
                on_alias = isinstance(v, ast.Name) and v.id in aliases
                if on_ctx_r or on_alias:
                    used.setdefault(n.attr, []).append(f"{py.name}:{n.lineno}")
    assert used, "the scan found no reads at all: it is broken"
    assert {k: v for k, v in used.items() if k not in members} == {}
    assert all(hasattr(Resolver, m) or m in ("index", "profile", "ops", "stdlib", "rebind_cache") for m in members)


def test_central_classes_say_what_is_public():
    """Each central class has a docstring naming its public entry points, and every ``name`` it quotes as a
    member exists on the class (a renamed method makes the docstring fail here)."""
    import re

    from attnlens.index import Index
    from attnlens.profile import PlatformProfile
    from attnlens.query import Query
    from attnlens.registry import Registry
    from attnlens.resolver import Resolver
    from attnlens.rules.engine import Engine
    from attnlens.upgrade.drift import Drift
    from attnlens.workspace import Workspace

    wrong = {}
    for cls in (Resolver, Index, Workspace, PlatformProfile, Registry, Engine, Drift, Query):
        doc = cls.__doc__ or ""
        quoted = set(re.findall(r"``([a-z_][a-z0-9_]*)(?:\(\))?``", doc))
        members = {n for n in quoted if hasattr(cls, n)}
        assert len(members) >= 2 or cls is Query, f"{cls.__name__}: the docstring names no public members"
        # names that are neither members nor instance attributes set in __init__
        init = getattr(cls, "__init__", None)
        src = __import__("inspect").getsource(init) if init is not None and hasattr(init, "__code__") else ""
        missing = sorted(n for n in quoted - members if f"self.{n}" not in src and n not in {"ws", "query"})
        if missing:
            wrong[cls.__name__] = missing
    assert wrong == {}


def test_no_circle_among_the_editor_features():
    """The language server's feature modules import each other without a circle, function-level imports
    included (``diagnostics`` and ``runtime_actions`` used to import each other inside functions)."""
    import ast

    base = REPO / "server" / "attnlens" / "lsp" / "features"
    graph: dict[str, set] = {}
    for py in sorted(base.glob("*.py")):
        deps = set()
        for n in ast.walk(ast.parse(py.read_text(encoding="utf-8"))):
            if isinstance(n, ast.ImportFrom) and n.level == 1:
                if n.module:
                    deps.add(n.module.split(".")[0])
                else:
                    deps.update(a.name for a in n.names)
        graph[py.stem] = {d for d in deps if (base / f"{d}.py").exists()}

    def cycle_from(start):
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for d in graph.get(node, ()):
                if d == start:
                    return path + [d]
                if d not in seen:
                    seen.add(d)
                    stack.append((d, path + [d]))
        return None

    assert [c for m in sorted(graph) if (c := cycle_from(m))] == []
