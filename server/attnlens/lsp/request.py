"""What a worker function knows of a request: a frozen snapshot taken on the event loop thread.

The settings, the negotiated position encoding, the client's capabilities and the document's
version belong to the loop thread and can change while a job runs on the analysis thread
(``worker.py``). So a handler takes a :class:`Request` (:meth:`AttnLensServer.request`) before
it hops to the worker, and the worker function reads only that and the analysis; it returns plain
data (Markdown, :class:`~attnlens.lsp.convert.Span` ranges in LSP units, the records of
``records.py``), and the handler makes the lsprotocol objects at the edge. Positions are converted
on the worker (:meth:`Request.positions`), against the text the analysis reads.

Done for hover, definition and implementation; the other features' worker functions still take the
server object (docs/editors.md, "Where the server's state lives").
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import Settings
from .convert import UTF16, Positions


@dataclass(frozen=True)
class Request:
    """One request at a position, as the worker sees it."""

    uri: str
    path: str  # the analysed path of ``uri`` (convert.uri_to_path)
    version: int | None  # the open document's version (None: not open)
    line: int  # the LSP position: 0-based line ...
    character: int  # ... and column in ``encoding`` units
    encoding: str = UTF16
    settings: Settings = Settings()
    markdown: bool = True  # the client renders Markdown hovers
    hover_sections: tuple = ()  # the server's hover sections (hover.HoverSections.snapshot)

    def positions(self, a) -> Positions:
        """A converter over the analysis' view of the text (worker thread)."""
        return Positions(a.line_text, self.encoding)

    def core_position(self, conv: Positions) -> tuple[int, int]:
        """The request's position in core terms: (1-based line, code point column)."""
        return conv.to_core_at(self.path, self.line, self.character)
