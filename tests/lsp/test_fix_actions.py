"""Quick-fix code actions (lsp/features/fixes.py) through runtime_actions.code_actions: kind
quickfix, a versioned WorkspaceEdit computed on the buffer's text (an unsaved overlay), attached
to its diagnostic; a stale diagnostic gets a disabled action with the reason."""

from __future__ import annotations

from lsprotocol import types as T

from attnlens.lsp.analysis import Analysis
from attnlens.lsp.answers import Diag
from attnlens.lsp.capabilities import ClientCaps
from attnlens.lsp.convert import Positions, uri_to_path
from attnlens.lsp.features import runtime_actions as RA
from attnlens.lsp.features.diagnostics import to_diagnostic
from attnlens.lsp.request import Request
from attnlens.rules.engine import check_module
from tests.upgrade import fix_fixtures as FF


class _LS:
    """What the code-action handlers read on the loop thread: the document's version and the client's
    capabilities (a client that takes versioned documentChanges)."""

    caps = ClientCaps.from_lsp(T.ClientCapabilities(workspace=T.WorkspaceClientCapabilities(
        workspace_edit=T.WorkspaceEditClientCapabilities(document_changes=True))))

    def positions(self, a):
        return Positions(a.line_text, "utf-16")

    def request(self, uri: str, pos: T.Position) -> Request:
        return Request(uri, uri_to_path(uri), 7, pos.line, pos.character, caps=self.caps)


def code_actions(a, ls, path, uri, rng: T.Range, diags: list[T.Diagnostic]) -> list[T.CodeAction]:
    """What the textDocument/codeAction handler does around the worker function (``RA.code_actions``)."""
    got = RA.code_actions(a, ls.request(uri, rng.start), tuple(Diag.from_lsp(d, path) for d in diags))
    return [x.to_lsp(diags) for x in got]


def resolve_fix(a, ls, action: T.CodeAction, path: str) -> tuple[T.CodeAction, str | None]:
    """What the codeAction/resolve handler does around the worker function (``fixes.resolve_fix``)."""
    from attnlens.lsp.features.fixes import FixDocument, resolve_fix as worker

    doc = FixDocument(action.data["uri"], 7, ls.caps.document_changes)
    edit, why = worker(a, doc, action.title, action.data, path)
    if edit is not None:
        action.edit = edit.to_lsp()
    return action, why


def _apply(text: str, edit: T.TextEdit) -> str:
    lines = text.split("\n")
    s, e = edit.range.start, edit.range.end
    before = "\n".join(lines[:s.line]) + ("\n" if s.line else "") + lines[s.line][:s.character]
    after = lines[e.line][e.character:] + ("\n" if e.line < len(lines) - 1 else "") + "\n".join(lines[e.line + 1:])
    return before + edit.new_text + after


def _diag(a, ls, path, rule) -> T.Diagnostic:
    f = next(f for f in check_module(a.ws, path) if f.rule == rule)
    return to_diagnostic(ls.positions(a), path, f).to_lsp()


def test_quick_fix_is_a_versioned_workspace_edit_on_the_buffer(tmp_path):
    ws, _old, _new = FF.make(tmp_path)
    path = str(ws.root / "fixplug" / "attention" / "flash.py")
    # an unsaved buffer: a blank line above the class moves every line; the fix uses this text
    buffer = FF.FLASH.replace("\n\n@dataclass\n", "\n\n\n@dataclass\n")
    ws.index.set_overlay(path, buffer)
    a, ls = Analysis(ws), _LS()
    uri = (ws.root / "fixplug" / "attention" / "flash.py").as_uri()
    d = _diag(a, ls, path, "AL112")
    acts = [x for x in code_actions(a, ls, path, uri, d.range, [d]) if x.edit is not None]
    assert [x.title for x in acts] == ["Add upstream's field seq_lens to FlashMetadata (read by upstream at "
                                       "vllm/attention/backends/flash.py:35)"]
    act = acts[0]
    assert act.kind == T.CodeActionKind.QuickFix and act.diagnostics == [d] and act.is_preferred
    (doc,) = act.edit.document_changes
    assert doc.text_document.uri == uri and doc.text_document.version == 7
    (edit,) = doc.edits
    assert edit.new_text == "    seq_lens: list | None = None\n"
    assert _apply(buffer, edit) == FF.FIELDS_AFTER.replace("\n\n@dataclass\n", "\n\n\n@dataclass\n")
    assert (ws.root / "fixplug" / "attention" / "flash.py").read_text() == FF.FLASH  # nothing written
    ws.close()


