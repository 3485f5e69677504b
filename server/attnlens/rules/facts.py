"""Expression-level facts the rules need and the cached summaries leave out.

One ``ast.parse`` + ``tokenize`` pass per module (only when its findings are
not cached): comments, full docstrings, ``view``/``reshape`` calls,
device-capability uses with the branch they decide, ``super().x`` uses,
assert/if tests (for "visible guard" questions). Positions follow the core:
1-based lines, 0-based code-point columns.
"""

from __future__ import annotations

import ast
import io
import tokenize
from dataclasses import dataclass, field

CAP_METHODS = ("is_device_capability_family", "has_device_capability", "is_device_capability")
CAP_GETTERS = ("get_device_capability",)


@dataclass
class Comment:
    line: int
    col: int
    text: str  # without the leading '#'
    own_line: bool  # nothing but whitespace before it


@dataclass
class Doc:
    qualname: str  # function/class qualname ('' for the module)
    kind: str  # function | class | module
    line: int  # first line of the docstring literal
    end_line: int
    text: str


@dataclass
class Branch:
    """The statement or expression a capability use decides."""

    kind: str  # if | while | ifexp | return | assign | assert | expr | other
    line: int
    test: str
    body: tuple = ()  # (first, last) line of the body
    orelse: tuple = ()  # (first, last) line of the else branch ('' when none)
    when_true: bool | None = None  # value of the test if the use evaluates to True (None: undecided)
    when_false: bool | None = None


@dataclass
class CapUse:
    kind: str  # call | compare | param_compare
    method: str  # is_device_capability_family | has_device_capability | is_device_capability | get_device_capability
    base: str  # receiver dotted text ('current_platform'); '' for a parameter
    args: tuple
    line: int
    col: int
    end_line: int
    end_col: int
    text: str
    scope: str
    branch: Branch | None = None


@dataclass
class ShapeCall:
    method: str  # view | reshape | unflatten
    receiver: str  # source text of the receiver
    root: str  # the receiver's root name
    args: tuple  # source texts of the positional arguments
    line: int
    col: int
    end_line: int
    end_col: int
    scope: str


@dataclass
class SuperUse:
    name: str
    line: int
    col: int
    end_line: int
    end_col: int
    scope: str
    is_call: bool


@dataclass
class Test:
    kind: str  # if | assert | while | ifexp
    line: int
    text: str
    scope: str
    body: tuple = ()


@dataclass
class AstFacts:
    comments: list = field(default_factory=list)
    docs: list = field(default_factory=list)
    caps: list = field(default_factory=list)
    shapes: list = field(default_factory=list)
    supers: list = field(default_factory=list)
    tests: list = field(default_factory=list)
    lines: list = field(default_factory=list)
    error: str | None = None


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


class _Cols:
    def __init__(self, lines: list[str]):
        self.lines = lines

    def cp(self, line: int, byte_col: int) -> int:
        if line < 1 or line > len(self.lines):
            return byte_col
        s = self.lines[line - 1]
        if s.isascii():
            return byte_col
        return len(s.encode("utf-8")[:byte_col].decode("utf-8", "replace"))


def _eval3(node, target, value):
    """Three-valued value of a boolean expression when ``target`` is ``value`` and
    every other leaf is unknown."""
    if node is target:
        return value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        v = _eval3(node.operand, target, value)
        return None if v is None else (not v)
    if isinstance(node, ast.BoolOp):
        vals = [_eval3(v, target, value) for v in node.values]
        if isinstance(node.op, ast.And):
            if any(v is False for v in vals):
                return False
            return True if all(v is True for v in vals) else None
        if any(v is True for v in vals):
            return True
        return False if all(v is False for v in vals) else None
    if isinstance(node, ast.Constant):
        return bool(node.value)
    return None


def _span(stmts) -> tuple:
    if not stmts:
        return ()
    first = stmts[0]
    last = stmts[-1]
    return (getattr(first, "lineno", 0), getattr(last, "end_lineno", getattr(last, "lineno", 0)))


