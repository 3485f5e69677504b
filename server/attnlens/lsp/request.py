"""What a worker function knows of a request: a frozen snapshot taken on the event loop thread.

The settings, the negotiated position encoding, the client's capabilities (``capabilities.ClientCaps``),
the documents' versions and the features' session state (hover sections, probe verdicts) belong to the
loop thread and can change while a job runs on the analysis thread (``worker.py``). So a handler takes
its snapshot before it hops to the worker: a :class:`Request` for a request at a position
(:meth:`AttnLensServer.request`: hover, definition, implementation, prepare call hierarchy, code
actions at the start of their range, the ``attnlens.trace`` and ``attnlens.markdown`` commands), a
:class:`View` for one over a file or the workspace (:meth:`AttnLensServer.view`: diagnostics, code lens,
inlay hints, symbols, outgoing and incoming calls), plus what a feature needs beyond them, read there
too (a quick fix's :class:`~attnlens.lsp.features.fixes.FixDocument`: the document's version and the
client's ``documentChanges``; the file's probe verdicts, ``diagnostics.probe_verdicts``).

The worker function reads only that and the analysis, and returns plain data: Markdown, dicts,
:class:`~attnlens.lsp.convert.Span` ranges in LSP units, the records of ``records.py``, ``answers.py``
(diagnostics, edits, code actions) and of the feature modules (lenses, hints, call items, symbols).
Positions are converted on the worker (:meth:`View.positions`), against the text the analysis reads;
the handler (``register(ls)``, on the loop thread) makes the lsprotocol objects (``to_lsp``) and does
whatever else touches the server (publishing, spawning a refresh). Every feature works so; no worker
function takes the server (``tests/lsp/test_worker_entry_points.py``), and the loop thread's state is
read on the loop thread (``tests/lsp/test_loop_thread_reads.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

from .capabilities import ClientCaps
from .config import Settings
from .convert import UTF16, Positions


@dataclass(frozen=True)
class View:
    """What a worker function over a file or the workspace reads of the loop thread's state."""

    encoding: str = UTF16
    settings: Settings = Settings()
    caps: ClientCaps = ClientCaps()

    def positions(self, a) -> Positions:
        """A converter over the analysis' view of the text (worker thread)."""
        return Positions(a.line_text, self.encoding)


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
    caps: ClientCaps = ClientCaps()  # the client's capabilities (code actions: documentChanges, resolve)

    def positions(self, a) -> Positions:
        """A converter over the analysis' view of the text (worker thread)."""
        return Positions(a.line_text, self.encoding)

    def core_position(self, conv: Positions) -> tuple[int, int]:
        """The request's position in core terms: (1-based line, code point column)."""
        return conv.to_core_at(self.path, self.line, self.character)
