"""Consumers of the resolver's tree: `trace` text/JSON, hover Markdown, go to implementation,
call hierarchy and the `sites` census, on examples/mini-metax and on hand-built trees.

The example fork: `merge_attn_states(...)` in flash_attn.py calls the wrapper in
ops/merge_attn_states.py, whose body runs `torch.ops._C.merge_attn_states` under
`current_platform.is_cuda()` (dead on the Mini platform) and else the Triton kernel
`merge_attn_states_kernel` (taken).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import pytest_asyncio

from attnlens import model as M
from attnlens.render import TRUNCATED_WORDS, chain_markdown, chain_text, leaf_paths, md_escape, site_leaves_text, verdict_text
from tests.helpers import EXAMPLE, REPO, example_ws, find, have_vllm

pytestmark = pytest.mark.skipif(not have_vllm(), reason="vllm 0.26.0 is not installed in the test interpreter")

ATTNLENS = [sys.executable, "-m", "attnlens.cli"]
PYTHON = str(REPO / ".venv" / "bin" / "python")
FA = EXAMPLE / "mini_metax/attention/backends/flash_attn.py"
MERGE = EXAMPLE / "mini_metax/attention/ops/merge_attn_states.py"
FA_UTILS = EXAMPLE / "mini_metax/attention/backends/fa_utils.py"
DISPATCH = EXAMPLE / "mini_metax/attention/ops/dispatch.py"
TRITON_MLA = EXAMPLE / "mini_metax/attention/backends/mla/triton_mla.py"
SCHEMA = REPO / "server/attnlens/schema/trace.schema.json"
MERGE_CALL = "merge_attn_states(output[:n], prefix_out, prefix_lse, suffix_out, suffix_lse)"
CUDA = "current_platform.is_cuda()"
NOT_CUDA = "not (current_platform.is_cuda())"
KERNEL = "mini_metax.attention.ops.merge_attn_states.merge_attn_states_kernel"


def line_of(path: Path, text: str) -> int:
    return find(path, text)[1]


def cli(*args: str, cache: Path) -> subprocess.CompletedProcess:
    out = subprocess.run(ATTNLENS + [args[0], "--root", str(EXAMPLE), "--python", PYTHON, "--cache-dir", str(cache),
                                     *args[1:]], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    return out


def spec(path: Path, text: str, offset: int = 0) -> str:
    p, line, col = find(path, text, offset=offset)
    return f"{p}:{line}:{col + 1}"


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tree-cache")


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return example_ws(tmp_path_factory.mktemp("tree-ws"))


@pytest.fixture(scope="module")
def merge_chain(ws) -> M.Chain:
    p, line, col = find(FA, MERGE_CALL)
    chain = ws.trace_at(p, line, col)
    assert chain is not None and chain.is_tree()
    return chain


def test_example_fork_leaves(merge_chain):
    """The resolver's answer the consumers below render (guards the expectations)."""
    got = [(lf.final.kind, lf.final.symbol, lf.conditions, lf.reachable) for lf in merge_chain.leaves()]
    assert got == [(M.TORCH_OP, "_C::merge_attn_states", [CUDA], False), (M.TRITON_KERNEL, KERNEL, [NOT_CUDA], True)]


# -- attnlens trace (text) ----------------------------------------------------------------------


def test_trace_text_is_an_indented_tree(cache):
    text = cli("trace", spec(FA, MERGE_CALL), cache=cache).stdout
    lines = text.splitlines()
    fork = next(ln for ln in lines if ln.startswith("==> fork"))
    assert fork == (f"==> fork (calls) mini_metax.attention.ops.merge_attn_states.merge_attn_states @ "
                    f"{MERGE}:{line_of(MERGE, 'def merge_attn_states(')}, decided by {CUDA}; {NOT_CUDA}")
    dead = next(ln for ln in lines if "[if current_platform.is_cuda() ->" in ln)
    taken = next(ln for ln in lines if "[if not (current_platform.is_cuda()) ->" in ln)
    assert dead.startswith("    [if current_platform.is_cuda() -> DEAD on this platform] line 22: torch.ops._C.merge_attn_states(...)")
    assert taken.startswith("    [if not (current_platform.is_cuda()) -> taken on this platform] line 26: merge_attn_states_triton(...)")
    # each branch's chain is indented under its branch line, the dead one too (marked, not hidden)
    i, j = lines.index(dead), lines.index(taken)
    dead_body = lines[i + 1:j]
    assert any(ln.startswith("        ==> torch custom op: _C::merge_attn_states") for ln in dead_body)
    taken_body = lines[j + 1:]
    assert any(ln.startswith(f"        ==> Triton kernel: {KERNEL}  @ {MERGE}:{line_of(MERGE, 'def merge_attn_states_kernel(')}")
               for ln in taken_body)
    # the leaves summary: one line per leaf, kind, short symbol, file:line, condition path, reachability
    k = lines.index("leaves: 2 (1 can run on this platform)")
    leaf_lines = lines[k + 1:]
    assert len(leaf_lines) == 2, leaf_lines
    assert re.fullmatch(r"  - torch_op _C::merge_attn_states @ \S+ {2}if current_platform\.is_cuda\(\) -> DEAD on this platform",
                        leaf_lines[0]), leaf_lines[0]
    assert leaf_lines[1] == (f"  - triton_kernel merge_attn_states_kernel @ {MERGE}:{line_of(MERGE, 'def merge_attn_states_kernel(')}"
                             f"  if {NOT_CUDA} -> taken on this platform")


