"""Inlining: fold an elementwise producer into its consumers (compute_inline), or an
elementwise consumer into its producer (reverse_compute_inline).

    P: X[v] = e(v);  C: ... X[g(w)] ...     --compute_inline(P)-->  C: ... e(g(w)) ...
    P: X[v] = e(v);  C: Y[h(w)] = f(X[w])   --reverse_compute_inline(C)-->  P: Y[h(v)] = f(e(v))
"""
from __future__ import annotations

from ...tir.expr import BufferLoad
from ...tir.functor import collect_realizes, substitute, transform, visit
from ...tir.stmt import BlockRealize, BufferStore
from ..error import ScheduleError
from ..state import REMOVE
from ..trace import instruction
from .blocks import injective_indices, refreshed, writes_of


def _elementwise(b, what: str) -> BufferStore:
    if b.init is not None or any(iv.kind == "R" for iv in b.iter_vars):
        raise ScheduleError(f"{what}: block {b.name} is a reduction; only elementwise blocks "
                            "(one store computing each element once) can be inlined")
    if not isinstance(b.body, BufferStore):
        raise ScheduleError(f"{what}: block {b.name}'s body is not a single store")
    if b.alloc_buffers:
        raise ScheduleError(f"{what}: block {b.name} allocates buffers of its own")
    return b.body


def _loads_of(node, buf) -> list:
    out = []

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            out.append(n)
    visit(node, fn)
    return out


def _scope_realizes(sch, entry):
    scope = sch.state.scope_block_of(entry)
    return scope, collect_realizes(scope.body)


def drop_alloc(sch, scope_name: str, buffer):
    """Remove `buffer` from the allocations of block `scope_name` (after it is unused)."""
    entry = sch.state.block(scope_name)
    br = entry.node
    allocs = tuple(x for x in br.block.alloc_buffers if x is not buffer)
    if len(allocs) != len(br.block.alloc_buffers):
        sch.state.replace({br: BlockRealize(br.iter_values, br.predicate,
                                            _with_allocs(br.block, allocs))})


def add_alloc(sch, scope_name: str, buffer):
    entry = sch.state.block(scope_name)
    br = entry.node
    sch.state.replace({br: BlockRealize(br.iter_values, br.predicate,
                                        _with_allocs(br.block, br.block.alloc_buffers + (buffer,)))})


def _with_allocs(b, allocs):
    import dataclasses
    return dataclasses.replace(b, alloc_buffers=tuple(allocs))


def _check_not_param(sch, buf, b, what: str):
    if buf in sch.func.params:
        raise ScheduleError(f"{what}: block {b.name} writes {buf.name}, an argument of the "
                            "function; it must stay computed, so it cannot be inlined")


@instruction("ComputeInline", "compute_inline", inputs=("block",))
def compute_inline(sch, inputs, attrs, decision):
    what = "compute_inline"
    entry = sch._block(inputs[0])
    br = entry.node
    b = br.block
    store = _elementwise(b, what)
    x = store.buffer
    _check_not_param(sch, x, b, what)
    dims = injective_indices(store.indices, b.iter_vars, what, b.name, x.name)
    missing = [iv.var.name for iv in b.iter_vars if iv.var not in dims]
    if missing:
        raise ScheduleError(f"{what}: block {b.name} does not use iteration variable(s) "
                            f"{', '.join(missing)} in its store, so it does not write one element "
                            "per iteration")
    if _loads_of(store.value, x):
        raise ScheduleError(f"{what}: block {b.name} reads the buffer {x.name} it writes")
    scope, realizes = _scope_realizes(sch, entry)
    writers = [o.block.name for o in realizes if o is not br and x in writes_of(o.block)]
    if writers:  # an init with its update (decompose_reduction): the update reads x
        raise ScheduleError(f"{what}: {x.name} is also written by block(s) "
                            f"{', '.join(writers)}; only a buffer's one writer can be inlined")
    mapping = {br: REMOVE}
    for other in realizes:
        ob = other.block
        if other is br or not (_loads_of(ob.body, x) or (ob.init and _loads_of(ob.init, x))):
            continue

        def inline(n, store=store, dims=dims):
            if isinstance(n, BufferLoad) and n.buffer is x:
                vmap = {v: n.indices[d] for v, d in dims.items()}
                return substitute(store.value, vmap)
            return n

        nb = refreshed(ob, body=transform(ob.body, inline),
                       init=None if ob.init is None else transform(ob.init, inline))
        mapping[other] = BlockRealize(other.iter_values, other.predicate, nb)
    sch.state.replace(mapping)
    drop_alloc(sch, scope.name, x)
    return []


