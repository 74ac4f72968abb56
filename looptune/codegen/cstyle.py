"""The C-family renderer: lowered (flat, loop-only) IR -> source text. What differs between
dialects - type names, qualifiers, literal forms, the math function table, the barrier, loop
pragmas - is class attributes and a few small hooks; CPU C with OpenMP and GCC vectors lives
in c.py, CUDA C in cuda.py."""
from __future__ import annotations

import math
import re

from ..error import BuildError
from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import (INDEX_CHECK_OP, PREFETCH_OP, Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm,
                        Not, Ramp, Select, Var)
from ..tir.func import PrimFunc
from ..tir.intrin.base import INTRIN_OP
from ..tir.printer import Names
from ..tir.stmt import (SHFL_DOWN_OP, Allocate, BufferStore, Comment, Evaluate, For, IfThenElse,
                        SeqStmt, is_barrier)
from .passes.unroll import explicit


_PREC = {"*": 13, "/": 13, "tdiv": 13, "tmod": 13, "+": 12, "-": 12, "<": 10, "<=": 10, ">": 10,
         ">=": 10, "==": 9, "!=": 9, "and": 5, "or": 4}
_C_OP = {"tdiv": "/", "tmod": "%", "and": "&&", "or": "||"}

F32_CALLS = {"exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})",
             "rsqrt": "(1.0f / sqrtf({0}))", "tanh": "tanhf({0})", "erf": "erff({0})",
             "sigmoid": "(1.0f / (1.0f + expf(-({0}))))", "pow": "powf({0}, {1})",
             "fmod": "fmodf({0}, {1})",
             "floor": "floorf({0})", "ceil": "ceilf({0})", "abs": "fabsf({0})",
             "sin": "sinf({0})", "cos": "cosf({0})",
             # half to even in the default rounding mode (kernels never change it): GCC
             # inlines and vectorizes rintf at every width (vrndscaleps), where nearbyintf is
             # a libm call in a loop and roundevenf stays scalar with AVX-512 (GCC 12): a
             # quantizing convolution's epilogue ran 4x slower so
             "round": "__builtin_rintf({0})"}
F64_CALLS = {k: v.replace("f(", "(").replace("1.0f", "1.0") for k, v in F32_CALLS.items()}

# C's keywords, the library functions kernels call and the type names they use: no variable
# or buffer may take these names (a buffer named after its operator, "abs" or "floor", would
# hide the function; one named int32_t, the type)
C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while bool true false main abs llabs
free abort aligned_alloc malloc calloc realloc memcpy memset memmove exit
omp_get_max_threads omp_get_thread_num omp_get_num_threads omp_set_num_threads
int8_t int16_t int32_t int64_t uint8_t uint16_t uint32_t uint64_t size_t intptr_t uintptr_t
ptrdiff_t""".split()) \
    | frozenset(re.findall(r"([A-Za-z_]\w*)\(", " ".join([*F32_CALLS.values(), *F64_CALLS.values()])))


def _safe_divisor(b) -> bool:
    """May C's / and % take `b` as it is? (A constant other than 0 and -1: lowering's tdiv
    and tmod by a positive constant, the common case.)"""
    return isinstance(b, IntImm) and b.value not in (0, -1)


def c_comment(text) -> str:
    """`text` (a name from a workload, a target's model string, ...) made safe inside a `//`
    comment: one line of printable ASCII, no `/*` or `*/`, no trigraph, and no backslash,
    which at a line's end would splice the next line into the comment. Other characters are
    written as <xNN>."""
    out = "".join(c if " " <= c <= "~" and c != "\\" else f"<x{ord(c):02x}>" for c in str(text))
    return out.replace("*/", "*<x2f>").replace("/*", "/<x2a>").replace("??", "?<x3f>")


def c_string(text) -> str:
    """`text` as a C string literal: printable ASCII as itself (quote, backslash and `?`, the
    start of a trigraph, escaped), every other byte of its UTF-8 as an octal escape."""
    out = []
    for b in str(text).encode("utf-8"):
        c = chr(b)
        out.append("\\" + c if c in '"\\?' else c if " " <= c <= "~" else f"\\{b:03o}")
    return '"' + "".join(out) + '"'


def c_identifier(name: str, keywords=C_KEYWORDS, macros=frozenset()) -> str:
    """A valid C identifier for `name`, clear of `keywords`, of `macros` (what the headers
    define: INFINITY, NAN, HUGE_VAL, ...), of the names C reserves (a leading underscore) and
    of looptune's own lt_ names."""
    base = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in name) or "v"
    if (base[0].isdigit() or base[0] == "_" or base in keywords or base in macros
            or base.startswith("lt_")):
        base = "v_" + base
    return base


