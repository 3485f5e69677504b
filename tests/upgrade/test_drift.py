"""Two-version drift on a fake upstream (fakevllm 1.0.0 -> 2.0.0) and a plugin written against 1.0.0."""

from __future__ import annotations

import pytest
from attnlens.upgrade import DIAGNOSTIC_SOURCE
from attnlens.upgrade.drift import drift_findings, drift_report, hover_note

from .fixtures import make

P = "miniplug.attention.backends.flash"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("drift")
    ws, old, _new = make(tmp)
    rep = drift_report(ws, old)
    yield ws, old, rep
    ws.close()


def _item(rep, sym):
    it = rep.item(sym)
    assert it is not None, f"{sym} not in {[i.symbol for i in rep.items]}"
    return it


def _aspects(it, status=None):
    return {c.aspect for c in it.changes if status is None or c.status == status}


def test_versions_named(report):
    _ws, _old, rep = report
    assert rep.old_label == "1.0.0" and rep.new_label == "2.0.0"
    assert rep.subject["kind"] == "worktree"


def test_counterparts_from_registry_roles_and_names(report):
    _ws, _old, rep = report
    assert _item(rep, f"{P}.MacaFlashBackend").counterpart_new == "fakevllm.attention.backends.flash.FlashBackend"
    assert _item(rep, f"{P}.MacaFlashBackend").via == "registry"
    assert _item(rep, f"{P}.FlashImpl").via == "impl"
    assert _item(rep, f"{P}.FlashBuilder").via == "builder"
    assert _item(rep, f"{P}.FlashMetadata").via == "same_module"
    assert rep.item(f"{P}.plugin_only").counterpart_new is None  # plugin-only: listed only for its call drift


def test_signature_change(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.FlashBuilder.build")
    assert it.status == "changed_upstream" and it.flagged
    sig = next(c for c in it.changes if c.aspect == "signature")
    assert sig.rule == "AL301" and "gained `fast_build`" in sig.message
    assert "fast_build" in sig.data["new_signature"] and "fast_build" not in sig.data["old_signature"]


def test_removed_symbol_and_removed_import(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.old_util")
    assert it.status == "removed_upstream"
    assert any(c.rule == "AL302" and "no longer exists" in c.message for c in it.changes)
    mod = _item(rep, P)  # the module item carries its imports
    imp = [c for c in mod.changes if c.aspect == "imports"]
    assert imp and imp[0].status == "removed_upstream" and imp[0].rule == "AL302"
    assert "fakevllm.attention.backends.flash.old_util" in imp[0].message and imp[0].line == 5


def test_renamed_method(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.FlashImpl.scale")
    assert it.status == "removed_upstream"
    assert any("renamed to fakevllm.attention.backends.flash.FlashImpl.softmax_scale" in c.message for c in it.changes)


def test_new_hook_overridden_by_siblings(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.MacaFlashBackend")
    hooks = [c for c in it.changes if c.aspect == "hooks"]
    assert hooks and hooks[0].status == "new_hook" and hooks[0].rule == "AL303"
    assert hooks[0].data["hook"] == "supports_sinks"
    assert hooks[0].data["counterpart_overrides"] is True
    assert "fakevllm.attention.backends.other.OtherBackend" in hooks[0].data["overridden_by"]
    assert hooks[0].severity == "warning" and it.flagged


def test_dataclass_field_change(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.FlashMetadata")
    ch = next(c for c in it.changes if c.aspect == "fields")
    assert ch.status == "changed_upstream" and ch.rule == "AL304"
    assert "gained field `seq_lens" in ch.message


def test_body_change_with_diff(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.helper")
    ch = next(c for c in it.changes if c.aspect == "body")
    assert ch.status == "changed_upstream" and ch.rule == "AL305"
    assert "the plugin still has the old upstream body" in ch.message
    assert "+    y = x + 1" in ch.data["diff"] and ch.data["new_link"].startswith("file://")


def test_retained_adaptation(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.FlashImpl.forward")
    # upstream 2.0.0 added `sinks=None`, which the plugin already had: not a new problem
    assert it.status == "retained_adaptation" and not it.flagged
    assert "signature" in _aspects(it, "retained_adaptation")
    assert "body" in _aspects(it, "retained_adaptation")  # the MetaX body change upstream did not touch


def test_unchanged(report):
    _ws, _old, rep = report
    assert _item(rep, f"{P}.stable").status == "unchanged"
    assert _item(rep, f"{P}.MacaFlashBackend.get_name").status == "unchanged"


def test_callee_signature_change_breaks_call(report):
    _ws, _old, rep = report
    it = _item(rep, f"{P}.plugin_only")
    call = next(c for c in it.changes if c.aspect == "calls")
    assert call.rule == "AL307" and call.severity == "error"
    assert "does not pass required `c`" in call.message and call.line is not None


def test_findings_and_hover(report, tmp_path):
    ws, old, rep = report
    fs = drift_findings(ws, old)
    rules = {f["rule"] for f in fs}
    assert {"AL301", "AL302", "AL303", "AL304", "AL305", "AL307"} <= rules
    assert all(f["source"] == DIAGNOSTIC_SOURCE for f in fs)
    f = next(f for f in fs if f["rule"] == "AL301")
    assert f["path"].endswith("flash.py") and f["line"] > 1 and f["end_col"] > f["col"]
    note = hover_note(ws, f"{P}.FlashBuilder.build", old)
    assert note.startswith("upstream changed between 1.0.0 and 2.0.0") and "fast_build" in note
    assert hover_note(ws, f"{P}.stable", old) is None
    assert "retained adaptation" in hover_note(ws, f"{P}.FlashImpl.forward", old)


def test_hover_uses_configured_old_version(tmp_path):
    ws, old, _ = make(tmp_path)
    pp = ws.root / "pyproject.toml"
    pp.write_text(pp.read_text() + f'from = "{old.root}"\n')
    note = hover_note(ws, f"{P}.FlashBuilder.build")
    assert note is not None and "fast_build" in note
    ws.close()


def test_explicit_to_version_and_scope(tmp_path):
    ws, old, new = make(tmp_path)
    rep = drift_report(ws, old, new, globs=["miniplug/attention/backends/flash.py"])
    assert rep.new_label == "2.0.0"
    assert all(it.path.endswith("flash.py") or it.kind == "patch" for it in rep.items)
    assert rep.item(f"{P}.FlashBuilder.build").status == "changed_upstream"
    ws.close()


def test_upstream_map_config(tmp_path):
    ws, old, _ = make(tmp_path)
    # a plugin module at another path, mapped explicitly
    (ws.root / "miniplug" / "ported.py").write_text("def stable(x):\n    return x * 3\n\n\ndef helper(x):\n    return x + 1\n")
    (ws.root / "attnlens.toml").write_text('[upstream-map]\n"miniplug.ported" = "fakevllm.attention.backends.flash"\n')
    ws.index.refresh()
    rep = drift_report(ws, old, globs=["miniplug/ported.py"])
    it = rep.item("miniplug.ported.helper")
    assert it is not None and it.counterpart_new == "fakevllm.attention.backends.flash.helper"
    assert it.status == "changed_upstream"
    ws.close()
