"""looptune.tir.arith: hand-picked split / fuse patterns, then randomized checks that
`simplify` is exact and that `const_bound` and `eval_bound` contain every value, by
evaluating over every point of small variable ranges."""
from __future__ import annotations

import itertools
import random

import pytest

from looptune.tir import (Binary, Buffer, Cast, IntImm, Not, Select, Var, binary, cast, const,
                          select, structural_equal)
from looptune.tir.arith import INF, Simplifier, const_bound, const_extent, eval_bound, simplify
from looptune.tir.functor import collect_vars


# ---------------------------------------------------------------------------- evaluation
def _tdiv(a, b):
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


_OPS = {
    "+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
    "//": lambda a, b: a // b, "%": lambda a, b: a % b,  # Python's: floor semantics
    "tdiv": _tdiv, "tmod": lambda a, b: a - b * _tdiv(a, b),
    "min": min, "max": max,
    "<": lambda a, b: a < b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b, "==": lambda a, b: a == b, "!=": lambda a, b: a != b,
    "and": lambda a, b: a and b, "or": lambda a, b: a or b,
}


def evaluate(e, env: dict):
    """Value of an integer / boolean expression with variables bound by `env`."""
    if isinstance(e, Var):
        return env[e]
    if isinstance(e, IntImm):
        return bool(e.value) if e.dtype == "bool" else int(e.value)
    if isinstance(e, Binary):
        return _OPS[e.op](evaluate(e.a, env), evaluate(e.b, env))
    if isinstance(e, Not):
        return not evaluate(e.a, env)
    if isinstance(e, Select):
        return evaluate(e.true_value if evaluate(e.cond, env) else e.false_value, env)
    if isinstance(e, Cast):
        return int(evaluate(e.value, env))
    raise TypeError(f"evaluate: unsupported {e!r}")


def points(ranges: dict):
    """Every assignment {var: value} with each var over its inclusive (lo, hi)."""
    names = list(ranges)
    for vals in itertools.product(*(range(lo, hi + 1) for lo, hi in ranges.values())):
        yield dict(zip(names, vals))


def assert_exact(e, dom, ranges=None):
    """simplify(e, dom) agrees with e at every point of `ranges`; by default each variable
    sweeps its range in dom, or [-20, 20] when dom leaves it unbounded."""
    s = simplify(e, dom)
    if ranges is None:
        ranges = {v: dom.get(v, (-20, 20)) for v in collect_vars(e)}
    for env in points(ranges):
        assert evaluate(s, env) == evaluate(e, env), (e, s, env)
    return s


def assert_simplifies(e, dom, want, *order):
    """simplify(e, dom) is `want` (structurally, with variables matched by identity) and exact."""
    got = assert_exact(e, dom)
    # structural equality is blind to names; leading with the variables pins them down
    assert structural_equal((*order, got), (*order, want)), f"{e!r} -> {got!r}, want {want!r}"


i, j, k, n, o, f, x, y, z = (Var(s) for s in "i j k n o f x y z".split())


