"""PrimFunc <-> JSON: exact round trips (structure, hash, every name, shared identity) for every
operator, unscheduled and under random schedules; odd constants; bad documents refused."""
from __future__ import annotations

import copy
import json
import math

import pytest

from looptune import tir
from looptune.tir import (Block, BlockRealize, Buffer, BufferLoad, BufferStore, Evaluate,
                          FloatImm, IntImm, IterVar, PrimFunc, Reduce, Var, structural_equal,
                          structural_hash)
from looptune.tir.functor import visit
from looptune.tir.serialize import func_from_json, func_to_json
from looptune.testing import random_block_schedule, random_schedule
from workloads_small import all_names, small_workload


def _names(func) -> list:
    """Every name in func, in traversal order: func, buffers, vars, blocks, attrs, annotations."""
    out = [func.name, func.attrs, [(b.name, b.scope, b.strides, b.align) for b in func.params]]

    def see(n):
        if isinstance(n, Var):
            out.append(("var", n.name, n.dtype))
        elif isinstance(n, (BufferLoad, BufferStore)):
            out.append(("buf", n.buffer.name, n.buffer.scope))
        elif isinstance(n, Block):
            out.append(("block", n.name, n.annotations,
                        [(b.name, b.scope, b.strides, b.align) for b in n.alloc_buffers]))
        elif isinstance(n, tir.For):
            out.append(("for", n.loop_var.name, n.kind, n.thread, n.annotations))
            see(n.loop_var)
        elif isinstance(n, IterVar):
            see(n.var)
        elif isinstance(n, tir.BufferRegion):
            out.append(("region", n.buffer.name))

    visit(func.body, see)
    return out


def _identities(func) -> tuple:
    """How many distinct Var / Buffer objects the function holds (identity is meaningful)."""
    vs, bs = set(), set()

    def see(n):
        for name in getattr(type(n), "__dataclass_fields__", {}):
            v = getattr(n, name)
            for x in (v if isinstance(v, tuple) else (v,)):
                if isinstance(x, Var):
                    vs.add(id(x))
                elif isinstance(x, Buffer):
                    bs.add(id(x))

    visit(func.body, see)
    bs.update(id(b) for b in func.params)
    return len(vs), len(bs)


def check_round_trip(func):
    doc = func_to_json(func)
    text = json.dumps(doc, allow_nan=False)  # standard JSON, no NaN / Infinity literals
    back = func_from_json(json.loads(text))
    assert structural_equal(func, back)
    assert structural_hash(func) == structural_hash(back)
    assert _names(back) == _names(func)
    assert back.script() == func.script()
    assert _identities(back) == _identities(func)
    assert func_to_json(back) == doc  # a fixed point
    return back


@pytest.mark.parametrize("name", all_names())
def test_round_trip_every_op(name):
    func = small_workload(name)[0]
    back = check_round_trip(func)
    # buffers are shared by identity: params are the very buffers the body stores to
    stored = set()
    visit(back.body, lambda n: stored.add(id(n.buffer)) if isinstance(n, BufferStore) else None)
    assert id(back.params[-1]) in stored


@pytest.mark.parametrize("name", all_names())
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_scheduled(name, seed):
    func = small_workload(name)[0]
    for sch in (random_schedule(func, seed), random_block_schedule(func, seed + 100)):
        check_round_trip(sch.func)


def _func_with(value_expr, *, attrs=(), annotations=()) -> PrimFunc:
    """out[i] = value_expr(i, A) in one block, with the given attrs and block annotations."""
    A = Buffer("A", (4,), "float32")
    out = Buffer("out", (4,), "float32", strides=(2,), align=((0, 4, 1),))
    i, vi = Var("i"), Var("vi")
    iv = IterVar(vi, 4, "S")
    block = Block("blk", (iv,), (tir.BufferRegion(A, ((vi, 1),)),),
                  (tir.BufferRegion(out, ((vi, 1),)),),
                  BufferStore(out, value_expr(vi, A), (vi,)), annotations=annotations)
    loop = tir.For(i, 4, "serial", BlockRealize((i,), tir.const(True), block),
                   annotations=(("pragma", 1), ("ratio", 0.5), ("tag", "x")))
    root = Block("root", (), (), (), loop)
    return PrimFunc("f", (A, out), BlockRealize((), tir.const(True), root), attrs)


