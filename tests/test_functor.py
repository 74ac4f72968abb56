"""looptune.tir.functor's statement walks (pure Python): stmt_children, find_stmts,
find_stmts_with_parents, map_children, and visit's pruning - checked against a plain
recursion over stmt_children on hand-built trees and on random schedules."""
from __future__ import annotations

import pytest

from looptune import te
from looptune.schedule import Schedule
from looptune.testing.schedgen import fuzz_schedule, random_block_schedule
from looptune.tir import (Allocate, Block, BlockRealize, Buffer, BufferStore, Comment, For,
                          IfThenElse, IterVar, Stmt, Var, collect_realizes, const, find_stmts,
                          find_stmts_with_parents, map_children, seq, stmt_children, visit)
from looptune.tir.stmt import TRUE

A = Buffer("A", (8,))


def store(v: float) -> BufferStore:
    return BufferStore(A, const(v), (const(0),))


def loop(name: str, body, extent: int = 4) -> For:
    return For(Var(name), extent, "serial", body)


def realize(name: str, body, init=None) -> BlockRealize:
    v = Var("v" + name)
    block = Block(name, (IterVar(v, 4),), (), (), body, init)
    return BlockRealize((const(0),), TRUE, block)


def tree():
    """for i: { S0; if c: (for j: S1) else: alloc: S2; block b(init S9) { for k: S3 } }"""
    s = [store(float(v)) for v in range(10)]
    cond = Var("c") < 2
    inner = realize("b", loop("k", s[3]), init=s[9])
    return loop("i", seq(s[0], IfThenElse(cond, loop("j", s[1]), Allocate(A, s[2])), inner)), s


def preorder(s) -> list:
    out = [s]
    for c in stmt_children(s):
        out += preorder(c)
    return out


def with_parents(s, parents=()) -> list:
    out = [(s, parents)]
    inner = parents + ((s, s.block) if isinstance(s, BlockRealize) else (s,))
    for c in stmt_children(s):
        out += with_parents(c, inner)
    return out


def test_stmt_children_of_each_kind():
    root, s = tree()
    seq_ = root.body
    cond, br = seq_.stmts[1], seq_.stmts[2]
    assert stmt_children(root) == (seq_,)
    assert stmt_children(seq_) == seq_.stmts
    assert stmt_children(cond) == (cond.then_case, cond.else_case)
    assert stmt_children(IfThenElse(cond.cond, s[0])) == (s[0],)
    assert stmt_children(cond.else_case) == (s[2],)
    assert stmt_children(br) == (br.block.body,)  # the body, not the Block, nor its init
    assert stmt_children(br.block) == (br.block.body,)
    for leaf in (s[0], Comment("note"), seq()):
        assert stmt_children(leaf) == ()


def test_find_stmts_is_preorder_and_stops():
    root, s = tree()
    everything = preorder(root)
    assert find_stmts(root, Stmt) == everything
    assert find_stmts(root, BufferStore) == [s[0], s[1], s[2], s[3]]  # no init (S9)
    assert [x.loop_var.name for x in find_stmts(root, For)] == ["i", "j", "k"]
    # stop: found loops are not looked inside; a stop type is still reported itself
    assert [x.loop_var.name for x in find_stmts(root, For, stop=For)] == ["i"]
    assert find_stmts(root, (For, BufferStore), stop=IfThenElse) == [
        root, s[0], root.body.stmts[2].block.body, s[3]]
    assert find_stmts(s[0], For) == [] and find_stmts(s[0], BufferStore) == [s[0]]


def test_find_stmts_with_parents_matches_the_recursion():
    root, s = tree()
    got = find_stmts_with_parents(root, Stmt)
    assert [(x, p) for x, p in got] == with_parents(root)
    (k, parents), = find_stmts_with_parents(root, For)[2:]
    br = root.body.stmts[2]
    assert k.loop_var.name == "k" and parents == (root, root.body, br, br.block)


