"""Monkey patches of the plugin, read from its code.

Two forms are recognised, without naming any plugin:

* a *patch decorator*: a decorator call whose first argument is a literal
  module path (``@patch("vllm.x.y")``, ``@patch("vllm.x.y", "Cls.attr")``)
  and whose callee is a workspace function that rebinds attributes
  (its module calls ``setattr``); the replaced attribute defaults to the
  decorated function's name;
* module-level assignments and ``setattr`` calls on attributes of imported
  modules (``iu.has_triton_kernels = lambda: False``).

Result: ``{(module, attribute path): (replacement Val, path, line, text)}``.
"""

from __future__ import annotations

from .pyindex import Decorator


def _module_rebinds(resolver, mod) -> bool:
    key = ("rebinds", mod.path, mod.summary.sha)
    cache = resolver.rebind_cache
    if key in cache:
        return cache[key]
    ok = any(c.func in ("setattr", "builtins.setattr") for c in mod.summary.calls)
    cache[key] = ok
    return ok


def is_patch_decorator(resolver, mod, d: Decorator) -> str | None:
    """The patched module path when ``d`` is a patch decorator, else None."""
    if not d.is_call or not d.str_args or not d.str_args[0]:
        return None
    target_mod = d.str_args[0]
    if "." not in target_mod and resolver.index.locate(target_mod) is None:
        return None
    from .resolver import Walk

    v = resolver.resolve_dotted(mod, "", d.func, Walk(), line=d.line)
    if v.kind != "function" or v.module is None or not v.module.workspace:
        return None
    if not _module_rebinds(resolver, v.module):
        return None
    return target_mod


def collect_patches(resolver) -> dict:
    from .resolver import Val, Walk

    out: dict = {}
    for mod in resolver.index.workspace_modules():
        s = mod.summary
        for q, f in s.functions.items():
            for d in f.decorators:
                tm = is_patch_decorator(resolver, mod, d)
                if tm is None:
                    continue
                attr = d.str_args[1] if len(d.str_args) > 1 and d.str_args[1] else dict(d.kw_texts).get("target_attribute_name", "").strip("'\"") or f.name
                rep = Val("function", mod, q, mod.path, f.line)
                args = ", ".join(repr(a) for a in d.str_args if a)
                out[(tm, attr)] = (rep, mod.path, d.line, f"@{d.func}({args})")
        for q, c in s.classes.items():
            for d in c.decorators:
                tm = is_patch_decorator(resolver, mod, d)
                if tm is None:
                    continue
                attr = d.str_args[1] if len(d.str_args) > 1 and d.str_args[1] else c.name
                rep = Val("class", mod, q, mod.path, c.line)
                args = ", ".join(repr(a) for a in d.str_args if a)
                out[(tm, attr)] = (rep, mod.path, d.line, f"@{d.func}({args})")
        for ap in s.attr_patches:
            base, _, attr = ap.target.rpartition(".")
            if not base:
                continue
            bv = resolver.resolve_dotted(mod, "", base, Walk(), line=ap.line)
            if bv.kind != "module" or bv.module is None or bv.module.workspace:
                if not (bv.kind == "class" and bv.module is not None and not bv.module.workspace):
                    continue
                tm, attr = bv.module.name, f"{bv.qual}.{attr}"
            else:
                tm = bv.module.name
            rv = resolver.resolve_dotted(mod, "", ap.value, Walk(), line=ap.line) if ap.value else Val(
                "unknown", mod, ap.target, mod.path, ap.line, reason=f"{ap.target} is replaced by a computed value (lambda/expression) at {mod.path}:{ap.line}")
            out[(tm, attr)] = (rv, mod.path, ap.line, f"{ap.target} = {ap.value or '<expression>'}")
    return out


def freeze_patches(table: dict) -> list:
    out = []
    for key, (rv, path, line, text) in table.items():
        out.append((key, rv.kind, rv.module.name if rv.module is not None else None, rv.qual, rv.path, rv.line, rv.reason, path, line, text))
    return out


def thaw_patches(resolver, frozen: list) -> dict:
    from .resolver import Val

    class Lazy(dict):
        def get(self, key, default=None):
            item = dict.get(self, key)
            if item is None:
                return default
            if isinstance(item, tuple) and len(item) == 10:
                _, kind, modname, qual, vpath, vline, reason, path, line, text = item
                mod = resolver.index.module(modname) if modname else None
                rv = Val(kind, mod, qual, vpath, vline, reason=reason or "")
                item = (rv, path, line, text)
                self[key] = item
            return item

    lazy = Lazy()
    for item in frozen:
        lazy[item[0]] = item
    return lazy
