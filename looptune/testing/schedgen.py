"""Random valid schedules for differential testing.

`fuzz_schedule` draws a random sequence of actions, each applying one or two primitives to a
random block or loop: every loop and block primitive and every sampling instruction takes
part. `random_schedule` and `random_block_schedule` are the older, more structured
generators the unit tests use (kept as they were: the same seed gives the same schedule).
An attempt the schedule refuses (ScheduleError) is skipped, which also exercises the
contract that a refused request leaves the schedule unchanged."""
from __future__ import annotations

import random
from collections import Counter

from ..schedule import INSTRUCTIONS, Instruction, Schedule, ScheduleError
from ..tir.functor import find_stmts
from ..tir.stmt import BlockRealize


def block_names(func) -> list[str]:
    return [br.block.name for br in find_stmts(func.body, BlockRealize)
            if br.block.name != "root"]


def _try(fn, *args):
    try:
        return fn(*args)
    except ScheduleError:
        return None


# ------------------------------------------------------------------------------ fuzzing
class FuzzSchedule(Schedule):
    """A Schedule that counts refused instructions by kind (`refused`) and, when an
    instruction fails with anything but ScheduleError (a bug), attaches the attempted
    instruction to the exception as `failed_instruction`, so that a trace can replay it."""

    def __init__(self, func, *, seed: int | None = None):
        super().__init__(func, seed=seed)
        self.refused: Counter = Counter()

    def apply_instruction(self, kind, inputs, attrs, decision=None):
        try:
            return super().apply_instruction(kind, inputs, attrs, decision)
        except ScheduleError:
            self.refused[kind if isinstance(kind, str) else kind.name] += 1
            raise
        except Exception as e:
            kind = INSTRUCTIONS[kind] if isinstance(kind, str) else kind
            e.failed_instruction = (Instruction(kind, tuple(inputs), tuple(attrs), ()), decision)
            raise


def _loop(sch, rng, b, *, bias=None):
    """A random loop around block b (None if it has none); bias "outer" / "inner" prefers
    the ends of the nest."""
    loops = sch.get_loops(b)
    if not loops:
        return None
    if bias == "outer" and rng.random() < 0.7:
        return loops[0]
    if bias == "inner" and rng.random() < 0.7:
        return loops[-1]
    return rng.choice(loops)


def _split_perfect(sch, rng, b):
    loop = _loop(sch, rng, b)
    if loop is not None:
        n = rng.choice([2, 2, 3, 4])
        sch.split(loop, sch.sample_perfect_tile(loop, n=n, max_innermost_factor=rng.choice(
            [2, 4, 8, 16, 64])))


def _split_tile(sch, rng, b):
    loop = _loop(sch, rng, b)
    if loop is not None:
        n = rng.choice([2, 2, 3])
        sch.split(loop, sch.sample_tile(loop, n=n, max_innermost_factor=rng.choice([4, 8, 16])))


def _split_fixed(sch, rng, b):
    """Factors that usually do not divide the extent: guarded tails."""
    loop = _loop(sch, rng, b)
    if loop is None:
        return
    factors = [rng.randint(1, 9) for _ in range(rng.choice([2, 2, 3]))]
    factors[rng.randrange(len(factors))] = None
    sch.split(loop, factors)


def _fuse(sch, rng, b):
    loops = sch.get_loops(b)
    if len(loops) >= 2:
        n = rng.choice([2, 2, 3])
        t = rng.randrange(max(1, len(loops) - n + 1))
        sch.fuse(*loops[t:t + n])


def _reorder(sch, rng, b):
    loops = sch.get_loops(b)
    if len(loops) >= 2:
        lo = rng.randrange(len(loops) - 1)
        hi = rng.randint(lo + 2, len(loops))
        perm = loops[lo:hi]
        rng.shuffle(perm)
        sch.reorder(*perm)


def _parallel(sch, rng, b):
    loop = _loop(sch, rng, b, bias="outer")
    if loop is not None:
        sch.parallel(loop)


def _vectorize(sch, rng, b):
    loop = _loop(sch, rng, b, bias="inner")
    if loop is None:
        return
    if rng.random() < 0.5:  # a short innermost loop, often with a tail
        loop = sch.split(loop, [None, rng.choice([3, 4, 8, 16])])[-1]
    sch.vectorize(loop)


def _unroll(sch, rng, b):
    loop = _loop(sch, rng, b, bias="inner")
    if loop is not None:
        sch.unroll(loop)


def _annotate_unroll(sch, rng, b):
    step = sch.sample_categorical([0, 16, 64, 512], [0.2, 0.3, 0.3, 0.2])
    sch.annotate(b, "pragma_auto_unroll_max_step", step)
    sch.annotate(b, "pragma_unroll_explicit", rng.choice([0, 1]))
    if rng.random() < 0.1:
        sch.unannotate(b, "pragma_unroll_explicit")


def _add_unit_loop(sch, rng, b):
    loop = _loop(sch, rng, b)
    sch.add_unit_loop(b if loop is None or rng.random() < 0.5 else loop)


