"""What breaks loading, and advertisements nothing backs.

AL115 unloadable-import: an import of a module or name that exists neither in the workspace nor
in the target environment (the plugin's own modules moved by a refactor, packages that are
neither installed nor declared). AL108 covers names missing from *installed* packages.

AL116 capability-entry-raises: a backend advertises a capability (``supported_kv_cache_dtypes``,
``supports_*()``, ``supports_compute_capability``, ``is_supported_on_current_device``) whose
entry point in the backend's impl or builder raises ``NotImplementedError`` or is a dummy.

AL117 unregistered-torch-op: ``torch.ops.ns.op(...)`` where neither the workspace's C++, a Python
registration nor an installed native extension defines ``ns::op``.

AL105 (second check): NVIDIA architecture checks on ``torch.cuda.get_device_capability()``,
outside ``current_platform``, with the outcome on the platform when the plugin documents the
value its device reports (a comment such as ``# On MACA it's 8.0``, or a platform
``get_device_capability`` that returns a constant).
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass

from ..walk import Val, ValKind, Walk
from . import checks_calls  # noqa: F401 - its checks register (and run) first: AL115 defers to its AL107
from .api import Rule, check, content_memo, content_memo_peek, rule, tree_items

AL115 = rule(Rule(
    "AL115", "unloadable-import", "error",
    "An import of a module or name that exists neither in the workspace nor in the target environment.",
    "The import raises ImportError when it runs. At module level the module cannot be imported, nor "
    "anything that imports it (the message names the registered backends, custom ops, models and entry "
    "points that become unusable); under `try/except ImportError` the fallback runs instead and the "
    "feature disappears silently. Covers the plugin's own modules and names (moved or renamed by a "
    "refactor) and packages that are neither installed nor declared by the plugin or an installed "
    "distribution; names missing from installed packages are AL108's.",
    ("loading", "import"),
))
AL116 = rule(Rule(
    "AL116", "capability-entry-raises", "warning",
    "A backend advertises a capability whose entry point in its impl or builder raises NotImplementedError or is a dummy.",
    "vLLM's selector believes `supported_kv_cache_dtypes`, `supports_*()`, `supports_compute_capability()` "
    "and `is_supported_on_current_device()`: it selects the backend for that feature, and the first forward "
    "(or metadata build) that needs it fails or silently does nothing. The finding sits on the "
    "advertisement, where the fix belongs.",
    ("claim", "capability"),
))
AL117 = rule(Rule(
    "AL117", "unregistered-torch-op", "error",
    "A `torch.ops.<ns>.<op>` call that no workspace C++, Python registration or installed extension defines.",
    "`torch.ops.<ns>.<op>` raises when the line runs if nothing registered the op. Searched: the "
    "workspace's C++ (`TORCH_LIBRARY*` `ops.def`/`ops.impl`), Python registrations in the workspace and "
    "the installed packages of the namespace, and schemas baked into installed native extensions. When a "
    "package that is not installed may provide it (the platform's precompiled kernels), the finding is a "
    "warning that names it.",
    ("loading", "torch-op"),
))

_MAX_MSG = 200


# =========================================================================== shared helpers



def _rel(ctx, path: str) -> str:
    return checks_calls._rel(path, ctx.ws.root)


def _short_mod(name: str, keep: int = 3) -> str:
    """The last ``keep`` components of a dotted name (the message; the detail has the full name)."""
    parts = name.split(".")
    return name if len(parts) <= keep else "…" + ".".join(parts[-keep:])


def _clip(msg: str, n: int = _MAX_MSG) -> str:
    return msg if len(msg) <= n else msg[: n - 1].rstrip() + "…"


def _words(names: list[str], n: int = 3) -> str:
    names = list(dict.fromkeys(names))
    if len(names) <= n:
        return ", ".join(names[:-1]) + (" and " if len(names) > 1 else "") + names[-1] if names else ""
    return ", ".join(names[:n]) + f" and {len(names) - n} more"


def _handler_catches_import(types: str) -> bool:
    names = {t.strip().rpartition(".")[2] for t in types.split(",")}
    return bool(names & {"ImportError", "ModuleNotFoundError", "Exception", "BaseException"})


# =========================================================================== environment facts


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


# distributions whose import name shares nothing with the distribution name (generic PyPI facts)
_IRREGULAR = {
    "pillow": "pil", "opencv_python": "cv2", "opencv_python_headless": "cv2", "opencv_contrib_python": "cv2",
    "scikit_learn": "sklearn", "scikit_image": "skimage", "beautifulsoup4": "bs4", "protobuf": "google",
    "attrs": "attr", "py_cpuinfo": "cpuinfo", "pyyaml": "yaml", "python_dateutil": "dateutil",
    "msgpack_python": "msgpack", "pytorch_triton": "triton", "pyzmq": "zmq", "grpcio": "grpc",
}
_GENERIC_WORDS = {"python", "py", "nvidia", "cuda", "cu", "lib", "core", "headless", "dsl", "cpu", "gpu", "kernels",
                  "sdk", "api", "bin", "dev", "the", "for", "and", "plugin", "ext", "extension"}


def import_names_of(dist: str) -> set[str]:
    """Import names a distribution may provide (normalised lower case): its own name, the name
    without a ``py``/``python-`` prefix or a ``-python`` suffix, its distinctive words, the
    acronym of its words (``flash-linear-attention`` -> ``fla``) and the generic irregular ones."""
    n = _norm(dist)
    out = {n}
    if n in _IRREGULAR:
        out.add(_IRREGULAR[n])
    for pre in ("python_", "py_", "py"):
        if n.startswith(pre) and len(n) > len(pre) + 1:
            out.add(n[len(pre):])
    for suf in ("_python", "_py"):
        if n.endswith(suf):
            out.add(n[: -len(suf)])
    words = [w for w in n.split("_") if w]
    out.update(w for w in words if len(w) >= 3 and w not in _GENERIC_WORDS and not re.fullmatch(r"cu\d+|\d+", w))
    if len(words) >= 2:
        out.add("".join(w[0] for w in words))
    return out


_REQ_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def _requirement_names(lines) -> list[str]:
    out = []
    for line in lines:
        line = line.split("#", 1)[0].strip()
        if not line or line.startswith(("-", "http:", "https:", "git+", "file:")):
            continue
        m = _REQ_NAME.match(line)
        if m:
            out.append(m.group(1))
    return out


def _plugin_requirements(root) -> tuple[list[str], list[str]]:
    """(requirement names, files read) the plugin declares: ``pyproject.toml`` dependencies and
    optional dependencies, ``setup.cfg``, ``requirements*.txt`` and ``requirements/*.txt|*.in``."""
    names: list[str] = []
    files: list[str] = []
    pp = os.path.join(root, "pyproject.toml")
    try:
        import tomllib

        with open(pp, "rb") as fh:
            data = tomllib.load(fh)
        proj = data.get("project") or {}
        deps = list(proj.get("dependencies") or [])
        for extra in (proj.get("optional-dependencies") or {}).values():
            deps.extend(extra or [])
        deps.extend((data.get("build-system") or {}).get("requires") or [])
        names.extend(_requirement_names(d for d in deps if isinstance(d, str)))
        files.append(pp)
    except (OSError, ValueError, ImportError, AttributeError, TypeError):
        pass
    cands = []
    for folder in (root, os.path.join(root, "requirements")):
        try:
            entries = sorted(os.listdir(folder))
        except OSError:
            continue
        for e in entries:
            low = e.lower()
            if (folder != root or low.startswith("requirements")) and low.endswith((".txt", ".in")):
                cands.append(os.path.join(folder, e))
    cfg = os.path.join(root, "setup.cfg")
    if os.path.isfile(cfg):
        cands.append(cfg)
    for p in cands:
        try:
            with open(p, encoding="utf-8", errors="replace") as fh:
                text = fh.read(1_000_000)
        except OSError:
            continue
        files.append(p)
        if p.endswith("setup.cfg"):
            m = re.search(r"^install_requires\s*=\s*\n((?:[ \t]+\S.*\n?)*)", text, re.M)
            text = m.group(1) if m else ""
        names.extend(_requirement_names(text.splitlines()))
    return names, files


def _installed_requirements(sys_path) -> list[str]:
    """``Requires-Dist`` names of every distribution installed in the target environment."""
    out = []
    for d in sys_path or []:
        try:
            entries = os.listdir(d)
        except OSError:
            continue
        for e in entries:
            if e.endswith(".dist-info"):
                p = os.path.join(d, e, "METADATA")
            elif e.endswith(".egg-info"):
                p = os.path.join(d, e, "requires.txt")
            else:
                continue
            try:
                with open(p, encoding="utf-8", errors="replace") as fh:
                    text = fh.read(2_000_000)
            except OSError:
                continue
            if p.endswith("METADATA"):
                out.extend(m.group(1) for m in re.finditer(r"^Requires-Dist:\s*([A-Za-z0-9][A-Za-z0-9._-]*)", text, re.M))
            else:
                out.extend(_requirement_names(line for line in text.splitlines() if not line.startswith("[")))
    return out


def declared(engine) -> dict:
    """Import name (normalised) -> where a requirement that may provide it is declared."""

    def compute():
        root = str(engine.ws.root)
        names, files = _plugin_requirements(root)
        out: dict = {}
        where = ", ".join(os.path.relpath(f, root) for f in files[:3]) or "the plugin"
        for n in names:
            for imp in import_names_of(n):
                out.setdefault(imp, f"{n} ({where})")
        for n in _installed_requirements(getattr(engine.ws.target, "sys_path", []) or []):
            for imp in import_names_of(n):
                out.setdefault(imp, f"{n} (required by an installed distribution)")
        return out

    return engine.outside_memo("al115-declared", compute)


_BUILD_FILES = ("setup.py", "setup.cfg", "pyproject.toml", "CMakeLists.txt", "meson.build")
_CMAKE_TARGET = re.compile(r"\b(?:\w*add_library|\w*add_module|add_executable|define_\w*target|\w*_extension)\s*\(\s*([A-Za-z_]\w*)",
                           re.IGNORECASE)
_EXT_LIKE = re.compile(r"(?:^|_)C(?:_|$)")


def build_artifacts(engine) -> dict:
    """What the plugin's build creates that the source tree does not hold: module names written
    in the build files (``CMakeExtension(name="pkg._C")``, ``write_to="pkg/_version.py"``), CMake
    target names, and whether the workspace has native sources at all."""

    def compute():
        root = str(engine.ws.root)
        tops = engine.ws_tops
        modules: set = set()
        targets: set = set()
        texts = []
        for name in _BUILD_FILES:
            p = os.path.join(root, name)
            try:
                with open(p, encoding="utf-8", errors="replace") as fh:
                    texts.append((name, fh.read(2_000_000)))
            except OSError:
                continue
        cmake_dir = os.path.join(root, "cmake")
        try:
            for e in sorted(os.listdir(cmake_dir)):
                if e.endswith(".cmake"):
                    with open(os.path.join(cmake_dir, e), encoding="utf-8", errors="replace") as fh:
                        texts.append((e, fh.read(2_000_000)))
        except OSError:
            pass
        for name, text in texts:
            for m in re.finditer(r"""["']([A-Za-z_][\w./]*)["']""", text):
                s = m.group(1)
                if s.endswith((".py", ".pyi")):
                    s = s.rsplit(".", 1)[0]
                s = s.replace("/", ".").strip(".")
                if s.split(".", 1)[0] in tops and "." in s and all(p.isidentifier() for p in s.split(".")):
                    modules.add(s)
            if name.endswith(("CMakeLists.txt", ".cmake")):
                targets.update(m.group(1) for m in _CMAKE_TARGET.finditer(text))
        native = False
        try:
            native = bool(engine.ws.query.cpp_files())
        except AttributeError:
            pass
        if not native:
            for d in ("csrc", "src", "native", "kernels"):
                if os.path.isdir(os.path.join(root, d)):
                    native = True
                    break
        return {"modules": modules, "targets": targets, "native": native}

    return engine.memo("al115-build", compute)


def is_build_artifact(engine, name: str) -> bool:
    """Is workspace module ``name`` (or a package above it) made by the build: named in the build
    files, a CMake target, a provider the platform's ``import_kernels`` loads, or a ``_C``-like
    extension name in a workspace with native sources."""
    info = build_artifacts(engine)
    parts = name.split(".")
    for i in range(2, len(parts) + 1):
        pre = ".".join(parts[:i])
        last = parts[i - 1]
        if pre in info["modules"] or last in info["targets"]:
            return True
        if info["native"] and last.startswith("_") and _EXT_LIKE.search(last.lstrip("_")):
            return True
    try:
        provs = engine.ws.query.kernel_providers()
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        provs = []
    return any(m == name or name.startswith(m + ".") for m, _g, _s in provs)


# =========================================================================== AL115


@dataclass
class _Problem:
    kind: str  # module | name | package
    missing: str  # the module (module/package) or name that is missing
    module: str  # the module the import names
    name: str = ""  # the imported name (kind == name)


def _first_missing(idx, name: str) -> str | None:
    parts = name.split(".")
    for i in range(1, len(parts) + 1):
        pre = ".".join(parts[:i])
        loc = idx.locate(pre)
        if loc is None:
            return pre
        if loc.kind == "ext":
            return None  # a compiled module: what it holds is not visible here
    return None


def _ws_module_missing(ctx, name: str) -> str | None:
    """The first component of workspace module ``name`` that does not exist (None: it exists, or
    the build makes it, or an import hook serves it)."""
    idx = ctx.ws.index
    miss = _first_missing(idx, name)
    if miss is None:
        return None
    imap = ctx.r.import_map()
    if any(n == name or name.startswith(n + ".") or n == miss for n in imap):
        return None
    if is_build_artifact(ctx.engine, miss):
        return None
    return miss


def _import_problem(ctx, b) -> _Problem | None:
    from .checks_upstream import module_has

    r = ctx.r
    idx = ctx.ws.index
    target = r.abs_module(ctx.mod, b.target or "", b.level)
    if not target:
        return None
    top = target.split(".", 1)[0]
    if top in r.stdlib or top == "__future__":
        return None
    if top in ctx.engine.ws_tops:
        if b.kind == "import":
            full = b.alternatives[0] if b.alternatives else target
            miss = _ws_module_missing(ctx, full)
            return _Problem("module", miss, full) if miss else None
        miss = _ws_module_missing(ctx, target)
        if miss:
            return _Problem("module", miss, target)
        if b.kind == "star":
            return None
        loc = idx.locate(target)
        if loc is None or loc.kind == "ext":
            return None  # a build artifact, or a compiled module
        sub = f"{target}.{b.attr}"
        if loc.kind == "namespace":
            return None if _ws_module_missing(ctx, sub) is None else _Problem("name", b.attr or "", target, b.attr or "")
        m = idx.module(target)
        if m is None or module_has(r, m, b.attr or ""):
            return None
        if _ws_module_missing(ctx, sub) is None and (idx.locate(sub) is not None or is_build_artifact(ctx.engine, sub)):
            return None
        if sub in r.import_map():
            return None
        return _Problem("name", b.attr or "", target, b.attr or "")
    if idx.locate(top) is not None:
        return None  # installed: AL108 checks the modules and names of installed packages
    if top in r.import_map() or target in r.import_map():
        return None
    if top.lower() in declared(ctx.engine):
        return None  # declared but missing from this environment: an incomplete environment (AL107 at the calls)
    return _Problem("package", top, target)


def _try_handlers(ctx) -> dict:
    """try line -> ([(caught types, handler line, silent?, names the handler assigns)], names the
    try body sets to True) of this module (one parse per content, only for modules that need it)."""
    key = ("al115-try-map", ctx.path, ctx.s.sha)
    return content_memo(key, lambda: {line: (hs, flags) for line, hs, flags in
                                      tree_items(ctx, ctx.path, ctx.s.sha, "al115-try", _try_items, _try_moved)})


def _try_items(tree) -> list:
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Try) and type(node).__name__ != "TryStar":
            continue
        hs = []
        for h in node.handlers:
            if h.type is None:
                types = "BaseException"
            elif isinstance(h.type, ast.Tuple):
                types = ",".join(ast.unparse(e) for e in h.type.elts)
            else:
                types = ast.unparse(h.type)
            hs.append((types, h.lineno, not _loud(h.body), tuple(_assigned(h.body))))
        flags = tuple(n for n, v in _assigned(node.body, values=True) if v is True)
        out.append((node.lineno, hs, flags))
    return out


def _try_moved(item, d: int):
    line, hs, flags = item
    return line + d, [(t, hl + d, silent, names) for t, hl, silent, names in hs], flags


def _loud(body) -> bool:
    """Does a handler report the failure (raise, log, warn, print)?"""
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, ast.Raise):
            return True
        if isinstance(n, ast.Call):
            fn = ast.unparse(n.func)
            if fn.split(".", 1)[0] in ("logger", "logging", "warnings", "print", "log") or fn.endswith(
                    ("warning", "warning_once", "warn", "error", "info", "info_once", "exception")):
                return True
    return False


def _assigned(body, values: bool = False) -> list:
    """Names a block assigns (with their literal values when ``values``), in order."""
    out = []
    for n in ast.walk(ast.Module(body=body, type_ignores=[])):
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None:
            tgts = n.targets if isinstance(n, ast.Assign) else [n.target]
            val = n.value.value if isinstance(n.value, ast.Constant) else None
            for t in tgts:
                for e in (t.elts if isinstance(t, ast.Tuple) else [t]):
                    if isinstance(e, ast.Name):
                        out.append((e.id, val) if values else e.id)
    return list(dict.fromkeys(out))


@dataclass
class _How:
    severity: str
    mode: str  # module | conditional | guarded | fallback | lazy
    text: str  # what the guard means, for the message
    handler_line: int = 0
    silent: bool = True
    assigns: tuple = ()
    flags: tuple = ()
    default: bool = False  # conditional: taken with every environment flag at its default


def _env_default(ctx, text: str, scope: str) -> bool | None:
    """The value of a guard with environment flags at their defaults (None: unknown, or the
    evaluator is not available)."""
    try:
        from ..envflags import EnvDefaults
    except ImportError:
        return None
    ed = ctx.engine.memo("envdefaults", lambda: EnvDefaults(ctx.r))
    try:
        return ed.evaluate(ctx.mod, scope, text)
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return None


def _how(ctx, b, scope: str, third_party: bool) -> _How | None:
    """Severity and wording of an import under its guards; None when not reported."""
    r = ctx.r
    guards = b.guards
    if any(g[0] == "typecheck" for g in guards):
        return None
    conds = tuple(g for g in guards if g[0] in ("if", "else"))
    gv = None
    if conds:
        try:
            gv = r.guard_value(ctx.mod, conds, scope)
        except RecursionError:
            gv = None
        if gv is False:
            return None  # never runs on this platform (a conditional platform import)
    try_line = max((g[2] for g in guards if g[0] == "try"), default=0)
    exc_guard = next((g for g in reversed(guards) if g[0] == "except"), None)
    handlers, flags = _try_handlers(ctx).get(try_line, ([], ())) if try_line else ([], ())
    catching = [h for h in handlers if _handler_catches_import(h[0])]
    if exc_guard is not None and exc_guard[2] > try_line:
        if third_party:
            return None  # the fallback of an optional package
        return _How("warning", "fallback", f"the `except {exc_guard[1]}` fallback (line {exc_guard[2]}) itself fails")
    if catching:
        types, hline, silent, assigns = catching[0]
        if third_party and not silent:
            return None  # an optional package whose absence the plugin reports (logs or raises)
        return _How("warning", "guarded", f"`except {types}`", hline, silent, assigns, flags)
    if scope and third_party:
        return None  # imported where it is used: an optional dependency of that function
    cond_text = r.guard_text(conds) if conds and gv is None else None
    if scope:
        return _How("warning", "lazy", cond_text or "")
    # a package missing from *this* environment may still be in the device's (a vendor image): warning
    sev = "warning" if third_party else "error"
    if cond_text:
        default = _env_default(ctx, cond_text, scope) is True
        if third_party and not default:
            return None  # a conditional dependency (platform, option): only the default configuration counts
        return _How(sev if default else "warning", "conditional", cond_text, default=default)
    return _How(sev, "module", "")


def _suggest(ctx, prob: _Problem, names: list) -> str | None:
    """A workspace module that holds what the import names now (a refactor moved it): same last
    component (defining the imported names, when given), or the one module defining the name."""
    idx = ctx.ws.index
    if prob.kind == "module":
        tail = prob.module.rpartition(".")[2]
        cands = sorted(n for n in idx.ws_files if n.rpartition(".")[2] == tail and n != prob.module)
        if names:
            defining = []
            for n in cands:
                m = idx.module(n)
                if m is not None and all(x in m.summary.bindings for x in names):
                    defining.append(n)
            if defining:
                cands = defining
        if not cands:
            return None
        return max(cands, key=lambda n: (len(os.path.commonprefix([n.split("."), prob.module.split(".")])), -len(n)))
    if prob.kind == "name":
        hits = []
        for n in sorted(idx.ws_files):
            if n == prob.module:
                continue
            m = idx.module(n)
            if m is None:
                continue
            bs = m.summary.bindings.get(prob.name)
            if bs and any(x.kind in ("def", "class", "assign") for x in bs):
                hits.append(n)
        return hits[0] if len(hits) == 1 else None
    return None


# -- what a module that cannot be imported takes with it


def _import_graph(engine) -> dict:
    """Workspace module -> workspace modules it imports unconditionally at module level (parent
    packages included: importing ``a.b.c`` runs ``a`` and ``a.b`` first), plus each module's sha.

    A module's imports that need no guard evaluated are remembered by its path and content sha
    (:func:`~attnlens.rules.api.content_memo`), so the graph of a new index generation reads again only what
    changed; on a large workspace a module not loaded yet is read without being kept (``Query.scan_module``: the
    graph of upstream vLLM kept all 2,234 summaries, 230 MB of a server). The callers note every module's sha as a dependency
    (:func:`unusable`)."""

    def compute():
        idx = engine.ws.index
        query = engine.ws.query
        edges: dict = {}
        shas: dict = {}
        for name in sorted(idx.ws_files):
            path = idx.ws_files[name]
            sha = engine.current_sha(name)
            raw = content_memo_peek(("al115-imports", path, sha)) if sha else None
            if raw is None:
                m = query.scan_module(name)
                if m is None:
                    continue
                sha = m.summary.sha
                raw, pure = _module_imports(query, m)
                if pure and sha:
                    content_memo(("al115-imports", path, sha), lambda raw=raw: raw)
            shas[name] = sha
            edges[name] = {x for x in raw if x in idx.ws_files and x != name}
        rev: dict = {}
        for a, bs in edges.items():
            for x in bs:
                rev.setdefault(x, set()).add(a)
        return {"rev": rev, "shas": shas}

    return engine.memo("al115-graph", compute)


def _module_imports(query, m) -> tuple[frozenset, bool]:
    """(the modules ``m`` imports unconditionally at module level, with their parent packages and its own; whether
    no guard was evaluated to know it: then it depends on the module's name, path and text only)."""
    out = set()
    pure = True
    parts = m.name.split(".")
    out.update(".".join(parts[:i]) for i in range(1, len(parts)))
    for bs in m.summary.bindings.values():
        for b in bs:
            if b.kind not in ("import", "from", "star") or b.scope:
                continue
            if any(g[0] in ("try", "except", "typecheck") for g in b.guards):
                continue
            if b.guards:
                pure = False
                try:
                    if query.guard_value(m, b.guards, "") is not True:
                        continue
                except RecursionError:
                    continue
            t = query.abs_module(m, b.target or "", b.level)
            if not t:
                continue
            full = (b.alternatives[0] if b.kind == "import" and b.alternatives else t)
            ps = full.split(".")
            out.update(".".join(ps[:i]) for i in range(1, len(ps) + 1))
            if b.kind == "from" and b.attr:
                out.add(f"{t}.{b.attr}")
    return frozenset(out), pure


def _broken_closure(engine, start: str) -> dict:
    """Workspace modules that cannot be imported when ``start`` cannot: module -> the module it
    imports on the way to ``start`` (None for ``start`` itself)."""
    rev = _import_graph(engine)["rev"]
    out = {start: None}
    stack = [start]
    while stack:
        x = stack.pop(0)
        for y in sorted(rev.get(x, ())):
            if y not in out:
                out[y] = x
                stack.append(y)
    return out


def _module_of_path(ws, dotted: str) -> str | None:
    """The workspace module of a dotted class path (``pkg.mod.Class`` / ``pkg.mod:Class``)."""
    d = dotted.replace(":", ".")
    parts = d.split(".")
    for i in range(len(parts), 0, -1):
        pre = ".".join(parts[:i])
        if pre in ws.index.ws_files:
            return pre
    return None


def _consumers(engine) -> list:
    """(kind, name, module, where) of everything the plugin offers through a module: registered
    backends and custom ops, registered models, entry points, the platform."""

    def compute():
        ws = engine.ws
        idx = ws.index
        out = []
        try:
            entries = ws.backends(with_call_sites=False)  # the global state's registry (memoised)
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            entries = []
        for e in entries:
            mod = _module_of_path(ws, e.cls or "")
            if mod is not None and e.kind != "custom_op":
                kind = "MLA prefill backend" if e.kind == "mla_prefill" else "backend"
                out.append((kind, e.name, mod, f"{os.path.basename(e.path or '')}:{e.line}"))
        try:
            oot = ws.query.oot_replacements()
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            oot = {}
        for name, reg in sorted(oot.items()):
            # the module whose import runs the registration (the decorated class's, for the decorator forms)
            rm = idx.module_for_path(reg.path) if reg.path else None
            mod = rm.name if rm is not None and rm.workspace else _module_of_path(ws, reg.replacement.dotted)
            if mod is not None:
                out.append(("custom op", name, mod, f"{os.path.basename(reg.path)}:{reg.line}"))
        # (only modules whose text spells `register_model` can call it: the others are not read, 2,234 on upstream
        # vLLM; the scan's signature covers the calls read here)
        for m in idx.workspace_modules_matching(rb"register_model"):
            for cs in m.summary.calls:
                if cs.func.rpartition(".")[2] != "register_model" or len(cs.str_args) < 2:
                    continue
                model, path = cs.str_args[0], cs.str_args[1]
                if isinstance(model, str) and isinstance(path, str):
                    mod = _module_of_path(ws, path.partition(":")[0])
                    if mod is not None:
                        out.append(("model", model, mod, f"{os.path.basename(m.path)}:{cs.line}"))
        try:
            import tomllib

            with open(os.path.join(str(ws.root), "pyproject.toml"), "rb") as fh:
                eps = (tomllib.load(fh).get("project") or {}).get("entry-points") or {}
        except (OSError, ValueError, ImportError, AttributeError):
            eps = {}
        for group, items in eps.items():
            if not isinstance(items, dict):
                continue
            for ep, spec in items.items():
                if not isinstance(spec, str):
                    continue
                mod, _, func = spec.partition(":")
                if mod not in idx.ws_files:
                    continue
                out.append(("entry point", f"{ep} ({group})", mod, "pyproject.toml"))
                for lazy in _entry_lazy_imports(engine, mod, func):
                    out.append(("entry point", f"{ep} ({group})", lazy, "pyproject.toml"))
        try:
            for cv in ws.query.platform_info().classes:
                if cv.module is not None and cv.module.workspace:
                    out.append(("platform", cv.qual, cv.module.name, f"{os.path.basename(cv.module.path)}:{cv.line}"))
        except Exception:  # noqa: BLE001, S110 - analysis must not fail on a bad input
            pass
        return out

    return engine.memo("al115-consumers", compute)


def _entry_lazy_imports(engine, mod: str, func: str) -> list[str]:
    """Workspace modules an entry-point function imports when it runs (its lazy imports and those
    of the same module's functions it calls)."""
    idx = engine.ws.index
    query = engine.ws.query
    m = idx.module(mod)
    if m is None or not func:
        return []
    out = []
    todo = [func]
    seen = set()
    while todo and len(seen) < 20:
        q = todo.pop()
        if q in seen:
            continue
        seen.add(q)
        f = m.summary.functions.get(q)
        if f is None:
            continue
        for bs in f.locals.values():
            for b in bs:
                if b.kind in ("import", "from") and not any(g[0] in ("try", "except") for g in b.guards):
                    t = query.abs_module(m, b.target or "", b.level)
                    if t:
                        full = b.alternatives[0] if b.kind == "import" and b.alternatives else t
                        out.append(full if full in idx.ws_files else t)
                        if b.kind == "from" and f"{t}.{b.attr}" in idx.ws_files:
                            out.append(f"{t}.{b.attr}")
        for cs in m.summary.calls_in(q):
            if cs.func and "." not in cs.func and cs.func in m.summary.functions:
                todo.append(cs.func)
    return [x for x in out if x in idx.ws_files]


def unusable(ctx, module: str) -> tuple[list, dict]:
    """(consumers that become unusable, the broken-module map of :func:`_broken_closure`) when
    workspace module ``module`` cannot be imported."""
    g = _import_graph(ctx.engine)
    for name, sha in g["shas"].items():
        ctx.note_dep(name, sha)  # the answer reads every module's imports
    broken = _broken_closure(ctx.engine, module)
    hit = [c for c in _consumers(ctx.engine) if c[2] in broken]
    return hit, broken


_ORDER = ("platform", "entry point", "backend", "MLA prefill backend", "custom op", "model")


def _consequence(hit: list, broken: dict, budget: int, n_roots: int = 1) -> tuple[str, str]:
    """(what becomes unusable, in at most ``budget`` characters; the full list with one import
    chain, for the detail)."""
    by: dict = {}
    for kind, name, _mod, _where in hit:
        by.setdefault(kind, [])
        if name not in by[kind]:
            by[kind].append(name)
    if not by:
        n = len(broken) - n_roots
        return ("" if n <= 0 else f"nor {n} module{'s' if n > 1 else ''} importing {'it' if n_roots == 1 else 'them'}"), ""

    def plural(k, n):
        return k if n == 1 else k + "s"

    for per_kind in (2, 1, 0):
        parts = []
        for k in _ORDER:
            names = by.get(k)
            if not names:
                continue
            if per_kind and len(names) <= per_kind:
                parts.append(f"{plural(k, len(names))} {_words(names, per_kind)}")
            elif per_kind:
                parts.append(f"{plural(k, len(names))} {', '.join(names[:per_kind])} (+{len(names) - per_kind})")
            elif len(names) == 1 and len(names[0]) <= 30:
                parts.append(f"{k} {names[0]}")
            else:
                parts.append(f"{len(names)} {plural(k, len(names))}")
        short = "unusable: " + ", ".join(parts)
        if len(short) <= budget:
            break
    first = hit[0]
    chain = [first[2]]
    while broken.get(chain[-1]) is not None and len(chain) < 12:
        chain.append(broken[chain[-1]])
    long = ("Unusable: " + "; ".join(f"{k}: {', '.join(by[k])}" for k in _ORDER if k in by)
            + f". Import chain: {' -> '.join(chain)}.")
    return short, long


def _ws_name(ctx, name: str) -> str:
    """A workspace module name without its top package (``patch.x.y``), clipped to 60 characters."""
    top, _, rest = name.partition(".")
    out = rest if top in ctx.engine.ws_tops and rest else name
    return out if len(out) <= 60 else _short_mod(out, 3)


def _moved(ctx, module: str, suggestion: str | None) -> str:
    """`` (`old_part` → `new_part`?)``: where the module (or name) went, by the part that differs."""
    if not suggestion:
        return ""
    a, b = module.split("."), suggestion.split(".")
    pre = len(os.path.commonprefix([a, b]))
    suf = len(os.path.commonprefix([a[pre:][::-1], b[pre:][::-1]]))
    am, bm = a[pre:len(a) - suf], b[pre:len(b) - suf]
    if am and bm and len(".".join(am)) + len(".".join(bm)) <= 70:
        return f" (`{'.'.join(am)}` → `{'.'.join(bm)}`?)"
    return f" (now in `{_ws_name(ctx, suggestion)}`?)"


def _what(ctx, prob: _Problem) -> tuple[str, str]:
    """(short, full) description of what is missing."""
    if prob.kind == "module":
        gone = "" if prob.missing == prob.module else f" (`{prob.missing}` is missing)"
        return f"`{_ws_name(ctx, prob.module)}` does not exist", f"Module `{prob.module}` does not exist in the workspace{gone}"
    if prob.kind == "name":
        return (f"`{prob.name}` is not in `{_ws_name(ctx, prob.module)}`",
                f"`{prob.name}` is not defined in workspace module `{prob.module}`")
    return (f"`{prob.missing}` is not installed and no requirement declares it",
            f"Package `{prob.missing}` is not installed in the target environment, and no requirement of the plugin "
            "or of an installed distribution declares it")


def _import_site_steps(ctx):
    """(kind, missing/module, mode, scope) -> [(scope, binding, problem, how)] of this module, as steps
    (a generator that yields after each import binding and returns the dict)."""
    items = []
    for bs in ctx.s.bindings.values():
        items.extend((b.scope or "", b) for b in bs)
    for q, f in ctx.s.functions.items():
        for bs in f.locals.values():
            items.extend((q, b) for b in bs)
    groups: dict = {}
    seen = set()
    for scope, b in sorted(items, key=lambda x: (x[1].line, x[1].col, x[1].name)):
        yield
        if b.kind not in ("import", "from", "star") or (b.line, b.name, scope) in seen:
            continue
        seen.add((b.line, b.name, scope))
        prob = _import_problem(ctx, b)
        if prob is None:
            continue
        how = _how(ctx, b, scope, third_party=prob.kind == "package")
        if how is None:
            continue
        key = (prob.kind, prob.module if prob.kind != "package" else prob.missing, how.mode, scope if how.mode == "lazy" else "")
        groups.setdefault(key, []).append((scope, b, prob, how))
    return groups


_SEV = {"error": 0, "warning": 1, "info": 2}


def _package_site_steps(ctx, pkg: str):
    """[(module name, scope, binding, how)] of every workspace import of the missing package
    ``pkg`` that is reported, most severe first: one finding per package, anchored at the first.
    As steps (``api.run_steps``: yields after each workspace module)."""
    from .api import ModuleContext

    def compute():
        idx = ctx.ws.index
        out = []
        # only modules whose text spells the package's first name can import it (the import's dotted text is the
        # source's; an identifier spelled with characters that NFKC-normalise to it would escape this): upstream
        # vLLM's 2,234 modules were all summarised for one file's check. The scan is called for the dependency
        # recorders (a module that starts spelling it invalidates the answer); the matches are read as modules.
        spelled = re.escape(pkg.split(".")[0]).encode()
        idx.workspace_modules_matching(spelled)
        for name in idx.matching_names(spelled):
            yield
            m = idx.module(name)
            if m is None or not any(pkg in (b.target or "") for bs in m.summary.bindings.values() for b in bs) and \
                    not any(pkg in (b.target or "") for f in m.summary.functions.values() for bs in f.locals.values() for b in bs):
                continue
            c2 = ctx if m is ctx.mod else ModuleContext(ctx.engine, m)
            for key, sites in (yield from _import_site_steps(c2)).items():
                if key[0] == "package" and key[1] == pkg:
                    out.extend((name, sc, b, h, m.summary.sha, m.path) for sc, b, _p, h in sites)
        out.sort(key=lambda x: (_SEV[x[3].severity], x[0], x[2].line))
        return out

    return (yield from ctx.engine.memo_steps(("al115-pkg", pkg), compute))


@check("AL115")
def unloadable_imports(ctx):
    for key, sites in (yield from _import_site_steps(ctx)).items():
        if key[0] == "package":
            allsites = yield from _package_site_steps(ctx, key[1])
            for name, _sc, _b, _h, sha, _p in allsites:
                ctx.note_dep(name, sha)
            if not allsites or allsites[0][0] != ctx.mod.name or (key[2], key[3]) != (allsites[0][3].mode, allsites[0][1] if allsites[0][3].mode == "lazy" else ""):
                continue  # reported once, at the most severe import of the package
            if any(f.rule == "AL107" and f.data.get("package") == key[1] for f in ctx.findings):
                continue  # AL107 (run before this check) already reports the package at this import: one cause
            _report_import(ctx, sites, others=[x for x in allsites if x[0] != ctx.mod.name])
        else:
            _report_import(ctx, sites)


def _report_import(ctx, sites: list, others: list = ()) -> None:
    scope, b, prob, how = sites[0]
    short, full = _what(ctx, prob)
    pos = _import_pos(ctx, b, prob)
    names = [x[1].attr for x in sites if x[1].kind == "from" and x[1].attr]
    suggestion = _suggest(ctx, prob, names)
    related = []
    if suggestion:
        m = ctx.ws.index.module(suggestion)
        if m is not None:
            key = prob.name or (names[0] if names else "")
            bs = m.summary.bindings.get(key) or []
            line = bs[0].line if bs else 1
            related.append(ctx.site(line, 0, line, 0, f"`{key or suggestion}` is defined here", path=m.path))
    done = {(b.line, b.col)}
    for _s, b2, _p, _h in sites[1:]:
        if (b2.line, b2.col) not in done:
            done.add((b2.line, b2.col))
            related.append(ctx.site(*_import_pos(ctx, b2, prob), "the same missing import"))
    for name, _sc, b2, h2, _sha, path in others:
        if (path, b2.line) not in done:
            done.add((path, b2.line))
            related.append(ctx.site(b2.line, b2.col, b2.line, b2.col + 1, f"{_ws_name(ctx, name)} imports it too", path=path))
    moved = _moved(ctx, prob.module if prob.kind == "module" else prob.module, suggestion) if prob.kind == "module" else (
        f" (defined in `{_ws_name(ctx, suggestion)}`?)" if suggestion else "")
    detail = full + (f"; `{suggestion}` defines {'it' if prob.kind == 'name' else _words([f'`{n}`' for n in names], 3) or 'it'} now"
                     if suggestion else "") + "."
    data = {"missing": prob.missing, "kind": prob.kind, "module": prob.module, "name": prob.name or None,
            "moved_to": suggestion, "mode": how.mode}
    me = ctx.mod.name
    if how.mode in ("module", "conditional"):
        mods = [me] + [n for n, _sc, _b, h2, _s, _p in others if h2.mode in ("module", "conditional") and n != me]
        mods = list(dict.fromkeys(mods))
        hit, broken = [], {}
        for mname in mods:
            h1, b1 = unusable(ctx, mname)
            hit.extend(x for x in h1 if x not in hit)
            for k, v in b1.items():
                broken.setdefault(k, v)
        if how.mode == "conditional":
            flag = how.text.rpartition(".")[2] if re.fullmatch(r"[\w.]+", how.text) else _clip(how.text, 40)
            when = f"by default (`{flag}`) " if how.default else f"when `{flag}`, "
        else:
            when = ""
        subject = "this module" + (f" and {len(mods) - 1} other{'s' if len(mods) > 2 else ''}" if len(mods) > 1 else "")
        head = f"{short}{moved}: {when}{subject} cannot be imported"
        csq, long_csq = _consequence(hit, broken, max(40, _MAX_MSG - len(head) - 3), len(mods))
        msg = head + (f"; {csq}" if csq.startswith("unusable") else (f", {csq}" if csq else "")) + "."
        detail += (f" {', '.join(mods)} cannot be imported"
                   + (f" when `{how.text}`" + (" (the default)" if how.default else "") if how.mode == "conditional" else "") + ".")
        if long_csq:
            detail += " " + long_csq
        data["unusable"] = [{"kind": k, "name": nm, "module": mo, "registered_at": wh} for k, nm, mo, wh in hit]
        data["broken_modules"] = len(broken)
    elif how.mode == "guarded":
        if how.flags:
            lost = f"`{how.flags[0]}` is never True"
        elif how.assigns:
            lost = f"the fallback {_words([f'`{a}`' for a in how.assigns], 2)} is used"
        else:
            lost = "what the try block sets up is lost"
        msg = f"{short}{moved}: the {how.text} always runs{', silently' if how.silent else ''}: {lost}."
        detail += (f" The import is in a try block whose {how.text} (line {how.handler_line}) catches the ImportError"
                   + (f"; the fallback assigns {', '.join(how.assigns)}" if how.assigns else "") + ".")
    elif how.mode == "fallback":
        msg = f"{short}{moved}: {how.text} with ImportError."
        detail += " The fallback import runs only when the first one fails, and then raises."
    else:
        fn = scope.rpartition(".")[2] or scope
        cond = f" when `{_clip(how.text, 50)}`" if how.text else ""
        msg = f"{short}{moved}: `{fn}()` raises ImportError{cond}."
        detail += f" The import is local to {scope} and runs each time it is called."
    if prob.kind == "package":
        detail += " Install it in the target environment or declare it (pyproject / requirements)."
    ctx.add("AL115", *pos, _clip(msg), severity=how.severity, detail=detail, related=related, **data)


def _import_pos(ctx, b, prob: _Problem):
    """The imported name (a missing name), else the module text as written in the statement."""
    from .checks_upstream import _name_pos

    if prob.kind == "name":
        return _name_pos(ctx, b.line, prob.name)
    written = "." * b.level + (b.target or "") if b.kind != "import" else (b.alternatives[0] if b.alternatives else b.target or "")
    for ln in range(b.line, min(b.line + 3, len(ctx.lines)) + 1):
        text = ctx.line_text(ln)
        i = text.find(written) if written else -1
        if i >= 0:
            return ln, i, ln, i + len(written)
    return ctx.name_range(b.line, prob.missing.rpartition(".")[2])


# =========================================================================== AL116


_QUANT_DTYPE = re.compile(r"fp8|fp4|int8|int4|nvfp4|mxfp|e4m3|e5m2|turboquant", re.IGNORECASE)
CAP_KEYWORDS = {
    "kv_cache_dtype": re.compile(r"fp8|fp4|int8|int4|quantized_kv|is_quantized|kv_quant|nvfp4", re.IGNORECASE),
    "sinks": re.compile(r"\bsinks?\b|s_aux|\bhas_sink", re.IGNORECASE),
    "sliding_window": re.compile(r"sliding_window|window_size|\bwindow\b", re.IGNORECASE),
    "alibi": re.compile(r"alibi", re.IGNORECASE),
    "mm_prefix": re.compile(r"mm_prefix", re.IGNORECASE),
    "non_causal": re.compile(r"\bcausal\b", re.IGNORECASE),
    "batch_invariance": re.compile(r"batch_invarian", re.IGNORECASE),
    "per_head_quant_scales": re.compile(r"per_head", re.IGNORECASE),
}
CAP_ADVERT = {
    "supports_sink": "sinks", "supports_sinks": "sinks", "supports_sliding_window": "sliding_window",
    "supports_alibi_sqrt": "alibi", "supports_alibi": "alibi", "supports_mm_prefix": "mm_prefix",
    "supports_non_causal": "non_causal", "supports_batch_invariance": "batch_invariance",
    "supports_per_head_quant_scales": "per_head_quant_scales", "supports_kv_cache_dtype": "kv_cache_dtype",
    "supports_compute_capability": "device", "is_supported_on_current_device": "device",
}
CAP_TEXT = {
    "kv_cache_dtype": "a quantized KV cache", "sinks": "attention sinks", "sliding_window": "sliding window",
    "alibi": "ALiBi", "mm_prefix": "multimodal prefix attention", "non_causal": "non-causal attention",
    "batch_invariance": "batch invariance", "per_head_quant_scales": "per-head quant scales", "device": "this device",
}


@dataclass
class _Entry:
    """A place in an impl/builder that raises or does nothing for a capability."""

    cap: str
    path: str
    line: int
    col: int
    end_line: int
    end_col: int
    what: str  # `callee` raises NotImplementedError / `raise NotImplementedError`
    cond: str  # the condition it runs under ('' when unconditional)
    note: str = ""  # the exception's message, when literal
    called: bool = False  # the place is a call of the raising / dummy function (not the `raise` itself)


def _advertisements(ctx, cv: Val) -> list:
    """(capability, line, col, end_line, end_col, text) the backend class advertises, anchored in
    this module (its own definitions; inherited ones on the class line)."""
    from .classes import class_attr, mro

    c = cv.cls
    out = []
    # supported_kv_cache_dtypes with a quantized dtype
    chain, _ok = mro(ctx.engine, cv)
    for owner in chain:
        oc = owner.cls
        if oc is None or "supported_kv_cache_dtypes" not in oc.attrs:
            continue
        b = oc.attrs["supported_kv_cache_dtypes"]
        vals = _literal_list(ctx, owner.module, b.line)
        quant = [v for v in vals if isinstance(v, str) and _QUANT_DTYPE.search(v)]
        if quant:
            if owner.module is ctx.mod and owner.qual == cv.qual:
                pos = ctx.name_range(b.line, "supported_kv_cache_dtypes")
            else:
                pos = ctx.name_range(c.line, c.name)
            out.append(("kv_cache_dtype", pos, f"the {_words([repr(q) for q in quant], 2)} KV cache",
                        f"`supported_kv_cache_dtypes` lists {', '.join(repr(q) for q in quant)}"))
        break
    for meth, cap in CAP_ADVERT.items():
        fv, owner = class_attr(ctx.engine, cv, meth)
        if fv is None or fv.func is None:
            continue
        f = fv.func
        val = _advert_value(ctx, fv)
        if val is False or (val is None and cap != "device") or (cap == "kv_cache_dtype" and val is not True):
            continue
        if owner.module is ctx.mod and owner.qual == cv.qual:
            pos = ctx.name_range(f.line, f.name)
        elif fv.module is not None and fv.module.workspace and fv.module is not ctx.mod:
            continue  # a workspace base class: reported where it is defined, for its own backend
        else:
            pos = ctx.name_range(c.line, c.name)
        how = "returns True" if val is True else "does not rule it out"
        out.append((cap, pos, CAP_TEXT[cap] + f" (`{meth}()`)", f"`{meth}()` {how}"))
    return out


def _advert_value(ctx, fv: Val):
    """True / False / None (depends on its arguments) of an advertising method."""
    f = fv.func
    if f.returns_const is not None:
        v = f.returns_const[1]
        return v if isinstance(v, bool) else None
    if f.dummy == "raises NotImplementedError":
        return False
    if f.name in ("supports_compute_capability", "is_supported_on_current_device"):
        # a capability compare with a value the plugin documents for its device
        outcome = documented_compare_outcome(ctx, fv)
        if outcome is not None:
            return outcome
    return None


def _literal_list(ctx, mod, line: int) -> list:
    """The literal list assigned on ``line`` of ``mod`` (a class body assignment), or []."""
    text = ctx.ws.index.source_text(mod.path) if mod is not None else None
    if not text:
        return []
    if mod is not ctx.mod:
        ctx.note_dep(mod.name, mod.summary.sha)
    lines = text.splitlines()
    buf = []
    depth = 0
    for ln in range(line - 1, min(line + 60, len(lines))):
        s = lines[ln]
        buf.append(s)
        code = s.split("#", 1)[0]
        depth += code.count("[") + code.count("(") - code.count("]") - code.count(")")
        if depth <= 0 and "=" in "".join(buf):
            break
    src = "\n".join(buf)
    _, eq, rhs = src.partition("=")
    if not eq:
        return []
    try:
        v = ast.literal_eval(rhs.strip())
    except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
        return []
    return list(v) if isinstance(v, (list, tuple, set)) else []


def _cap_of_condition(text: str) -> str | None:
    t = text.strip()
    for cap, pat in CAP_KEYWORDS.items():
        if pat.search(t):
            return cap
    return None


def _live_conds(r, mod, scope: str, guards) -> list[str] | None:
    """The run-time conditions (texts, ``not (...)`` for else branches) of ``guards`` on this
    platform; None when one of them is False (the code never runs here)."""
    out = []
    for kind, text, _line in guards:
        if kind not in ("if", "else"):
            continue
        try:
            v = r.profile.evaluate(mod, scope, text)
        except RecursionError:
            v = None
        if v is not None and kind == "else":
            v = not v
        if v is False:
            return None
        if v is None:
            out.append(text if kind == "if" else f"not ({text})")
    return out


# conditions (or function names) that select a *mode* the capability is combined with: a raise on
# such a path refuses a combination (encoder attention with a quantized cache), not the capability
_MODE = re.compile(r"attn_type|encoder|cross|sparse|\bdcp|\bpcp|profil|spec_decode|cascade", re.IGNORECASE)


def _path_cap(frames, core: bool) -> str | None:
    """The capability a call path serves. ``frames``: ((function name, run-time conditions), ...)
    from the entry method to the raising place. 'device' when no condition at all leads there
    from a method vLLM always calls (forward/build/__init__); the one capability that positive
    conditions on the path select, when the innermost function's own conditions are all about it
    and nothing on the path selects a mode (encoder, sparse, DCP, ...); else None."""
    conds = [c for _f, cs in frames for c in cs]
    if any(_MODE.search(c) for c in conds) or any(_MODE.search(f) for f, _cs in frames):
        return None
    if not conds:
        return "device" if core else None
    caps = set()
    negated = set()
    for c in conds:
        neg = c.startswith("not (") or c.startswith("not ")
        cap = _cap_of_condition(c)
        if cap is not None:
            (negated if neg else caps).add(cap)
    inner = [c for c in frames[-1][1] if not (c.startswith("not (") or c.startswith("not "))]
    # the innermost function's own positive conditions must all be about the capability (a refusal
    # under `if output_block_scale is not None:` is not one); negated ones (`if c: raise` earlier
    # in the block) only say which other path was left
    if len(caps) != 1 or caps & negated or any(_cap_of_condition(c) is None for c in inner):
        return None
    return caps.pop()


def _raise_sites(ctx, mod) -> list:
    """(function qualname, line, col, end_line, end_col, enclosing if-tests, message) of every
    ``raise NotImplementedError`` statement in ``mod`` (read once per content)."""
    text = ctx.ws.index.source_text(mod.path) or ""
    if "NotImplementedError" not in text:
        return []
    return tree_items(ctx, mod.path, mod.summary.sha, "al116-raises", _raise_items, _raise_moved)


def _raise_moved(item, d: int):
    qual, line, col, el, ec, tests, msg = item
    return qual, line + d, col, el + d, ec, tuple((k, t, ln + d) for k, t, ln in tests), msg


def _raise_items(tree) -> list:
    out = []

    def walk(nodes, qual, tests):
        for n in nodes:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                walk(n.body, qual + (n.name,), ())
            elif isinstance(n, ast.If):
                t = " ".join(ast.unparse(n.test).split())
                walk(n.body, qual, tests + (("if", t, n.lineno),))
                walk(n.orelse, qual, tests + (("else", t, n.lineno),))
            elif isinstance(n, ast.Raise) and n.exc is not None:
                exc = n.exc.func if isinstance(n.exc, ast.Call) else n.exc
                if ast.unparse(exc).endswith("NotImplementedError"):
                    msg = ""
                    if isinstance(n.exc, ast.Call) and n.exc.args and isinstance(n.exc.args[0], ast.Constant):
                        msg = str(n.exc.args[0].value)
                    out.append((".".join(qual), n.lineno, n.col_offset, n.end_lineno or n.lineno,
                                n.end_col_offset or n.col_offset, tests, msg))
            else:
                for field in ("body", "orelse", "finalbody"):
                    sub = getattr(n, field, None)
                    if isinstance(sub, list):
                        walk(sub, qual, tests)
                for h in getattr(n, "handlers", None) or ():
                    walk(h.body, qual, tests)

    walk(tree.body, (), ())
    return out


def _maybe_workspace_callee(ctx, mod, cs) -> bool:
    """Can the callee be a workspace function (a plugin stand-in)? Not when its first name is a
    parameter or is imported only from installed packages (upstream code is followed by AL106's
    reasoning as intentional, and resolving it here would cost most of the walk)."""
    head = cs.func.split(".", 1)[0]
    where, bs = mod.summary.binding_of(cs.scope, head)
    if where == "param":
        return False
    if not bs:
        return True  # a builtin or star import: let the resolver say
    for b in bs:
        if b.kind not in ("from", "import"):
            return True
        target = ctx.r.abs_module(mod, b.target or "", b.level) or ""
        if target.split(".", 1)[0] in ctx.engine.ws_tops:
            return True
    return False


_CORE_ROOTS = re.compile(r"^(__init__|forward\w*|build\w*|_forward\w*|_build\w*)$")


def _entries(ctx, cvs: list) -> list[_Entry]:
    """Places reached from the impl/builder classes ``cvs`` that raise NotImplementedError or call
    a dummy, with the capability their path serves (:func:`_path_cap`). Walked from the methods
    vLLM calls (public ones and overrides of upstream hooks) through ``self.x()`` calls and
    workspace functions, at most four calls deep."""
    from .checks_calls import is_placeholder
    from .classes import mro

    r = ctx.r
    out: list[_Entry] = []
    stubs = ("raises NotImplementedError", "only logs and returns None", "body only logs")

    def record(mod, cs_or_pos, what, frames, core, name_hint="", raises=True, note="", called=True):
        cap = _path_cap(frames, core)
        if cap == "device" and name_hint:
            cap = _cap_of_condition(name_hint) or cap  # `flash_mla_fp8(...)`: named for what it serves
        if cap == "device" and not raises:
            return  # a stand-in that returns None on every call (a scheduler hint) does not break the backend
        if cap:
            line, col, el, ec = cs_or_pos
            cond = " and ".join(c for _f, cs in frames for c in cs)
            out.append(_Entry(cap, mod.path, line, col, el, ec, what, cond, note, called))

    for cv in cvs:
        chain, _ok = mro(ctx.engine, cv)
        methods: dict = {}
        upstream_names: set = set()
        for owner in chain:
            oc = owner.cls
            if oc is None or owner.module is None:
                continue
            if not owner.module.workspace:
                upstream_names.update(oc.methods)
                continue
            if owner.module is not ctx.mod:
                ctx.note_dep(owner.module.name, owner.module.summary.sha)
            for n, q in oc.methods.items():
                methods.setdefault(n, (owner.module, q))
        roots = [n for n in methods if not n.startswith("_") or n in upstream_names or n == "__init__"]
        stack = [(methods[n][0], methods[n][1], (), 0, bool(_CORE_ROOTS.match(n))) for n in sorted(roots)]
        visited: set = set()
        while stack and len(visited) < 600:
            mod, q, frames, depth, core = stack.pop()
            key = (mod.path, q, frames, core)
            if key in visited:
                continue
            visited.add(key)
            f = mod.summary.functions.get(q)
            if f is None:
                continue
            for sc in [q, *f.inner_defs]:
                for cs in mod.summary.calls_in(sc):
                    if not cs.func:
                        continue
                    live = _live_conds(r, mod, cs.scope, cs.guards)
                    if live is None:
                        continue
                    here = frames + ((f.name, tuple(live)),)
                    pos = (cs.line, cs.col, cs.end_line, cs.end_col)
                    parts = cs.func.split(".")
                    if parts[0] in ("self", "cls") and len(parts) == 2 and parts[1] in methods:
                        m2, q2 = methods[parts[1]]
                        f2 = m2.summary.functions.get(q2)
                        if f2 is not None and f2.dummy in stubs:
                            record(mod, pos, f"`{cs.func}()` ({f2.dummy})", here, core, parts[1], f2.dummy.startswith("raises"))
                        elif depth < 4 and f2 is not None:
                            stack.append((m2, q2, here, depth + 1, core))
                        continue
                    if parts[0] in ("self", "cls", "super", "logger", "torch", "print", "len", "isinstance"):
                        continue
                    if not _maybe_workspace_callee(ctx, mod, cs):
                        continue
                    try:
                        w = Walk()
                        v = r.resolve_dotted(mod, cs.scope, cs.func, w, line=cs.line)
                    except RecursionError:
                        continue
                    v = ctx.engine.apply_patch(v)
                    if v.kind != ValKind.FUNCTION or v.func is None or is_placeholder(v) or v.module is None:
                        continue
                    if any(h.condition and h.reachable is None for h in w.hops):
                        continue  # picked among alternatives the profile cannot decide
                    d = v.func.dummy
                    if d in stubs:
                        what = f"`{cs.func}` " + ("raises NotImplementedError" if d.startswith("raises") else f"is a dummy ({d})")
                        record(mod, pos, what, here, core, parts[-1], d.startswith("raises"))
                    elif v.module.workspace and depth < 4 and not d:
                        if v.module is not ctx.mod:
                            ctx.note_dep(v.module.name, v.module.summary.sha)
                        stack.append((v.module, v.qual, here, depth + 1, core))
            if f.dummy == "raises NotImplementedError":
                continue  # the method itself is a stub: its callers were recorded above (or it is a hook)
            for rq, line, col, el, ec, tests, emsg in _raise_sites(ctx, mod):
                if rq != q and not rq.startswith(q + "."):
                    continue
                live = _live_conds(r, mod, rq, tests)
                if live is None:
                    continue
                record(mod, (line, col, el, ec), "`raise NotImplementedError`", frames + ((f.name, tuple(live)),), core,
                       note=emsg, called=False)
    uniq: dict = {}
    for e in out:
        uniq.setdefault((e.cap, e.path, e.line, e.col), e)
    return list(uniq.values())


@check("AL116")
def capability_entries(ctx):
    from .checks_upstream import _part_class

    try:
        entries = ctx.ws.backends(with_call_sites=False)
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return
    done = set()
    for e in entries:
        if e.kind == "custom_op" or not e.loads or not e.path:
            continue
        mod = ctx.ws.index.module_for_path(e.path)
        if mod is None or mod.path != ctx.path:
            continue
        cq = e.cls.rpartition(".")[2] if e.cls else ""
        if cq not in ctx.s.classes or cq in done:
            continue
        done.add(cq)
        cv = Val(ValKind.CLASS, ctx.mod, cq, ctx.path, ctx.s.classes[cq].line)
        adverts = _advertisements(ctx, cv)
        if not adverts:
            continue
        parts = []
        for meth in ("get_impl_cls", "get_builder_cls"):
            pv = _part_class(ctx.ws.query, cv, meth)
            if pv is not None and pv.module is not None and pv.module.workspace:
                parts.append(pv)
        if not parts:
            continue
        ents = _entries(ctx, parts)
        for cap, pos, adv, adv_long in adverts:
            hits = [x for x in ents if x.cap == cap]
            if not hits:
                continue
            first = hits[0]
            where = ("called at " if first.called else "") + f"{_rel(ctx, first.path).rpartition('/')[2]}:{first.line}"
            if cap == "device":
                msg = f"{e.name} claims {adv}, but {first.what} on every call ({where}): the backend fails when selected."
            else:
                msg = f"{e.name} advertises {adv}, but {first.what} on that path ({where}): it fails when used."
            related = [ctx.site(x.line, x.col, x.end_line, x.end_col,
                                x.what + (f" ({_clip(x.note, 60)!r})" if x.note else "")
                                + (f" when `{_clip(x.cond, 80)}`" if x.cond else ""), path=x.path) for x in hits]
            detail = (f"{e.name} ({e.cls}) advertises {CAP_TEXT[cap]}: {adv_long}. Reached from "
                      f"{', '.join(p.qual for p in parts)}: "
                      + "; ".join(f"{x.what} ({'called ' if x.called else ''}at {_rel(ctx, x.path)}:{x.line})"
                                  + (f" when `{x.cond}`" if x.cond else "")
                                  for x in hits[:6])
                      + ". Drop the advertisement, or implement the path.")
            ctx.add("AL116", *pos, _clip(msg), detail=detail, related=related, capability=cap, backend=e.name,
                    entries=[{"path": x.path, "line": x.line, "what": x.what, "condition": x.cond} for x in hits])


# =========================================================================== AL117


def _op_registered(ctx, ns: str, op: str, missing_providers: list):
    """'cpp' / 'python' / 'extension' when something in reach registers ``ns::op``, 'unknown' when the
    C++ index cannot tell, else None. Schemas baked into installed native extensions are read (an ELF
    scan, about 2 s cold for vLLM's) only for a namespace neither the workspace nor a missing provider
    explains."""
    ops = ctx.r.ops

    def compute():
        try:
            if ops.python_registrations_all(ns, op):
                return "python"
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            return "unknown"
        return None

    hit = ctx.engine.memo(("al117-py", ns, op), compute)
    if hit:
        return hit
    info = ops.cpp().op(f"{ns}::{op}")  # CppNotReady (CLI worker) propagates: the module is checked again later
    if info is not None:
        return "cpp"
    names, unresolved = _cpp_namespaces(ctx)
    if ns in names:
        return None  # the workspace provides this namespace: its C++ is the evidence (as for AL113)
    if unresolved:
        return "unknown"  # a macro namespace the index cannot read may be this one
    if missing_providers:
        return None  # a provider that is not installed may define it: reported as such, no .so scan needed

    def ext():
        try:
            return "extension" if ops.extension_schema(ns, op) is not None else None
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            return "unknown"

    return ctx.engine.outside_memo(("al117-ext", ns, op), ext)


def _cpp_namespaces(ctx) -> tuple[set, bool]:
    """(namespaces the workspace C++ registers ops in, whether a block's namespace is unreadable)."""

    def compute():
        idx = ctx.r.ops.cpp()
        names = {o.split("::", 1)[0] for o in idx.ops()}
        blocks = getattr(idx, "blocks", lambda: [])()
        names.update(b.namespace for b in blocks if b.namespace)
        unresolved = any(not b.namespace or not b.namespace.isidentifier() for b in blocks)
        return names, unresolved

    return ctx.engine.memo("al117-cpp-ns", compute)


def _unregistered_definition(ctx, op: str):
    """A C++ function of the workspace named like the op (a host wrapper, not a ``__global__`` kernel), defined
    but bound by no registration (no ``ops.impl`` of any op or namespace names it): what an ``ops.def``/``ops.impl``
    would register; None when there is none."""
    try:
        funcs = [f for f in ctx.r.ops.cpp().functions_named(op) if not f.is_kernel and f.name == op]
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return None
    funcs = [f for f in funcs if ctx.ws.index.is_workspace_path(f.path)]
    try:
        if not funcs or op in ctx.r.ops.cpp().bound_function_names():
            return None
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return None
    return min(funcs, key=lambda f: (f.path, f.line))


def _similar_ops(ctx, ns: str, op: str) -> list[str]:
    """Ops the workspace C++ registers in ``ns`` whose name extends ``op`` or that ``op`` extends
    (``top_k_per_row`` -> ``top_k_per_row_prefill``): a rename is the usual cause."""
    try:
        names = [o.split("::", 1)[1] for o in ctx.r.ops.cpp().ops() if o.startswith(ns + "::")]
    except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
        return []
    return sorted(n for n in names if n != op and (n.startswith(op + "_") or op.startswith(n + "_")))[:4]


def _only_used_where_dead(ctx, scope: str) -> bool:
    """Is ``scope`` a method of a private class of this module whose every use (returned, assigned,
    called, passed) sits under a guard that is False here (``if is_cuda(): return _CudaOps``)?"""
    r = ctx.r
    cq = r.enclosing_class(ctx.mod, scope) if scope else None
    c = ctx.s.classes.get(cq) if cq else None
    if c is None or "." in cq or not cq.startswith("_"):
        return False
    pat = re.compile(r"(?<![\w.])" + re.escape(cq) + r"\b")
    occ = {i for i, line in enumerate(ctx.lines, 1)
           if not (c.deco_line <= i <= c.end_line) and pat.search(line.split("#", 1)[0])}
    if not occ:
        return False
    refs = []
    for f in ctx.s.functions.values():
        refs.extend((line, guards, f.qualname) for text, guards, line in f.return_alts if text == cq)
        refs.extend((b.line, b.guards, f.qualname) for bs in f.locals.values() for b in bs
                    if b.target == cq or cq in (b.alternatives or ()))
    refs.extend((b.line, b.guards, "") for bs in ctx.s.bindings.values() for b in bs
                if b.kind not in ("class", "def") and (b.target == cq or cq in (b.alternatives or ())))
    refs.extend((cs.line, cs.guards, cs.scope) for cs in ctx.s.calls if cs.func == cq or cq in cs.arg_texts)
    if not occ <= {line for line, _g, _s in refs}:
        return False
    try:
        return all(g and r.guard_value(ctx.mod, g, sc) is False for _l, g, sc in refs)
    except RecursionError:
        return False


def _uncalled_function(ctx, scope: str) -> str | None:
    """The name of the module-level function ``scope`` belongs to when no workspace file mentions
    that name except its own ``def`` (a wrapper nothing calls), else None."""
    top = scope.split(".", 1)[0]
    f = ctx.s.functions.get(top)
    if not top or f is None or f.class_name or top.startswith("__"):
        return None
    rx = re.compile(r"(?<![\w])" + re.escape(top) + r"(?![\w])")
    idx = ctx.ws.index
    files = sorted(idx.ws_files.items())
    for name, _p in files:
        ctx.note_dep(name, ctx.engine.current_sha(name))  # a call added anywhere changes the answer
    # from each file's words, kept while its text stays (Index.has_word: the texts themselves were kept by this
    # check's memo, 43 MB for upstream vLLM; then each (name, file) was a read of the file where texts are not kept)
    for name, p in files:
        if name != ctx.mod.name and idx.has_word(p, top):
            return None
    own_op = re.compile(r"torch\.ops\.\w+\." + re.escape(top) + r"\b")  # the op of the same name is no call
    hits = [i for i, line in enumerate(ctx.lines, 1) if rx.search(own_op.sub("", line.split("#", 1)[0]))]
    return top if hits == [f.line] else None


def _op_alias_heads(ctx) -> set:
    """Names bound to ``torch.ops...`` (``ops = torch.ops._C``) in this module (any scope)."""
    out = set()
    for name, bs in ctx.s.bindings.items():
        if any(b.kind == "assign" and (b.target or "").startswith("torch.ops") for b in bs):
            out.add(name)
    for f in ctx.s.functions.values():
        for name, bs in f.locals.items():
            if any(b.kind == "assign" and (b.target or "").startswith("torch.ops") for b in bs):
                out.add(name)
    return out


@check("AL117")
def unregistered_ops(ctx):
    heads = _op_alias_heads(ctx)
    groups: dict = {}
    for cs in ctx.s.calls:
        yield
        if not cs.func:
            continue
        head = cs.func.split(".", 1)[0]
        if not (cs.func.startswith("torch.ops.") or head in heads):
            continue
        if ctx.call_dead(cs) or _only_used_where_dead(ctx, cs.scope):
            continue
        v = ctx.resolve_call(cs)
        if v.kind != ValKind.TORCH_OP:
            continue
        ns = v.extra.get("ns") or v.qual.split("::")[0]
        op = v.extra.get("op") or v.qual.split("::")[-1]
        if not ns or not op or ns == "aten" or ns.startswith(("prims", "quantized")):
            continue
        groups.setdefault((ns, op), []).append(cs)
    for (ns, op), sites in groups.items():
        yield
        cs = sites[0]
        try:
            missing = ctx.r.ops._missing_providers(ns, (ctx.mod, cs.line))  # noqa: SLF001 - same package family
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            missing = []
        if _op_registered(ctx, ns, op, missing) is not None:
            continue
        conds = [c.guards for c in sites]
        runtime = all(g and ctx.r.guard_value(ctx.mod, g, c.scope) is None for g, c in zip(conds, sites))
        similar = _similar_ops(ctx, ns, op)
        defined = _unregistered_definition(ctx, op)
        if defined is not None:
            # the function is in the workspace's C++: registering it is the fix
            near = f" (unregistered at {os.path.basename(defined.path)}:{defined.line})"
        else:
            near = f" (csrc has `{similar[0]}`" + (f" +{len(similar) - 1}" if len(similar) > 1 else "") + ")" if similar else ""
        unused = _uncalled_function(ctx, cs.scope)
        if missing:
            msg = (f"`torch.ops.{ns}.{op}` is not in the source build{near}; "
                   + (f"nothing in the workspace calls `{unused}`." if unused else
                      f"only `{missing[0][0]}` (not installed) may provide it."))
            sev = "warning"
        else:
            msg = (f"`torch.ops.{ns}.{op}` is registered nowhere in reach{near}: "
                   + (f"nothing in the workspace calls `{unused}`." if unused else "this call fails (no such operator)."))
            sev = "warning" if runtime else "error"
        if len(msg) > _MAX_MSG and near:
            msg = msg.replace(near, "")
        if unused:
            sev = "info"
        try:
            searched = ctx.r.ops._searched_text(ns, op)  # noqa: SLF001
        except Exception:  # noqa: BLE001 - analysis must not fail on a bad input
            searched = ""
        detail = (f"Nothing registers {ns}::{op}" + (f" (searched {searched})" if searched else "") + "."
                  + (f" `{op}` is defined at {_rel(ctx, defined.path)}:{defined.line} but no "
                     "`ops.def`/`ops.impl` registers it." if defined is not None else "")
                  + (f" Registered ops of `{ns}` with a similar name: {', '.join(similar)}." if similar else "")
                  + (f" Would-be providers that are not installed here: {', '.join(t for t, _g, _w in missing)}." if missing else "")
                  + " Register it (csrc `ops.def`/`ops.impl`, or a Python `torch.library` registration), or call the op "
                    "that replaced it.")
        related = [ctx.site(c.line, c.col, c.end_line, c.end_col, f"also calls torch.ops.{ns}.{op}") for c in sites[1:]]
        # no chain: following the op would scan every installed native extension for its schema (an ELF
        # read, ~1 s cold), which the namespace already made unnecessary (see _op_registered)
        ctx.add_at_call("AL117", cs, _clip(msg), severity=sev, detail=detail, related=related,
                        op=f"{ns}::{op}", providers=[t for t, _g, _w in missing])


# =========================================================================== AL105: torch.cuda capability checks


def _documented(ctx):
    """(Cap, path, line) the plugin documents its device reports (``# On MACA it's 8.0``), through
    AL105's reader; None when nothing says (or AL105's evaluator is unavailable)."""
    try:
        from .checks_platform import _documented_capability
    except ImportError:
        return None
    doc = _documented_capability(ctx.engine)
    if doc is None:
        return None
    cap, (path, line) = doc
    m = ctx.ws.index.module_for_path(path)
    if m is not None:
        ctx.note_dep(m.name, m.summary.sha)
    return cap, path, line


def _evaluate_cap(ctx, text: str, doc) -> bool | None:
    try:
        from .capability_eval import evaluate
    except ImportError:
        return None
    return evaluate(text, doc[0])


def documented_compare_outcome(ctx, fv: Val) -> bool | None:
    """Outcome, with the documented device value, of a ``supports_compute_capability(capability)``
    style predicate whose body is one ``return <test of the parameter>``."""
    f = fv.func
    doc = _documented(ctx)
    if doc is None or f is None or fv.module is None or len(f.returns) != 1:
        return None
    text = ctx.ws.index.source_text(fv.module.path) or ""
    body = "\n".join(text.splitlines()[f.line - 1: f.end_line])
    m = re.search(r"\breturn\b(.*)", body, re.S)
    if m is None:
        return None
    return _evaluate_cap(ctx, " ".join(re.sub(r"#[^\n]*", "", m.group(1)).split()), doc)


@check("AL105")
def torch_cuda_capability_checks(ctx):
    """``torch.cuda.get_device_capability()`` comparisons (directly or through a local), which
    AL105's platform check does not see: torch reports the vendor device's numbers."""
    from . import checks_platform as P

    if not any(cs.func.startswith("torch.") and cs.func.endswith(".get_device_capability") for cs in ctx.s.calls):
        return  # nothing here asks torch (read from the summary: the expression facts are not needed)
    pf = P._platform_facts(ctx.engine)
    if not pf["names"] or pf["is_cuda"] is True:
        return
    conj_false = getattr(P, "_conjunct_false", None) or P._vendor_guard_false
    r = ctx.r
    calls_by_pos = {(cs.line, cs.col): cs for cs in ctx.s.calls}
    platform = pf["names"].split(" / ")[0]
    for u in ctx.facts.caps:
        if u.kind != "compare" or not u.base:
            continue
        if u.scope:
            cq = r.enclosing_class(ctx.mod, u.scope) or ""
            if (ctx.mod.name, cq) in pf["ws_classes"]:
                continue  # the platform's own definitions
        try:
            bv = r.resolve_dotted(ctx.mod, u.scope, u.base, Walk(), line=u.line)
        except RecursionError:
            continue
        if bv.kind == ValKind.PLATFORM or not (bv.qual == "torch.cuda" or u.base == "torch.cuda"):
            continue
        cs = calls_by_pos.get((u.line, u.col))
        guard_cs = cs or P._enclosing_call(ctx, u)
        if guard_cs is not None and ctx.call_dead(guard_cs):
            continue
        if any(conj_false(ctx, u, t) for t in u.conj):
            continue
        doc = _documented(ctx)
        val = _evaluate_cap(ctx, u.text, doc) if doc is not None else None
        text = _clip(" ".join(u.text.split()), 70)
        common = dict(platform=pf["names"], branch=P._branch_json(u.branch))
        if val is not None:
            cap, path, line = doc
            where = f"{_rel(ctx, path)}:{line}"
            eff = P._branch_effect(u.branch, val).removeprefix("so ")
            msg = (f"`{text}` is always {val} here: torch reports the device's {cap.major}.{cap.minor} ({where}), "
                   "not an SM version" + (f"; {eff}" if eff else "") + ".")
            detail = (f"torch.cuda.get_device_capability() returns the vendor device's numbers on {pf['names']}; the "
                      f"plugin documents {cap.major}.{cap.minor} at {where}. Test the feature, not the architecture number.")
            ctx.add("AL105", u.line, u.col, u.end_line, u.end_col, _clip(msg, 300), detail=detail, constant=val,
                    documented=f"{cap.major}.{cap.minor}", **common)
        else:
            msg = (f"`{text}` compares torch.cuda.get_device_capability() with NVIDIA SM numbers: on {platform} torch "
                   "reports the vendor device's, so it is decided for the wrong reason.")
            detail = ("torch.cuda.get_device_capability() is not routed through current_platform: on an out-of-tree "
                      f"platform ({pf['names']}) it reports what the vendor runtime says. Test the feature instead.")
            ctx.add("AL105", u.line, u.col, u.end_line, u.end_col, _clip(msg, 300), detail=detail, constant=None, **common)
