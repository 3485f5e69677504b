"""Security properties (threat model: docs/security.md).

* Nothing executes the target environment implicitly: a full LSP session with hovers,
  definitions, call hierarchy, symbols, diagnostics and the read-only commands runs the
  target interpreter exactly once, to read ``sys.path`` (a logging wrapper records every
  invocation); only an explicit ``attnlens.runProbe`` starts the probe agent.
* Every subprocess gets an argv list: no ``shell=True``, ``os.system``, ``os.popen``,
  ``create_subprocess_shell`` anywhere in server/attnlens (AST check and grep).
* Command arguments are validated: families, targets, evidence ids and cache names with
  path separators or ``..`` are refused, and nothing is written outside the cache folder.
* The server listens on TCP only when asked, and then only on loopback unless
  ``--allow-remote`` is given; the TCP transport survives malformed frames too.
* The VS Code extension declares its behaviour in untrusted workspaces.
"""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from lsprotocol import types as T

from .lspdriver import PYTHON, ServerHandle, TextModel, frame

REPO = Path(__file__).resolve().parents[2]
PKG = REPO / "server" / "attnlens"
FA = "mini_metax/attention/backends/flash_attn.py"


# ------------------------------------------------------------------------------- no implicit execution
def logging_python(tmp: Path, real: str) -> tuple[Path, Path]:
    """A `python` that appends its argv to a log, then runs the real interpreter."""
    log = tmp / "target-invocations.log"
    wrapper = tmp / "logged-env" / "bin" / "python"
    wrapper.parent.mkdir(parents=True)
    wrapper.write_text("#!/bin/sh\n"
                       f"printf '%s\\n' \"$*\" | tr '\\n' ' ' >> {log}\n"
                       f"printf '\\n' >> {log}\n"
                       f"exec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    return wrapper, log


def invocations(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if line.strip()] if log.exists() else []


@pytest.mark.slow
def test_lsp_session_runs_the_target_only_to_read_sys_path(tmp_path, example_copy):
    from tests.probe_fixtures.runtime_support import _has, fixture_env, target_python

    tpy = target_python()
    real = tpy if _has(tpy, "torch") else PYTHON
    wrapper, log = logging_python(tmp_path, real)
    srv = ServerHandle(example_copy, tmp_path / "cache", python=str(wrapper), env=fixture_env())
    try:
        srv.start()
        st = srv.wait_indexed(120)
        assert not st["targetError"], st
        fa = example_copy / FA
        text = fa.read_text()
        uri = srv.open(fa, text)
        model = TextModel(text)
        positions = [model.position(m.start() + 1) for m in re.finditer(r"\b[a-z_]+\(", text)][:60]
        for p in positions:
            pos = {"textDocument": {"uri": uri}, "position": {"line": p.line, "character": p.character}}
            for method in (T.TEXT_DOCUMENT_HOVER, T.TEXT_DOCUMENT_DEFINITION, T.TEXT_DOCUMENT_IMPLEMENTATION):
                assert srv.request(method, pos, timeout=30).outcome == "ok"
        prep = srv.request(T.TEXT_DOCUMENT_PREPARE_CALL_HIERARCHY, {"textDocument": {"uri": uri}, "position": {
            "line": positions[0].line, "character": positions[0].character}}, timeout=30)
        for item in (prep.result or [])[:2]:
            srv.request(T.CALL_HIERARCHY_OUTGOING_CALLS, {"item": item}, timeout=30)
            srv.request(T.CALL_HIERARCHY_INCOMING_CALLS, {"item": item}, timeout=60)
        for p in sorted(example_copy.rglob("*.py")):
            rep = srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": p.resolve().as_uri()}}, timeout=120)
            assert rep.ok, rep
        srv.change(uri, 2, [T.TextDocumentContentChangePartial(range=T.Range(T.Position(0, 0), T.Position(0, 0)),
                                                               text="import torch\ntorch.cuda.init()\n")])
        assert srv.request(T.TEXT_DOCUMENT_DIAGNOSTIC, {"textDocument": {"uri": uri}}, timeout=120).ok
        assert srv.request(T.TEXT_DOCUMENT_DOCUMENT_SYMBOL, {"textDocument": {"uri": uri}}, timeout=30).ok
        assert srv.request(T.WORKSPACE_SYMBOL, {"query": "attn"}, timeout=30).ok
        for cmd in ("attnlens.backends", "attnlens.status", "attnlens.restartIndex"):
            assert srv.command(cmd, timeout=120).ok, cmd
        srv.wait_indexed(60)
        calls = invocations(log)
        assert len(calls) == 1 and calls[0].startswith("-c import sys, json, sysconfig"), calls
        if real == tpy:
            # the positive control: an explicit probe request does start the agent in the target
            rep = srv.command("attnlens.runProbe", [{"family": "lse_merge", "device": "cpu", "timeout": 300,
                                                     "target": "probefix.lse_merge:merge_attn_states_torch"}],
                              timeout=400)
            assert rep.ok and rep.result["verdict"] == "pass", rep
            calls = invocations(log)
            assert any("agent_main.py" in c for c in calls[1:]), calls
    finally:
        srv.close()


# ------------------------------------------------------------------------------- argv lists only
FORBIDDEN_CALLS = {("os", "system"), ("os", "popen"), ("os", "execl"), ("os", "execlp"), ("os", "spawnl"),
                   ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
                   ("asyncio", "create_subprocess_shell"), ("pty", "spawn")}
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec"}


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def _stringy(node: ast.AST) -> bool:
    """A command built as a string (a literal, an f-string, % formatting or + of strings)."""
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes))
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp):
        return isinstance(node.op, ast.Mod) or _stringy(node.left) or _stringy(node.right)
    return False


