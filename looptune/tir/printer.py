"""Readable Python-like text for IR nodes: `func.script()`, `repr(expr)`, `repr(stmt)`."""
from __future__ import annotations

from .buffer import Buffer
from .expr import (CMP_OPS, Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Not,
                   Ramp, Reduce, Select, Var)
from .stmt import (Allocate, Block, BlockRealize, BufferRegion, BufferStore, Comment, Evaluate, For,
                   IfThenElse, SeqStmt)

_PREC = {"or": 1, "and": 2, "==": 4, "!=": 4, "<": 4, "<=": 4, ">": 4, ">=": 4,
         "+": 6, "-": 6, "*": 7, "/": 7, "//": 7, "%": 7}


class Names:
    """Gives each Var / Buffer a unique printable name (suffixing clashes); `clean`, if given,
    rewrites each name first (clashes are resolved after it, so they stay unique)."""

    def __init__(self, clean=None):
        self.names: dict = {}
        self.used: set = set()
        self.clean = clean

    def __call__(self, obj) -> str:
        n = self.names.get(obj)
        if n is None:
            base = obj.name or "v"
            if self.clean is not None:
                base = self.clean(base)
            n, i = base, 1
            while n in self.used:
                n = f"{base}_{i}"
                i += 1
            self.names[obj] = n
            self.used.add(n)
        return n


class Printer:
    """Renders IR nodes as text (`func.script()`, repr); its Names give every Var and Buffer one
    unique name within one printout."""

    def __init__(self, names: Names | None = None):
        self.name = names or Names()
        self.lines: list[str] = []

    # ------------------------------------------------------------------ expressions
    def expr(self, e, prec: int = 0) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value) if e.dtype == "int32" else f"{e.dtype}({e.value})"
        if isinstance(e, FloatImm):
            return repr(e.value) if e.dtype == "float32" else f"{e.dtype}({e.value!r})"
        if isinstance(e, Binary):
            op = e.op
            if op in ("min", "max", "tdiv", "tmod"):
                return f"{op}({self.expr(e.a)}, {self.expr(e.b)})"
            p = _PREC[op]
            # Python chains comparisons (a < b == c), so a comparison operand is parenthesised
            lp = p + 1 if op in CMP_OPS else p
            s = f"{self.expr(e.a, lp)} {op} {self.expr(e.b, p + 1)}"
            return f"({s})" if p < prec else s
        if isinstance(e, Not):
            s = f"not {self.expr(e.a, 3)}"
            return f"({s})" if prec > 3 else s
        if isinstance(e, BufferLoad):
            return f"{self.name(e.buffer)}[{', '.join(self.expr(i) for i in e.indices)}]"
        if isinstance(e, Cast):
            return f"{e.dtype}({self.expr(e.value)})"
        if isinstance(e, Call):
            return f"{e.op}({', '.join(self.expr(a) for a in e.args)})"
        if isinstance(e, Select):
            return (f"select({self.expr(e.cond)}, {self.expr(e.true_value)}, "
                    f"{self.expr(e.false_value)})")
        if isinstance(e, Ramp):
            return f"ramp({self.expr(e.base)}, {e.stride}, {e.lanes})"
        if isinstance(e, Broadcast):
            return f"broadcast({self.expr(e.value)}, {e.lanes})"
        if isinstance(e, Reduce):
            axes = ", ".join(self.name(iv.var) for iv in e.axis)
            return f"{e.combiner}({self.expr(e.source)}, axis=[{axes}])"
        return repr(e)

    def region(self, r: BufferRegion) -> str:
        parts = []
        for mn, ext in r.region:
            m = self.expr(mn)
            parts.append(m if ext == 1 else f"{m}:{self.expr(mn + ext, 6)}")
        return f"{self.name(r.buffer)}[{', '.join(parts)}]"

    # ------------------------------------------------------------------ statements
    def emit(self, depth: int, text: str):
        self.lines.append("    " * depth + text)

    def stmt(self, s, depth: int):
        if isinstance(s, SeqStmt):
            if not s.stmts:
                self.emit(depth, "pass")
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, For):
            kind = "range" if s.kind == "serial" else s.kind
            if s.kind == "thread_binding":
                kind = f"thread_binding[{s.thread}]"
            ann = "".join(f"  # {k}={v}" for k, v in s.annotations)
            self.emit(depth, f"for {self.name(s.loop_var)} in {kind}({s.extent}):{ann}")
            self.stmt(s.body, depth + 1)
        elif isinstance(s, BlockRealize):
            self.block_realize(s, depth)
        elif isinstance(s, BufferStore):
            idx = ", ".join(self.expr(i) for i in s.indices)
            self.emit(depth, f"{self.name(s.buffer)}[{idx}] = {self.expr(s.value)}")
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if {self.expr(s.cond)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif isinstance(s, Allocate):
            b = s.buffer
            self.emit(depth, f"{self.name(b)} = alloc({list(b.shape)}, {b.dtype!r}, scope={b.scope!r})")
            self.stmt(s.body, depth)
        elif isinstance(s, Evaluate):
            self.emit(depth, self.expr(s.value))
        elif isinstance(s, Comment):
            self.emit(depth, f"# {s.text}")
        elif isinstance(s, Block):
            self.block(s, (), None, depth)
        else:
            self.emit(depth, repr(s))

    def block_realize(self, br: BlockRealize, depth: int):
        self.block(br.block, br.iter_values, br.predicate, depth)

    def block(self, b: Block, values, predicate, depth: int):
        binds = []
        for i, iv in enumerate(b.iter_vars):
            v = f", {self.expr(values[i])}" if i < len(values) else ""
            binds.append(f"{self.name(iv.var)}={iv.kind}({iv.extent}{v})")
        self.emit(depth, f"block {b.name}({', '.join(binds)}):")
        d = depth + 1
        if predicate is not None and not (isinstance(predicate, IntImm) and predicate.value):
            self.emit(d, f"where {self.expr(predicate)}")
        if b.reads:
            self.emit(d, "reads " + ", ".join(self.region(r) for r in b.reads))
        if b.writes:
            self.emit(d, "writes " + ", ".join(self.region(r) for r in b.writes))
        for k, v in b.annotations:
            self.emit(d, f"annotate {k}={v!r}")
        for buf in b.alloc_buffers:
            self.emit(d, f"{self.name(buf)} = alloc({list(buf.shape)}, {buf.dtype!r}, "
                         f"scope={buf.scope!r})")
        if b.init is not None:
            self.emit(d, "init:")
            self.stmt(b.init, d + 1)
        self.stmt(b.body, d)

    def func(self, f) -> str:
        params = ", ".join(f"{self.name(b)}: {b.dtype}{list(b.shape)}" for b in f.params)
        self.emit(0, f"def {f.name}({params}):")
        self.stmt(f.body, 1)
        return "\n".join(self.lines)


def expr_str(e) -> str:
    return Printer().expr(e)


def region_str(r) -> str:
    return Printer().region(r)


def stmt_str(s) -> str:
    p = Printer()
    p.stmt(s, 0)
    return "\n".join(p.lines)


def func_str(f) -> str:
    return Printer().func(f)


def buffer_str(b: Buffer) -> str:
    return f"{b.name}: {b.dtype}{list(b.shape)}"
