"""CUDA C: a GpuProgram (codegen/gpu/program.py) -> one `extern "C" __global__` function per
kernel, and the launch table the runtime reads (`launch_table`).

A thread_binding loop is the hardware index it names (`const int tx = threadIdx.x;`, declared
at the kernel's top), guarded by `if (tx < extent)` where its extent is less than the launch's.
Shared buffers are `__shared__` arrays (over 48 KB in all: one `extern __shared__` block, sized
at launch); `Allocate` in a body is a per-thread (register) array. Vector statements from the
vectorize pass are scalarized lane by lane, except their loads and stores: those are `float4`
(`__half2`, ...) accesses where the index is provably a multiple of the lanes (cudaMalloc
returns 256-byte aligned memory; shared and local arrays are declared 16-byte aligned), and
element by element elsewhere."""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..version import __version__
from ..error import BuildError
from ..tir import dtype as dt
from ..tir.arith import Simplifier
from ..tir.arith.simplify import atom_key
from ..tir.buffer import Buffer
from ..tir.expr import (Binary, Broadcast, BufferLoad, Call, Cast, IntImm, Not, Ramp, Select, Var,
                        binary, const)
from ..tir.functor import find_stmts, visit
from ..tir.stmt import Allocate, BufferStore, For
from .cstyle import C_KEYWORDS, F32_CALLS, F64_CALLS, CStyleRenderer, c_comment, c_identifier
from .gpu.program import BLOCK_TAGS, THREAD_TAGS, GpuProgram, Kernel

# C++ keywords, CUDA's built-in variables and the device functions the code calls: no
# variable or buffer may shadow them
CUDA_KEYWORDS = C_KEYWORDS | frozenset("""alignas alignof asm catch class constexpr
const_cast decltype delete dynamic_cast explicit export friend mutable namespace new noexcept
nullptr operator private protected public reinterpret_cast static_assert static_cast template
this thread_local throw try typeid typename using virtual wchar_t threadIdx blockIdx blockDim
gridDim warpSize min max abs llabs fabs fabsf exp expf log logf sqrt sqrtf rsqrt rsqrtf tanh
tanhf erf erff pow powf floor floorf ceil ceilf sin sinf cos cosf round roundf nearbyint
nearbyintf hexp hlog hsqrt hrsqrt hfloor hceil hsin hcos half""".split())

MAX_STATIC_SHARED_BYTES = 48 * 1024  # more needs dynamic shared memory and an opt-in

_TYPES = {"bool": "bool", "int8": "signed char", "int16": "short", "int32": "int",
          "int64": "long long", "uint8": "unsigned char", "float16": "__half",
          "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double"}

# (element, lanes) -> (vector type, constructor, lane fields)
_VECTORS = {("float32", 4): ("float4", "make_float4", "xyzw"),
            ("float32", 2): ("float2", "make_float2", "xy"),
            ("float64", 2): ("double2", "make_double2", "xy"),
            ("int32", 4): ("int4", "make_int4", "xyzw"),
            ("int32", 2): ("int2", "make_int2", "xy"),
            ("float16", 2): ("__half2", "__halves2half2", "xy"),
            ("bfloat16", 2): ("__nv_bfloat162", "__halves2bfloat162", "xy")}
_RAW = {4: "unsigned int", 8: "uint2", 16: "uint4"}  # bytes -> a type to move them as one

# math on __half / __nv_bfloat16 with a function of its own (cuda_fp16.h, cuda_bf16.h); the
# others convert through float
_HALF_CALLS = {"exp": "hexp({0})", "log": "hlog({0})", "sqrt": "hsqrt({0})",
               "rsqrt": "hrsqrt({0})", "floor": "hfloor({0})", "ceil": "hceil({0})",
               "sin": "hsin({0})", "cos": "hcos({0})", "abs": "__habs({0})"}