def _leaf(kind, symbol, path="/x/k.py", line=3, reason=None) -> M.Chain:
    return M.Chain([M.Hop("call", path, line, symbol)], M.Final(kind, path, line, symbol, reason=reason), True)


def _tree(truncated: str | None = None) -> M.Chain:
    """A hand-built tree: a runtime dict fork nested in a platform fork, with a dead branch."""
    inner = M.Fork(M.ForkKind.DICT, "kv_cache_dtype", "/x/d.py", 7, "_WRITERS", [
        M.Branch('kv_cache_dtype == "auto"', None, '"auto": _write_auto', _leaf(M.TORCH_OP, "_C::write"), "/x/d.py", 8),
        M.Branch('kv_cache_dtype == "fp8"', None, '"fp8": kernel[grid]', _leaf(M.TRITON_KERNEL, "pkg.__init__.kernel", "/x/__init__.py", 5),
                 "/x/d.py", 9),
    ], truncated=truncated)
    inner_chain = M.Chain([M.Hop("alias", "/x/d.py", 7, "_WRITERS[kv_cache_dtype]")], M.Final(M.FORK, "/x/d.py", 7, "_WRITERS", fork=inner), True)
    top = M.Fork(M.ForkKind.CALLS, "is_cuda()", "/x/top.py", 1, "pkg.top", [
        M.Branch("is_cuda()", False, "line 2: cuda_op(...)", _leaf(M.TORCH_OP, "_C::cuda_op"), "/x/top.py", 2),
        M.Branch("not (is_cuda())", True, "line 4: _WRITERS[kv_cache_dtype](...)", inner_chain, "/x/top.py", 4),
        M.Branch(None, True, "line 5: missing(...)", _leaf(M.NOT_INSTALLED, "vendorlib", None, None, "package `vendorlib` is not installed"),
                 "/x/top.py", 5),
    ])
    return M.Chain([M.Hop("call", "/x/site.py", 10, "top")], M.Final(M.FORK, "/x/top.py", 1, "pkg.top", fork=top), True)


def test_chain_text_nested_runtime_and_truncated():
    text = chain_text(_tree(truncated="width bound (32 leaves)"))
    assert "==> fork (calls) pkg.top @ /x/top.py:1, decided by is_cuda()" in text
    assert "    [if is_cuda() -> DEAD on this platform] line 2: cuda_op(...)" in text
    # the nested fork is indented under its branch, its branches deeper still
    assert "\n        ==> fork (dict_key) _WRITERS @ /x/d.py:7, decided by kv_cache_dtype\n" in text
    assert '\n            [if kv_cache_dtype == "auto" -> decided at run time] "auto": _write_auto' in text
    assert "\n            TRUNCATED: width bound (32 leaves)" in text
    assert "    [always -> taken on this platform] line 5: missing(...)" in text
    lines = text.splitlines()
    k = next(i for i, ln in enumerate(lines) if ln.startswith("leaves: "))
    assert lines[k] == "leaves: 4 (3 can run on this platform)  TRUNCATED: the tree hit its bounds, more leaves exist"
    assert lines[k + 1:] == [
        "  - torch_op _C::cuda_op @ /x/k.py:3  if is_cuda() -> DEAD on this platform",
        '  - torch_op _C::write @ /x/k.py:3  if not (is_cuda()) and kv_cache_dtype == "auto" -> decided at run time',
        '  - triton_kernel kernel @ /x/__init__.py:5  if not (is_cuda()) and kv_cache_dtype == "fp8" -> decided at run time',
        "  - not_installed vendorlib @ -  if always -> taken on this platform  (package `vendorlib` is not installed)",
    ]


def test_single_leaf_text_unchanged_shape(ws):
    p, line, col = find(FA, "reshape_and_cache_flash(key")
    text = chain_text(ws.trace_at(p, line, col))
    assert "==> torch custom op: _C_cache_ops::reshape_and_cache_flash" in text
    assert "==> fork" not in text
    assert "\nleaves: 1 (1 can run on this platform)\n  - torch_op _C_cache_ops::reshape_and_cache_flash @ " in text


# -- hover Markdown -------------------------------------------------------------------------------


def _link(path, line):
    return f"file://{path}#L{line}"


def test_hover_markdown_leads_with_what_runs(merge_chain):
    md = chain_markdown(merge_chain, title="### AttnLens", link=_link)
    lines = [ln.rstrip() for ln in md.splitlines()]
    kline = line_of(MERGE, "def merge_attn_states_kernel(")
    assert lines[0] == "### AttnLens"
    assert lines[1] == (f"Runs: `merge_attn_states_kernel` (Triton, [merge_attn_states.py:{kline}]({_link(str(MERGE), kline)} "
                        f'"Triton kernel: {KERNEL}"), taken on this platform)')
    assert lines[2] == f"Not taken on this platform: `merge_attn_states` (torch op, if `{CUDA}`)"
    assert sum(ln.startswith("Runs:") for ln in lines) == 1
    # then the chain: trunk hops, the fork, the dead branch folded into one line, the taken one expanded
    assert "1. call `merge_attn_states` [flash_attn.py:" in md and "2. import " in md
    assert f"⇒ `mini_metax.attention.ops.merge_attn_states.merge_attn_states` chooses among calls by `{CUDA}; {NOT_CUDA}`" in md
    dead = [ln for ln in lines if ln.startswith(f"- *if* `{CUDA}`")]
    assert len(dead) == 1 and dead[0].startswith(f"- *if* `{CUDA}` — **DEAD on this platform**: line 22: torch.ops.\\_C.merge_attn_states(...)")
    assert dead[0].endswith("folded (3 hops): would reach torch custom op `_C::merge_attn_states`")
    assert any(ln.startswith(f"- *if* `{NOT_CUDA}` — **taken on this platform**: line 26: merge_attn_states_triton(...)")
               for ln in lines)
    assert f"  - ⇒ **Triton kernel** `{KERNEL}` [merge_attn_states.py:{kline}]" in md
    assert "constexpr: `HEAD_SIZE, PADDED_HEAD_SIZE, OUTPUT_LSE`" in md


