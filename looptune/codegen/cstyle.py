"""The C-family renderer: lowered IR -> C source. Subclasses (CPU C + OpenMP, CUDA C) change
class attributes - type names, qualifiers, pragmas - rather than logic.

Vectors use GCC vector extensions: `typedef float lt_float32x8 __attribute__((vector_size(32)))`,
with unaligned loads/stores through a may_alias typedef of alignment 4.
"""
from __future__ import annotations

import math

from .. import __version__
from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import (Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Not, Ramp,
                        Select, Var)
from ..tir.func import PrimFunc
from ..tir.printer import Names
from ..tir.functor import visit
from ..tir.stmt import Allocate, BufferStore, Comment, Evaluate, For, IfThenElse, SeqStmt
from . import vector_math
from .passes.unroll import explicit

C_KEYWORDS = frozenset("""auto break case char const continue default do double else enum extern
float for goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while bool true false main""".split())

_PREC = {"*": 13, "/": 13, "tdiv": 13, "tmod": 13, "+": 12, "-": 12, "<": 10, "<=": 10, ">": 10,
         ">=": 10, "==": 9, "!=": 9, "and": 5, "or": 4}
_C_OP = {"tdiv": "/", "tmod": "%", "and": "&&", "or": "||"}

_F32_CALLS = {"exp": "expf({0})", "log": "logf({0})", "sqrt": "sqrtf({0})",
              "rsqrt": "(1.0f / sqrtf({0}))", "tanh": "tanhf({0})", "erf": "erff({0})",
              "sigmoid": "(1.0f / (1.0f + expf(-({0}))))", "pow": "powf({0}, {1})",
              "floor": "floorf({0})", "ceil": "ceilf({0})", "abs": "fabsf({0})",
              "sin": "sinf({0})", "cos": "cosf({0})", "round": "roundf({0})"}
_F64_CALLS = {k: v.replace("f(", "(").replace("1.0f", "1.0") for k, v in _F32_CALLS.items()}


def c_comment(text) -> str:
    """`text` (a name from a workload, a target's model string, ...) made safe inside a `//`
    comment: one line of printable ASCII, no `/*` or `*/`, no trigraph, and no backslash,
    which at a line's end would splice the next line into the comment. Other characters are
    written as <xNN>."""
    out = "".join(c if " " <= c <= "~" and c != "\\" else f"<x{ord(c):02x}>" for c in str(text))
    return out.replace("*/", "*<x2f>").replace("/*", "/<x2a>").replace("??", "?<x3f>")


def c_identifier(name: str) -> str:
    """A valid C identifier for `name`, clear of keywords and looptune's own lt_ names."""
    base = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "v"
    if base[0].isdigit() or base in C_KEYWORDS or base.startswith("lt_"):
        base = "v_" + base
    return base