@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan, -0.0, 1e300, 5e-324, 0.1])
def test_odd_float_constants(value):
    func = _func_with(lambda vi, A: tir.binary("+", A[vi], FloatImm(value, "float32")))
    back = check_round_trip(func)
    got = []
    visit(back.body, lambda n: got.append(n.value) if isinstance(n, FloatImm) else None)
    assert len(got) == 1 and (math.isnan(got[0]) if math.isnan(value) else got[0] == value)
    assert math.copysign(1, got[0]) == math.copysign(1, value)


def test_bool_int_constants_and_annotation_values():
    def value(vi, A):
        cond = tir.binary("and", tir.binary("<", vi, IntImm(2, "int64")), Var("flag", "bool"))
        return tir.Select(tir.Not(cond), A[vi], FloatImm(1.0), "float32")

    func = _func_with(value,
                      attrs=(("global_symbol", "f"), ("tuned", True), ("ratio", 2.5),
                             ("shape", (1, 2.0, "x"))),
                      annotations=(("a_bool", False), ("b_int", 0), ("c_float", 0.0), ("d", "s")))
    back = check_round_trip(func)
    assert back.attrs == func.attrs
    assert [type(v) for _, v in back.attrs] == [str, bool, float, tuple]
    blk = []
    visit(back.body, lambda n: blk.append(n) if isinstance(n, Block) and n.name == "blk" else None)
    assert [type(v) for _, v in blk[0].annotations] == [bool, int, float, str]
    # True and 1 hash differently, so the round trip must keep bools as bools
    consts = []
    visit(back.body, lambda n: consts.append(n) if isinstance(n, IntImm) else None)
    assert any(c.value is True for c in consts) and any(type(c.value) is int for c in consts)


def test_every_node_class():
    """Cast, Call, Ramp, Broadcast, Reduce, IfThenElse, Allocate, Evaluate, Comment."""
    A = Buffer("A", (8,), "float32")
    T = Buffer("T", (8,), "float32", scope="local")
    x, r = Var("x"), Var("r")
    ramp = tir.Ramp(x, 1, 4, "int32x4")
    vec = tir.Broadcast(FloatImm(2.0), 4, "float32x4")
    red = Reduce("sum", BufferLoad(A, (r,), "float32"), (IterVar(r, 8, "R"),), FloatImm(0.0),
                 "float32")
    body = tir.seq(
        tir.Comment("note"),
        tir.Allocate(T, tir.For(x, 2, "vectorized", tir.seq(
            BufferStore(T, tir.Call("exp", (tir.Cast(BufferLoad(A, (x,), "float32"), "float64"),),
                                    "float64").astype("float32"), (x,)),
            tir.IfThenElse(tir.binary("<", x, 1), BufferStore(A, vec, (ramp,)),
                           Evaluate(red)),
            tir.IfThenElse(tir.binary(">", x, 5), Evaluate(IntImm(0)))), thread="threadIdx.x")))
    func = PrimFunc("nodes", (A,), body)
    check_round_trip(func)


def test_one_var_object_per_identity():
    """Two distinct vars with the same name stay distinct; one var used twice stays one."""
    a1, a2 = Var("a"), Var("a")
    func = _func_with(lambda vi, A: A[vi] + tir.cast(a1 + a2 + a1, "float32"))
    back = check_round_trip(func)
    vs = {}
    visit(back.body, lambda n: vs.setdefault(id(n), n) if isinstance(n, Var) and n.name == "a"
          else None)
    assert len(vs) == 2


