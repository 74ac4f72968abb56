"""The reference interpreter: runs a PrimFunc (scheduled or not, lowered or not) on numpy
arrays by turning it into Python source. Slow, obvious and independent of codegen, so tests
can check schedules and lowering passes without a C compiler. Intermediate buffers start as
NaN (or a large sentinel for integers) so reads of unwritten data show up."""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import dtype as dt
from .buffer import Buffer
from .expr import (Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Not, Ramp,
                   Select, Var)
from .func import PrimFunc
from .printer import Names
from .stmt import (Allocate, Block, BlockRealize, BufferStore, Comment, Evaluate, For, IfThenElse,
                   SeqStmt)

_PY_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "//": "//", "%": "%", "==": "==", "!=": "!=",
           "<": "<", "<=": "<=", ">": ">", ">=": ">=", "and": "and", "or": "or"}

_CALLS = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sqrt": "np.sqrt({0})",
    "rsqrt": "(1 / np.sqrt({0}))", "tanh": "np.tanh({0})", "erf": "_erf({0})",
    "sigmoid": "(1 / (1 + np.exp(-{0})))", "pow": "np.power({0}, {1})", "floor": "np.floor({0})",
    "ceil": "np.ceil({0})", "abs": "abs({0})", "sin": "np.sin({0})", "cos": "np.cos({0})",
    "round": "np.round({0})",
}


class _PyGen:
    def __init__(self):
        self.names = Names(clean=_identifier)
        self.lines: list[str] = []
        self.consts: dict = {}

    def name(self, obj) -> str:
        return self.names(obj)

    def emit(self, depth, text):
        self.lines.append("    " * depth + text)

    def index(self, indices) -> str:
        """A numpy index: "i, j," (a tuple, even of one), or "()" for a 0-d buffer."""
        return "".join(f"{self.expr(i)}, " for i in indices).rstrip() or "()"

    def expr(self, e) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "True" if e.value else "False"
            return str(e.value)
        if isinstance(e, FloatImm):
            v = e.value
            text = repr(v) if math.isfinite(v) else f"float('{v}')"  # inf, -inf, nan
            return f"np.{dt.numpy_name(e.dtype)}({text})"
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"{e.op}({a}, {b})"
            if e.op == "tdiv":
                return f"_tdiv({a}, {b})"
            if e.op == "tmod":
                return f"_tmod({a}, {b})"
            if e.op == "/":
                return f"_fdiv({a}, {b})"
            return f"({a} {_PY_OPS[e.op]} {b})"
        if isinstance(e, Not):
            return f"(not {self.expr(e.a)})"
        if isinstance(e, BufferLoad):
            return f"{self.name(e.buffer)}[{self.index(e.indices)}]"
        if isinstance(e, Cast):
            return f"_cast_{dt.numpy_name(e.dtype)}({self.expr(e.value)})"
        if isinstance(e, Select):
            return f"({self.expr(e.true_value)} if {self.expr(e.cond)} else {self.expr(e.false_value)})"
        if isinstance(e, Call):
            return f"np.{dt.numpy_name(e.dtype)}(" + _CALLS[e.op].format(*(self.expr(a) for a in e.args)) + ")"
        if isinstance(e, (Ramp, Broadcast)):
            raise NotImplementedError("the interpreter runs scalar IR; interpret before vectorizing")
        raise TypeError(f"interpreter: unsupported expression {e!r}")

    def stmt(self, s, depth):
        if isinstance(s, SeqStmt):
            if not s.stmts:  # seq() of nothing, e.g. a loop whose body was pruned away
                self.emit(depth, "pass")
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, For):
            # a perfect chain of loops is one Python loop (Python allows only 20 nested blocks)
            chain = [s]
            while isinstance(chain[-1].body, For):
                chain.append(chain[-1].body)
            if len(chain) == 1:
                self.emit(depth, f"for {self.name(s.loop_var)} in range({s.extent}):")
            else:
                names = ", ".join(self.name(x.loop_var) for x in chain)
                ranges = ", ".join(f"range({x.extent})" for x in chain)
                self.emit(depth, f"for {names} in _product({ranges}):")
            self.stmt(chain[-1].body, depth + 1)
        elif isinstance(s, BufferStore):
            self.emit(depth, f"{self.name(s.buffer)}[{self.index(s.indices)}] = "
                             f"{self.expr(s.value)}")
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if {self.expr(s.cond)}:")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "else:")
                self.stmt(s.else_case, depth + 1)
        elif isinstance(s, Allocate):
            self.alloc(s.buffer, depth)
            self.stmt(s.body, depth)
        elif isinstance(s, BlockRealize):
            self.realize(s, depth)
        elif isinstance(s, (Evaluate, Comment)):
            self.emit(depth, "pass")
        else:
            raise TypeError(f"interpreter: unsupported statement {type(s).__name__}")

    def alloc(self, b: Buffer, depth):
        fill = "np.nan" if dt.is_float(b.dtype) else "-12345"
        npd = dt.numpy_name(b.dtype)
        if b.strides is None and not b.align:
            self.emit(depth, f"{self.name(b)} = np.full({b.shape}, {fill}, dtype=np.{npd})")
        else:
            item = np.dtype(npd).itemsize
            strides = tuple(st * item for st in b.layout_strides())
            self.emit(depth, f"{self.name(b)} = np.lib.stride_tricks.as_strided("
                             f"np.full({b.size}, {fill}, dtype=np.{npd}), {b.shape}, {strides})")

    def realize(self, br: BlockRealize, depth):
        b: Block = br.block
        for iv, v in zip(b.iter_vars, br.iter_values):
            self.emit(depth, f"{self.name(iv.var)} = {self.expr(v)}")
        pred = br.predicate
        if not (isinstance(pred, IntImm) and pred.value):
            self.emit(depth, f"if {self.expr(pred)}:")
            depth += 1
        for buf in b.alloc_buffers:
            self.alloc(buf, depth)
        if b.init is not None:
            red = [iv for iv in b.iter_vars if iv.kind == "R"]
            cond = " and ".join(f"{self.name(iv.var)} == 0" for iv in red) or "True"
            self.emit(depth, f"if {cond}:")
            self.stmt(b.init, depth + 1)
        self.stmt(b.body, depth)


