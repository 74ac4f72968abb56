"""TensorIntrin, the registry of intrinsics, and the matcher of a loop nest against one.

A description is a PrimFunc over the intrinsic's operands whose body is a perfect loop nest
around one store, e.g. VNNI's

    for j in range(16):
        for k in range(4):
            C[j] = C[j] + int32(A[k]) * int32(B[j, k])

A loop nest of a workload matches it when it has the same number of loops with the same
extents, one store whose value has the description's shape (operators, casts, dtypes; the
operands of + and * in either order), and each operand's flat memory offset moves with each
loop exactly as the description's does: the elements the unit reads and writes are then the
ones the loops touch, in the same roles. Operands whose stride along a loop the unit takes
at run time (AMX's row stride) are listed in `TensorIntrin.strided`; there any constant
stride matches and is passed to the implementation. A loop listed in `TensorIntrin.free`
may have any extent (the unit loops over it itself: AMX's steps along the reduction, with
the accumulator tiles held in the unit's registers); its extent is passed too.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .. import dtype as dt
from ..arith import Simplifier
from ..buffer import Buffer
from ..expr import Binary, BufferLoad, Call, Cast, FloatImm, IntImm, Var, binary, const
from ..func import PrimFunc
from ..functor import substitute, uses_var, visit
from ..stmt import BlockRealize, BufferStore, For, IfThenElse, SeqStmt

TENSORIZE = "tensorize"  # a loop's annotation: the intrinsic that computes the nest under it
INTRIN_OP = "lt_intrin_"  # Call(INTRIN_OP + name, (operand addresses..., strides...))


class IntrinMismatch(ValueError):
    """A loop nest does not compute what an intrinsic's description computes (the message
    says where they differ)."""


@dataclass(frozen=True)
class TensorIntrin:
    """One hardware step: `desc` (the loop nest it computes, module docstring) and `impl`, the
    C definition of `static inline void lt_intrin_<name>(...)`, whose parameters are pointers
    to the first element of each operand of `desc` (in `desc.params` order), then the run-time
    strides listed in `strided` ((param index, loop index) pairs, in elements), then the
    extents of the loops listed in `free` (loop indices). `requires`: the
    Target features every one of which the unit needs; `begin` and `end`: C statements a
    kernel runs around its calls (AMX configures its tile registers once per kernel call and
    thread, not per call: a configuration costs as much as many tile products)."""

    name: str
    desc: PrimFunc
    requires: tuple
    impl: str
    strided: tuple = ()
    free: tuple = ()
    doc: str = ""
    begin: str = ""  # C run before a kernel's (or a parallel iteration's) first call
    end: str = ""    # and after its last
    headers: tuple = ("immintrin.h", "string.h")
    macs: int = field(default=0)  # multiply-adds per call, for reports

    @property
    def loops(self) -> list:
        out, s = [], self.desc.body
        while isinstance(s, For):
            out.append(s)
            s = s.body
        return out

    @property
    def extents(self) -> tuple:
        return tuple(lp.extent for lp in self.loops)

    @property
    def store(self) -> BufferStore:
        s = self.desc.body
        while isinstance(s, For):
            s = s.body
        return s

    @property
    def op(self) -> str:
        return INTRIN_OP + self.name

    def offered_by(self, target) -> bool:
        """Whether `target` has every feature the unit needs."""
        return all(target.has(f) for f in self.requires)

    def script(self) -> str:
        return self.desc.script()


_REGISTRY: dict = {}


def register(intrin: TensorIntrin) -> TensorIntrin:
    if intrin.name in _REGISTRY:
        raise ValueError(f"tensor intrinsic {intrin.name!r} is registered already")
    _REGISTRY[intrin.name] = intrin
    return intrin


def get_intrin(name) -> TensorIntrin:
    if isinstance(name, TensorIntrin):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise KeyError(f"unknown tensor intrinsic {name!r}; registered: "
                       f"{', '.join(sorted(_REGISTRY))}") from None


def intrin_names() -> list:
    return sorted(_REGISTRY)


def intrin_of_op(op: str):
    """The TensorIntrin a Call's op names, or None."""
    return _REGISTRY.get(op[len(INTRIN_OP):]) if op.startswith(INTRIN_OP) else None


def nest(name: str, params, loops, store_fn) -> PrimFunc:
    """A description: `loops` are (name, extent) pairs, outermost first; `store_fn(*vars)`
    returns the BufferStore at the bottom."""
    vars_ = [Var(n, "int32") for n, _ in loops]
    body = store_fn(*vars_)
    for v, (_, extent) in reversed(list(zip(vars_, loops))):
        body = For(v, extent, "serial", body)
    return PrimFunc(name, tuple(params), body)


