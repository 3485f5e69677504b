"""Stateful fuzzing of `attnlens serve`: random incremental edits interleaved with requests.

:class:`FuzzWorld` owns one copy of ``examples/mini-metax``, the answers a
*fresh* server gives at a fixed set of positions (the baseline), and one
long-lived server under test. :class:`LspFuzz` is a Hypothesis
``RuleBasedStateMachine`` that drives that server: it opens files, applies
random incremental edits (deletions mid-token, unbalanced brackets, random
text with control, astral and line-separator characters, lone surrogates,
pasted blocks of thousands of lines, whole-file deletes, several changes in one
notification, whole-document replacements), undoes them one at a time or all at once, and
sends hover, definition, implementation, call hierarchy (prepare, then
outgoing or incoming calls on the item it got), document symbols, pull
diagnostics, workspace symbols and code actions (when the server announces
them) at random positions, including positions past the end of a line and
past the end of the file, some of them cancelled with ``$/cancelRequest``.

Invariants (checked after every step and at the end of every sequence):

* the server process is alive (no crash);
* every request is answered (result, error or *RequestCancelled*) within
  ``REQUEST_BUDGET_S`` (no hang), and no answer is an *InternalError*
  (an unhandled exception in a handler);
* after every edit of a document is undone, hover text and implementation
  locations at the fixed positions equal the fresh server's.

The CI test (``test_fuzz_lsp.py``) runs a few sequences; ``bench/fuzz_lsp.py``
runs thousands of requests with ``strict=False`` (violations are counted,
not raised) and reports the figures.

:class:`EditingSession` (below) is the latency workload of issue 16: a seeded
editor typing, pasting 5,000 lines and deleting whole files with requests
interleaved; the CI test holds position requests to a p99 of 50 ms on the
example, ``bench/fuzz_lsp.py --session`` measures any workspace.
"""

from __future__ import annotations

import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule
from lsprotocol import types as T

from .lspdriver import EXAMPLE, Reply, ServerHandle, Stats, TextModel

REQUEST_BUDGET_S = 5.0
INTERNAL_ERROR = -32603

# Files the fuzzer edits (all have fixed probe positions from the example's README table).
FUZZ_FILES = (
    "mini_metax/attention/backends/flash_attn.py",
    "mini_metax/attention/backends/fa_utils.py",
    "mini_metax/attention/backends/triton_attn.py",
    "mini_metax/attention/ops/unified.py",
    "mini_metax/attention/ops/decode.py",
    "mini_metax/platform.py",
)

# characters that stress position handling: astral (2 UTF-16 units), combining marks, CJK,
# NUL and other controls, form feed / vertical tab / U+2028 / U+0085 (str.splitlines splits on
# them, LSP does not), lone \r, and Python syntax characters
SPECIAL = ["\U0001F642", "\U0001D518", "\u0301", "\u4e2d", "\x00", "\x0b", "\x0c", "\x1c", "\x85", "\u2028",
           "\u2029", "\r", "\n", "\r\n", "\t", "\ufeff", "(", ")", "[", "]", "{", "}", "'", '"', '"""', ":", "\\",
           "#", "@", " ", "é"]
BRACKETS = ["(", ")", "[", "]", "{", "}", "'", '"', '"""', "'''", ":", "lambda", "def ", "class ", "\\", "f'{"]
IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]{2,}")


def readme_probes() -> list[tuple[str, str]]:
    """(file, call text) rows of the example README whose file is one of FUZZ_FILES."""
    rows = []
    for line in (EXAMPLE / "README.md").read_text(encoding="utf-8").splitlines():
        m = re.match(r"^\| (.+?) \| `([^`]+)` \| `(.+)` \|$", line)
        if m and m.group(2) in FUZZ_FILES:
            rows.append((m.group(2), m.group(3)))
    return rows


@dataclass
class Probe:
    rel: str
    line: int
    char: int

    def key(self) -> str:
        return f"{self.rel}:{self.line + 1}:{self.char + 1}"


def probe_positions(root: Path) -> list[Probe]:
    """Fixed positions: two characters into each README call text, plus the first def of each file."""
    out = []
    for rel, needle in readme_probes():
        text = (root / rel).read_text(encoding="utf-8")
        i = text.find(needle)
        if i < 0:
            continue
        # the name the row is about: the first identifier of the call text
        p = TextModel(text).position(i + min(2, len(needle)))
        out.append(Probe(rel, p.line, p.character))
    for rel in FUZZ_FILES:
        text = (root / rel).read_text(encoding="utf-8")
        m = re.search(r"^def (\w+)", text, re.M)
        if m:
            p = TextModel(text).position(m.start(1) + 1)
            out.append(Probe(rel, p.line, p.character))
    return out