def test_hover_markdown_escapes_and_runtime_words():
    md = chain_markdown(_tree(truncated="depth bound"), link=_link)
    lines = [ln.rstrip() for ln in md.splitlines()]
    runs = [ln for ln in lines if ln.startswith("Runs:")]
    # a tree cut by its bounds: each condition and "not taken" holds on the listed paths (a cut path may reach the
    # leaf otherwise), said on the line; "taken" holds whatever was cut
    assert runs == [
        f'Runs: `write` (torch op `_C::write`, [k.py:3]({_link("/x/k.py", 3)} "torch op: _C::write"), decided at run time by '
        '`kv_cache_dtype == "auto"`, on the listed paths)',
        f'Runs: `kernel` (Triton, [\\_\\_init\\_\\_.py:5]({_link("/x/__init__.py", 5)} "Triton kernel: pkg.__init__.kernel"), '
        'decided at run time by `kv_cache_dtype == "fp8"`, on the listed paths)',
        "Runs: `vendorlib` (not installed here: `vendorlib`, taken on this platform)",
    ]
    assert "Not taken on this platform on the listed paths: `cuda_op` (torch op, if `is_cuda()`)" in lines
    assert f"*{TRUNCATED_WORDS}*" in lines
    whole = [ln.rstrip() for ln in chain_markdown(_tree(), link=_link).splitlines() if ln.startswith(("Runs:", "Not taken"))]
    assert [ln for ln in whole if "listed paths" in ln] == []
    assert "Not taken on this platform: `cuda_op` (torch op, if `is_cuda()`)" in whole
    assert verdict_text(_tree(truncated="width bound (32 leaves)"))[:2] == [
        'Runs: write (torch op _C::write, /x/k.py:3, decided at run time by kv_cache_dtype == "auto", on the listed paths)',
        'Runs: kernel (Triton, /x/__init__.py:5, decided at run time by kv_cache_dtype == "fp8", on the listed paths)']
    assert verdict_text(_tree(truncated="width bound (32 leaves)"))[-1] == TRUNCATED_WORDS  # (the CLI says it too)
    assert '"fp8": kernel\\[grid\\]' in md  # a label with Markdown syntax, escaped
    assert md_escape("__init__") == "\\_\\_init\\_\\_" and md_escape("kernel[grid]") == "kernel\\[grid\\]"
    assert md_escape("merge_attn_states") == "merge_attn_states"


def test_verdict_defaults_say_what_the_default_configuration_does():
    """Env flags at their defaults: a run-time condition they decide says so, and the provider line names the
    kernel module loaded by default that holds the namespace of each op that can run, none for a namespace no
    module loaded by default holds (hand-built defaults; envflags is tested on the example below)."""
    from attnlens.envflags import DefaultProvider, Flag
    from attnlens.render import Defaults, verdict_markdown, verdict_text

    chain = _tree()
    vendor = DefaultProvider("vendor._C", "not installed", "envs.USE_VENDOR", (Flag("envs.USE_VENDOR", True),))
    defaults = Defaults(condition=lambda text, path, line: text == 'kv_cache_dtype == "auto"',
                        provider_for=lambda ns: vendor if ns == "_C" else None)
    # a torch op leaf without providers: no provider line
    md = verdict_markdown(chain, _link, defaults)
    assert md[0].endswith('decided at run time by `kv_cache_dtype == "auto"`; taken by default)')
    assert md[1].endswith('decided at run time by `kv_cache_dtype == "fp8"`; not taken by default)')
    assert not any(ln.startswith("Loaded by default from:") for ln in md)
    chain.final.fork.branches[1].chain.final.fork.branches[0].chain.final.providers = ["vendor._C (not installed, if envs.USE_VENDOR)"]
    text = verdict_text(chain, defaults)
    assert text[3] == "Loaded by default from: vendor._C (not installed here; envs.USE_VENDOR defaults to True)"
    assert text[0] == 'Runs: write (torch op _C::write, /x/k.py:3, decided at run time by kv_cache_dtype == "auto"; taken by default)'
    # an op of a namespace no module loaded by default holds: no provider line (not the first module loaded)
    chain = _tree()
    write = chain.final.fork.branches[1].chain.final.fork.branches[0].chain.final
    write.symbol, write.providers = "vendor_sgl::write", ["vendor.sgl (not installed, if envs.USE_SGL)"]
    assert not any(ln.startswith("Loaded by default from:") for ln in verdict_text(chain, defaults))


def test_hover_section_uses_the_tree(ws, merge_chain):
    from attnlens.lsp.hover import HoverContext, chain_section

    ctx = HoverContext(analysis=None, path=str(FA), line=1, col=0, chain=merge_chain)
    text = chain_section(ctx)
    assert text.splitlines()[0].startswith("Runs: `merge_attn_states_kernel` (Triton, [merge_attn_states.py:")
    assert text.splitlines()[-1].startswith("Chain (2 hops): [call flash_attn.py:")


# -- attnlens trace --json and its schema -----------------------------------------------------------