def test_every_subprocess_gets_an_argv_list_and_no_shell():
    files = sorted(PKG.rglob("*.py"))
    assert len(files) > 40
    problems = []
    spawns = 0
    for f in files:
        tree = ast.parse(f.read_text(encoding="utf-8"), str(f))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            where = f"{f.relative_to(REPO)}:{node.lineno}"
            for kw in node.keywords:
                if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant) and kw.value.value is False):
                    problems.append(f"{where}: shell={ast.unparse(kw.value)}")
            if name[-2:] in FORBIDDEN_CALLS or (len(name) == 1 and name[0] in ("system", "popen")):
                problems.append(f"{where}: {'.'.join(name)}()")
            if name and name[-1] in SUBPROCESS_CALLS and (len(name) == 1 or name[-2] in ("subprocess", "asyncio")):
                spawns += 1
                if node.args and _stringy(node.args[0]):
                    problems.append(f"{where}: {'.'.join(name)}() with a command string")
    # grep as well (catches what the AST walk cannot name, e.g. getattr tricks spelled out)
    for f in files:
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"shell\s*=\s*True|os\.system\(|os\.popen\(|create_subprocess_shell", code):
                problems.append(f"{f.relative_to(REPO)}:{i}: {line.strip()}")
    assert spawns >= 5, "the AST walk found too few subprocess calls: is it still looking at the right code?"
    assert not problems, "\n".join(sorted(set(problems)))


# ------------------------------------------------------------------------------- argument validation
BAD_FAMILIES = ["../../etc/passwd", "lse_merge/../../x", "..", "/tmp/evil", "lse_merge\\..\\x", "", "a\x00b"]


@pytest.fixture(scope="module")
def probe_server(tmp_path_factory):
    from .conftest import copy_example

    tmp = tmp_path_factory.mktemp("sec")
    root = copy_example(tmp / "ws")
    srv = ServerHandle(root, tmp / "cache")
    srv.start()
    srv.wait_indexed(90)
    yield srv, tmp
    srv.close()


@pytest.mark.parametrize("family", BAD_FAMILIES)
def test_run_probe_refuses_a_family_with_path_characters(probe_server, family):
    pytest.importorskip("attnlens.runtime.probes", reason="attnlens.runtime not installed")
    srv, tmp = probe_server
    outside = {p for p in tmp.rglob("*") if "cache" not in p.relative_to(tmp).parts}
    rep = srv.command("attnlens.runProbe", [{"family": family, "target": "x:y", "device": "cpu", "timeout": 5}])
    assert rep.outcome == "error" and rep.code == -32602, rep
    assert "unknown probe family" in rep.message or "family" in rep.message, rep.message
    # nothing written: no evidence, no environment record, nothing next to the cache
    assert not list(tmp.rglob("evidence")) and not list((tmp / "cache").rglob("env"))
    assert {p for p in tmp.rglob("*") if "cache" not in p.relative_to(tmp).parts} == outside
    assert srv.command("attnlens.status").ok


@pytest.mark.parametrize("spec", [
    {"family": "lse_merge", "target": "x\ny"},
    {"family": "lse_merge", "target": ""},
    {"family": "lse_merge", "target": "a\x00b"},
    {"family": 5, "target": "x:y"},
    {"family": ["lse_merge"], "target": "x:y"},
    "lse_merge",
    None,
])
def test_run_probe_refuses_malformed_specs(probe_server, spec):
    pytest.importorskip("attnlens.runtime.probes", reason="attnlens.runtime not installed")
    srv, _tmp = probe_server
    rep = srv.command("attnlens.runProbe", [spec] if spec is not None else None)
    assert rep.outcome == "error" and rep.code in (-32602, -32603), rep
    assert rep.code == -32602, f"a malformed spec should be Invalid params, got {rep.code}: {rep.message}"
    assert srv.command("attnlens.status").ok


