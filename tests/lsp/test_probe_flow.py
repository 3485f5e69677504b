"""The editor's probe flow and Go to Definition (issue 16, items 4 and 6).

* a probe code action carries everything the run needs (family, target, what the pre-flight checks),
  and ``attnlens.runProbe`` with exactly those arguments runs without asking anything else;
* before running, a pre-flight check says why a probe cannot succeed in the target environment (the
  provider package, torch, a device), in one line, with the next step; a run that happens answers a
  one-line reason too (the notification and the Probe runs row show it);
* one name per probe family: the contracts, the rule diagnostics, the editor's picker and the CLI say
  ``varlen`` / ``decode`` / ``topk``; the older spellings are still accepted;
* Go to Definition answers the Python ``def`` the name is bound to, not the import line on the way.
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

import pytest
from lsprotocol import types as T

from attnlens.runtime import evidence as ev
from attnlens.runtime import preflight as P
from attnlens.runtime import probes
from tests.lsp.conftest import EXAMPLE, REPO, position_of, readme_text, start_session, stop_session, uri
from tests.probe_fixtures.runtime_support import FIXTURES, require_target

FA = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"
FAMILIES = set(probes.family_names())


def command_of(act) -> dict:
    """The action's command (pygls' client stringifies the nested Command of a CodeAction)."""
    c = act.command
    if isinstance(c, str):
        return ast.literal_eval(c)
    return {"command": c.command, "arguments": c.arguments}


async def action_at(session, path: Path, needle: str, title: str) -> tuple[T.Position, dict]:
    pos = position_of(path, needle)
    acts = await session.client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri(path)), T.Range(pos, pos), T.CodeActionContext(diagnostics=[])))
    titles = [a.title for a in acts or []]
    assert title in titles, titles
    return pos, command_of(next(a for a in acts if a.title == title))


def line_text(loc: T.Location) -> str:
    return Path(loc.uri[len("file://"):]).read_text(encoding="utf-8").split("\n")[loc.range.start.line]


# --------------------------------------------------------------------------- the action's arguments


@pytest.mark.asyncio(loop_scope="module")
async def test_probe_action_arguments_carry_what_the_run_needs(vscode):
    pos, cmd = await action_at(vscode, FA, "reshape_and_cache_flash(key",
                               "Run probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash")
    assert cmd["command"] == "attnlens.runProbe"
    # the op is registered in C++ for CUDA only, by extensions of which none is importable here
    assert cmd["arguments"] == [{
        "family": "kv_cache_write", "target": "_C_cache_ops::reshape_and_cache_flash", "uri": uri(FA),
        "line": pos.line, "character": pos.character,
        "requires": {"providers": ["minikern._C", "mini_metax._C"], "device": "required",
                     "device_why": "registered for CUDA only"},
    }]

    pos, cmd = await action_at(vscode, FA, "flash_attn_varlen_func(", "Run probe varlen on miniflash:flash_attn_varlen_func")
    assert cmd["arguments"] == [{
        "family": "varlen", "target": "miniflash:flash_attn_varlen_func", "uri": uri(FA),
        "line": pos.line, "character": pos.character,
        "requires": {"package": "miniflash", "device": "required",
                     "device_why": "its code is not installed here, so no CPU path is known"},
    }]

    # a Python wrapper of a Triton kernel in the workspace: runs on the CPU under the interpreter
    pos, cmd = await action_at(vscode, FA, "decode_attention_fwd(q, key_cache",
                               "Run probe decode on mini_metax.attention.ops.decode:decode_attention_fwd")
    assert cmd["arguments"][0]["requires"] == {"package": "mini_metax", "device": "cpu"}


# --------------------------------------------------------------------------- running it


@pytest.fixture(scope="module")
def target_python():
    return require_target(triton=True)


@pytest.mark.asyncio(loop_scope="module")
async def test_probe_runs_from_the_action_and_the_preflight_says_why_not(tmp_path_factory, target_python):
    """A CPU-only target with torch but without the provider package: the action's own arguments are
    enough (nothing else is asked), the probe is not run, and the reason is one exact line."""
    env = {"PYTHONPATH": str(FIXTURES)}
    session = await start_session(tmp_path_factory.mktemp("flow"), init_options={"targetPython": target_python}, env=env)
    try:
        await session.wait_indexed(timeout=180)
        session.open(FA)
        pos, cmd = await action_at(session, FA, "flash_attn_varlen_func(", "Run probe varlen on miniflash:flash_attn_varlen_func")
        got = await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
            command=cmd["command"], arguments=cmd["arguments"]))
        assert got["family"] == "varlen" and got["target"] == "miniflash:flash_attn_varlen_func"
        assert got["verdict"] == "not_run"
        assert got["reason"] == ("needs the provider package `miniflash` and a device; "
                                 "the target environment is CPU-only and does not have `miniflash`")
        assert got["next"] == ("run it in an environment with `miniflash` and a GPU: select its interpreter "
                               "(AttnLens: Select target Python…), or on that machine: attnlens probe run varlen "
                               "--target miniflash:flash_attn_varlen_func --python PYTHON")
        assert got["preflight"]["blockers"] == ["package", "device"]
        assert got["preflight"]["facts"]["gpus"] == 0 and got["preflight"]["facts"]["packages"] == {"miniflash": False}
        # the verdict and its reason on the line the action was offered on
        report = await session.client.text_document_diagnostic_async(
            T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(FA))))
        probe = [d for d in report.items if d.source == "attnlens-probe"]
        assert [(d.range.start.line, d.message) for d in probe] == [
            (pos.line, f"probe varlen on miniflash:flash_attn_varlen_func: NOT_RUN (0/0 cases) "
                       f"[env {got['environment']['hash']}]: {got['reason']}")]

        # the op: no importable provider, CUDA-only kernels
        _, cmd = await action_at(session, FA, "reshape_and_cache_flash(key",
                                 "Run probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash")
        got = await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
            command=cmd["command"], arguments=cmd["arguments"]))
        assert got["reason"] == ("needs the provider module `minikern._C` or `mini_metax._C` and a device; the target "
                                 "environment is CPU-only and has neither `minikern._C` nor `mini_metax._C`")

        # a probe that can run: older family spelling, a real run, a one-line reason from its cases
        got = await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
            command="attnlens.runProbe",
            arguments=[{"family": "merge_states", "target": "probefix.lse_merge:merge_attn_states_exp2"}]))
        assert got["family"] == "lse_merge" and got["verdict"] == "fail"
        failing = [c for c in got["cases"] if c["status"] not in ("pass", "skip") and c.get("required", True)]
        first = failing[0]
        assert first["name"] == "basic"
        assert got["reason"] == ev.reason_line(got)
        assert got["reason"].startswith(f"{len(failing)}/{len(got['cases'])} cases fail; basic: ")
        assert "\n" not in got["reason"] and len(got["reason"]) <= 200

        # "Run anyway" (force) skips the pre-flight: the import error is recorded as evidence
        got = await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
            command="attnlens.runProbe", arguments=[{"family": "varlen", "target": "miniflash:flash_attn_varlen_func",
                                                     "force": True}]))
        assert got["verdict"] == "import_error" and got["id"]
        assert got["reason"] == got["message"] and got["reason"].startswith("importing miniflash failed: ModuleNotFoundError")

        # bad requests are clear errors, the server keeps serving
        with pytest.raises(Exception, match="unknown probe family 'nope'"):
            await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
                command="attnlens.runProbe", arguments=[{"family": "nope", "target": "x:y"}]))
        with pytest.raises(Exception, match="target must be a non-empty string"):
            await session.client.workspace_execute_command_async(T.ExecuteCommandParams(
                command="attnlens.runProbe", arguments=[{"family": "varlen"}]))
    finally:
        await stop_session(session)


def test_preflight_reasons(tmp_path):
    site = tmp_path / "site"
    (site / "pkg").mkdir(parents=True)
    (site / "pkg" / "__init__.py").write_text("")
    (site / "pkg" / "_C.cpython-311-x86_64-linux-gnu.so").write_text("")
    (site / "single.py").write_text("")
    cpu = {"gpu": {"count": 0}, "torch": {"version": "2.13.0+cpu"}, "sys_path": [str(site)]}
    gpu = {**cpu, "gpu": {"count": 1, "models": ["X"]}}
    assert P.module_present(cpu, "pkg") and P.module_present(cpu, "pkg._C") and P.module_present(cpu, "single")
    assert not P.module_present(cpu, "pkg.missing") and not P.module_present(cpu, "other")

    op = P.requires_from_final("torch_op", dispatch_keys=["CUDA"], providers=["other._C", "pkg._C"])
    assert P.check(gpu, "kv_cache_write", "ns::op", op).ok
    pf = P.check(cpu, "kv_cache_write", "ns::op", op)
    assert (pf.ok, pf.blockers, pf.reason) == (False, ["device"], "needs a device; the target environment is CPU-only")
    # a CPU kernel is registered: nothing to object
    assert P.check(cpu, "kv_cache_write", "ns::op", P.requires_from_final("torch_op", dispatch_keys=["CUDA", "CPU"])).ok
    # no torch, asked for cuda
    pf = P.check({**cpu, "torch": {"error": "ModuleNotFoundError: No module named 'torch'"}}, "lse_merge", "pkg.m:f",
                 {}, device="cuda")
    assert pf.reason == ("needs torch and a device; the target environment is CPU-only and has no torch "
                         "(ModuleNotFoundError: No module named 'torch')")
    # the interpreter does not start
    pf = P.check(None, "lse_merge", "pkg.m:f", {}, env_error="could not collect the environment of /x: boom")
    assert (pf.blockers, pf.reason) == (["python"], "the target interpreter cannot be used: could not collect the "
                                                    "environment of /x: boom")
    # three providers, none importable
    pf = P.check(gpu, "topk", "ns::op", {"providers": ["a._C", "b._C", "c._C"]})
    assert pf.reason == ("needs the provider module `a._C` or `b._C` or `c._C`; the target environment has none of "
                         "`a._C`, `b._C`, `c._C`")


# --------------------------------------------------------------------------- one name per family


def test_one_name_per_probe_family(tmp_path):
    from attnlens.cli import build_parser
    from attnlens.rules.contracts import PROBE_FAMILIES, load_contracts

    assert set(PROBE_FAMILIES) == FAMILIES == {"varlen", "kv_cache_write", "lse_merge", "decode", "topk"}
    # the shipped contracts
    cs = load_contracts()
    named = {c.probe for c in cs.contracts if c.probe} | {
        cap.probe for c in cs.contracts for cap in c.capabilities.values() if cap.probe}
    assert named <= FAMILIES and {"varlen", "decode", "topk"} <= named
    assert all(c.probe_for() in FAMILIES for c in cs.contracts if c.probe_for())
    # an older spelling in a contract file is read as the family's one name
    f = tmp_path / "old.toml"
    f.write_text('schema_version = 1\n[[contract]]\nid = "x"\nfamily = "sparse_topk"\ncovers = ["x::y"]\n'
                 'probe = "sparse_topk"\n[contract.capabilities]\nsinks = { value = "unknown", probe = "varlen_attention" }\n',
                 encoding="utf-8")
    c = load_contracts([f]).contracts[0]
    assert (c.probe, c.capabilities["sinks"].probe, c.probe_for("sinks")) == ("topk", "varlen", "varlen")
    # the editor's family picker lists the same names
    ts = (REPO / "client-vscode" / "src" / "types.ts").read_text(encoding="utf-8")
    block = ts[ts.index("export const PROBE_FAMILIES"):]
    block = block[: block.index("];")]
    assert re.findall(r'name: "(\w+)"', block) == probes.family_names()
    # the CLI takes the older names and runs the family under its one name
    for old, new in [("varlen_attention", "varlen"), ("decode_attention", "decode"), ("sparse_topk", "topk"),
                     ("varlen", "varlen")]:
        args = build_parser().parse_args(["probe", "run", old, "--target", "x:y"])
        assert args.family == new
    with pytest.raises(SystemExit):
        build_parser().parse_args(["probe", "run", "nope", "--target", "x:y"])


@pytest.mark.asyncio(loop_scope="module")
async def test_diagnostics_name_probes_by_their_one_name(vscode):
    report = await vscode.client.text_document_diagnostic_async(
        T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(FA))))
    rules = [d for d in report.items if d.source == "attnlens"]
    named = {(d.data or {}).get("probe") for d in rules} - {None}
    assert named and named <= FAMILIES, named
    in_text = set(re.findall(r"`(\w+)` probe", " ".join(d.message for d in rules)))
    assert in_text and in_text <= FAMILIES, in_text


# --------------------------------------------------------------------------- Go to Definition


@pytest.mark.asyncio(loop_scope="module")
async def test_definition_is_the_python_def_not_the_import_line(vscode):
    cases = [
        # (README row, file the def is in, its line text); the name is imported in the calling file
        ("upstream op served by the plugin's extension (call)", "_custom_ops.py", "def reshape_and_cache_flash("),
        ("call into that wrapper", "decode.py", "def decode_attention_fwd(*args, **kwargs):"),
        ("Triton through a Python wrapper (call)", "merge_attn_states.py", "def merge_attn_states("),
        ("call through the re-export", "unified.py", "def mini_unified_attention_fwd("),
    ]
    for kind, filename, def_line in cases:
        path, text = readme_text(kind)
        locs = await vscode.client.text_document_definition_async(
            T.DefinitionParams(T.TextDocumentIdentifier(uri(path)), position_of(path, text)))
        assert locs and len(locs) == 1, (kind, locs)
        loc = locs[0]
        assert loc.uri.endswith("/" + filename) and loc.uri != uri(path), (kind, loc.uri)
        assert line_text(loc).strip() == def_line, (kind, line_text(loc))
        name = def_line.split("(")[0].split()[-1]
        assert line_text(loc)[loc.range.start.character:loc.range.end.character] == name
    # a package that is not installed has no def: the import that would bind it
    path, text = readme_text("call into a not-installed package")
    locs = await vscode.client.text_document_definition_async(
        T.DefinitionParams(T.TextDocumentIdentifier(uri(path)), position_of(path, text)))
    assert len(locs) == 1 and locs[0].uri.endswith("/fa_utils.py")
    assert line_text(locs[0]).strip().startswith("from miniflash import flash_attn_varlen_func")
    assert line_text(locs[0])[locs[0].range.start.character:locs[0].range.end.character] == "flash_attn_varlen_func"


@pytest.mark.asyncio(loop_scope="module")
async def test_hover_says_where_implementation_goes(vscode):
    from attnlens.lsp.features.navigation import NAV_HINT

    text = await vscode.hover_text(FA, position_of(FA, "reshape_and_cache_flash(key"))
    assert text.rstrip().endswith(NAV_HINT)
    impl = await vscode.client.text_document_implementation_async(
        T.ImplementationParams(T.TextDocumentIdentifier(uri(FA)), position_of(FA, "reshape_and_cache_flash(key")))
    assert [os.path.basename(loc.uri) for loc in impl] == ["cache_kernels.cu"]
