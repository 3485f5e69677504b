"""The AttnLens language server (pygls 2): thin adapters over :class:`attnlens.query.Query`.

Every question of the analysis core goes through the workspace's query (``Analysis.q``); nothing
here imports the resolver, registry, index or other core modules behind it (the ``lsp-cli-through-query``
contract in ``.importlinter``).

Layout
------
``server.py``        the server object: session state, the worker hop, background refresh
``features/``        one module per LSP surface (lifecycle, documents, hover, navigation,
                     call_hierarchy, symbols, commands, diagnostics), each ``register(server)``
``analysis.py``      what features ask of the core, plus the server's caches (no LSP types);
                     ``calls.py`` (call hierarchy, call-site index) and ``symbol_table.py``
                     are mixed in; ``records.py`` holds the plain records they return
``hover.py``         hover *sections*: an ordered list of providers per server (extension point)
``request.py``       the frozen request a worker function gets (settings, encoding, document version)
``convert.py``       URIs and positions at the edge (UTF-16/UTF-8/UTF-32 <-> code points)
``config.py``        typed settings with defaults; invalid values warn and fall back
``worker.py``        the single analysis thread (priorities, cancellation) and debouncing
``cli_cmds.py``      ``attnlens serve`` (stdio, or ``--tcp HOST:PORT``)

Threading and state ownership
-----------------------------
The asyncio loop thread reads and writes LSP messages and owns the session
(settings, open documents, the exact-position hover cache). All analysis
objects (index, resolver, chain/backend/symbol caches) live on ONE worker
thread: handlers ``await server.call(fn, ...)``, and document changes are
queued on the same thread in arrival order, so a request sees every edit
sent before it. Background indexing runs in small low-priority steps that
requests overtake. A ``$/cancelRequest`` cancels the handler task: a queued
job is dropped, a running one finishes and its result is discarded.
"""
