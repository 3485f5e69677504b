"""Plain answers that several features' worker functions share: diagnostics, edits, code actions.

A worker function returns these (ranges as :class:`~attnlens.lsp.convert.Span`, in LSP units, computed
on the worker against the text the analysis reads); the handler, on the event loop thread, makes the
lsprotocol objects with ``to_lsp`` (see ``request.py``). Severities and tags are lsprotocol's enum
values (plain ints).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lsprotocol import types as T

from .convert import Span


@dataclass(frozen=True)
class Related:
    """A diagnostic's related location and message."""

    uri: str
    span: Span
    message: str

    def to_lsp(self) -> T.DiagnosticRelatedInformation:
        return T.DiagnosticRelatedInformation(location=T.Location(uri=self.uri, range=self.span.range()),
                                              message=self.message)


@dataclass(frozen=True)
class Diag:
    """One diagnostic: what ``diagnostics.check`` answers, and what the quick fixes read of a client's."""

    span: Span
    message: str
    severity: T.DiagnosticSeverity | None = None
    source: str | None = None
    code: Any = None
    href: str | None = None  # codeDescription
    related: tuple[Related, ...] | None = None
    tags: tuple[T.DiagnosticTag, ...] | None = None
    data: Any = None

    def to_lsp(self) -> T.Diagnostic:
        return T.Diagnostic(range=self.span.range(), message=self.message, severity=self.severity, source=self.source,
                            code=self.code, code_description=T.CodeDescription(href=self.href) if self.href else None,
                            related_information=[r.to_lsp() for r in self.related] if self.related is not None else None,
                            tags=list(self.tags) if self.tags is not None else None, data=self.data)

    @classmethod
    def from_lsp(cls, d: T.Diagnostic, path: str = "") -> "Diag":
        """A client's (or the server's own) diagnostic as plain data (loop thread, before the hop)."""
        r = d.range
        related = None
        if d.related_information is not None:
            related = tuple(Related(x.location.uri, _span("", x.location.range), x.message) for x in d.related_information)
        return cls(_span(path, r), d.message, d.severity, d.source, d.code,
                   d.code_description.href if d.code_description is not None else None, related,
                   tuple(d.tags) if d.tags is not None else None, d.data)


def _span(path: str, r: T.Range) -> Span:
    return Span(path, r.start.line, r.start.character, r.end.line, r.end.character)


def to_lsp_all(diags) -> list[T.Diagnostic]:
    return [d.to_lsp() for d in diags]


@dataclass(frozen=True)
class FileEdit:
    """An edit of one document: versioned ``documentChanges`` when ``version`` is set, else ``changes``."""

    uri: str
    span: Span
    new_text: str
    version: int | None = None

    def text_edit(self) -> T.TextEdit:
        return T.TextEdit(range=self.span.range(), new_text=self.new_text)

    def to_lsp(self) -> T.WorkspaceEdit:
        edit = self.text_edit()
        if self.version is not None:
            return T.WorkspaceEdit(document_changes=[T.TextDocumentEdit(
                text_document=T.OptionalVersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
                edits=[edit])])
        return T.WorkspaceEdit(changes={self.uri: [edit]})


@dataclass(frozen=True)
class Action:
    """A code action (kind ``quickfix``): a command to run, an edit, or disabled with the reason. ``diagnostic``
    is the index of the request's diagnostic it is attached to (the handler attaches the client's own object)."""

    title: str
    diagnostic: int | None = None
    is_preferred: bool | None = None
    data: Any = None
    edit: FileEdit | None = None
    disabled: str | None = None
    command: tuple[str, str, list] | None = None  # (title, command, arguments)

    def to_lsp(self, diagnostics) -> T.CodeAction:
        """``diagnostics``: the request's diagnostics (lsprotocol objects), which ``diagnostic`` indexes."""
        return T.CodeAction(
            title=self.title, kind=T.CodeActionKind.QuickFix,
            diagnostics=[diagnostics[self.diagnostic]] if self.diagnostic is not None else None,
            is_preferred=self.is_preferred, edit=self.edit.to_lsp() if self.edit is not None else None,
            disabled=T.CodeActionDisabled(reason=self.disabled) if self.disabled is not None else None,
            command=T.Command(title=self.command[0], command=self.command[1], arguments=self.command[2])
            if self.command is not None else None,
            data=self.data)
