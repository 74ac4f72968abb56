"""CPU C: a lowered PrimFunc -> one C function with OpenMP for parallel loops, GCC vector
extensions for vectors, and a packed wrapper the runtime calls from a pointer list.

Vectors use GCC vector extensions: `typedef float lt_float32x8 __attribute__((vector_size(32)))`,
with unaligned loads/stores through a may_alias typedef of alignment 4.

bfloat16 has no C type here (GCC's C gained __bf16 in 13): a value is its bits, a uint16_t
(a vector of them a vector of uint16_t), as the tensor intrinsics' C takes them. Casts go
through float32 (bits << 16 one way, rounding to nearest even the other, as ml_dtypes
rounds), and each bfloat16 operation computes in float32 and rounds its result back to
bfloat16, as numpy with ml_dtypes does.
"""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache

import numpy as np

from .. import env
from ..error import INDEX_ERROR_STATUS
from ..version import __version__
from ..tir import dtype as dt
from ..tir.expr import (INDEX_CHECK_OP, Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, Ramp,
                        Select, Var)
from ..tir.func import PrimFunc
from ..tir.functor import visit
from ..tir.intrin import get_intrin
from ..tir.intrin.base import intrin_of_op
from ..tir.stmt import Allocate, BufferStore, For
from . import vector_math
from .cstyle import F32_CALLS, CStyleRenderer, c_comment, c_identifier, c_string
from .passes.check_index import INDEX_SITES

# Macros of the generated code's headers, where the compiler cannot say which (see
# header_names): math.h's constants and classification macros, the limits of stdint.h
MACROS_FALLBACK = frozenset("""INFINITY NAN HUGE_VAL HUGE_VALF HUGE_VALL FP_NAN FP_INFINITE
FP_ZERO FP_SUBNORMAL FP_NORMAL FP_ILOGB0 FP_ILOGBNAN FP_FAST_FMA FP_FAST_FMAF MATH_ERRNO
MATH_ERREXCEPT math_errhandling isnan isinf isfinite isnormal signbit fpclassify isgreater
isgreaterequal isless islessequal islessgreater isunordered M_E M_LOG2E M_LOG10E M_LN2 M_LN10
M_PI M_PI_2 M_PI_4 M_1_PI M_2_PI M_2_SQRTPI M_SQRT2 M_SQRT1_2 NULL EXIT_SUCCESS EXIT_FAILURE
RAND_MAX MB_CUR_MAX errno bool true false INT8_MIN INT8_MAX INT16_MIN INT16_MAX INT32_MIN
INT32_MAX INT64_MIN INT64_MAX UINT8_MAX UINT16_MAX UINT32_MAX UINT64_MAX INTPTR_MAX SIZE_MAX
INT64_C UINT64_C INT32_C UINT32_C unix linux""".split())