class _Walker(ast.NodeVisitor):
    def __init__(self, facts: AstFacts, src: str, cols: _Cols):
        self.f = facts
        self.src = src
        self.cols = cols
        self.qual: list[str] = []
        self.func_stack: list[str] = []
        self.parents: dict = {}
        # name -> scope -> line where assigned from get_device_capability()
        self.cap_vars: dict = {}
        self.params: list[set] = []

    def seg(self, node) -> str:
        s = ast.get_source_segment(self.src, node) or ""
        return " ".join(s.split())

    def scope(self) -> str:
        return ".".join(self.qual) if self.func_stack else ""

    def pos(self, node):
        l0 = node.lineno
        c0 = self.cols.cp(l0, node.col_offset)
        l1 = getattr(node, "end_lineno", l0) or l0
        c1 = self.cols.cp(l1, getattr(node, "end_col_offset", node.col_offset) or node.col_offset)
        return l0, c0, l1, c1

    # -- definitions -------------------------------------------------------
    def _doc(self, node, kind: str, qual: str) -> None:
        body = getattr(node, "body", [])
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            d = body[0].value
            self.f.docs.append(Doc(qual, kind, d.lineno, d.end_lineno or d.lineno, d.value))

    def visit_Module(self, node):
        self._doc(node, "module", "")
        self.generic_visit(node)

    def _func(self, node):
        self.qual.append(node.name)
        q = ".".join(self.qual)
        self._doc(node, "function", q)
        for d in node.decorator_list:
            self.visit(d)
        for dflt in list(node.args.defaults) + [x for x in node.args.kw_defaults if x is not None]:
            self.visit(dflt)
        self.func_stack.append(q)
        a = node.args
        self.params.append({p.arg for p in list(a.posonlyargs) + list(a.args) + list(a.kwonlyargs)})
        for st in node.body:
            self.visit(st)
        self.params.pop()
        self.func_stack.pop()
        self.qual.pop()

    visit_FunctionDef = _func
    visit_AsyncFunctionDef = _func

    def visit_ClassDef(self, node):
        for d in node.decorator_list:
            self.visit(d)
        for b in node.bases:
            self.visit(b)
        self.qual.append(node.name)
        self._doc(node, "class", ".".join(self.qual))
        saved_f, saved_p = self.func_stack, self.params
        self.func_stack, self.params = [], []
        for st in node.body:
            self.visit(st)
        self.func_stack, self.params = saved_f, saved_p
        self.qual.pop()

    # -- tests -------------------------------------------------------------
    def visit_If(self, node):
        self.f.tests.append(Test("if", node.lineno, self.seg(node.test), self.scope(), _span(node.body)))
        self._mark_parent(node.test, node)
        self.generic_visit(node)

    def visit_While(self, node):
        self.f.tests.append(Test("while", node.lineno, self.seg(node.test), self.scope(), _span(node.body)))
        self._mark_parent(node.test, node)
        self.generic_visit(node)

    def visit_Assert(self, node):
        self.f.tests.append(Test("assert", node.lineno, self.seg(node.test), self.scope()))
        self._mark_parent(node.test, node)
        self.generic_visit(node)

    def visit_IfExp(self, node):
        self.f.tests.append(Test("ifexp", node.lineno, self.seg(node.test), self.scope()))
        self._mark_parent(node.test, node)
        self.generic_visit(node)

    def visit_Return(self, node):
        if node.value is not None:
            self._mark_parent(node.value, node)
        self.generic_visit(node)

    def visit_Assign(self, node):
        self._mark_parent(node.value, node)
        # cap = current_platform.get_device_capability()
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            call = self._cap_getter_call(node.value)
            if call is not None:
                self.cap_vars.setdefault(node.targets[0].id, {})[self.scope()] = (node.lineno, _dotted(call.func.value) or "")  # type: ignore[attr-defined]
        self.generic_visit(node)

    def visit_AnnAssign(self, node):
        if node.value is not None:
            self._mark_parent(node.value, node)
            if isinstance(node.target, ast.Name):
                call = self._cap_getter_call(node.value)
                if call is not None:
                    self.cap_vars.setdefault(node.target.id, {})[self.scope()] = (node.lineno, _dotted(call.func.value) or "")  # type: ignore[attr-defined]
        self.generic_visit(node)

    def _mark_parent(self, expr, stmt) -> None:
        """Remember which statement owns each node of a test/value expression."""
        for n in ast.walk(expr):
            self.parents[id(n)] = (expr, stmt)

    @staticmethod
    def _cap_getter_call(node):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CAP_GETTERS:
            return node
        return None

    # -- expressions -------------------------------------------------------
    def visit_Call(self, node):
        f = node.func
        if isinstance(f, ast.Attribute):
            name = f.attr
            if name in CAP_METHODS:
                l0, c0, l1, c1 = self.pos(node)
                self.f.caps.append(CapUse("call", name, _dotted(f.value) or "", tuple(self.seg(a) for a in node.args),
                                          l0, c0, l1, c1, self.seg(node), self.scope(), self._branch(node)))
            if name in ("view", "reshape", "unflatten") and node.args:
                l0, c0, l1, c1 = self.pos(node)
                root = f.value
                while isinstance(root, (ast.Attribute, ast.Subscript, ast.Call)):
                    root = root.value if not isinstance(root, ast.Call) else root.func
                rname = root.id if isinstance(root, ast.Name) else ""
                args: tuple
                if name == "unflatten" and len(node.args) >= 2 and isinstance(node.args[1], (ast.Tuple, ast.List)):
                    args = tuple(self.seg(a) for a in node.args[1].elts) if self.seg(node.args[0]) in ("0", "-0") else ()
                else:
                    args = tuple(self.seg(a) for a in node.args)
                    if len(node.args) == 1 and isinstance(node.args[0], (ast.Tuple, ast.List)):
                        args = tuple(self.seg(a) for a in node.args[0].elts)
                if args:
                    self.f.shapes.append(ShapeCall(name, self.seg(f.value), rname, args, l0, c0, l1, c1, self.scope()))
            if isinstance(f.value, ast.Call) and isinstance(f.value.func, ast.Name) and f.value.func.id == "super":
                l0, c0, l1, c1 = self.pos(f)
                self.f.supers.append(SuperUse(name, l0, c0, l1, c1, self.scope(), True))
        self.generic_visit(node)

    def visit_Attribute(self, node):
        v = node.value
        if isinstance(v, ast.Call) and isinstance(v.func, ast.Name) and v.func.id == "super" and id(node) not in self._call_funcs:
            l0, c0, l1, c1 = self.pos(node)
            self.f.supers.append(SuperUse(node.attr, l0, c0, l1, c1, self.scope(), False))
        self.generic_visit(node)

    _call_funcs: set = set()

    def visit_Compare(self, node):
        operands = [node.left] + list(node.comparators)
        hit = None
        for o in operands:
            base = o
            # cap.major / cap[0] / cap.to_int() / get_device_capability()
            while True:
                if isinstance(base, ast.Call) and isinstance(base.func, ast.Attribute) and base.func.attr == "to_int":
                    base = base.func.value
                elif isinstance(base, (ast.Attribute,)) and base.attr in ("major", "minor"):
                    base = base.value
                elif isinstance(base, ast.Subscript):
                    base = base.value
                else:
                    break
            call = self._cap_getter_call(base)
            if call is not None:
                hit = ("compare", _dotted(call.func.value) or "")  # type: ignore[attr-defined]
                break
            if isinstance(base, ast.Name):
                sc = self.cap_vars.get(base.id, {})
                if self.scope() in sc:
                    hit = ("compare", sc[self.scope()][1])
                    break
                if base.id in ("capability", "device_capability") and self.params and base.id in self.params[-1] and self.qual and self.qual[-1] == "supports_compute_capability":
                    hit = ("param_compare", "")
                    break
        if hit is not None:
            l0, c0, l1, c1 = self.pos(node)
            others = tuple(self.seg(o) for o in operands)
            self.f.caps.append(CapUse(hit[0], "get_device_capability", hit[1], others, l0, c0, l1, c1, self.seg(node),
                                      self.scope(), self._branch(node)))
        self.generic_visit(node)

    def _branch(self, node) -> Branch | None:
        owner = self.parents.get(id(node))
        if owner is None:
            return None
        expr, stmt = owner
        t = _eval3(expr, node, True)
        f = _eval3(expr, node, False)
        test = self.seg(expr)
        if isinstance(stmt, ast.If):
            return Branch("if", stmt.lineno, test, _span(stmt.body), _span(stmt.orelse), t, f)
        if isinstance(stmt, ast.While):
            return Branch("while", stmt.lineno, test, _span(stmt.body), (), t, f)
        if isinstance(stmt, ast.IfExp):
            return Branch("ifexp", stmt.lineno, test, (stmt.body.lineno, stmt.body.end_lineno or stmt.body.lineno),
                          (stmt.orelse.lineno, stmt.orelse.end_lineno or stmt.orelse.lineno), t, f)
        if isinstance(stmt, ast.Return):
            return Branch("return", stmt.lineno, test, (), (), t, f)
        if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
            return Branch("assign", stmt.lineno, test, (), (), t, f)
        if isinstance(stmt, ast.Assert):
            return Branch("assert", stmt.lineno, test, (), (), t, f)
        return Branch("other", getattr(stmt, "lineno", 0), test, (), (), t, f)


def collect(text: str) -> AstFacts:
    facts = AstFacts()
    facts.lines = text.splitlines()
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        facts.error = f"{type(e).__name__}: {e}"
        return facts
    # comments
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type == tokenize.COMMENT:
                line, col = tok.start
                before = facts.lines[line - 1][:col] if line - 1 < len(facts.lines) else ""
                facts.comments.append(Comment(line, col, tok.string[1:].strip(), not before.strip()))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        pass
    w = _Walker(facts, text, _Cols(facts.lines))
    # attributes that are the func of a call (super().x(...) is recorded as a call)
    w._call_funcs = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    try:
        w.visit(tree)
    except RecursionError:
        facts.error = "expression nesting too deep"
    return facts