def test_stale_diagnostic_gets_a_disabled_action(tmp_path):
    ws, _old, _new = FF.make(tmp_path)
    path = str(ws.root / "fixplug" / "attention" / "flash.py")
    a, ls = Analysis(ws), _LS()
    d = _diag(a, ls, path, "AL112")
    ws.index.set_overlay(path, FF.FLASH.replace("class FlashMetadata:", "class FlashMetadata:  # edited"))
    uri = (ws.root / "fixplug" / "attention" / "flash.py").as_uri()
    acts = [x for x in code_actions(a, ls, path, uri, d.range, [d]) if x.disabled is not None]
    assert [(x.title, x.edit) for x in acts] == [("Quick fix: the code changed since this finding was computed", None)]
    assert acts[0].disabled.reason.startswith("The finding's target text changed since it was computed")
    ws.close()


def test_diagnostics_without_a_fix_add_no_action(tmp_path):
    ws, _old, _new = FF.make(tmp_path)
    path = str(ws.root / "fixplug" / "attention" / "flash.py")
    a, ls = Analysis(ws), _LS()
    d = T.Diagnostic(range=T.Range(T.Position(0, 0), T.Position(0, 1)), message="x", source="attnlens", code="AL105",
                     data={"id": "AL105-0123456789ab"})
    uri = (ws.root / "fixplug" / "attention" / "flash.py").as_uri()
    assert [x for x in code_actions(a, ls, path, uri, d.range, [d]) if x.edit is not None or x.disabled] == []
    ws.close()


class _ResolvingLS(_LS):
    """A client that fills in the edit through codeAction/resolve (VS Code)."""

    caps = ClientCaps.from_lsp(T.ClientCapabilities(
        workspace=T.WorkspaceClientCapabilities(workspace_edit=T.WorkspaceEditClientCapabilities(document_changes=True)),
        text_document=T.TextDocumentClientCapabilities(code_action=T.CodeActionClientCapabilities(
            resolve_support=T.ClientCodeActionResolveOptions(properties=["edit"])))))


def _roundtrip(action: T.CodeAction) -> T.CodeAction:
    """The action as the client sends it back: through JSON, like the wire."""
    import json

    from lsprotocol import converters

    conv = converters.get_converter()
    return conv.structure(json.loads(json.dumps(conv.unstructure(action, T.CodeAction))), T.CodeAction)


def test_resolving_client_gets_the_title_first_and_the_edit_on_resolve(tmp_path):
    ws, _old, _new = FF.make(tmp_path)
    path = str(ws.root / "fixplug" / "attention" / "flash.py")
    a, ls = Analysis(ws), _ResolvingLS()
    uri = (ws.root / "fixplug" / "attention" / "flash.py").as_uri()
    d = _diag(a, ls, path, "AL112")
    (act,) = [x for x in code_actions(a, ls, path, uri, d.range, [d]) if x.data and "fix" in x.data]
    assert act.title.startswith("Add upstream's field seq_lens to FlashMetadata") and act.edit is None
    got, why = resolve_fix(a, ls, _roundtrip(act), path)
    assert why is None
    (doc,) = got.edit.document_changes
    assert doc.text_document.version == 7 and [e.new_text for e in doc.edits] == ["    seq_lens: list | None = None\n"]
    assert _apply(FF.FLASH, doc.edits[0]) == FF.FIELDS_AFTER
    # the buffer changed under the finding between the light bulb and the pick: no edit, the reason
    ws.index.set_overlay(path, FF.FLASH.replace("class FlashMetadata:", "class FlashMetadata:  # edited"))
    got, why = resolve_fix(a, ls, _roundtrip(act), path)
    assert got.edit is None and why.startswith("The finding's target text changed since it was computed")
    ws.close()


