"""Differential schedule fuzzing (looptune.testing.fuzz): a fixed-seed run, the shrinker,
that planted bugs (wrong results, crashes, hangs, compiler errors, exceptions) are caught
and classified, and the shrunk failures found so far (cases/*.json) as regression tests."""
from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from looptune.schedule import INSTRUCTIONS, Schedule, Trace
from looptune.testing import fuzz_schedule
from looptune.testing.fuzz import (Case, Failure, Fuzzer, case_from_json, fuzz_range,
                                   generate_case, run, shrink_failure)
from looptune.testing.sandbox import Sandbox
from looptune.testing.shrink import shrink, without
from looptune.testing.workloads import build
from looptune.tir.functor import visit
from looptune.tir.stmt import For

CASES = sorted((Path(__file__).parent / "cases").glob("*.json"))
PRIMITIVES = {"Split", "Fuse", "Reorder", "Parallel", "Vectorize", "Unroll", "ComputeAt",
              "ReverseComputeAt", "ComputeInline", "ReverseComputeInline", "CacheRead",
              "CacheWrite", "DecomposeReduction", "RFactor", "StorageAlign", "Annotate",
              "SamplePerfectTile", "SampleTile", "SampleCategorical", "SampleComputeLocation"}


@pytest.fixture(scope="module")
def fuzzer():
    f = Fuzzer()
    yield f
    f.close()


def _report(failures) -> str:
    return "\n\n".join(f"{f.outcome.kind} at {f.outcome.stage}: {f.outcome.message}\n"
                       f"{json.dumps(f.case.spec)}\n"
                       f"{Trace.from_json(f.case.trace).as_python()}" for f in failures)


# ---------------------------------------------------------------------------- fuzz runs
@pytest.mark.cc
def test_a_fixed_seed_run_finds_nothing_and_uses_every_primitive(fuzzer):
    failures, applied, _ = fuzz_range(7, 0, 300, fuzzer=fuzzer)
    assert not failures, _report(failures)
    missing = PRIMITIVES - {k for k, n in applied.items() if n}
    assert not missing, f"the generator never applied {sorted(missing)}"


@pytest.mark.cc
@pytest.mark.slow
def test_a_longer_run_finds_nothing(fuzzer):
    failures, _, _ = fuzz_range(11, 0, 2000, fuzzer=fuzzer)
    assert not failures, _report(failures)


