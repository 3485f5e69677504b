"""Probe code actions, probe verdicts as diagnostics of their own source, evidence in the hover."""

from __future__ import annotations

import ast
import importlib.util

import pytest
from lsprotocol import types as T

from tests.lsp.conftest import EXAMPLE, position_of, uri

pytestmark = pytest.mark.skipif(importlib.util.find_spec("attnlens.runtime") is None, reason="attnlens.runtime missing")

FA = EXAMPLE / "mini_metax" / "attention" / "backends" / "flash_attn.py"


def command_of(act) -> dict:
    """The action's command as a dict. pygls' client decodes the ``CodeAction | Command``
    union as a Command and stringifies the nested command object: undo that quirk."""
    c = act.command
    if isinstance(c, str):
        return ast.literal_eval(c)
    return {"command": c.command, "arguments": c.arguments}


async def actions_at(session, path, needle, offset=0):
    pos = position_of(path, needle, offset)
    return await session.client.text_document_code_action_async(T.CodeActionParams(
        T.TextDocumentIdentifier(uri(path)), T.Range(pos, pos), T.CodeActionContext(diagnostics=[])))


@pytest.mark.asyncio(loop_scope="module")
async def test_probe_code_actions_offered_only_as_commands(vscode):
    acts = await actions_at(vscode, FA, "reshape_and_cache_flash(key")
    titles = [a.title for a in acts or []]
    assert "Run probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash" in titles
    act = next(a for a in acts if a.title.startswith("Run probe kv_cache_write"))
    cmd = command_of(act)
    assert getattr(act, "edit", None) is None and cmd["command"] == "attnlens.runProbe"  # nothing runs until chosen
    spec = cmd["arguments"][0]
    assert spec["family"] == "kv_cache_write" and spec["uri"] == uri(FA)

    acts = await actions_at(vscode, FA, "decode_attention_fwd(q, key_cache")
    assert any(a.title == "Run probe decode on mini_metax.attention.ops.decode:decode_attention_fwd" for a in acts or [])

    # a call that reaches no probe-able callable offers nothing
    acts = await actions_at(vscode, FA, "scheduler_metadata = get_scheduler_metadata(", offset=len("scheduler_metadata = "))
    assert not acts


@pytest.mark.asyncio(loop_scope="module")
async def test_probe_run_publishes_its_own_diagnostic_and_hover_evidence(vscode):
    acts = await actions_at(vscode, FA, "reshape_and_cache_flash(key")
    cmd = command_of(next(a for a in acts if a.title.startswith("Run probe kv_cache_write")))
    vscode.open(FA)
    # "Run anyway": past the pre-flight check (tests/lsp/test_probe_flow.py), so that evidence is recorded
    result = await vscode.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command=cmd["command"], arguments=[{**cmd["arguments"][0], "force": True}]))
    verdict = result["verdict"]
    assert verdict in {"pass", "fail", "import_error", "error", "crashed", "timeout", "inconclusive"}
    report = await vscode.client.text_document_diagnostic_async(T.DocumentDiagnosticParams(T.TextDocumentIdentifier(uri(FA))))
    probe = [d for d in report.items if d.source == "attnlens-probe"]
    assert len(probe) == 1
    pos = position_of(FA, "reshape_and_cache_flash(key")
    assert probe[0].range.start.line == pos.line
    assert f"probe kv_cache_write on _C_cache_ops::reshape_and_cache_flash: {verdict.upper()}" in probe[0].message
    # rule diagnostics are still there, under their own source
    assert all(d.source in {"attnlens", "attnlens-probe", "attnlens-drift"} for d in report.items)
    text = (await vscode.hover(FA, pos)).contents.value
    assert "Probe evidence" in text and verdict.upper() in text


@pytest.mark.asyncio(loop_scope="module")
async def test_inventory_command(vscode):
    got = await vscode.client.workspace_execute_command_async(T.ExecuteCommandParams(
        command="attnlens.inventory", arguments=[{"scope": ["mini_metax/attention/**"], "format": "md"}]))
    md = got["markdown"]
    assert "mini_metax/attention/backends/flash_attn.py" in md
    assert "mini_metax/attention/ops/decode.py" in md
    with pytest.raises(Exception, match="format must be md or json"):
        await vscode.client.workspace_execute_command_async(T.ExecuteCommandParams(
            command="attnlens.inventory", arguments=[{"format": "pdf"}]))


@pytest.mark.asyncio(loop_scope="module")
async def test_subject_setting_is_validated(tmp_path):
    from tests.lsp.conftest import start_session, stop_session

    session = await start_session(tmp_path, init_options={"targetPython": __import__("sys").executable, "subject": "nonsense"})
    try:
        st = await session.wait_indexed()
        assert st["root"]  # served with the default subject
    finally:
        await stop_session(session)