class CRenderer(CStyleRenderer):
    """CPU C with OpenMP and GCC vector extensions."""

    restrict = "restrict"
    local_align = 64
    stack_limit_bytes = 256 * 1024  # larger local buffers go to the heap
    parallel_pragma = "#pragma omp parallel for schedule(static) num_threads(lt_nt)"
    # the thread count of a parallel loop: set_num_threads's, else OpenMP's (OMP_NUM_THREADS)
    thread_count = "lt_num_threads > 0 ? lt_num_threads : omp_get_max_threads()"
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

    def identifier(self, name: str) -> str:
        return c_identifier(name, self.keywords, header_names(self.preamble))

    def __init__(self):
        super().__init__()
        self.vector_types: set = set()
        self.in_parallel = False
        self.outlined: list[str] = []
        self._symbol = "kernel"

    # ------------------------------------------------------------------ vector types
    def vector_type(self, dtype: str) -> str:
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

    # ------------------------------------------------------------------ bfloat16
    def float_literal(self, v: float, dtype: str) -> str:
        if _is_bf16(dtype):
            return f"((uint16_t){bf16_bits(v):#06x})"
        return super().float_literal(v, dtype)

    def binary(self, e: Binary, prec: int) -> str:
        if _is_bf16(e.a.dtype) or _is_bf16(e.b.dtype):
            return self.expr(_in_float32(e), prec)
        return super().binary(e, prec)

    def bf16_cast(self, value, dtype: str) -> str:
        """A cast to or from bfloat16: through float32, with the lt_*bf16* helpers."""
        n = dt.lanes(dtype)
        lanes = "" if n == 1 else f"x{n}"
        f32 = dt.with_lanes("float32", n)
        self.helpers.add(("bf16", dt.with_lanes("bfloat16", n)))
        if n > 1:  # declare the vector types the helpers take and return
            for d in (f32, dt.with_lanes("bfloat16", n)):
                self.type_name(d)
        if _is_bf16(value.dtype):
            x = f"lt_bf16{lanes}_to_f32{lanes}({self.expr(value)})"
            return x if dt.element(dtype) == "float32" else self.convert(x, dtype)
        x = self.expr(value)
        if dt.element(value.dtype) != "float32":
            x = self.convert(x, f32)
        return f"lt_f32{lanes}_to_bf16{lanes}({x})"

    def convert(self, x: str, dtype: str) -> str:
        """The rendered value `x` converted to `dtype` (no bfloat16 on either side)."""
        if dt.lanes(dtype) > 1:
            return f"__builtin_convertvector({x}, {self.type_name(dtype)})"
        return f"(({self.type_name(dtype)})({x}))"

    # ------------------------------------------------------------------ vector expressions
    def cast(self, e: Cast) -> str:
        src, dst = dt.element(e.value.dtype), dt.element(e.dtype)
        if src != dst and "bfloat16" in (src, dst):
            return self.bf16_cast(e.value, e.dtype)
        if dt.lanes(e.dtype) > 1:
            return self.convert(self.expr(e.value), e.dtype)
        return super().cast(e)

    def select(self, e: Select) -> str:
        t, f = self.expr(e.true_value, 3), self.expr(e.false_value, 3)
        if dt.lanes(e.dtype) > 1:  # a vector load's type is the unaligned variant: unify
            vt = self.type_name(e.dtype)
            t, f = f"({vt})({t})", f"({vt})({f})"
        return f"({self.expr(e.cond, 4)} ? {t} : {f})"

    def call(self, e: Call) -> str:
        intrin = intrin_of_op(e.op)
        if intrin is not None:  # tensorize: the unit's C, on its operands' first elements
            self.helpers.add(("intrin", intrin.name))
            args = [f"&{self.expr(a)}" if isinstance(a, BufferLoad) else self.expr(a)
                    for a in e.args]
            return f"{e.op}({', '.join(args)})"
        if e.op == INDEX_CHECK_OP:  # lt_err: the kernel's error record (index_error_defs)
            x, size, wrap, site = (self.expr(a) for a in e.args)
            return f"lt_check_index({x}, {size}, {wrap}, {site}, lt_err)"
        if e.op in F32_CALLS and any(_is_bf16(x.dtype) for x in (e, *e.args)):
            return self.expr(_in_float32(e))
        return super().call(e)

    def vector_call(self, e: Call, args: list) -> str:
        self.helpers.add(("vmath", e.dtype))  # vectorized by the vectorize pass: vector_math.py
        return f"lt_{e.op}_{e.dtype}({', '.join(args)})"

    def broadcast(self, e: Broadcast) -> str:
        self.type_name(e.dtype)
        return f"lt_bcast_{e.dtype}({self.expr(e.value)})"

    def ramp(self, e: Ramp) -> str:
        t = self.type_name(e.dtype)
        base = self.expr(e.base, 12)
        return f"(({t}){{{', '.join(f'{base} + {i * e.stride}' for i in range(e.lanes))}}})"

    def vector_load(self, e: BufferLoad, buf: str, idx: Ramp) -> str:
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

    def vector_store(self, s: BufferStore, depth: int, buf: str, idx: Ramp, value: str):
        t = self.type_name(s.value.dtype)
        self.emit(depth, f"*({t}_u*)({buf} + {self.expr(idx.base, 12)}) = {value};")

    # ------------------------------------------------------------------ statements
    def parallel_loop(self, s: For, depth: int):
        """The body of a parallel loop goes into a function of its own whose buffer
        parameters are `restrict`: OpenMP's outlining would otherwise drop the no-alias
        facts, and with them register tiling (measured 3.7x slower on a matmul)."""
        if self.in_parallel or self.in_simd:
            self.emit(depth, "// parallel loop nested in a parallel or vectorized loop: runs "
                      "serially")
            self.for_loop(s, depth)
            return
        free_vars, buffers = _free_names(s)
        fn = f"lt_par{len(self.outlined)}_{self._symbol}"  # lt_: no user name takes it
        params = [self.param_decl(b) for b in buffers]
        params += [f"{dt.c_type(x.dtype)} {self.names(x)}" for x in free_vars]
        checks = _has_index_check(s.body)
        params += ["lt_index_error* lt_err"] if checks else []
        saved, fixed = self.lines, self.fixed
        self.lines, self.fixed = [], {}  # copies' numbers are passed in, as arguments
        self.in_parallel = True
        self.stmt(s.body, 1)
        self.in_parallel = False
        body, self.lines, self.fixed = self.lines, saved, fixed
        begin, end = _intrinsic_bounds(s.body)  # AMX: its tiles configured on this thread
        body = [f"  {x}" for x in begin] + body + [f"  {x}" for x in end]
        self.outlined.append(f"static __attribute__((noinline)) void {fn}({', '.join(params)}) {{\n"
                             + "\n".join(body) + "\n}")
        args = [self.name(b) for b in buffers] + [self.name(x) for x in free_vars]
        args += ["lt_err"] if checks else []
        v = self.name(s.loop_var)
        head = f"for ({dt.c_type(s.loop_var.dtype)} {v} = 0; {v} < {s.extent}; ++{v}) {{"
        call = f"{fn}({', '.join(args)});"
        if s.extent == 1:  # nothing to share out
            self.emit(depth, "{")
            self.emit(depth + 1, f"const {dt.c_type(s.loop_var.dtype)} {v} = 0;")
            self.emit(depth + 1, call)
            self.emit(depth, "}")
            return
        # On one thread the loop runs without OpenMP: entering a parallel region costs about
        # 0.3 us even for a team of one, a few percent of a 10 us kernel.
        self.emit(depth, "{")
        self.emit(depth + 1, f"const int lt_nt = {self.thread_count};")
        self.emit(depth + 1, "if (lt_nt > 1) {")
        self.emit(depth + 2, self.parallel_pragma)
        for line, d in ((head, 2), (call, 3), ("}", 2)):
            self.emit(depth + d, line)
        self.emit(depth + 1, "} else {")
        for line, d in ((head, 2), (call, 3), ("}", 2)):
            self.emit(depth + d, line)
        self.emit(depth + 1, "}")
        self.emit(depth, "}")

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
    def helper_def(self, kind: str, d: str) -> list:
        if kind == "minmax" and dt.lanes(d) > 1:  # a lane-wise blend on the comparison's mask
            t = f"lt_{d}"
            bits = dt.bits(dt.element(d))
            m = f"lt_mask_{d}"
            out = [f"typedef int{bits}_t {m} __attribute__((vector_size({dt.nbytes(d)})));"]
            nan = " | (a != a)" if dt.is_float(dt.element(d)) else ""  # NaN wins, as numpy's
            for fn, cmp in (("min", "<"), ("max", ">")):
                out.append(f"static inline {t} lt_{fn}_{d}({t} a, {t} b) {{ {m} k = "
                           f"({m})((a {cmp} b){nan}); return ({t})((k & ({m})a) | "
                           f"(~k & ({m})b)); }}")
            return out
        if kind == "minmax" and dt.is_float(d):  # NaN wins, as numpy's; a bit select on
            # the comparisons' mask rather than `a < b || a != a ? a : b`, whose branch GCC
            # vectorizes only by if-conversion (off in kernels with guarded loads)
            t, bits = self.type_name(d), dt.bits(d)
            i = f"int{bits}_t"
            out = []
            for fn, cmp in (("min", "<"), ("max", ">")):
                out.append(f"static inline {t} lt_{fn}_{d}({t} a, {t} b) {{ {i} k = -({i})"
                           f"((a {cmp} b) | (a != a)), x, y; memcpy(&x, &a, {bits // 8}); "
                           f"memcpy(&y, &b, {bits // 8}); x = (x & k) | (y & ~k); "
                           f"memcpy(&a, &x, {bits // 8}); return a; }}")
            return out
        if kind == "load2":
            t = f"lt_{d}"
            n, ct = dt.lanes(d), dt.c_type(dt.element(d))
            it = f"lt_shuffle_i{dt.bits(dt.element(d))}x{n}"
            mask = ", ".join(str(2 * i if i < n // 2 else 2 * i + 1) for i in range(n))
            ity = f"int{dt.bits(dt.element(d))}_t"  # the mask's lanes are as wide as the data's
            # elements p[0], p[2], ... p[2n-2]: the second load starts at p[n-1] so that
            # nothing past the last element is read
            return [f"typedef {ity} {it} __attribute__((vector_size({dt.nbytes(d)})));",
                    f"static inline {t} lt_load2_{d}(const {ct}* p) {{ "
                    f"{t} a = *(const {t}_u*)p; {t} b = *(const {t}_u*)(p + {n - 1}); "
                    f"return __builtin_shuffle(a, b, ({it}){{{mask}}}); }}"]
        if kind == "vmath":
            return [vector_math.definitions(d, dt.lanes(d))]
        if kind == "bf16":
            return [bf16_definitions(dt.lanes(d))]
        if kind == "intrin":
            intrin = get_intrin(d)
            return [f"#include <{h}>" for h in intrin.headers] + [intrin.impl]
        return super().helper_def(kind, d)

    # ------------------------------------------------------------------ function
    def render(self, func: PrimFunc, *, meta: dict | None = None) -> str:
        meta = meta or {}
        fname = self._symbol = self.symbol(func)
        self.names.used.update((fname, f"{fname}_packed", f"{fname}_set_num_threads"))
        params = [self.param_decl(b) for b in func.params]
        sites = func.attr(INDEX_SITES, ())
        if sites:
            self.emit(1, "lt_index_error lt_err_state = {0, 0}, *lt_err = &lt_err_state;")
        self.stmt(func.body, 1)
        if sites:
            self.emit(1, "if (lt_err_state.site) {")
            self.emit(2, "lt_last_index_error = lt_err_state;")
            self.emit(2, f"return {INDEX_ERROR_STATUS:#x} + lt_err_state.site;")
            self.emit(1, "}")
        body = "\n".join(self.lines)
        head = [f"// Machine generated by looptune {__version__}: do not edit by hand.",
                f"// function: {c_comment(func.name)}"]
        for k in ("workload", "target", "trace"):
            if k in meta:
                head.append(f"// {k}: {c_comment(meta[k])}")
        kernel = f"{self.func_qualifier}int32_t {fname}({', '.join(params)}) {{\n{body}\n  return 0;\n}}"
        begin, end = _intrinsic_bounds(func.body)
        if begin:  # the kernel's body runs between its intrinsics' begin and end, whatever returns
            args = ", ".join(self.name(b) for b in func.params)
            kernel = (f"static int32_t {fname}_body({', '.join(params)}) {{\n{body}\n  return 0;\n}}\n"
                      f"{self.func_qualifier}int32_t {fname}({', '.join(params)}) {{\n"
                      + "".join(f"  {x}\n" for x in begin)
                      + f"  int32_t rc = {fname}_body({args});\n"
                      + "".join(f"  {x}\n" for x in end) + "  return rc;\n}")
        parts = ["\n".join(head), self.preamble, self.runtime_defs(fname),
                 index_error_defs(fname, sites), self.vector_typedefs(),
                 self.helper_defs(), *self.outlined, kernel,
                 self.packed_wrapper(func, fname)]
        return "\n\n".join(p for p in parts if p) + "\n"

    def runtime_defs(self, fname: str) -> str:
        """The thread count (its setter named after the kernel, so that kernels link into
        one model library) and the allocator of local buffers."""
        return f"""static int lt_num_threads = 0;
void {fname}_set_num_threads(int n) {{ lt_num_threads = n; }}
static inline void* lt_alloc(size_t n) {{ return aligned_alloc(64, (n + 63) / 64 * 64); }}"""

    def packed_wrapper(self, func: PrimFunc, fname: str) -> str:
        args = ", ".join(f"({dt.c_type(b.dtype)}*)args[{i}]" for i, b in enumerate(func.params))
        return f"int32_t {fname}_packed(void** args) {{ return {fname}({args}); }}"


def _is_bf16(dtype: str) -> bool:
    return dt.element(dtype) == "bfloat16"


def _in_float32(e):
    """`e`, an operation on bfloat16 values (a Binary or a math Call), as C computes it: on
    float32, its result rounded back to bfloat16 (a comparison's result is bool as it is)."""
    def f32(x):
        if not _is_bf16(x.dtype):
            return x
        if isinstance(x, FloatImm):  # the constant as the kernel sees it, for a reader
            return FloatImm(bf16_value(bf16_bits(x.value)), "float32")
        if isinstance(x, Broadcast):
            return Broadcast(f32(x.value), x.lanes, dt.with_lanes("float32", x.lanes))
        return Cast(x, dt.with_lanes("float32", dt.lanes(x.dtype)))

    out = dt.with_lanes("float32", dt.lanes(e.dtype)) if _is_bf16(e.dtype) else e.dtype
    if isinstance(e, Binary):
        inner = Binary(e.op, f32(e.a), f32(e.b), out)
    else:
        inner = Call(e.op, tuple(f32(a) for a in e.args), out)
    return Cast(inner, e.dtype) if _is_bf16(e.dtype) else inner


def bf16_bits(v: float) -> int:
    """The bits of `v` as bfloat16: rounded to float32, then to nearest even (what
    lt_f32_to_bf16 and ml_dtypes do; a NaN becomes the quiet NaN of its sign)."""
    with np.errstate(over="ignore"):
        u = int(np.array(v, np.float32).view(np.uint32))
    if v != v:
        return ((u >> 16) & 0x8000) | 0x7FC0
    return (u + 0x7FFF + ((u >> 16) & 1)) >> 16


def bf16_value(bits: int) -> float:
    return float(np.array(bits << 16, np.uint32).view(np.float32))


def bf16_definitions(lanes: int) -> str:
    """C of the bfloat16 <-> float32 conversions, scalar (lanes 1: lt_bf16_to_f32,
    lt_f32_to_bf16) or on vectors of `lanes` (lt_bf16x8_to_f32x8, lt_f32x8_to_bf16x8, on
    lt_bfloat16x8 and lt_float32x8, typedef'd before). float32 -> bfloat16 rounds to nearest
    even: adding 0x7fff plus the kept part's lowest bit carries into it exactly when the
    dropped half is over a half, or a half with the kept part odd; a NaN becomes the quiet
    NaN of its sign, 0x7fc0 or 0xffc0, as ml_dtypes makes it (payload bits are dropped). No
    branch and no float compare: GCC vectorizes the scalar form in a plain loop (where
    if-conversion is off, runtime/compiler.py), and -ffast-math cannot drop the NaN test."""
    if lanes == 1:
        return """static inline float lt_bf16_to_f32(uint16_t h) {
  uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t lt_f32_to_bf16(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  uint32_t nan = -(uint32_t)((u & 0x7fffffffu) > 0x7f800000u);
  uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((nan & (((u >> 16) & 0x8000u) | 0x7fc0u)) | (~nan & r)); }"""
    n, u32 = lanes, f"lt_bf16_u32x{lanes}"
    b, f = f"lt_bfloat16x{n}", f"lt_float32x{n}"
    return f"""typedef uint32_t {u32} __attribute__((vector_size({4 * n})));
static inline {f} lt_bf16x{n}_to_f32x{n}({b} h) {{
  return ({f})(__builtin_convertvector(h, {u32}) << 16); }}
static inline {b} lt_f32x{n}_to_bf16x{n}({f} x) {{
  {u32} u = ({u32})x;
  {u32} nan = ({u32})((u & 0x7fffffffu) > 0x7f800000u);
  {u32} r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  r = (nan & (((u >> 16) & 0x8000u) | 0x7fc0u)) | (~nan & r);
  return __builtin_convertvector(r, {b}); }}"""


def index_error_defs(fname: str, sites) -> str:
    """What a kernel with checked indices (passes/check_index.py) needs: its error record,
    the check, and `<fname>_index_error`, which tells the caller (runtime/module.py) about
    this thread's last out-of-range index: info = {value, axis, size, wrap, parameter
    position of the buffer or -1}, names[0] = the buffer, names[1] = the kernel; it returns
    the site (0: none). The first failing check of a call wins; the others (other threads of
    a parallel loop) leave the record alone."""
    if not sites:
        return ""
    names = ", ".join(c_string(site[0]) for site in sites)
    info = ", ".join("{" + ", ".join(str(int(v)) for v in site[1:]) + "}" for site in sites)
    return f"""typedef struct {{ int32_t site; int64_t value; }} lt_index_error;
static _Thread_local lt_index_error lt_last_index_error;
static const char* const lt_index_buffers[] = {{{names}}};
static const int64_t lt_index_info[][4] = {{{info}}};
static inline int64_t lt_check_index(int64_t i, int64_t size, int wrap, int32_t site,
                                     lt_index_error* err) {{
  if (__builtin_expect(i >= size || i < (wrap ? -size : 0), 0)) {{
    int32_t none = 0;
    if (__atomic_compare_exchange_n(&err->site, &none, site, 0, __ATOMIC_RELAXED,
                                    __ATOMIC_RELAXED))
      __atomic_store_n(&err->value, i, __ATOMIC_RELAXED);
    return 0;
  }}
  return i < 0 ? i + size : i;
}}
int32_t {fname}_index_error(int64_t* info, const char** names) {{
  int32_t site = lt_last_index_error.site;
  if (site < 1 || site > {len(sites)}) return 0;
  info[0] = lt_last_index_error.value;
  for (int k = 0; k < 4; ++k) info[k + 1] = lt_index_info[site - 1][k];
  names[0] = lt_index_buffers[site - 1];
  names[1] = "{fname}";
  return site;
}}"""


def _intrinsic_bounds(s) -> tuple:
    """The begin and end statements of the tensor intrinsics `s` calls (each kind once)."""
    from .passes.tensorize import intrinsics_used
    used = [i for i in intrinsics_used(s) if i.begin or i.end]
    begin = list(dict.fromkeys(i.begin for i in used if i.begin))
    end = list(dict.fromkeys(i.end for i in used if i.end))
    return begin, end[::-1]


def _has_index_check(s) -> bool:
    found = []
    visit(s, lambda n: found.append(n) if isinstance(n, Call) and n.op == INDEX_CHECK_OP
          else None)
    return bool(found)


@lru_cache(maxsize=None)
def header_names(preamble: str) -> frozenset:
    """Every name `preamble`'s headers define or declare, with OpenMP on: their macros (the
    compiler's own list, `cc -dM -E`) and the identifiers of their declarations (types such
    as int32_t and size_t, functions, enumerators: `cc -E`), plus MACROS_FALLBACK. A tensor
    named INFINITY, NAN, int32_t or omp_get_wtime must not become one of them in the code."""
    found: list = []
    for flag, pattern in (("-dM", r"^#define\s+([A-Za-z_]\w*)"), ("-P", r"[A-Za-z_]\w*")):
        try:
            out = subprocess.run([env.cc(), flag, "-E", "-fopenmp", "-x", "c", "-"],
                                 input=preamble, capture_output=True, text=True, timeout=60)
            found += re.findall(pattern, out.stdout, re.M)
        except (OSError, subprocess.TimeoutExpired):
            pass
    return MACROS_FALLBACK | frozenset(found)


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


def render_c(func: PrimFunc, *, meta: dict | None = None) -> str:
    return CRenderer().render(func, meta=meta)