def _validate(doc, schema: dict, root: dict, where: str = "$") -> list[str]:
    """The subset of JSON Schema 2020-12 that trace.schema.json uses."""
    errs: list[str] = []
    if "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/"), ref
        target = root
        for part in ref[2:].split("/"):
            target = target[part]
        errs += _validate(doc, target, root, where)
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        checks = {"object": lambda v: isinstance(v, dict), "array": lambda v: isinstance(v, list),
                  "string": lambda v: isinstance(v, str), "boolean": lambda v: isinstance(v, bool),
                  "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
                  "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool), "null": lambda v: v is None}
        if not any(checks[t](doc) for t in types):
            return errs + [f"{where}: {doc!r:.80} is not of type {types}"]
    if "enum" in schema and doc not in schema["enum"]:
        errs.append(f"{where}: {doc!r} not in {schema['enum']}")
    if "minimum" in schema and isinstance(doc, (int, float)) and doc < schema["minimum"]:
        errs.append(f"{where}: {doc} < {schema['minimum']}")
    if isinstance(doc, dict):
        props = schema.get("properties", {})
        for k in schema.get("required", []):
            if k not in doc:
                errs.append(f"{where}: missing {k!r}")
        for k, v in doc.items():
            if k in props:
                errs += _validate(v, props[k], root, f"{where}.{k}")
            elif schema.get("additionalProperties") is False:
                errs.append(f"{where}: unexpected {k!r}")
    if isinstance(doc, list) and "items" in schema:
        for i, v in enumerate(doc):
            errs += _validate(v, schema["items"], root, f"{where}[{i}]")
    if "oneOf" in schema:
        ok = [i for i, s in enumerate(schema["oneOf"]) if not _validate(doc, s, root, where)]
        if len(ok) != 1:
            errs.append(f"{where}: matches {len(ok)} of oneOf")
    return errs


def validate(doc) -> list[str]:
    schema = json.loads(SCHEMA.read_text())
    try:
        import jsonschema  # optional: the real validator when the environment has it
    except ImportError:
        return _validate(doc, schema, schema)
    v = jsonschema.Draft202012Validator(schema)
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in v.iter_errors(doc)]


POSITIONS = [
    (FA, MERGE_CALL, 0),  # fork: dead torch op, live Triton kernel
    (FA, "reshape_and_cache_flash(key", 0),  # one leaf, torch op with C++ registrations
    (FA, "flash_attn_varlen_func(", 0),  # not installed
    (FA, "self._forward_cascade(", len("self.")),  # nested forks, runtime reachability
    (FA, "scheduler_metadata = get_scheduler_metadata(", len("scheduler_metadata = ")),  # dummy
    (TRITON_MLA, "decode_attention_fwd(", 0),  # upstream Triton, runtime branches
    (DISPATCH, "_CACHE_WRITERS[kv_cache_dtype](", 0),  # dict-key fork
    (DISPATCH, "DeviceOps.copy_blocks(", len("DeviceOps.")),  # factory returns
]


