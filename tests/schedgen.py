"""Random valid schedules for differential testing: random splits (dividing and not),
reorders, fuses and annotations, drawn through the sampling instructions where they exist.
An attempt the schedule refuses (ScheduleError) is skipped, which also exercises the
contract that a refused request leaves the schedule unchanged."""
from __future__ import annotations

import random

from looptune.schedule import Schedule, ScheduleError
from looptune.tir.stmt import BlockRealize


def block_names(func) -> list[str]:
    out = []

    def walk(s):
        if isinstance(s, BlockRealize):
            out.append(s.block.name)
            walk(s.block.body)
        for attr in ("body", "then_case", "else_case"):
            x = getattr(s, attr, None)
            if x is not None and not isinstance(s, BlockRealize):
                walk(x)
        for x in getattr(s, "stmts", ()):
            walk(x)

    walk(func.body)
    return [n for n in out if n != "root"]


def _try(fn, *args):
    try:
        return fn(*args)
    except ScheduleError:
        return None


def random_schedule(func, seed: int) -> Schedule:
    rng = random.Random(seed)
    sch = Schedule(func, seed=seed)
    for name in block_names(func):
        b = sch.get_block(name)
        for loop in sch.get_loops(b):
            r = rng.random()
            if r < 0.4:
                n = rng.choice([2, 3])
                tiles = sch.sample_perfect_tile(loop, n=n, max_innermost_factor=rng.choice([4, 8, 16]))
                sch.split(loop, tiles)
            elif r < 0.7:
                sch.split(loop, [None, rng.randint(2, 9)])  # usually does not divide
        loops = sch.get_loops(b)
        if len(loops) > 1 and rng.random() < 0.7:
            perm = list(loops)
            rng.shuffle(perm)
            sch.reorder(*perm)
        loops = sch.get_loops(b)
        if len(loops) >= 2 and rng.random() < 0.6:
            t = rng.randrange(len(loops) - 1)
            fused = _try(sch.fuse, loops[t], loops[t + 1])
            if fused is not None and rng.random() < 0.6:  # split the fused loop again
                if rng.random() < 0.5:
                    sch.split(fused, sch.sample_perfect_tile(fused, n=2, max_innermost_factor=16))
                else:
                    sch.split(fused, [None, rng.randint(2, 12)])
        loops = sch.get_loops(b)
        if rng.random() < 0.5:
            _try(sch.parallel, loops[0])
        loops = sch.get_loops(b)
        if rng.random() < 0.5:
            _try(sch.vectorize, loops[-1])
        if len(loops) > 1 and rng.random() < 0.3:
            _try(sch.unroll, rng.choice(loops[:-1]))
        if rng.random() < 0.3:
            step = sch.sample_categorical([0, 16, 64], [0.3, 0.4, 0.3])
            sch.annotate(b, "pragma_auto_unroll_max_step", step)
            sch.annotate(b, "pragma_unroll_explicit", rng.choice([0, 1]))
    return sch


def random_block_schedule(func, seed: int) -> Schedule:
    """Random loop schedules plus block primitives: inlining, compute_at through
    sample_compute_location, cache_read / cache_write with compute_at / reverse_compute_at,
    rfactor and decompose_reduction. Refused attempts are skipped."""
    rng = random.Random(seed)
    sch = random_schedule(func, seed) if rng.random() < 0.5 else Schedule(func, seed=seed)
    if rng.random() < 0.3:
        _try(sch.reverse_compute_inline, sch.get_block(block_names(sch.func)[-1]))
    names = block_names(sch.func)
    for name in reversed(names[:-1]):  # producers, consumers first
        if name not in block_names(sch.func):
            continue
        b = sch.get_block(name)
        r = rng.random()
        if r < 0.3:
            _try(sch.compute_inline, b)
        elif r < 0.8:
            loc = _try(sch.sample_compute_location, b)
            if loc is not None:
                _try(sch.compute_at, b, loc, rng.random() < 0.5)
    for name in block_names(sch.func):
        b = sch.get_block(name)
        block = sch.get(b)
        loops = sch.get_loops(b)
        if block.init is not None and rng.random() < 0.4 and loops:
            spatial = [l for l in loops if _try(_probe_spatial, sch, l)]
            cw = _try(sch.cache_write, b, 0, rng.choice(["local", "global"]))
            if cw is not None and spatial:
                _try(sch.reverse_compute_at, cw, rng.choice(spatial))
        if block.reads and rng.random() < 0.3 and loops:
            cr = _try(sch.cache_read, b, rng.randrange(len(block.reads)), "global")
            if cr is not None:
                _try(sch.compute_at, cr, rng.choice(sch.get_loops(b)))
        if block.init is not None and rng.random() < 0.2:
            loops = sch.get_loops(b)
            if loops:
                _try(sch.rfactor, rng.choice(loops), 0)
        if name in block_names(sch.func) and sch.get(sch.get_block(name)).init is not None \
                and rng.random() < 0.3:
            loops = sch.get_loops(sch.get_block(name))
            if loops:
                _try(sch.decompose_reduction, sch.get_block(name), rng.choice(loops))
    return sch


def _probe_spatial(sch, loop):
    """True when parallelizing the loop would be legal (it drives no reduction)."""
    trial = sch.copy()
    trial.parallel(loop)
    return True