def test_the_light_bulb_request_does_not_import_libcst(tmp_path):
    """Run in a fresh interpreter: the first request of a resolving client leaves libcst unimported."""
    import subprocess
    import sys

    code = f"""
import sys
sys.path.insert(0, {str(FF.__file__.rsplit('/tests/', 1)[0])!r})
from pathlib import Path
from tests.lsp.test_fix_actions import _ResolvingLS, _diag, FF, Analysis, code_actions
ws, _o, _n = FF.make(Path({str(tmp_path)!r}))
path = str(ws.root / "fixplug" / "attention" / "flash.py")
a, ls = Analysis(ws), _ResolvingLS()
d = _diag(a, ls, path, "AL112")
acts = code_actions(a, ls, path, "file://" + path, d.range, [d])
assert any(x.data and "fix" in x.data for x in acts), acts
print("libcst" in sys.modules)
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().splitlines()[-1] == "False"


def test_code_action_then_resolve_through_the_server(tmp_path):
    """A real `attnlens serve` and a client that resolves (VS Code's capabilities): the light-bulb reply
    has the title and no edit; codeAction/resolve returns the versioned edit; after the buffer changed
    under the finding, resolve returns no edit and the server says why (window/showMessage)."""
    import time

    from tests.reliability.lspdriver import ServerHandle, default_capabilities

    FF.make(tmp_path)
    flash = tmp_path / "plugin" / "fixplug" / "attention" / "flash.py"
    caps = default_capabilities()  # (attrs classes: set in place)
    caps.workspace.workspace_edit = T.WorkspaceEditClientCapabilities(document_changes=True)
    caps.text_document.code_action = T.CodeActionClientCapabilities(
        resolve_support=T.ClientCodeActionResolveOptions(properties=["edit"]))
    # the target interpreter sees the fixture's vllm 2.0 first (PYTHONPATH, inherited by the target probe)
    srv = ServerHandle(tmp_path / "plugin", tmp_path / "srv-cache", capabilities=caps,
                       env={"PYTHONPATH": str(tmp_path / "v2")})
    try:
        srv.start()
        srv.wait_indexed()
        assert srv.server_capabilities["capabilities"]["codeActionProvider"]["resolveProvider"] is True
        uri = srv.open(flash)
        diags = []
        end = time.monotonic() + 60
        while time.monotonic() < end and not diags:
            rep = srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}}, timeout=60)
            diags = [d for d in (rep.result or {}).get("items", []) if d.get("code") == "AL112"]
        (d,) = diags
        rep = srv.request(T.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": {"uri": uri}, "range": d["range"],
                                                        "context": {"diagnostics": [d]}}, timeout=30)
        (act,) = [x for x in rep.result if isinstance(x.get("data"), dict) and "fix" in x["data"]]
        assert act["title"].startswith("Add upstream's field seq_lens to FlashMetadata") and "edit" not in act
        done = srv.request(T.CODE_ACTION_RESOLVE, act, timeout=60).result
        (doc,) = done["edit"]["documentChanges"]
        assert doc["textDocument"] == {"uri": uri, "version": 1}
        assert [e["newText"] for e in doc["edits"]] == ["    seq_lens: list | None = None\n"]
        # the class line edited in the buffer: the finding's text is not what it was
        text = flash.read_text()
        i = text.split("\n").index("class FlashMetadata:")
        srv.change(uri, 2, [T.TextDocumentContentChangePartial(
            range=T.Range(T.Position(i, 20), T.Position(i, 20)), text="  # edited")])
        done = srv.request(T.CODE_ACTION_RESOLVE, act, timeout=60).result
        assert "edit" not in done
        end = time.monotonic() + 10
        while time.monotonic() < end and not any("target text changed" in m[2] for m in srv.messages):
            time.sleep(0.1)
        assert any(m[0] == "show" and m[2].startswith("AttnLens: The finding's target text changed") for m in srv.messages)
    finally:
        srv.close()