def test_schema_matches_model_constants():
    s = json.loads(SCHEMA.read_text())
    assert s["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    d = s["$defs"]
    assert d["hop"]["properties"]["kind"]["enum"] == list(M.HopKind)
    assert d["leaf_final"]["properties"]["kind"]["enum"] == list(M.FINAL_KINDS)
    assert d["final"]["properties"]["kind"]["enum"] == list(M.FinalKind)
    assert d["fork_header"]["properties"]["kind"]["enum"] == list(M.ForkKind)
    assert d["branch"]["properties"]["reachability"]["enum"] == list(M.Reach)


@pytest.mark.parametrize("path,text,offset", POSITIONS, ids=[t for _, t, _ in POSITIONS])
def test_trace_json_validates_against_schema(cache, path, text, offset):
    doc = json.loads(cli("trace", "--json", spec(path, text, offset), cache=cache).stdout)
    assert validate(doc) == []
    assert len(doc["leaves"]) >= 1


def test_schema_validator_rejects_bad_trees(cache):
    doc = json.loads(cli("trace", "--json", spec(FA, MERGE_CALL), cache=cache).stdout)
    assert validate(doc) == []
    assert [lf["reachability"] for lf in doc["leaves"]] == ["dead", "live"]
    assert [(lf["kind"], lf["symbol"], lf["conditions"]) for lf in doc["leaves"]] == [
        ("torch_op", "_C::merge_attn_states", [CUDA]), ("triton_kernel", KERNEL, [NOT_CUDA])]
    br = doc["tree"]["branches"]
    assert [b["reachability"] for b in br] == ["dead", "live"] and "leaf" in br[1]["node"]
    bad = json.loads(json.dumps(doc))
    bad["tree"]["branches"][0]["reachability"] = "maybe"
    assert validate(bad)
    bad = json.loads(json.dumps(doc))
    bad["tree"]["branches"][1]["node"]["leaf"]["kind"] = "fork"  # a leaf is never a fork
    assert validate(bad)
    bad = json.loads(json.dumps(doc))
    del bad["leaves"][0]["conditions"]
    assert validate(bad)


# -- implementation, call hierarchy (the analysis layer behind the LSP features) -------------------


def test_implementation_targets_per_leaf(ws, merge_chain):
    from attnlens.lsp.features.navigation import leaf_locations

    kline = line_of(MERGE, "def merge_attn_states_kernel(")
    assert leaf_locations(merge_chain) == [(str(MERGE), kline)]
    # a not-installed leaf: the import statement that binds it
    p, line, col = find(FA, "flash_attn_varlen_func(")
    locs = leaf_locations(ws.trace_at(p, line, col))
    assert len(locs) == 1 and isinstance(locs[0], M.Hop)
    assert (locs[0].path, locs[0].line) == (str(FA_UTILS), line_of(FA_UTILS, "from miniflash import flash_attn_varlen_func"))
    # nested forks: the live/runtime leaves only, each once (the two miniflash calls bind the same import)
    p, line, col = find(FA, "self._forward_cascade(", offset=len("self."))
    tree = ws.trace_at(p, line, col)
    got = [(t.path, t.line) if isinstance(t, M.Hop) else t for t in leaf_locations(tree)]
    assert got == [(str(FA_UTILS), line_of(FA_UTILS, "from miniflash import flash_attn_varlen_func")), (str(MERGE), kline)]


def test_leaf_paths_carry_the_hops_of_each_branch(merge_chain):
    lps = leaf_paths(merge_chain)
    assert [lp.final.kind for lp in lps] == [M.TORCH_OP, M.TRITON_KERNEL]
    assert [h.kind for h in lps[1].hops] == ["call", "import", "call", "triton_launch"]
    assert lps[1].binding_import().symbol == "mini_metax.attention.ops.merge_attn_states.merge_attn_states"


# -- attnlens sites / backends text --------------------------------------------------------------------


def test_sites_text_counts_leaves(cache, ws):
    out = cli("sites", cache=cache).stdout.splitlines()
    line = line_of(FA, MERGE_CALL)
    assert f"mini_metax/attention/backends/flash_attn.py:{line}:9  merge_attn_states -> 2 leaves: torch_op (dead), triton_kernel" in out
    cuda_line = line_of(MERGE, "torch.ops._C.merge_attn_states(")
    assert (f"mini_metax/attention/ops/merge_attn_states.py:{cuda_line}:9  torch.ops._C.merge_attn_states -> "
            "1 leaf: torch_op _C::merge_attn_states (dead)") in out
    sites = ws.kernel_sites(None)
    summary = out[-2]
    assert summary.startswith(f"{len(sites)} kernel call sites by leaf kinds: ")
    counted = dict(re.findall(r"([a-z_+]+) (\d+)", summary.split(": ", 1)[1]))
    assert sum(map(int, counted.values())) == len(sites)
    mixed = sum(1 for s in sites if {lf.final.kind for lf in s.chain.leaves()} == {M.TORCH_OP, M.TRITON_KERNEL})
    assert int(counted.get("torch_op+triton_kernel", 0)) == mixed >= 1
    good = sum(1 for s in sites if (live := s.chain.live_leaves()) and all(lf.final.kind in M.RUNTIME_LEAF_KINDS for lf in live))
    dead = sum(1 for s in sites if s.chain.leaves() and not s.chain.live_leaves())
    assert dead >= 1  # the is_cuda()-only call above
    assert out[-1] == (f"{good} of {len(sites)} sites have every live leaf in "
                       "{torch_op, triton_kernel, extension_function, dummy, not_installed}; "
                       f"{dead} are dead on this platform (every leaf)")
    # --json keeps the sites' own JSON
    js = json.loads(cli("sites", "--json", cache=cache).stdout)
    assert len(js) == len(sites) and all("final" in s for s in js)


def test_site_leaves_text_and_backends_table(ws, merge_chain):
    from attnlens.render import backends_table

    assert site_leaves_text(merge_chain) == "2 leaves: torch_op (dead), triton_kernel"
    entries = [e for e in ws.backends() if e.name == "FLASH_ATTN" and e.kind == "attention"]
    table = backends_table(entries, ws.root)
    assert "merge_attn_states -> 2 leaves: torch_op (dead), triton_kernel" in table
    assert f"        - triton_kernel {KERNEL}  if {NOT_CUDA} -> taken on this platform" in table


# -- over the wire: hover, implementation, call hierarchy ------------------------------------------


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def lsp(tmp_path_factory):
    from tests.lsp.conftest import start_session, stop_session

    session = await start_session(tmp_path_factory.mktemp("tree-lsp"))
    await session.wait_indexed()
    yield session
    await stop_session(session)


def _pos(path: Path, text: str, offset: int = 0):
    from tests.lsp.conftest import position_of

    return position_of(path, text, offset)


def _uri(path: Path) -> str:
    return path.resolve().as_uri()


@pytest.mark.asyncio(loop_scope="module")
async def test_lsp_hover_runs_line(lsp):
    md = await lsp.hover_text(FA, _pos(FA, MERGE_CALL))
    lines = [ln.rstrip() for ln in md.splitlines()]
    assert lines[0].startswith(f"Runs: `merge_attn_states_kernel` (Triton, [merge_attn_states.py:{line_of(MERGE, 'def merge_attn_states_kernel(')}](")
    assert lines[0].endswith("), taken on this platform)")
    assert lines[1] == f"Not taken on this platform: `merge_attn_states` (torch op, if `{CUDA}`)"


@pytest.mark.asyncio(loop_scope="module")
async def test_lsp_implementation_per_leaf(lsp):
    from lsprotocol import types as T

    async def impl(path, text, offset=0):
        return await lsp.client.text_document_implementation_async(
            T.ImplementationParams(T.TextDocumentIdentifier(_uri(path)), _pos(path, text, offset)))

    locs = await impl(FA, MERGE_CALL)
    assert [(loc.uri, loc.range.start.line + 1) for loc in locs] == [(_uri(MERGE), line_of(MERGE, "def merge_attn_states_kernel("))]
    locs = await impl(FA, "flash_attn_varlen_func(")
    assert len(locs) == 1 and locs[0].uri == _uri(FA_UTILS)
    imp = line_of(FA_UTILS, "from miniflash import flash_attn_varlen_func")
    rng = locs[0].range
    assert rng.start.line + 1 == imp
    text = FA_UTILS.read_text().splitlines()[imp - 1]
    assert text[rng.start.character:rng.end.character] == "flash_attn_varlen_func"


@pytest.mark.asyncio(loop_scope="module")
async def test_lsp_outgoing_calls_list_every_leaf(lsp):
    from lsprotocol import types as T

    items = await lsp.client.text_document_prepare_call_hierarchy_async(T.CallHierarchyPrepareParams(
        T.TextDocumentIdentifier(_uri(FA)), _pos(FA, "def _forward_cascade(", offset=4)))
    assert items and items[0].name == "_forward_cascade"
    out = await lsp.client.call_hierarchy_outgoing_calls_async(T.CallHierarchyOutgoingCallsParams(items[0]))
    # items are named after the called symbol; what each reaches leads the detail
    by_leaf = {(c.to.detail or "").split(" · ")[0]: c.to for c in out}
    assert {"→ merge_attn_states_kernel", "→ _C::merge_attn_states", "→ miniflash"} <= set(by_leaf), set(by_leaf)
    assert by_leaf["→ _C::merge_attn_states"].detail.startswith(f"→ _C::merge_attn_states · DEAD on this platform (if {CUDA})")
    assert by_leaf["→ merge_attn_states_kernel"].name == "merge_attn_states"
    assert not by_leaf["→ merge_attn_states_kernel"].detail.split(" · ")[1].startswith("DEAD")


def test_conditions_joined_by_and_say_each_operand_once_and_bracket_the_loose_ones():
    """A call's guard and an arm's compound condition often share an operand (`get_pp_group().is_first_rank`): the
    joined text says it once; `or` operands are bracketed; one condition is kept as written."""
    assert M.and_joined(["not (x and y) and get_pp_group().is_first_rank", "get_pp_group().is_first_rank", "a or b"]) \
        == "not (x and y) and get_pp_group().is_first_rank and (a or b)"
    assert M.and_joined(["(a or b) and c", "c", 'k == "é" and c']) == '(a or b) and c and k == "é"'
    assert M.and_joined(["a and a"]) == "a and a"  # (alone: as written)
    assert M.and_joined(["f(", "f("]) == "f("  # (not Python: compared whole)
    assert M.conjuncts("a and (b or c)") == ("a", "b or c")


def test_dead_torch_ops_named_alike_are_told_apart_by_their_full_op():
    """Two providers' ops with one short name (`vllm_aiter::rms_norm`, `_C::rms_norm`) not taken: each verdict line
    names its op; a dead op whose short name no other dead leaf has keeps the short form."""
    from attnlens import render

    def leaf(sym, cond):
        return M.Chain([M.Hop(M.HopKind.CALL, "/x/k.py", 3, sym, "call", cond, False)],
                       M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 3, sym), False)

    branches = [M.Branch(c, False, f"line {i}", leaf(s, c), "/x/k.py", i) for i, (s, c) in enumerate(
        [("vllm_aiter::rms_norm", "a()"), ("_C::rms_norm", "b()"), ("_C::other", "c()")], 1)]
    fk = M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", branches, None)
    chain = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=fk), False)
    dead = [ln for ln in render.verdict_text(chain) if ln.startswith("Not taken")]
    assert dead == ["Not taken on this platform: rms_norm (torch op vllm_aiter::rms_norm, if a())",
                    "Not taken on this platform: rms_norm (torch op _C::rms_norm, if b())",
                    "Not taken on this platform: other (torch op, if c())"]


