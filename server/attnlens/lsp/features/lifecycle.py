"""initialize / initialized / shutdown, configuration, watchers, indexing, parent watchdog."""

from __future__ import annotations

import asyncio
import logging
import os

from lsprotocol import types as T

from ...workspace import Workspace
from .. import config, textsync
from ..analysis import Analysis
from ..capabilities import ClientCaps
from ..convert import UTF8, UTF16, UTF32, uri_to_path
from ..server import AttnLensServer
from ..worker import IDLE

log = logging.getLogger("attnlens.lsp")

PARENT_POLL_S = 3.0
WATCHERS = ("**/*.py", "**/*.{cpp,cu,h,cuh}")


def register(ls: AttnLensServer) -> None:
    @ls.feature(T.INITIALIZE)
    def initialize(params: T.InitializeParams) -> None:
        ls.loop = asyncio.get_running_loop()
        textsync.install(ls.workspace)  # LSP line breaks, not str.splitlines (see textsync.py)
        ls.caps = ClientCaps.from_lsp(params.capabilities)
        enc = getattr(ls.workspace, "position_encoding", None) or UTF16
        enc = getattr(enc, "value", enc)
        ls.encoding = {"utf-8": UTF8, "utf-32": UTF32}.get(enc, UTF16)
        opts = params.initialization_options
        ls.init_options = opts if isinstance(opts, dict) else {}
        ls.settings, warnings = config.parse(ls.cli_defaults, ls.init_options)
        for w in warnings:
            ls.warn(w)
        if opts is not None and not isinstance(opts, dict):
            ls.warn("AttnLens: initializationOptions must be an object; using the defaults")
        ls.root_hint = _root_from(params)
        _apply_log_level(ls.settings.log_level)
        if params.process_id:
            ls.spawn(_watch_parent(ls, params.process_id))

    @ls.feature(T.INITIALIZED)
    async def initialized(params: T.InitializedParams) -> None:
        if ls.caps.configuration:
            await pull_configuration(ls)
        await _register_dynamic(ls)
        await start_workspace(ls)

    @ls.feature(T.WORKSPACE_DID_CHANGE_CONFIGURATION)
    async def did_change_configuration(params: T.DidChangeConfigurationParams) -> None:
        if ls.caps.configuration:
            await pull_configuration(ls, restart=True)
        else:
            pushed = params.settings.get("attnlens") if isinstance(params.settings, dict) else None
            await apply_settings(ls, ls.cli_defaults, ls.init_options, pushed, restart=True)

    @ls.feature(T.SHUTDOWN)
    def shutdown(params: None) -> None:
        ls.shutdown_analysis()


async def pull_configuration(ls: AttnLensServer, restart: bool = False) -> None:
    try:
        got = await asyncio.wait_for(
            ls.workspace_configuration_async(T.ConfigurationParams([T.ConfigurationItem(section="attnlens")])), 5)
        section = got[0] if got else None
    except Exception:  # noqa: BLE001 - a client that fails here still gets served
        log.warning("workspace/configuration failed", exc_info=True)
        section = None
    await apply_settings(ls, ls.cli_defaults, ls.init_options, section, restart=restart)


async def apply_settings(ls: AttnLensServer, *layers, restart: bool) -> None:
    new, warnings = config.parse(*layers)
    for w in warnings:
        ls.warn(w)
    old, ls.settings = ls.settings, new
    _apply_log_level(new.log_level)
    for listener in ls.settings_listeners:
        listener(old, new)
    if restart and ls.ready.is_set() and config.needs_restart(old, new):
        await start_workspace(ls)


async def _register_dynamic(ls: AttnLensServer) -> None:
    regs = []
    if ls.caps.watched_files_dynamic:
        regs.append(T.Registration(
            id="attnlens-watched-files", method=T.WORKSPACE_DID_CHANGE_WATCHED_FILES,
            register_options=T.DidChangeWatchedFilesRegistrationOptions(
                watchers=[T.FileSystemWatcher(glob_pattern=g) for g in WATCHERS])))
    if ls.caps.configuration_dynamic:
        regs.append(T.Registration(id="attnlens-configuration", method=T.WORKSPACE_DID_CHANGE_CONFIGURATION,
                                   register_options=T.DidChangeConfigurationRegistrationOptions(section="attnlens")))
    if not regs:
        return
    try:
        await asyncio.wait_for(ls.client_register_capability_async(T.RegistrationParams(regs)), 5)
    except Exception:  # noqa: BLE001
        log.warning("dynamic registration failed", exc_info=True)


