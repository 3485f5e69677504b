"""AL115 unloadable-import, AL116 capability-entry-raises, AL117 unregistered-torch-op and AL105's
torch.cuda forms: exact findings on the `loading` fixture and on both example plugins."""

from __future__ import annotations

from pathlib import Path

import pytest
from attnlens.rules import checks_loading as L

from .conftest import FIXTURES, MINI, REPO

ROOT = FIXTURES / "loading"
NEW_RULES = ("AL115", "AL116", "AL117")


@pytest.fixture(scope="module")
def loading(checked):
    ws, eng, findings = checked(ROOT)
    assert not eng.errors, eng.errors
    return ws, eng, findings


def _rel(f, root=ROOT) -> str:
    return Path(f.path).resolve().relative_to(root.resolve()).as_posix()


def _by(findings, rule, rel, line):
    got = [f for f in findings if f.rule == rule and _rel(f) == rel and f.line == line]
    assert len(got) == 1, [(f.rule, _rel(f), f.line) for f in findings if _rel(f) == rel]
    return got[0]


def test_module_level_moved_import_names_what_becomes_unusable(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL115", "fxload/backends/broken.py", 5)
    assert f.severity == "error"
    assert f.message == "`kernels_old` does not exist: this module cannot be imported; unusable: backend FLEX_ATTENTION."
    assert [(u["kind"], u["name"], u["module"]) for u in f.data["unusable"]] == [
        ("backend", "FLEX_ATTENTION", "fxload.backends.broken")]
    assert (f.data["kind"], f.data["missing"], f.data["mode"]) == ("module", "fxload.kernels_old", "module")
    # the range is the module text as written in the statement
    assert (f.col, f.end_col) == (5, 23)


def test_moved_package_suggests_where_it_went_and_names_the_model(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL115", "fxload/models/fxtiny.py", 5)
    assert f.message == ("`customized.rotary` does not exist (`customized` → `layers`?): this module cannot be "
                         "imported; unusable: model FxTinyForCausalLM.")
    assert f.data["moved_to"] == "fxload.layers.rotary"
    assert [(Path(r["path"]).name, r["line"], r["message"]) for r in f.related] == [
        ("rotary.py", 2, "`FxRotary` is defined here")]
    g = _by(findings, "AL115", "fxload/models/fxlm.py", 3)
    assert g.message == ("`FxRMSNormV2` is not in `layers.norms`: this module cannot be imported; unusable: model "
                         "FxLMForCausalLM.")
    assert g.data["kind"] == "name" and g.data["name"] == "FxRMSNormV2"


def test_guarded_imports_name_the_feature_that_disappears(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL115", "fxload/imports.py", 44)
    assert f.severity == "warning"
    assert f.message == ("`old_place.helpers` does not exist (`old_place` → `layers`?): the `except ModuleNotFoundError` "
                         "always runs, silently: `fast_available` is never True.")
    g = _by(findings, "AL115", "fxload/imports.py", 52)
    assert g.message == ("`fxsilent_vendor` is not installed and no requirement declares it: the `except ImportError` "
                         "always runs, silently: `vendor_available` is never True.")
    h = _by(findings, "AL115", "fxload/imports.py", 60)
    assert (h.severity, h.message) == ("warning", "`renamed_helper` is not in `layers.helpers`: `load_old()` raises ImportError.")


def test_one_finding_per_missing_package(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL115", "fxload/vendor_a.py", 5)
    assert f.message == ("`fxundeclared_vendor` is not installed and no requirement declares it: this module and 1 other "
                         "cannot be imported.")
    assert [(Path(r["path"]).name, r["line"], r["message"]) for r in f.related] == [
        ("vendor_b.py", 3, "vendor_b imports it too")]
    assert not [x for x in findings if x.rule == "AL115" and _rel(x) == "fxload/vendor_b.py"]


def test_precision_patterns_are_not_reported(loading):
    _ws, _eng, findings = loading
    al115 = sorted((_rel(f), f.line) for f in findings if f.rule == "AL115")
    assert al115 == [("fxload/backends/broken.py", 5), ("fxload/imports.py", 44), ("fxload/imports.py", 52),
                     ("fxload/imports.py", 60), ("fxload/models/fxlm.py", 3), ("fxload/models/fxtiny.py", 5),
                     ("fxload/vendor_a.py", 5)]


def test_capability_advertisement_whose_entry_raises(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL116", "fxload/backends/fp8.py", 17)
    assert f.message == ("TRITON_ATTN advertises the 'fp8' KV cache, but `_fp8_decode_stub` raises NotImplementedError "
                         "on that path (called at fp8.py:53): it fails when used.")
    assert [(r["line"], r["message"]) for r in f.related] == [
        (53, "`_fp8_decode_stub` raises NotImplementedError when `not (self.sinks is not None) and "
             "self.kv_cache_dtype.startswith(\"fp8\")`")]
    g = _by(findings, "AL116", "fxload/backends/fp8.py", 29)
    assert g.message == ("TRITON_ATTN advertises attention sinks (`supports_sink()`), but `raise NotImplementedError` on "
                         "that path (fp8.py:48): it fails when used.")
    assert g.data["capability"] == "sinks"
    # the dead ROCm refusal, the encoder-only combination and the unadvertised feature are not reported
    assert sorted(x.line for x in findings if x.rule == "AL116") == [17, 29]


def test_unregistered_ops(loading):
    _ws, _eng, findings = loading
    got = sorted((f.line, f.severity, f.message) for f in findings if f.rule == "AL117")
    assert got == [
        (24, "error", "`torch.ops._fxload_C.paged_decode` is registered nowhere in reach (csrc has `paged_decode_v2`): "
                      "this call fails (no such operator)."),
        (32, "error", "`torch.ops._fxload_C.missing_op` is registered nowhere in reach: this call fails (no such operator)."),
        (62, "info", "`torch.ops._fxload_C.unused_missing_op` is registered nowhere in reach: nothing in the workspace "
                     "calls `uncalled_wrapper`."),
    ]


def test_torch_cuda_capability_with_the_documented_value(loading):
    _ws, _eng, findings = loading
    f = _by(findings, "AL105", "fxload/capability.py", 9)
    assert f.message == ("`torch.cuda.get_device_capability()[0] >= 9` is always False here: torch reports the device's "
                         "8.0 (capability.py:7), not an SM version; the returned value at line 9 is always False.")
    assert (f.data["constant"], f.data["documented"]) == (False, "8.0")
    g = _by(findings, "AL105", "fxload/capability.py", 15)
    assert g.data["constant"] is False and g.message.endswith("the `if` body at line 16 never runs.")
    assert sorted(x.line for x in findings if x.rule == "AL105") == [9, 15]


def test_messages_are_short(loading):
    _ws, _eng, findings = loading
    assert max(len(f.message) for f in findings if f.rule in NEW_RULES) <= 200


def test_environment_facts(loading):
    ws, eng, _findings = loading
    assert {"fla", "flash_linear_attention"} <= L.import_names_of("flash-linear-attention")
    assert "zmq" in L.import_names_of("pyzmq") and "cv2" in L.import_names_of("opencv-python-headless")
    assert "cutlass" in L.import_names_of("nvidia-cutlass-dsl")
    assert L._requirement_names(["# fxcommented==0.1", "--extra-index-url x", "a-b>=1 ; python_version>'3'", "c[x]"]) == [
        "a-b", "c"]
    d = L.declared(eng)
    assert "fxvendor_runtime" in d and "fx_declared_pkg" in d and "fxcommented" not in d
    assert L.is_build_artifact(eng, "fxload._C") and L.is_build_artifact(eng, "fxload._version")
    assert not L.is_build_artifact(eng, "fxload.kernels_old")


def test_example_plugins(checked):
    _ws, _eng, findings = checked(MINI)  # the check test_mini_metax reads too
    got = sorted((_rel(f, MINI), f.line, f.severity, f.message) for f in findings if f.rule in NEW_RULES)
    assert got == [
        ("mini_metax/attention/backends/fa_utils.py", 18, "warning",
         "`miniflash` is not installed and no requirement declares it: this module cannot be imported; unusable: "
         "backend FLASH_ATTN, MLA prefill backend FLASH_ATTN."),
        ("mini_metax/platform.py", 26, "warning",
         "`minismi` is not installed and no requirement declares it: the `except ImportError` always runs, silently: "
         "`smi_available` is never True."),
    ]
    assert [f for f in checked(REPO / "examples" / "tiny-npu")[2] if f.rule in NEW_RULES] == []


def test_a_reexported_missing_kernel_is_one_finding_per_binding_import(loading, tmp_path):
    """reexp_user.py and reexp_user2.py call a kernel of a declared but missing package through reexp_utils' import:
    one cause. The workspace report keeps the first module's finding (at its own import, where the editor shows it
    too) with the other module's finding and calls as related locations; the detail names the import that binds
    the package. A per-file check (the editor) keeps each module's own finding."""
    ws, eng, findings = loading
    got = [f for f in findings if f.rule == "AL107" and f.data.get("package") == "fx_declared_pkg"
           and _rel(f).startswith("fxload/reexp")]
    assert [(_rel(f), f.line) for f in got] == [("fxload/reexp_user.py", 5)]
    f = got[0]
    assert f.message == ("`fx_declared_pkg` is not installed: 1 call via this import is unchecked (fused_decode_kernel) "
                         "(also reached from 1 other place).")
    assert f.data["cause"] == "AL107:fx_declared_pkg@fxload/reexp_utils.py:6"
    assert f.detail.startswith("`fx_declared_pkg.kernels.fused_decode_kernel` is imported at fxload/reexp_utils.py:6 "
                               "(and from there at fxload/reexp_user.py:5)")
    rel = [(Path(r["path"]).name, r["line"], r["message"]) for r in f.related]
    assert rel == [("reexp_user.py", 9, "call of fused_decode_kernel"), ("reexp_user2.py", 3, "same cause"),
                   ("reexp_user2.py", 7, "call of fused_decode_kernel"),
                   ("reexp_user2.py", 9, "call of fused_decode_kernel with causal=")]
    from attnlens.rules.engine import Engine

    from .conftest import make_workspace

    fresh = Engine(make_workspace(ws.root, tmp_path))
    for name, line in (("reexp_user.py", 5), ("reexp_user2.py", 3)):
        one = [x for x in fresh.check_module(str(ws.root / "fxload" / name)) if x.rule == "AL107"]
        assert [(x.line, x.data["cause"]) for x in one] == [(line, "AL107:fx_declared_pkg@fxload/reexp_utils.py:6")]
    assert not [x for x in fresh.check_module(str(ws.root / "fxload/reexp_utils.py")) if x.rule == "AL107"]


def test_a_missing_packages_sites_read_only_the_modules_that_spell_it(tmp_path, monkeypatch):
    """Issue 13: the import sites of a missing package (one AL115 finding per package) were looked for in every
    workspace module: checking one file of upstream vLLM that imports `aiter` summarised all 2,234. Only the
    modules whose text spells the package are read (the others are recorded as "does not spell it" for the
    dependency recorders); a module that starts importing it later moves the finding, though the file checked
    did not change."""
    import shutil

    from attnlens.rules import engine as E
    from attnlens.rules.api import ModuleContext, run_steps

    from .conftest import make_workspace

    root = tmp_path / "loading"
    shutil.copytree(ROOT, root)
    ws = make_workspace(root, tmp_path / "cache")
    idx = ws.index
    ctx = ModuleContext(E.engine_for(ws), idx.module("fxload.vendor_a"))
    reads: list[str] = []
    real = idx.module
    monkeypatch.setattr(idx, "module", lambda name: (reads.append(name), real(name))[1])
    sites = run_steps(L._package_site_steps(ctx, "fxundeclared_vendor"))
    monkeypatch.undo()
    assert [(s[0], s[2].line) for s in sites] == [("fxload.vendor_a", 5), ("fxload.vendor_b", 3)]
    assert sorted({n for n in reads if n in idx.ws_files}) == ["fxload.vendor_a", "fxload.vendor_b"]

    vendor_a = str(root / "fxload" / "vendor_a.py")
    ops = root / "fxload" / "ops.py"

    def al115(path) -> list[tuple[int, list]]:
        return [(f.line, [(Path(r["path"]).name, r["line"]) for r in f.related])
                for f in E.check_module(ws, str(path)) if f.rule == "AL115"]

    assert al115(vendor_a) == [(5, [("vendor_b.py", 3)])]
    # ops.py starts importing it: the finding moves to that module (the first by name), vendor_a.py's goes
    ws.query.set_overlay(str(ops), "import fxundeclared_vendor\n\n" + ops.read_text())
    assert al115(vendor_a) == []
    assert al115(ops) == [(1, [("vendor_a.py", 5), ("vendor_b.py", 3)])]
    ws.query.set_overlay(str(ops), None)
    assert al115(vendor_a) == [(5, [("vendor_b.py", 3)])]


def test_the_import_graph_keeps_no_summary_and_reads_again_only_what_changed(tmp_path, monkeypatch):
    """Issue 13: AL115's import graph (what a module that cannot be imported takes with it) kept every workspace
    module's summary (upstream vLLM: 2,234). It reads the modules not loaded without keeping them, remembers each
    module's imports by path and content when no guard had to be evaluated, and after an edit reads again only the
    edited module and those with evaluated guards."""
    import shutil

    from attnlens.rules import engine as E

    from .conftest import make_workspace

    root = tmp_path / "loading"
    shutil.copytree(ROOT, root)
    ws = make_workspace(root, tmp_path / "cache")
    ws.index.SCAN_RETAIN_MAX_MODULES = 0  # a "large" workspace (a small one keeps what its scans read)
    names = sorted(ws.index.ws_files)
    graph = L._import_graph(E.engine_for(ws))
    # kept: only what the guards' evaluation reads (the platform profile)
    assert [n for n in names if ws.query.is_loaded(n)] == ["fxload", "fxload.platform"]
    # the graph of a workspace whose every module is loaded (the reading path of before)
    other = make_workspace(root, tmp_path / "cache2")
    for n in names:
        other.query.module(n)
    assert graph == L._import_graph(E.engine_for(other))
    assert set(graph["shas"]) == set(names) and "fxload.vendor_a" not in graph["rev"]

    eng = E.engine_for(ws)
    impure = [n for n in names if L.content_memo_peek(("al115-imports", ws.index.ws_files[n], eng.current_sha(n))) is None]
    assert len(impure) < len(names) // 2
    reads: list[str] = []
    real = L._module_imports
    monkeypatch.setattr(L, "_module_imports", lambda q, m: (reads.append(m.name), real(q, m))[1])
    vendor_b = root / "fxload" / "vendor_b.py"
    ws.query.set_overlay(str(vendor_b), "from fxload import vendor_a\n" + vendor_b.read_text())
    edited = L._import_graph(E.engine_for(ws))  # an edit: a new engine
    assert sorted(reads) == sorted(set(impure) | {"fxload.vendor_b"})
    assert edited["rev"]["fxload.vendor_a"] == {"fxload.vendor_b"}


def test_an_unregistered_op_names_the_not_installed_package_its_module_imports(tmp_path, checked):
    """AL117 asks the op registry which not-installed packages the calling module imports (``(module, line)`` of
    the call): a refactor of that interface once left every such finding without its provider, silently."""
    from tests.helpers import write_tree

    write_tree(tmp_path, {
        "vx/__init__.py": "",
        "vx/gemm.py": """
            import torch
            import vxkern._C  # noqa: F401


            def caller(x):
                return torch.ops._vxkern_C.gemm(x)
        """,
    })
    _ws, eng, findings = checked(tmp_path)
    assert not eng.errors, eng.errors
    got = [(f.line, f.severity, f.message, f.data.get("providers")) for f in findings if f.rule == "AL117"]
    assert got == [(6, "info", "`torch.ops._vxkern_C.gemm` is not in the source build; nothing in the workspace calls "
                               "`caller`.", ["vxkern._C"])]
