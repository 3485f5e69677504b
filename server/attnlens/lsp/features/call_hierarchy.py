"""Call hierarchy: the standard LSP surface for "call chain to kernel".

prepare: the definition under the cursor, or the final target of the call
there, or the enclosing function. outgoing: the kernel-relevant call sites
of a function (each resolved to its final target); for a torch op, the C++
functions bound to it. incoming: workspace call sites whose chain passes
through the item, from the reverse call index (``attnlens.callindex``, kept
current by the server in background steps), plus the registry registrations
of a backend class.

Priorities (see ``worker.py``): prepare is a position request (``NOW``);
outgoing and incoming calls are ``SOON``, so hovers never queue behind them.
Incoming calls wait only while some module was never traced (the first
build, in steps that let position requests through); then they answer from
the index as it is, never building the summary of an edited buffer nobody has
read yet: records whose code was edited keep their old answer, at their moved
lines, until the background re-traces them (0.5 s after the edit, in
preemptible steps; on the real checkout that catch-up is 0.1-1 s after a
statement typed in a method, 1.6-2.5 s after a structural edit).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from lsprotocol import types as T

from ..analysis import Analysis, Item
from ..convert import Span, path_to_uri, uri_to_path
from ..request import Request, View
from ..server import AttnLensServer
from ..worker import SOON

HOVER_BUDGET_S = 2.0
# what an incoming-calls request spends on the urgent catch-up after an edit: none (it answers from the
# records as they are; the catch-up after a body edit is 0.7 s at the median on the real checkout)
INCOMING_WAIT_S = 0.0
CALLS_STEP_S = 0.02  # one step of the first build, which a request does wait for

KINDS = {
    "function": T.SymbolKind.Function, "method": T.SymbolKind.Method, "class": T.SymbolKind.Class,
    "triton": T.SymbolKind.Function, "torch_op": T.SymbolKind.Operator, "cpp": T.SymbolKind.Function,
    "module": T.SymbolKind.Module, "not_installed": T.SymbolKind.Package, "dummy": T.SymbolKind.Function,
    "extension_function": T.SymbolKind.Function, "python_function": T.SymbolKind.Function,
    "python_class": T.SymbolKind.Class, "triton_kernel": T.SymbolKind.Function, "unresolved": T.SymbolKind.Null,
}


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY)
    async def prepare(params: T.CallHierarchyPrepareParams) -> list[T.CallHierarchyItem] | None:
        req = ls.request(params.text_document.uri, params.position)
        if req is None:
            return None
        got = await ls.call(_prepare, req)
        return [it.to_lsp() for it in got] if got else None

    @ls.feature(T.CALL_HIERARCHY_OUTGOING_CALLS)
    async def outgoing(params: T.CallHierarchyOutgoingCallsParams) -> list[T.CallHierarchyOutgoingCall] | None:
        data = params.item.data if isinstance(params.item.data, dict) else None
        if data is None:
            return None
        got = await ls.call(_outgoing, ls.view(), params.item.uri, data, priority=SOON)
        return [T.CallHierarchyOutgoingCall(to=to.to_lsp(), from_ranges=[s.range() for s in spans])
                for to, spans in got] if got is not None else None

    @ls.feature(T.CALL_HIERARCHY_INCOMING_CALLS)
    async def incoming(params: T.CallHierarchyIncomingCallsParams) -> list[T.CallHierarchyIncomingCall] | None:
        data = params.item.data if isinstance(params.item.data, dict) else None
        if data is None:
            return None
        await catch_up(ls)
        got = await ls.call(_incoming, ls.view(), data, priority=SOON)
        return [T.CallHierarchyIncomingCall(from_=caller.to_lsp(), from_ranges=[s.range() for s in spans])
                for caller, spans in got] if got is not None else None


async def catch_up(ls: AttnLensServer) -> None:
    """Step the call index for a request until every module was traced once (then at most
    ``INCOMING_WAIT_S`` of what an edit left stale). Each step is a ``SOON`` job that stops when a
    position request is queued (``Worker.should_yield``)."""
    should_yield = ls.worker.should_yield
    while True:
        state = await ls.call(lambda a: a.calls_request_step(CALLS_STEP_S, INCOMING_WAIT_S, should_yield),
                              priority=SOON)
        if state is None or state[1]:
            return


@dataclass(frozen=True)
class CallItem:
    """A call hierarchy item as plain data (the handler makes the ``CallHierarchyItem``)."""

    name: str
    kind: T.SymbolKind
    uri: str
    span: Span  # the whole definition, whole lines
    selection: Span  # its name
    detail: str | None
    data: dict

    def to_lsp(self) -> T.CallHierarchyItem:
        return T.CallHierarchyItem(name=self.name, kind=self.kind, uri=self.uri,
                                   range=self.span.range(), selection_range=self.selection.range(),
                                   detail=self.detail, data=self.data)


def call_item(conv, it: Item) -> CallItem:
    sel = conv.span(it.path, it.line, it.col, it.line, it.end_col)
    full = conv.line_span(it.path, min(it.first_line, it.line), max(it.end_line, it.line))
    return CallItem(it.name, KINDS.get(it.kind, T.SymbolKind.Function), path_to_uri(it.path), full, sel,
                    it.detail or None, it.data)


def _prepare(a: Analysis, req: Request) -> list[CallItem]:
    path = req.path
    line, col = req.core_position(req.positions(a))
    items = [it for it in a.prepare(path, line, col, HOVER_BUDGET_S) if it.path]
    ref = a.q.ref_at(path, line, col) if a.def_at(path, line, col) is None else None
    if ref is not None and ref.call is not None:  # on a call: the items are what it reaches, named after the callee
        enc = a.enclosing_def(path, line)
        mine = (enc.path, enc.line) if enc is not None else None
        items = [it if (it.path, it.line) == mine else _called(it, [ref.text.rpartition(".")[2]]) for it in items]
    conv = req.positions(a)
    return [call_item(conv, it) for it in items]


def _called(it: Item, callees: list[str]) -> Item:
    """The item named after the symbol the code calls (``_flash_varlen``), what it reaches in the detail."""
    names = list(dict.fromkeys(c for c in callees if c))
    if not names or names == [it.name]:
        return it
    return dataclasses.replace(it, name=", ".join(names), detail=f"→ {it.name}" + (f" · {it.detail}" if it.detail else ""))


def _ranges(conv, path: str, spans) -> tuple[Span, ...]:
    return tuple(conv.span(path, line, c0, line, c1) for line, c0, c1 in spans)


def _outgoing(a: Analysis, view: View, item_uri: str, data: dict) -> list[tuple[CallItem, tuple[Span, ...]]]:
    """(callee, the ranges of its calls) of the item (``item_uri``, ``data``: the client's item)."""
    conv = view.positions(a)
    caller = uri_to_path(item_uri) or data.get("path") or ""
    out = []
    for target, spans in a.outgoing(data):
        if not target.path:
            continue
        callees = [a.line_text(caller, ln)[c0:c1].rpartition(".")[2] for ln, c0, c1 in spans]
        out.append((call_item(conv, _called(target, callees)), _ranges(conv, caller, spans)))
    return out


def _incoming(a: Analysis, view: View, data: dict) -> list[tuple[CallItem, tuple[Span, ...]]]:
    """(caller, the ranges of its calls) of the item (``data``: the client's item)."""
    conv = view.positions(a)
    return [(call_item(conv, caller), _ranges(conv, caller.path, spans)) for caller, spans in a.incoming(data)]
