"""Quick-fix code actions (lsp/features/fixes.py) through runtime_actions.code_actions: kind
quickfix, a versioned WorkspaceEdit computed on the buffer's text (an unsaved overlay), attached
to its diagnostic; a stale diagnostic gets a disabled action with the reason."""

from __future__ import annotations

from lsprotocol import types as T

from attnlens.lsp.analysis import Analysis
from attnlens.lsp.convert import Positions
from attnlens.lsp.features.diagnostics import to_diagnostic
from attnlens.lsp.features.runtime_actions import code_actions
from attnlens.rules.engine import check_module
from tests.upgrade import fix_fixtures as FF


class _LS:
    """What the code-action handlers use of the server."""

    encoding = "utf-16"
    client_capabilities = T.ClientCapabilities(workspace=T.WorkspaceClientCapabilities(
        workspace_edit=T.WorkspaceEditClientCapabilities(document_changes=True)))

    def positions(self, a):
        return Positions(a.line_text, self.encoding)

    def doc_version(self, uri):
        return 7


def _apply(text: str, edit: T.TextEdit) -> str:
    lines = text.split("\n")
    s, e = edit.range.start, edit.range.end
    before = "\n".join(lines[:s.line]) + ("\n" if s.line else "") + lines[s.line][:s.character]
    after = lines[e.line][e.character:] + ("\n" if e.line < len(lines) - 1 else "") + "\n".join(lines[e.line + 1:])
    return before + edit.new_text + after


def _diag(a, ls, path, rule):
    f = next(f for f in check_module(a.ws, path) if f.rule == rule)
    d = to_diagnostic(ls.positions(a), path, f)
    return d


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
                                       "vllm/attention/backends/flash.py:32)"]
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
