"""Runtime introspection through the agent: torch ops, Triton kernels, Python callables, extensions."""

from __future__ import annotations

import pytest

from tests.probe_fixtures.runtime_support import FIXTURES, fixture_env, line_of, require_target, shared_pool

OPS = FIXTURES / "probefix" / "ops.py"
KERNELS = FIXTURES / "probefix" / "kernels.py"


@pytest.fixture(scope="module", params=["jit", "interpret"])
def agent(request):
    """Both modes: normal ``@triton.jit`` (JITFunction) and TRITON_INTERPRET=1 (InterpretedFunction)."""
    py = require_target(triton=True)
    env = fixture_env()
    if request.param == "interpret":
        env["TRITON_INTERPRET"] = "1"
    return shared_pool(request.config).get(py, env), request.param


def intro(agent, **params):
    ag, _ = agent
    rep = ag.request("introspect", params, timeout=120)
    assert rep.ok, rep.to_dict()
    return rep.result


def test_torch_library_op_schema_and_dispatch_file_line(agent):
    r = intro(agent, symbol="probefix_ops::reshape_and_cache_flash", module="probefix.ops")
    assert r["status"] == "ok" and r["kind"] == "torch_op"
    ov = r["per_overload"]["default"]
    assert ov["schema"].startswith("probefix_ops::reshape_and_cache_flash(Tensor key, Tensor value, Tensor(a!) key_cache")
    assert ov["is_mutable"] is True
    assert [a["name"] for a in ov["arguments"] if a["mutable"]] == ["key_cache", "value_cache"]
    kernels = ov["dispatch"]["kernels"]
    assert [k["key"] for k in kernels] == ["CPU"]
    # Python Library registrations point at the line that built the Library object
    lib_line = line_of(OPS, 'torch.library.Library("probefix_ops"')
    assert kernels[0]["file"] == str(OPS) and kernels[0]["line"] == lib_line
    assert ov["dispatch"]["debug"] == f"registered at {OPS}:{lib_line}"
    assert ov["has_kernel"]["CPU"] is True and ov["has_kernel"]["CUDA"] is False
    assert {"kind": "python", "file": str(OPS), "exists": True} in r["providers"]


def test_custom_op_user_function_is_found(agent):
    r = intro(agent, symbol="torch.ops.probefix_ops.scaled_add", module="probefix.ops")
    assert r["per_overload"]["default"]["schema"] == "probefix_ops::scaled_add(Tensor x, Tensor y, float alpha) -> Tensor"
    keys = {k["key"] for k in r["per_overload"]["default"]["dispatch"]["kernels"]}
    assert "CompositeExplicitAutograd[alias]" in keys
    assert r["custom_op"]["file"] == str(OPS)
    assert r["custom_op"]["line"] == line_of(OPS, "def scaled_add(")


def test_aten_overload(agent):
    r = intro(agent, symbol="aten::add.Tensor")
    assert list(r["per_overload"]) == ["Tensor"]
    assert r["per_overload"]["Tensor"]["schema"].startswith("aten::add.Tensor(Tensor self, Tensor other")
    assert any(k["key"] == "CPU" for k in r["per_overload"]["Tensor"]["dispatch"]["kernels"])


def test_unknown_op_is_not_found(agent):
    r = intro(agent, symbol="nosuchns::nosuchop")
    assert r["status"] == "not_found"


def test_triton_kernel_params_and_constexprs(agent):
    _, mode = agent
    r = intro(agent, symbol="probefix.kernels:scale_kernel")
    assert r["kind"] == "triton_kernel" and r["interpreted"] is (mode == "interpret")
    assert r["arg_names"] == ["x_ptr", "y_ptr", "n", "scale", "BLOCK", "EVEN"]
    assert r["constexprs"] == ["BLOCK", "EVEN"]
    even = [p for p in r["parameters"] if p["name"] == "EVEN"][0]
    assert even["default"] == "False"
    assert r["file"] == str(KERNELS)
    assert r["line"] == line_of(KERNELS, "def scale_kernel(")  # the def, not the decorator
    assert r["decorator_line"] == r["line"] - 1


