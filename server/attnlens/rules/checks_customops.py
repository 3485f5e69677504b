"""AL120 custom-op-parameters: a plugin variant of an upstream custom op (and its fake)
that does not accept a parameter upstream's op function takes (see :mod:`.opvariants`)."""

from __future__ import annotations

from . import opvariants as OV
from .checks_calls import _short
from .api import Rule, check, rule

AL120 = rule(Rule(
    "AL120", "custom-op-parameters", "warning",
    "A plugin function registered as a variant of an upstream custom op (or its fake twin) lacks a parameter "
    "that upstream's op function takes.",
    "The variant mirrors upstream's op (same role, registered with `direct_register_custom_op`, called where "
    "upstream calls its op): when the layer passes what upstream's op now takes, the variant raises TypeError, "
    "and a fake whose signature differs from its op breaks torch.compile tracing. Quick fix: add the parameter "
    "with upstream's default (`attnlens fix`).",
    ("upgrade", "custom_op"),
))


def variant_finding_steps(engine, mod):
    """The upstream parameters each op function and fake registered in ``mod`` lacks (memoised per engine
    and module), as steps (``api.run_steps``: a generator that yields after each registration it pairs).
    Per module, not for the whole workspace at once: the two checkers of a cold check each pair only the
    registrations of the modules they check (it was 0.45 s computed in both)."""

    def compute():
        out = []
        idx = engine.ws.index
        if not idx.per_text(mod.path, ("contains", OV.REGISTER), lambda t: t is not None and OV.REGISTER in t):
            return out
        class_ops = engine.memo("op_variant_class_ops", dict)  # shared by the modules this engine pairs
        try:
            vs = yield from OV.variant_steps_in(engine.ws, mod, class_ops)
        except RecursionError:
            return out
        for v in vs:
            for which in ("func", "fake"):
                pf = v.plugin.function(which)
                uf = v.upstream.function(which) or v.upstream.function("func")
                lacks = OV.missing(pf, uf)
                if pf is None or uf is None or not lacks:
                    continue
                out.append({"variant": v, "which": which, "plugin_f": pf, "upstream_f": uf, "missing": lacks})
        return out

    return (yield from engine.memo_steps(("op_variant_findings", mod.name), compute))


@check("AL120")
def custom_op_parameters(ctx):
    for d in (yield from variant_finding_steps(ctx.engine, ctx.mod)):
        v = d["variant"]
        if v.plugin.module.path != ctx.mod.path:
            continue
        pf, uf = d["plugin_f"], d["upstream_f"]
        um = v.upstream.module
        where = f"{_short(um.path)}:{uf.line}"
        names = ", ".join(f"`{n}`" for n in d["missing"])
        role = "fake of " if d["which"] == "fake" else ""
        msg = (f"`{pf.name}` ({role}variant of {v.upstream.qualname}) lacks upstream's {names}: calls written for "
               "upstream's op fail.")
        detail = (f"Registered as {v.plugin.qualname} (line {v.plugin.line}); paired with upstream's "
                  f"{v.upstream.qualname} by {'its name' if v.via == 'name' else 'the call site of its layer'}; "
                  f"upstream's {'fake' if d['which'] == 'fake' else 'op function'} `{uf.name}` is at {where}.")
        ctx.add("AL120", *ctx.def_range(pf), msg, detail=detail, op=v.plugin.qualname, upstream_op=v.upstream.qualname,
                role=d["which"], variant=pf.qualname, upstream_function=f"{um.name}.{uf.qualname}",
                upstream_location=f"{um.path}:{uf.line}", missing=list(d["missing"]), via=v.via)
