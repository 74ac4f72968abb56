"""Per-store features (FEATURE_VERSION): one row per BufferStore of a candidate's stage-1 lowered IR
(`codegen.lower_loops`), describing the statement's arithmetic, the buffers it touches, the
loop nest around it, its allocations and whether its working set fits the Target's caches.

The columns are `feature_names()`; each is documented in `_SCALAR` / `_ACCESS` below. Counts,
bytes and extents are stored as log2(1 + x) (marked "log"), flags and small integers raw.
Strides, footprints and reuse come from evaluating index expressions (access.py). Loops of
extent 1 are ignored throughout.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ...target import Target
from ...tir import dtype as dt
from ...tir.expr import Binary, Broadcast, BufferLoad, Call, Cast, Not, Ramp, Select
from ...tir.stmt import Allocate, BufferStore, For, IfThenElse, SeqStmt
from ...codegen.passes.vectorize import vector_pieces
from .access import Access
from .base import FeatureExtractor, empty, lowered_of

FEATURE_VERSION = 3  # 3: GPU launch and shared-memory columns
ACCESS_SLOTS = 5          # buffers described per store (largest bytes first), zero-padded
CACHE_LINE_BYTES = 64
LOOP_KINDS = (("vec", "vectorized"), ("unroll", "unrolled"), ("parallel", "parallel"))
POSITIONS = ("inner_spatial", "middle_spatial", "outer_spatial", "inner_reduce",
             "middle_reduce", "outer_reduce", "mixed")

# (name, log-transformed?, meaning). Arithmetic counts are of the stored value (buffer index
# arithmetic is left out: stage 2 simplifies it away), multiplied by the store's trip count.
_ARITH = [
    ("float_mad", True, "float a*b+c and a*b-c (FMA candidates; the mul is not counted again)"),
    ("float_addsub", True, "other float additions and subtractions"),
    ("float_mul", True, "other float multiplications"),
    ("float_div", True, "float divisions"),
    ("float_minmax", True, "float min/max"),
    ("float_cmp", True, "float comparisons"),
    ("float_math", True, "math intrinsics: exp, log, sqrt, tanh, erf, ..."),
    ("int_addsub", True, "integer additions and subtractions"),
    ("int_mul", True, "integer multiplications"),
    ("int_divmod", True, "integer floordiv, floormod, tdiv, tmod"),
    ("int_cmp", True, "integer comparisons and min/max"),
    ("bool_op", True, "and, or, not"),
    ("select", True, "selects (if_then_else, e.g. padding)"),
    ("cast", True, "type conversions"),
    ("other_call", True, "other intrinsics (abs)"),
    ("loads", True, "buffer loads"),
]
_SCALAR = _ARITH + [
    # the loop nest around the store (loops of extent 1 ignored)
    ("num_loops", False, "number of enclosing loops"),
    ("trip", True, "product of all enclosing extents: how often the store runs"),
    ("innermost_extent", True, "extent of the innermost loop"),
    ("outermost_extent", True, "extent of the outermost loop"),
    ("num_reduce_loops", False, "loops the stored index does not depend on"),
    ("reduce_prod", True, "product of their extents"),
    ("auto_unroll_max_step", True, "pragma_auto_unroll_max_step of the enclosing loops"),
    ("num_guards", False, "enclosing IfThenElse statements"),
    ("is_init", False, "1 if the value loads nothing (an initialisation)"),
]
for _short, _kind in LOOP_KINDS:
    _SCALAR += [
        (f"{_short}_num", False, f"number of {_kind} loops"),
        (f"{_short}_prod", True, f"product of the extents of {_kind} loops"),
        (f"{_short}_len", True, f"extent of the innermost {_kind} loop"),
    ] + [(f"{_short}_pos_{p}", False, f"one-hot: the {_kind} loops are the {p.replace('_', ' ')}"
          " loop(s) of the nest (spatial: the stored index depends on it)") for p in POSITIONS]
_SCALAR += [
    # allocations (Allocate nodes of compacted local buffers and intermediates)
    ("store_local", False, "1 if the stored buffer is local scope"),
    ("alloc_bytes", True, "bytes of the stored buffer's allocation (0: a parameter)"),
    ("alloc_outer_prod", True, "product of the extents of the loops around that allocation"),
    ("alloc_inner_prod", True, "stores per allocation: trip / alloc_outer_prod"),
    ("local_bytes", True, "bytes of all local allocations in scope of the store"),
    # working set: unique bytes of all accesses of the store inside a loop level
    ("ws_bytes", True, "unique bytes the whole nest touches"),
]
for _c in ("l1", "l2", "l3"):
    _SCALAR += [
        (f"{_c}_fit_loops", False, f"innermost loops whose working set fits in {_c.upper()}"),
        (f"{_c}_fit_iters", True, "product of their extents"),
        (f"{_c}_fit_all", False, f"1 if the whole nest's working set fits in {_c.upper()}"),
    ]
_SCALAR += [
    ("flops_per_byte", True, "float ops / ws_bytes: arithmetic intensity of the nest"),
    ("l1_flops_per_byte", True, "float ops / bytes inside the largest L1-resident loop level"),
    # the register block: the loops inside the innermost reduction loop (no reduction: the
    # innermost unrolled and vectorized loops), what a micro-kernel keeps in registers
    ("rb_elems", True, "elements the store updates per step of the innermost reduction loop"),
    ("rb_vectors", True, "vector registers they fill (a tail takes a register per piece)"),
    ("rb_load_vectors", True, "vector or broadcast loads per step to feed them"),
    ("rb_loads_per_vector", False, "rb_load_vectors / rb_vectors (FMA unit starvation)"),
    ("rb_spill", True, "vector registers the block needs beyond the target's"),
    ("rb_unrolled", False, "1 if every loop of the block is unrolled or vectorized"),
    ("rb_reduce_steps", True, "steps of the reduction loops right around the block: how long "
                              "its accumulators stay in registers between loads and stores"),
    ("vec_lane_use", False, "innermost vectorized extent / lanes of the vector pieces it is "
                            "emitted as (28 lanes on 16-lane AVX-512: 16+8+4, 28/48)"),
    # GPU: the launch around the store (all 0 on a CPU)
    ("gpu_blocks", True, "product of the extents of the blockIdx loops around the store"),
    ("gpu_threads", True, "product of the extents of its threadIdx loops: threads per block"),
    ("gpu_threads_x", True, "extent of its threadIdx.x loop (a warp is 32 of them)"),
    ("gpu_blocks_per_sm", True, "gpu_blocks / the target's streaming multiprocessors"),
    ("gpu_thread_trip", True, "trip / (gpu_blocks * gpu_threads): how often one thread runs "
                              "the store"),
    ("store_shared", False, "1 if the stored buffer is shared memory"),
    ("shared_bytes", True, "bytes of all shared allocations in scope of the store"),
]
# per buffer accessed by the store (the store's buffer and every loaded one)
_ACCESS = [
    ("read", False, "one-hot access type: read only"),
    ("write", False, "one-hot access type: written only"),
    ("rw", False, "one-hot access type: read and written"),
    ("local", False, "1 if the buffer is local scope"),
    ("shared", False, "1 if the buffer is GPU shared memory"),
    ("thread_stride", True, "|stride| in elements along the threadIdx.x loop: 1 reads a warp's "
                            "32 elements in one transaction (0: the same element for all)"),
    ("bytes", True, "bytes accessed: accesses x element size"),
    ("unique_bytes", True, "distinct bytes touched by the nest"),
    ("lines", True, "cache lines fetched, counting consecutive hits on a line once"),
    ("unique_lines", True, "distinct cache lines touched"),
    ("stride", True, "|stride| in elements of the innermost loop that changes the index"),
    ("stride_depth", False, "which loop that is: 1 = innermost, 0 = none"),
    ("reuse_depth", False, "innermost loop the index does not depend on (carries reuse): "
                           "1 = innermost, 0 = no reuse"),
    ("reuse_ct", True, "its extent: how often each element is reused"),
    ("reuse_dis_iter", True, "iterations between reuses (product of loops inside it)"),
    ("reuse_dis_bytes", True, "bytes the store touches between reuses"),
    ("bytes_d_reuse_ct", True, "bytes / reuse_ct"),
    ("unique_bytes_d_reuse_ct", True, "unique_bytes / reuse_ct"),
]

_COLUMNS = list(_SCALAR) + [(f"buf{k}.{name}", log, doc) for k in range(ACCESS_SLOTS)
                            for name, log, doc in _ACCESS]
FEATURE_WIDTH = len(_COLUMNS)
LOG_COLUMNS = np.array([log for _, log, _ in _COLUMNS])  # which columns are log2(1+x)
_N_SCALAR = len(_SCALAR)
_BYTES = [name for name, _, _ in _ACCESS].index("bytes")  # access slots: largest first


def feature_names() -> list:
    """The FEATURE_WIDTH column names, in order."""
    return [name for name, _, _ in _COLUMNS]


def feature_docs() -> list:
    """(name, meaning) of every column, log-transformed ones marked."""
    return [(name, ("log2(1+x) of " if log else "") + doc) for name, log, doc in _COLUMNS]


@FeatureExtractor.registry.register("per-store")
class PerStoreFeature(FeatureExtractor):
    """The default feature extractor ("per-store"): one row per store of the lowered program
    (columns: feature_names()); extractions are cached per lowered function."""

    version = FEATURE_VERSION
    width = FEATURE_WIDTH

    def __init__(self):
        # lowered function -> (target, features): a candidate is scored many times in a
        # search (and again when learned from); its lowered IR is computed once and shared
        self._cache = weakref.WeakKeyDictionary()

    def names(self) -> list:
        return feature_names()

    def extract(self, candidates, *, target=None) -> list:
        """The returned arrays are cached and read-only."""
        target = Target.create("cpu" if target is None else target)
        out = []
        for c in candidates:
            func = lowered_of(c, target)
            hit = self._cache.get(func)
            if hit is None or (hit[0] is not target and hit[0] != target):
                f = store_features(func, target)
                f.flags.writeable = False
                hit = self._cache[func] = (target, f)
            out.append(hit[1])
        return out


def store_features(func, target: Target) -> np.ndarray:
    """The (n_stores, FEATURE_WIDTH) matrix of a stage-1 lowered PrimFunc."""
    w = _Walker(target)
    w.stmt(func.body)
    if not w.rows:
        return empty(FEATURE_WIDTH)
    m = np.array(w.rows, dtype=np.float64)
    m[:, LOG_COLUMNS] = np.log2(1.0 + np.maximum(m[:, LOG_COLUMNS], 0.0))
    return m.astype(np.float32)


# ------------------------------------------------------------------ arithmetic counting
_A = {name: i for i, (name, _, _) in enumerate(_ARITH)}
_FLOAT_OPS = {"+": _A["float_addsub"], "-": _A["float_addsub"], "*": _A["float_mul"],
              "/": _A["float_div"], "min": _A["float_minmax"], "max": _A["float_minmax"]}
_INT_OPS = {"+": _A["int_addsub"], "-": _A["int_addsub"], "*": _A["int_mul"],
            "//": _A["int_divmod"], "%": _A["int_divmod"], "tdiv": _A["int_divmod"],
            "tmod": _A["int_divmod"], "min": _A["int_cmp"], "max": _A["int_cmp"]}
_FLOPS_WEIGHT = [0.0] * len(_ARITH)
for _name, _w in (("float_mad", 2), ("float_addsub", 1), ("float_mul", 1), ("float_div", 1),
                  ("float_minmax", 1), ("float_cmp", 1), ("float_math", 1)):
    _FLOPS_WEIGHT[_A[_name]] = _w


def _is_float(dtype: str) -> bool:
    return dt.is_float(dtype)


def _is_fmul(e) -> bool:
    return type(e) is Binary and e.op == "*" and _is_float(e.dtype)


def _count(e, c: list, loads: list) -> None:
    """Add e's operations to the counters `c` and its loads to `loads`."""
    t = type(e)
    if t is Binary:
        op = e.op
        if op in ("and", "or"):
            c[_A["bool_op"]] += 1
        elif _is_float(e.a.dtype):
            if op in ("+", "-") and (_is_fmul(e.a) or _is_fmul(e.b)):
                m, other = (e.a, e.b) if _is_fmul(e.a) else (e.b, e.a)
                c[_A["float_mad"]] += 1
                _count(m.a, c, loads)
                _count(m.b, c, loads)
                _count(other, c, loads)
                return
            c[_FLOAT_OPS.get(op, _A["float_cmp"])] += 1
        else:
            c[_INT_OPS.get(op, _A["int_cmp"])] += 1
        _count(e.a, c, loads)
        _count(e.b, c, loads)
    elif t is BufferLoad:
        c[_A["loads"]] += 1
        loads.append(e)
    elif t is Select:
        c[_A["select"]] += 1
        _count(e.cond, c, loads)
        _count(e.true_value, c, loads)
        _count(e.false_value, c, loads)
    elif t is Cast:
        c[_A["cast"]] += 1
        _count(e.value, c, loads)
    elif t is Call:
        c[_A["float_math"] if _is_float(e.dtype) and e.op != "abs" else _A["other_call"]] += 1
        for a in e.args:
            _count(a, c, loads)
    elif t is Not:
        c[_A["bool_op"]] += 1
        _count(e.a, c, loads)
    elif t is Broadcast:
        _count(e.value, c, loads)
    elif t is Ramp:
        _count(e.base, c, loads)