def test_autotuned_triton_kernel_is_unwrapped(agent):
    r = intro(agent, symbol="probefix.kernels.scale_kernel_tuned")  # dotted spelling
    assert r["wrappers"][0]["wrapper"] == "autotune"
    assert r["wrappers"][0]["keys"] == ["n"]
    assert [c["kwargs"] for c in r["wrappers"][0]["configs"]] == [{"BLOCK": 64}, {"BLOCK": 128}]
    assert r["constexprs"] == ["BLOCK"]
    assert r["line"] == line_of(KERNELS, "def scale_kernel_tuned(")


def test_python_callable_swallowing_kwargs(agent):
    r = intro(agent, symbol="probefix.varlen:flash_attn_varlen_func_ignores_sinks")
    assert r["kind"] == "python" and r["var_keyword"] is True
    names = [p["name"] for p in r["parameters"]]
    assert "s_aux" not in names  # accepted only through **kwargs: a claim a probe must check
    assert r["source_file"].endswith("probefix/varlen.py")
    assert r["line"] == line_of(FIXTURES / "probefix" / "varlen.py", "def flash_attn_varlen_func_ignores_sinks(")
    assert "BROKEN" in r["doc"]


def test_pybind_builtin_and_extension_module(agent):
    r = intro(agent, symbol="torch._C._dispatch_dump")
    assert r["signature"] is None and r["doc_signature"] == "_dispatch_dump(arg0: str) -> str"
    assert r["bound_to_type"].startswith("pybind11_detail_function_record")
    assert r["extension"]["sha256"] and len(r["extension"]["sha256"]) == 64
    e = intro(agent, symbol="torch._C", kind="extension")
    assert e["status"] == "ok" and e["file_facts"]["exports_pyinit"] is True
    assert e["module_file"].endswith(".so")


def test_import_error_is_a_finding(agent):
    r = intro(agent, symbol="probefix.badimport:anything")
    assert r["status"] == "import_error"
    assert r["import_error"]["module"] == "probefix.badimport"
    assert r["import_error"]["message"] == "libmcruntime.so: cannot open shared object file: No such file or directory"
    nf = intro(agent, symbol="probefix.varlen:no_such_attr")
    assert nf["status"] == "not_found" and "no_such_attr" in nf["message"]
    missing = intro(agent, symbol="no_such_package_xyz.mod:f")
    assert missing["status"] == "import_error" and missing["import_error"]["type"] == "ModuleNotFoundError"


def test_missing_dependency_inside_a_module_is_not_a_shorter_prefix(agent, tmp_path):
    """`pkg.mod.attr` where pkg.mod exists but imports a missing module: evidence, not 'try pkg'."""
    r = intro(agent, symbol="probefix.needs_missing.attr")
    assert r["status"] == "import_error"
    assert r["import_error"]["module"] == "probefix.needs_missing"
    assert "mcoplib" in r["import_error"]["message"]


def test_host_api_batch_and_agent_failure(request):
    from attnlens.runtime import introspect as I

    py = require_target(triton=True)
    pool = shared_pool(request.config)
    env = fixture_env()
    res = I.introspect_many(py, [{"symbol": "probefix.kernels:scale_kernel"},
                                 {"symbol": "probefix_ops::scaled_add", "module": "probefix.ops"},
                                 {"symbol": "probefix.badimport:x"}], env=env, pool=pool)
    assert [r["status"] for r in res] == ["ok", "ok", "import_error"]
    assert res[0]["kind"] == "triton_kernel" and res[1]["kind"] == "torch_op"
    crashed = I.introspect(py, "probefix.segv_import:x", env=env, pool=pool)
    assert crashed["status"] == "crashed" and "signal 11" in crashed["message"]
    assert I.introspect(py, "probefix.kernels:scale_kernel", env=env, pool=pool)["status"] == "ok"  # restarted
    with pytest.raises(ValueError):
        I.introspect(py, "x", kind="nope", pool=pool)