# ---------------------------------------------------------------------------- split / fuse
def test_split_of_fused_loop_recovers_both_loops():
    dom = {i: (0, 15), j: (0, 31)}
    fused = i * 32 + j
    assert simplify(fused // 32, dom) is i
    assert simplify(fused % 32, dom) is j
    assert_exact(fused // 32, dom)
    assert_exact(fused % 32, dom)


def test_fuse_then_split_by_larger_factor():
    dom = {o: (0, 20), n: (0, 7)}
    assert_simplifies((o * 8 + n) // 32, dom, o // 4, o, n)
    assert_simplifies((o * 8 + n) % 32, dom, o % 4 * 8 + n, o, n)


def test_three_level_split():
    dom = {i: (0, 3), j: (0, 3), k: (0, 7)}
    e = (i * 4 + j) * 8 + k
    assert simplify(e // 32, dom) is i
    assert_simplifies(e % 32, dom, j * 8 + k, i, j, k)
    assert simplify(e // 8 % 4, dom) is j
    assert simplify(e % 8, dom) is k


def test_quotient_rule_holds_without_ranges():
    # (c*q + r) // c == q + r // c for any integers, so no range is needed
    assert_simplifies((x * 8 + y) // 8, {}, x + y // 8, x, y)
    assert_exact((x * 8 + y) // 8, {}, {x: (-3, 3), y: (-20, 20)})
    assert_simplifies((x * 8 + y) % 8, {}, y % 8, x, y)
    assert_exact((x * 8 + y) % 8, {}, {x: (-3, 3), y: (-20, 20)})


def test_gcd_reduction():
    assert_simplifies((4 * x + 1) // 8, {}, x // 2, x)
    assert_simplifies((4 * x + 1) % 8, {}, x % 2 * 4 + 1, x)
    for e in [(4 * x + 1) // 8, (4 * x + 1) % 8, (6 * x + 4) // 4, (-4 * x + 1) // 8,
              (-4 * x + 1) % 8, (6 * x + 9) % 12]:
        assert_exact(e, {}, {x: (-20, 20)})


def test_nested_division_and_modulo():
    assert_simplifies((f // 16) // 2, {}, f // 32, f)
    assert_simplifies((f % 16) % 8, {}, f % 8, f)
    assert_simplifies((f % 8) % 16, {}, f % 8, f)  # f % 8 is already in [0, 8)
    for e in [(f // 16) // 2, (f % 16) % 8, (f % 8) % 16, (f // 3) // -2, (f % 12) % 4]:
        assert_exact(e, {}, {f: (-40, 40)})


def test_div_mod_merge():
    assert simplify(x // 8 * 8 + x % 8) is x
    assert_simplifies(3 * (x // 8 * 8) + 3 * (x % 8), {}, x * 3, x)
    merged = assert_exact(x // 8 * 8 + x % 8 + y, {})
    assert collect_vars(merged) == {x, y} and simplify(merged - x - y).value == 0
    assert_simplifies((i * 32 + j) // 8 * 8 + (i * 32 + j) % 8, {i: (0, 3), j: (0, 31)},
                      i * 32 + j, i, j)
    # only matching coefficients merge
    assert_exact(x // 8 * 4 + x % 8, {}, {x: (-20, 20)})


def test_division_decided_by_ranges():
    dom = {j: (0, 31)}
    assert simplify(j // 32, dom).value == 0
    assert simplify(j % 32, dom) is j
    assert simplify((j + 3) // 64, dom).value == 0
    assert simplify((j - 40) // 64, dom).value == -1
    assert_simplifies((j - 40) % 64, dom, j + 24, j)
    assert_exact((j - 40) % 64, dom)
    # not decided: the range crosses a multiple of 16
    assert isinstance(simplify(j // 16, dom), Binary)


def test_linear_normalisation():
    assert simplify(x + y - x) is y
    assert simplify((x + 1) * 2 - 2 * x).value == 2
    assert simplify(x * 3 - x * 3).value == 0
    assert_simplifies(x * 2 + x, {}, x * 3, x)
    assert_simplifies(2 * (x + 3) - (y - x), {}, x * 3 - y + 6, x, y)


# ---------------------------------------------------------------------------- comparisons
def test_comparisons_decided_by_ranges():
    dom = {i: (0, 15), j: (0, 31)}
    truths = {i < 16: True, i <= 15: True, i >= 0: True, i > 15: False, i >= 16: False,
              i == 16: False, i != 16: True, i * 32 + j < 512: True,
              i * 32 + j >= 512: False, i - j > 15: False, j - i >= -15: True}
    for cond, want in truths.items():
        got = simplify(cond, dom)
        assert isinstance(got, IntImm) and got.value is want, (cond, got)


def test_comparisons_left_open_stay_exact():
    dom = {i: (0, 15)}
    for cond in [i < 15, i <= 3, i == 4, i != 0, i * 2 < i + 7]:
        got = assert_exact(cond, dom)
        assert not isinstance(got, IntImm), (cond, got)


def test_comparisons_use_divisibility():
    assert simplify(2 * x + 1 == 4).value is False  # an odd number is never 4
    assert simplify(2 * x + 1 != 4).value is True
    assert_simplifies(2 * x < 5, {}, x < 3, x)
    assert_simplifies(2 * x >= 5, {}, x >= 3, x)
    assert_simplifies(2 * x + 4 != 8, {}, x != 2, x)
    for cond in [2 * x < 5, 2 * x <= -5, 3 * x > 7, 3 * x >= -7, 4 * x + 2 == 6, 6 * x - 2 * y < 3]:
        assert_exact(cond, {}, {x: (-10, 10), y: (-3, 3)})


def test_logic_and_not():
    dom = {i: (0, 15)}
    assert simplify((i < 16) & (i >= 0), dom).value is True
    assert_simplifies((i < 3) | (i > 20), dom, i < 3, i)
    assert simplify(Not(i < 16), dom).value is False
    assert Simplifier(dom).can_prove(i * 2 < 31)
    assert not Simplifier(dom).can_prove(i * 2 < 30)


# ---------------------------------------------------------------------------- min / max
def test_min_max_decided_by_ranges():
    dom = {i: (0, 15), j: (0, 31)}
    assert simplify(binary("min", i, 20), dom) is i
    assert simplify(binary("max", i, 20), dom).value == 20
    assert_simplifies(binary("max", i, j + 16), dom, j + 16, i, j)
    assert_simplifies(binary("min", i * 2, i + 15), dom, i * 2, i)
    assert simplify(binary("min", x, x + 1)) is x  # decided without ranges
    open_min = simplify(binary("min", i, j), dom)
    assert isinstance(open_min, Binary) and open_min.op == "min"


# ---------------------------------------------------------------------------- bounds
def test_const_bound_examples():
    dom = {i: (0, 15), j: (0, 31)}
    assert const_bound(i * 32 + j, dom) == (0, 511)
    assert const_bound(j // 4, dom) == (0, 7)
    assert const_bound((i * 32 + j) % 8, dom) == (0, 7)
    assert const_bound(j % 64, dom) == (0, 31)
    assert const_bound(i - j, dom) == (-31, 15)
    assert const_bound(binary("min", i, j - 20), dom) == (-20, 11)
    assert const_bound(x + 1, dom) == (-INF, INF)
    assert const_bound(x % 8, dom) == (0, 7)


def test_eval_bound_examples():
    dom = {i: (0, 15)}
    relax = {j: (0, 31)}
    lo, hi = eval_bound(i * 32 + j, relax, dom)
    assert structural_equal((i, lo, hi), (i, i * 32, i * 32 + 31))
    lo, hi = eval_bound((i * 32 + j) // 8, relax, dom)
    assert structural_equal((i, lo, hi), (i, i * 4, i * 4 + 3))
    lo, hi = eval_bound(i * 32 + j, {i: (0, 15), j: (0, 31)})
    assert (lo.value, hi.value) == (0, 511)
    lo, hi = eval_bound(i * 4 - j, {j: (0, 3)}, dom)
    assert structural_equal((i, lo, hi), (i, i * 4 - 3, i * 4))
    table = Buffer("T", (16,), "int32")
    assert eval_bound(table[j] + i, relax, dom) is None  # a loaded index has no bound


def test_const_extent():
    dom = {i: (0, 15), j: (0, 3)}
    assert const_extent(i, i + 3, dom) == 4
    assert const_extent(i * 4, i * 4 + j, dom) == 4  # the largest over dom
    assert const_extent(i, x, dom) is None


# ---------------------------------------------------------------------------- randomized
_VARS = (x, y, z)
_DIVISORS = (1, 2, 3, 4, 6, 8, 16, 32)


def random_int_expr(r: random.Random, vs, depth: int):
    """An integer expression in the shapes split, fuse and tiling produce, and some others."""
    if depth == 0 or r.random() < 0.15:
        return r.choice(vs) if r.random() < 0.8 else const(r.randint(-6, 9))
    roll = r.random()
    if roll < 0.2:  # an affine combination with tile-like coefficients
        base = r.choice((2, 3, 4, 8))
        e = const(r.randint(-3, 8))
        for v in r.sample(vs, r.randint(1, len(vs))):
            term = random_int_expr(r, vs, depth - 1) if r.random() < 0.3 else v
            e = e + term * (base ** r.randint(0, 3) * r.choice((1, 1, 1, -1, 3)))
        return e
    a = random_int_expr(r, vs, depth - 1)
    if roll < 0.3:
        return a + random_int_expr(r, vs, depth - 1)
    if roll < 0.37:
        return a - random_int_expr(r, vs, depth - 1)
    if roll < 0.45:
        return a * r.choice((-3, -2, -1, 2, 3, 4, 8))
    if roll < 0.6:
        return a // r.choice(_DIVISORS)
    if roll < 0.75:
        return a % r.choice(_DIVISORS)
    if roll < 0.81:
        return binary("min", a, random_int_expr(r, vs, depth - 1))
    if roll < 0.87:
        return binary("max", a, random_int_expr(r, vs, depth - 1))
    if roll < 0.9:
        return a * random_int_expr(r, vs, depth - 1)  # non-affine: stays an atom
    if roll < 0.93:
        return a // r.choice((-2, -3)) if r.random() < 0.5 else a % r.choice((-2, -3))
    if roll < 0.96:
        cond = binary(r.choice(("<", "==", ">=")), a, random_int_expr(r, vs, depth - 1))
        return select(cond, random_int_expr(r, vs, depth - 1), a)
    return binary(r.choice(("tdiv", "tmod")), a, const(r.choice((2, 3, -3))))


def random_cond(r: random.Random, vs, depth: int):
    roll = r.random()
    if depth == 0 or roll < 0.6:
        op = r.choice(("<", "<=", ">", ">=", "==", "!="))
        return binary(op, random_int_expr(r, vs, depth + 1), random_int_expr(r, vs, depth))
    if roll < 0.75:
        return binary("and", random_cond(r, vs, depth - 1), random_cond(r, vs, depth - 1))
    if roll < 0.9:
        return binary("or", random_cond(r, vs, depth - 1), random_cond(r, vs, depth - 1))
    return Not(random_cond(r, vs, depth - 1))


def random_ranges(r: random.Random):
    vs = list(_VARS[:r.randint(1, 3)])
    ranges = {}
    for v in vs:
        lo = r.choice((0, 0, 0, r.randint(-9, 3)))
        ranges[v] = (lo, lo + r.choice((0, 1, 2, 3, 4, 7, 8, 15)))
    return vs, ranges


def _cases(seed: int, count: int):
    r = random.Random(seed)
    for _ in range(count):
        vs, ranges = random_ranges(r)
        # simplify may be told fewer ranges than the test sweeps: unknown vars are unbounded
        dom = {v: rg for v, rg in ranges.items() if r.random() < 0.85}
        yield r, vs, ranges, dom


@pytest.mark.parametrize("seed", range(4))
def test_random_int_expressions_simplify_exactly(seed):
    for r, vs, ranges, dom in _cases(seed, 150):
        e = random_int_expr(r, vs, r.randint(1, 4))
        s = simplify(e, dom)
        assert s.dtype == e.dtype
        assert collect_vars(s) <= collect_vars(e)
        lo, hi = const_bound(e, dom)
        slo, shi = const_bound(s, dom)
        for env in points(ranges):
            want = evaluate(e, env)
            assert evaluate(s, env) == want, f"{e!r} -> {s!r} with dom {dom} at {env}"
            if len(dom) == len(ranges):
                assert lo <= want <= hi, f"const_bound({e!r}) = {(lo, hi)} misses {want} at {env}"
                assert slo <= want <= shi, f"const_bound({s!r}) = {(slo, shi)} misses {want}"


def random_tiled_index(r: random.Random):
    """A fused / split loop index ((v0*f1 + v1)*f2 + v2 ...) divided or reduced by products
    of the factors, as split, fuse and compute_at produce. The loop ranges are usually exact
    tiles [0, f-1], sometimes one off, so that a rule that trusts a range it should not is
    caught."""
    vs = list(_VARS[:r.randint(2, 3)])
    factors = [r.choice((2, 3, 4, 8)) for _ in vs]
    ranges = {}
    e = const(0)
    for v, fct in zip(vs, factors):
        e = e * fct + v
        lo, hi = 0, fct - 1
        roll = r.random()
        if roll < 0.15:
            hi += 1
        elif roll < 0.25:
            lo -= 1
        ranges[v] = (lo, hi)
    if r.random() < 0.3:
        e = e + r.randint(0, 5)
    d1 = 1
    for fct in factors[r.randint(1, len(factors) - 1):]:
        d1 *= fct
    d1 *= r.choice((1, 1, 1, 2))
    d2 = r.choice((2, 3, 4, 8))
    shape = r.randrange(5)
    if shape == 0:
        e = e // d1
    elif shape == 1:
        e = e % d1
    elif shape == 2:
        e = e // d1 % d2
    elif shape == 3:
        e = e % (d1 * d2) // d1
    else:
        e = e // d1 * d1 + e % d1
    return e, ranges


def test_random_tiled_indices_simplify_exactly():
    r = random.Random(11)
    for _ in range(400):
        e, ranges = random_tiled_index(r)
        s = simplify(e, ranges)
        for env in points(ranges):
            assert evaluate(s, env) == evaluate(e, env), f"{e!r} -> {s!r} with {ranges} at {env}"
        for cond in (e < 7, e == 2, e >= 1):
            c = simplify(cond, ranges)
            for env in points(ranges):
                assert evaluate(c, env) == evaluate(cond, env), f"{cond!r} -> {c!r} at {env}"


@pytest.mark.parametrize("seed", range(2))
def test_random_conditions_simplify_exactly(seed):
    for r, vs, ranges, dom in _cases(100 + seed, 120):
        c = random_cond(r, vs, r.randint(0, 2))
        s = simplify(c, dom)
        assert s.dtype == "bool"
        for env in points(ranges):
            assert evaluate(s, env) == evaluate(c, env), f"{c!r} -> {s!r} with {dom} at {env}"


@pytest.mark.parametrize("seed", range(3))
def test_random_eval_bound_contains_every_value(seed):
    checked = 0
    for r, vs, ranges, _ in _cases(200 + seed, 120):
        e = random_int_expr(r, vs, r.randint(1, 4))
        relaxed = [v for v in vs if r.random() < 0.5] or vs[:1]
        relax = {v: ranges[v] for v in relaxed}
        outer = {v: rg for v, rg in ranges.items() if v not in relax}
        bound = eval_bound(e, relax, outer)
        if bound is None:
            continue
        lo, hi = bound
        assert not (collect_vars(lo) | collect_vars(hi)) & set(relax), (e, bound)
        for oenv in points(outer):
            values = [evaluate(e, {**oenv, **renv}) for renv in points(relax)]
            blo, bhi = evaluate(lo, oenv), evaluate(hi, oenv)
            assert blo <= min(values) and max(values) <= bhi, (
                f"eval_bound({e!r}, relax={relaxed}) = {bound} gives [{blo}, {bhi}] at {oenv}, "
                f"values span [{min(values)}, {max(values)}]")
        checked += 1
    assert checked > 60  # most random expressions do have a bound


def test_eval_bound_is_tight_on_split_patterns():
    # for the affine indices a tiled loop nest produces, the bound is exact, not just sound
    r = random.Random(7)
    for _ in range(100):
        f1, f2 = r.choice((2, 4, 8)), r.choice((2, 3, 4))
        dom = {x: (0, 5), y: (0, f1 - 1), z: (0, f2 - 1)}
        e = (x * f1 + y) * f2 + z
        relaxed = r.sample([y, z], r.randint(1, 2))
        relax = {v: dom[v] for v in relaxed}
        outer = {v: rg for v, rg in dom.items() if v not in relax}
        lo, hi = eval_bound(e, relax, outer)
        for oenv in points(outer):
            values = [evaluate(e, {**oenv, **renv}) for renv in points(relax)]
            assert (evaluate(lo, oenv), evaluate(hi, oenv)) == (min(values), max(values))


def test_simplify_keeps_int64():
    n64 = Var("n", "int64")
    dom = {n64: (0, 100), y: (0, 7)}
    e = (n64 * 8 + y) // 8
    s = simplify(e, dom)
    assert s is n64
    assert simplify(n64 - n64).dtype == "int64"
    assert simplify(cast(y, "int64") % 8, dom).dtype == "int64"
