"""Read a native extension (``.so``) without loading it.

For a compiled extension shipped without sources (for example vLLM's
``_C_stable_libtorch.abi3.so`` in site-packages) :func:`scan_extension` reports

* ``mechanism``: how it registers with Python/torch, from the undefined dynamic
  symbols: ``"stable_abi"`` (imports ``aoti_torch_library_init_fragment``,
  ``torch_library_impl``, ...), ``"libtorch"`` (imports ``torch::Library::_def`` /
  ``_impl`` / the ``Library`` constructor), ``"pybind11"``, ``"nanobind"``,
  ``"cpython"`` (only a ``PyInit_`` entry point) or ``"unknown"``;
* ``schemas``: op schema strings found in ``.rodata`` (the section is split at
  NUL bytes first, then each piece is matched against
  ``name[.overload](...) -> ...``; one regex over the whole section backtracks
  for seconds);
* ``namespaces`` (best effort): from the names of the static registration
  functions the ``TORCH_LIBRARY*`` / ``STABLE_TORCH_LIBRARY*`` macros generate
  (``STABLE_TORCH_LIBRARY_IMPL_init__C_cache_ops_CUDA_12``), which survive in
  ``.symtab`` unless the file is stripped; for a stripped file, ``.rodata`` strings
  shaped like vLLM namespaces (``_C``, ``_C_cache_ops``, ``_moe_C``) are used;
* ``registrations``: those blocks as ``"FRAGMENT _C_cache_ops"`` / ``"IMPL
  _C_cache_ops CUDA"`` / ``"LIBRARY _qutlass_C"``;
* ``needed`` (``DT_NEEDED``), ``exported`` (defined ``PyInit_*`` symbols) and
  ``source_files`` (source paths baked in by ``__FILE__``, useful for a
  build-prefix map).

The file is only read (pyelftools parses headers and sections; nothing is
``dlopen``-ed).  pyelftools is optional and imported lazily; without it (or for a
non-ELF file) a raw byte scan still finds schemas and a guess at the mechanism,
and ``error`` says so.  The content hash is a streamed sha256.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["ExtensionInfo", "scan_extension", "find_schema", "SCHEMA_RE"]

SCHEMA_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)?\(.*\) -> .*$")
_MAX_PIECE = 8192

_STABLE_IMPORTS = frozenset(
    {
        "aoti_torch_library_init_fragment",
        "aoti_torch_library_init_impl",
        "aoti_torch_library_init_def",
        "aoti_torch_library_def",
        "aoti_torch_library_impl",
        "torch_library_impl",
    }
)
_LIBTORCH_PREFIXES = ("_ZN5torch7Library4_def", "_ZN5torch7Library5_impl", "_ZN5torch7LibraryC1", "_ZN5torch7LibraryC2")
_REG_RE = re.compile(rb"(?<![A-Za-z_])((?:STABLE_)?TORCH_LIBRARY(?:_FRAGMENT|_IMPL)?_init_)")
_WORD_RE = re.compile(rb"[A-Za-z0-9_]*")
_NS_FALLBACK_RE = re.compile(r"^_(?:[A-Za-z0-9]+_)*C(?:_[A-Za-z0-9]+)*$")
_SRC_RE = re.compile(r"^[^\s\x00]{1,400}/[^\s/]+\.(?:cu|cuh|cpp|cc|cxx|c|h|hpp|hh|inl)$")


@dataclass
class ExtensionInfo:
    path: str
    sha256: str
    size: int
    mechanism: str = "unknown"  # stable_abi | libtorch | pybind11 | nanobind | cpython | unknown
    schemas: list[str] = field(default_factory=list)
    namespaces: list[str] = field(default_factory=list)
    needed: list[str] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)
    error: str | None = None
    registrations: list[str] = field(default_factory=list)
    source_files: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ExtensionInfo":
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in names})


def _sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def _schemas_from(blob: bytes, out: list[str], seen: set[str]) -> None:
    for piece in blob.split(b"\x00"):
        if len(piece) < 7 or len(piece) > _MAX_PIECE or b") -> " not in piece:
            continue
        try:
            s = piece.decode("ascii")
        except UnicodeDecodeError:
            continue
        if SCHEMA_RE.match(s) and s not in seen:
            seen.add(s)
            out.append(s)


def _strings_of(blob: bytes, pattern: re.Pattern[str], limit: int) -> list[str]:
    out: list[str] = []
    seen: set[str] = set()
    for piece in blob.split(b"\x00"):
        if not piece or len(piece) > 512:
            continue
        try:
            s = piece.decode("ascii")
        except UnicodeDecodeError:
            continue
        if s not in seen and pattern.match(s):
            seen.add(s)
            out.append(s)
            if len(out) >= limit:
                break
    return out


def _registrations_from(blob: bytes) -> list[tuple[str, str, str | None]]:
    """(kind, namespace, dispatch key) from mangled/plain names of the static
    functions generated by the registration macros."""
    found: list[tuple[str, str, str | None]] = []
    for m in _REG_RE.finditer(blob):
        s = m.start(1)
        # the identifier runs over word characters; its exact end is fixed by the
        # <length> prefix of the Itanium mangling when there is one
        e = _WORD_RE.match(blob, s).end()  # type: ignore[union-attr]
        digits_end = s
        digits_start = s
        while digits_start > 0 and 0x30 <= blob[digits_start - 1] <= 0x39:
            digits_start -= 1
        ident = None
        if digits_start < digits_end:
            run = blob[digits_start:digits_end].decode()
            for k in range(len(run)):
                ln = int(run[k:])
                if s + len(m.group(1)) < s + ln <= e:
                    ident = blob[s : s + ln].decode("ascii", "replace")
                    break
        if ident is None:
            ident = blob[s:e].decode("ascii", "replace")
        prefix = m.group(1).decode()
        rest = ident[len(prefix):]
        if "_IMPL_" in prefix:
            mm = re.fullmatch(r"(.+)_([A-Za-z0-9]+)_(\d+)", rest)
            if mm:
                found.append(("IMPL", mm.group(1), mm.group(2)))
        elif "_FRAGMENT_" in prefix:
            mm = re.fullmatch(r"(.+)_(\d+)", rest)
            if mm:
                found.append(("FRAGMENT", mm.group(1), None))
        elif rest:
            found.append(("LIBRARY", rest, None))
    return found


def _mechanism(undefined: set[str], defined: set[str], blob_has) -> str:
    if undefined & _STABLE_IMPORTS:
        return "stable_abi"
    if any(u.startswith(_LIBTORCH_PREFIXES) for u in undefined):
        return "libtorch"
    if blob_has(b"pybind11"):
        return "pybind11"
    if blob_has(b"nanobind"):
        return "nanobind"
    if any(d.startswith("PyInit_") for d in defined):
        return "cpython"
    return "unknown"


def scan_extension(path: str | Path) -> ExtensionInfo:
    """Scan a native extension without loading it.  Never raises for a bad file:
    problems are reported in ``error``."""
    p = Path(path)
    info = ExtensionInfo(path=str(p), sha256="", size=0)
    try:
        info.size = p.stat().st_size
        info.sha256 = _sha256_file(p)
    except OSError as exc:
        info.error = f"cannot read: {exc}"
        return info
    try:
        from elftools.common.exceptions import ELFError
        from elftools.elf.elffile import ELFFile
    except ImportError:
        info.error = "pyelftools is not installed: raw byte scan only"
        _raw_scan(p, info)
        return info
    try:
        with open(p, "rb") as f:
            try:
                elf = ELFFile(f)
            except ELFError as exc:
                info.error = f"not an ELF file ({exc}): raw byte scan only"
                _raw_scan(p, info)
                return info
            _elf_scan(elf, info)
    except Exception as exc:  # noqa: BLE001 - truncated/corrupt files
        info.error = f"ELF scan failed: {type(exc).__name__}: {exc}"
    return info


def _elf_scan(elf, info: ExtensionInfo) -> None:
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.sections import SymbolTableSection

    undefined: set[str] = set()
    defined: set[str] = set()
    name_blobs: list[bytes] = []
    seen_schemas: set[str] = set()
    rodata: list[bytes] = []
    for sec in elf.iter_sections():
        name = sec.name
        stype = sec["sh_type"]
        if isinstance(sec, DynamicSection):
            for tag in sec.iter_tags("DT_NEEDED"):
                info.needed.append(tag.needed)
        elif isinstance(sec, SymbolTableSection) and name == ".dynsym":
            for sym in sec.iter_symbols():
                nm = sym.name
                if not nm:
                    continue
                if sym["st_shndx"] == "SHN_UNDEF":
                    undefined.add(nm)
                else:
                    defined.add(nm)
        elif stype == "SHT_STRTAB" and name in (".strtab", ".dynstr"):
            name_blobs.append(sec.data())
        elif stype == "SHT_PROGBITS" and name.startswith(".rodata"):
            rodata.append(sec.data())
    for blob in rodata:
        _schemas_from(blob, info.schemas, seen_schemas)

    def blob_has(needle: bytes) -> bool:
        return any(needle in b for b in name_blobs)

    info.mechanism = _mechanism(undefined, defined, blob_has)
    info.exported = sorted(d for d in defined if d.startswith("PyInit_"))[:8]
    _finish_namespaces(info, name_blobs, rodata)


def _finish_namespaces(info: ExtensionInfo, name_blobs: list[bytes], rodata: list[bytes]) -> None:
    regs: list[tuple[str, str, str | None]] = []
    for blob in name_blobs:
        regs.extend(_registrations_from(blob))
    seen: set[str] = set()
    for kind, ns, key in regs:
        label = f"{kind} {ns}" + (f" {key}" if key else "")
        if label not in seen:
            seen.add(label)
            info.registrations.append(label)
    info.registrations.sort()
    namespaces = sorted({ns for _, ns, _ in regs})
    if not namespaces:
        for blob in rodata:
            namespaces.extend(_strings_of(blob, _NS_FALLBACK_RE, 64))
        namespaces = sorted(set(namespaces))
    info.namespaces = namespaces
    for blob in rodata:
        info.source_files.extend(_strings_of(blob, _SRC_RE, 4000))
    info.source_files = sorted(set(info.source_files))


def _raw_scan(p: Path, info: ExtensionInfo) -> None:
    """Fallback without ELF structure: scan every NUL-separated string of the file."""
    try:
        data = p.read_bytes()
    except OSError as exc:
        info.error = (info.error or "") + f"; cannot read: {exc}"
        return
    _schemas_from(data, info.schemas, set())
    if any(s.encode() in data for s in _STABLE_IMPORTS):
        info.mechanism = "stable_abi"
    elif any(pfx.encode() in data for pfx in _LIBTORCH_PREFIXES):
        info.mechanism = "libtorch"
    elif b"pybind11" in data:
        info.mechanism = "pybind11"
    elif b"nanobind" in data:
        info.mechanism = "nanobind"
    elif b"PyInit_" in data:
        info.mechanism = "cpython"
    info.exported = sorted(set(m.decode() for m in re.findall(rb"PyInit_[A-Za-z0-9_]+", data)))[:8]
    _finish_namespaces(info, [data], [data])


def find_schema(info: ExtensionInfo, opname: str) -> str | None:
    """The schema registered for ``opname`` (``"ns::name"``, ``"name"``,
    ``"name.overload"`` or ``"torch.ops.ns.name[.overload]"``; the namespace is not
    checked, binaries store unqualified schemas).  Without an overload the default
    overload is preferred."""
    q = opname.strip()
    if q.startswith("torch.ops."):
        q = q[len("torch.ops."):].split(".", 1)[-1]
    q = q.rsplit("::", 1)[-1]
    if q.endswith(".default"):
        q = q[: -len(".default")]
    name, _, overload = q.partition(".")
    fallback = None
    for s in info.schemas:
        head = s.split("(", 1)[0]
        h_name, _, h_over = head.partition(".")
        if h_name != name:
            continue
        if h_over == overload:
            return s
        if not overload and fallback is None:
            fallback = s
    return None if overload else fallback
