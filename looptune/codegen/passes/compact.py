"""Buffer compaction: allocate each intermediate buffer inside the innermost loop that
encloses all its accesses, shrunk to the region accessed per iteration of that loop.

After compute_at / cache_write, a buffer such as C_local[1024, 1024] is only touched inside
one tile loop, as C_local[i0*8 + i1, j0*16 + j1]; it becomes C_local[8, 16], indexed
[i1, j1], allocated per iteration of the tile loop: a stack array the C compiler can keep in
registers, and private to each thread under a parallel loop.
"""
from __future__ import annotations

import dataclasses

from ...tir.arith import Simplifier, const_extent, eval_bound
from ...tir.arith.simplify import Affine
from ...tir.expr import BufferLoad, IntImm, Var, binary, const
from ...tir.func import PrimFunc
from ...tir.functor import map_children, node_fields, stmt_children, transform, uses_var, visit
from ...tir.stmt import Allocate, BlockRealize, BufferStore, Comment, For, IfThenElse, seq


def accumulation_loops(func: PrimFunc) -> dict:
    """{buffer: loop vars along which a reduction block accumulates into it}, read from the
    block-level function (before lower_blocks): the loops driving its reduction variables."""
    out: dict = {}

    def walk(s, loops):
        if isinstance(s, For):
            loops = loops + (s.loop_var,)
        elif isinstance(s, BlockRealize):
            red = [v for iv, v in zip(s.block.iter_vars, s.iter_values) if iv.kind == "R"]
            acc = {lv for lv in loops if any(uses_var(v, {lv}) for v in red)}
            for w in s.block.writes:
                out.setdefault(w.buffer, set()).update(acc)
        for x in stmt_children(s):
            walk(x, loops)

    walk(func.body, ())
    return out


def compact_buffers(func: PrimFunc, accumulation: dict | None = None, *,
                    gpu: bool = False) -> PrimFunc:
    """`accumulation` ({buffer: loop vars}, from accumulation_loops on the block-level
    function) says which loops a buffer accumulates over; without it, a loop counts as
    accumulating when its variable is not an affine term of a read-modify-write index.

    With `gpu`, storage follows the thread hierarchy: a "shared" buffer holds what all
    threads of a block touch (threadIdx and vthread loops around its accesses are relaxed,
    as loops inside them are), an intermediate whose accesses share a threadIdx loop becomes
    "local" (one per thread), one inside a blockIdx loop only becomes "shared", and one outside
    every kernel stays global."""
    body, allocs = func.body, []
    while isinstance(body, Allocate):
        allocs.append(body.buffer)
        body = body.body
    accesses = _collect(body, set(allocs))
    keep, moves = [], {}
    for buf in allocs:
        plan = _plan(buf, accesses.get(buf, []), None if accumulation is None
                     else accumulation.get(buf, set()), gpu=gpu)
        if plan is None:
            keep.append(buf)
        else:
            moves[buf] = plan
    if moves:
        body = _rewrite(body, moves)
    for buf in reversed(keep):
        body = Allocate(buf, body)
    return func.with_body(body)


def _collect(body, targets: set) -> dict:
    """{buffer: [(indices, loops enclosing the access, is a read-modify-write store,
    conditions it runs under)]}."""
    out: dict = {}

    def expr_loads(e, loops, conds):
        def fn(n):
            if isinstance(n, BufferLoad) and n.buffer in targets:
                out.setdefault(n.buffer, []).append((n.indices, loops, False, conds))
        visit(e, fn)

    def walk(s, loops, conds):
        if isinstance(s, For):
            loops = loops + (s,)
        elif isinstance(s, IfThenElse):
            expr_loads(s.cond, loops, conds)
            walk(s.then_case, loops, conds + (s.cond,))
            if s.else_case is not None:
                walk(s.else_case, loops, conds)
            return
        elif isinstance(s, BufferStore):
            if s.buffer in targets:
                rmw = reads_itself(s)
                out.setdefault(s.buffer, []).append((s.indices, loops, rmw, conds))
            expr_loads(s.value, loops, conds)
            for i in s.indices:
                expr_loads(i, loops, conds)
        for x in stmt_children(s):
            walk(x, loops, conds)

    walk(body, (), ())
    return out


def _upper_limits(conds) -> list:
    """(expression, its largest value) for the conditions `e < c` / `e <= c` (c a constant)
    among `conds`, split at `and`: the guard of a split that does not divide its loop, such
    as `fused_0 * 256 + fused_1 < 600`."""
    out = []
    stack = list(conds)
    while stack:
        c = stack.pop()
        op = getattr(c, "op", None)
        if op == "and":
            stack += [c.a, c.b]
        elif op in ("<", "<=") and isinstance(c.b, IntImm):
            out.append((c.a, c.b.value - (op == "<")))
    return out