class CStyleRenderer:
    """Renders statements and expressions of lowered IR. A dialect sets the class attributes
    below and implements what has no common form: vectors (`vector_load`, `vector_store`,
    `broadcast`, `ramp`, `vector_type`), parallel and thread-bound loops, allocation, and the
    function around the body (`render`)."""

    keywords = C_KEYWORDS          # names a variable or buffer may not take
    restrict = "restrict"          # the no-alias qualifier of pointer parameters
    func_qualifier = ""
    helper_qualifier = "static inline"  # of the lt_ helper functions (min, max, floordiv)
    type_names: dict = {}          # element dtype -> type name, where not dt.c_type's
    float_suffix = {"float32": "f"}
    int64_format = "INT64_C({})"
    inf_text = ("INFINITY", "(-INFINITY)")
    nan_text = "NAN"
    barrier = None                 # the statement of tir.stmt.barrier(); None: not supported
    shfl_down = None               # tir.stmt.shfl_down: "{0}" value, "{1}" delta, "{2}" width
    simd_pragmas: tuple = ()       # before a vectorized loop the vectorize pass left a loop
    unroll_pragma = None           # before an unrolled loop; "{n}": its extent (at most 256)

    def __init__(self):
        self.lines: list[str] = []
        self.names = Names(clean=self.identifier)
        self.helpers: set = set()
        self.in_simd = 0  # vectorized loops around the statement being rendered
        self.fixed: dict = {}  # loop var -> placeholder, inside the body of copies()

    def identifier(self, name: str) -> str:
        return c_identifier(name, self.keywords)

    # ------------------------------------------------------------------ names
    def name(self, obj) -> str:
        return self.fixed.get(obj) or self.names(obj)

    # ------------------------------------------------------------------ types
    def type_name(self, dtype: str) -> str:
        if dt.lanes(dtype) == 1:
            return self.type_names.get(dtype) or dt.c_type(dtype)
        return self.vector_type(dtype)

    def vector_type(self, dtype: str) -> str:
        raise BuildError(f"{type(self).__name__} has no vector type for {dtype}")

    # ------------------------------------------------------------------ expressions
    def expr(self, e, prec: int = 0) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "1" if e.value else "0"
            if e.dtype == "int64":
                return self.int64_format.format(e.value)
            return str(e.value)
        if isinstance(e, FloatImm):
            return self.float_literal(e.value, e.dtype)
        if isinstance(e, Binary):
            return self.binary(e, prec)
        if isinstance(e, Not):
            return f"!({self.expr(e.a)})"
        if isinstance(e, BufferLoad):
            return self.load(e)
        if isinstance(e, Cast):
            return self.cast(e)
        if isinstance(e, Select):
            return self.select(e)
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Broadcast):
            return self.broadcast(e)
        if isinstance(e, Ramp):
            return self.ramp(e)
        raise TypeError(f"cannot render expression {e!r}")

    def float_literal(self, v: float, dtype: str) -> str:
        suffix = self.float_suffix.get(dt.element(dtype), "")
        if math.isnan(v):
            return self.nan_text
        if math.isinf(v):
            return self.inf_text[0] if v > 0 else self.inf_text[1]
        s = repr(float(v))
        if "e" not in s and "." not in s:
            s += ".0"
        return f"{s}{suffix}" if v >= 0 else f"({s}{suffix})"

    def binary(self, e: Binary, prec: int) -> str:
        op = e.op
        if op in ("min", "max"):
            self.helpers.add(("minmax", e.dtype))
            return f"lt_{op}_{e.dtype}({self.expr(e.a)}, {self.expr(e.b)})"
        if op in ("//", "%") or (op in ("tdiv", "tmod") and not _safe_divisor(e.b)):
            self.helpers.add(("floordiv", e.dtype))
            fn = {"//": "floordiv", "%": "floormod", "tdiv": "tdiv", "tmod": "tmod"}[op]
            return f"lt_{fn}_{e.dtype}({self.expr(e.a)}, {self.expr(e.b)})"
        p = _PREC[op]
        s = f"{self.expr(e.a, p)} {_C_OP.get(op, op)} {self.expr(e.b, p + 1)}"
        return f"({s})" if p < prec else s

    def cast(self, e: Cast) -> str:
        return f"(({self.type_name(e.dtype)})({self.expr(e.value)}))"

    def select(self, e: Select) -> str:
        t, f = self.expr(e.true_value, 3), self.expr(e.false_value, 3)
        return f"({self.expr(e.cond, 4)} ? {t} : {f})"

    def call(self, e: Call) -> str:
        if e.op == PREFETCH_OP:  # read soon, keep in every cache level
            return f"__builtin_prefetch(&{self.expr(e.args[0])}, 0, 3)"
        if e.op.startswith(INTRIN_OP):
            raise BuildError(f"{type(self).__name__} has no tensor intrinsics ({e.op}): "
                             "tensorize belongs in CPU code")
        args = [self.expr(a) for a in e.args]
        if e.op == INDEX_CHECK_OP:
            # a dialect with no error path (CUDA) reads a safe element; CPU C reports (c.py)
            self.helpers.add(("safe_index", "int64"))
            return f"lt_safe_index({args[0]}, {args[1]}, {args[2]})"
        if e.op == SHFL_DOWN_OP:
            if self.shfl_down is None:
                raise BuildError(f"{type(self).__name__} has no warp shuffle: a shfl_down "
                                 "belongs in GPU code")
            return self.shfl_down.format(*args)
        if dt.is_int(e.dtype) and e.op == "abs":
            return f"abs({args[0]})" if dt.bits(e.dtype) <= 32 else f"llabs({args[0]})"
        if dt.lanes(e.dtype) > 1:
            return self.vector_call(e, args)
        return self.math_call(e.op, e.dtype, args)

    def math_call(self, op: str, dtype: str, args: list) -> str:
        """A scalar math intrinsic on rendered arguments."""
        table = F32_CALLS if dt.element(dtype) == "float32" else F64_CALLS
        return table[op].format(*args)

    def vector_call(self, e: Call, args: list) -> str:
        raise BuildError(f"{type(self).__name__} cannot render the vector call {e.op} "
                         f"({e.dtype})")

    def broadcast(self, e: Broadcast) -> str:
        raise BuildError(f"{type(self).__name__} cannot render a vector broadcast ({e.dtype})")

    def ramp(self, e: Ramp) -> str:
        raise BuildError(f"{type(self).__name__} cannot render a vector ramp ({e.dtype})")

    def load(self, e: BufferLoad) -> str:
        buf = self.name(e.buffer)
        idx = e.indices[0]
        if isinstance(idx, Ramp):
            return self.vector_load(e, buf, idx)
        return f"{buf}[{self.expr(idx)}]"

    def vector_load(self, e: BufferLoad, buf: str, idx: Ramp) -> str:
        raise BuildError(f"{type(self).__name__} cannot render a vector load of {buf}")

    # ------------------------------------------------------------------ statements
    def emit(self, depth: int, text: str):
        self.lines.append("  " * depth + text)

    def stmt(self, s, depth: int):
        if isinstance(s, SeqStmt):
            for x in s.stmts:
                self.stmt(x, depth)
        elif isinstance(s, For):
            self.loop(s, depth)
        elif isinstance(s, BufferStore):
            self.store(s, depth)
        elif isinstance(s, IfThenElse):
            self.emit(depth, f"if ({self.expr(s.cond)}) {{")
            self.stmt(s.then_case, depth + 1)
            if s.else_case is not None:
                self.emit(depth, "} else {")
                self.stmt(s.else_case, depth + 1)
            self.emit(depth, "}")
        elif isinstance(s, Allocate):
            self.allocate(s, depth)
        elif isinstance(s, Evaluate):
            if is_barrier(s):
                if self.barrier is None:
                    raise BuildError(f"{type(self).__name__} has no thread barrier: a barrier "
                                     "belongs in GPU code")
                self.emit(depth, self.barrier)
            else:
                self.emit(depth, f"{self.expr(s.value)};")
        elif isinstance(s, Comment):
            self.emit(depth, f"// {c_comment(s.text)}")
        else:
            raise TypeError(f"cannot render statement {type(s).__name__}")

    def loop(self, s: For, depth: int):
        if s.kind == "thread_binding":
            self.thread_loop(s, depth)
            return
        if s.kind == "parallel":
            self.parallel_loop(s, depth)
            return
        if s.kind == "vectorized":
            for p in self.simd_pragmas:
                self.emit(depth, p)
        elif explicit(s):
            self.copies(s, depth)
            return
        elif s.kind == "unrolled" and self.unroll_pragma:
            self.emit(depth, self.unroll_pragma.format(n=min(s.extent, 256)))
        self.for_loop(s, depth)

    def for_loop(self, s: For, depth: int):
        """`for (...) { body }`, whatever the loop's kind."""
        v = self.name(s.loop_var)
        t = self.type_name(s.loop_var.dtype)
        self.emit(depth, f"for ({t} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        simd = s.kind == "vectorized"
        self.in_simd += simd
        self.stmt(s.body, depth + 1)
        self.in_simd -= simd
        self.emit(depth, "}")

    def parallel_loop(self, s: For, depth: int):
        raise BuildError(f"{type(self).__name__} cannot render the parallel loop "
                         f"{s.loop_var.name}")

    def thread_loop(self, s: For, depth: int):
        raise BuildError(f"loop {s.loop_var.name} is bound to {s.thread}: GPU code needs the "
                         f"CUDA renderer (target 'cuda'), not {type(self).__name__}")

    def copies(self, s: For, depth: int):
        """An explicitly unrolled loop: its body, rendered once with a placeholder for the
        loop variable, printed once per iteration (in braces) with the number in its place,
        so Python only copies text. (The number must be in the text: copies that fixed the
        variable with `const int i = 2;` ran up to 1.4x slower on conv2d.)"""
        v = self.name(s.loop_var)
        mark = f"\x00{v}\x00"
        self.fixed[s.loop_var] = mark
        saved, self.lines = self.lines, []
        self.stmt(s.body, depth + 1)
        body, self.lines = "\n".join(self.lines), saved
        del self.fixed[s.loop_var]
        self.emit(depth, f"// {v}: unrolled, {s.extent} copies")
        for i in range(s.extent):
            self.emit(depth, "{")
            self.lines.append(body.replace(mark, str(i)))
            self.emit(depth, "}")

    def store(self, s: BufferStore, depth: int):
        buf = self.name(s.buffer)
        idx = s.indices[0]
        value = self.expr(s.value)
        if isinstance(idx, Ramp):
            self.vector_store(s, depth, buf, idx, value)
        else:
            self.emit(depth, f"{buf}[{self.expr(idx)}] = {value};")

    def vector_store(self, s: BufferStore, depth: int, buf: str, idx: Ramp, value: str):
        raise BuildError(f"{type(self).__name__} cannot render a vector store to {buf}")

    def allocate(self, s: Allocate, depth: int):
        """Storage for the body's duration: a local array."""
        b = s.buffer
        self.emit(depth, f"{self.type_name(b.dtype)} {self.name(b)}[{b.size}];")
        self.stmt(s.body, depth)

    # ------------------------------------------------------------------ helpers
    def helper_defs(self) -> str:
        return "\n".join(line for kind, d in sorted(self.helpers)
                         for line in self.helper_def(kind, d))

    def helper_def(self, kind: str, d: str) -> list:
        """The definitions of one lt_ helper (scalar min / max, floor division)."""
        t, q = self.type_name(d), self.helper_qualifier
        if kind == "minmax":  # NaN wins, as numpy's minimum and maximum
            nan = " || a != a" if dt.is_float(d) else ""
            return [f"{q} {t} lt_min_{d}({t} a, {t} b) {{ return (a < b{nan}) ? a : b; }}",
                    f"{q} {t} lt_max_{d}({t} a, {t} b) {{ return (a > b{nan}) ? a : b; }}"]
        if kind == "floordiv":  # numpy's x // 0 == x % 0 == 0, and INT_MIN // -1 == INT_MIN:
            # neither may reach C's / or %, where both trap (SIGFPE)
            neg = f"({t})(0ULL - (unsigned long long)a)"  # -a, wrapping as numpy's
            return [f"{q} {t} lt_floordiv_{d}({t} a, {t} b) {{ if (b == 0) return 0; "
                    f"if (b == -1) return {neg}; {t} q = a / b; "
                    "return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }",
                    f"{q} {t} lt_floormod_{d}({t} a, {t} b) {{ if (b == 0 || b == -1) "
                    f"return 0; {t} r = a % b; "
                    "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }",
                    f"{q} {t} lt_tdiv_{d}({t} a, {t} b) {{ return b == 0 ? 0 : b == -1 ? {neg} "
                    ": a / b; }",
                    f"{q} {t} lt_tmod_{d}({t} a, {t} b) {{ return (b == 0 || b == -1) ? 0 : "
                    "a % b; }"]
        if kind == "safe_index":  # an index out of range reads element 0 (unreported)
            return [f"{q} long long lt_safe_index(long long i, long long size, int wrap) {{ "
                    "return (i >= size || i < (wrap ? -size : 0)) ? 0 : i < 0 ? i + size : i; }"]
        raise BuildError(f"{type(self).__name__}: no helper {kind} for {d}")

    # ------------------------------------------------------------------ function
    @staticmethod
    def symbol(func: PrimFunc) -> str:
        """The C name of the kernel; `<symbol>_packed(void** args)` calls it from a pointer list."""
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in func.name)
        return f"{base}_kernel" if base[:1].isalpha() else f"k_{base}_kernel"

    def param_decl(self, b: Buffer) -> str:
        return f"{self.type_name(b.dtype)}* {self.restrict} {self.name(b)}"
