"""What the rules ask about a block: its loops' kinds, its reuse, its consumers."""
from __future__ import annotations

from ...tir.expr import BufferLoad, Select
from ...tir.functor import uses_var, visit
from ...tir.stmt import BufferStore


def loop_kinds(sch, block) -> list:
    """"S" / "R" per loop of the block (a handle or a name): the loop drives only spatial /
    only reduction variables; "O" for a loop that drives both or neither."""
    br = sch.realize(block)
    out = []
    for p in sch.enclosing_loops(block):
        kinds = {iv.kind for iv, v in zip(br.block.iter_vars, br.iter_values)
                 if uses_var(v, {p.loop_var})}
        out.append(kinds.pop() if len(kinds) == 1 else "O")
    return out


def has_reuse(block) -> bool:
    """A reduction whose inputs are each read by several spatial iterations (matmul, conv):
    the kind of block multi-level tiling pays off for."""
    if not any(iv.kind == "R" for iv in block.iter_vars):
        return False
    spatial = {iv.var for iv in block.iter_vars if iv.kind == "S"}
    for r in block.reads:
        used = set()
        for mn, _ in r.region:
            used |= {v for v in spatial if uses_var(mn, {v})}
        if used != spatial:
            return True
    return False


def is_elementwise(block) -> bool:
    return (block.init is None and all(iv.kind == "S" for iv in block.iter_vars)
            and isinstance(block.body, BufferStore))


def has_select(block) -> bool:
    found = []

    def fn(n):
        if isinstance(n, Select):
            found.append(n)
    visit(block.body, fn)
    return bool(found)


def reads_buffer(block, buf) -> bool:
    found = []

    def fn(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            found.append(n)
    visit(block.body, fn)
    return bool(found)


def vector_reads(sch, block) -> frozenset:
    """The positions (in the block's reads) of the inputs that its innermost spatial loop
    indexes: those a vectorized inner loop loads as vectors. The others are read one element
    at a time and broadcast (a matmul's A[i, k] under an inner j loop)."""
    br = sch.realize(block)
    b = br.block
    spatial = [iv.var for iv in b.iter_vars if iv.kind == "S" and iv.extent > 1]
    if not spatial:
        return frozenset()
    last = spatial[-1]
    loads = []
    visit(b.body, lambda n: loads.append(n) if isinstance(n, BufferLoad) else None)
    indexed = {ld.buffer for ld in loads if any(uses_var(e, {last}) for e in ld.indices)}
    return frozenset(i for i, r in enumerate(b.reads) if r.buffer in indexed)


def _plain_dim(indices, var):
    """The one index that is exactly `var`, if `var` appears in no other: its position."""
    uses = [d for d, e in enumerate(indices) if uses_var(e, {var})]
    if len(uses) == 1 and indices[uses[0]] is var:
        return uses[0]
    return None


def channel_vector_axis(sch, block, lanes: int, params) -> tuple | None:
    """Whether a tiled block would vectorize better along another spatial loop than its
    innermost one, and how: (loop position, [(read buffer, axis to move last)], output axis
    to move last), or None.

    The innermost loop is a poor vector axis when some read indexes it other than as its own
    last index (a conv's x: pad[..][x+s], or with stride 2 pad[..][2x+s]).
    A better one (a conv's output channel k) has a multiple of `lanes` as its extent and is
    read either not at all (broadcast), as a last index, or as a whole index of an argument
    (a weight) that a per-tile copy can store with that axis last (permute_layout)."""
    br = sch.realize(block)
    b = br.block
    loops = sch.enclosing_loops(block)
    by_loop = []
    for p in loops:
        ivs = [iv for iv, v in zip(b.iter_vars, br.iter_values) if v is p.loop_var]
        by_loop.append(ivs[0] if len(ivs) == 1 else None)
    if None in by_loop or not isinstance(b.body, BufferStore):
        return None
    spatial = [(i, iv) for i, iv in enumerate(by_loop) if iv.kind == "S" and iv.extent > 1]
    if len(spatial) < 2:
        return None
    loads = []
    out = b.body.buffer  # its own load in `out = out + ...` follows the store's layout
    visit(b.body.value, lambda n: loads.append(n) if isinstance(n, BufferLoad) and
          n.buffer is not out else None)
    out_indices = b.body.indices

    last = spatial[-1][1].var
    if all(not any(uses_var(e, {last}) for e in ld.indices) or
           _plain_dim(ld.indices, last) == len(ld.indices) - 1 for ld in loads):
        return None  # contiguous or broadcast reads: a fine vector axis, whatever its extent
    for pos, iv in reversed(spatial[:-1]):
        v = iv.var
        out_dim = _plain_dim(out_indices, v)
        if iv.extent % lanes or out_dim is None:
            continue
        packs, ok = [], True
        for ld in loads:
            if not any(uses_var(e, {v}) for e in ld.indices):
                continue
            d = _plain_dim(ld.indices, v)
            if d is None or (d != len(ld.indices) - 1 and ld.buffer not in params):
                ok = False
                break
            if d != len(ld.indices) - 1 and (ld.buffer, d) not in packs:
                packs.append((ld.buffer, d))
        if ok:
            return pos, packs, out_dim
    return None