def test_a_verdict_leaves_out_what_the_platform_alone_makes_true():
    """A CustomOp's dispatch chain gives its arms `not (not enabled) and not (is_rocm()) and is_out_of_tree() and
    flag`: the verdict says `enabled and flag` (what the platform decides is not run time, `not (not x)` is `x`,
    an operand another condition on the way already said is said once); a condition with nothing to drop stays as
    written."""
    from attnlens import render

    facts = {"not (is_rocm())": True, "is_out_of_tree()": True, "is_rocm()": False}
    defaults = render.Defaults(platform_fact=lambda text, path, line: facts.get(text))
    hop = M.Hop(M.HopKind.CALL, "/x/k.py", 9, "g", "call", "enabled", None)
    fk = M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", [
        M.Branch("not (not enabled) and not (is_rocm()) and is_out_of_tree() and flag", None, "line 2",
                 M.Chain([hop], M.Final(M.FinalKind.TRITON_KERNEL, "/x/k.py", 3, "pkg.kern"), None), "/x/k.py", 2),
        M.Branch("not (flag) and size > 4", None, "line 5",
                 M.Chain([], M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 6, "_C::op"), None), "/x/k.py", 5),
        M.Branch("not (not enabled) and is_rocm()", False, "line 7",
                 M.Chain([], M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 8, "_C::rocm_op"), False), "/x/k.py", 7)], None)
    chain = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=fk), None)
    runs = [ln for ln in render.verdict_text(chain, defaults) if ln.startswith("Runs:")]
    assert runs == ["Runs: kern (Triton, /x/k.py:3, decided at run time by enabled and flag)",
                    "Runs: op (torch op _C::op, /x/k.py:6, decided at run time by not (flag) and size > 4)"]
    # one condition written two ways is said one way
    assert [render._double_negation(t) for t in ("not (x is None)", "not (a.b is not None)", "not (not f())", "not (x == 1)")] \
        == ["x is not None", "a.b is None", "f()", "not (x == 1)"]
    assert [render._double_negation(t) for t in ("not ((a or b) is None)", "not ((x := f()) is None)", "not ((a == b) is None)")] \
        == ["(a or b) is not None", "(x := f()) is not None", "(a == b) is not None"]
    # a dead leaf is said by what is false here
    assert render.verdict_text(chain, defaults)[-1] == "Not taken on this platform: rocm_op (torch op, if is_rocm())"
    # without the platform's facts: as written
    assert render.verdict_text(chain)[0] == ("Runs: kern (Triton, /x/k.py:3, decided at run time by not (not enabled) "
                                             "and not (is_rocm()) and is_out_of_tree() and flag and enabled)")


