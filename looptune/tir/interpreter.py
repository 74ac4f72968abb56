"""The reference interpreter: runs a PrimFunc (scheduled or not, lowered or not) on numpy
arrays by turning it into Python source. Slow, obvious and independent of codegen, so tests
can check schedules and lowering passes without a C compiler. Intermediate buffers start as
NaN (or a large sentinel for integers) so reads of unwritten data show up. A function bound
to GPU threads (or a GpuProgram) runs thread by thread in interpreter_gpu.py.

Values are numpy scalars of the IR's types, so every operation, cast and store rounds as the
type says (float16 with numpy's, bfloat16 with ml_dtypes')."""
from __future__ import annotations

import itertools
import math

import numpy as np

from . import dtype as dt
from .buffer import Buffer
from .expr import (INDEX_CHECK_OP, Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm,
                   Not, Ramp, Select, Var)
from .func import PrimFunc
from .functor import find_stmts
from .printer import Names
from .stmt import (SHFL_DOWN_OP, Allocate, Block, BlockRealize, BufferStore, Comment, Evaluate,
                   For, IfThenElse, SeqStmt)

_PY_OPS = {"+": "+", "-": "-", "*": "*", "/": "/", "//": "//", "%": "%", "==": "==", "!=": "!=",
           "<": "<", "<=": "<=", ">": ">", ">=": ">=", "and": "and", "or": "or"}

_CALLS = {
    "exp": "np.exp({0})", "log": "np.log({0})", "sqrt": "np.sqrt({0})",
    "rsqrt": "(1 / np.sqrt({0}))", "tanh": "np.tanh({0})", "erf": "_erf({0})",
    "sigmoid": "(1 / (1 + np.exp(-{0})))", "pow": "np.power({0}, {1})",
    "fmod": "np.fmod({0}, {1})", "floor": "np.floor({0})",
    "ceil": "np.ceil({0})", "abs": "abs({0})", "sin": "np.sin({0})", "cos": "np.cos({0})",
    "round": "np.round({0})", INDEX_CHECK_OP: "_check_index({0}, {1}, {2})",
}