def test_map_children_keeps_identity_and_rebuilds():
    root, s = tree()
    for node in preorder(root) + [root.body.stmts[2].block]:
        assert map_children(node, lambda c: c) is node
    seen = []
    map_children(root.body, lambda c: seen.append(c) or c)
    assert seen == list(root.body.stmts)  # in order
    # a changed child rebuilds only its parent; a sequence result is flattened, an empty
    # one vanishes
    s0 = root.body.stmts[0]
    new = map_children(root.body, lambda c: seq(s[5], s[6]) if c is s0 else c)
    assert new.stmts == (s[5], s[6]) + root.body.stmts[1:]
    gone = map_children(root.body, lambda c: seq() if c is s0 else c)
    assert gone.stmts == root.body.stmts[1:]
    br = root.body.stmts[2]
    br2 = map_children(br, lambda c: s[7])
    assert isinstance(br2, BlockRealize) and br2.block.body is s[7]
    assert br2.block.init is br.block.init and br2.iter_values is br.iter_values
    assert map_children(s[0], lambda c: s[1]) is s[0]  # a leaf has no children to replace


def test_visit_prunes_on_false_only():
    root, s = tree()
    seen = []

    def fn(n):
        seen.append(n)
        if isinstance(n, IfThenElse):
            return False  # skip the condition's insides (its expression and branches)
        return 0  # falsy, but not False: keep going

    visit(root, fn)
    cond = root.body.stmts[1]
    assert cond in seen and cond.then_case not in seen and cond.cond not in seen
    assert s[3] in seen and s[9] in seen  # visit walks every node, a block's init too


def test_subclasses_walk_like_their_kind():
    class MyFor(For):
        __slots__ = ()

    body = seq(store(1.0), store(2.0))
    lp = MyFor(Var("m"), 2, "serial", body)
    assert stmt_children(lp) == (body,)
    assert find_stmts(lp, BufferStore) == list(body.stmts)
    assert find_stmts_with_parents(lp, BufferStore)[0][1] == (lp, body)
    assert map_children(lp, lambda c: c) is lp
    assert isinstance(map_children(lp, lambda c: store(3.0)), For)


def _funcs():
    A_ = te.placeholder((16, 12), name="A")
    B_ = te.placeholder((12, 10), name="B")
    r = te.reduce_axis(12, "r")
    C = te.compute((16, 10), lambda i, j: te.sum(A_[i, r] * B_[r, j], axis=r), name="C")
    D = te.compute((16, 10), lambda i, j: te.max(C[i, j], 0.0), name="D")
    func = te.create_prim_func([A_, B_, D])
    for seed in range(12):
        gen = fuzz_schedule if seed % 2 else random_block_schedule
        yield gen(func, seed).func


@pytest.mark.parametrize("func", list(_funcs()), ids=lambda f: "")
def test_walks_agree_with_the_recursion_on_schedules(func):
    body = func.body
    assert find_stmts(body, Stmt) == preorder(body)
    assert [(x, p) for x, p in find_stmts_with_parents(body, Stmt)] == with_parents(body)
    # what a Schedule's queries answer comes from find_stmts_with_parents
    sch = Schedule(func)
    ref = with_parents(body)
    blocks = [(x, p) for x, p in ref if isinstance(x, BlockRealize)]
    loop_parents = {id(x): p for x, p in ref if isinstance(x, For)}
    assert sch.block_names() == [x.block.name for x, _ in blocks]
    for x, p in blocks:
        name = x.block.name
        assert sch.realize(name) is x and sch.parents(name) == p
        assert sch.enclosing_loops(name) == [q for q in p if isinstance(q, For)]
        for rv in sch.get_loops(sch.get_block(name)) if name != "root" else ():
            assert sch.parents(rv) == loop_parents[id(sch.get(rv))]
    # collect_realizes does not look inside the blocks it finds
    inner = body.block.body
    outer = [x for x, p in with_parents(inner)
             if isinstance(x, BlockRealize) and not any(isinstance(q, BlockRealize) for q in p)]
    assert collect_realizes(inner) == outer
    assert collect_realizes(body) == [body]
