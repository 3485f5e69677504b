"""Plain records the analysis layer hands to the features (no LSP types)."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .. import model as M
from ..workspace import CallRef


class LRU(OrderedDict):
    def __init__(self, size: int):
        super().__init__()
        self.size = size

    def get(self, key, default=None):  # type: ignore[override]
        if key in self:
            self.move_to_end(key)
            return self[key]
        return default

    def put(self, key, value) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)


@dataclass(frozen=True)
class DefRef:
    """A class or function definition of an analysed module."""

    kind: str  # function | method | class | triton
    module: str
    qual: str
    name: str
    path: str
    line: int  # the def/class line
    col: int  # name start (code points)
    end_col: int
    deco_line: int
    end_line: int
    detail: str = ""

    @property
    def dotted(self) -> str:
        return f"{self.module}.{self.qual}"


@dataclass
class Resolved:
    """The call or name under a position and its chain."""

    ref: CallRef
    chain: M.Chain


@dataclass(frozen=True)
class Sym:
    """One workspace symbol."""

    name: str
    kind: str  # class | method | function | triton | backend | op
    container: str
    path: str
    line: int
    col: int = 0
    detail: str = ""


@dataclass
class Item:
    """A call hierarchy node: a definition, or the final target of a chain."""

    name: str
    kind: str  # function | method | class | triton | torch_op | cpp | module | not_installed | dummy | ...
    detail: str
    path: str
    line: int
    col: int
    end_col: int
    first_line: int  # full range start (decorators included)
    end_line: int
    data: dict

    def key(self) -> tuple:
        return (self.path, self.line, self.name)