def _same(a, b) -> bool:
    """Are two expressions the same, variable for variable (not up to renaming)?"""
    if a is b:
        return True
    if type(a) is not type(b) or isinstance(a, Var):
        return False
    if not hasattr(a, "__dataclass_fields__"):
        return a == b
    for name in node_fields(type(a)):
        x, y = getattr(a, name), getattr(b, name)
        if isinstance(x, tuple):
            if not isinstance(y, tuple) or len(x) != len(y) or \
                    not all(_same(p, q) for p, q in zip(x, y)):
                return False
        elif not _same(x, y):
            return False
    return True


def _within_guards(idx, conds, relax: dict, dom: dict, vector=frozenset()):
    """`idx` with each subexpression that a guard limits (`e` of `e < c`) replaced by a
    fresh variable ranging over [min e, c - 1], added to `relax`: the index of a copy whose
    fused loop over-covers its tile is then bounded by the tile, not by the loop. Guards on
    `vector` loop variables are left out (a vectorized access may read every lane)."""
    for k, (e, top) in enumerate(_upper_limits(conds)):
        if not uses_var(e, relax) or uses_var(e, vector):
            continue
        b = eval_bound(e, relax, dom)
        if b is None or not isinstance(b[0], IntImm) or b[0].value > top:
            continue
        v = Var(f"guarded{k}", e.dtype)
        new = transform(idx, lambda n, e=e, v=v: v if _same(n, e) else n)
        if new is not idx:
            idx = new
            relax[v] = (b[0].value, top)
    return idx


def reads_itself(s: BufferStore) -> bool:
    """Does the store's value load the buffer it stores to (an accumulation)?"""
    found = []

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is s.buffer:
            found.append(n)
    visit(s.value, fn)
    return bool(found)


def _accumulation_depth(indices, loops) -> int:
    """The position of the outermost loop whose iterations update the same elements (its
    variable is not an affine term of any index): the buffer must live outside it."""
    from ...tir.arith import Simplifier as S
    used = set()
    for idx in indices:
        used.update(k for k in S().affine(idx).terms if not isinstance(k, tuple))
    for d, lp in enumerate(loops):
        if lp.loop_var not in used:
            return d
    return len(loops)


def _dom(loops) -> dict:
    return {lp.loop_var: (0, lp.extent - 1) for lp in loops}


def _is_thread(lp, prefix: str) -> bool:
    return lp.kind == "thread_binding" and lp.thread.startswith(prefix)


def _gpu_scope(buf, common):
    """(scope, loop vars to relax though they enclose every access) on a GPU, or None to keep
    `buf` where it is (global, outside any kernel)."""
    threads = {lp.loop_var for lp in common if _is_thread(lp, "threadIdx")}
    if buf.scope == "shared":  # one tile for the block's threads, virtual ones included
        return "shared", threads | {lp.loop_var for lp in common if _is_thread(lp, "vthread")}
    if buf.scope == "local":
        return "local", set()
    if threads:
        return "local", set()
    if any(_is_thread(lp, "blockIdx") for lp in common):
        return "shared", set()
    return None


def _plan(buf, accesses, acc_vars, *, gpu: bool = False):
    """(lca loop, new buffer, per-dim offsets) or None to keep the buffer as it is."""
    if not accesses:
        return None
    common = list(accesses[0][1])
    for _, loops, _, _ in accesses[1:]:
        n = 0
        while n < min(len(common), len(loops)) and common[n] is loops[n]:
            n += 1
        common = common[:n]
    for indices, loops, rmw, _ in accesses:
        if acc_vars is not None:
            depth = next((d for d, lp in enumerate(loops) if lp.loop_var in acc_vars), len(loops))
            common = common[:depth]
        elif rmw:
            common = common[:_accumulation_depth(indices, loops)]
    if not common:
        return None
    relaxed_outer, scope = set(), None
    if gpu:
        where = _gpu_scope(buf, common)
        if where is None:
            return None
        scope, relaxed_outer = where
    outer = _dom(common)
    fast = _affine_regions(accesses, len(common), len(buf.shape), relaxed_outer)
    if fast is not None:
        return _shrink(buf, common, [(lo, None, ext) for lo, ext in fast], scope)
    simp = Simplifier(outer)
    bounds = None
    for indices, loops, _, conds in accesses:
        relax = _dom([lp for lp in loops[:len(common)] if lp.loop_var in relaxed_outer]
                     + list(loops[len(common):]))
        dom = _dom(loops)
        cur = []
        for idx in indices:
            if conds:
                vector = {lp.loop_var for lp in loops if lp.kind == "vectorized"}
                idx = _within_guards(idx, conds, relax, dom, vector)
            b = eval_bound(idx, relax, dom)
            if b is None:
                return None
            cur.append(b)
        bounds = cur if bounds is None else [
            (simp(binary("min", a[0], c[0])), simp(binary("max", a[1], c[1])))
            for a, c in zip(bounds, cur)]
    return _shrink(buf, common, [(lo, hi, const_extent(lo, hi, outer)) for lo, hi in bounds],
                   scope)