_F32 = {**F32_CALLS, "rsqrt": "rsqrtf({0})"}
_F32_FAST = {**_F32, "exp": "__expf({0})", "log": "__logf({0})", "sin": "__sinf({0})",
             "cos": "__cosf({0})", "pow": "__powf({0}, {1})",
             "sigmoid": "(1.0f / (1.0f + __expf(-({0}))))"}
_F64 = {**F64_CALLS, "rsqrt": "rsqrt({0})"}


@dataclass(frozen=True)
class KernelLaunch:
    """How the runtime launches one kernel of a program."""
    name: str                  # the __global__ function's name
    grid: tuple                # (x, y, z) thread blocks
    block: tuple               # (x, y, z) threads per block
    shared_bytes: int          # shared memory of one block, in all
    dynamic_shared_bytes: int  # the part given at launch (extern __shared__); 0: all static
    args: tuple                # per parameter: ("param", i) or ("intermediate", j)

    def to_json(self) -> dict:
        return {"name": self.name, "grid": list(self.grid), "block": list(self.block),
                "shared_bytes": self.shared_bytes,
                "dynamic_shared_bytes": self.dynamic_shared_bytes,
                "args": [list(a) for a in self.args]}

    @staticmethod
    def from_json(d: dict) -> "KernelLaunch":
        return KernelLaunch(d["name"], tuple(d["grid"]), tuple(d["block"]), d["shared_bytes"],
                            d["dynamic_shared_bytes"], tuple((k, int(i)) for k, i in d["args"]))


def kernel_symbols(program: GpuProgram) -> list:
    """The C name of each kernel: its name made an identifier, unique in the program."""
    out, used = [], set()
    for k in program.kernels:
        base = c_identifier(k.name, CUDA_KEYWORDS)
        n, i = base, 1
        while n in used:
            n, i = f"{base}_{i}", i + 1
        used.add(n)
        out.append(n)
    return out


def launch_table(program: GpuProgram) -> tuple:
    """A KernelLaunch per kernel, in launch order."""
    params, inter = list(program.func.params), list(program.intermediates)
    out = []
    for k, sym in zip(program.kernels, kernel_symbols(program)):
        args = []
        for b in k.params:
            if any(b is p for p in params):
                args.append(("param", next(i for i, p in enumerate(params) if p is b)))
            elif any(b is p for p in inter):
                args.append(("intermediate", next(i for i, p in enumerate(inter) if p is b)))
            else:
                raise BuildError(f"kernel {k.name}: its parameter {b.name} is neither a "
                                 f"parameter of {program.func.name} nor an intermediate of the "
                                 "program (a GPU lowering bug)")
        _check_launch(k)
        dynamic = k.shared_bytes if _dynamic_shared(k) else 0
        out.append(KernelLaunch(sym, tuple(k.grid), tuple(k.block), k.shared_bytes, dynamic,
                                tuple(args)))
    return tuple(out)


def _check_launch(k: Kernel):
    for what, dims in (("grid", k.grid), ("block", k.block)):
        if len(dims) != 3 or any(not isinstance(d, int) or d < 1 for d in dims):
            raise BuildError(f"kernel {k.name}: its {what} {dims} must be three whole numbers "
                             ">= 1")


def _dynamic_shared(k: Kernel) -> bool:
    return k.shared_bytes > MAX_STATIC_SHARED_BYTES


def _round16(n: int) -> int:
    return (n + 15) // 16 * 16