@pytest.mark.cc
def test_the_command_prints_its_figures_last():
    out = subprocess.run([sys.executable, "-m", "looptune.testing.fuzz", "--count", "6",
                          "--seed", "3"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines()[-1] == "fuzz: 6 schedules, 0 miscompiles, 0 crashes"
    assert "schedules/s" in out.stdout


@pytest.mark.cc
@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_regression_cases(path, fuzzer):
    """Failures the fuzzer found, shrunk: now refused or correct."""
    d = json.loads(path.read_text())
    out = fuzzer.check(case_from_json(d))
    assert not out.failed, f"{d.get('kind')} is back: {out}\n" + "\n".join(d["python"])


# ---------------------------------------------------------------------------- the shrinker
def _vectorized_and_parallel(trace: Trace, func) -> bool:
    """A fake bug: the schedule has a vectorized loop and a parallel loop."""
    sch = Schedule(func)
    try:
        trace.apply_to_schedule(sch)
    except Exception:
        return False
    kinds = set()
    visit(sch.func.body, lambda n: kinds.add(n.kind) if isinstance(n, For) else None)
    return {"vectorized", "parallel"} <= kinds


def test_the_shrinker_keeps_only_what_the_failure_needs():
    func = build({"family": "matmul", "params": dict(M=13, N=17, K=9, ta=False, tb=False,
                                                     epilogue="bias_relu")}).func
    for seed in range(200):
        sch = fuzz_schedule(func, seed, steps=30)
        if len(sch.trace) > 40 and _vectorized_and_parallel(sch.trace, func):
            break
    else:
        pytest.fail("no generated schedule has both a vectorized and a parallel loop")
    calls = []

    def fails(trace):
        calls.append(len(trace))
        return _vectorized_and_parallel(trace, func)

    small = shrink(sch.trace, fails)
    assert _vectorized_and_parallel(small, func)
    kinds = [i.kind.name for i in small.insts]
    assert "Vectorize" in kinds and "Parallel" in kinds
    # a lookup and two annotations, plus at most a split or two that make the loops legal
    assert len(small) <= 8 < len(sch.trace), small.as_python()
    for k in range(len(small)):  # and it is minimal: no single drop still fails
        assert not _vectorized_and_parallel(without(small, k), func)


def test_dropping_an_instruction_drops_what_uses_its_outputs():
    func = build({"family": "softmax", "params": dict(shape=[5, 7], axis=-1)}).func
    sch = Schedule(func)
    b = sch.get_block("softmax")
    i, j = sch.get_loops(b)
    j0, j1 = sch.split(j, [None, 4])
    sch.vectorize(j1)
    sch.parallel(i)
    split = next(k for k, inst in enumerate(sch.trace.insts) if inst.kind.name == "Split")
    kinds = [inst.kind.name for inst in without(sch.trace, split).insts]
    assert kinds == ["GetBlock", "GetLoops", "Parallel"]


# ---------------------------------------------------------------------------- planted bugs
def _packed(src: str, slot: int | None = None):
    """(the packed wrapper line, its symbol) if the source is the kernel in `slot`."""
    m = re.search(r"^int32_t (c(\d+)_\w+)_packed\(void\*\* args\) \{ return .*$", src, re.M)
    if m is None or (slot is not None and int(m.group(2)) != slot):
        return None
    return m


def _add_one_to_the_output(src: str) -> str:
    m = _packed(src)
    n_args = m.group(0).count("args[")
    new = (f"int32_t {m.group(1)}_packed(void** args) {{ int32_t r = {m.group(1)}("
           + m.group(0).split(f"return {m.group(1)}(", 1)[1].rsplit("); }", 1)[0]
           + f"); ((float*)args[{n_args - 1}])[0] += 1.0f; return r; }}")
    return src.replace(m.group(0), new)


def _in_slot(slot: int, statement: str):
    """A hook that puts `statement` first in the packed wrapper of the kernel in `slot`."""
    def hook(src):
        m = _packed(src, slot)
        return src if m is None else src.replace("(void** args) { return",
                                                 f"(void** args) {{ {statement} return", 1)
    return hook


@pytest.mark.cc
def test_a_wrong_result_is_a_miscompile_and_fails_the_run(tmp_path):
    fz = Fuzzer(source_hook=_add_one_to_the_output)
    out = io.StringIO()
    try:
        res = run(3, 0, families=["matmul"], save_dir=tmp_path, fuzzer=fz, out=out)
    finally:
        fz.close()
    text = out.getvalue()
    assert text.splitlines()[-1] == "fuzz: 3 schedules, 3 miscompiles, 0 crashes", text
    assert res["miscompiles"] == 3 and "1 of" in text  # one element, off by one
    saved = sorted(tmp_path.glob("miscompile-run-*.json"))
    assert len(saved) == 3
    d = json.loads(saved[0].read_text())
    assert d["kind"] == "miscompile" and d["trace"]["insts"] == []  # every trace fails: shrunk
    fz = Fuzzer(source_hook=_add_one_to_the_output)
    try:
        assert fz.check(case_from_json(d)).kind == "miscompile"
    finally:
        fz.close()


@pytest.mark.cc
def test_main_exits_non_zero_on_a_miscompile(capsys):
    from looptune.testing.fuzz import main
    fz = Fuzzer(source_hook=_add_one_to_the_output)
    try:
        assert main(["--count", "2", "--seed", "1", "--families", "matmul"], fuzzer=fz) == 1
    finally:
        fz.close()
    assert capsys.readouterr().out.splitlines()[-1] == "fuzz: 2 schedules, 2 miscompiles, 0 crashes"


def _batch(fz, n=4, family="elementwise"):
    items = [generate_case(5, i, [family]) for i in range(n)]
    return fz.check_generated(items)


@pytest.mark.cc
def test_a_segfault_is_a_crash_and_the_rest_of_the_batch_still_runs():
    fz = Fuzzer(source_hook=_in_slot(1, "*(volatile int*)0 = 0;"))
    try:
        outs = _batch(fz)
    finally:
        fz.close()
    assert outs[1].kind == "crash" and outs[1].stage == "run" and "SIGSEGV" in outs[1].message
    assert [o.kind for k, o in enumerate(outs) if k != 1] == ["ok"] * 3


@pytest.mark.cc
def test_a_hang_is_a_crash():
    fz = Fuzzer(source_hook=_in_slot(0, "for (volatile int i = 1; i;) {}"),
                sandbox=Sandbox(timeout_s=1.0))
    try:
        outs = _batch(fz, n=2)
    finally:
        fz.close()
    assert outs[0].kind == "crash" and "hang" in outs[0].message
    assert outs[1].kind == "ok"


@pytest.mark.cc
def test_a_compiler_error_is_a_crash_of_that_kernel_only():
    fz = Fuzzer(source_hook=lambda src: src + "\n#error planted\n" if _packed(src, 2) else src)
    try:
        outs = _batch(fz)
    finally:
        fz.close()
    assert outs[2].kind == "crash" and outs[2].stage == "compile" and "planted" in outs[2].message
    assert [o.kind for k, o in enumerate(outs) if k != 2] == ["ok"] * 3


@pytest.mark.cc
def test_writing_out_of_bounds_is_a_miscompile():
    def past_the_end(src):
        m = _packed(src, 0)
        n = m.group(0).count("args[") if m else 0
        return _in_slot(0, f"((char*)args[{n - 1}])[-3] = 7;")(src) if m else src
    fz = Fuzzer(source_hook=past_the_end)
    try:
        outs = _batch(fz, n=1)
    finally:
        fz.close()
    assert outs[0].kind == "miscompile" and "out of bounds" in outs[0].message


def test_an_exception_in_a_primitive_is_a_crash_that_replays_and_shrinks(monkeypatch):
    """Not a ScheduleError: the fuzzer records the failed instruction, so the case replays
    the crash, and the shrinker cuts it down to the lookups it needs."""
    real = INSTRUCTIONS["Reorder"]

    def broken(sch, inputs, attrs, decision):
        if len(inputs) >= 2:
            raise RuntimeError("planted bug in reorder")
        return real.apply(sch, inputs, attrs, decision)

    monkeypatch.setitem(INSTRUCTIONS, "Reorder", dataclasses.replace(real, apply=broken))
    found = None
    for i in range(60):
        case, got = generate_case(2, i, ["matmul"])
        if not isinstance(got, Schedule) and len(case.trace["insts"]) > 5:  # one to shrink
            found = (case, got)
            break
    assert found is not None, "no generated schedule reordered two loops"
    case, outcome = found
    assert outcome.kind == "crash" and outcome.stage == "schedule"
    assert "planted bug in reorder" in outcome.message
    assert case.trace["insts"][-1][0] == "Reorder"
    fz = Fuzzer(sandbox=Sandbox())  # the schedule stage needs no compiler
    try:
        assert fz.check(case).message.startswith("RuntimeError: planted bug in reorder")
        small = shrink_failure(Failure(case, outcome), fz)
    finally:
        fz.close()
    kinds = [inst[0] for inst in small.trace["insts"]]
    assert kinds[:2] == ["GetBlock", "GetLoops"] and kinds[-1] == "Reorder", kinds
    assert len(kinds) <= 5 < len(case.trace["insts"]), kinds


def test_cases_round_trip_through_json():
    from looptune.testing.fuzz import case_to_json
    case, _ = generate_case(4, 1)
    back = case_from_json(json.loads(json.dumps(case_to_json(case))))
    assert back == case
    assert isinstance(back, Case)