class _PyGen:
    def __init__(self):
        self.names = Names(clean=_identifier)
        self.lines: list[str] = []
        self.types: set = set()  # numpy type names the code refers to as _t_<name>

    def name(self, obj) -> str:
        return self.names(obj)

    def type(self, npname: str) -> str:
        """The generated code's name for a numpy scalar type (bound by _env)."""
        self.types.add(npname)
        return f"_t_{npname}"

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
            return f"{self.type(dt.numpy_name(e.dtype))}({text})"
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if e.op in ("min", "max"):
                return f"_{e.op}({a}, {b})"
            if e.op in ("//", "%"):
                return f"_floor{'div' if e.op == '//' else 'mod'}({a}, {b})"
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
            return self.load(e)
        if isinstance(e, Cast):
            return f"{self.type(dt.numpy_name(e.dtype))}({self.expr(e.value)})"
        if isinstance(e, Select):
            return f"({self.expr(e.true_value)} if {self.expr(e.cond)} else {self.expr(e.false_value)})"
        if isinstance(e, Call):
            if e.op not in _CALLS:
                raise NotImplementedError(f"the interpreter cannot run the intrinsic {e.op}"
                                          + (" (a GPU warp shuffle: run the function as a GPU "
                                             "program, interpreter_gpu.run_gpu)"
                                             if e.op == SHFL_DOWN_OP else ""))
            return (f"{self.type(dt.numpy_name(e.dtype))}("
                    + _CALLS[e.op].format(*(self.expr(a) for a in e.args)) + ")")
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
            self.loop(s, depth)
        elif isinstance(s, BufferStore):
            self.store(s, depth)
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
        elif isinstance(s, Evaluate):
            self.evaluate(s, depth)
        elif isinstance(s, Comment):
            self.emit(depth, "pass")
        else:
            raise TypeError(f"interpreter: unsupported statement {type(s).__name__}")

    # the hooks interpreter_gpu overrides
    def load(self, e: BufferLoad) -> str:
        return f"{self.name(e.buffer)}[{self.index(e.indices)}]"

    def store(self, s: BufferStore, depth):
        self.emit(depth, f"{self.name(s.buffer)}[{self.index(s.indices)}] = {self.expr(s.value)}")

    def evaluate(self, s: Evaluate, depth):
        self.emit(depth, "pass")

    def chained(self, s: For) -> bool:
        """May loop `s` join the Python loop of the loop around it?"""
        return True

    def loop(self, s: For, depth):
        # a perfect chain of loops is one Python loop (Python allows only 20 nested blocks)
        chain = [s]
        while isinstance(chain[-1].body, For) and self.chained(chain[-1].body):
            chain.append(chain[-1].body)
        if len(chain) == 1:
            self.emit(depth, f"for {self.name(s.loop_var)} in range({s.extent}):")
        else:
            names = ", ".join(self.name(x.loop_var) for x in chain)
            ranges = ", ".join(f"range({x.extent})" for x in chain)
            self.emit(depth, f"for {names} in _product({ranges}):")
        self.stmt(chain[-1].body, depth + 1)

    def alloc(self, b: Buffer, depth):
        npd = dt.numpy_name(b.dtype)
        t = self.type(npd)
        # a sentinel for elements never written: NaN, or -12345 wrapped to the type's width
        fill = "np.nan" if dt.is_float(b.dtype) else f"np.int64(-12345).astype({t})"
        if b.strides is None and not b.align:
            self.emit(depth, f"{self.name(b)} = np.full({b.shape}, {fill}, dtype={t})")
        else:
            item = np.dtype(numpy_type(npd)).itemsize
            strides = tuple(st * item for st in b.layout_strides())
            self.emit(depth, f"{self.name(b)} = np.lib.stride_tricks.as_strided("
                             f"np.full({b.size}, {fill}, dtype={t}), {b.shape}, {strides})")

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
    of keywords and of the helpers the generated code calls (np, _tdiv, _t_int8, ...)."""
    s = "".join(c if (c.isascii() and c.isalnum()) or c == "_" else "_" for c in name)
    return ("_" + s if s[:1].isdigit() else s) + "_"


def _floordiv(a, b):
    """numpy's integer //: x // 0 == 0 (Python's int would raise ZeroDivisionError)."""
    return a // b if b != 0 else a * 0


def _floormod(a, b):
    return a % b if b != 0 else a * 0


def _tdiv(a, b):
    if b == 0:
        return a * 0
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _tmod(a, b):
    return a - b * _tdiv(a, b) if b != 0 else a * 0


def _min(a, b):
    """numpy's minimum: a NaN on either side wins (Python's min keeps a NaN only first)."""
    return a if a < b or a != a else b


def _max(a, b):
    return a if a > b or a != a else b


def _fdiv(a, b):
    with np.errstate(divide="ignore", invalid="ignore"):
        return a / b


def _check_index(i, size, wrap):
    """A checked index (tir.expr.INDEX_CHECK_OP): out of range raises, as the kernel does."""
    if not (-size if wrap else 0) <= i < size:
        raise IndexError(f"index {int(i)} is out of range for an axis of size {int(size)}")
    return i + size if i < 0 else i


def _erf(x):
    return math.erf(float(x))


def numpy_type(npname: str):
    """The numpy scalar type of a dtype's numpy name; bfloat16 comes from ml_dtypes."""
    if npname == "bool":
        return np.bool_
    t = getattr(np, npname, None)
    if t is None:
        try:
            import ml_dtypes
        except ImportError as e:
            raise ImportError(f"the interpreter needs the ml_dtypes package for {npname}") from e
        t = getattr(ml_dtypes, npname)
    return t


def _env(types=()):
    env = {"np": np, "math": math, "_product": itertools.product, "_floordiv": _floordiv,
           "_floormod": _floormod, "_tdiv": _tdiv, "_tmod": _tmod, "_fdiv": _fdiv,
           "_erf": _erf, "_check_index": _check_index, "_min": _min, "_max": _max}
    for name in types:
        env[f"_t_{name}"] = numpy_type(name)
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
    env = _env(g.types)
    exec(compile(src, f"<interpreter {func.name}>", "exec"), env)
    return src, env[fname]


def run(func, *arrays) -> None:
    """Execute `func` on numpy arrays (argument order = func.params); outputs in place.

    A function with loops bound to blockIdx / threadIdx is lowered for the GPU and run
    thread by thread, checking for races (interpreter_gpu.run_program); so is a GpuProgram."""
    if not isinstance(func, PrimFunc) or is_gpu_bound(func):
        from .interpreter_gpu import run_gpu
        return run_gpu(func, *arrays)
    views, copies = bind_arguments(func.name, func.params, arrays)
    _, fn = compile_python(func)
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        fn(*views)
    for a, base in copies:  # outputs must land in the caller's arrays
        a[...] = base.reshape(a.shape)


def is_gpu_bound(func: PrimFunc) -> bool:
    """Does `func` bind a loop to blockIdx / threadIdx? (vthread alone runs as loops.)"""
    return any(lp.kind == "thread_binding" and lp.thread and
               lp.thread.startswith(("blockIdx.", "threadIdx."))
               for lp in find_stmts(func.body, For))


def bind_arguments(name: str, params, arrays) -> tuple[list, list]:
    """Views of `arrays` shaped as the buffers `params`, and the (array, copy) pairs whose
    copies must be written back after the run."""
    if len(arrays) != len(params):
        raise ValueError(f"{name} takes {len(params)} arrays, got {len(arrays)}")
    views, copies = [], []
    for b, a in zip(params, arrays):
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
    return views, copies