class CUDARenderer(CStyleRenderer):
    """CUDA C for NVRTC or nvcc. `fast_math` uses the hardware approximations (__expf,
    __logf, __sinf, __cosf, __powf: a few ulp less accurate) for float32 math."""

    keywords = CUDA_KEYWORDS
    restrict = "__restrict__"
    helper_qualifier = "static __device__ __forceinline__"
    type_names = _TYPES
    int64_format = "{}LL"
    barrier = "__syncthreads();"
    shfl_down = "__shfl_down_sync(0xffffffffu, {0}, {1}, {2})"
    unroll_pragma = "#pragma unroll {n}"

    def __init__(self, *, fast_math: bool = False):
        super().__init__()
        self.fast_math = fast_math
        self.elements: set = set()   # element types used: which headers to include
        self.dom: dict = {}          # loop var -> (0, extent - 1), for alignment proofs
        self.launch: dict = {}       # thread tag -> launch dimension, in the current kernel
        self.globals: set = set()    # buffers from cudaMalloc (256-byte aligned)
        self.aligned16: set = set()  # shared and local arrays declared __align__(16)
        self.temps = 0

    # ------------------------------------------------------------------ types and literals
    def type_name(self, dtype: str) -> str:
        self.elements.add(dt.element(dtype))
        return super().type_name(dtype)

    def float_literal(self, v: float, dtype: str) -> str:
        e = dt.element(dtype)
        if e in ("float16", "bfloat16"):
            return f"{self.type_name(e)}({self.float_literal(v, 'float32')})"
        if math.isnan(v) or math.isinf(v):  # no math.h under NVRTC: the bits themselves
            if e == "float64":
                text = ("__longlong_as_double(0x7ff8000000000000LL)" if math.isnan(v)
                        else "__longlong_as_double(0x7ff0000000000000LL)")
            else:
                text = "__int_as_float(0x7fffffff)" if math.isnan(v) else "__int_as_float(0x7f800000)"
            return f"(-{text})" if math.isinf(v) and v < 0 else text
        return super().float_literal(v, dtype)

    def math_call(self, op: str, dtype: str, args: list) -> str:
        e = dt.element(dtype)
        if e in ("float16", "bfloat16"):
            if op in _HALF_CALLS:
                return _HALF_CALLS[op].format(*args)
            as_float = _F32[op].format(*(f"(float)({a})" for a in args))
            return f"{self.type_name(e)}({as_float})"
        table = (_F32_FAST if self.fast_math else _F32) if e == "float32" else _F64
        return table[op].format(*args)

    # ------------------------------------------------------------------ loops
    def loop(self, s: For, depth: int):
        self.dom[s.loop_var] = (0, s.extent - 1)
        super().loop(s, depth)

    def thread_loop(self, s: For, depth: int):
        """The index was declared at the kernel's top; only the guard is left."""
        n = self.launch.get(s.thread)
        if n is None:
            raise BuildError(f"loop {s.loop_var.name} is bound to {s.thread!r}: use one of "
                             f"{', '.join(BLOCK_TAGS + THREAD_TAGS)}")
        if s.extent > n:
            raise BuildError(f"loop {s.loop_var.name} ({s.thread}) has {s.extent} iterations "
                             f"but the kernel launches {n} along {s.thread}")
        if s.extent == n:
            self.stmt(s.body, depth)
            return
        self.emit(depth, f"if ({self.name(s.loop_var)} < {s.extent}) {{")
        self.stmt(s.body, depth + 1)
        self.emit(depth, "}")

    def allocate(self, s: Allocate, depth: int):
        """A per-thread array (registers, where its indices are known at compile time); a
        "shared" one is a __shared__ array of the block."""
        b = s.buffer
        nbytes = b.size * dt.nbytes(b.dtype)
        align = "__align__(16) " if nbytes >= 16 else ""
        if align:
            self.aligned16.add(b)
        shared = "__shared__ " if b.scope == "shared" else ""
        self.emit(depth, f"{shared}{align}{self.type_name(b.dtype)} {self.name(b)}[{b.size}];")
        self.stmt(s.body, depth)

    # ------------------------------------------------------------------ vectors
    def store(self, s: BufferStore, depth: int):
        idx = s.indices[0]
        if not isinstance(idx, Ramp):
            super().store(s, depth)
            return
        buf = self.name(s.buffer)
        elem = dt.element(s.value.dtype)
        hoisted = self.hoist_loads(s.value, depth)
        lanes = [self.expr(self.lane(s.value, i, hoisted)) for i in range(idx.lanes)]
        for v in (v for vs in hoisted.values() for v in vs):
            del self.fixed[v]
        k, aligned = self.chunking(s.buffer, idx, elem)
        if not aligned:
            for i in range(idx.lanes):
                self.emit(depth, f"{buf}[{self.expr(self.lane(idx, i, None))}] = {lanes[i]};")
            return
        for j in range(0, idx.lanes, k):
            at = f"{buf} + {self.expr(_plus(idx.base, j), 12)}"
            vec = _VECTORS.get((elem, k))
            if vec is not None:
                self.emit(depth, f"*({vec[0]}*)({at}) = {vec[1]}({', '.join(lanes[j:j + k])});")
            else:  # moved as raw bytes through an aligned array
                raw, tmp = _RAW[k * dt.nbytes(elem)], self.temp()
                self.emit(depth, "{")
                self.emit(depth + 1, f"__align__(16) {self.type_name(elem)} {tmp}[{k}] = "
                                     f"{{{', '.join(lanes[j:j + k])}}};")
                self.emit(depth + 1, f"*({raw}*)({at}) = *(const {raw}*){tmp};")
                self.emit(depth, "}")

    def hoist_loads(self, value, depth: int) -> dict:
        """Declare the vector loads of a vector statement's value as temporaries, one vector
        access per chunk, before it: {load key: one Var per lane, rendered as the lane}.
        Loads inside a Select's branches stay where they are: only the chosen side may be
        read (a padding guard keeps out-of-bounds reads there)."""
        out: dict = {}
        for ld in _unconditional_vector_loads(value):
            key = _load_key(ld)
            if key in out:
                continue
            idx, elem = ld.indices[0], dt.element(ld.dtype)
            k, aligned = self.chunking(ld.buffer, idx, elem)
            if k == 1:
                continue
            buf = self.name(ld.buffer)
            lane_vars = []
            for j in range(0, idx.lanes, k):
                tmp = self.temp()
                vec = _VECTORS.get((elem, k))
                if aligned:
                    at = f"{buf} + {self.expr(_plus(idx.base, j), 12)}"
                    if vec is not None:
                        self.emit(depth, f"const {vec[0]} {tmp} = *(const {vec[0]}*)({at});")
                    else:
                        raw = _RAW[k * dt.nbytes(elem)]
                        self.emit(depth, f"__align__(16) {self.type_name(elem)} {tmp}[{k}];")
                        self.emit(depth, f"*({raw}*){tmp} = *(const {raw}*)({at});")
                else:  # element by element into a vector value
                    elems = [self.expr(BufferLoad(ld.buffer, (self.lane(idx, j + i, None),), elem))
                             for i in range(k)]
                    self.emit(depth, f"const {vec[0]} {tmp} = {vec[1]}({', '.join(elems)});")
                for i in range(k):
                    v = Var(f"{tmp}_{i}", elem)
                    self.fixed[v] = f"{tmp}.{vec[2][i]}" if vec is not None else f"{tmp}[{i}]"
                    lane_vars.append(v)
            out[key] = lane_vars
        return out

    def chunking(self, buf: Buffer, idx: Ramp, elem: str) -> tuple:
        """(k, aligned): access `idx`'s lanes k at a time as one vector access (aligned), or
        build k-lane vector values element by element (not aligned; k == 1: no vectors)."""
        n, eb = idx.lanes, dt.nbytes(elem)
        if idx.stride == 1:
            align = min(16, self.buffer_align(buf))
            k = 1 << (n.bit_length() - 1)
            while k >= 2:
                nbytes = k * eb
                if (n % k == 0 and 4 <= nbytes <= align and
                        ((elem, k) in _VECTORS or nbytes in _RAW) and
                        self.multiple_of(idx.base, k)):
                    return k, True
                k //= 2
        for (e, k) in _VECTORS:  # widest first
            if e == elem and n % k == 0:
                return k, False
        return 1, False

    def buffer_align(self, buf: Buffer) -> int:
        if buf in self.globals:
            return 256
        if buf in self.aligned16:
            return 16
        return dt.nbytes(buf.dtype)

    def multiple_of(self, e, k: int) -> bool:
        """Is integer `e` a multiple of k for every value of the loop variables around?"""
        simp = Simplifier(self.dom)
        aff = simp.affine(e)
        if aff.const % k == 0 and all(c % k == 0 for _, c in aff.terms.values()):
            return True
        m = simp(binary("%", e, const(k, e.dtype)))
        return isinstance(m, IntImm) and m.value == 0

    def lane(self, e, i: int, hoisted):
        """Lane i of vector expression `e` as a scalar expression."""
        if dt.lanes(e.dtype) == 1:
            return e
        elem = dt.element(e.dtype)
        if isinstance(e, Broadcast):
            return e.value
        if isinstance(e, Ramp):
            return _plus(e.base, i * e.stride)
        if isinstance(e, BufferLoad):
            idx = e.indices[0]
            if hoisted and _load_key(e) in hoisted:
                return hoisted[_load_key(e)][i]
            return BufferLoad(e.buffer, (self.lane(idx, i, None),), elem)
        if isinstance(e, Binary):
            return Binary(e.op, self.lane(e.a, i, hoisted), self.lane(e.b, i, hoisted), elem)
        if isinstance(e, Cast):
            return Cast(self.lane(e.value, i, hoisted), elem)
        if isinstance(e, Call):
            return Call(e.op, tuple(self.lane(a, i, hoisted) for a in e.args), elem)
        if isinstance(e, Select):
            return Select(self.lane(e.cond, i, hoisted), self.lane(e.true_value, i, None),
                          self.lane(e.false_value, i, None), elem)
        if isinstance(e, Not):
            return Not(self.lane(e.a, i, hoisted), elem)
        raise BuildError(f"CUDARenderer cannot scalarize the vector expression {e!r}")

    def vector_load(self, e, buf, idx):
        raise BuildError(f"a vector load of {buf} outside a vector store: the CUDA renderer "
                         "renders vectors only as stored values")

    def temp(self) -> str:
        self.temps += 1
        return f"lt_v{self.temps - 1}"

    # ------------------------------------------------------------------ kernels
    def param_decl(self, b: Buffer, written: bool = True) -> str:
        const_ = "" if written else "const "
        return f"{const_}{self.type_name(b.dtype)}* {self.restrict} {self.name(b)}"

    def kernel(self, k: Kernel, symbol: str, launch: KernelLaunch) -> str:
        self.lines, self.dom = [], {}
        self.launch = {**dict(zip(THREAD_TAGS, k.block)), **dict(zip(BLOCK_TAGS, k.grid))}
        self.globals.update(k.params)
        written = {s.buffer for s in find_stmts(k.body, BufferStore)}
        params = [self.param_decl(b, b in written) for b in k.params]
        if launch.dynamic_shared_bytes:
            self.emit(1, "extern __shared__ __align__(16) unsigned char lt_smem[];")
            offset = 0
            for b in k.shared:
                t = self.type_name(b.dtype)
                self.emit(1, f"{t}* {self.restrict} {self.name(b)} = ({t}*)(lt_smem + {offset});")
                offset += _round16(b.size * dt.nbytes(b.dtype))
        else:
            for b in k.shared:
                self.emit(1, f"__shared__ __align__(16) {self.type_name(b.dtype)} "
                             f"{self.name(b)}[{b.size}];")
        self.aligned16.update(k.shared)
        for var, tag in _thread_vars(k):
            self.emit(1, f"const {self.type_name(var.dtype)} {self.name(var)} = {tag};")
        self.stmt(k.body, 1)
        body = "\n".join(self.lines)
        return "\n".join([*_launch_comment(k, launch, self.name),
                          f'extern "C" __global__ void __launch_bounds__({k.threads_per_block}) '
                          f"{symbol}({', '.join(params)}) {{", body, "}"])

    def render(self, program: GpuProgram, *, meta: dict | None = None) -> str:
        meta = meta or {}
        table = launch_table(program)
        for sym in kernel_symbols(program):
            self.names.used.add(sym)
        self.globals.update(program.func.params)
        self.globals.update(program.intermediates)
        kernels = [self.kernel(k, launch.name, launch)
                   for k, launch in zip(program.kernels, table)]
        helpers = self.helper_defs()
        head = [f"// Machine generated by looptune {__version__}: do not edit by hand.",
                f"// function: {c_comment(program.func.name)}"]
        for key in ("workload", "target", "trace"):
            if key in meta:
                head.append(f"// {key}: {c_comment(meta[key])}")
        head.append(f"// {len(table)} kernel{'s' * (len(table) != 1)}, launched in order:")
        for launch in table:
            head.append(f"//   {launch.name}: {_launch_text(launch)}")
        for b in program.intermediates:
            head.append(f"// intermediate {c_comment(self.name(b))}: {b.size} x {b.dtype} in "
                        "global memory, allocated by the runtime")
        includes = [f"#include <{h}>" for e, h in (("float16", "cuda_fp16.h"),
                                                   ("bfloat16", "cuda_bf16.h"))
                    if e in self.elements]
        parts = ["\n".join(head), "\n".join(includes), helpers, *kernels]
        return "\n\n".join(p for p in parts if p) + "\n"


