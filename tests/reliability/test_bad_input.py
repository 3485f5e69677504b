"""Bad input everywhere: each case gets a clear message and the server keeps serving.

Protocol level (raw bytes on the server's stdin), workspace level (files the
analysis cannot parse or read, loops, huge files), environment level (a broken
target interpreter, a broken installed package, a corrupt cache) and contract
files with schema errors.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as T

from .conftest import copy_example
from .lspdriver import PYTHON, RawServer, ServerHandle, TextModel, frame

REPO = Path(__file__).resolve().parents[2]
BUDGET_S = 5.0
ATTNLENS = [sys.executable, "-m", "attnlens.cli"]
CALL = "reshape_and_cache_flash(key, value"
FA = "mini_metax/attention/backends/flash_attn.py"


def status_request(rid: int) -> dict:
    return {"jsonrpc": "2.0", "id": rid, "method": "workspace/executeCommand",
            "params": {"command": "attnlens.status", "arguments": []}}


def hover_params(path: Path, line: int, char: int) -> dict:
    return {"textDocument": {"uri": path.resolve().as_uri()}, "position": {"line": line, "character": char}}


def call_position(path: Path, needle: str = CALL, encoding: str = "utf-8") -> T.Position:
    text = path.read_text(encoding=encoding)
    return TextModel(text).position(text.index(needle))


# ------------------------------------------------------------------------------- protocol
BODY = json.dumps(status_request(900)).encode()

# name -> (bytes to write, expected error code or None, expected id, words the message must contain,
#          whether the first sentinel request after it may be swallowed)
FRAMES = {
    "content_length_not_a_number": (b"Content-Length: abc\r\n\r\n{}", -32700, None, ["Content-Length", "abc"], False),
    "content_length_zero": (b"Content-Length: 0\r\n\r\n", -32700, None, ["Content-Length"], False),
    "content_length_huge": (b"Content-Length: 99999999999999\r\n\r\n{}", -32700, None, ["Content-Length"], False),
    "content_length_too_short": (b"Content-Length: 7\r\n\r\n" + BODY, -32700, None, ["not JSON"], False),
    "content_length_too_long": (b"Content-Length: %d\r\n\r\n" % (len(BODY) + 40) + BODY, -32700, None,
                                ["not JSON"], True),
    "garbage_before_a_frame": (b"hello, this is not a header\r\n" + frame(status_request(901)), None, None,
                               ["skipped"], False),
    "body_not_json": (frame(b"this is not json"), -32700, None, ["not JSON"], False),
    "body_not_utf8": (frame(b'{"jsonrpc": "2.0", "id": 5, "method": "x\xff\xfe"}'), -32700, None, ["not JSON"], False),
    "json_array": (frame(b"[1, 2, 3]"), -32600, None, ["must be an object", "batches"], False),
    "json_number": (frame(b"42"), -32600, None, ["must be an object"], False),
    "json_string": (frame(b'"hello"'), -32600, None, ["must be an object"], False),
    "no_jsonrpc_member": (frame({"id": 11, "method": "shutdown"}), -32600, 11, ["jsonrpc"], False),
    "missing_method": (frame({"jsonrpc": "2.0", "id": 12, "params": {}}), -32600, 12, ["no method"], False),
    "method_not_a_string": (frame({"jsonrpc": "2.0", "id": 13, "method": 5}), -32600, 13, ["method must be a string"],
                            False),
    "bad_id_type": (frame({"jsonrpc": "2.0", "id": {"x": 1}, "method": "shutdown"}), -32600, None, ["id must be"],
                    False),
    "unknown_request": (frame({"jsonrpc": "2.0", "id": 14, "method": "attnlens/noSuchMethod", "params": {}}), -32601,
                        14, ["attnlens/noSuchMethod"], False),
    "unknown_notification": (frame({"jsonrpc": "2.0", "method": "attnlens/noSuchNotification"}), None, None, [], False),
    "dollar_notification": (frame({"jsonrpc": "2.0", "method": "$/somethingNew", "params": {}}), None, None, [], False),
    "request_params_wrong_types": (frame({"jsonrpc": "2.0", "id": 15, "method": "textDocument/hover",
                                          "params": {"textDocument": 5, "position": "x"}}), -32602, 15,
                                   ["textDocument/hover"], False),
    "request_params_not_an_object": (frame({"jsonrpc": "2.0", "id": 16, "method": "textDocument/hover",
                                            "params": "x"}), -32602, 16, ["params must be"], False),
    "request_negative_position": (frame({"jsonrpc": "2.0", "id": 17, "method": "textDocument/hover",
                                         "params": {"textDocument": {"uri": "file:///x.py"},
                                                    "position": {"line": -1, "character": -5}}}), "any", 17, [],
                                  False),
    "notification_params_wrong_types": (frame({"jsonrpc": "2.0", "method": "textDocument/didOpen",
                                               "params": {"textDocument": 5}}), None, None,
                                        ["Invalid params for textDocument/didOpen"], False),
    "change_of_unopened_document": (frame({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
        "textDocument": {"uri": "file:///nowhere/never_opened.py", "version": 3},
        "contentChanges": [{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
                            "text": "x"}]}}), None, None, [], False),
    "trace_command_bad_arguments": (frame({"jsonrpc": "2.0", "id": 18, "method": "workspace/executeCommand",
                                           "params": {"command": "attnlens.trace", "arguments": ["x"]}}), -32602, 18,
                                    ["attnlens.trace"], False),
    "unknown_command": (frame({"jsonrpc": "2.0", "id": 19, "method": "workspace/executeCommand",
                               "params": {"command": "attnlens.noSuchCommand", "arguments": []}}), "any", 19,
                        ["attnlens.noSuchCommand"], False),
    "hover_on_a_non_file_uri": (frame({"jsonrpc": "2.0", "id": 20, "method": "textDocument/hover", "params": {
        "textDocument": {"uri": "untitled:Untitled-1"}, "position": {"line": 0, "character": 0}}}), "result", 20, [],
                                False),
}


@pytest.fixture(scope="module")
def raw_server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("raw")
    root = tmp / "ws"
    (root / "pk").mkdir(parents=True)
    (root / "pk" / "__init__.py").write_text("def f():\n    return g()\n\n\ndef g():\n    return 1\n")
    srv = RawServer(root, tmp / "cache")
    srv.initialize()
    rep, _ = srv.request("workspace/executeCommand", {"command": "attnlens.status", "arguments": []}, timeout=60)
    assert rep is not None and rep["result"]["root"] == str(root.resolve()), rep
    yield srv
    srv.close()


@pytest.mark.parametrize("case", sorted(FRAMES))
def test_malformed_frame_is_answered_and_server_keeps_serving(raw_server, case):
    data, code, msg_id, words, first_may_be_lost = FRAMES[case]
    srv = raw_server
    srv.write(data)
    base = 7_000 + 10 * sorted(FRAMES).index(case)
    srv.send(status_request(base + 1))
    srv.send(status_request(base + 2))
    last, got = srv.wait_for(lambda m: m.get("id") == base + 2, timeout=BUDGET_S * 2)
    assert srv.alive(), f"server exited with {srv.proc.returncode}: {list(srv.stderr_tail)[-20:]}"
    assert last is not None and "result" in last, f"server stopped answering after {case}: {got}"
    if not first_may_be_lost:
        assert any(m.get("id") == base + 1 and "result" in m for m in got), f"sentinel lost after {case}: {got}"
    errors = [m for m in got if "error" in m and m.get("id") not in (base + 1, base + 2)]
    logs = [m["params"]["message"] for m in got if m.get("method") in ("window/logMessage", "window/showMessage")]
    if code == "result":
        assert any(m.get("id") == msg_id and "result" in m for m in got), got
    elif code == "any":
        assert any(m.get("id") == msg_id for m in got), f"request {msg_id} never answered: {got}"
    elif code is None:
        assert not errors, f"{case}: a notification must not be answered: {errors}"
    else:
        assert errors, f"{case}: no error answer: {got}"
        err = errors[0]
        assert err["error"]["code"] == code, err
        assert err.get("id") == msg_id, err
        text = err["error"]["message"]
        assert all(w in text for w in words), f"{case}: unclear message {text!r}"
    if words and (code in (-32700, -32600) or code is None or case.startswith("request_params")):
        # input the transport rejects is also told to the user, in the editor's log
        assert any(all(w in m for w in words) for m in logs), f"{case}: nothing in the client log: {logs}"


def test_frames_after_all_the_garbage_are_still_served(raw_server):
    """After every case above (in any order), a normal session still works: hover, symbols, status."""
    root = raw_server.root
    path = root / "pk" / "__init__.py"
    raw_server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
        "uri": path.resolve().as_uri(), "languageId": "python", "version": 1, "text": path.read_text()}}})
    rep, got = raw_server.request("textDocument/hover", hover_params(path, 1, 12), timeout=BUDGET_S)
    assert rep is not None and "result" in rep, got
    assert rep["result"] is None  # answered; `g()` is plain Python: nothing kernel-related, so no hover box
    rep, got = raw_server.request("textDocument/documentSymbol", {"textDocument": {"uri": path.resolve().as_uri()}})
    assert rep is not None and [s["name"] for s in rep["result"]] == ["f", "g"], got


# ------------------------------------------------------------------------------- workspace files
def _bad_files(root: Path) -> dict[str, Path]:
    pkg = root / "mini_metax"
    files = {
        "syntax_error": pkg / "broken_syntax.py",
        "binary": pkg / "binary_blob.py",
        "latin1": pkg / "latin1_source.py",
        "nul_bytes": pkg / "nul_bytes.py",
        "bom_crlf": pkg / "bom_crlf.py",
        "empty": pkg / "empty_module.py",
        "deep_nesting": pkg / "deep_nesting.py",
    }
    files["syntax_error"].write_text("def broken(:\n    return (1,\n\nclass X(\n    pass\n")
    files["binary"].write_bytes(bytes(range(256)) * 64)
    files["latin1"].write_bytes("# -*- coding: latin-1 -*-\n# café\nfrom mini_metax.attention.ops import "
                                "mini_unified_attention_fwd\n\n\ndef go():\n    return mini_unified_attention_fwd()\n"
                                .encode("latin-1"))
    files["nul_bytes"].write_bytes(b"def f():\n    return 1\x00\x00\n")
    files["bom_crlf"].write_bytes("\ufeffimport os\r\n\r\ndef f():\r\n    return os.getcwd()\r\n".encode("utf-8"))
    files["empty"].write_bytes(b"")
    files["deep_nesting"].write_text("x = " + "(" * 5000 + "1" + ")" * 5000 + "\n" + "def f():\n    return x\n")
    return files


def test_workspace_with_unparsable_files_keeps_serving(tmp_path):
    root = copy_example(tmp_path / "ws")
    files = _bad_files(root)
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        st = srv.wait_indexed(90)
        assert st["indexedModules"] >= 20
        for name, path in files.items():
            uri = path.resolve().as_uri()
            for method, params in ((T.TEXT_DOCUMENT_HOVER, hover_params(path, 1, 5)),
                                   (T.TEXT_DOCUMENT_DEFINITION, hover_params(path, 1, 5)),
                                   (T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}),
                                   (T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}})):
                rep = srv.request(method, params, timeout=BUDGET_S)
                assert rep.outcome == "ok", f"{name} {method}: {rep}"
            # the editor opens it too (a binary file arrives decoded with replacement characters)
            text = path.read_bytes().decode("utf-8", "replace")
            srv.open(path, text)
            rep = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}, timeout=BUDGET_S)
            assert rep.outcome == "ok", f"{name} opened: {rep}"
        # the latin-1 module is decoded by its coding cookie: its call still resolves
        lat = files["latin1"]
        pos = call_position(lat, "mini_unified_attention_fwd()", "latin-1")
        h = srv.hover(lat.resolve().as_uri(), pos.line, pos.character)
        assert h.ok and h.result and "_mini_unified_attention_kernel" in h.result["contents"]["value"], h
        # the rest of the workspace is unaffected
        fa = root / FA
        pos = call_position(fa)
        h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character)
        assert h.ok and "_C_cache_ops::reshape_and_cache_flash" in h.result["contents"]["value"]
        assert srv.alive()
    finally:
        srv.close()
    # and the CLI over the same tree
    out = subprocess.run(ATTNLENS + ["backends", "--json", "--root", str(root), "--python", PYTHON,
                                     "--cache-dir", str(tmp_path / "cache-cli")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert {e["name"] for e in json.loads(out.stdout)} >= {"FLASH_ATTN", "TRITON_ATTN"}


def test_fifo_named_like_a_module_does_not_block_the_analysis(tmp_path):
    root = tmp_path / "ws"
    (root / "pk").mkdir(parents=True)
    (root / "pk" / "__init__.py").write_text("from pk import fifo\n\n\ndef f():\n    return fifo.run()\n")
    os.mkfifo(root / "pk" / "fifo.py")
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        srv.wait_indexed(60)
        fifo = root / "pk" / "fifo.py"
        rep = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": fifo.as_uri()}}, timeout=BUDGET_S)
        init = root / "pk" / "__init__.py"
        rep2 = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": init.as_uri()}}, timeout=BUDGET_S)
        assert rep.outcome == "ok" and rep2.outcome == "ok", (rep, rep2)
    finally:
        srv.kill()
        srv.close()


def _huge_module(path: Path, lines: int = 50_000) -> tuple[int, int]:
    """A 50,000-line module of small functions calling into the example's ops; returns the last call's position."""
    out = ["from mini_metax.attention.ops.merge_attn_states import merge_attn_states\n", "\n"]
    n = 0
    while len(out) < lines - 4:
        out.append(f"def f_{n}(a, b, c, d, e):\n")
        out.append(f"    # function {n} of a generated module\n")
        out.append("    return merge_attn_states(a, b, c, d, e)\n")
        out.append("\n")
        n += 1
    out.append("def last(a, b, c, d, e):\n")
    out.append("    return merge_attn_states(a, b, c, d, e)\n")
    path.write_text("".join(out))
    return len(out) - 1, len("    return ")


@pytest.mark.slow
def test_hover_in_a_50000_line_file_answers_within_budget(tmp_path):
    root = copy_example(tmp_path / "ws")
    huge = root / "mini_metax" / "huge_generated.py"
    line, col = _huge_module(huge)
    assert len(huge.read_text().splitlines()) >= 50_000
    srv = ServerHandle(root, tmp_path / "cache", init_options={"hoverBudgetMs": 500})
    try:
        srv.start()
        srv.wait_indexed(120)
        uri = srv.open(huge)
        first = srv.hover(uri, line, col + 3, timeout=BUDGET_S)
        assert first.ok, first
        assert first.result and "merge_attn_states_kernel" in first.result["contents"]["value"], first
        # type at the end of the file: the 50k-line buffer is re-analysed, the hover still answers in budget
        srv.change(uri, 2, [T.TextDocumentContentChangePartial(
            range=T.Range(T.Position(line + 1, 0), T.Position(line + 1, 0)), text="# edited\n")])
        hov = srv.hover(uri, line, col + 3, timeout=BUDGET_S)
        assert hov.ok and hov.result, hov
        rep = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}, timeout=BUDGET_S)
        assert rep.ok and len(rep.result) > 12_000, rep.outcome
        print(f"\n50k-line file: first hover {first.latency_s * 1000:.0f} ms, hover after an edit "
              f"{hov.latency_s * 1000:.0f} ms, document symbols {rep.latency_s * 1000:.0f} ms")
    finally:
        srv.close()


def test_symlink_loops_in_the_workspace(tmp_path):
    root = copy_example(tmp_path / "ws")
    (root / "mini_metax" / "loop_to_root").symlink_to(root, target_is_directory=True)
    (root / "mini_metax" / "loop_to_self").symlink_to(root / "mini_metax", target_is_directory=True)
    (root / "cycle_a").symlink_to(root / "cycle_b")
    (root / "cycle_b").symlink_to(root / "cycle_a")
    (root / "mini_metax" / "dangling.py").symlink_to(root / "does_not_exist.py")
    (root / "mini_metax" / "self_loop.py").symlink_to(root / "mini_metax" / "self_loop.py")
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        t0 = time.monotonic()
        st = srv.wait_indexed(60)
        assert time.monotonic() - t0 < 60 and st["backends"] >= 3, st
        fa = root / FA
        pos = call_position(fa)
        h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
        assert h.ok and "_C_cache_ops::reshape_and_cache_flash" in h.result["contents"]["value"]
        for p in ("dangling.py", "self_loop.py", "loop_to_self/platform.py"):
            uri = (root / "mini_metax" / p).absolute().as_uri()
            rep = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}, timeout=BUDGET_S)
            assert rep.outcome == "ok", (p, rep)
        rep = srv.request(T.WORKSPACE_SYMBOL, {"query": "Mini"}, timeout=BUDGET_S)
        assert rep.ok and rep.result
    finally:
        srv.close()
    out = subprocess.run(ATTNLENS + ["sites", "--root", str(root), "--python", PYTHON,
                                     "--cache-dir", str(tmp_path / "cache-cli")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "kernel call sites" in out.stdout, out.stderr


def _unprivileged(argv: list[str]) -> list[str] | None:
    """argv run without the power to ignore file permissions (root: drop the DAC capabilities)."""
    if os.geteuid() != 0:
        return argv
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        return None
    wrapped = [setpriv, "--bounding-set=-dac_override,-dac_read_search", *argv]
    probe = subprocess.run(wrapped[:2] + [sys.executable, "-c", "import attnlens"], capture_output=True, timeout=60)
    return wrapped if probe.returncode == 0 else None


def test_unreadable_folders_and_files(tmp_path):
    argv = _unprivileged([sys.executable, "-m", "attnlens.lsp"])
    if argv is None:
        pytest.skip("running as root without setpriv: permissions cannot be enforced")
    root = copy_example(tmp_path / "ws")
    locked_dir = root / "mini_metax" / "locked"
    locked_dir.mkdir()
    (locked_dir / "__init__.py").write_text("def hidden():\n    return 1\n")
    locked_file = root / "mini_metax" / "locked_module.py"
    locked_file.write_text("def hidden():\n    return 2\n")
    fa = root / FA
    text = fa.read_text()
    fa.write_text(text + "\n\nfrom mini_metax.locked_module import hidden\n\n\ndef use_hidden():\n"
                  "    return hidden()\n")
    try:
        locked_dir.chmod(0)
        locked_file.chmod(0)
        probe_check = subprocess.run(argv[:-2] + ["-c", f"open({str(locked_file)!r}).read()"], capture_output=True)
        assert probe_check.returncode != 0, "the unprivileged server could still read a mode-000 file"
        srv = ServerHandle(root, tmp_path / "cache", argv=argv)
        try:
            srv.start()
            st = srv.wait_indexed(60)
            assert st["backends"] >= 3, st
            pos = call_position(fa, "hidden()\n")
            h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
            assert h.ok, h
            shown = h.result["contents"]["value"] if h.result else ""
            assert "Permission denied" in shown or "cannot read" in shown, shown
            rep = srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL,
                              {"textDocument": {"uri": locked_file.resolve().as_uri()}}, timeout=BUDGET_S)
            assert rep.outcome == "ok", rep
            pos = call_position(fa)
            h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
            assert h.ok and "_C_cache_ops::reshape_and_cache_flash" in h.result["contents"]["value"]
        finally:
            srv.close()
    finally:
        locked_dir.chmod(0o755)
        locked_file.chmod(0o644)


# ------------------------------------------------------------------------------- environment
def _tiny_venv(tmp: Path) -> tuple[str, Path]:
    """A venv without pip (seconds to make) and its site-packages."""
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    sp = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                        capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    return str(py), Path(sp)


def test_installed_package_with_syntax_error_and_import_cycle(tmp_path):
    py, sp = _tiny_venv(tmp_path)
    (sp / "brokenpkg").mkdir()
    (sp / "brokenpkg" / "__init__.py").write_text("def run(:\n    pass\n")
    (sp / "cyclepkg").mkdir()
    (sp / "cyclepkg" / "__init__.py").write_text("from cyclepkg.a import f\n")
    (sp / "cyclepkg" / "a.py").write_text("from cyclepkg.b import g as f\n")
    (sp / "cyclepkg" / "b.py").write_text("from cyclepkg.a import f as g\n")
    (sp / "starcycle").mkdir()
    (sp / "starcycle" / "__init__.py").write_text("from starcycle.x import *\n")
    (sp / "starcycle" / "x.py").write_text("from starcycle import *\n")
    (sp / "selfalias.py").write_text("import selfalias as me\nrun = me.run\n")
    root = tmp_path / "ws"
    (root / "plug").mkdir(parents=True)
    src = ("import brokenpkg\nimport selfalias\nfrom cyclepkg import f\nfrom starcycle import thing\n\n\n"
           "def go():\n    brokenpkg.run()\n    f()\n    thing()\n    selfalias.run()\n")
    plug = root / "plug" / "__init__.py"
    plug.write_text(src)
    srv = ServerHandle(root, tmp_path / "cache", python=py)
    try:
        srv.start()
        srv.wait_indexed(60)
        uri = plug.resolve().as_uri()
        for needle, words in (("brokenpkg.run()", ["brokenpkg"]), ("f()", []), ("thing()", []),
                              ("selfalias.run()", [])):
            pos = call_position(plug, needle)
            h = srv.hover(uri, pos.line, pos.character + len(needle) - 3, timeout=BUDGET_S)
            assert h.ok, (needle, h)
            if h.result:
                assert all(w in h.result["contents"]["value"] for w in words), h.result
            for method in (T.TEXT_DOCUMENT_DEFINITION, T.TEXT_DOCUMENT_IMPLEMENTATION):
                rep = srv.request(method, hover_params(plug, pos.line, pos.character), timeout=BUDGET_S)
                assert rep.outcome == "ok", (needle, method, rep)
        assert srv.alive()
    finally:
        srv.close()
    for needle in ("brokenpkg.run()", "f()", "thing()", "selfalias.run()"):
        pos = call_position(plug, needle)
        out = subprocess.run(ATTNLENS + ["trace", "--json", "--root", str(root), "--python", py,
                                         "--cache-dir", str(tmp_path / "cache-cli"),
                                         f"{plug}:{pos.line + 1}:{pos.character + 1}"],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode in (0, 1), out.stderr
        json.loads(out.stdout)


BROKEN_TARGETS = {
    "missing": (None, ["not found"]),
    "exits_with_error": ("#!/bin/sh\necho 'ImportError: libmcruntime.so: cannot open shared object file' >&2\nexit 3\n",
                         ["exit 3", "libmcruntime.so"]),
    "prints_garbage": ("#!/bin/sh\necho 'this is not json'\n", ["unexpected"]),
    "not_executable": ("not a program at all\n", ["cannot run"]),
}


@pytest.mark.parametrize("kind", sorted(BROKEN_TARGETS))
def test_missing_or_broken_target_interpreter(tmp_path, kind):
    script, words = BROKEN_TARGETS[kind]
    py = tmp_path / "bin" / "python"
    if script is not None:
        py.parent.mkdir()
        py.write_text(script)
        py.chmod(0o755 if kind != "not_executable" else 0o644)
    root = copy_example(tmp_path / "ws")
    srv = ServerHandle(root, tmp_path / "cache", python=str(py))
    try:
        srv.start()
        st = srv.wait_indexed(60)
        err = st["targetError"] or ""
        assert all(w in err for w in words), st
        warnings = [m for kind_, _t, m in srv.messages if kind_ == "show" and "target interpreter unusable" in m]
        assert warnings and "targetPython" in warnings[0], srv.messages
        fa = root / FA
        pos = call_position(fa, "merge_attn_states(output[:n]")
        h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
        assert h.ok and "merge_attn_states_kernel" in h.result["contents"]["value"], h  # the workspace alone
    finally:
        srv.close()
    out = subprocess.run(ATTNLENS + ["backends", "--root", str(root), "--python", str(py),
                                     "--cache-dir", str(tmp_path / "cache-cli")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


@pytest.mark.slow
def test_hanging_target_interpreter_times_out_and_leaves_nothing(tmp_path):
    """A target that never answers: the server warns after the read timeout and serves; no process stays."""
    py = tmp_path / "bin" / "python"
    py.parent.mkdir()
    marker = tmp_path / "grandchild.pid"
    # the background sleep is the grandchild that outlives a plain kill; `exec` makes the foreground one
    # the direct child, which the timeout does kill (so nothing unrecorded can leak from this test)
    py.write_text(f"#!/bin/sh\nsleep 300 &\necho $! > {marker}\nexec sleep 300\n")
    py.chmod(0o755)
    root = copy_example(tmp_path / "ws")
    srv = ServerHandle(root, tmp_path / "cache", python=str(py))
    try:
        srv.start()
        st = srv.wait_indexed(60)
        assert "did not answer" in (st["targetError"] or ""), st
        fa = root / FA
        pos = call_position(fa, "merge_attn_states(output[:n]")
        h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
        assert h.ok and "merge_attn_states_kernel" in h.result["contents"]["value"], h
    finally:
        srv.close()
        if marker.exists():
            gc = int(marker.read_text())
            from .lspdriver import pid_alive

            left = pid_alive(gc)
            if left:
                os.kill(gc, 9)
            # BUG (server/attnlens/target.py): the probe of the target runs without its own process group;
            # on timeout only the direct child is killed and its children stay (see docs/reliability.md)
            assert not left, "target.read_target left the target's children running after a timeout"


def _cli_backends(root: Path, cache: Path) -> tuple[int, list]:
    out = subprocess.run(ATTNLENS + ["backends", "--json", "--custom-ops", "--root", str(root), "--python", PYTHON,
                                     "--cache-dir", str(cache)], capture_output=True, text=True, timeout=180)
    return out.returncode, (json.loads(out.stdout) if out.returncode == 0 else out.stderr)


def _strip(entries: list) -> list:
    for e in entries:
        e.pop("subject", None)
    return entries


def test_corrupt_cache_files_are_detected_and_rebuilt(tmp_path, example_copy):
    rc, clean = _cli_backends(example_copy, tmp_path / "clean")
    assert rc == 0, clean
    cache = tmp_path / "cache"
    rc, first = _cli_backends(example_copy, cache)
    assert rc == 0 and _strip(first) == _strip(list(clean))
    files = [p for p in cache.rglob("*") if p.is_file()]
    pickles = [p for p in files if p.suffix == ".pickle"]
    jsons = [p for p in files if p.suffix == ".json"]
    assert pickles and jsons, files
    for i, p in enumerate(pickles):
        data = p.read_bytes()
        if i % 3 == 0:
            p.write_bytes(data[: len(data) // 2])  # torn
        elif i % 3 == 1:
            p.write_bytes(os.urandom(64))  # garbage
        else:
            p.write_bytes(b"")  # empty
    for i, p in enumerate(jsons):
        p.write_bytes(b"{\"truncated\": " if i % 2 else b"\x00\xff garbage")
    rc, again = _cli_backends(example_copy, cache)
    assert rc == 0, again
    assert _strip(again) == _strip(list(clean))
    # the server on the same (re-corrupted) cache
    for p in pickles:
        p.write_bytes(os.urandom(32))
    srv = ServerHandle(example_copy, cache)
    try:
        srv.start()
        st = srv.wait_indexed(90)
        assert st["backends"] >= 3 and not st["targetError"], st
        fa = example_copy / FA
        pos = call_position(fa)
        h = srv.hover(fa.resolve().as_uri(), pos.line, pos.character, timeout=BUDGET_S)
        assert h.ok and "_C_cache_ops::reshape_and_cache_flash" in h.result["contents"]["value"]
    finally:
        srv.close()
    rebuilt = [p for p in cache.rglob("*.pickle") if p.stat().st_size > 32]
    assert rebuilt, "nothing was rebuilt"


# ------------------------------------------------------------------------------- contracts
BAD_CONTRACT = """schema_version = 1