PARTIAL_MARK = "partial answer"

# the request mix: each entry is equally likely
REQUESTS = ([T.TEXT_DOCUMENT_HOVER] * 5 + [T.TEXT_DOCUMENT_DEFINITION] * 2 + [T.TEXT_DOCUMENT_IMPLEMENTATION] * 2
            + ["call_hierarchy"] * 2 + ["call_hierarchy_old_item", "document_symbols", "pull_diagnostics",
                                          "code_actions", "workspace_symbols"])


def answers(server: ServerHandle, root: Path, probes: list[Probe], tries: int = 6) -> dict[str, dict]:
    """Hover text and implementation locations at each probe (a partial hover is retried)."""
    out = {}
    for pr in probes:
        uri = (root / pr.rel).resolve().as_uri()
        pos = {"textDocument": {"uri": uri}, "position": {"line": pr.line, "character": pr.char}}
        text = None
        for _ in range(tries):
            h = server.request(T.TEXT_DOCUMENT_HOVER, pos, timeout=30, record=False)
            assert h.outcome == "ok", f"hover at {pr.key()}: {h}"
            text = ((h.result or {}).get("contents") or {}).get("value") if h.result else None
            if not text or PARTIAL_MARK not in text:
                break
            time.sleep(0.5)
        impl = server.request(T.TEXT_DOCUMENT_IMPLEMENTATION, pos, timeout=30, record=False)
        assert impl.outcome == "ok", f"implementation at {pr.key()}: {impl}"
        locs = sorted((loc["uri"], loc["range"]["start"]["line"], loc["range"]["start"]["character"])
                      for loc in (impl.result or []))
        out[pr.key()] = {"hover": text, "implementation": locs}
    return out


def diff_answers(want: dict, got: dict) -> list[str]:
    out = []
    for k in want:
        if want[k] != got.get(k):
            w, g = want[k], got.get(k) or {}
            for part in ("hover", "implementation"):
                if w.get(part) != g.get(part):
                    out.append(f"{k} {part}:\n  fresh:  {str(w.get(part))[:400]!r}\n  fuzzed: {str(g.get(part))[:400]!r}")
    return out


def joins_crlf(text: str, start: int, end: int, new: str) -> bool:
    """Would replacing text[start:end] by ``new`` glue a CR and an LF that were apart into one line break?"""
    after = text[:start] + new + text[end:]
    cut1, cut2 = start, start + len(new)
    return any(0 < c < len(after) and after[c - 1] == "\r" and after[c] == "\n" for c in (cut1, cut2))


@dataclass
class FuzzWorld:
    """The workspace copy, the baseline and the server under test, shared by many sequences."""

    tmp: Path
    strict: bool = True  # raise on a violation (tests); False: count it and go on (benchmark)
    budget_s: float = REQUEST_BUDGET_S
    huge_lines: int = 3000
    stats: Stats = field(default_factory=Stats)
    sequences: int = 0
    violations: list = field(default_factory=list)
    restarts: int = 0
    equality_checks: int = 0
    server: ServerHandle | None = None
    baseline: dict = field(default_factory=dict)
    probes: list = field(default_factory=list)
    root: Path | None = None

    def setup(self) -> "FuzzWorld":
        self.root = self.tmp / "ws"
        if not self.root.exists():
            shutil.copytree(EXAMPLE, self.root, ignore=shutil.ignore_patterns("__pycache__"))
        self.probes = probe_positions(self.root)
        # the baseline: a fresh server, fresh cache, the files opened as they are on disk
        fresh = ServerHandle(self.root, self.tmp / "cache-fresh", init_options={"hoverBudgetMs": 5000})
        try:
            fresh.start()
            fresh.wait_indexed()
            for rel in FUZZ_FILES:
                fresh.open(self.root / rel)
            self.baseline = answers(fresh, self.root, self.probes)
        finally:
            fresh.close()
        self.start_server()
        return self

    def start_server(self) -> None:
        self.server = ServerHandle(self.root, self.tmp / "cache", init_options={"hoverBudgetMs": 5000},
                                   stats=self.stats)
        self.server.start()
        self.server.wait_indexed()

    def ensure_server(self) -> ServerHandle:
        if self.server is None or not self.server.alive():
            if self.server is not None:
                self.violation(f"server died (exit {self.server.process.returncode}); stderr:\n{self.server.stderr()}")
                self.server.close()
                self.restarts += 1
            self.start_server()
        return self.server

    def violation(self, text: str) -> None:
        self.violations.append(text)
        if self.strict:
            raise AssertionError(text)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None


@dataclass
class Doc:
    rel: str
    uri: str
    original: str
    model: TextModel
    version: int = 1
    undo: list = field(default_factory=list)  # (start, end_after, old_text): inverse of each edit


