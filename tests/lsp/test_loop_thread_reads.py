"""The loop thread's state is read on the loop thread (issue 12): a server whose document versions, client
capabilities, settings, encoding and probe verdicts note every read made off the event loop thread, driven in
process through its own handlers (diagnostics, a code action and its codeAction/resolve, code lens, inlay
hints, symbols, call hierarchy, the trace and markdown commands). Before the handlers took their snapshot
(``request.py``) before the hop, ``fixes._workspace_edit`` / ``_document_changes`` / ``resolves_edits`` read
``doc_version`` and the capabilities on the analysis thread, and every feature but hover and navigation read
the encoding (``ls.positions``) there."""

from __future__ import annotations

import asyncio
import json
import threading

from lsprotocol import converters
from lsprotocol import types as T

from attnlens.lsp import features as F
from attnlens.lsp.analysis import Analysis
from attnlens.lsp.capabilities import ClientCaps
from attnlens.lsp.server import AttnLensServer
from tests.upgrade import fix_fixtures as FF

VERSION = 7


def _caps(resolve: bool) -> T.ClientCapabilities:
    return T.ClientCapabilities(
        workspace=T.WorkspaceClientCapabilities(workspace_edit=T.WorkspaceEditClientCapabilities(document_changes=True)),
        text_document=T.TextDocumentClientCapabilities(
            code_action=T.CodeActionClientCapabilities(resolve_support=T.ClientCodeActionResolveOptions(
                properties=["edit"])) if resolve else None,
            document_symbol=T.DocumentSymbolClientCapabilities(hierarchical_document_symbol_support=True)))


class _Watched(AttnLensServer):
    """A server that notes each read of its loop-thread state made on another thread."""

    def __init__(self, caps: T.ClientCapabilities):
        self.loop_thread = threading.get_ident()
        self.off_loop: list[str] = []
        self._client_caps = caps
        super().__init__()
        self.caps = ClientCaps.from_lsp(caps)

    def _read(self, what: str):
        if threading.get_ident() != self.loop_thread:
            self.off_loop.append(f"{what} read on thread {threading.current_thread().name}")

    def doc_version(self, uri: str) -> int | None:
        self._read("doc_version")
        return VERSION

    @property
    def client_capabilities(self) -> T.ClientCapabilities:
        self._read("client_capabilities")
        return self._client_caps


def _watched(name: str):
    """A property over ``_<name>`` whose reads are noted (set freely: __init__ sets them)."""

    def get(self):
        self._read(name)
        return self.__dict__["_" + name]

    def put(self, value):
        self.__dict__["_" + name] = value

    return property(get, put)


for _name in ("caps", "settings", "encoding", "probe_diagnostics", "open_docs"):
    setattr(_Watched, _name, _watched(_name))


def _server(caps: T.ClientCapabilities, ws) -> _Watched:
    server = _Watched(caps)
    for name in F.ALL:
        F.module(name).register(server)
    server.analysis = Analysis(ws)
    return server


def _roundtrip(action: T.CodeAction) -> T.CodeAction:
    conv = converters.get_converter()
    return conv.structure(json.loads(json.dumps(conv.unstructure(action, T.CodeAction))), T.CodeAction)