def test_a_negated_condition_leaves_out_what_the_platform_alone_decides():
    """vLLM-MetaX's `merge_attn_states` runs the torch op under `is_out_of_tree() and dtypes_ok(p) and headdim_ok(p)`
    and the Triton kernel in its `else`: both verdict lines leave the platform's own fact out, the else arm as
    `not (dtypes_ok(p) and headdim_ok(p))`. An operand false here makes a negated `and` true (dropped); a negated
    `or` loses its false operands."""
    from attnlens import render

    facts = {"is_out_of_tree()": True, "is_rocm()": False, "is_cuda()": False}
    defaults = render.Defaults(platform_fact=lambda text, path, line: facts.get(text))
    cond = "is_out_of_tree() and dtypes_ok(p) and headdim_ok(p)"

    def arm(c, line, kind, sym):
        return M.Branch(c, None, f"line {line}", M.Chain([], M.Final(kind, "/x/k.py", line, sym), None), "/x/k.py", line)

    fk = M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", [
        arm(cond, 2, M.FinalKind.TORCH_OP, "_C::merge"),
        arm(f"not ({cond})", 3, M.FinalKind.TRITON_KERNEL, "pkg.merge_kernel"),
        arm("not (is_rocm() and big) and n > 1", 4, M.FinalKind.TRITON_KERNEL, "pkg.k2"),
        arm("not (is_cuda() or wide)", 5, M.FinalKind.TRITON_KERNEL, "pkg.k3"),
        arm("not (a and b)", 6, M.FinalKind.TRITON_KERNEL, "pkg.k4")], None)
    chain = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=fk), None)
    runs = [ln for ln in render.verdict_text(chain, defaults) if ln.startswith("Runs:")]
    assert runs == ["Runs: merge (torch op _C::merge, /x/k.py:2, decided at run time by dtypes_ok(p) and headdim_ok(p))",
                    "Runs: merge_kernel (Triton, /x/k.py:3, decided at run time by not (dtypes_ok(p) and headdim_ok(p)))",
                    "Runs: k2 (Triton, /x/k.py:4, decided at run time by n > 1)",
                    "Runs: k3 (Triton, /x/k.py:5, decided at run time by not (wide))",
                    "Runs: k4 (Triton, /x/k.py:6, decided at run time by not (a and b))"]
    # the tree and the leaf lines say the same of each branch: its condition as written, and what the platform leaves open
    text = render.chain_text(chain, defaults).splitlines()
    assert [ln.strip() for ln in text if ln.strip().startswith("[if")][:2] == [
        f"[if {cond} -> decided at run time by dtypes_ok(p) and headdim_ok(p)] line 2  @ /x/k.py:2",
        f"[if not ({cond}) -> decided at run time by not (dtypes_ok(p) and headdim_ok(p))] line 3  @ /x/k.py:3"]
    assert [ln for ln in text if ln.startswith("  - ")][:2] == [
        "  - torch_op _C::merge @ /x/k.py:2  if dtypes_ok(p) and headdim_ok(p) -> decided at run time",
        "  - triton_kernel merge_kernel @ /x/k.py:3  if not (dtypes_ok(p) and headdim_ok(p)) -> decided at run time"]
    md = render.chain_markdown(chain, defaults=defaults)
    assert "**decided at run time** by `dtypes_ok(p) and headdim_ok(p)`: line 2" in md
    # a condition with nothing decided by the platform: no "by"
    assert "[if not (a and b) -> decided at run time] line 6" in render.chain_text(chain, defaults)
    fact = facts.get
    assert render._negation_open("not (is_cuda() or is_out_of_tree())", fact) == "not (is_cuda() or is_out_of_tree())"
    assert render._negation_open("not (is_out_of_tree() and is_rocm())", fact) == ""
    assert render._negation_open("not (x and y", fact) == "not (x and y"


def test_a_leaf_that_runs_on_one_path_is_not_also_said_not_taken():
    """`_C::rms_norm` runs through the non-ROCm branch and not through the ROCm one: the verdict says where it runs
    (the tree keeps the dead path); a leaf dead on every path is still listed as not taken."""
    from attnlens import render

    def leaf(sym, reach):
        return M.Chain([M.Hop(M.HopKind.CALL, "/x/k.py", 3, sym)], M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 3, sym), reach)

    fk = M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", [
        M.Branch("IS_ROCM", False, "line 2", leaf("_C::rms_norm", False), "/x/k.py", 2),
        M.Branch("not (IS_ROCM)", True, "line 4", leaf("_C::rms_norm", True), "/x/k.py", 4),
        M.Branch("IS_XPU", False, "line 6", leaf("_C::xpu_norm", False), "/x/k.py", 6)], None)
    chain = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=fk), True)
    assert render.verdict_text(chain) == [
        "Runs: rms_norm (torch op _C::rms_norm, /x/k.py:3, taken on this platform)",
        "Not taken on this platform: xpu_norm (torch op, if IS_XPU)"]
    # a dead op named like one that runs is told apart by its full op
    fk2 = M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", list(fk.branches) + [
        M.Branch("HAS_OINK", False, "line 8", leaf("oink::rms_norm", False), "/x/k.py", 8)], None)
    chain = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=fk2), True)
    assert render.verdict_text(chain)[-1] == "Not taken on this platform: rms_norm (torch op oink::rms_norm, if HAS_OINK)"


