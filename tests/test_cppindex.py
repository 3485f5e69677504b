"""Tests for attnlens.cppindex (C++ registration index) and attnlens.elfscan."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from attnlens.cppindex import (
    CppIndex,
    FileSummary,
    build_index,
    iter_cpp_files,
    lazy_index,
    parse_schema,
    resolve_namespace,
    summarize_cpp,
)
from attnlens.elfscan import ExtensionInfo, find_schema, scan_extension

HERE = Path(__file__).resolve().parent
FIXTURE_PROJECT = HERE / "fixtures" / "cpp" / "project"
MINI_METAX_CSRC = HERE.parent / "examples" / "mini-metax" / "csrc"
VLLM_SO = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / (
    "site-packages/vllm/_C_stable_libtorch.abi3.so"
)


def line_of(src: str, needle: str) -> int:
    """1-based line of the unique line containing ``needle``."""
    hits = [i for i, ln in enumerate(src.splitlines(), 1) if needle in ln]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


# --------------------------------------------------------------------------- registrations

REG_SRC = textwrap.dedent(
    """\
    #include "core/registration.h"
    #include <torch/library.h>

    // Registration with a split schema and a raw string
    TORCH_LIBRARY_EXPAND(TORCH_EXTENSION_NAME, ops) {
      ops.def(
          "paged_attention_v1(Tensor! out, Tensor query, "
          "Tensor key_cache,"
          "   int block_size) -> ()");
      ops.def(R"SCHEMA(rotary(Tensor positions, Tensor(a!) query, *, bool neox=True) -> Tensor(a!))SCHEMA");
      ops.def(TORCH_SELECTIVE_SCHEMA("selective(Tensor x) -> Tensor"));
      ops.def("with_fn", &vllm::with_fn);
      ops.def("tagged(Tensor x) -> Tensor", {at::Tag::needs_fixed_stride_order});
      ops.impl("paged_attention_v1", torch::kCUDA, &paged_attention_v1);
    #ifdef USE_ROCM
      ops.def("rocm_only(Tensor x) -> ()");
    #else
      ops.def("cuda_only(Tensor x) -> ()");
    #endif
      // ops.def("commented(Tensor x) -> ()");
    }

    TORCH_LIBRARY_IMPL_EXPAND(TORCH_EXTENSION_NAME, CUDA, ops) {
      ops.impl("rotary", &rotary);
      ops.impl("selective", TORCH_BOX(&ns::selective_impl));
      ops.impl("tagged", torch::dispatch(c10::DispatchKey::Meta, TORCH_FN(tagged_meta)));
      ops.impl("cuda_only", cuda_only);
    }

    TORCH_LIBRARY_EXPAND(CONCAT(TORCH_EXTENSION_NAME, _cache_ops), cache_ops) {
      cache_ops.def("reshape_and_cache_flash(Tensor key, Tensor! key_cache) -> ()");
      cache_ops.impl("reshape_and_cache_flash", torch::kCUDA, &reshape_and_cache_flash);
    }

    STABLE_TORCH_LIBRARY_FRAGMENT(_C_stable, m) {
      m.def("stable_op(Tensor a) -> Tensor");
      m.def("chained_a(Tensor a) -> ()").def("chained_b(Tensor b) -> ()");
    }

    STABLE_TORCH_LIBRARY_IMPL(_C_stable, CompositeExplicitAutograd,
                              m) {
      m.impl("stable_op", TORCH_BOX(&stable_op));
    }

    TORCH_LIBRARY(plain, m) {
      m.def("lambda_op(Tensor a) -> Tensor");
      m.impl("lambda_op", [](const at::Tensor& a) { return a; });
      m.impl("catch_all", &catch_all_fn);
    }

    TORCH_LIBRARY_FRAGMENT(frag, m) { m.def("frag_op.out(Tensor a, *, Tensor(a!) out) -> Tensor(a!)"); }

    TORCH_LIBRARY_IMPL(frag, PrivateUse1, m) { m.impl("frag_op.out", frag_op_impl<float>); }

    // TORCH_LIBRARY(commented_out, m) { m.def("x() -> ()"); }
    #define MY_REG TORCH_LIBRARY(in_macro, m)
    void not_registration() { other.def("not_an_op() -> ()"); }
    """
)


@pytest.fixture(scope="module")
def reg() -> FileSummary:
    return summarize_cpp(REG_SRC.encode(), "csrc/reg.cpp")


def test_blocks(reg: FileSummary) -> None:
    got = [(b.macro, b.namespace, b.dispatch_key, b.module_var, b.line) for b in reg.blocks]
    assert got == [
        ("TORCH_LIBRARY_EXPAND", "_C", None, "ops", 5),
        ("TORCH_LIBRARY_IMPL_EXPAND", "_C", "CUDA", "ops", 23),
        ("TORCH_LIBRARY_EXPAND", "_C_cache_ops", None, "cache_ops", 30),
        ("STABLE_TORCH_LIBRARY_FRAGMENT", "_C_stable", None, "m", 35),
        ("STABLE_TORCH_LIBRARY_IMPL", "_C_stable", "CompositeExplicitAutograd", "m", 40),
        ("TORCH_LIBRARY", "plain", None, "m", 45),
        ("TORCH_LIBRARY_FRAGMENT", "frag", None, "m", 51),
        ("TORCH_LIBRARY_IMPL", "frag", "PrivateUse1", "m", 53),
    ]
    assert reg.blocks[2].namespace_expr == "CONCAT(TORCH_EXTENSION_NAME, _cache_ops)"
    assert [b.kind for b in reg.blocks] == ["def", "impl", "def", "fragment", "impl", "def", "fragment", "impl"]
    assert (reg.blocks[0].end_line, reg.blocks[4].end_line) == (21, 43)
    assert reg.errors == []


def test_defs(reg: FileSummary) -> None:
    got = [(d.op, d.line, d.col, d.block_line) for d in reg.defs]
    assert got == [
        ("_C::paged_attention_v1", 6, 3, 5),
        ("_C::rotary", 10, 3, 5),
        ("_C::selective", 11, 3, 5),
        ("_C::with_fn", 12, 3, 5),
        ("_C::tagged", 13, 3, 5),
        ("_C::rocm_only", 16, 3, 5),  # both sides of #ifdef
        ("_C::cuda_only", 18, 3, 5),
        ("_C_cache_ops::reshape_and_cache_flash", 31, 3, 30),
        ("_C_stable::stable_op", 36, 3, 35),
        ("_C_stable::chained_a", 37, 3, 35),
        ("_C_stable::chained_b", 37, 38, 35),  # the ".def" of the chained call
        ("plain::lambda_op", 46, 3, 45),
        ("frag::frag_op.out", 51, 35, 51),
    ]
    by_op = {d.op: d.schema for d in reg.defs}
    # split over three literals, whitespace normalised
    assert by_op["_C::paged_attention_v1"] == (
        "paged_attention_v1(Tensor! out, Tensor query, Tensor key_cache, int block_size) -> ()"
    )
    assert by_op["_C::rotary"] == "rotary(Tensor positions, Tensor(a!) query, *, bool neox=True) -> Tensor(a!)"
    assert by_op["_C::selective"] == "selective(Tensor x) -> Tensor"
    assert by_op["_C::with_fn"] == "with_fn"
    assert "_C::commented" not in by_op and not any("not_an_op" in op for op in by_op)
    assert not any(b.namespace == "in_macro" or b.namespace == "commented_out" for b in reg.blocks)


def test_impls(reg: FileSummary) -> None:
    got = [(i.op, i.dispatch_key, i.function, i.line, i.block_line) for i in reg.impls]
    assert got == [
        ("_C::with_fn", "CompositeImplicitAutograd", "vllm::with_fn", 12, 5),  # def with a function
        ("_C::paged_attention_v1", "CUDA", "paged_attention_v1", 14, 5),  # explicit torch::kCUDA
        ("_C::rotary", "CUDA", "rotary", 24, 23),
        ("_C::selective", "CUDA", "ns::selective_impl", 25, 23),  # TORCH_BOX stripped, ns kept
        ("_C::tagged", "Meta", "tagged_meta", 26, 23),  # torch::dispatch(key, TORCH_FN(fn))
        ("_C::cuda_only", "CUDA", "cuda_only", 27, 23),  # bare function name
        ("_C_cache_ops::reshape_and_cache_flash", "CUDA", "reshape_and_cache_flash", 32, 30),
        ("_C_stable::stable_op", "CompositeExplicitAutograd", "stable_op", 42, 40),
        ("plain::lambda_op", "CompositeImplicitAutograd", None, 47, 45),  # lambda
        ("plain::catch_all", "CompositeImplicitAutograd", "catch_all_fn", 48, 45),
        ("frag::frag_op.out", "PrivateUse1", "frag_op_impl<float>", 53, 53),
    ]


def test_extension_name_and_namespace_resolution() -> None:
    s = summarize_cpp(REG_SRC.encode(), "reg.cpp", extension_name="_vllm_C")
    assert [b.namespace for b in s.blocks[:3]] == ["_vllm_C", "_vllm_C", "_vllm_C_cache_ops"]
    assert s.defs[0].op == "_vllm_C::paged_attention_v1"
    assert resolve_namespace("CONCAT(TORCH_EXTENSION_NAME, _cache_ops)") == "_C_cache_ops"
    assert resolve_namespace("CONCAT( CONCAT(TORCH_EXTENSION_NAME, _x), _y )", "_E") == "_E_x_y"
    assert resolve_namespace("_moe_C") == "_moe_C"


def test_json_roundtrip(reg: FileSummary) -> None:
    data = json.loads(json.dumps(reg.to_json()))
    back = FileSummary.from_json(data)
    assert back == reg
    assert FileSummary.from_json(json.dumps(reg.to_json())) == reg
    with pytest.raises(ValueError):
        FileSummary.from_json({"format": -1})
    moved = reg.with_path("elsewhere.cpp")
    assert {d.path for d in moved.defs} == {"elsewhere.cpp"} and moved.sha256 == reg.sha256


# --------------------------------------------------------------------------- functions

FUNC_SRC = textwrap.dedent(
    """\
    #include <cuda_runtime.h>
    namespace vllm {
    template <typename T>
    __global__ void reshape_and_cache_flash_kernel(const T* __restrict__ key,
                                                   T* key_cache) {
      key_cache[0] = key[0];
    }

    template <typename T>
    __global__ __launch_bounds__(256) void bounded_kernel(T* x) { x[0] = 0; }

    struct Helper {
      int get() const { return 1; }
    };
    namespace {
    __device__ __forceinline__ float dev_helper(float x) { return x; }
    }
    }  // namespace vllm

    void vllm::with_fn(at::Tensor& x) {}

    // reshape_and_cache_flash launches the kernel
    void reshape_and_cache_flash(torch::Tensor& key,  // [num_tokens]
                                 torch::Tensor& key_cache) {
      vllm::reshape_and_cache_flash_kernel<float><<<1, 1>>>(nullptr, nullptr);
    }

    __global__ void paged_attention_v1(float* out) {}
    void paged_attention_v1(torch::Tensor& out) {}

    #ifdef USE_ROCM
    int both_sides(int a) { return a; }
    #else
    long both_sides(long a) { return a; }
    #endif

    DISPATCH_BY_TYPE(x) { }
    void declared_only(int a);
    """
)


def test_functions() -> None:
    s = summarize_cpp(FUNC_SRC.encode(), "csrc/kernels.cu")
    got = [(f.name, f.qualname, f.line, f.is_kernel) for f in s.functions]
    assert got == [
        ("reshape_and_cache_flash_kernel", "vllm::reshape_and_cache_flash_kernel", 4, True),
        ("bounded_kernel", "vllm::bounded_kernel", 10, True),
        ("get", "vllm::Helper::get", 13, False),
        ("dev_helper", "vllm::dev_helper", 16, False),  # anonymous namespace is transparent
        ("with_fn", "vllm::with_fn", 20, False),
        ("reshape_and_cache_flash", "reshape_and_cache_flash", 23, False),
        ("paged_attention_v1", "paged_attention_v1", 28, True),
        ("paged_attention_v1", "paged_attention_v1", 29, False),
        ("both_sides", "both_sides", 32, False),  # both sides of #ifdef
        ("both_sides", "both_sides", 34, False),
    ]
    sig = {(f.name, f.line): f.signature for f in s.functions}
    assert sig[("reshape_and_cache_flash", 23)] == (
        "void reshape_and_cache_flash(torch::Tensor& key, torch::Tensor& key_cache)"
    )
    assert sig[("bounded_kernel", 10)] == "__global__ __launch_bounds__(256) void bounded_kernel(T* x)"
    assert sig[("get", 13)] == "int get() const"
    assert all("\n" not in f.signature for f in s.functions)


def test_index_prefers_host_definition_and_resolves_ops() -> None:
    idx = CppIndex(
        [summarize_cpp(REG_SRC.encode(), "csrc/reg.cpp"), summarize_cpp(FUNC_SRC.encode(), "csrc/kernels.cu")]
    )
    info = idx.op("_C::paged_attention_v1")
    assert info is not None and len(info.defs) == 1 and len(info.impls) == 1
    d = info.impls[0].definition
    assert d is not None and (d.line, d.is_kernel) == (29, False)  # not the __global__ of the same name
    flash = idx.op("torch.ops._C_cache_ops.reshape_and_cache_flash.default")
    assert flash is not None and flash.impls[0].definition is not None
    assert flash.impls[0].definition.line == 23
    with_fn = idx.op("_C::with_fn")
    assert with_fn is not None and with_fn.impls[0].definition.qualname == "vllm::with_fn"
    assert idx.op("_C::selective").impls[0].definition is None  # ns::selective_impl is not indexed
    assert idx.op("plain::lambda_op").impls[0].definition is None
    assert idx.schema("_C::rotary") == "rotary(Tensor positions, Tensor(a!) query, *, bool neox=True) -> Tensor(a!)"
    assert idx.schema("_C::with_fn") is None  # registered by name only
    assert idx.schema("nope::nope") is None and idx.op("nope::nope") is None
    assert "_C_stable::chained_b" in idx.ops() and "plain::catch_all" in idx.ops()
    assert [f.line for f in idx.functions_named("both_sides")] == [32, 34]
    assert [f.qualname for f in idx.functions_named("vllm::with_fn")] == ["vllm::with_fn"]
    ps = idx.op("_C::rotary").parsed_schema()
    assert ps is not None and [a.name for a in ps.mutable_arguments] == ["query"]
    assert json.loads(json.dumps(info.to_json()))["impls"][0]["definition"]["line"] == 29


# --------------------------------------------------------------------------- robustness


def test_robust_inputs() -> None:
    broken = b"""void broken( { int x = ; }}}
