"""EvolutionarySearch: a population of design-space points, mutated for a few generations
and ranked by a cost model learned from every measurement; each batch is the model's best
unmeasured candidates plus a few random ones (epsilon-greedy).

Each design space (with or without packed copies, one write level or another) gets its own
share of every batch and of every generation's parents: part of the batch split evenly, the
rest by how fast the space's best measured kernel is against the fastest overall. The model
ranks candidates within a space; which space deserves the trials is judged by measurements,
since a model trained mostly on one space's candidates misjudges another's (as AVX2 on a
Zen 4, matmul 1024: 234 of 256 trials went to the spaces without copies, whose best ran at
34.6 ms, while the 22 in the packed-panel spaces found every kernel under 25 ms)."""
from __future__ import annotations

import heapq
import math
import random
import time
import warnings
from collections import Counter

import numpy as np

from ...schedule import ScheduleError

from ..defaults import DEFAULT_EVOLUTIONARY, default_mutators
from ..mutator.base import Mutator
from .base import SearchStrategy
from .space import DesignSpace, Point, finish_point, replay
from .workers import Task, TaskUnusable, WorkerLost, default_workers, shared_workers


@SearchStrategy.registry.register("evolutionary")
class EvolutionarySearch(SearchStrategy):
    """Parameters (defaults in tune/defaults.py, DEFAULT_EVOLUTIONARY): population_size,
    init_measured_ratio, init_min_unmeasured, genetic_num_iters, genetic_mutate_prob,
    genetic_max_fail_count, eps_greedy, space_floor_share, space_focus, max_fail_count,
    max_search_share, transfer_records, search_workers.
    `cost_model`: "xgb", "mlp", "random"
    or a CostModel; `mutator_probs`: {mutator name or instance: probability} (default: the
    target's, from DEFAULT_MUTATOR_PROBS)."""

    def __init__(self, *, cost_model="xgb", mutator_probs=None, **params):
        unknown = set(params) - set(DEFAULT_EVOLUTIONARY)
        if unknown:
            raise ValueError(f"unknown EvolutionarySearch parameters {sorted(unknown)}; known: "
                             f"{', '.join(DEFAULT_EVOLUTIONARY)}")
        self.params = {**DEFAULT_EVOLUTIONARY, **params}
        floor, focus = self.params["space_floor_share"], self.params["space_focus"]
        if floor is not None and not (isinstance(floor, (int, float)) and 0 <= floor <= 1):
            raise ValueError(f"space_floor_share must be a share in [0, 1] (or None: no "
                             f"per-space shares), not {floor!r}")
        if not (isinstance(focus, (int, float)) and 0 <= focus < math.inf):
            raise ValueError(f"space_focus must be a number >= 0, not {focus!r}")
        for k, v in self.params.items():
            setattr(self, k, v)
        from ..cost_model.base import CostModel
        self.cost_model = CostModel.create(cost_model)
        self.mutator_probs = mutator_probs

    def initialize_with_tune_context(self, context) -> None:
        super().initialize_with_tune_context(context)
        self.cost_model.use_target(context.target)
        probs = self.mutator_probs
        if probs is None:
            probs = default_mutators(context.target)
        else:
            probs = {Mutator.create(m): p for m, p in dict(probs).items()}
        if not probs or any(p < 0 for p in probs.values()) or sum(probs.values()) <= 0:
            raise ValueError(f"mutator_probs must give non-negative probabilities, not all 0: "
                             f"{probs}")
        for m in probs:
            m.initialize_with_tune_context(context)
        self.mutators = probs

    # ------------------------------------------------------------------ the search loop
    def pre_tuning(self, *, max_trials, num_trials_per_iter, design_spaces, database, seen):
        ctx = self.context
        self.max_trials = max_trials
        self.per_iter = num_trials_per_iter
        if self.params["population_size"] is None:
            self.population_size = min(384, max(48, 3 * num_trials_per_iter))
        self.spaces = [DesignSpace(s.trace, name=f"space {i}") for i, s in enumerate(design_spaces)]
        self._space_of = {s.structure: i for i, s in enumerate(self.spaces)}
        self.space_best = [math.inf] * len(self.spaces)  # fastest measured seconds per space
        self.space_trials = Counter()  # space index -> candidates picked from it
        self.seen = set(seen)  # structural hashes measured (or picked) already
        self.trials = 0
        self.rand = random.Random(ctx.seed)
        self.failures = Counter()  # why samples were refused, for the message if none is valid
        self.measured: list = []   # (seconds, Point) of this run's successful measurements
        self.database = database
        records = database.records_of(database.key_of(ctx.func), ctx.target) if database else []
        usable = [r for r in records if not r.measure.get("aborted_early")]
        self.measured_records = sorted((r for r in usable if r.ok), key=lambda r: r.median_secs)
        for rec in self.measured_records:
            i = self._space_of.get(rec.trace.structure())
            if i is not None:
                self.space_best[i] = min(self.space_best[i], rec.median_secs)
        self._learn_from_records(usable)
        self.transferred = 0
        if database is not None and self.transfer_records and not self.cost_model.num_trained:
            self.transferred = self.cost_model.warm_start(
                database, ctx.target, exclude=ctx.func, max_records=self.transfer_records)
        self._offers: list = []
        self._signature = self._tile_extents()
        self._space_pos = {id(s): i for i, s in enumerate(self.spaces)}
        self._task = None  # what the search workers need, made on first use
        self._in_process = False  # the workers broke: search here from then on

    def generate_measure_candidates(self, n: int | None = None):
        n = min(n or self.per_iter, self.max_trials - self.trials)
        if n <= 0:
            self.stop_reason = f"its {self.max_trials} trials are spent"
            return None
        if not self.spaces:
            self.stop_reason = "it has no design space"
            return None
        self._batch_deadline = None
        measure = getattr(self, "_measure_secs", None)
        share = self.max_search_share
        if share and measure:
            self._batch_deadline = time.perf_counter() + measure * share / (1 - share)
        population = self.sample_initial_population()
        if not population:
            self._explain_empty()
            return None
        best = self.evolve(population, n)
        picks = self.pick_eps_greedy(best, population, n)
        picks = self._with_transfers(picks, n)
        picks = [q for q in map(self._materialize, picks) if q is not None]
        if not picks:
            self.stop_reason = (
                f"its search reaches no schedule it has not measured: the design space "
                f"holds about {len(self.seen)} distinct schedules, fewer than the budget "
                "(more trials cannot help this workload)")
            return None
        for p in picks:
            self.seen.add(p.candidate.sch_hash)
            self.space_trials[self.space_index(p)] += 1
        self.trials += len(picks)
        self.last_picks = picks
        self.last_scores = list(self._predict(picks))  # the model's view, for Kendall tau
        self._proposed_at = time.perf_counter()
        return [p.candidate for p in picks] or None

    def notify_runner_results(self, candidates, results):
        if getattr(self, "_proposed_at", None) is not None:  # this batch's build and run time
            self._measure_secs = time.perf_counter() - self._proposed_at
            self._proposed_at = None
        self.cost_model.update(candidates[:len(results)], results)
        by_cand = {id(p.candidate): p for p in getattr(self, "last_picks", ())}
        for cand, res in zip(candidates, results):
            point = by_cand.get(id(cand))
            if point is not None and res.ok and not res.aborted_early:
                secs = float(np.median(res.run_secs))
                self.measured.append((secs, point))
                i = self.space_index(point)
                if i is not None:
                    self.space_best[i] = min(self.space_best[i], secs)

    # ------------------------------------------------------------------ phases
    def sample_initial_population(self) -> list:
        """The best measured points (this run's and the database's) plus fresh samples."""
        size = self.population_size
        n_measured = int(size * self.init_measured_ratio)
        out = [p for _, p in sorted(self.measured, key=lambda x: x[0])[:n_measured]]
        have = {p.candidate.sch_hash for p in out}
        for rec in self.measured_records:
            if len(out) >= n_measured:
                break
            if rec.sch_hash in have:
                continue
            point = self._from_record(rec)
            if point is not None:
                have.add(point.candidate.sch_hash)
                out.append(point)
        fresh = max(self.init_min_unmeasured, size - len(out))
        out.extend(self.sample_fresh(fresh))
        return out

    def sample_fresh(self, n: int) -> list:
        """n valid points sampled afresh from random spaces (fewer if max_fail_count
        samples in a row fail), drawn a round at a time and replayed together."""
        out, fails = [], 0
        while len(out) < n and fails < self.max_fail_count:
            jobs = []
            for _ in range(n - len(out)):
                space = self.rand.choice(self.spaces)
                jobs.append((space, self._seed(), None, None, 0))
            for point in self._evaluate(jobs):
                if point is None:
                    fails += 1
                    if fails >= self.max_fail_count:
                        break
                    continue
                fails = 0
                out.append(point)
        return out

    def evolve(self, population: list, n: int) -> dict:
        """Mutate for genetic_num_iters generations, each space's parents picked in
        proportion to their predicted score; returns {space index: its best-predicted
        unmeasured points as (score, point), best first} (up to 2n per space; index None:
        points of none of this task's spaces, such as records of older rules)."""
        best: dict = {}  # space index -> min-heap of (score, tiebreak, point): its 2n best
        in_best: set = set()
        counter = 0
        for gen in range(self.genetic_num_iters + 1):
            scores = self._predict(population)
            for s, p in zip(scores, population):
                h = p.candidate.sch_hash
                if h in self.seen or h in in_best:
                    continue
                counter += 1
                item = (float(s), counter, p)
                heap = best.setdefault(self.space_index(p), [])
                if len(heap) < 2 * n:
                    heapq.heappush(heap, item)
                    in_best.add(h)
                elif item[0] > heap[0][0]:
                    in_best.discard(heapq.heapreplace(heap, item)[2].candidate.sch_hash)
                    in_best.add(h)
            if gen == self.genetic_num_iters or self._past_deadline() or self._batch_spent():
                break
            population = self._next_generation(population, scores)
        return {i: [(s, p) for s, _, p in sorted(heap, key=lambda x: (-x[0], x[1]))]
                for i, heap in best.items()}

    def pick_eps_greedy(self, best: dict, population: list, n: int) -> list:
        """n points: mostly the model's best of each space (as many as the space's quota,
        what a space cannot fill going to the best of the others), an eps_greedy share at
        random."""
        n_rand = min(n, int(round(n * self.eps_greedy)))
        n_model = n - n_rand
        picks, hashes = [], set()

        def take(p):
            if len(picks) < n_model and p.candidate.sch_hash not in hashes:
                picks.append(p)
                hashes.add(p.candidate.sch_hash)

        quotas = self.space_shares(n_model)
        for i, scored in best.items():
            for _, p in scored[:quotas[i] if i is not None else 0]:
                take(p)
        rest = [item for scored in best.values() for item in scored]
        for _, p in sorted(rest, key=lambda x: -x[0]):
            take(p)
        pool = [p for p in population if p.candidate.sch_hash not in self.seen
                and p.candidate.sch_hash not in hashes]
        self.rand.shuffle(pool)
        for source in (lambda: pool, lambda: self.sample_fresh(n - len(picks))):
            for p in source():  # fresh samples only when the population runs short
                if len(picks) >= n:
                    return picks
                if p.candidate.sch_hash not in self.seen and p.candidate.sch_hash not in hashes:
                    picks.append(p)
                    hashes.add(p.candidate.sch_hash)
        return picks

    def space_shares(self, total: int) -> list:
        """How many of `total` picks (or parents) each design space gets: space_floor_share
        of them split evenly, the rest in proportion to (fastest measured / the space's
        fastest) ** space_focus, a space with nothing measured counting as the fastest.
        space_floor_share None: no shares (the model's ranking over all spaces at once)."""
        if self.space_floor_share is None:
            return [0] * len(self.spaces)
        return space_quotas(total, self.space_best, floor_share=self.space_floor_share,
                            focus=self.space_focus)

    def space_index(self, point: Point) -> int | None:
        """Which of this task's design spaces `point` is a replay of (None: none of them)."""
        return self._space_of.get(point.space.structure)

    # ------------------------------------------------------------------ transfer between tasks
    def signature(self):
        """The extents of the loops the tile-sampling instructions split, in order."""
        return self._signature

    def offer(self, trace) -> None:
        self._offers.append(trace)

    def _tile_extents(self):
        for space in self.spaces:
            try:
                point = replay(space, self.context.func, 0)
            except ScheduleError:
                continue
            tiles = tuple(point.info[p] for p, tag in space.tags.items() if tag == "tile")
            return (len(self.spaces), tiles) if tiles else None
        return None

    def _with_transfers(self, picks: list, n: int) -> list:
        """Put the offered schedules (another task's best decisions, replayed on this task's
        design spaces) first in the batch, up to a quarter of it."""
        offers, self._offers = self._offers, []
        if not offers:
            return picks
        moved = []
        for trace in reversed(offers):  # the newest best first
            foreign = DesignSpace(trace)
            theirs = _by_tag(foreign, foreign.decisions_of(trace))
            for space in self.spaces:
                mapped = {}
                for tag, positions in _by_tag(space, {p: p for p in space.tags}).items():
                    mapped.update(zip(positions, theirs.get(tag, ())))
                point = self._try(lambda: replay(space, self.context.func, self._seed(),
                                                 decisions=mapped))
                if point is not None and point.candidate.sch_hash not in self.seen:
                    self.seen.add(point.candidate.sch_hash)
                    moved.append(point)
            if len(moved) >= max(1, n // 4):
                break
        moved = moved[:max(1, n // 4)]
        hashes = {p.candidate.sch_hash for p in moved}
        return moved + [p for p in picks if p.candidate.sch_hash not in hashes][:n - len(moved)]

    # ------------------------------------------------------------------ helpers
    def _next_generation(self, population: list, scores) -> list:
        """Children of parents drawn in proportion to their predicted score, each space
        drawing its share of them (space_shares; points of no space their part of the
        population)."""
        weights = np.asarray(scores, dtype=np.float64)
        weights = weights - weights.min() + 1e-6 if len(weights) else weights
        np_rand = np.random.default_rng(self._seed())
        members: dict = {}
        shared = self.space_floor_share is not None
        for k, p in enumerate(population):
            members.setdefault(self.space_index(p) if shared else None, []).append(k)
        shares = self.space_shares(self.population_size)
        parents = []
        for i, ks in members.items():
            count = shares[i] if i is not None else round(
                self.population_size * len(ks) / len(population))
            if count:
                w = weights[ks]
                parents.extend(np.asarray(ks)[np_rand.choice(len(ks), size=count, p=w / w.sum())])
        chosen = [population[i] for i in parents]
        mutating = [k for k in range(len(chosen)) if self.rand.random() < self.genetic_mutate_prob]
        mutants = dict(zip(mutating, self.mutate_all([chosen[k] for k in mutating])))
        children, hashes = [], set()
        for k, parent in enumerate(chosen):
            child = mutants.get(k) or parent
            h = child.candidate.sch_hash
            if h not in hashes:
                hashes.add(h)
                children.append(child)
        return children

    def mutate(self, parent: Point) -> Point | None:
        """A valid child that differs from `parent` in one decision, or None."""
        return self.mutate_all([parent])[0]

    def mutate_all(self, parents: list) -> list:
        """For each parent a valid child that differs from it in one decision, or None:
        up to genetic_max_fail_count proposals each, one per parent per round, the round's
        children replayed together."""
        muts = list(self.mutators)
        weights = [self.mutators[m] for m in muts]
        children = [None] * len(parents)
        tries = [0] * len(parents)
        pending = list(range(len(parents)))
        while pending:
            jobs, owners = [], []
            for k in pending:
                parent = parents[k]
                while tries[k] < self.genetic_max_fail_count:
                    tries[k] += 1
                    m = self.rand.choices(muts, weights=weights)[0]
                    proposal = m.apply(parent, self.rand)
                    if proposal is None:
                        continue
                    pos, decision = proposal
                    base = parent if parent.sch is not None else None
                    jobs.append((parent.space, self._seed(), {**parent.decisions, pos: decision},
                                 base, pos if base is not None else 0))
                    owners.append(k)
                    break
            pending = []
            for k, child in zip(owners, self._evaluate(jobs)):
                if child is not None and child.candidate.sch_hash != parents[k].candidate.sch_hash:
                    children[k] = child
                elif tries[k] < self.genetic_max_fail_count:
                    pending.append(k)
        return children

    # ------------------------------------------------------------------ replaying points
    def _evaluate(self, jobs: list) -> list:
        """jobs: (space, seed, decisions or None, base point or None, start position); one
        postprocessed Point or None each, in order: replayed by the search workers where
        there are any (PendingCandidate points), else here."""
        out = [None] * len(jobs)
        remote = [k for k, j in enumerate(jobs) if id(j[0]) in self._space_pos]
        workers = self._workers(len(remote))
        if workers is not None:
            try:
                results = workers.evaluate(self._task, [
                    (self._space_pos[id(jobs[k][0])], jobs[k][1], jobs[k][2]) for k in remote],
                    use=self._n_workers)
            except WorkerLost as e:
                warnings.warn(f"{e}; the search goes on in this process", stacklevel=2)
                self._in_process = True
            except TaskUnusable:  # parts only this process can load: search here
                self._in_process = True
            else:
                for k, res in zip(remote, results):
                    if res[0] == "ok":
                        _, decisions, info, cand = res
                        out[k] = Point(jobs[k][0], None, decisions, info, {}, cand)
                    else:
                        self.failures[res[1]] += 1
                done = set(remote)
                return [out[k] if k in done else self._replay_here(j) for k, j in enumerate(jobs)]
        return [self._replay_here(j) for j in jobs]

    def _replay_here(self, job) -> Point | None:
        space, seed, decisions, base, start = job
        return self._try(lambda: replay(space, self.context.func, seed, decisions=decisions,
                                        base=base, start=start))

    def _workers(self, jobs: int):
        """The search workers for `jobs` replays, or None: search here (one CPU, few jobs,
        search_workers 0 or 1, a cost model that needs the schedules themselves, or a GPU
        task: its postprocessors may query the device, which the workers were not checked
        to reach)."""
        n = self._n_workers = default_workers() if self.search_workers is None \
            else self.search_workers
        if n < 2 or jobs < 2 * n or self._in_process or self.context.target.kind != "cpu":
            return None
        if self._task is None:
            cm = self.cost_model
            if not cm.scores_from_features:
                self._in_process = True
                return None
            try:
                self._task = Task(self.context.func, self.spaces, self.context.postprocs,
                                  cm.target, cm.extractor)
            except TaskUnusable:  # parts that cannot travel (defined in a function)
                self._in_process = True
                return None
        return shared_workers(n)

    def _materialize(self, point: Point) -> Point | None:
        """A point a worker replayed, replayed here (its schedule, to build and measure)."""
        if point.sch is not None:
            return point
        full = self._try(lambda: replay(point.space, self.context.func, 0,
                                        decisions=point.decisions))
        if full is not None and full.candidate.sch_hash != point.candidate.sch_hash:
            warnings.warn(f"a search worker's replay of {point.decisions} gave schedule "
                          f"{point.candidate.sch_hash[:12]}, this process's "
                          f"{full.candidate.sch_hash[:12]}: a schedule rule, primitive or "
                          "postprocessor is not deterministic; measuring this process's",
                          stacklevel=2)
        return full

    def _try(self, make) -> Point | None:
        try:
            point = make()
        except ScheduleError as e:
            self.failures[f"replay refused: {str(e)[:160]}"] += 1
            return None
        finish_point(point, self.context.postprocs)
        if point.candidate is None:
            self.failures["a postprocessor refused the schedule"] += 1
            return None
        return point

    def _learn_from_records(self, records) -> None:
        """Resuming: the cost model learns from this workload's earlier measurements."""
        from ..cost_model.base import candidates_of_records
        cands, results = candidates_of_records(records, self.context.func)
        if cands:
            self.cost_model.update(cands, results)

    def _from_record(self, rec) -> Point | None:
        """The record's schedule as a point of the design space it was sampled from (so
        that its mutants stay there), or of its own trace if no space of this task's has
        its steps (a record of older rules)."""
        i = self._space_of.get(rec.trace.structure())
        space = self.spaces[i] if i is not None else DesignSpace(rec.trace)
        return self._try(lambda: replay(space, self.context.func, self._seed(),
                                        decisions=space.decisions_of(rec.trace)))

    def _predict(self, population: list) -> np.ndarray:
        if not population:
            return np.zeros(0)
        scores = np.asarray(self.cost_model.predict([p.candidate for p in population]),
                            dtype=np.float64)
        return np.where(np.isfinite(scores), scores, -math.inf)

    def _batch_spent(self) -> bool:
        """This batch's search took its share of the time (max_search_share)."""
        d = getattr(self, "_batch_deadline", None)
        return d is not None and time.perf_counter() >= d

    def _past_deadline(self) -> bool:
        """The run's time budget is spent: measure what the model ranks best so far."""
        deadline = getattr(self.context, "deadline", None)
        return deadline is not None and time.time() >= deadline

    def _seed(self) -> int:
        return self.rand.randrange(1 << 31)

    def _explain_empty(self):
        why = "; ".join(f"{n}x {reason}" for reason, n in self.failures.most_common(3))
        self.stop_reason = (f"its design space gave no valid candidate in "
                            f"{sum(self.failures.values())} samples ({why or 'none'})")
        if self.trials:
            return
        why = "; ".join(f"{n}x {reason}" for reason, n in self.failures.most_common(3))
        warnings.warn(f"{self.context.task_name}: the design space gave no valid candidate in "
                      f"{sum(self.failures.values())} samples ({why or 'no design space'}); "
                      "check the schedule rules and postprocessors for this workload",
                      stacklevel=2)


def space_quotas(total: int, best: list, *, floor_share: float, focus: float) -> list:
    """Split `total` over design spaces whose fastest measured seconds are `best` (inf: none
    measured yet): floor_share of it evenly, the rest in proportion to
    (min(best) / best[i]) ** focus, a space with nothing measured weighing as the fastest;
    rounded by largest remainder so that the parts sum to `total`."""
    if not best:
        return []
    fastest = min(best)
    weights = [1.0 if b == math.inf or fastest == math.inf else (fastest / b) ** focus
               for b in best]
    floor = total * floor_share / len(best)
    wanted = [floor + total * (1 - floor_share) * w / sum(weights) for w in weights]
    parts = [int(x) for x in wanted]
    by_remainder = sorted(range(len(best)), key=lambda i: parts[i] - wanted[i])
    for i in by_remainder[:total - sum(parts)]:
        parts[i] += 1
    return parts


def _by_tag(space: DesignSpace, decisions: dict) -> dict:
    """tag -> the decisions of that tag's sampling instructions, in trace order (for a
    position-free match between two design spaces)."""
    out: dict = {}
    for pos, tag in space.tags.items():
        if pos in decisions:
            out.setdefault(tag, []).append(decisions[pos])
    return out
