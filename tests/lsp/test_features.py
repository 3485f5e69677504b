"""End to end over stdio, VS Code client profile, on examples/mini-metax."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest
from lsprotocol import types as T
from pygls.exceptions import JsonRpcRequestCancelled

from .conftest import EXAMPLE, position_of, readme_text, uri

pytestmark = pytest.mark.asyncio(loop_scope="module")

HAS_CPPINDEX = importlib.util.find_spec("attnlens.cppindex") is not None


def line_of(loc: T.Location) -> str:
    from pygls.uris import to_fs_path

    return Path(to_fs_path(loc.uri)).read_text(encoding="utf-8").splitlines()[loc.range.start.line]


async def test_indexing_reports_progress_and_status(vscode):
    reports = [r for token, rs in vscode.client.progress_reports.items() if str(token).startswith("attnlens") for r in rs]
    kinds = [type(r).__name__ for r in reports]
    assert kinds[0] == "WorkDoneProgressBegin" and kinds[-1] == "WorkDoneProgressEnd", kinds
    assert "WorkDoneProgressReport" in kinds
    st = vscode.statuses[-1]
    assert st["root"] == str(EXAMPLE.resolve())
    assert st["targetError"] is None and st["indexedModules"] >= 20
    assert st["platform"]["facts"]["is_out_of_tree"] is True


async def test_hover_upstream_op_served_by_plugin_extension(vscode):
    path, text = readme_text("upstream op served by the plugin's extension (call)")
    md = await vscode.hover_text(path, position_of(path, text))
    assert md.startswith("Runs: `reshape_and_cache_flash` (torch op `_C_cache_ops::reshape_and_cache_flash`, [cache_kernels.cu:")  # the C++ function ops.impl binds
    assert '"torch op: _C_cache_ops::reshape_and_cache_flash → reshape_and_cache_flash"' in md  # the full name: link title
    # the import hops on the way, each a clickable location, in the folded chain
    chain = next(ln for ln in md.splitlines() if ln.startswith("Chain ("))
    assert f"[import :{position_of(path, 'if is_flash_attn_varlen_func_available():').line + 2}]({uri(path)}#L" in chain  # same file
    assert "→ [alias fa_utils.py:" in chain


async def test_hover_not_installed(vscode):
    path, text = readme_text("call into a not-installed package")
    md = await vscode.hover_text(path, position_of(path, text))
    assert md.splitlines()[0].startswith("Runs: `flash_attn_varlen_func` (not installed here: `miniflash`, imported at [fa_utils.py:")


async def test_hover_dummy(vscode):
    path, text = readme_text("dummy, call site")
    md = await vscode.hover_text(path, position_of(path, text, offset=text.index("get_scheduler_metadata")))
    assert md.startswith("Runs: `_DummyOps.get_scheduler_metadata` (dummy, [\\_dummy_ops.py:")
    assert '"dummy: mini_metax._dummy_ops._DummyOps.get_scheduler_metadata"), only logs and returns None, ' in md


async def test_hover_triton_launch_shows_constexprs(vscode):
    path, text = readme_text("Triton launch of the autotuned kernel")
    md = await vscode.hover_text(path, position_of(path, text))
    assert md.startswith("Runs: `_decode_kernel` (Triton, [decode.py:")
    assert "\nconstexpr: `num_queries_per_kv, HEAD_SIZE, PADDED_D, PAGE_SIZE, BLOCK_N, EVEN_D`\n" in md


@pytest.mark.skipif(not HAS_CPPINDEX, reason="attnlens.cppindex (C++ registration index) is not installed")
async def test_hover_torch_op_shows_cpp_registration(vscode):
    path, text = readme_text("torch op, C++ registration (call)")
    md = await vscode.hover_text(path, position_of(path, text, offset=text.index("paged_attention_v2")))
    assert md.startswith("Runs: `paged_attention_v2` (torch op `_mini_C::paged_attention_v2`, [paged_attention.cu:")
    assert '"torch op: _mini_C::paged_attention_v2 → paged_attention_v2"' in md
    assert "[schema torch_bindings.cpp:" in md and "csrc/torch_bindings.cpp#L" in md and '"_mini_C::paged_attention_v2 — ops.def schema: paged_attention_v2(' in md


async def test_hover_backend_class(vscode, flash_attn):
    md = await vscode.hover_text(flash_attn, position_of(flash_attn, "class MiniFlashAttentionBackend", offset=7))
    assert md.splitlines()[0].rstrip() == "Backend `FLASH_ATTN` (attention): 5 kernels · 1 not installed · 1 dummy · 1 not taken here"
    assert "impl [MiniFlashAttentionImpl](" in md and "builder [MiniFlashAttentionMetadataBuilder](" in md
    assert '"vllm.v1.attention.backends.flash_attn.FlashAttentionBackend")' in md  # upstream counterpart
    assert "- `reshape_and_cache_flash` (torch op, [cache_kernels.cu:" in md


async def test_hover_reference_to_impl_class(vscode):
    path, text = readme_text("get_impl_cls (string forward ref)")
    pos = position_of(path, "return MiniFlashAttentionImpl", offset=8)
    md = await vscode.hover_text(path, pos)
    assert md.startswith("Impl of backend `FLASH_ATTN`: ")


async def test_hover_is_served_again_from_cache(vscode):
    path, text = readme_text("call through the re-export")
    pos = position_of(path, text)
    first = await vscode.hover(path, pos)
    second = await vscode.hover(path, pos)
    assert first is not None and first == second
    assert "_mini_unified_attention_kernel" in first.contents.value


async def test_implementation_lands_in_cpp_triton_and_python(vscode):
    cases = [
        ("upstream op served by the plugin's extension (call)", 0, "cache_kernels.cu", "reshape_and_cache_flash"),
        ("call into that wrapper", 0, "decode.py", "def _decode_kernel"),
        ("Triton through a Python wrapper (call)", 0, "merge_attn_states.py", "def merge_attn_states"),
    ]
    for kind, offset, filename, expect in cases:
        path, text = readme_text(kind)
        locs = await vscode.client.text_document_implementation_async(
            T.ImplementationParams(T.TextDocumentIdentifier(uri(path)), position_of(path, text, offset)))
        assert locs, kind
        assert locs[0].uri.endswith(filename), (kind, locs[0].uri)
        assert expect in line_of(locs[0]), (kind, line_of(locs[0]))


async def test_call_hierarchy(vscode, flash_attn):
    path, text = readme_text("Triton through a Python wrapper (call)")
    items = await vscode.client.text_document_prepare_call_hierarchy_async(
        T.CallHierarchyPrepareParams(T.TextDocumentIdentifier(uri(path)), position_of(path, text)))
    assert items and items[0].name == "merge_attn_states" and items[0].uri.endswith("merge_attn_states.py")
    out = await vscode.client.call_hierarchy_outgoing_calls_async(T.CallHierarchyOutgoingCallsParams(items[0]))
    to = {c.to.name: c.to for c in out}  # named after the called symbol, what it reaches leads the detail
    assert to["merge_attn_states_triton"].detail.startswith("→ merge_attn_states_kernel")
    inc = await vscode.client.call_hierarchy_incoming_calls_async(T.CallHierarchyIncomingCallsParams(items[0]))
    assert "_forward_cascade" in {c.from_.name for c in inc}

    # a method: its kernel call sites, each resolved to the final target
    fwd = await vscode.client.text_document_prepare_call_hierarchy_async(T.CallHierarchyPrepareParams(
        T.TextDocumentIdentifier(uri(flash_attn)), position_of(flash_attn, "def forward(", offset=4)))
    assert fwd[0].name == "forward" and fwd[0].kind == T.SymbolKind.Method
    out = await vscode.client.call_hierarchy_outgoing_calls_async(T.CallHierarchyOutgoingCallsParams(fwd[0]))
    targets = {c.to.name for c in out}  # named after the called symbol; the detail says what it reaches
    assert {"paged_attention_v2", "reshape_and_cache_flash"} <= targets, targets
    # torch op -> the C++ function it binds
    op = next(c.to for c in out if c.to.name == "paged_attention_v2")
    assert op.detail.startswith("→ _mini_C::paged_attention_v2 · ")
    cpp = await vscode.client.call_hierarchy_outgoing_calls_async(T.CallHierarchyOutgoingCallsParams(op))
    assert any(c.to.uri.endswith("paged_attention.cu") for c in cpp) or not HAS_CPPINDEX

    # a backend class: incoming = its registration in the platform
    cls = await vscode.client.text_document_prepare_call_hierarchy_async(T.CallHierarchyPrepareParams(
        T.TextDocumentIdentifier(uri(flash_attn)), position_of(flash_attn, "class MiniFlashAttentionBackend", offset=7)))
    inc = await vscode.client.call_hierarchy_incoming_calls_async(T.CallHierarchyIncomingCallsParams(cls[0]))
    assert any(c.from_.uri.endswith("platform.py") for c in inc)


async def test_workspace_symbols(vscode):
    async def names(query):
        res = await vscode.client.workspace_symbol_async(T.WorkspaceSymbolParams(query=query))
        return {(s.name, s.kind) for s in res}, res

    got, _ = await names("FLASH_ATTN")
    assert ("FLASH_ATTN", T.SymbolKind.Class) in got  # the registered backend
    got, _ = await names("paged_attention_v2")
    assert ("_mini_C::paged_attention_v2", T.SymbolKind.Operator) in got or not HAS_CPPINDEX
    got, res = await names("_decode_kernel")
    assert ("_decode_kernel", T.SymbolKind.Function) in got
    assert any("Triton kernel" in (s.container_name or "") for s in res)
    got, _ = await names("MiniFlashAttentionImpl")
    assert ("MiniFlashAttentionImpl", T.SymbolKind.Class) in got
    got, _ = await names("scale_cache")
    assert ("mini::scale_cache", T.SymbolKind.Operator) in got  # torch.library.custom_op


async def test_document_symbols(vscode, flash_attn):
    syms = await vscode.client.text_document_document_symbol_async(
        T.DocumentSymbolParams(T.TextDocumentIdentifier(uri(flash_attn))))
    by_name = {s.name: s for s in syms}
    backend = by_name["MiniFlashAttentionBackend"]
    assert backend.kind == T.SymbolKind.Class and "FLASH_ATTN" in (backend.detail or "")
    children = {c.name: c.kind for c in backend.children or []}
    assert children.get("get_impl_cls") == T.SymbolKind.Method
    impl = by_name["MiniFlashAttentionImpl"]
    assert "forward" in {c.name for c in impl.children}
    sel = backend.selection_range
    line = flash_attn.read_text().splitlines()[sel.start.line]
    assert line[sel.start.character:sel.end.character] == "MiniFlashAttentionBackend"


async def test_commands(vscode, flash_attn):
    ex = vscode.client.workspace_execute_command_async
    backends = await ex(T.ExecuteCommandParams(command="attnlens.backends"))
    names = {(b["kind"], b["name"]) for b in backends}
    assert ("attention", "FLASH_ATTN") in names and ("custom_op", "SparseAttnIndexer") in names
    path, text = readme_text("upstream op served by the plugin's extension (call)")
    pos = position_of(path, text)
    chain = await ex(T.ExecuteCommandParams(command="attnlens.trace", arguments=[uri(path), pos.line, pos.character]))
    assert chain["final"]["kind"] == "torch_op" and chain["final"]["symbol"] == "_C_cache_ops::reshape_and_cache_flash"
    st = await ex(T.ExecuteCommandParams(command="attnlens.status"))
    assert {"root", "targetPython", "targetError", "indexedModules", "generation", "platform"} <= set(st)
    with pytest.raises(Exception, match="attnlens.inventory"):
        await ex(T.ExecuteCommandParams(command="attnlens.inventory", arguments=[{"scope": "not-a-list"}]))
    with pytest.raises(Exception, match="takes"):
        await ex(T.ExecuteCommandParams(command="attnlens.trace", arguments=["x"]))


async def test_cancellation_keeps_serving(vscode):
    path, text = readme_text("call into that wrapper")
    params = T.HoverParams(T.TextDocumentIdentifier(uri(path)), position_of(path, text, offset=3))
    proto = vscode.client.protocol
    fut = proto.send_request_async(T.TEXT_DOCUMENT_HOVER, params, msg_id="cancel-me")
    proto.notify(T.CANCEL_REQUEST, T.CancelParams(id="cancel-me"))
    try:
        result = await asyncio.wait_for(fut, 10)
        assert result is None or "_decode_kernel" in result.contents.value
    except JsonRpcRequestCancelled:
        pass
    md = await vscode.hover_text(path, position_of(path, text))
    assert "_decode_kernel" in md


async def test_dynamic_file_watchers_registered(vscode):
    regs = vscode.registrations
    watch = [r for r in regs if r.method == T.WORKSPACE_DID_CHANGE_WATCHED_FILES]
    assert watch, regs
    globs = {w["globPattern"] if isinstance(w, dict) else w.glob_pattern for w in watch[0].register_options["watchers"]}
    assert {"**/*.py", "**/*.{cpp,cu,h,cuh}"} <= globs


@pytest.mark.skipif(importlib.util.find_spec("attnlens.runtime") is None, reason="attnlens.runtime is not installed")
async def test_runtime_commands(vscode):
    ex = vscode.client.workspace_execute_command_async
    env = await ex(T.ExecuteCommandParams(command="attnlens.environment"))
    assert env["record"]["python"]
    with pytest.raises(Exception, match="unknown probe family"):
        await ex(T.ExecuteCommandParams(command="attnlens.runProbe", arguments=[{"family": "nope", "target": "x"}]))