def _compute_inline(sch, rng, b):
    sch.compute_inline(b)


def _reverse_compute_inline(sch, rng, b):
    sch.reverse_compute_inline(b)


def _compute_at(sch, rng, b):
    if rng.random() < 0.5:
        sch.compute_at(b, sch.sample_compute_location(b), rng.random() < 0.5)
        return
    consumers = sch.get_consumers(b)
    if consumers:
        loop = _loop(sch, rng, rng.choice(consumers))
        if loop is not None:
            sch.compute_at(b, loop, rng.random() < 0.5)


def _reverse_compute_at(sch, rng, b):
    producers = sch.get_producers(b)
    if producers:
        loop = _loop(sch, rng, rng.choice(producers))
        if loop is not None:
            sch.reverse_compute_at(b, loop, rng.random() < 0.5)


def _cache_read(sch, rng, b):
    n = len(sch.get(b).reads)
    if n:
        cr = sch.cache_read(b, rng.randrange(n), rng.choice(["global", "local"]))
        loop = _loop(sch, rng, b)
        if loop is not None and rng.random() < 0.7:
            sch.compute_at(cr, loop, rng.random() < 0.5)


def _cache_write(sch, rng, b):
    cw = sch.cache_write(b, 0, rng.choice(["global", "local"]))
    loop = _loop(sch, rng, b)
    if loop is not None and rng.random() < 0.7:
        sch.reverse_compute_at(cw, loop, rng.random() < 0.5)


def _decompose_reduction(sch, rng, b):
    loop = _loop(sch, rng, b)
    if loop is not None:
        sch.decompose_reduction(b, loop)


def _rfactor(sch, rng, b):
    loop = _loop(sch, rng, b, bias="inner")
    if loop is not None:
        ndim = len(sch.get(b).writes[0].buffer.shape) if sch.get(b).writes else 0
        sch.rfactor(loop, rng.randint(0, ndim))


def _storage_align(sch, rng, b):
    block = sch.get(b)
    if block.writes:
        ndim = len(block.writes[0].buffer.shape)
        factor = rng.choice([2, 4, 8, 16, 32])
        sch.storage_align(b, 0, rng.randrange(-ndim, ndim), factor, rng.randrange(factor))


def _set_scope(sch, rng, b):
    sch.set_scope(b, 0, rng.choice(["global", "local"]))


def _permute_layout(sch, rng, b):
    block = sch.get(b)
    if block.writes:
        order = list(range(len(block.writes[0].buffer.shape)))
        rng.shuffle(order)
        sch.permute_layout(b, 0, order)


def _child_blocks(sch, rng, b):
    """Apply a loop action to a block found through get_child_blocks."""
    loop = _loop(sch, rng, b, bias="outer")
    if loop is not None:
        children = sch.get_child_blocks(loop)
        if children:
            rng.choice([_split_fixed, _vectorize, _parallel])(sch, rng, rng.choice(children))


# (action, weight): loop actions are cheap and frequent, block actions rarer
ACTIONS = (
    (_split_perfect, 6), (_split_tile, 3), (_split_fixed, 5), (_fuse, 4), (_reorder, 5),
    (_parallel, 3), (_vectorize, 4), (_unroll, 2), (_annotate_unroll, 2), (_add_unit_loop, 1),
    (_compute_inline, 3), (_reverse_compute_inline, 2), (_compute_at, 5),
    (_reverse_compute_at, 3), (_cache_read, 2), (_cache_write, 2), (_decompose_reduction, 2),
    (_rfactor, 2), (_storage_align, 2), (_set_scope, 1), (_child_blocks, 1),
    (_permute_layout, 1),
)


def fuzz_schedule(func, seed: int, *, steps: int | None = None) -> Schedule:
    """A schedule of `func` from `steps` random actions (default: 3 to 24)."""
    sch = FuzzSchedule(func, seed=seed)
    random_actions(sch, seed, steps=steps)
    return sch


def random_actions(sch: Schedule, seed: int, *, steps: int | None = None) -> None:
    """Apply random actions to `sch`. Exceptions other than ScheduleError propagate (with a
    FuzzSchedule they carry the failed instruction)."""
    rng = random.Random(seed)
    actions, weights = zip(*ACTIONS)
    for _ in range(steps if steps is not None else rng.randint(3, 24)):
        action = rng.choices(actions, weights)[0]
        names = block_names(sch.func)
        if not names:
            break
        try:
            action(sch, rng, sch.get_block(rng.choice(names)))
        except ScheduleError:
            pass


# ------------------------------------------------------------------------------ structured
def random_schedule(func, seed: int) -> Schedule:
    rng = random.Random(seed)
    sch = Schedule(func, seed=seed)
    for name in block_names(func):
        b = sch.get_block(name)
        for loop in sch.get_loops(b):
            r = rng.random()
            if r < 0.4:
                n = rng.choice([2, 3])
                tiles = sch.sample_perfect_tile(loop, n=n,
                                                max_innermost_factor=rng.choice([4, 8, 16]))
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
            spatial = [lp for lp in loops if _try(_probe_spatial, sch, lp)]
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