def test_a_leaf_reached_under_a_condition_and_under_its_negation_is_taken():
    """A CustomOp that is enabled runs `forward_native` through one path and, disabled, through another: the leaf
    under `enabled` and under `not enabled` runs whichever holds. Paths whose conditions do not cover every case
    leave it to run time."""
    from attnlens import render

    def fork(conds):
        leaf = lambda: M.Chain([], M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 3, "_C::op"), None)
        return M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", [
            M.Branch(c, None, f"line {i}", leaf(), "/x/k.py", i) for i, c in enumerate(conds, 2)], None)), None)

    assert render.verdict_text(fork(["not enabled", "enabled"])) == [
        "Runs: op (torch op _C::op, /x/k.py:3, taken on this platform; 2 paths)"]
    assert render.verdict_text(fork(["flag", "not (flag)"]))[0].endswith("taken on this platform; 2 paths)")
    assert render.verdict_text(fork(["flag", "other"])) == ["Runs: op (torch op _C::op, /x/k.py:3, decided at run time; 2 paths)"]
    # `flag` tested in one function and `not (flag)` in another: two variables may share a name, nothing covers
    leaf = lambda: M.Chain([], M.Final(M.FinalKind.TORCH_OP, "/x/k.py", 3, "_C::op"), None)
    inner = lambda path, cond: M.Chain([], M.Final(M.FinalKind.FORK, path, 1, "g", fork=M.Fork(
        M.ForkKind.CALLS, None, path, 1, "g", [M.Branch(cond, None, "line 2", leaf(), path, 2)], None)), None)
    outer = M.Chain([], M.Final(M.FinalKind.FORK, "/x/k.py", 1, "f", fork=M.Fork(M.ForkKind.CALLS, None, "/x/k.py", 1, "f", [
        M.Branch(None, True, "line 5", inner("/x/a.py", "flag"), "/x/k.py", 5),
        M.Branch(None, True, "line 6", inner("/x/b.py", "not (flag)"), "/x/k.py", 6)], None)), None)
    assert render.verdict_text(outer) == ["Runs: op (torch op _C::op, /x/k.py:3, decided at run time; 2 paths)"]


def test_other_code_names_every_flag_that_rules_its_kernels_out():
    """A function that runs with every kernel of its tree ruled out by the platform says which conditions do it, each
    once (where the call itself is not made, one reason is given, as before)."""
    fork = M.Fork(M.ForkKind.CALLS, "a; b", "/x/f.py", 1, "pkg.f", [
        M.Branch("self.fp4", False, "line 2: k4(...)", _leaf(M.TORCH_OP, "_C::k4"), "/x/f.py", 2),
        M.Branch("not (self.fp4) and self.fp8", False, "line 4: k8(...)", _leaf(M.TORCH_OP, "_C::k8"), "/x/f.py", 4),
    ])
    runs = M.Chain([M.Hop("call", "/x/site.py", 10, "f")], M.Final(M.FORK, "/x/f.py", 1, "pkg.f", fork=fork), True)
    assert verdict_text(runs)[0] == ("Runs: other code of f on this platform, no kernel or op of its tree "
                                     "(self.fp4 is false here; not (self.fp4) and self.fp8 is false here)")
    guarded = M.Chain([M.Hop("call", "/x/site.py", 10, "f", condition="self.direct", reachable=False)],
                      M.Final(M.FORK, "/x/f.py", 1, "pkg.f", fork=fork), True)
    assert verdict_text(guarded)[0].startswith("Runs: nothing on this platform (") and "; " not in verdict_text(guarded)[0]


def test_a_cut_only_inside_a_path_not_taken_leaves_what_runs_whole():
    """The tree's bounds cut it only under a branch that is not taken here: what runs, and its conditions, are complete
    (no "on the listed paths" on the lines that run); what is not taken is still said to be partial. Upstream vLLM's
    `get_current_placement_group` hedged every line after a `ray.client(...)` branch became not taken at that call."""
    from attnlens.render import TRUNCATED_DEAD_WORDS

    t = _tree()
    dead = t.final.fork.branches[0]
    cut = M.Fork(M.ForkKind.CALLS, None, "/x/c.py", 1, "pkg.cuda_path", [
        M.Branch(None, True, "line 2: cuda_op(...)", _leaf(M.TORCH_OP, "_C::cuda_op"), "/x/c.py", 2)],
        truncated="leaf limit (48): 3 calls not expanded")
    dead.chain = M.Chain([M.Hop("call", "/x/top.py", 2, "cuda_path")], M.Final(M.FORK, "/x/c.py", 1, "pkg.cuda_path", fork=cut), True)
    assert t.truncated() and not t.truncated_live()
    lines = verdict_text(t)
    assert [ln for ln in lines if ln.startswith("Runs:")] == [
        'Runs: write (torch op _C::write, /x/k.py:3, decided at run time by kv_cache_dtype == "auto")',
        'Runs: kernel (Triton, /x/__init__.py:5, decided at run time by kv_cache_dtype == "fp8")',
        "Runs: vendorlib (not installed here: vendorlib, taken on this platform)"]
    assert "Not taken on this platform on the listed paths: cuda_op (torch op, if is_cuda())" in lines
    assert lines[-1] == TRUNCATED_DEAD_WORDS
    # a cut on a path that can run: every line hedged, as before
    t.final.fork.branches[1].chain.final.fork.truncated = "width bound"
    assert t.truncated_live() and verdict_text(t)[-1] == TRUNCATED_WORDS