# ---------------------------------------------------------------------------- matching
@dataclass
class NestMatch:
    """A matched nest: its loops (outermost first), and per operand of the description the
    workload's buffer and the element the unit starts at (a BufferLoad at the nest's first
    iteration); `strides`: the run-time strides (then free extents) the implementation takes,
    in order; `guard`:
    the condition (of the loops around it: a partitioned tile) the whole nest runs under."""

    loops: list
    operands: list  # [BufferLoad], in desc.params order
    strides: list
    guard: object = None  # a condition on the loops around the nest, under which it runs


def _chain(loop: For):
    """The loops of the perfect nest from `loop` down and what they end in."""
    loops, s = [], loop
    while isinstance(s, For):
        loops.append(s)
        s = s.body
        if isinstance(s, SeqStmt) and len(s.stmts) == 1:
            s = s.stmts[0]
    return loops, s


def match_nest(loop: For, intrin: TensorIntrin, dom: dict | None = None) -> NestMatch:
    """Check that the nest from `loop` down computes what `intrin` describes; raise
    IntrinMismatch saying where it does not. The nest ends in one block (schedule time: its
    variables are bound to the loops) or one store (after lowering). `dom`: the ranges of the
    loops around it ({var: (lo, hi)}), for simplifying indices."""
    loops, end = _chain(loop)
    want = intrin.extents
    got = tuple(lp.extent for lp in loops)
    if len(got) == len(want):
        want = tuple(g if k in intrin.free else w for k, (g, w) in enumerate(zip(got, want)))
    if got != want:
        raise IntrinMismatch(f"the loops from {loop.loop_var.name} down have extents {got}; "
                             f"{intrin.name} computes a nest of extents {want}: split them to "
                             "those sizes and put them innermost, in that order")
    nest_vars = {lp.loop_var for lp in loops}
    guard = None
    if isinstance(end, IfThenElse) and end.else_case is None:
        guard, end = end.cond, end.then_case  # lowered: the block's predicate
    if isinstance(end, BlockRealize):
        guard = end.predicate
        store = end.block.body
        if not isinstance(store, BufferStore):
            raise IntrinMismatch(f"block {end.block.name} does more than one store")
        vmap = {iv.var: v for iv, v in zip(end.block.iter_vars, end.iter_values)}
        store = substitute(store, vmap)
    elif isinstance(end, BufferStore):
        store = end
    else:
        raise IntrinMismatch(f"the nest from {loop.loop_var.name} down ends in a "
                             f"{type(end).__name__}, not one block or store")
    if guard is not None and isinstance(guard, IntImm) and guard.value:
        guard = None
    if guard is not None and uses_var(guard, nest_vars):
        raise IntrinMismatch(f"{store.buffer.name} is guarded ({guard!r}) inside the nest: a "
                             "split there does not divide its loop; pick factors that do")
    bufmap: dict = {}
    accesses: list = []  # (desc indices, workload indices, desc buffer)
    d = intrin.store
    _bind(d.buffer, store.buffer, bufmap, intrin)
    accesses.append((d.indices, store.indices, d.buffer))
    if not _same(store.value, d.value, bufmap, accesses, intrin):
        raise IntrinMismatch(f"{store.buffer.name} = {store.value!r} does not compute "
                             f"{intrin.name}'s {d.value!r} (it reads "
                             f"{_loads(store.value)}, the unit {_loads(d.value)})")
    wvars = [lp.loop_var for lp in loops]
    dvars = [lp.loop_var for lp in intrin.loops]
    strided = set(intrin.strided)
    operands: dict = {}
    strides: dict = {}
    simp = Simplifier({**(dom or {}), **{lp.loop_var: (0, lp.extent - 1) for lp in loops}})
    for d_idx, w_idx, dbuf in accesses:
        wbuf = bufmap[dbuf]
        p = intrin.desc.params.index(dbuf)
        d_off = _coefficients(_flat(dbuf, d_idx), dvars, Simplifier(), dbuf.name)
        w_off, base = _coefficients(_flat(wbuf, w_idx), wvars, simp, wbuf.name, base=True)
        for k, (dc, wc) in enumerate(zip(d_off, w_off)):
            if (p, k) in strided:
                if wc <= 0:
                    raise IntrinMismatch(f"{wbuf.name} must advance along loop "
                                         f"{wvars[k].name} (stride {wc})")
                strides[p, k] = wc
            elif dc != wc:
                raise IntrinMismatch(
                    f"{wbuf.name} moves by {wc} elements per step of loop {wvars[k].name}, "
                    f"where {intrin.name} needs {dc} (its operand {dbuf.name}): lay it out "
                    "so that the unit's elements are contiguous (e.g. pack_layout)")
        zero = {v: const(0, v.dtype) for v in wvars}
        at = BufferLoad(wbuf, tuple(simp(substitute(i, zero)) for i in w_idx), wbuf.dtype)
        if p in operands:
            if not _same_base(operands[p][1], base, simp):
                raise IntrinMismatch(f"{wbuf.name} is read and written at different elements")
        else:
            operands[p] = (at, base)
    missing = [b.name for i, b in enumerate(intrin.desc.params) if i not in operands]
    if missing:
        raise IntrinMismatch(f"{intrin.name}'s operands {missing} are not used by the nest")
    return NestMatch(loops, [operands[i][0] for i in range(len(intrin.desc.params))],
                     [strides[pk] for pk in intrin.strided]
                     + [loops[k].extent for k in intrin.free], guard)


