"""Evidence records: one JSON file per probe run, ``evidence/<id>.json`` in the cache.

An id is ``<family>-<target>-<UTC timestamp>-<hash8>`` with every character
outside ``[A-Za-z0-9._-]`` replaced, so it is always a safe file name
(:func:`attnlens.cache.is_safe_id`); ids read from anywhere are validated before
they touch the file system.  Writes are atomic (``Cache.store_json`` goes
through ``atomic_write_bytes``).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..cache import Cache, atomic_write_bytes, is_safe_id

SCHEMA = 1
VERDICTS = ("pass", "fail", "inconclusive", "import_error", "crashed", "timeout", "error")
# exit codes for `attnlens probe run`: 0 pass, 1 a failed verdict (a finding about the target), 2 a tool error
EXIT_CODES = {"pass": 0, "fail": 1, "inconclusive": 1, "import_error": 1, "crashed": 1, "timeout": 1, "error": 2}
_ID_MAX = 123  # + ".json" stays within is_safe_id's 128 characters


@dataclass
class EvidenceRecord:
    id: str
    family: str
    target: str
    verdict: str
    created: str
    provider: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)
    cases: list = field(default_factory=list)
    message: str = ""
    device: str = ""
    interpret: bool = False
    options: dict = field(default_factory=dict)
    elapsed_s: float = 0.0
    python: str = ""
    convention: str = ""
    details: dict = field(default_factory=dict)
    schema: int = SCHEMA

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.verdict, 2)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True, default=str)

    @classmethod
    def from_dict(cls, d: dict) -> "EvidenceRecord":
        names = {f.name for f in dataclasses.fields(cls)}
        missing = {"id", "family", "target", "verdict", "created"} - set(d)
        if missing:
            raise ValueError(f"evidence record lacks {sorted(missing)}")
        if not is_safe_id(str(d["id"])):
            raise ValueError(f"unsafe evidence id {d['id']!r}")
        return cls(**{k: v for k, v in d.items() if k in names})

    def summary_line(self) -> str:
        n = len(self.cases)
        ok = sum(1 for c in self.cases if c.get("status") == "pass")
        return f"{self.family} {self.target}: {self.verdict} ({ok}/{n} cases pass) [{self.id}]"


def reason_line(record: dict, limit: int = 200) -> str:
    """Why a probe came out as it did, in one line (for a notification and a list row): the count of
    passing cases, the first failing case and its note, or the message of an import error, crash,
    timeout or tool error."""
    verdict = str(record.get("verdict") or "error")
    cases = [c for c in record.get("cases") or [] if isinstance(c, dict)]
    ok = sum(1 for c in cases if c.get("status") == "pass")
    message = str(record.get("message") or "")
    if verdict == "pass":
        text = f"{ok}/{len(cases)} cases pass"
    elif verdict == "fail" and cases:
        bad = [c for c in cases if c.get("status") not in ("pass", "skip") and c.get("required", True)]
        first = bad[0] if bad else next((c for c in cases if c.get("status") != "pass"), cases[0])
        note = str(first.get("note") or first.get("status") or "").strip()
        text = f"{len(bad)}/{len(cases)} cases fail; {first.get('name', '?')}: {note}"
    elif verdict == "inconclusive":
        note = next((str(c.get("note")) for c in cases if c.get("note")), "")
        text = "every case was skipped" + (f": {note}" if note else "")
    else:
        text = message or verdict
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def utc_stamp(now: _dt.datetime | None = None) -> tuple[str, str]:
    now = now or _dt.datetime.now(_dt.timezone.utc)
    return now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), now.strftime("%Y%m%dT%H%M%S%fZ")


def _slug(s: str, n: int) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "_", s).strip("._-") or "x"
    s = s.replace("..", "_")
    return s[:n].strip("._-") or "x"


def new_id(family: str, target: str, stamp: str, payload: Any = None) -> str:
    h = hashlib.sha256(json.dumps([family, target, stamp, payload], sort_keys=True, default=str).encode())
    fam = _slug(family, 24)
    tail = f"-{stamp}-{h.hexdigest()[:8]}"
    room = _ID_MAX - len(fam) - len(tail) - 1
    tgt = _slug(target, max(8, room))
    rid = f"{fam}-{tgt}{tail}"
    if not rid[0].isalnum():
        rid = "e" + rid
    assert is_safe_id(rid) and len(rid) <= _ID_MAX, rid
    return rid


def validate_id(evidence_id: str) -> str:
    if not isinstance(evidence_id, str) or not is_safe_id(evidence_id) or len(evidence_id) > _ID_MAX:
        raise ValueError(f"invalid evidence id {evidence_id!r} (letters, digits, '.', '_', '-' only)")
    return evidence_id


def write(cache: Cache, record: EvidenceRecord) -> Path | None:
    """Write atomically and durably (temp file, fsync, rename); None when the cache is disabled or unwritable."""
    validate_id(record.id)
    if not cache.enabled:
        return None
    path = cache.path("evidence", f"{record.id}.json")
    data = record.to_json().encode()
    try:
        try:
            atomic_write_bytes(path, data, durable=True)
        except TypeError:  # an atomic_write_bytes without the durable flag
            atomic_write_bytes(path, data)
    except OSError:
        return None
    return path


def read(cache: Cache, evidence_id: str) -> EvidenceRecord | None:
    validate_id(evidence_id)
    d = cache.load_json("evidence", f"{evidence_id}.json")
    if not isinstance(d, dict):
        return None
    try:
        return EvidenceRecord.from_dict(d)
    except (TypeError, ValueError):
        return None


_FOLDER_MEMO: dict = {}  # folder -> (mtime_ns, records): hovers ask often, records change rarely


def list_records(cache: Cache, *, family: str | None = None, target: str | None = None) -> list[EvidenceRecord]:
    """All readable records, oldest first (torn or foreign files are skipped)."""
    if not cache.enabled:
        return []
    folder = cache.folder / "evidence"
    try:
        # an atomic write (rename) changes the folder's mtime; the listing guards against two
        # writes within one timestamp tick
        stamp = (folder.stat().st_mtime_ns, tuple(sorted(os.listdir(folder))))
    except OSError:
        return []
    hit = _FOLDER_MEMO.get(str(folder))
    if hit is None or hit[0] != stamp:
        hit = (stamp, _read_folder(folder))
        _FOLDER_MEMO[str(folder)] = hit
    return [r for r in hit[1] if (not family or r.family == family) and (not target or r.target == target)]


def _read_folder(folder) -> list[EvidenceRecord]:
    out = []
    for p in folder.glob("*.json"):
        if p.name.startswith(".") or not is_safe_id(p.name):
            continue
        try:
            d = json.loads(p.read_bytes())
            rec = EvidenceRecord.from_dict(d)
        except (OSError, ValueError, TypeError):
            continue
        out.append(rec)
    out.sort(key=lambda r: (r.created, r.id))
    return out


def latest_for_target(cache: Cache, target: str, family: str | None = None) -> EvidenceRecord | None:
    recs = list_records(cache, family=family, target=target)
    return recs[-1] if recs else None
