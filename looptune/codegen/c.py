"""CPU C: a lowered PrimFunc -> one C function with OpenMP for parallel loops, GCC vector
extensions for vectors, and a packed wrapper the runtime calls from a pointer list.

Vectors use GCC vector extensions: `typedef float lt_float32x8 __attribute__((vector_size(32)))`,
with unaligned loads/stores through a may_alias typedef of alignment 4.
"""
from __future__ import annotations

import re
import subprocess
from functools import lru_cache

from .. import env
from ..error import INDEX_ERROR_STATUS
from ..version import __version__
from ..tir import dtype as dt
from ..tir.expr import INDEX_CHECK_OP, Broadcast, BufferLoad, Call, Cast, Ramp, Select, Var
from ..tir.func import PrimFunc
from ..tir.functor import visit
from ..tir.intrin import get_intrin
from ..tir.intrin.base import intrin_of_op
from ..tir.stmt import Allocate, BufferStore, For
from . import vector_math
from .cstyle import CStyleRenderer, c_comment, c_identifier, c_string
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

    # ------------------------------------------------------------------ vector expressions
    def cast(self, e: Cast) -> str:
        if dt.lanes(e.dtype) > 1:
            return f"__builtin_convertvector({self.expr(e.value)}, {self.type_name(e.dtype)})"
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
        if kind == "load2":
            t = f"lt_{d}"
            n, ct = dt.lanes(d), dt.c_type(dt.element(d))
            it = f"lt_shuffle_i{dt.bits(dt.element(d))}x{n}"
            mask = ", ".join(str(2 * i if i < n // 2 else 2 * i + 1) for i in range(n))
            ity = "int32_t" if dt.bits(dt.element(d)) == 32 else "int64_t"
            # elements p[0], p[2], ... p[2n-2]: the second load starts at p[n-1] so that
            # nothing past the last element is read
            return [f"typedef {ity} {it} __attribute__((vector_size({dt.nbytes(d)})));",
                    f"static inline {t} lt_load2_{d}(const {ct}* p) {{ "
                    f"{t} a = *(const {t}_u*)p; {t} b = *(const {t}_u*)(p + {n - 1}); "
                    f"return __builtin_shuffle(a, b, ({it}){{{mask}}}); }}"]
        if kind == "vmath":
            return [vector_math.definitions(d, dt.lanes(d))]
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
        parts = ["\n".join(head), self.preamble, self.runtime_defs(fname),
                 index_error_defs(fname, sites), self.vector_typedefs(),
                 self.helper_defs(), *self.outlined,
                 f"{self.func_qualifier}int32_t {fname}({', '.join(params)}) {{\n{body}\n  return 0;\n}}",
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