def computes_like(store: BufferStore, intrin: TensorIntrin) -> bool:
    """Whether a store (a block's body) has the shape of the intrinsic's expression, indices
    aside: the cheap first test of whether tensorizing it can succeed."""
    d = intrin.store
    try:
        return (_bind(d.buffer, store.buffer, {}, intrin)
                and _same(store.value, d.value, {d.buffer: store.buffer}, [], intrin))
    except IntrinMismatch:
        return False


def _bind(dbuf: Buffer, wbuf: Buffer, bufmap: dict, intrin) -> bool:
    if dbuf in bufmap:
        return bufmap[dbuf] is wbuf
    if wbuf in bufmap.values():
        return False  # two of the unit's operands in one buffer
    if dt.element(dbuf.dtype) != dt.element(wbuf.dtype):
        raise IntrinMismatch(f"{wbuf.name} is {wbuf.dtype}, where {intrin.name}'s operand "
                             f"{dbuf.name} is {dbuf.dtype}")
    bufmap[dbuf] = wbuf
    return True


def _same(w, d, bufmap: dict, accesses: list, intrin) -> bool:
    """Whether expression `w` has the shape of description `d` (binding buffers)."""
    if type(w) is not type(d) or w.dtype != d.dtype:
        return False
    if isinstance(d, BufferLoad):
        if not _bind(d.buffer, w.buffer, bufmap, intrin):
            return False
        accesses.append((d.indices, w.indices, d.buffer))
        return True
    if isinstance(d, Cast):
        return _same(w.value, d.value, bufmap, accesses, intrin)
    if isinstance(d, Binary):
        if w.op != d.op:
            return False
        orders = [(w.a, w.b), (w.b, w.a)] if d.op in ("+", "*") else [(w.a, w.b)]
        for a, b in orders:
            saved_map, saved_acc = dict(bufmap), list(accesses)
            if _same(a, d.a, bufmap, accesses, intrin) and _same(b, d.b, bufmap, accesses, intrin):
                return True
            bufmap.clear()
            bufmap.update(saved_map)
            accesses[:] = saved_acc
        return False
    if isinstance(d, (IntImm, FloatImm)):
        return w.value == d.value
    if isinstance(d, Call):
        return (w.op == d.op and len(w.args) == len(d.args)
                and all(_same(a, b, bufmap, accesses, intrin) for a, b in zip(w.args, d.args)))
    return False


def _loads(e) -> str:
    found = []
    visit(e, lambda n: found.append(f"{n.buffer.name}: {n.dtype}")
          if isinstance(n, BufferLoad) else None)
    return ", ".join(found)


def _flat(buf: Buffer, indices):
    out = None
    for i, s in zip(indices, buf.layout_strides()):
        term = binary("*", i, const(s, i.dtype))
        out = term if out is None else binary("+", out, term)
    return out


def _coefficients(offset, vars_, simp: Simplifier, name: str, *, base: bool = False):
    """The constant step of `offset` along each of `vars_` (and, with base=True, the affine
    rest, which must not depend on them)."""
    aff = simp.affine(offset)
    coef = [0] * len(vars_)
    rest = {}
    for key, (atom, c) in aff.terms.items():
        if isinstance(atom, Var) and atom in vars_:
            coef[vars_.index(atom)] += c
        elif uses_var(atom, set(vars_)):
            raise IntrinMismatch(f"{name}'s index {atom!r} is not affine in the nest's loops")
        else:
            rest[key] = (atom, c)
    if not base:
        return coef
    return coef, (rest, aff.const)


def _same_base(a, b, simp) -> bool:
    (ta, ca), (tb, cb) = a, b
    return ca == cb and set(ta) == set(tb) and all(ta[k][1] == tb[k][1] for k in ta)