def test_probe_target_with_path_characters_stays_in_the_cache(tmp_path, example_copy):
    """A target spelled like a path is only a symbol: its evidence id is a safe name inside <cache>/evidence."""
    pytest.importorskip("attnlens.runtime.probes", reason="attnlens.runtime not installed")
    srv, tmp = ServerHandle(example_copy, tmp_path / "cache"), tmp_path
    try:
        srv.start()
        srv.wait_indexed(90)
        _evil_target(srv, tmp)
    finally:
        srv.close()


def _evil_target(srv: ServerHandle, tmp: Path) -> None:
    evil = "../../../../../../tmp/attnlens-evil-target/../x:y"
    before = set(Path("/tmp").iterdir())
    # force: past the editor's pre-flight check (the analysis venv has no torch), so that evidence is written
    rep = srv.command("attnlens.runProbe", [{"family": "lse_merge", "target": evil, "device": "cpu", "timeout": 60,
                                             "force": True}], timeout=200)
    # the server's target is the analysis venv here (no torch): whatever the verdict, it is recorded safely
    assert rep.ok, rep
    rid = rep.result["id"]
    assert "/" not in rid and ".." not in rid and "\\" not in rid
    written = list((tmp / "cache").rglob(f"{rid}.json"))
    assert len(written) == 1 and written[0].parent.name == "evidence"
    assert set(Path("/tmp").iterdir()) - before <= {p for p in Path("/tmp").iterdir() if p.name.startswith(
        ("pytest-", "tmp", "attnlens-probefix-"))}
    assert not Path("/tmp/attnlens-evil-target").exists()


@pytest.mark.parametrize("bad", ["../x", "a/b", "..", ".hidden", "x" * 200, "a\\b", "a\x00b", "", "/etc/passwd"])
def test_evidence_ids_and_cache_names_cannot_escape(tmp_path, bad):
    from attnlens.cache import Cache

    ev = pytest.importorskip("attnlens.runtime.evidence", reason="attnlens.runtime not installed")
    cache = Cache(tmp_path / "c")
    with pytest.raises(ValueError):
        ev.validate_id(bad)
    with pytest.raises(ValueError):
        ev.read(cache, bad)
    with pytest.raises(ValueError):
        cache.path("evidence", bad)
    assert cache.load_json("evidence", bad) is None
    with pytest.raises(ValueError):
        cache.store_json("evidence", bad, {"x": 1})
    rec = ev.EvidenceRecord(id=bad, family="lse_merge", target="t", verdict="pass", created="now")
    with pytest.raises(ValueError):
        ev.write(cache, rec)
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
    # a record on disk whose id field is hostile is skipped when listed
    (tmp_path / "c" / "evidence").mkdir(parents=True, exist_ok=True)
    (tmp_path / "c" / "evidence" / "ok-id.json").write_text(json.dumps(
        {"id": bad, "family": "f", "target": "t", "verdict": "pass", "created": "now"}))
    assert ev.list_records(cache) == []


def test_execute_command_rejects_unknown_commands_and_bad_trace_arguments(probe_server):
    srv, _tmp = probe_server
    rep = srv.command("attnlens.doesNotExist", [])
    assert rep.outcome == "error", rep
    for args in (["file:///etc/passwd", 0, 0], ["../../etc/passwd", 0, 0], ["file:///x.py", "a", 0], [1, 2, 3]):
        rep = srv.command("attnlens.trace", args)
        assert rep.outcome in ("ok", "error"), rep
        if rep.ok:
            assert rep.result is None, (args, rep.result)  # nothing analysed outside the workspace's modules
        else:
            assert rep.code == -32602, rep
    assert srv.command("attnlens.status").ok


