"""Result types of the analysis (pure data, JSON-serialisable, no LSP types)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

# final target kinds
PYTHON_FUNCTION = "python_function"
PYTHON_CLASS = "python_class"
TORCH_OP = "torch_op"
TRITON_KERNEL = "triton_kernel"
EXTENSION_FUNCTION = "extension_function"
DUMMY = "dummy"
NOT_INSTALLED = "not_installed"
UNRESOLVED = "unresolved"
FINAL_KINDS = (PYTHON_FUNCTION, PYTHON_CLASS, TORCH_OP, TRITON_KERNEL, EXTENSION_FUNCTION, DUMMY, NOT_INSTALLED, UNRESOLVED)
KERNEL_KINDS = (TORCH_OP, TRITON_KERNEL, EXTENSION_FUNCTION)

# hop kinds
HOP_KINDS = (
    "registry", "backend_part", "call", "import", "conditional_import", "lazy_import", "dynamic_import",
    "reexport", "alias", "wrapper", "decorator", "autograd_apply", "patch", "torch_op", "op_registration",
    "triton_launch", "definition", "extension", "dummy", "not_installed", "unresolved", "platform",
)


@dataclass
class Hop:
    kind: str
    path: str
    line: int
    symbol: str
    detail: str = ""
    condition: str | None = None
    reachable: bool | None = None  # value of `condition` under the platform profile
    col: int = 0

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Registration:
    path: str
    line: int
    dispatch_key: str | None
    kind: str = "cpp_impl"  # cpp_def | cpp_impl | python | extension_schema
    function: str | None = None
    function_path: str | None = None
    function_line: int | None = None
    schema: str | None = None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class Final:
    kind: str
    path: str | None
    line: int | None
    symbol: str
    package: str | None = None
    reason: str | None = None
    detail: str = ""
    registrations: list[Registration] = field(default_factory=list)
    schema: str | None = None
    params: list[str] = field(default_factory=list)
    constexprs: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)  # kernels reached inside a multi-call python function
    providers: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        d = asdict(self)
        d["registrations"] = [r.to_json() for r in self.registrations]
        return d


@dataclass
class Chain:
    hops: list[Hop]
    final: Final
    reachable: bool | None
    partial: bool = False
    upstream: dict | None = None  # upstream counterpart of the first resolved symbol, when known

    def to_json(self) -> dict:
        d = {
            "hops": [h.to_json() for h in self.hops],
            "final": self.final.to_json(),
            "reachable": self.reachable,
            "partial": self.partial,
        }
        if self.upstream:
            d["upstream"] = self.upstream
        return d


def combine_reachability(values) -> bool | None:
    vals = list(values)
    if any(v is False for v in vals):
        return False
    if vals and all(v is True for v in vals):
        return True
    if not vals:
        return True
    return None
