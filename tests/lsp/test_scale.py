"""Issue 13: a large workspace. Hovers are answered while the background indexing runs (it goes
in small steps at background priority), and the call-site index of a workspace above
``CALLSITES_EAGER_MAX_MODULES`` modules waits for the first request that needs it."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

from lsprotocol import types as T

from attnlens.lsp.server import CALLSITES_EAGER_MAX_MODULES

from .conftest import EXAMPLE, position_of, readme_text, start_session, stop_session


def big_workspace(tmp: Path, extra_modules: int) -> Path:
    root = tmp / "ws"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    bulk = root / "mini_metax" / "bulk"
    bulk.mkdir()
    (bulk / "__init__.py").write_text("")
    for i in range(extra_modules):
        (bulk / f"m{i:04d}.py").write_text(
            "from mini_metax import _custom_ops as ops\n\n\n"
            + "".join(f"def f{i}_{j}(x, y):\n    return ops.reshape_and_cache_flash(x, y, x, y)\n\n\n" for j in range(4)))
    return root


async def test_hovers_answered_while_indexing_a_large_workspace(tmp_path):
    root = big_workspace(tmp_path, CALLSITES_EAGER_MAX_MODULES + 50)
    path, text = readme_text("upstream op served by the plugin's extension (call)")
    path = root / path.relative_to(EXAMPLE)
    session = await start_session(tmp_path / "big", root=root)
    try:
        session.open(path)
        pos = position_of(path, text)
        answered_before_indexed = 0
        texts = []
        for _ in range(40):
            texts.append(await session.hover_text(path, pos))
            if not session.status_event.is_set():
                answered_before_indexed += 1
            if session.status_event.is_set() and len(texts) >= 3:
                break
            await asyncio.sleep(0.02)
        assert all("_C_cache_ops::reshape_and_cache_flash" in t or "partial" in t for t in texts), texts[0][:400]
        assert answered_before_indexed >= 1, "no hover was answered while the workspace was being indexed"
        status = await session.wait_indexed(timeout=300)
        for _ in range(100):  # a partial answer is completed in the background once requests pause
            final = await session.hover_text(path, pos)
            if "_C_cache_ops::reshape_and_cache_flash" in final:
                break
            await asyncio.sleep(0.5)
        assert "_C_cache_ops::reshape_and_cache_flash" in final
        assert status["indexedModules"] > CALLSITES_EAGER_MAX_MODULES
        ex = session.client.workspace_execute_command_async
        for _ in range(200):
            st = await ex(T.ExecuteCommandParams(command="attnlens.status"))
            if st.get("callSitesIndex") == "on demand":
                break
            await asyncio.sleep(0.1)
        assert st.get("callSitesIndex") == "on demand" and st.get("callSitesIndexed") is None
    finally:
        await stop_session(session)