class CStyleRenderer:
    """Renders a lowered (flattened, loop-only) PrimFunc."""

    restrict = "restrict"
    func_qualifier = ""
    local_align = 64
    stack_limit_bytes = 256 * 1024  # larger local buffers go to the heap
    parallel_pragma = ("#pragma omp parallel for schedule(static) "
                       "num_threads(lt_num_threads > 0 ? lt_num_threads : omp_get_max_threads())")
    simd_pragmas = ("#pragma omp simd",)
    unroll_pragma = "#pragma GCC unroll {n}"
    preamble = """#include <math.h>
#include <stdint.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#else
static inline int omp_get_max_threads(void) { return 1; }
#endif
"""

    def __init__(self):
        self.lines: list[str] = []
        self.names = Names(clean=c_identifier)
        self.vector_types: set = set()
        self.helpers: set = set()
        self.in_parallel = False
        self.in_simd = 0  # vectorized loops around the statement being rendered
        self.outlined: list[str] = []
        self.fixed: dict = {}  # loop var -> placeholder, inside the body of copies()
        self._symbol = "kernel"

    # ------------------------------------------------------------------ names
    def name(self, obj) -> str:
        return self.fixed.get(obj) or self.names(obj)

    # ------------------------------------------------------------------ types
    def type_name(self, dtype: str) -> str:
        if dt.lanes(dtype) == 1:
            return dt.c_type(dtype)
        self.vector_types.add(dtype)
        return f"lt_{dtype}"

    def vector_typedefs(self) -> str:
        out = []
        for d in sorted(self.vector_types):
            elem, n = dt.element(d), dt.lanes(d)
            size = dt.nbytes(d)
            ct = dt.c_type(elem)
            align = max(1, dt.bits(elem) // 8)
            out.append(f"typedef {ct} lt_{d} __attribute__((vector_size({size})));")
            out.append(f"typedef {ct} lt_{d}_u __attribute__((vector_size({size}), aligned({align}), "
                       "may_alias));")
            elems = ", ".join(["x"] * n)
            out.append(f"static inline lt_{d} lt_bcast_{d}({ct} x) {{ lt_{d} v = {{{elems}}}; "
                       "return v; }")
        return "\n".join(out)

    # ------------------------------------------------------------------ expressions
    def expr(self, e, prec: int = 0) -> str:
        if isinstance(e, Var):
            return self.name(e)
        if isinstance(e, IntImm):
            if e.dtype == "bool":
                return "1" if e.value else "0"
            if e.dtype == "int64":
                return f"INT64_C({e.value})"
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
            if dt.lanes(e.dtype) > 1:
                return f"__builtin_convertvector({self.expr(e.value)}, {self.type_name(e.dtype)})"
            return f"(({self.type_name(e.dtype)})({self.expr(e.value)}))"
        if isinstance(e, Select):
            t, f = self.expr(e.true_value, 3), self.expr(e.false_value, 3)
            if dt.lanes(e.dtype) > 1:  # a vector load's type is the unaligned variant: unify
                vt = self.type_name(e.dtype)
                t, f = f"({vt})({t})", f"({vt})({f})"
            return f"({self.expr(e.cond, 4)} ? {t} : {f})"
        if isinstance(e, Call):
            return self.call(e)
        if isinstance(e, Broadcast):
            self.type_name(e.dtype)
            return f"lt_bcast_{e.dtype}({self.expr(e.value)})"
        if isinstance(e, Ramp):
            t = self.type_name(e.dtype)
            base = self.expr(e.base, 12)
            return f"(({t}){{{', '.join(f'{base} + {i * e.stride}' for i in range(e.lanes))}}})"
        raise TypeError(f"cannot render expression {e!r}")

    def float_literal(self, v: float, dtype: str) -> str:
        suffix = "f" if dt.element(dtype) == "float32" else ""
        if math.isnan(v):
            return "NAN"
        if math.isinf(v):
            return "INFINITY" if v > 0 else "(-INFINITY)"
        s = repr(float(v))
        if "e" not in s and "." not in s:
            s += ".0"
        return f"{s}{suffix}" if v >= 0 else f"({s}{suffix})"

    def binary(self, e: Binary, prec: int) -> str:
        op = e.op
        if op in ("min", "max"):
            self.helpers.add(("minmax", e.dtype))
            return f"lt_{op}_{e.dtype}({self.expr(e.a)}, {self.expr(e.b)})"
        if op in ("//", "%"):
            self.helpers.add(("floordiv", e.dtype))
            fn = "floordiv" if op == "//" else "floormod"
            return f"lt_{fn}_{e.dtype}({self.expr(e.a)}, {self.expr(e.b)})"
        p = _PREC[op]
        s = f"{self.expr(e.a, p)} {_C_OP.get(op, op)} {self.expr(e.b, p + 1)}"
        return f"({s})" if p < prec else s

    def call(self, e: Call) -> str:
        args = [self.expr(a) for a in e.args]
        if dt.is_int(e.dtype) and e.op == "abs":
            return f"abs({args[0]})" if dt.bits(e.dtype) <= 32 else f"llabs({args[0]})"
        if dt.lanes(e.dtype) > 1:  # vectorized by the vectorize pass: vector_math.py
            self.helpers.add(("vmath", e.dtype))
            return f"lt_{e.op}_{e.dtype}({', '.join(args)})"
        table = _F32_CALLS if dt.element(e.dtype) == "float32" else _F64_CALLS
        return table[e.op].format(*args)

    def load(self, e: BufferLoad) -> str:
        buf = self.name(e.buffer)
        idx = e.indices[0]
        if isinstance(idx, Ramp):
            if idx.stride == 1:
                t = self.type_name(e.dtype)
                return f"(*(const {t}_u*)({buf} + {self.expr(idx.base, 12)}))"
            t = self.type_name(e.dtype)
            base = self.expr(idx.base, 12)
            if idx.stride == 2 and idx.lanes >= 4 and idx.lanes % 2 == 0:
                self.helpers.add(("load2", e.dtype))  # two loads and a shuffle
                return f"lt_load2_{e.dtype}({buf} + {base})"
            elems = ", ".join(f"{buf}[{base} + {i * idx.stride}]" for i in range(idx.lanes))
            return f"(({t}){{{elems}}})"
        return f"{buf}[{self.expr(idx)}]"

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
            self.emit(depth, f"{self.expr(s.value)};")
        elif isinstance(s, Comment):
            self.emit(depth, f"// {c_comment(s.text)}")
        else:
            raise TypeError(f"cannot render statement {type(s).__name__}")

    def loop(self, s: For, depth: int):
        v = self.name(s.loop_var)
        t = dt.c_type(s.loop_var.dtype)
        if s.kind == "parallel" and not self.in_parallel and not self.in_simd:
            self.parallel_loop(s, depth)
            return
        if s.kind == "parallel":
            self.emit(depth, "// parallel loop nested in a parallel or vectorized loop: runs "
                      "serially")
        elif s.kind == "vectorized":
            for p in self.simd_pragmas:
                self.emit(depth, p)
        elif explicit(s):
            self.copies(s, depth)
            return
        elif s.kind == "unrolled":
            self.emit(depth, self.unroll_pragma.format(n=min(s.extent, 256)))
        self.emit(depth, f"for ({t} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        simd = s.kind == "vectorized"
        self.in_simd += simd
        self.stmt(s.body, depth + 1)
        self.in_simd -= simd
        self.emit(depth, "}")

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

    def parallel_loop(self, s: For, depth: int):
        """The body of a parallel loop goes into a function of its own whose buffer
        parameters are `restrict`: OpenMP's outlining would otherwise drop the no-alias
        facts, and with them register tiling (measured 3.7x slower on a matmul)."""
        free_vars, buffers = _free_names(s)
        fn = f"{self._symbol}_par{len(self.outlined)}"
        params = [self.param_decl(b) for b in buffers]
        params += [f"{dt.c_type(x.dtype)} {self.names(x)}" for x in free_vars]
        saved, fixed = self.lines, self.fixed
        self.lines, self.fixed = [], {}  # copies' numbers are passed in, as arguments
        self.in_parallel = True
        self.stmt(s.body, 1)
        self.in_parallel = False
        body, self.lines, self.fixed = self.lines, saved, fixed
        self.outlined.append(f"static __attribute__((noinline)) void {fn}({', '.join(params)}) {{\n"
                             + "\n".join(body) + "\n}")
        args = [self.name(b) for b in buffers] + [self.name(x) for x in free_vars]
        v = self.name(s.loop_var)
        self.emit(depth, self.parallel_pragma)
        self.emit(depth, f"for ({dt.c_type(s.loop_var.dtype)} {v} = 0; {v} < {s.extent}; ++{v}) {{")
        self.emit(depth + 1, f"{fn}({', '.join(args)});")
        self.emit(depth, "}")

    def store(self, s: BufferStore, depth: int):
        buf = self.name(s.buffer)
        idx = s.indices[0]
        value = self.expr(s.value)
        if isinstance(idx, Ramp):
            t = self.type_name(s.value.dtype)
            self.emit(depth, f"*({t}_u*)({buf} + {self.expr(idx.base, 12)}) = {value};")
        else:
            self.emit(depth, f"{buf}[{self.expr(idx)}] = {value};")

    def allocate(self, s: Allocate, depth: int):
        b = s.buffer
        name = self.name(b)
        ct = dt.c_type(b.dtype)
        nbytes = b.size * dt.nbytes(b.dtype)
        if b.scope == "local" and nbytes <= self.stack_limit_bytes:
            self.emit(depth, f"{ct} {name}[{b.size}] __attribute__((aligned({self.local_align})));")
            self.stmt(s.body, depth)
            return
        self.emit(depth, f"{ct}* {self.restrict} {name} = ({ct}*)lt_alloc({nbytes});")
        # no return from inside an OpenMP region (a parallel or simd loop)
        self.emit(depth, f"if ({name} == NULL) abort();" if self.in_parallel or self.in_simd
                  else f"if ({name} == NULL) return -1;")
        self.stmt(s.body, depth)
        self.emit(depth, f"free({name});")

    # ------------------------------------------------------------------ helpers
    def helper_defs(self) -> str:
        out = []
        for kind, d in sorted(self.helpers):
            t = dt.c_type(d) if dt.lanes(d) == 1 else f"lt_{d}"
            if kind == "minmax":
                if dt.lanes(d) == 1:
                    out.append(f"static inline {t} lt_min_{d}({t} a, {t} b) {{ return a < b ? a : b; }}")
                    out.append(f"static inline {t} lt_max_{d}({t} a, {t} b) {{ return a > b ? a : b; }}")
                else:  # a lane-wise blend on the comparison's mask (as the scalar form)
                    bits = dt.bits(dt.element(d))
                    m = f"lt_mask_{d}"
                    out.append(f"typedef int{bits}_t {m} __attribute__((vector_size({dt.nbytes(d)})));")
                    for fn, cmp in (("min", "<"), ("max", ">")):
                        out.append(f"static inline {t} lt_{fn}_{d}({t} a, {t} b) {{ {m} k = "
                                   f"({m})(a {cmp} b); return ({t})((k & ({m})a) | "
                                   f"(~k & ({m})b)); }}")
            elif kind == "load2":
                n, ct = dt.lanes(d), dt.c_type(dt.element(d))
                it = f"lt_shuffle_i{dt.bits(dt.element(d))}x{n}"
                mask = ", ".join(str(2 * i if i < n // 2 else 2 * i + 1) for i in range(n))
                ity = "int32_t" if dt.bits(dt.element(d)) == 32 else "int64_t"
                out.append(f"typedef {ity} {it} __attribute__((vector_size({dt.nbytes(d)})));")
                # elements p[0], p[2], ... p[2n-2]: the second load starts at p[n-1] so that
                # nothing past the last element is read
                out.append(f"static inline {t} lt_load2_{d}(const {ct}* p) {{ "
                           f"{t} a = *(const {t}_u*)p; {t} b = *(const {t}_u*)(p + {n - 1}); "
                           f"return __builtin_shuffle(a, b, ({it}){{{mask}}}); }}")
            elif kind == "vmath":
                out.append(vector_math.definitions(d, dt.lanes(d)))
            elif kind == "floordiv":
                out.append(f"static inline {t} lt_floordiv_{d}({t} a, {t} b) {{ {t} q = a / b; "
                           "return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q; }")
                out.append(f"static inline {t} lt_floormod_{d}({t} a, {t} b) {{ {t} r = a % b; "
                           "return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r; }")
        return "\n".join(out)

    # ------------------------------------------------------------------ function
    @staticmethod
    def symbol(func: PrimFunc) -> str:
        """The C name of the kernel; `<symbol>_packed(void** args)` calls it from a pointer list."""
        base = "".join(c if c.isalnum() or c == "_" else "_" for c in func.name)
        return f"{base}_kernel" if base[:1].isalpha() else f"k_{base}_kernel"

    def param_decl(self, b: Buffer) -> str:
        return f"{dt.c_type(b.dtype)}* {self.restrict} {self.name(b)}"

    def render(self, func: PrimFunc, *, meta: dict | None = None) -> str:
        meta = meta or {}
        fname = self._symbol = self.symbol(func)
        self.names.used.add(fname)
        params = [self.param_decl(b) for b in func.params]
        self.stmt(func.body, 1)
        body = "\n".join(self.lines)
        head = [f"// Machine generated by looptune {__version__}: do not edit by hand.",
                f"// function: {c_comment(func.name)}"]
        for k in ("workload", "target", "trace"):
            if k in meta:
                head.append(f"// {k}: {c_comment(meta[k])}")
        parts = ["\n".join(head), self.preamble, self.runtime_defs(), self.vector_typedefs(),
                 self.helper_defs(), *self.outlined,
                 f"{self.func_qualifier}int32_t {fname}({', '.join(params)}) {{\n{body}\n  return 0;\n}}",
                 self.packed_wrapper(func, fname)]
        return "\n\n".join(p for p in parts if p) + "\n"

    def runtime_defs(self) -> str:
        return """static int lt_num_threads = 0;
void lt_set_num_threads(int n) { lt_num_threads = n; }
static inline void* lt_alloc(size_t n) { return aligned_alloc(64, (n + 63) / 64 * 64); }"""

    def packed_wrapper(self, func: PrimFunc, fname: str) -> str:
        args = ", ".join(f"({dt.c_type(b.dtype)}*)args[{i}]" for i, b in enumerate(func.params))
        return f"int32_t {fname}_packed(void** args) {{ return {fname}({args}); }}"


def _free_names(loop: For):
    """Variables (the loop's own and enclosing loops') and buffers a parallel loop body uses
    but does not define, in a deterministic order."""
    defined, allocated = set(), set()
    used_vars, used_bufs = {}, {}

    def walk(n):
        if isinstance(n, For):
            defined.add(n.loop_var)
        elif isinstance(n, Allocate):
            allocated.add(n.buffer)
        elif isinstance(n, (BufferLoad, BufferStore)):
            used_bufs.setdefault(n.buffer, None)
        elif isinstance(n, Var):
            used_vars.setdefault(n, None)

    visit(loop.body, walk)
    free_vars = [loop.loop_var] + [v for v in used_vars if v not in defined and v is not loop.loop_var]
    return free_vars, [b for b in used_bufs if b not in allocated]


class CRenderer(CStyleRenderer):
    """CPU C with OpenMP and GCC vector extensions."""


def render_c(func: PrimFunc, *, meta: dict | None = None) -> str:
    return CRenderer().render(func, meta=meta)