# ------------------------------------------------------------------------------- TCP
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(args: list[str], tmp: Path) -> subprocess.Popen:
    env = {**os.environ, "ATTNLENS_CACHE_DIR": str(tmp / "cache")}
    return subprocess.Popen([sys.executable, "-m", "attnlens.cli", "serve", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, text=True)


@pytest.mark.parametrize("host", ["0.0.0.0", "[::]", "8.8.8.8", "example.invalid"])
def test_tcp_on_a_non_loopback_address_is_refused(tmp_path, host):
    p = serve(["--tcp", f"{host}:{free_port()}"], tmp_path)
    try:
        out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert p.returncode != 0
    assert "--allow-remote" in err and "loopback" in err, err


def listening_inodes() -> dict[int, str]:
    out = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"/proc/net/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] == "0A":  # LISTEN
                out[int(f[9])] = f[1]
    return out


def socket_inodes(pid: int) -> set[int]:
    out = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m:
            out.add(int(m.group(1)))
    return out


def test_stdio_server_listens_on_no_port(tmp_path, example_copy):
    srv = ServerHandle(example_copy, tmp_path / "cache")
    try:
        srv.start()
        srv.wait_indexed(90)
        listening = listening_inodes()
        assert not (socket_inodes(srv.pid) & set(listening)), "the stdio server has a listening socket"
    finally:
        srv.close()


def _tcp_request(sock: socket.socket, buf: bytearray, obj: dict | bytes, want_id=None, timeout=30.0) -> dict | None:
    sock.sendall(frame(obj) if not isinstance(obj, bytes) else obj)
    if want_id is None:
        return None
    sock.settimeout(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        while b"\r\n\r\n" in buf:
            head, _, rest = bytes(buf).partition(b"\r\n\r\n")
            n = int(re.search(rb"Content-Length: (\d+)", head).group(1))
            if len(rest) < n:
                break
            msg = json.loads(rest[:n])
            del buf[: len(head) + 4 + n]
            if msg.get("id") == want_id and "method" not in msg:
                return msg
            if "method" in msg and "id" in msg:
                sock.sendall(frame({"jsonrpc": "2.0", "id": msg["id"], "result": None}))
        chunk = sock.recv(65536)
        if not chunk:
            return None
        buf += chunk
    return None


def test_tcp_on_loopback_serves_and_survives_bad_frames(tmp_path, example_copy):
    port = free_port()
    p = serve(["--tcp", f"127.0.0.1:{port}", "--python", PYTHON], tmp_path)
    try:
        sock = None
        deadline = time.monotonic() + 30
        while sock is None and time.monotonic() < deadline:
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=5)
            except OSError:
                time.sleep(0.1)
        assert sock is not None, p.stderr.read() if p.poll() is not None else "no listener"
        # bound to loopback only
        listening = listening_inodes()
        mine = {listening[i] for i in socket_inodes(p.pid) if i in listening}
        assert mine and all(a.startswith("0100007F:") or a.startswith("00000000000000000000000001000000:")
                            for a in mine), mine
        buf = bytearray()
        with sock:
            rep = _tcp_request(sock, buf, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "processId": None, "capabilities": {}, "rootUri": example_copy.resolve().as_uri()}}, 1)
            assert rep and "result" in rep, rep
            _tcp_request(sock, buf, {"jsonrpc": "2.0", "method": "initialized", "params": {}})
            _tcp_request(sock, buf, b"Content-Length: nope\r\n\r\n{}garbage without a newline")
            _tcp_request(sock, buf, frame(b"[1, 2]"))
            rep = _tcp_request(sock, buf, {"jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
                                           "params": {"command": "attnlens.status"}}, 2)
            rep = rep or _tcp_request(sock, buf, {"jsonrpc": "2.0", "id": 3, "method": "workspace/executeCommand",
                                                  "params": {"command": "attnlens.status"}}, 3)
            assert rep and rep["result"]["root"] == str(example_copy.resolve()), rep
            _tcp_request(sock, buf, {"jsonrpc": "2.0", "id": 4, "method": "shutdown"}, 4)
            _tcp_request(sock, buf, {"jsonrpc": "2.0", "method": "exit"})
        p.wait(20)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        for s in (p.stdout, p.stderr):
            s.close()


def test_allow_remote_is_required_and_sufficient(tmp_path):
    port = free_port()
    p = serve(["--tcp", f"0.0.0.0:{port}", "--allow-remote"], tmp_path)
    try:
        deadline = time.monotonic() + 30
        bound = set()
        while not bound and time.monotonic() < deadline and p.poll() is None:
            listening = listening_inodes()
            bound = {listening[i] for i in socket_inodes(p.pid) if i in listening}
            time.sleep(0.1)
        assert bound == {f"00000000:{port:04X}"}, bound
    finally:
        p.kill()
        p.wait()
        for s in (p.stdout, p.stderr):
            s.close()


# ------------------------------------------------------------------------------- the editor extension
def test_vscode_extension_declares_untrusted_workspace_limits():
    pkg = json.loads((REPO / "client-vscode" / "package.json").read_text())
    caps = pkg.get("capabilities", {})
    untrusted = caps.get("untrustedWorkspaces")
    assert untrusted and untrusted.get("supported") in ("limited", False), untrusted
    if untrusted.get("supported") == "limited":
        restricted = set(untrusted.get("restrictedConfigurations") or [])
        assert {"attnlens.targetPython", "attnlens.interpreter"} <= restricted, restricted
        assert "probe" in untrusted.get("description", "").lower()
    src = "\n".join(p.read_text() for p in (REPO / "client-vscode" / "src").glob("*.ts"))
    assert "isTrusted" in src, "the extension never checks workspace trust before running probes"