template <class T> struct S { void f( } ;
TORCH_LIBRARY(brk, m) {
  m.def("ok(Tensor a) -> ()");
  m.impl("ok", &ok_impl);
}
int after(int a) { return a; }
"""
    s = summarize_cpp(broken, "broken.cpp")
    assert [(d.op, d.line) for d in s.defs] == [("brk::ok", 4)]
    assert [(i.op, i.dispatch_key, i.function) for i in s.impls] == [("brk::ok", "CompositeImplicitAutograd", "ok_impl")]
    assert [(f.name, f.line) for f in s.functions] == [("after", 7)]
    assert s.errors and s.errors[0].startswith("syntax:")

    garbage = bytes(range(256)) * 40
    g = summarize_cpp(garbage, "garbage.cu")
    assert g.errors == ["skipped: binary content"] and not g.defs and not g.functions

    latin1 = b'// caf\xe9\nTORCH_LIBRARY(x, m) { m.def("op(Tensor a) -> ()"); }\nint f\xe9e() { return 0; }\n'
    lt = summarize_cpp(latin1, "latin1.cpp")
    assert [d.op for d in lt.defs] == ["x::op"]

    for src in (b"", b"   \n\n", b"TORCH_LIBRARY(", b"TORCH_LIBRARY(x, m) { m.def(", b"}}}}{{{{", b"\xff\xfe\xfd"):
        r = summarize_cpp(src, "odd.cpp")
        assert isinstance(r, FileSummary)
    assert summarize_cpp(b"", "e.cpp").errors == []
    assert summarize_cpp("TORCH_LIBRARY(s, m) { m.def(\"a() -> ()\"); }", "str.cpp").defs[0].op == "s::a"


def test_mutation_fuzz_never_raises() -> None:
    import random

    rnd = random.Random(7)
    base = (REG_SRC + FUNC_SRC).encode()
    tokens = [b"{", b"}", b"(", b")", b'"', b"'", b'R"(', b"//", b"/*", b"#ifdef X\n", b"#endif\n",
              b"\\\n", b"<<<", b">>>", b"TORCH_LIBRARY(", b"m.def(", b"\x00", b"\xff"]
    for _ in range(150):
        b = bytearray(base)
        for _ in range(rnd.randint(1, 25)):
            pos = rnd.randrange(len(b))
            r = rnd.random()
            if r < 0.3:
                del b[pos : pos + rnd.randint(1, 20)]
            elif r < 0.6:
                b[pos:pos] = rnd.choice(tokens)
            else:
                b[pos] = rnd.randrange(256)
        s = summarize_cpp(bytes(b), "fuzz.cu")
        assert isinstance(s, FileSummary)
        assert FileSummary.from_json(json.loads(json.dumps(s.to_json()))) == s


def test_large_file() -> None:
    lines = ["namespace big {"]
    for i in range(12_000):
        lines += [f"__global__ void k{i}(float* x) {{", f"  x[{i}] = {i};", "}", ""]
    lines.append("}")
    lines += ["TORCH_LIBRARY(big, m) {"] + [f'  m.def("op{i}(Tensor x) -> ()");' for i in range(1_000)] + ["}"]
    assert len(lines) > 49_000
    t0 = time.perf_counter()
    s = summarize_cpp("\n".join(lines).encode(), "big.cu")
    elapsed = time.perf_counter() - t0
    assert len(s.functions) == 12_000 and all(f.is_kernel for f in s.functions)
    assert s.functions[5].qualname == "big::k5" and s.functions[5].line == 22
    assert len(s.defs) == 1_000 and s.defs[-1].op == "big::op999"
    assert elapsed < 30, elapsed


# --------------------------------------------------------------------------- schema parsing


def test_parse_schema() -> None:
    s = parse_schema(
        "reshape_and_cache_flash(Tensor key, Tensor value, Tensor! key_cache, Tensor(a!) value_cache, "
        "Tensor slot_mapping, str kv_cache_dtype, Tensor? k_scale=None, *, int[] dims=[1, 2], "
        "str mode=\"a,b\") -> ()"
    )
    assert (s.name, s.overload, s.namespace) == ("reshape_and_cache_flash", "", "")
    assert [a.name for a in s.arguments] == [
        "key", "value", "key_cache", "value_cache", "slot_mapping", "kv_cache_dtype", "k_scale", "dims", "mode",
    ]
    assert [a.name for a in s.arguments if a.is_mutable] == ["key_cache", "value_cache"]
    assert s.argument("value_cache").alias == "a"
    assert s.argument("k_scale").is_optional and s.argument("k_scale").default == "None"
    assert s.argument("dims").default == "[1, 2]" and s.argument("dims").kwarg_only
    assert s.argument("mode").default == '"a,b"'
    assert [a.name for a in s.positional][-1] == "k_scale"
    assert s.returns == []
    assert s.check_call(6) == []
    assert s.check_call(5, ["kv_cache_dtype", "dims"]) == []
    assert any("at most 7" in p for p in s.check_call(8))
    assert any("missing" in p and "kv_cache_dtype" in p for p in s.check_call(5))
    assert any("no argument named 'bogus'" in p for p in s.check_call(6, ["bogus"]))
    assert any("given twice" in p for p in s.check_call(6, ["key"]))

    o = parse_schema("aten::add.out(Tensor self, Tensor other, *, Scalar alpha=1, Tensor(a!) out) -> Tensor(a!)")
    assert (o.namespace, o.name, o.overload, o.qualified_name) == ("aten", "add", "out", "aten::add.out")
    assert [(r.type, r.name, r.is_mutable) for r in o.returns] == [("Tensor(a!)", "", True)]
    assert [a.name for a in o.arguments if a.kwarg_only] == ["alpha", "out"]

    t = parse_schema("f(Tensor(a!)[] caches, SymInt[2] size, Dict(str, Tensor) d) -> (Tensor out, Tensor idx)")
    assert t.arguments[0].type == "Tensor(a!)[]" and t.arguments[0].is_mutable
    assert t.arguments[2].type == "Dict(str, Tensor)"
    assert [(r.type, r.name) for r in t.returns] == [("Tensor", "out"), ("Tensor", "idx")]

    st = parse_schema("g(Tensor($0! -> ) key_cache, int x) -> (Tensor, Tensor)")  # stable-ABI print form
    assert st.arguments[0].is_mutable and st.arguments[0].name == "key_cache"
    assert [r.type for r in st.returns] == ["Tensor", "Tensor"]
    assert parse_schema("h() -> ()").arguments == [] and parse_schema("h() -> ()").returns == []
    assert str(parse_schema("k(Tensor a, *, int b=1) -> Tensor")) == "k(Tensor a, *, int b=1) -> Tensor"

    for bad in ("with_fn", "", "(Tensor a) -> ()", "f(Tensor a", "f(Tensor a) => ()", "f(,) -> ()"):
        with pytest.raises(ValueError):
            parse_schema(bad)


# --------------------------------------------------------------------------- files and index on disk


def test_iter_cpp_files_skips_build_dirs_and_loops(tmp_path: Path) -> None:
    shutil.copytree(FIXTURE_PROJECT, tmp_path / "proj")
    proj = tmp_path / "proj"
    for d in ("build", ".git", "node_modules", "cmake-build-debug"):
        (proj / d).mkdir()
        (proj / d / "gen.cpp").write_text('TORCH_LIBRARY(gen, m) { m.def("g() -> ()"); }\n')
    try:
        (proj / "csrc" / "loop").symlink_to(proj, target_is_directory=True)
    except OSError:
        pass
    files = [p.relative_to(proj).as_posix() for p in iter_cpp_files(proj)]
    assert sorted(files) == sorted(
        [
            "csrc/cache_kernels.cu",
            "csrc/ops.h",
            "csrc/torch_bindings.cpp",
            "csrc/attention/paged_attention.cu",
            "3rdparty/dup/cache_kernels.cu",
        ]
    )


def test_build_index_on_fixture_project_with_cache(tmp_path: Path) -> None:
    store: dict[str, dict] = {}
    loads: list[str] = []

    def load(sha: str) -> FileSummary | None:
        loads.append(sha)
        return FileSummary.from_json(store[sha]) if sha in store else None

    def save(sha: str, summary: FileSummary) -> None:
        store[sha] = json.loads(json.dumps(summary.to_json()))

    idx = build_index([FIXTURE_PROJECT], load=load, store=save)
    assert len(store) == 5 and len(loads) == 5
    assert [(b.namespace, b.dispatch_key) for b in idx.blocks()] == [
        ("_C", None), ("_C_cache_ops", None), ("_C_cache_ops", "CUDA"),
    ]
    flash = idx.op("_C_cache_ops::reshape_and_cache_flash")
    assert flash is not None
    assert [(d.line, d.block_line) for d in flash.defs] == [(14, 12)]
    (impl,) = flash.impls
    assert (impl.dispatch_key, impl.function, impl.line, impl.block_line) == ("CUDA", "reshape_and_cache_flash", 19, 17)
    # csrc/cache_kernels.cu wins over 3rdparty/dup/cache_kernels.cu (same directory tree as the bindings)
    assert impl.definition is not None
    assert Path(impl.definition.path).relative_to(FIXTURE_PROJECT).as_posix() == "csrc/cache_kernels.cu"
    assert impl.definition.line == 26
    copy = idx.op("_C_cache_ops::copy_blocks").impls[0].definition
    assert copy is not None and (copy.line, copy.is_kernel) == (21, False)  # not vllm::copy_blocks (kernel)
    pa = idx.op("_C::paged_attention")
    assert pa.impls[0].dispatch_key == "CUDA"
    assert Path(pa.impls[0].definition.path).name == "paged_attention.cu"
    assert pa.schema == "paged_attention(Tensor! out, Tensor query, Tensor key_cache, int block_size) -> ()"
    assert [f.qualname for f in idx.functions_named("paged_attention_kernel")] == ["vllm::paged_attention_kernel"]

    # second build: everything from the cache, identical result; a copy elsewhere is re-pathed
    copy_dir = tmp_path / "copy"
    shutil.copytree(FIXTURE_PROJECT, copy_dir)
    idx2 = build_index([copy_dir], load=load, store=lambda sha, s: pytest.fail("cache miss"))
    flash2 = idx2.op("_C_cache_ops::reshape_and_cache_flash")
    assert flash2.defs[0].path == str(copy_dir / "csrc" / "torch_bindings.cpp")
    assert flash2.impls[0].definition.path == str(copy_dir / "csrc" / "cache_kernels.cu")

    # a broken cache is a miss, not an error
    def bad_load(sha: str):
        raise ValueError("torn")

    assert build_index([FIXTURE_PROJECT], load=bad_load).ops() == idx.ops()


def _answers(idx: CppIndex, names: list[str]) -> dict:
    """Every query's answer, as plain data (what a check or a trace reads)."""
    out = {"ops": idx.ops(), "blocks": [b.to_json() for b in idx.blocks()]}
    for op in idx.ops():
        info = idx.op(op)
        out[op] = (info.schema, [d.to_json() for d in info.defs],
                   [(i.function, i.dispatch_key, i.definition.to_json() if i.definition else None) for i in info.impls])
    for n in names:
        out["f:" + n] = [f.to_json() for f in idx.functions_named(n)]
    return out


@pytest.mark.parametrize("root", [FIXTURE_PROJECT, MINI_METAX_CSRC, HERE.parent / "examples" / "tiny-npu" / "csrc"])
def test_lazy_index_answers_as_the_whole_index_and_parses_only_what_a_query_needs(root: Path, monkeypatch) -> None:
    import attnlens.cppindex as ci

    whole = build_index([root])
    kernels = sorted({f.name for s in whole.summaries for f in s.functions if f.is_kernel})
    names = kernels + ["no_such_function", "vllm::paged_attention_kernel"]
    parsed: list[str] = []
    real = ci.summarize_cpp

    def counting(data, path, extension_name="_C"):
        parsed.append(Path(path).name)
        return real(data, path, extension_name)

    monkeypatch.setattr(ci, "summarize_cpp", counting)
    lazy = lazy_index([root])
    registering = sorted(Path(s.path).name for s in whole.summaries if s.blocks)
    assert sorted(parsed) == registering  # up front: only the files that register ops
    assert lazy.pending_files == len(whole.summaries) - len(registering)
    ops_only = lazy.op(lazy.ops()[0])  # one op: its bound function's files, not the others
    assert ops_only is not None and lazy.pending_files > 0
    monkeypatch.setattr(ci, "summarize_cpp", real)
    assert _answers(lazy, names) == _answers(whole, names)
    import pickle

    again = pickle.loads(pickle.dumps(lazy))  # the cache folder's copy (its reader is not pickled)
    assert again.summarise is None
    assert _answers(again, names) == _answers(whole, names)
    fresh = pickle.loads(pickle.dumps(lazy_index([root])))  # a copy that still has every file to read
    assert fresh.pending_files == lazy_index([root]).pending_files
    assert _answers(fresh, names) == _answers(whole, names)
    left = list(lazy.complete_steps(budget_s=0.0))
    assert lazy.pending_files == 0 and left[-1:] in ([0], [])
    assert _answers(lazy, names) == _answers(whole, names)


def test_mini_metax_example() -> None:
    if not MINI_METAX_CSRC.is_dir():
        pytest.skip("examples/mini-metax/csrc not present")
    idx = build_index([MINI_METAX_CSRC])
    for op in ("_mini_C::paged_attention_v2", "_C_cache_ops::reshape_and_cache_flash"):
        info = idx.op(op)
        assert info is not None, op
        assert info.defs and info.schema, op
        cuda = info.impls_for("CUDA")
        assert cuda, op
        assert cuda[0].definition is not None and not cuda[0].definition.is_kernel, op


# --------------------------------------------------------------------------- elfscan

TINY_C = r"""
#include <stddef.h>
#include <string.h>
static const char *schemas[] = {
    "tiny_op(Tensor x, Tensor! out) -> ()",
    "tiny_op.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
    "not a schema",
    "_C_tiny",
};
extern int torch_library_impl(const char *ns, const char *key);
const char *get(size_t i) { return schemas[i]; }
size_t len(size_t i) { return strlen(schemas[i]); }
int PyInit__tiny(void) { return torch_library_impl(schemas[3], "CUDA"); }
"""

# The names the STABLE_TORCH_LIBRARY_* macros give their (C++, static) init functions,
# here as plain C symbols.
TINY_REG_C = TINY_C + r"""
void STABLE_TORCH_LIBRARY_FRAGMENT_init__C_tiny_0(void) {}
void STABLE_TORCH_LIBRARY_IMPL_init__C_tiny_CUDA_1(void) {}
void STABLE_TORCH_LIBRARY_IMPL_init__C_tiny_CompositeExplicitAutograd_2(void) {}
"""


def _cc() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _compile(tmp_path: Path, name: str, code: str) -> Path:
    cc = _cc()
    if cc is None:
        pytest.skip("no C compiler")
    src = tmp_path / f"{name}.c"
    src.write_text(code)
    so = tmp_path / f"{name}.so"
    r = subprocess.run([cc, "-shared", "-fPIC", "-O0", "-o", str(so), str(src)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cc -shared failed: " + r.stderr.decode(errors="replace")[:200])
    return so


def test_elfscan_tiny_so(tmp_path: Path) -> None:
    so = _compile(tmp_path, "_tiny", TINY_C)
    info = scan_extension(so)
    assert info.error is None
    assert info.size == so.stat().st_size and len(info.sha256) == 64
    assert info.mechanism == "stable_abi"  # imports torch_library_impl
    assert info.schemas == [
        "tiny_op(Tensor x, Tensor! out) -> ()",
        "tiny_op.out(Tensor x, *, Tensor(a!) out) -> Tensor(a!)",
    ]
    assert "PyInit__tiny" in info.exported
    assert any(n.startswith("libc.") for n in info.needed)
    assert info.registrations == []
    assert info.namespaces == ["_C_tiny"]  # no registration symbols: .rodata fallback
    assert find_schema(info, "_C_tiny::tiny_op") == "tiny_op(Tensor x, Tensor! out) -> ()"
    assert find_schema(info, "torch.ops._C_tiny.tiny_op.out").startswith("tiny_op.out(")
    assert find_schema(info, "tiny_op.default") == "tiny_op(Tensor x, Tensor! out) -> ()"
    assert find_schema(info, "missing") is None and find_schema(info, "tiny_op.nope") is None
    assert ExtensionInfo.from_json(json.loads(json.dumps(info.to_json()))) == info


def test_elfscan_registration_symbols(tmp_path: Path) -> None:
    info = scan_extension(_compile(tmp_path, "_tiny_reg", TINY_REG_C))
    assert info.registrations == [
        "FRAGMENT _C_tiny", "IMPL _C_tiny CUDA", "IMPL _C_tiny CompositeExplicitAutograd",
    ]
    assert info.namespaces == ["_C_tiny"]


def test_elfscan_bad_inputs(tmp_path: Path) -> None:
    missing = scan_extension(tmp_path / "nope.so")
    assert missing.error and missing.schemas == []
    junk = tmp_path / "junk.so"
    junk.write_bytes(b"\x7fELF" + b"\x00" * 10 + b"x(Tensor a) -> ()\x00")
    info = scan_extension(junk)
    assert info.error is not None  # truncated ELF: reported, not raised
    text = tmp_path / "text.so"
    text.write_bytes(b"hello\x00y(Tensor a) -> Tensor\x00PyInit_text\x00_C_text\x00")
    t = scan_extension(text)
    assert t.error and "raw byte scan" in t.error
    assert t.schemas == ["y(Tensor a) -> Tensor"] and t.mechanism == "cpython"
    assert t.namespaces == ["_C_text"] and t.exported == ["PyInit_text"]


def test_elfscan_vllm_extension() -> None:
    if not VLLM_SO.is_file():
        pytest.skip("vllm _C_stable_libtorch.abi3.so not installed")
    t0 = time.perf_counter()
    info = scan_extension(VLLM_SO)
    elapsed = time.perf_counter() - t0
    assert info.error is None
    assert info.mechanism == "stable_abi"
    assert len(info.schemas) == 115
    assert {"_C", "_C_cache_ops", "_C_cuda_utils", "_C_custom_ar"} <= set(info.namespaces)
    assert "IMPL _C_cache_ops CUDA" in info.registrations
    assert "PyInit__C_stable_libtorch" in info.exported
    assert "libtorch.so" in info.needed
    flash = find_schema(info, "_C_cache_ops::reshape_and_cache_flash")
    assert flash is not None
    assert [a.name for a in parse_schema(flash).mutable_arguments] == ["key_cache", "value_cache"]
    assert elapsed < 10, elapsed  # about 0.6 s here; generous for slow CI disks


def test_modules_import_lazily() -> None:
    code = (
        "import sys, attnlens.cppindex, attnlens.elfscan;"
        "bad=[m for m in ('tree_sitter','tree_sitter_cpp','elftools') if m in sys.modules];"
        "print(bad); sys.exit(1 if bad else 0)"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ})
    assert r.returncode == 0, r.stdout + r.stderr