def _identifier(name: str) -> str:
    """A Python identifier for an IR name ("i.0" -> "i_0_"). The trailing "_" keeps it clear
    of keywords and of the helpers the generated code calls (np, _tdiv, _cast_int8, ...)."""
    s = "".join(c if (c.isascii() and c.isalnum()) or c == "_" else "_" for c in name)
    return ("_" + s if s[:1].isdigit() else s) + "_"


def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _tmod(a, b):
    return a - b * _tdiv(a, b)


def _fdiv(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _erf(x):
    return math.erf(float(x))


def _env():
    env = {"np": np, "math": math, "_product": itertools.product, "_tdiv": _tdiv,
           "_tmod": _tmod, "_fdiv": _fdiv, "_erf": _erf}
    for name in ("bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32",
                 "float64"):
        t = getattr(np, name if name != "bool" else "bool_")
        env[f"_cast_{name}"] = (lambda t: lambda x: t(x))(t)
    return env


def compile_python(func: PrimFunc):
    """Python source for `func` and the callable built from it."""
    g = _PyGen()
    params = [g.name(b) for b in func.params]
    fname = _identifier(func.name) + "ref"
    g.emit(0, f"def {fname}({', '.join(params)}):")
    g.emit(1, "pass")
    g.stmt(func.body, 1)
    src = "\n".join(g.lines)
    env = _env()
    exec(compile(src, f"<interpreter {func.name}>", "exec"), env)
    return src, env[fname]


def run(func: PrimFunc, *arrays) -> None:
    """Execute `func` on numpy arrays (argument order = func.params); outputs in place."""
    if len(arrays) != len(func.params):
        raise ValueError(f"{func.name} takes {len(func.params)} arrays, got {len(arrays)}")
    views, copies = [], []
    for b, a in zip(func.params, arrays):
        a = np.asarray(a)
        if a.size != b.size:
            raise ValueError(f"argument {b.name}: expected {b.size} elements {b.shape}, got {a.shape}")
        if b.strides is None and not b.align:
            base = view = a.reshape(b.shape)
        else:  # a flat array of b.size elements, addressed through the buffer's strides
            base = a.reshape(-1)
            view = np.lib.stride_tricks.as_strided(
                base, b.shape, tuple(s * base.itemsize for s in b.layout_strides()))
        if not np.may_share_memory(base, a) and a.flags.writeable:
            copies.append((a, base))  # reshape had to copy (e.g. a transposed array)
        views.append(view)
    _, fn = compile_python(func)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fn(*views)
    for a, base in copies:  # outputs must land in the caller's arrays
        a[...] = base.reshape(a.shape)