def test_speed_of_a_large_matmul():
    import time

    from looptune import te
    from looptune.te.ops import workload
    func = te.create_prim_func(workload("matmul", M=1024, N=1024, K=1024)[0])
    func = random_schedule(func, 3).func
    t = time.perf_counter()
    for _ in range(20):
        func_from_json(json.loads(json.dumps(func_to_json(func))))
    assert (time.perf_counter() - t) / 20 < 0.02  # a few ms in practice


# ------------------------------------------------------------------------- bad documents
@pytest.fixture
def doc():
    return func_to_json(small_workload("matmul")[0])


def _find(obj, pred):
    """The first dict inside obj for which pred holds."""
    if isinstance(obj, dict):
        if pred(obj):
            return obj
        obj = list(obj.values())
    if isinstance(obj, list):
        for x in obj:
            r = _find(x, pred)
            if r is not None:
                return r
    return None


BREAKAGES = {
    "version": (lambda d: d.update(version=99), "version 99"),
    "format": (lambda d: d.update(format="pickle"), "format"),
    "not an object": (lambda d: d.clear(), "format"),
    "unknown node": (lambda d: _find(d, lambda n: n.get("_") == "For").update({"_": "While"}),
                     "unknown node type 'While'"),
    "extra field": (lambda d: _find(d, lambda n: n.get("_") == "For").update(step=2), "step"),
    "missing field": (lambda d: _find(d, lambda n: n.get("_") == "For").pop("extent"),
                      "lacks field 'extent'"),
    "wrong type": (lambda d: _find(d, lambda n: n.get("_") == "For").update(body={"var": 0}),
                   "For.body must be Stmt"),
    "float as int": (lambda d: _find(d, lambda n: n.get("_") == "FloatImm").update(value=0),
                     "FloatImm.value must be float"),
    "var index": (lambda d: _find(d, lambda n: "var" in n and len(n) == 1).update(var=999),
                  "var reference 999 is out of range"),
    "buffer index": (lambda d: _find(d, lambda n: "buf" in n and len(n) == 1).update(buf=-1),
                     "buffer reference -1"),
    "bad buffer": (lambda d: d["buffers"][0].update(shape=[0, 2]), "buffers[0]"),
    "bad scope": (lambda d: d["buffers"][0].update(scope="texture"), "unknown scope"),
    "bad var": (lambda d: d["vars"].__setitem__(0, ["i"]), "vars[0]"),
    "strange object": (lambda d: _find(d, lambda n: n.get("_") == "IntImm").update(value={"x": 1}),
                       "unexpected object"),
    "bad float": (lambda d: _find(d, lambda n: n.get("_") == "FloatImm")
                  .update(value={"float": "huge"}), "unexpected object"),
    "item type": (lambda d: _find(d, lambda n: n.get("_") == "Block" and n["reads"])["reads"]
                  .__setitem__(0, {"_": "IntImm", "value": 1, "dtype": "int32"}),
                  "Block.reads must hold only BufferRegion"),
    "func not a PrimFunc": (lambda d: d.update(func={"_": "IntImm", "value": 1}), "'func'"),
}


@pytest.mark.parametrize("what", sorted(BREAKAGES))
def test_bad_documents_are_refused_clearly(doc, what):
    breakage, message = BREAKAGES[what]
    bad = copy.deepcopy(doc)
    breakage(bad)
    with pytest.raises(ValueError, match="func_from_json") as info:
        func_from_json(bad)
    assert message in str(info.value)


def test_bad_json_text_and_unserializable_nodes():
    with pytest.raises(ValueError, match="not JSON"):
        func_from_json("{not json")
    with pytest.raises(ValueError, match="expects a PrimFunc"):
        func_to_json(IntImm(1))
    func = _func_with(lambda vi, A: A[vi])
    weird = PrimFunc(func.name, func.params, func.body, (("k", [1, 2]),))  # a list, not a tuple
    with pytest.raises(ValueError, match="cannot serialize list"):
        func_to_json(weird)