def _root_from(params: T.InitializeParams) -> str | None:
    for folder in params.workspace_folders or []:
        p = uri_to_path(folder.uri)
        if p:
            return p
    if params.root_uri:
        return uri_to_path(params.root_uri)
    return params.root_path


async def start_workspace(ls: AttnLensServer) -> None:
    """(Re)build the analysed workspace from the settings, then index it."""
    ls.index_run += 1
    ls.ready.clear()
    s = ls.settings
    root = s.root or ls.root_hint or ls.cli_root
    if root is not None and not os.path.isabs(root) and ls.root_hint:
        root = os.path.join(ls.root_hint, root)

    def build():
        if ls.analysis is not None:
            ls.analysis.q.close()
            ls.analysis = None
        if root is None or not os.path.isdir(root):
            why = f"root {root} is not a folder" if root else "open a folder or set attnlens.root"
            return f"AttnLens: no folder to analyse ({why})"
        if s.subject and s.subject != "worktree":
            ws = _subject_workspace(root, s)
        else:
            ws = Workspace(root, python=s.target_python, cache_dir=s.cache_dir, use_cache=s.use_cache)
        ls.analysis = a = Analysis(ws)
        a.q.start_summary_helper()  # a large cold workspace: a second process parses from the end
        if a.q.target_error:
            return (f"AttnLens: target interpreter unusable ({a.q.target_error}); analysing the workspace alone. "
                    f"Set `attnlens.targetPython` to the Python of the environment where vLLM is installed.")
        return None

    try:
        problem = await ls.worker.run(build)
    except Exception as e:  # noqa: BLE001 - keep serving, with nothing analysed
        log.exception("building the workspace failed")
        problem = f"AttnLens: cannot analyse {root}: {type(e).__name__}: {e}"
    ls.epoch += 1
    ls.hover_cache.clear()
    ls.overlaid.clear()
    ls.ready.set()
    if problem:
        ls.warn(problem)
    if ls.analysis is not None:
        # buffers opened before the workspace existed
        from .documents import sync_open_documents

        sync_open_documents(ls)
        ls.spawn(index_workspace(ls, ls.index_run))


async def index_workspace(ls: AttnLensServer, run: int) -> None:
    """Warm the analysis in small background steps, with $/progress when the client shows it."""
    token = None
    if ls.caps.work_done_progress:
        token = f"attnlens/index/{run}"
        try:
            await asyncio.wait_for(ls.work_done_progress.create_async(token), 5)
        except Exception:  # noqa: BLE001 - no progress UI, still index
            token = None
    if token is not None:
        root = str(ls.analysis.q.root) if ls.analysis else ""
        ls.work_done_progress.begin(token, T.WorkDoneProgressBegin(title="AttnLens: indexing", percentage=0, message=root))
    end_message = "stopped"
    try:
        steps = await ls.call(lambda a: a.indexing_steps(), priority=IDLE)
        while steps is not None and run == ls.index_run:
            try:
                step = await ls.idle(lambda a: next(steps, None))
            except Exception:  # noqa: BLE001 - a core failure must not leave the client waiting
                log.exception("indexing step failed")
                end_message = "indexing failed (see the log); requests are still served"
                break
            if step is None:
                status = await ls.call(Analysis.status, priority=IDLE) or {}
                end_message = f"{status.get('indexedModules', 0)} modules, {status.get('backends') or 0} backends"
                break
            if token is not None:
                ls.work_done_progress.report(token, T.WorkDoneProgressReport(message=step[0], percentage=step[1]))
    finally:
        if token is not None:
            ls.work_done_progress.end(token, T.WorkDoneProgressEnd(message=end_message))
    if run != ls.index_run:
        return
    await ls.settle_memory()
    await ls.send_status()
    await ls.index_call_sites()


async def _watch_parent(ls: AttnLensServer, pid: int) -> None:
    """Exit when the editor that started us is gone (it may not send exit)."""
    while True:
        await asyncio.sleep(PARENT_POLL_S)
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            log.warning("parent process %s is gone; exiting", pid)
            try:
                ls.shutdown_analysis()
            finally:
                os._exit(0)
        except PermissionError:
            pass  # exists, owned by someone else


def _apply_log_level(level: str) -> None:
    logging.getLogger("attnlens").setLevel(getattr(logging, level.upper(), logging.INFO))


def _subject_workspace(root: str, s) -> Workspace:
    """A workspace over the review subject's snapshot (exported into the cache folder)."""
    import argparse

    from ...upgrade.subjects import workspace_for_subject

    args = argparse.Namespace(root=root, python=s.target_python, cache_dir=s.cache_dir, no_cache=not s.use_cache,
                              subject=s.subject)
    return workspace_for_subject(args)