def _launch_text(launch: KernelLaunch) -> str:
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    shared = (f"{launch.shared_bytes} bytes of shared memory "
              f"({'dynamic' if launch.dynamic_shared_bytes else 'static'})"
              if launch.shared_bytes else "no shared memory")
    return (f"grid {tuple(launch.grid)}, block {tuple(launch.block)} ({threads} threads), "
            f"{shared}")


def _launch_comment(k: Kernel, launch: KernelLaunch, name) -> list:
    return [f"// launch: {_launch_text(launch)}",
            f"// arguments: {', '.join(c_comment(name(b)) for b in k.params) or 'none'}"]


def _thread_vars(k: Kernel) -> list:
    """(var, tag) of the kernel's thread_binding loops, each var once, in order."""
    out: dict = {}
    for lp in find_stmts(k.body, For):
        if lp.kind != "thread_binding":
            continue
        tag = out.setdefault(lp.loop_var, lp.thread)
        if tag != lp.thread:
            raise BuildError(f"kernel {k.name}: loop variable {lp.loop_var.name} is bound to "
                             f"both {tag} and {lp.thread}")
    return list(out.items())


def _plus(base, k: int):
    """base + k, folding k into a constant term of base (x + 1 + 2 -> x + 3)."""
    if isinstance(base, Binary) and base.op in ("+", "-") and isinstance(base.b, IntImm):
        c = base.b.value if base.op == "+" else -base.b.value
        return binary("+", base.a, const(c + k, base.dtype)) if c + k >= 0 else \
            binary("-", base.a, const(-(c + k), base.dtype))
    return binary("+", base, const(k, base.dtype))


def _load_key(ld: BufferLoad):
    idx = ld.indices[0]
    return (ld.buffer, atom_key(idx.base), idx.stride, idx.lanes)


def _unconditional_vector_loads(e) -> list:
    """The vector loads of `e` (Ramp indices) outside the branches of its Selects, in order."""
    out = []

    def fn(n):
        if isinstance(n, Select):
            visit(n.cond, fn)
            return False
        if isinstance(n, BufferLoad) and isinstance(n.indices[0], Ramp):
            out.append(n)
            return False
        return None

    visit(e, fn)
    return out


def render_cuda(program: GpuProgram, *, meta: dict | None = None,
                fast_math: bool = False) -> str:
    """The CUDA C of `program`; `meta` (workload, target, trace) goes in the header."""
    return CUDARenderer(fast_math=fast_math).render(program, meta=meta)
