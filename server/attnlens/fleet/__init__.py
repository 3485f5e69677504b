"""Probe campaigns across a fleet of hosts (``attnlens probe matrix``).

* :mod:`.campaign`: the data model (cells = family, target, options; host specs), TOML loading
  (a campaign file is data, never code) and campaigns built from the workspace (check findings,
  upgrade inventories), deduplicated by (family, resolved target);
* :mod:`.task`: what one cell does on a node (the existing probe agent in the node's target
  interpreter); importable without Ray;
* :mod:`.runner`: the Ray runner (one Ray task per cell, pinned to its node) and the local
  runner (no Ray); the state of a campaign is stored in the workspace cache, so ``--resume``
  runs only the missing or failed cells;
* :mod:`.report`: the matrix (rows = probe cases, columns = hosts) as JSON, Markdown and HTML,
  with the differences between hosts as the headline.

Ray is optional (``pip install attnlens[fleet]``): only :func:`.runner.run_ray` imports it,
inside the function. Nothing here is imported by the language server at start-up, and the
server never imports Ray (it runs ``attnlens probe matrix`` as a subprocess).
"""
