"""The upgrade workflow: upstream versions, two-version drift, subjects and the inventory.

* :mod:`.upstream`  an older (or newer) vLLM as a folder of sources: a path, or a
  version fetched with ``pip download`` on explicit request and unpacked into the cache;
* :mod:`.mapping`   plugin symbol -> upstream counterpart (registry, same module path,
  name, base class, or an explicit ``upstream-map``);
* :mod:`.drift`     what changed upstream between two versions for every plugin symbol
  in scope, classified (``changed_upstream``, ``retained_adaptation``, ``new_hook``,
  ``removed_upstream``, ``unchanged``), as findings (``AL3xx``) and hover notes;
* :mod:`.subjects`  which code is analysed: working tree, staged index, a revision, or
  the installed release;
* :mod:`.inventory` one record per file in scope with registrations, callers,
  counterpart, differences with their stated reason, findings, evidence and an action.

Everything here is pure analysis: nothing imports the analysed code, and the only
place anything is written is the cache folder.
"""

DIAGNOSTIC_SOURCE = "attnlens-drift"