def _affine_regions(accesses, n_common: int, ndim: int, relaxed_outer=frozenset()):
    """The fast path of _plan: when every index is affine in the relaxed loop variables (the
    loops inside the common ones; outer pieces such as fused // 2 may be anything) and the
    accesses differ (per dimension) only in their constants and in the variables of the loops
    inside the common ones, the region is [min, max] of those constants plus the relaxed
    terms' ranges - no symbolic bound analysis needed. [(offset expr, extent)] per dimension,
    or None to take the general path."""
    per_dim = [None] * ndim  # (outer terms key, outer Affine, lo const, hi const)
    for indices, loops, _, _ in accesses:
        if len(indices) != ndim:
            return None
        relaxed = {lp.loop_var: lp.extent for lp in loops[n_common:]}
        relaxed.update({lp.loop_var: lp.extent for lp in loops[:n_common]
                        if lp.loop_var in relaxed_outer})
        simp = Simplifier(_dom(loops))
        for d, idx in enumerate(indices):
            aff = simp.affine(idx)
            lo = hi = aff.const
            outer_terms = {}
            for key, (atom, coef) in aff.terms.items():
                if not isinstance(atom, Var):
                    if uses_var(atom, relaxed):  # e.g. (i1 + r) // 2 with i1 relaxed
                        return None
                    outer_terms[key] = (atom, coef)  # e.g. fused // 2 of an outer loop
                    continue
                ext = relaxed.get(atom)
                if ext is None:
                    outer_terms[key] = (atom, coef)
                elif coef > 0:
                    hi += coef * (ext - 1)
                else:
                    lo += coef * (ext - 1)
            sig = frozenset((k, c) for k, (_, c) in outer_terms.items())
            cur = per_dim[d]
            if cur is None:
                per_dim[d] = (sig, outer_terms, aff.dtype, lo, hi)
            elif cur[0] != sig:
                return None
            else:
                per_dim[d] = (sig, cur[1], cur[2], min(cur[3], lo), max(cur[4], hi))
    out = []
    for sig, terms, dtype, lo, hi in per_dim:
        offset = Affine({k: [a, c] for k, (a, c) in terms.items()}, lo, dtype).to_expr()
        out.append((offset, hi - lo + 1))
    return out


def _shrink(buf, common, dims, scope=None):
    """(lca loop, new buffer, offsets) from per-dimension (lo, hi, constant extent or None);
    `scope` (on a GPU) is the new buffer's storage scope."""
    shape, offsets = [], []
    for (lo, _, ext), n in zip(dims, buf.shape):
        if ext is None or ext >= n:
            shape.append(n)
            offsets.append(const(0))
        else:
            shape.append(ext)
            offsets.append(lo)
    if tuple(shape) == buf.shape and scope in (None, buf.scope):
        new = buf
    else:
        if scope is None:
            scope = "local" if buf.scope == "global" else buf.scope
        new = dataclasses.replace(buf, shape=tuple(shape), scope=scope,
                                  align=tuple(r for r in buf.align if r[0] < len(shape)))
    return common[-1], new, offsets


def _rewrite(body, moves: dict):
    by_loop: dict = {}
    for buf, (loop, new, _) in moves.items():
        by_loop.setdefault(id(loop), []).append((buf, new))

    def shift(indices, offsets):
        return tuple(i if (getattr(o, "value", None) == 0) else binary("-", i, o)
                     for i, o in zip(indices, offsets))

    def fix(n):
        if isinstance(n, BufferLoad) and n.buffer in moves:
            _, new, offsets = moves[n.buffer]
            return BufferLoad(new, shift(n.indices, offsets), n.dtype)
        if isinstance(n, BufferStore) and n.buffer in moves:
            _, new, offsets = moves[n.buffer]
            return BufferStore(new, n.value, shift(n.indices, offsets))
        return n

    def walk(s):
        if isinstance(s, For):
            inner = walk(s.body)
            for old, new in by_loop.get(id(s), ()):
                dims = "x".join(map(str, new.shape))
                note = (f"{new.name}: {dims} {new.scope} tile of {new.name}{list(old.shape)}, "
                        f"one per iteration of {s.loop_var.name}")
                inner = seq(Comment(note), Allocate(new, inner))
            return map_children(s, lambda _: inner)
        if isinstance(s, IfThenElse):
            return map_children(IfThenElse(transform(s.cond, fix), s.then_case, s.else_case), walk)
        if isinstance(s, BufferStore):
            return transform(s, fix)
        return map_children(s, walk)

    return walk(body)