class LspFuzz(RuleBasedStateMachine):
    """One fuzzed editing sequence (set ``LspFuzz.world`` before running)."""

    world: FuzzWorld = None  # type: ignore[assignment]

    def __init__(self):
        super().__init__()
        self.w = type(self).world
        self.srv = self.w.ensure_server()
        self.docs: dict[str, Doc] = {}
        self.items: list[dict] = []  # call hierarchy items seen
        self.w.sequences += 1

    # -- helpers ---------------------------------------------------------------------
    def check(self, rep: Reply) -> Reply:
        if rep.outcome == "timeout":
            self.w.violation(f"hang: {rep.method} not answered within {self.w.budget_s} s")
        elif rep.outcome == "dead":
            self.w.violation(f"crash during {rep.method}: {rep.message}\n{self.srv.stderr()}")
            self._restarted()
        elif rep.outcome == "error" and rep.code == INTERNAL_ERROR:
            self.w.violation(f"internal error answering {rep.method}: {rep.message}\n{self.srv.stderr(20)}")
        return rep

    def _restarted(self) -> None:
        """After a crash (benchmark mode): a new server, given the documents as the client has them."""
        self.srv = self.w.ensure_server()
        for doc in self.docs.values():
            self.srv.open(self.w.root / doc.rel, doc.model.text, version=doc.version)

    def send(self, method: str, params: dict, cancel_after: float | None = None) -> Reply:
        return self.check(self.srv.request(method, params, timeout=self.w.budget_s, cancel_after=cancel_after))

    def apply(self, doc: Doc, edits: list[tuple[int, int, str]], record_undo: bool = True) -> None:
        """Apply code point edits in order, as one didChange with one change per edit."""
        changes = []
        for start, end, new in edits:
            start, end = doc.model.valid_offset(start), doc.model.valid_offset(end)
            start, end = min(start, end), max(start, end)
            if record_undo and joins_crlf(doc.model.text, start, end, new):
                continue  # the edit would glue a \r and a \n into one line break: no LSP position sits between
            rng, old = doc.model.replace(start, end, new)
            changes.append(T.TextDocumentContentChangePartial(range=rng, text=new))
            if record_undo:
                doc.undo.append((start, start + len(new), old))
        if not changes:
            return
        doc.version += 1
        self.srv.change(doc.uri, doc.version, changes)

    def position(self, doc: Doc, data) -> dict:
        """A random position: inside the text, or past the end of a line or of the file."""
        mode = data.draw(st.sampled_from(["inside", "inside", "inside", "ident", "eol", "eof", "huge"]))
        text = doc.model.text
        if mode == "ident":
            ms = list(IDENT.finditer(text))
            if ms:
                m = data.draw(st.sampled_from(ms[:4000]))
                p = doc.model.position(doc.model.valid_offset(data.draw(st.integers(m.start(), m.end()))))
                return {"line": p.line, "character": p.character}
            mode = "inside"
        if mode == "inside":
            p = doc.model.position(doc.model.valid_offset(data.draw(st.integers(0, len(text)))))
            return {"line": p.line, "character": p.character}
        lines = doc.model.lines()
        if mode == "eol":
            ln = data.draw(st.integers(0, len(lines) - 1))
            return {"line": ln, "character": len(lines[ln].encode("utf-16-le", "surrogatepass")) // 2
                    + data.draw(st.integers(1, 500))}
        if mode == "eof":
            return {"line": len(lines) + data.draw(st.integers(0, 50)), "character": data.draw(st.integers(0, 200))}
        return {"line": data.draw(st.integers(0, 2**31 - 1)), "character": data.draw(st.integers(0, 2**31 - 1))}

    # -- rules: documents ---------------------------------------------------------------
    @initialize(rel=st.sampled_from(FUZZ_FILES))
    def open_first(self, rel):
        self._open(rel)

    def _open(self, rel: str) -> None:
        path = self.w.root / rel
        text = path.read_text(encoding="utf-8")
        uri = self.srv.open(path, text)
        self.docs[rel] = Doc(rel, uri, text, TextModel(text))

    @rule(rel=st.sampled_from(FUZZ_FILES))
    def open_doc(self, rel):
        if rel not in self.docs:
            self._open(rel)

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def close_doc(self, data):
        rel = data.draw(st.sampled_from(sorted(self.docs)))
        doc = self.docs.pop(rel)
        self.srv.close_doc(doc.uri)

    def pick(self, data) -> Doc:
        return self.docs[data.draw(st.sampled_from(sorted(self.docs)))]

    # -- rules: edits --------------------------------------------------------------------
    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def delete_mid_token(self, data):
        doc = self.pick(data)
        ms = list(IDENT.finditer(doc.model.text))
        if not ms:
            return
        m = data.draw(st.sampled_from(ms[:4000]))
        a = data.draw(st.integers(m.start() + 1, m.end() - 1))
        b = data.draw(st.integers(a, m.end()))
        self.apply(doc, [(a, b, "")])

    @precondition(lambda self: self.docs)
    @rule(data=st.data(), piece=st.sampled_from(BRACKETS))
    def unbalanced_bracket(self, data, piece):
        doc = self.pick(data)
        at = data.draw(st.integers(0, len(doc.model.text)))
        self.apply(doc, [(at, at, piece)])

    @precondition(lambda self: self.docs)
    @rule(data=st.data(), new=st.lists(st.one_of(st.sampled_from(SPECIAL), st.text(max_size=8)), max_size=12).map("".join))
    def replace_random_text(self, data, new):
        doc = self.pick(data)
        n = len(doc.model.text)
        a = data.draw(st.integers(0, n))
        b = data.draw(st.integers(a, min(n, a + 200)))
        self.apply(doc, [(a, b, new)])

    @precondition(lambda self: self.docs)
    @rule(data=st.data(), raw=st.binary(min_size=1, max_size=64))
    def insert_random_bytes(self, data, raw):
        """Bytes as a client that read a binary file would send them: decoded with replacement or as surrogates."""
        doc = self.pick(data)
        how = data.draw(st.sampled_from(["replace", "surrogateescape", "latin-1"]))
        new = raw.decode("latin-1") if how == "latin-1" else raw.decode("utf-8", how)
        at = data.draw(st.integers(0, len(doc.model.text)))
        self.apply(doc, [(at, at, new)])

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def paste_huge_block(self, data):
        doc = self.pick(data)
        src = (self.w.root / data.draw(st.sampled_from(FUZZ_FILES))).read_text(encoding="utf-8").splitlines(True)
        n = data.draw(st.integers(200, self.w.huge_lines))
        block = "".join(src[i % len(src)] for i in range(n))
        at = doc.model.valid_offset(data.draw(st.integers(0, len(doc.model.text))))
        self.apply(doc, [(at, at, block)])

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def delete_whole_file(self, data):
        """Select all, delete: one change whose range covers the whole document."""
        doc = self.pick(data)
        self.apply(doc, [(0, len(doc.model.text), "")])

    @precondition(lambda self: self.docs)
    @rule(data=st.data())
    def several_changes_in_one_notification(self, data):
        doc = self.pick(data)
        edits = []
        for _ in range(data.draw(st.integers(2, 5))):
            n = len(doc.model.text) + sum(len(e[2]) for e in edits)
            a = data.draw(st.integers(0, n))
            b = data.draw(st.integers(a, min(n, a + 30)))
            edits.append((a, b, data.draw(st.sampled_from(SPECIAL + BRACKETS + ["x", "pass\n", "\n\n"]))))
        # each later offset is in the text after the earlier edits, as LSP applies them
        self.apply(doc, edits)

    @precondition(lambda self: self.docs)
    @rule(data=st.data(), new=st.sampled_from(["", "x", "# past the end\n", "\U0001F642", ")"]))
    def edit_past_end_of_line(self, data, new):
        """An insertion whose range names a character past the end of a line (or a line past the end of
        the file): LSP says it means the end of that line (of the file)."""
        doc = self.pick(data)
        lines = doc.model.lines()
        ln = data.draw(st.integers(0, len(lines) + 2))
        extra = data.draw(st.integers(1, 40))
        if ln < len(lines):
            starts = doc.model.line_starts()
            at = starts[ln] + len(lines[ln])
            char = len(lines[ln].encode("utf-16-le", "surrogatepass")) // 2 + extra
        else:
            at, char = len(doc.model.text), extra
        if joins_crlf(doc.model.text, at, at, new):
            return
        doc.model.replace(at, at, new)
        doc.undo.append((at, at + len(new), ""))
        doc.version += 1
        pos = T.Position(ln, char)
        self.srv.change(doc.uri, doc.version, [T.TextDocumentContentChangePartial(range=T.Range(pos, pos), text=new)])

    @precondition(lambda self: any(d.undo for d in self.docs.values()))
    @rule(data=st.data())
    def undo_one(self, data):
        doc = self.docs[data.draw(st.sampled_from(sorted(r for r, d in self.docs.items() if d.undo)))]
        start, end, old = doc.undo.pop()
        self.apply(doc, [(start, end, old)], record_undo=False)

    @precondition(lambda self: any(d.undo for d in self.docs.values()))
    @rule(data=st.data(), whole=st.booleans())
    def undo_all_and_compare(self, data, whole):
        doc = self.docs[data.draw(st.sampled_from(sorted(r for r, d in self.docs.items() if d.undo)))]
        self._undo_all(doc, whole)
        self.compare_with_fresh()

    def _undo_all(self, doc: Doc, whole: bool = False) -> None:
        if whole:
            doc.model.text = doc.original
            doc.undo.clear()
            doc.version += 1
            self.srv.change(doc.uri, doc.version, [T.TextDocumentContentChangeWholeDocument(text=doc.original)])
            return
        while doc.undo:
            # a few undo steps per notification, like an editor replaying its undo stack
            batch = [doc.undo.pop() for _ in range(min(3, len(doc.undo)))]
            self.apply(doc, [(s, e, old) for s, e, old in batch], record_undo=False)
        if doc.model.text != doc.original:  # the model itself must be consistent
            raise AssertionError(f"undo model broken for {doc.rel}")

    def compare_with_fresh(self) -> None:
        if any(d.undo or d.model.text != d.original for d in self.docs.values()):
            return  # only when every open document is back to the original
        self.w.equality_checks += 1
        # right after an edit a request may answer with the never-selected set of before it (provisional, documented
        # in docs/editors.md); the answers must equal a fresh server's once the server has checked the set again,
        # which the status command does first
        st = self.srv.command("attnlens.status", [])
        if st.ok and (st.result or {}).get("neverSelected") not in ("checked", None):
            self.w.violation(f"after undo, the status command did not check the never-selected set: {st.result}")
        try:
            got = answers(self.srv, self.w.root, self.w.probes)
        except AssertionError as e:
            self.w.violation(f"after undo, a probe request failed: {e}")
            return
        diffs = diff_answers(self.w.baseline, got)
        if diffs:
            self.w.violation("after undo, answers differ from a fresh server's:\n" + "\n".join(diffs[:6]))

    # -- rules: requests -----------------------------------------------------------------
    def cancel_delay(self, data) -> float | None:
        return data.draw(st.one_of(st.none(), st.none(), st.just(0.0), st.floats(0, 0.05)))

    # one rule for every request kind, so the mix follows REQUESTS (Hypothesis does not pick
    # rules uniformly: with one rule per kind, prepareCallHierarchy was 40% of all requests)
    # (and a burst of them per step, as an editor sends hover, code actions and diagnostics together)
    @precondition(lambda self: self.docs)
    @rule(data=st.data(), kinds=st.lists(st.sampled_from(REQUESTS), min_size=1, max_size=6))
    def requests(self, data, kinds):
        for kind in kinds:
            if kind in (T.TEXT_DOCUMENT_HOVER, T.TEXT_DOCUMENT_DEFINITION, T.TEXT_DOCUMENT_IMPLEMENTATION):
                self._position_request(data, kind)
            else:
                getattr(self, "_" + kind)(data)

    def _position_request(self, data, method):
        doc = self.pick(data)
        params = {"textDocument": {"uri": doc.uri}, "position": self.position(doc, data)}
        self.send(method, params, cancel_after=self.cancel_delay(data))

    def _call_hierarchy(self, data):
        # every draw comes before the answers: what Hypothesis draws must not depend on the server
        # (a cancelled request answers nothing), or a replayed sequence would draw differently
        doc = self.pick(data)
        params = {"textDocument": {"uri": doc.uri}, "position": self.position(doc, data)}
        cancel1, cancel2 = self.cancel_delay(data), self.cancel_delay(data)
        pick, incoming = data.draw(st.integers(0, 7)), data.draw(st.booleans())
        rep = self.send(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, params, cancel_after=cancel1)
        if rep.ok and rep.result:
            self.items.extend(rep.result[:3])
            self.items = self.items[-20:]
            item = rep.result[pick % len(rep.result)]
            method = T.CALL_HIERARCHY_INCOMING_CALLS if incoming else T.CALL_HIERARCHY_OUTGOING_CALLS
            self.send(method, {"item": item}, cancel_after=cancel2)

    def _call_hierarchy_old_item(self, data):
        """An item from earlier (its file may have changed since): outgoing or incoming calls."""
        incoming, pick = data.draw(st.booleans()), data.draw(st.integers(0, 19))
        cancel = self.cancel_delay(data)
        if not self.items:
            return
        item = self.items[pick % len(self.items)]
        method = T.CALL_HIERARCHY_INCOMING_CALLS if incoming else T.CALL_HIERARCHY_OUTGOING_CALLS
        self.send(method, {"item": item}, cancel_after=cancel)

    def _document_symbols(self, data):
        doc = self.pick(data)
        self.send(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": doc.uri}},
                  cancel_after=self.cancel_delay(data))

    def _pull_diagnostics(self, data):
        caps = (self.srv.server_capabilities or {}).get("capabilities") or {}
        if not caps.get("diagnosticProvider"):
            return
        doc = self.pick(data)
        self.send(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": doc.uri}}, cancel_after=self.cancel_delay(data))

    def _code_actions(self, data):
        caps = (self.srv.server_capabilities or {}).get("capabilities") or {}
        if not caps.get("codeActionProvider"):
            return
        doc = self.pick(data)
        a, b = self.position(doc, data), self.position(doc, data)
        self.send(T.TEXT_DOCUMENT_CODE_ACTION, {"textDocument": {"uri": doc.uri}, "range": {"start": a, "end": b},
                                                "context": {"diagnostics": []}}, cancel_after=self.cancel_delay(data))

    def _workspace_symbols(self, data):
        query = data.draw(st.text(max_size=6))
        self.send(T.WORKSPACE_SYMBOL, {"query": query}, cancel_after=self.cancel_delay(data))

    # -- invariants and the end of a sequence ------------------------------------------------
    @invariant()
    def server_alive(self):
        if not self.srv.alive():
            self.w.violation(f"server process exited (code {self.srv.process.returncode}):\n{self.srv.stderr()}")
            self._restarted()

    def teardown(self):
        try:
            if self.srv.alive() and self.docs:
                for doc in self.docs.values():
                    self._undo_all(doc, whole=self.w.sequences % 5 == 0)
                self.compare_with_fresh()
        finally:
            if self.srv.alive():
                for doc in self.docs.values():
                    self.srv.close_doc(doc.uri)


# -- an editing session with requests interleaved (issue 16, item 9) --------------------------------
#
# Not a Hypothesis machine: a seeded random editor, so that two servers (before / after a change) see
# the same session and the per-kind latencies can be compared. The traffic is what an editor sends
# while a maintainer types: keystrokes (one didChange each), hovers where the mouse rests (some
# cancelled because it moved on), Go to Definition / Implementation, the outline, code actions and
# pull diagnostics after edits, call hierarchy (prepare, then incoming or outgoing calls), workspace
# symbols, 5,000-line pastes and whole-file deletes (undone later), and pauses in which debounced and
# background work starts, so that requests arrive in the middle of it.

POSITION_METHODS = (T.TEXT_DOCUMENT_HOVER, T.TEXT_DOCUMENT_DEFINITION, T.TEXT_DOCUMENT_IMPLEMENTATION)
POSITION_P99_BUDGET_S = 0.050  # issue 16: p99 of position requests under the editing workload
PASTE_LINES = 5000
CALL_NAME = re.compile(r"\b([A-Za-z_][A-Za-z_0-9]*)\s*[(\[]")

# (kind, weight) of the requests of one burst
SESSION_REQUESTS = ((T.TEXT_DOCUMENT_HOVER, 8), (T.TEXT_DOCUMENT_IMPLEMENTATION, 2), (T.TEXT_DOCUMENT_DEFINITION, 2),
                    (T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, 1), (T.TEXT_DOCUMENT_CODE_ACTION, 1),
                    (T.TEXT_DOCUMENT_DIAGNOSTIC, 1), ("incoming", 2), ("outgoing", 1), (T.WORKSPACE_SYMBOL, 1))
# (kind, weight) of the edit of one round
SESSION_EDITS = (("type", 14), ("delete_chars", 2), ("paste", 1), ("delete_file", 1), ("restore", 2))


@dataclass
class SessionDoc:
    rel: str
    uri: str
    original: str
    model: TextModel
    version: int = 1


@dataclass
class EditingSession:
    """One editing session against ``server`` on ``files`` (paths relative to ``root``)."""

    server: ServerHandle
    root: Path
    files: list
    seed: int = 0
    budget_s: float = REQUEST_BUDGET_S
    latencies: dict = field(default_factory=dict)  # method -> [seconds] of answered requests (not cancelled)
    outcomes: dict = field(default_factory=dict)  # method -> {outcome: count}
    violations: list = field(default_factory=list)
    pastes: int = 0
    deletes: int = 0
    keystrokes: int = 0
    # one entry per answered request: (method, seconds, its file, the last edit's kind, the edited file, requests
    # since that edit): what the slow tail follows (``fuzz_lsp.py --session --slow``)
    log: list = field(default_factory=list)

    def __post_init__(self):
        import random

        self.rng = random.Random(self.seed)
        self.docs: dict[str, SessionDoc] = {}
        self.items: list[dict] = []  # call hierarchy items seen (for incoming/outgoing later)
        self.paste_source = self._paste_source()
        self.last_edit: tuple = ("", "")  # (kind, file name) of the last edit
        self.since_edit = 0

    # -- documents ---------------------------------------------------------------------
    def _paste_source(self) -> str:
        lines: list[str] = []
        for rel in self.files:
            lines += (self.root / rel).read_text(encoding="utf-8").splitlines(True)
        return "".join(lines[i % len(lines)] for i in range(PASTE_LINES)) if lines else ""

    def open_all(self) -> None:
        for rel in self.files:
            path = self.root / rel
            text = path.read_text(encoding="utf-8")
            uri = self.server.open(path, text)
            self.docs[rel] = SessionDoc(rel, uri, text, TextModel(text))

    def close_all(self) -> None:
        for doc in self.docs.values():
            self.server.close_doc(doc.uri)
        self.docs.clear()

    def _change(self, doc: SessionDoc, start: int, end: int, new: str) -> None:
        rng, _old = doc.model.replace(start, end, new)
        doc.version += 1
        self.server.change(doc.uri, doc.version, [T.TextDocumentContentChangePartial(range=rng, text=new)])

    def restore(self, doc: SessionDoc) -> None:
        if doc.model.text != doc.original:
            doc.model.text = doc.original
            doc.version += 1
            self.server.change(doc.uri, doc.version, [T.TextDocumentContentChangeWholeDocument(text=doc.original)])

    def restore_all(self) -> None:
        for doc in self.docs.values():
            self.restore(doc)

    # -- edits -------------------------------------------------------------------------
    def edit(self) -> str:
        kind = self._weighted(SESSION_EDITS)
        doc = self.docs[self.rng.choice(sorted(self.docs))]
        text = doc.model.text
        if kind == "type":
            # a statement typed into an indented line, one keystroke per didChange
            starts = [m.start() for m in re.finditer(r"(?m)^[ \t]+(?=\S)", text)] or [len(text)]
            at = self.rng.choice(starts)
            indent = re.match(r"[ \t]*", text[at:]).group(0)
            word = f"{indent}_edit_{self.rng.randrange(100)} = k\n"
            for i, ch in enumerate(word):
                self._change(doc, at + i, at + i, ch)
                self.keystrokes += 1
        elif kind == "delete_chars":
            ms = list(IDENT.finditer(text))
            if ms:
                m = self.rng.choice(ms)
                self._change(doc, m.start() + 1, m.end(), "")
        elif kind == "paste":
            line_starts = doc.model.line_starts()
            at = self.rng.choice(line_starts)
            self._change(doc, at, at, self.paste_source)
            self.pastes += 1
        elif kind == "delete_file":
            self._change(doc, 0, len(text), "")
            self.deletes += 1
        else:
            self.restore(doc)
        self.last_edit, self.since_edit = (kind, doc.rel.rsplit("/", 1)[-1]), 0
        return kind

    # -- requests ----------------------------------------------------------------------
    def _weighted(self, table):
        total = sum(w for _k, w in table)
        x = self.rng.uniform(0, total)
        for k, w in table:
            x -= w
            if x <= 0:
                return k
        return table[-1][0]

    def position(self, doc: SessionDoc) -> dict:
        """Mostly on the name of a call (where a maintainer hovers), sometimes anywhere."""
        text = doc.model.text
        ms = list(CALL_NAME.finditer(text))
        if ms and self.rng.random() < 0.85:
            m = self.rng.choice(ms)
            off = self.rng.randint(m.start(1), m.end(1))
        else:
            off = self.rng.randint(0, len(text))
        p = doc.model.position(doc.model.valid_offset(off))
        return {"line": p.line, "character": p.character}

    def send(self, method: str, params, cancel_after: float | None = None) -> Reply:
        rep = self.server.request(method, params, timeout=self.budget_s, cancel_after=cancel_after)
        self.outcomes.setdefault(method, {}).setdefault(rep.outcome, 0)
        self.outcomes[method][rep.outcome] += 1
        if rep.outcome in ("ok", "error"):
            self.latencies.setdefault(method, []).append(rep.latency_s)
            doc = (params.get("textDocument") or params.get("item") or {}).get("uri", "") if isinstance(params, dict) else ""
            self.log.append((method, rep.latency_s, doc.rsplit("/", 1)[-1], *self.last_edit, self.since_edit))
        self.since_edit += 1
        if rep.outcome == "timeout":
            self.violations.append(f"hang: {method} not answered within {self.budget_s} s")
        elif rep.outcome == "dead":
            self.violations.append(f"crash during {method}: {rep.message}\n{self.server.stderr()}")
        elif rep.outcome == "error" and rep.code == INTERNAL_ERROR:
            self.violations.append(f"internal error answering {method}: {rep.message}")
        return rep

    def request(self) -> str:
        kind = self._weighted(SESSION_REQUESTS)
        doc = self.docs[self.rng.choice(sorted(self.docs))]
        td = {"uri": doc.uri}
        # a hover is often cancelled (the mouse moved on); other requests now and then
        cancel = None
        if self.rng.random() < (0.3 if kind == T.TEXT_DOCUMENT_HOVER else 0.1):
            cancel = self.rng.uniform(0, 0.03)
        if kind in POSITION_METHODS:
            self.send(kind, {"textDocument": td, "position": self.position(doc)}, cancel)
        elif kind == T.TEXT_DOCUMENT_DOCUMENT_SYMBOL:
            self.send(kind, {"textDocument": td}, cancel)
        elif kind == T.TEXT_DOCUMENT_DIAGNOSTIC:
            self.send(kind, {"textDocument": td}, cancel)
        elif kind == T.TEXT_DOCUMENT_CODE_ACTION:
            p = self.position(doc)
            self.send(kind, {"textDocument": td, "range": {"start": p, "end": p}, "context": {"diagnostics": []}}, cancel)
        elif kind == T.WORKSPACE_SYMBOL:
            self.send(kind, {"query": self.rng.choice(["attn", "Backend", "forward", "kernel", "", "impl"])}, cancel)
        else:
            self._call_hierarchy(doc, kind, cancel)
        return kind

    def _call_hierarchy(self, doc: SessionDoc, kind: str, cancel: float | None) -> None:
        method = T.CALL_HIERARCHY_INCOMING_CALLS if kind == "incoming" else T.CALL_HIERARCHY_OUTGOING_CALLS
        pick, old = self.rng.randrange(8), self.rng.random() < 0.3  # drawn first: the draws never depend on answers
        if self.items and old:  # an item from earlier: its file may have changed since
            self.send(method, {"item": self.items[pick % len(self.items)]}, cancel)
            return
        rep = self.send(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, {"textDocument": {"uri": doc.uri},
                                                                 "position": self.position(doc)})
        if rep.ok and rep.result:
            self.items = (self.items + rep.result[:2])[-20:]
            self.send(method, {"item": rep.result[pick % len(rep.result)]}, cancel)

    # -- the session ---------------------------------------------------------------------
    def run(self, rounds: int, pause_s: float = 0.15, long_pause_s: float = 1.2) -> "EditingSession":
        """``rounds`` times: one edit, then a burst of 1 to 6 requests, then a short or a long pause."""
        for _ in range(rounds):
            self.edit()
            for _ in range(self.rng.randint(1, 6)):
                self.request()
            if not self.server.alive():
                self.violations.append(f"server exited:\n{self.server.stderr()}")
                break
            r = self.rng.random()
            time.sleep(self.rng.uniform(0.4, 1.0) * long_pause_s if r < 0.1 else self.rng.uniform(0, pause_s))
        return self

    def position_latencies(self) -> list[float]:
        return [x for m in POSITION_METHODS for x in self.latencies.get(m, [])]

    def report(self) -> dict:
        """p50/p95/p99/max in ms per request kind, and for the position requests together."""
        out = {m: latency_summary(v) for m, v in sorted(self.latencies.items())}
        out["position requests"] = latency_summary(self.position_latencies())
        return out


def latency_summary(xs: list[float]) -> dict:
    """n, p50, p95, p99 and max of latencies in seconds, as milliseconds."""
    def q(p):
        s = sorted(xs)
        return round(s[min(len(s) - 1, max(0, int(round(p / 100 * (len(s) - 1)))))] * 1000, 2) if s else None

    return {"n": len(xs), "p50": q(50), "p95": q(95), "p99": q(99), "max": round(max(xs) * 1000, 2) if xs else None}


def incoming_answers(server: ServerHandle, root: Path, probes: list[Probe]) -> dict[str, list]:
    """Incoming calls of every call hierarchy item prepared at each probe: caller and call ranges."""
    out = {}
    for pr in probes:
        uri = (root / pr.rel).resolve().as_uri()
        rep = server.request(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, {"textDocument": {"uri": uri},
                             "position": {"line": pr.line, "character": pr.char}}, timeout=60, record=False)
        assert rep.outcome == "ok", f"prepareCallHierarchy at {pr.key()}: {rep}"
        got = []
        for item in rep.result or []:
            inc = server.request(T.CALL_HIERARCHY_INCOMING_CALLS, {"item": item}, timeout=60, record=False)
            assert inc.outcome == "ok", f"incomingCalls of {item.get('name')} at {pr.key()}: {inc}"
            got.append((item.get("name"), sorted(
                (c["from"]["uri"], c["from"]["name"], [(r["start"]["line"], r["start"]["character"]) for r in c["fromRanges"]])
                for c in inc.result or [])))
        out[pr.key()] = got
    return out