[[contract]]
id = "bad.entry"
family = "no_such_family"
covers = ["bad::op"]

[[contract]]
id = "good.entry.in.bad.file"
family = "kv_cache_write"
covers = ["good::op"]
"""
GOOD_CONTRACT = """schema_version = 1

[[contract]]
id = "good.entry"
family = "lse_merge"
covers = ["good::merge"]
"""


def test_contract_file_with_schema_errors_reports_and_the_rest_loads(tmp_path):
    contracts = pytest.importorskip("attnlens.rules.contracts", reason="rules engine not installed")
    d = tmp_path / "contracts"
    d.mkdir()
    (d / "a_bad.toml").write_text(BAD_CONTRACT)
    (d / "b_good.toml").write_text(GOOD_CONTRACT)
    (d / "c_not_toml.toml").write_text("this is [not toml\n")
    (d / "d_binary.toml").write_bytes(os.urandom(200))
    cs = contracts.load_contracts([d])
    ids = {c.id for c in cs.contracts}
    assert "good.entry" in ids and "good.entry.in.bad.file" in ids and "bad.entry" not in ids, ids
    by_file = {Path(e.file).name: e for e in cs.errors}
    assert {"a_bad.toml", "c_not_toml.toml", "d_binary.toml"} <= set(by_file), cs.errors
    assert by_file["a_bad.toml"].line == 5 and "no_such_family" in by_file["a_bad.toml"].message
    assert "TOML" in by_file["c_not_toml.toml"].message
    # the CLI says so, and still checks the workspace with the contracts that loaded
    root = copy_example(tmp_path / "ws")
    out = subprocess.run(ATTNLENS + ["check", "--root", str(root), "--python", PYTHON, "--contracts", str(d),
                                     "--cache-dir", str(tmp_path / "cache"), "--format", "json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode in (0, 1), out.stderr
    assert "contract error" in out.stderr and "a_bad.toml:5" in out.stderr, out.stderr
    json.loads(out.stdout)


def test_contract_file_with_schema_errors_in_the_editor(tmp_path):
    """A broken `.attnlens/contracts/*.toml` in the workspace: the server still diagnoses Python files,
    and the contract file gets a diagnostic of its own."""
    pytest.importorskip("attnlens.rules.engine", reason="rules engine not installed")
    root = copy_example(tmp_path / "ws")
    cdir = root / ".attnlens" / "contracts"
    cdir.mkdir(parents=True)
    bad = cdir / "broken.toml"
    bad.write_text(BAD_CONTRACT)
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        srv.wait_indexed(90)
        fa = root / FA
        rep = srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": fa.resolve().as_uri()}}, timeout=60)
        assert rep.ok and rep.result["items"], rep
        srv.open(bad, bad.read_text(), language="toml")
        rep = srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": bad.resolve().as_uri()}}, timeout=60)
        assert rep.ok, rep
        items = rep.result.get("items") or []
        told = items or [m for _k, _t, m in srv.messages if "broken.toml" in m]
        assert told, "the server reports nothing for a contract file with schema errors"
        assert any("no_such_family" in (i.get("message") if isinstance(i, dict) else i) for i in told), told
    finally:
        srv.close()


def test_server_exits_cleanly_after_shutdown_and_exit(tmp_path):
    """``shutdown`` then ``exit`` ends the process with status 0 and nothing on stderr about a fatal error:
    the thread that reads the client's stream was blocked in a buffered read holding its lock, and the
    interpreter's shutdown aborted the process ("could not acquire lock for <stdin>")."""
    root = copy_example(tmp_path / "ws")
    srv = ServerHandle(root, tmp_path / "cache")
    try:
        srv.start()
        srv.wait_indexed(90)
        fa = root / FA
        pos = call_position(fa)
        assert srv.hover(fa.resolve().as_uri(), pos.line, pos.character).ok
    finally:
        rc = srv.close()
    time.sleep(0.2)  # the stderr reader's last lines
    assert rc == 0, srv.stderr()
    assert "Fatal Python error" not in srv.stderr(200), srv.stderr()
