"""Sampling instructions: their decisions are what the search changes."""
from __future__ import annotations

from functools import lru_cache
from math import prod

from ..error import ScheduleError
from ..trace import ExprRV, instruction


@lru_cache(maxsize=4096)
def divisors(n: int) -> tuple:
    small = [d for d in range(1, int(n ** 0.5) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


@lru_cache(maxsize=4096)
def prime_factors(n: int) -> tuple:
    out, p = [], 2
    while p * p <= n:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    if n > 1:
        out.append(n)
    return tuple(out)


def sample_tile(rand, extent: int, n: int, max_innermost_factor: int) -> tuple:
    """Uniform innermost factor among divisors <= max_innermost_factor, then the remaining
    prime factors scattered uniformly over the outer positions."""
    if n == 1:
        return (extent,)
    inner_choices = [d for d in divisors(extent) if d <= max_innermost_factor] or [1]
    inner = rand.choice(inner_choices)
    factors = [1] * (n - 1)
    for p in prime_factors(extent // inner):
        factors[rand.randrange(n - 1)] *= p
    return tuple(factors) + (inner,)


def sample_capped_tile(rand, extent: int, n: int, max_factors) -> tuple:
    """n factors of extent, factor i at most max_factors[i] (None: no limit): each limited
    factor, innermost first, uniform among the divisors of what is left within its limit;
    the rest scattered over the unlimited ones (the first, where all are limited)."""
    factors, left = [1] * n, extent
    limited = [i for i in range(n) if max_factors[i] is not None]
    for i in sorted(limited, reverse=True):
        factors[i] = rand.choice([d for d in divisors(left) if d <= max_factors[i]] or [1])
        left //= factors[i]
    free = [i for i in range(n) if max_factors[i] is None] or [0]
    for p in prime_factors(left):
        factors[rand.choice(free)] *= p
    return tuple(factors)


def tile_caps(attrs) -> tuple | None:
    """The per-level limits of a SamplePerfectTile (its optional third attribute)."""
    if len(attrs) < 3 or attrs[2] is None:
        return None
    return tuple(attrs[2])


@instruction("SamplePerfectTile", "sample_perfect_tile", inputs=("loop",),
             attrs=("n", "max_innermost_factor", "max_factors"), pure=True, sampling=True,
             list_outputs=True)
def sample_perfect_tile(sch, inputs, attrs, decision):
    loop = sch._loop(inputs[0]).node
    n, max_inner = attrs[:2]
    caps = tile_caps(attrs)
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"sample_perfect_tile: n must be a positive int, got {n!r}")
    if caps is not None and len(caps) != n:
        raise ScheduleError(f"sample_perfect_tile: max_factors {list(caps)} must give one limit "
                            f"(or None) per tile, {n}")
    if decision is None:
        decision = (sample_tile(sch.rand, loop.extent, n, max_inner) if caps is None
                    else sample_capped_tile(sch.rand, loop.extent, n, caps))
    else:
        decision = tuple(decision)
        if (len(decision) != n or any(not isinstance(d, int) or d < 1 for d in decision)
                or prod(decision) != loop.extent):
            raise ScheduleError(f"sample_perfect_tile: decision {list(decision)} is not {n} "
                                f"positive factors of loop {loop.loop_var.name}'s extent "
                                f"{loop.extent}")
    return [sch._new(ExprRV, d) for d in decision], decision


@instruction("SampleCategorical", "sample_categorical", attrs=("candidates", "probs"),
             pure=True, sampling=True)
def sample_categorical(sch, inputs, attrs, decision):
    candidates, probs = attrs
    if not candidates:
        raise ScheduleError("sample_categorical: candidates is empty")
    if len(probs) != len(candidates) or any(p < 0 for p in probs) or sum(probs) <= 0:
        raise ScheduleError(f"sample_categorical: probs {list(probs)} must be non-negative, one "
                            f"per candidate ({len(candidates)}), and not all zero")
    if decision is None:
        decision = sch.rand.choices(range(len(candidates)), weights=probs)[0]
    elif not isinstance(decision, int) or not 0 <= decision < len(candidates):
        raise ScheduleError(f"sample_categorical: decision {decision!r} is not an index into "
                            f"{len(candidates)} candidates")
    value = candidates[decision]
    if not isinstance(value, int):
        raise ScheduleError(f"sample_categorical: candidates must be ints, got {value!r}")
    return [sch._new(ExprRV, value)], decision


@lru_cache(maxsize=4096)
def tile_inner_choices(extent: int, max_innermost_factor: int) -> tuple:
    """Innermost factors sample_tile may pick: the divisors of the extent, and the factors that
    do not divide it but leave a short tail (loop partitioning keeps the main part guard-free):
    small ones (<= 8: register-tile rows) or whole vectors (multiples of 8) whose padded
    extent is at most 10% longer, and power-of-two vectors whose tail is whole 8-lane vectors.
    A width of 56 so gets 16-lane tiles (3 full and a tail of 8) on AVX-512."""
    out = []
    for d in range(1, min(extent, max_innermost_factor) + 1):
        waste = (-(-extent // d) * d - extent) / extent
        if (extent % d == 0 or ((d <= 8 or d % 8 == 0) and waste <= 0.1)
                or (d % 8 == 0 and d & (d - 1) == 0 and extent % 8 == 0)):
            out.append(d)
    return tuple(out) or (1,)


def sample_partitioned_tile(rand, extent: int, n: int, max_innermost_factor: int) -> tuple:
    if n == 1:
        return (extent,)
    inner = rand.choice(tile_inner_choices(extent, max_innermost_factor))
    outer = -(-extent // inner)
    factors = [1] * (n - 1)
    for p in prime_factors(outer):
        factors[rand.randrange(n - 1)] *= p
    return tuple(factors) + (inner,)


def check_partitioned_tile(decision, extent: int, n: int) -> bool:
    """n positive ints whose outer n-1 multiply to ceil(extent / innermost)."""
    return (len(decision) == n and all(isinstance(d, int) and d >= 1 for d in decision)
            and decision[-1] <= extent and prod(decision[:-1]) == -(-extent // decision[-1]))


@instruction("SampleTile", "sample_tile", inputs=("loop",), attrs=("n", "max_innermost_factor"),
             pure=True, sampling=True, list_outputs=True)
def sample_tile_instruction(sch, inputs, attrs, decision):
    loop = sch._loop(inputs[0]).node
    n, max_inner = attrs
    if not isinstance(n, int) or n < 1:
        raise ScheduleError(f"sample_tile: n must be a positive int, got {n!r}")
    if decision is None:
        decision = sample_partitioned_tile(sch.rand, loop.extent, n, max_inner)
    else:
        decision = tuple(decision)
        if not check_partitioned_tile(decision, loop.extent, n):
            raise ScheduleError(f"sample_tile: decision {list(decision)} is not {n} tile sizes of "
                                f"loop {loop.loop_var.name} (extent {loop.extent}): the outer "
                                "ones must multiply to ceil(extent / innermost)")
    return [sch._new(ExprRV, d) for d in decision], decision


def knob_ints(value) -> list:
    """The integers a knob value gives the schedule as sampled values: an int itself, each
    element of a list of ints (a split's factors), nothing for any other value."""
    def is_int(x):
        return isinstance(x, int) and not isinstance(x, bool)
    if is_int(value):
        return [value]
    if isinstance(value, tuple) and value and all(is_int(x) for x in value):
        return list(value)
    return []


# Not pure: the decision identifies a template's config even where no output is used, so
# Trace.simplified keeps it (apply_history_best reads configs back from records).
@instruction("SampleKnob", "sample_knob", attrs=("name", "candidates"), sampling=True,
             list_outputs=True)
def sample_knob(sch, inputs, attrs, decision):
    name, candidates = attrs
    if not isinstance(name, str) or not isinstance(candidates, tuple) or not candidates:
        raise ScheduleError(f"sample_knob: needs a knob name and a non-empty list of candidate "
                            f"values, got {name!r} and {candidates!r}")
    if decision is None:
        decision = sch.rand.randrange(len(candidates))
    elif isinstance(decision, bool) or not isinstance(decision, int) or not (
            0 <= decision < len(candidates)):
        raise ScheduleError(f"sample_knob {name!r}: decision {decision!r} is not an index into "
                            f"its {len(candidates)} candidates")
    return [sch._new(ExprRV, v) for v in knob_ints(candidates[decision])], decision