class _Walker:
    def __init__(self, target: Target):
        self.caches = (target.l1d_bytes, target.l2_bytes, target.l3_bytes)
        self.vector_bits = target.vector_bits
        self.num_regs = target.vector_registers
        self.sms = target.cores if target.kind == "cuda" else 0
        self.rows = []
        self.loops = []        # (var, extent, kind) of the enclosing loops of extent > 1
        self.env = {}          # their vars -> (1, extent - 1): where indices are evaluated
        self.pos = {}          # their vars -> position in self.loops
        self.memo = {}         # id(index expr) -> _points result, valid while no var is rebound
        self.bound = set()     # every loop var met so far
        self.allocs = []       # (buffer, number of enclosing loops)
        self.guards = 0
        self.unroll_steps = []

    def stmt(self, s) -> None:
        t = type(s)
        if t is For:
            trivial = s.extent <= 1
            if s.loop_var in self.bound:  # a loop copy (partitioning): cached points are stale
                self.memo = {}
            self.bound.add(s.loop_var)
            shadowed = self._shadow(s.thread) if s.kind == "thread_binding" else None
            if not trivial:
                self.pos[s.loop_var] = len(self.loops)
                self.env[s.loop_var] = (1, s.extent - 1)
                # a thread loop's kind is its tag ("threadIdx.x"): what the GPU columns read
                kind = s.thread if s.kind == "thread_binding" else s.kind
                self.loops.append((s.loop_var, s.extent, kind))
            step = s.annotation("pragma_auto_unroll_max_step")
            if step is not None:
                self.unroll_steps.append(step)
            self.stmt(s.body)
            if step is not None:
                self.unroll_steps.pop()
            if not trivial:
                self.loops.pop()
                del self.env[s.loop_var], self.pos[s.loop_var]
            if shadowed is not None:
                self._unshadow(*shadowed)
        elif t is SeqStmt:
            for x in s.stmts:
                self.stmt(x)
        elif t is Allocate:
            self.allocs.append((s.buffer, len(self.loops)))
            self.stmt(s.body)
            self.allocs.pop()
        elif t is IfThenElse:
            self.guards += 1
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
            self.guards -= 1
        elif t is BufferStore:
            self.rows.append(self.store(s))

    def _shadow(self, tag: str):
        """A thread loop inside one of the same tag (a cooperative copy inside the compute's
        threadIdx.x loop) is the same hardware index: the outer loop does not repeat what is
        inside the inner one, so it leaves the nest until the inner one ends."""
        i = next((i for i, (_, _, k) in enumerate(self.loops) if k == tag), None)
        if i is None:
            return None
        entry, allocs = self.loops.pop(i), self.allocs
        del self.env[entry[0]]
        self.allocs = [(b, d - (d > i)) for b, d in allocs]
        self._reindex()
        return i, entry, allocs

    def _unshadow(self, i, entry, allocs) -> None:
        self.loops.insert(i, entry)
        self.env[entry[0]] = (1, entry[1] - 1)
        self.allocs = allocs
        self._reindex()

    def _reindex(self) -> None:
        self.pos = {v: i for i, (v, _, _) in enumerate(self.loops)}
        self.memo = {}

    def store(self, s: BufferStore) -> list:
        loops, env, pos = self.loops, self.env, self.pos
        n = len(loops)
        suffix = [1] * (n + 1)   # suffix[i]: product of the extents of loops i..n-1
        for i in range(n - 1, -1, -1):
            suffix[i] = suffix[i + 1] * loops[i][1]
        trip = suffix[0]
        ops = [0] * len(_ARITH)
        loads = []
        _count(s.value, ops, loads)

        accesses = {}   # buffer -> list of Access (one per distinct index tuple)
        memo = self.memo
        written = Access(s.buffer, s.indices, loops, pos, env, memo)
        written.write = True
        accesses[s.buffer] = [written]
        for ld in loads:
            a = Access(ld.buffer, ld.indices, loops, pos, env, memo)
            if ld.buffer is s.buffer and a.key == written.key:
                written.read = True
                continue
            a.read = True
            accesses.setdefault(ld.buffer, []).append(a)

        spatial = written.dep
        row = [x * trip for x in ops]
        flops = sum(x * w for x, w in zip(ops, _FLOPS_WEIGHT)) * trip
        reduce_ext = [e for (_, e, _), sp in zip(loops, spatial) if not sp]
        row += [n, trip, loops[-1][1] if n else 0, loops[0][1] if n else 0,
                len(reduce_ext), math.prod(reduce_ext) if reduce_ext else 0,
                max(self.unroll_steps, default=0), self.guards, float(not loads)]
        for _, kind in LOOP_KINDS:
            row += _kind_features(loops, kind, spatial)
        row += self._alloc_features(s.buffer, trip)

        # working set per loop level: distinct bytes of every buffer inside loops i..n-1
        ws = [0] * (n + 1)
        for group in accesses.values():
            eb = group[0].eb
            fp = group[0].fp if len(group) == 1 else [max(c) for c in zip(*(a.fp for a in group))]
            ws = [w + f * eb for w, f in zip(ws, fp)]
        row.append(ws[0])
        l1_level = n
        for ci, cache in enumerate(self.caches):
            level = n
            while level > 0 and ws[level - 1] <= cache:
                level -= 1
            if ci == 0:
                l1_level = level
            row += [n - level, suffix[level], float(ws[0] <= cache)]
        row += [flops / max(ws[0], 1), flops / trip * suffix[l1_level] / max(ws[l1_level], 1)]
        row += self._register_block(loops, spatial, accesses, written)
        row += self._gpu_features(s.buffer, loops, trip)

        tx = next((i for i in range(n - 1, -1, -1) if loops[i][2] == "threadIdx.x"), None)
        slots = [_access_features(group, loops, suffix, ws, tx) for group in accesses.values()]
        slots.sort(key=lambda r: -r[_BYTES])
        for r in slots[:ACCESS_SLOTS]:
            row += r
        row += [0.0] * (len(_ACCESS) * (ACCESS_SLOTS - min(len(slots), ACCESS_SLOTS)))
        return row

    def _register_block(self, loops, spatial, accesses, written) -> list:
        n = len(loops)
        lanes = max(1, self.vector_bits // (8 * written.eb))
        # (a loop outside the accumulator's allocation moves a compacted local tile as a
        # whole: its index does not change, but the loop is not a reduction)
        floor = next((d for b, d in self.allocs if b is written.buffer), 0)
        start = next((i + 1 for i in range(n - 1, floor - 1, -1) if not spatial[i]), None)
        if start is None:  # no reduction: the innermost run of unrolled / vectorized loops
            start = n
            while start > 0 and loops[start - 1][2] in ("vectorized", "unrolled"):
                start -= 1
        block = loops[start:]
        vec = next((i for i in range(n - 1, start - 1, -1) if loops[i][2] == "vectorized"), None)
        vec_ext = loops[vec][1] if vec is not None else 1
        vec_groups = vector_instructions(vec_ext, lanes)
        elems = math.prod(e for _, e, _ in block)
        vectors = elems // vec_ext * vec_groups
        load_vecs = 0.0
        for group in accesses.values():
            for a in group:
                if not a.read or a is written:
                    continue
                fp = a.fp[start] if start < len(a.fp) else 1
                contiguous = vec is not None and a.dep[vec] and abs(a.stride[vec]) == 1
                load_vecs += fp / vec_ext * vec_groups if contiguous else fp
        unrolled = float(all(k in ("vectorized", "unrolled") for _, _, k in block))
        spill = max(0.0, vectors + min(load_vecs, 2.0) - self.num_regs)
        steps, i = 1, start - 1
        while i >= floor and not spatial[i]:
            steps *= loops[i][1]
            i -= 1
        return [elems, vectors, load_vecs, load_vecs / max(vectors, 1), spill, unrolled,
                steps,
                vec_ext / (vec_groups * lanes) if vec is not None else 0.0]

    def _gpu_features(self, buffer, loops, trip) -> list:
        if not any(k.startswith(("blockIdx", "threadIdx")) for _, _, k in loops):
            return [0.0] * 5 + [float(buffer.scope == "shared"), 0.0]
        blocks = math.prod(e for _, e, k in loops if k.startswith("blockIdx"))
        threads = math.prod(e for _, e, k in loops if k.startswith("threadIdx"))
        tx = next((e for _, e, k in loops if k == "threadIdx.x"), 1)
        shared = sum(b.size * dt.nbytes(b.dtype) for b, _ in self.allocs if b.scope == "shared")
        return [blocks, threads, tx, blocks / self.sms if self.sms else 0.0,
                trip / (blocks * threads), float(buffer.scope == "shared"), shared]

    def _alloc_features(self, buffer, trip) -> list:
        alloc_bytes = outer = 0
        local = 0
        for b, depth in self.allocs:
            nbytes = b.size * dt.nbytes(b.dtype)
            if b.scope == "local":
                local += nbytes
            if b is buffer:
                alloc_bytes = nbytes
                outer = math.prod(e for _, e, _ in self.loops[:depth])
        inner = trip / outer if outer else 0
        return [float(buffer.scope == "local"), alloc_bytes, outer, inner, local]


def vector_instructions(extent: int, lanes: int) -> int:
    """Instructions one vectorized loop of `extent` lanes becomes: its power-of-two pieces
    (vector_pieces: 28 on 16 lanes is 16 + 8 + 4), or one per lane where it stays scalar."""
    pieces = vector_pieces(extent, lanes)
    return len(pieces) if pieces else extent


def _kind_features(loops, kind, spatial) -> list:
    idx = [i for i, (_, _, k) in enumerate(loops) if k == kind]
    out = [len(idx), math.prod(loops[i][1] for i in idx) if idx else 0,
           loops[idx[-1]][1] if idx else 0]
    onehot = [0.0] * len(POSITIONS)
    if idx:
        places = {_position(i, spatial) for i in idx}
        onehot[POSITIONS.index(places.pop()) if len(places) == 1 else -1] = 1.0
    return out + onehot


def _position(i, spatial) -> str:
    same = [j for j, sp in enumerate(spatial) if sp == spatial[i]]
    where = "inner" if i == same[-1] else "outer" if i == same[0] else "middle"
    return f"{where}_{'spatial' if spatial[i] else 'reduce'}"


def _access_features(group, loops, suffix, ws, tx=None) -> list:
    """The _ACCESS columns of one buffer (several index tuples merged: the first describes
    strides and reuse, the footprints are the largest); `tx`: the position of the threadIdx.x
    loop among `loops`, if any."""
    a = group[0]
    n, trip = len(loops), suffix[0]
    read = any(x.read for x in group)
    write = any(x.write for x in group)
    eb = a.eb
    nbytes = trip * eb * len(group) * (2 if read and write else 1)
    unique = max(x.fp[0] for x in group) * eb
    inner = next((i for i in range(n - 1, -1, -1) if a.dep[i]), None)
    stride = abs(a.stride[inner]) if inner is not None else 0
    line_elems = max(1, CACHE_LINE_BYTES // eb)
    lines = math.prod(e for (_, e, _), d in zip(loops, a.dep) if d) * len(group)
    if inner is not None and 0 < stride < line_elems:
        lines /= max(1, min(loops[inner][1], line_elems // stride))
    unique_lines = max(x.fp[0] for x in group) / max(1, min(line_elems, a.run))
    reuse = next((i for i in range(n - 1, -1, -1) if not a.dep[i]), None)
    if reuse is None:
        reuse_feats = [0, 0, 0, 0, nbytes, unique]
    else:
        ct = loops[reuse][1]
        reuse_feats = [n - reuse, ct, suffix[reuse + 1], ws[reuse + 1], nbytes / ct,
                       unique / ct]
    tx_stride = abs(a.stride[tx]) if tx is not None and a.dep[tx] else 0
    return [float(read and not write), float(write and not read), float(read and write),
            float(a.local), float(a.buffer.scope == "shared"), tx_stride, nbytes, unique, lines, unique_lines, stride,
            n - inner if inner is not None else 0] + reuse_feats
