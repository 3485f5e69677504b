"""Client capabilities, resolved once at initialize into flat booleans.

The :class:`ClientCaps` object is frozen and replaced, never changed: a handler hands it to a worker
function inside its :class:`~attnlens.lsp.request.View` (the worker never reads the server's
``client_capabilities``)."""

from __future__ import annotations

from dataclasses import dataclass

from lsprotocol import types as T


def _get(obj, path: str):
    for part in path.split("."):
        if obj is None:
            return None
        obj = getattr(obj, part, None)
    return obj


@dataclass(frozen=True)
class ClientCaps:
    work_done_progress: bool = False
    configuration: bool = False
    watched_files_dynamic: bool = False
    configuration_dynamic: bool = False
    hierarchical_symbols: bool = False
    markdown_hover: bool = True
    pull_diagnostics: bool = False
    diagnostic_refresh: bool = False
    document_changes: bool = False  # takes versioned ``documentChanges`` in a WorkspaceEdit (a stale buffer rejects it)
    resolve_edits: bool = False  # fills in a code action's ``edit`` through ``codeAction/resolve``

    @classmethod
    def from_lsp(cls, c: T.ClientCapabilities | None) -> "ClientCaps":
        if c is None:
            return cls()
        formats = _get(c, "text_document.hover.content_format")
        return cls(
            work_done_progress=bool(_get(c, "window.work_done_progress")),
            configuration=bool(_get(c, "workspace.configuration")),
            watched_files_dynamic=bool(_get(c, "workspace.did_change_watched_files.dynamic_registration")),
            configuration_dynamic=bool(_get(c, "workspace.did_change_configuration.dynamic_registration")),
            hierarchical_symbols=bool(_get(c, "text_document.document_symbol.hierarchical_document_symbol_support")),
            markdown_hover=formats is None or T.MarkupKind.Markdown in formats,
            pull_diagnostics=_get(c, "text_document.diagnostic") is not None,
            diagnostic_refresh=bool(_get(c, "workspace.diagnostics.refresh_support")),
            document_changes=bool(_get(c, "workspace.workspace_edit.document_changes")),
            resolve_edits="edit" in (_get(c, "text_document.code_action.resolve_support.properties") or []),
        )