def _drive(server: _Watched, uri: str, features: bool = False) -> dict:
    """Diagnostics, a code action and its resolve (and with ``features`` every other request kind) through the
    registered handlers, on this thread's event loop."""
    fm = server.protocol.fm
    doc = T.TextDocumentIdentifier(uri)

    async def main() -> dict:
        server.loop_thread = threading.get_ident()
        server.ready.set()
        got: dict = {}
        try:
            rep = await fm.features[T.TEXT_DOCUMENT_DIAGNOSTIC](T.DocumentDiagnosticParams(text_document=doc))
            (d,) = [x for x in rep.items if x.code == "AL112"]
            acts = await fm.features[T.TEXT_DOCUMENT_CODE_ACTION](T.CodeActionParams(
                text_document=doc, range=d.range, context=T.CodeActionContext(diagnostics=[d])))
            got["actions"] = [x for x in acts or [] if isinstance(x.data, dict) and x.data.get("finding")]
            lazy = [x for x in got["actions"] if "fix" in x.data]
            got["resolved"] = [await fm.features[T.CODE_ACTION_RESOLVE](_roundtrip(x)) for x in lazy]
            got["diagnostic"] = d
            if not features:
                return got
            whole = T.Range(T.Position(0, 0), T.Position(10_000, 0))
            got["lens"] = await fm.features[T.TEXT_DOCUMENT_CODE_LENS](T.CodeLensParams(text_document=doc))
            got["hints"] = await fm.features[T.TEXT_DOCUMENT_INLAY_HINT](T.InlayHintParams(text_document=doc,
                                                                                           range=whole))
            got["outline"] = await fm.features[T.TEXT_DOCUMENT_DOCUMENT_SYMBOL](T.DocumentSymbolParams(text_document=doc))
            got["symbols"] = await fm.features[T.WORKSPACE_SYMBOL](T.WorkspaceSymbolParams(query="Flash"))
            items = await fm.features[T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY](T.CallHierarchyPrepareParams(
                text_document=doc, position=got["outline"][0].selection_range.start))
            for it in items or []:
                await fm.features[T.CALL_HIERARCHY_OUTGOING_CALLS](T.CallHierarchyOutgoingCallsParams(item=it))
                await fm.features[T.CALL_HIERARCHY_INCOMING_CALLS](T.CallHierarchyIncomingCallsParams(item=it))
            pos = got["outline"][0].selection_range.start
            await fm.commands["attnlens.trace"](uri, pos.line, pos.character)
            await fm.commands["attnlens.markdown"](uri, pos.line, pos.character)
        finally:
            server.debouncer.cancel_all()
            for t in list(server.background):
                t.cancel()
        return got

    try:
        return asyncio.run(main())
    finally:
        server.worker.stop()


def _plugin(tmp_path):
    ws, _old, _new = FF.make(tmp_path)
    flash = ws.root / "fixplug" / "attention" / "flash.py"
    return ws, flash.resolve().as_uri()


def test_a_resolving_client_reads_versions_and_capabilities_on_the_loop_thread(tmp_path):
    ws, uri = _plugin(tmp_path)
    server = _server(_caps(resolve=True), ws)
    got = _drive(server, uri)
    assert server.off_loop == []
    (act,) = got["actions"]
    assert act.edit is None and act.diagnostics == [got["diagnostic"]]  # the light bulb: the title only
    (done,) = got["resolved"]
    (change,) = done.edit.document_changes  # the version read on the loop thread, before the hop
    assert change.text_document.uri == uri and change.text_document.version == VERSION
    assert [e.new_text for e in change.edits] == ["    seq_lens: list | None = None\n"]
    ws.close()


def test_a_client_without_resolve_gets_the_versioned_edit_at_once(tmp_path):
    ws, uri = _plugin(tmp_path)
    server = _server(_caps(resolve=False), ws)
    got = _drive(server, uri)
    assert server.off_loop == []
    (act,) = got["actions"]
    (change,) = act.edit.document_changes
    assert change.text_document.version == VERSION and act.diagnostics == [got["diagnostic"]]
    assert got["resolved"] == []
    ws.close()


def test_every_feature_reads_the_loop_threads_state_on_the_loop_thread(tmp_path):
    """Code lens, inlay hints, symbols, call hierarchy and the commands too. (Before, the code lens of a file
    asked for before the registry was computed also started its refresh task from the analysis thread:
    ``RuntimeError: There is no current event loop``.)"""
    ws, uri = _plugin(tmp_path)
    server = _server(_caps(resolve=True), ws)
    got = _drive(server, uri, features=True)
    assert server.off_loop == []
    assert got["lens"] is not None and got["hints"] is not None and got["outline"] and got["symbols"]
    assert isinstance(got["outline"][0], T.DocumentSymbol)  # the client's hierarchical capability, read on the loop
    ws.close()