@instruction("ReverseComputeInline", "reverse_compute_inline", inputs=("block",))
def reverse_compute_inline(sch, inputs, attrs, decision):
    what = "reverse_compute_inline"
    entry = sch._block(inputs[0])
    cr = entry.node
    c = cr.block
    cstore = _elementwise(c, what)
    scope, realizes = _scope_realizes(sch, entry)
    writers = {}
    for other in realizes:
        if other is not cr:
            for w in other.block.writes:
                writers.setdefault(w.buffer, []).append(other)
    produced = [r.buffer for r in c.reads if r.buffer in writers]
    if len(produced) != 1:
        names = ", ".join(bf.name for bf in produced) or "nothing"
        raise ScheduleError(f"{what}: block {c.name} must read exactly one buffer produced by "
                            f"another block; it reads {names}")
    x = produced[0]
    if x in sch.func.params:
        raise ScheduleError(f"{what}: {x.name} is an argument of the function and must stay "
                            "written")
    if len(writers[x]) != 1:
        raise ScheduleError(f"{what}: {x.name} is written by several blocks")
    pr = writers[x][0]
    p = pr.block
    pstore = _elementwise(p, what)
    for other in realizes:
        if other is not cr and other is not pr and _loads_of(other.block.body, x):
            raise ScheduleError(f"{what}: block {other.block.name} also reads {x.name}; the "
                                f"producer {p.name} must have block {c.name} as its only consumer")
    loads = _loads_of(cstore.value, x)
    from ...tir.structural import structural_equal
    if any(not structural_equal(ld.indices, loads[0].indices) for ld in loads):
        raise ScheduleError(f"{what}: block {c.name} reads {x.name} at different indices")
    dims = injective_indices(loads[0].indices, c.iter_vars, what, c.name, x.name)
    short = [iv.var.name for iv in c.iter_vars
             if iv.var in dims and iv.extent != x.shape[dims[iv.var]]]
    if short:  # only the elements that read x would be computed (padding)
        raise ScheduleError(f"{what}: block {c.name}'s variable(s) {', '.join(short)} range over "
                            f"other extents than the {x.name} dimensions they index; only a "
                            f"consumer with {x.name}'s iteration space can be folded into it")
    missing = [iv.var.name for iv in c.iter_vars if iv.var not in dims]
    if missing:
        raise ScheduleError(f"{what}: block {c.name}'s iteration variable(s) "
                            f"{', '.join(missing)} do not index {x.name}, so its elements are "
                            f"not in one-to-one correspondence with {p.name}'s")
    if pstore.buffer is not x:
        raise ScheduleError(f"{what}: producer {p.name} does not store {x.name}")
    vmap = {v: pstore.indices[d] for v, d in dims.items()}

    def fold(n):
        if isinstance(n, BufferLoad) and n.buffer is x:
            return pstore.value
        return n

    value = substitute(transform(cstore.value, fold), vmap)
    new_store = BufferStore(cstore.buffer, value, tuple(substitute(i, vmap) for i in cstore.indices))
    np_ = refreshed(p, body=new_store)
    sch.state.replace({cr: REMOVE, pr: BlockRealize(pr.iter_values, pr.predicate, np_)})
    drop_alloc(sch, scope.name, x)
    return []
