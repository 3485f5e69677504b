"""Document sync and file watching: the only handlers that change analysis state.

pygls keeps the editor text (incremental sync); these handlers mirror it
into the index as *overlays* (the buffer wins over the disk) through the
worker queue, so requests sent after an edit see it.
"""

from __future__ import annotations

import logging
import os

from lsprotocol import types as T

from ..convert import uri_to_path
from ..server import AttnLensServer

log = logging.getLogger("attnlens.lsp")


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_DID_OPEN)
    def did_open(params: T.DidOpenTextDocumentParams) -> None:
        path = uri_to_path(params.text_document.uri)
        if path is None or (params.text_document.uri.startswith("untitled:")
                            and params.text_document.language_id != "python"):
            return
        ls.open_docs.pop(path, None)  # (re-opened: the most recently used)
        ls.open_docs[path] = params.text_document.uri
        if path.endswith(".py") and ls.analysis is not None:
            _overlay_if_changed(ls, path, params.text_document.text)
            ls.debouncer.schedule("open-sites", 0.5, ls.warm_open_sites)
        _diagnostics_changed(ls, params.text_document.uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_CHANGE)
    def did_change(params: T.DidChangeTextDocumentParams) -> None:
        uri = params.text_document.uri
        path = uri_to_path(uri)
        if path is None or not path.endswith(".py") or (uri.startswith("untitled:") and path not in ls.open_docs):
            return
        text = ls.workspace.get_text_document(uri).source
        ls.touch_doc(path)
        ls.overlaid.add(path)
        ls.mutate(lambda a: a.q.set_overlay(path, text))
        _diagnostics_changed(ls, uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_CLOSE)
    def did_close(params: T.DidCloseTextDocumentParams) -> None:
        uri = params.text_document.uri
        path = uri_to_path(uri)
        if path is None:
            return
        ls.open_docs.pop(path, None)
        if path in ls.overlaid:
            ls.overlaid.discard(path)
            ls.mutate(lambda a: a.q.set_overlay(path, None))
        from .diagnostics import forget

        forget(ls, uri)

    @ls.feature(T.TEXT_DOCUMENT_DID_SAVE)
    def did_save(params: T.DidSaveTextDocumentParams) -> None:
        return None  # the overlay already holds the text; watchers report the disk

    @ls.feature(T.WORKSPACE_DID_CHANGE_WATCHED_FILES)
    def did_change_watched_files(params: T.DidChangeWatchedFilesParams) -> None:
        paths = [p for p in (uri_to_path(c.uri) for c in params.changes) if p]
        if not paths:
            return
        ls.mutate(lambda a: a.q.files_changed(paths))
        from .diagnostics import refresh_all

        refresh_all(ls)


def _overlay_if_changed(ls: AttnLensServer, path: str, text: str) -> None:
    """Overlay an opened buffer only when it differs from the disk (no needless re-index)."""

    def apply(a):
        if a.q.source_text(path) != text:
            a.q.set_overlay(path, text)
            return True
        return False

    try:
        disk_same = _disk_text(path) == text
    except OSError:
        disk_same = False
    if disk_same:
        return
    ls.overlaid.add(path)
    ls.mutate(apply)


def _disk_text(path: str) -> str | None:
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as f:
        data = f.read()
    return data.decode("utf-8", "replace")


def sync_open_documents(ls: AttnLensServer) -> None:
    """Mirror every open buffer into a freshly built workspace."""
    for path, uri in list(ls.open_docs.items()):
        if not path.endswith(".py"):
            continue
        try:
            text = ls.workspace.get_text_document(uri).source
        except Exception:  # noqa: BLE001
            continue
        _overlay_if_changed(ls, path, text)


def _diagnostics_changed(ls: AttnLensServer, uri: str) -> None:
    from .diagnostics import schedule

    schedule(ls, uri)
