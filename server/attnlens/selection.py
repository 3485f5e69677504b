"""Selection: which backend classes a platform's ``get_attn_backend_cls`` can return.

vLLM asks the platform class for a class path (``Platform.get_attn_backend_cls``). Plugins
return literal strings, items of a literal dict keyed by selector flags, an enum member's
``get_path()``, a value computed by another method of the class, or take an early return.
Every reachable ``return`` is a candidate, with the guards that lead to it (early returns
included, see ``pyindex``) evaluated under the platform profile. Nothing here is specific to a
plugin: the method is found in the MRO of the platform class(es) the entry point names.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from . import model as M
from .walk import ValKind, Walk

SELECTOR = "get_attn_backend_cls"


@dataclass
class Candidate:
    class_path: str | None  # None when the return could not be read (reason says why)
    conditions: list[str] = field(default_factory=list)
    reachable: bool | None = True
    path: str | None = None  # the return statement
    line: int | None = None
    via: str = ""  # how the path was read: literal, dict item, Enum.X.get_path(), method
    enum: str | None = None  # `AttentionBackendEnum.X` when the return is an enum member's path
    reason: str | None = None

    def to_json(self) -> dict:
        return {"class_path": self.class_path, "conditions": list(self.conditions),
                "reachability": M.reach_word(self.reachable), "path": self.path, "line": self.line, "via": self.via,
                "enum": self.enum, "reason": self.reason}


def _literal_str(text: str) -> str | None:
    try:
        v = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return v if isinstance(v, str) else None


def _combine(a: bool | None, b: bool | None) -> bool | None:
    return M.combine_reachability([a, b])


class Selector:
    def __init__(self, resolver, enum_paths=None, registered=()):
        self.r = resolver
        self.registered = list(registered)  # (enum member, class path) of the plugin's registrations
        # `Enum.MEMBER` text -> class path registered for it (plugin registrations win over upstream defaults)
        self.enum_paths = enum_paths or (lambda mod, scope, text: None)

    def candidates(self) -> list[Candidate]:
        out: list[Candidate] = []
        seen = set()
        for cv in self.r.profile.info.classes:
            fv = self.r.class_attr(cv.module, cv.qual, SELECTOR, Walk())
            if fv is None or fv.func is None or fv.module is None or not fv.module.workspace:
                continue
            key = (fv.module.name, fv.qual)
            if key in seen:
                continue
            seen.add(key)
            out.extend(self._returns(fv.module, fv.func, [], True, 0, cv))
        return out

    def _returns(self, mod, f, conds: list, reach, depth: int, cv) -> list[Candidate]:
        out = []
        for text, guards, line in f.return_alts:
            c = list(conds)
            gt = self.r.guard_text(guards)
            if gt:
                c.append(gt)
            r = _combine(reach, self.r.guard_value(mod, guards, f.qualname) if guards else True)
            out.extend(self._value(mod, f, text, c, r, line, depth, cv))
        return out

    def _value(self, mod, f, text: str, conds, reach, line, depth, cv) -> list[Candidate]:
        base = dict(conditions=conds, reachable=reach, path=mod.path, line=line)
        lit = _literal_str(text) if text else None
        if lit is not None:
            return [Candidate(lit, via="literal", **base)] if lit else []
        if text in ("None", ""):
            if text == "":
                return [Candidate(None, via="expression", reason="the returned expression is not a literal, dict item, "
                                  "enum path or method call", **base)]
            return []
        if text.endswith(".get_path()"):
            enum_text = text[: -len(".get_path()")]
            if enum_text.count(".") >= 1:
                path = self.enum_paths(mod, f.qualname, enum_text)
                return [Candidate(path, via=f"{enum_text}.get_path()", enum=enum_text,
                                  reason=None if path else f"no class path known for {enum_text}", **base)]
            # `<variable>.get_path()`: the member is chosen at run time; its candidates are the members of a
            # priority list the selector reads (returned as list literals by a helper), else every member
            return self._members_chosen_at_run_time(mod, f, enum_text, conds, reach, line, cv)
        if text.endswith("]") and "[" in text:
            name, _, key = text[:-1].partition("[")
            return self._dict_items(mod, f, name, key, conds, reach, line)
        if text.isidentifier():
            how, bindings = mod.summary.binding_of(f.qualname, text)
            if how == "local" and len(bindings) == 1:
                b = bindings[0]
                if b.kind == "subscript":
                    return self._dict_items(mod, f, b.target or "", b.str_args[0] if b.str_args else "?", conds, reach, line)
                if b.kind == "other" and b.target:
                    return self._value(mod, f, b.target, conds, reach, line, depth, cv)
        if text.endswith(")") and depth < 2:
            callee = text.partition("(")[0]
            if callee.startswith(("cls.", "self.")):
                mv = self.r.class_attr(cv.module, cv.qual, callee.split(".", 1)[1], Walk())
            else:
                mv = self.r.resolve_dotted(mod, f.qualname, callee, Walk(), line=line)
            if mv is not None and mv.kind == ValKind.FUNCTION and mv.func is not None and mv.module is not None:
                return self._returns(mv.module, mv.func, conds, reach, depth + 1, cv)
        return [Candidate(None, via="expression", reason=f"`{text}` is not a literal, dict item or enum path", **base)]

    def _members_chosen_at_run_time(self, mod, f, var: str, conds, reach, line, cv) -> list[Candidate]:
        out = []
        rebound = any(b.line < (line or 0) for b in f.locals.get(var, []))
        if mod.summary.binding_of(f.qualname, var)[0] == "param" and not rebound:
            # the caller's choice (vLLM passes the user's --attention-backend): any registered member
            for member, path in self.registered:
                out.append(Candidate(path, conditions=conds + [f"{var} is {member} (chosen by the user)"], reachable=_combine(reach, None),
                                     path=mod.path, line=line, via=f"{var}.get_path() of the requested backend",
                                     enum=member))
            return out
        # `backend = priorities(...)[0]`: only the first member of each list can be chosen
        index = None
        prior = [b for b in f.locals.get(var, []) if b.line < (line or 0)]
        if prior and prior[-1].kind == "subscript" and prior[-1].str_args and prior[-1].str_args[0].isdigit():
            index = int(prior[-1].str_args[0])
        for lm, lf in self._priority_lists(mod, f, cv, 0, set()):
            for text, guards, rline in lf.return_alts:
                if not (text.startswith("[") and text.endswith("]")):
                    continue
                gt = self.r.guard_text(guards)
                r = _combine(reach, self.r.guard_value(lm, guards, lf.qualname) if guards else True)
                members = [x.strip() for x in text[1:-1].split(",") if x.strip()]
                if index is not None:
                    members = members[index:index + 1]
                how = (f"item {index} of the priority list is" if index is not None
                       else "the first valid backend of the priority list is")
                for member in members:
                    path = self.enum_paths(lm, lf.qualname, member)
                    out.append(Candidate(path, conditions=conds + ([gt] if gt else []) + [f"{how} {member.rpartition('.')[2]} (`{var}`)"],
                                         reachable=_combine(r, None), path=lm.path, line=rline,
                                         via=f"{var}.get_path() over {lf.qualname}()", enum=member,
                                         reason=None if path else f"no class path known for {member}"))
        if not out:
            out.append(Candidate(None, conditions=conds, reachable=reach, path=mod.path, line=line, via=f"{var}.get_path()",
                                 reason=f"`{var}` is chosen at run time and no priority list was found"))
        return out

    def _priority_lists(self, mod, f, cv, depth, seen):
        """Functions reached from ``f`` (depth 2) that return list literals of enum members."""
        if depth > 2 or (mod.name, f.qualname) in seen:
            return []
        seen.add((mod.name, f.qualname))
        out = []
        if any(t.startswith("[") and "." in t for t, _g, _l in f.return_alts):
            out.append((mod, f))
        for cs in mod.summary.calls_in(f.qualname):
            if not cs.func or cs.func.split(".", 1)[0] in ("logger", "super", "len", "sorted", "range", "enumerate"):
                continue
            if cs.func.startswith(("cls.", "self.")):
                v = self.r.class_attr(cv.module, cv.qual, cs.func.split(".", 1)[1], Walk())
            else:
                v = self.r.resolve_dotted(mod, f.qualname, cs.func, Walk(), line=cs.line)
            if v is not None and v.kind == ValKind.FUNCTION and v.func is not None and v.module is not None and v.module.workspace:
                out.extend(self._priority_lists(v.module, v.func, cv, depth + 1, seen))
        return out

    def _dict_items(self, mod, f, name: str, key: str, conds, reach, line) -> list[Candidate]:
        how, bindings = mod.summary.binding_of(f.qualname, name)
        if not bindings and how == "module":
            bindings = mod.summary.bindings.get(name, [])
        d = next((b for b in bindings if b.kind == "dict"), None)
        if d is None:
            return [Candidate(None, conditions=conds, reachable=reach, path=mod.path, line=line, via="dict item",
                              reason=f"`{name}` is not a literal dict")]
        out = []
        for k, v in d.alternatives:
            c = f"{key} == {k}"
            r = _combine(reach, self.r.profile.evaluate(mod, f.qualname, c))
            lit = _literal_str(v) if v else None
            if lit:
                out.append(Candidate(lit, conditions=conds + [c], reachable=r, path=mod.path, line=d.line, via=f"{name}[{k}]"))
            elif v.endswith(".get_path()"):
                enum_text = v[: -len(".get_path()")]
                path = self.enum_paths(mod, f.qualname, enum_text)
                out.append(Candidate(path, conditions=conds + [c], reachable=r, path=mod.path, line=d.line,
                                     via=f"{name}[{k}]", enum=enum_text))
        return out
