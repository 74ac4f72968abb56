"""A catalogue of bad inputs. Each case feeds looptune something wrong and expects looptune's
own error type (or, where a database skips what it cannot use, its DatabaseWarning) with a
message that names the problem and how to fix it: never a traceback from deep inside, a
crash or a wrong result. Database cases also check that the records already stored are
still there afterwards.

CASES is the catalogue (`check(case, directory)` runs one case without pytest, for
benchmarks/reliability.py); docs/bad_inputs.md shows it as a table."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import sqlite3
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

import looptune as lt
from looptune import te
from looptune.cli import dispatch, main, parser
from looptune.cli.tune import CLIError
from looptune.codegen import CRenderer, lower
from looptune.frontend.common import ImportError_
from looptune.runtime import BuildError, RunError
from looptune.schedule import Schedule, ScheduleError, Trace
from looptune.target import Target, TargetError
from looptune.tir import structural_equal
from looptune.tir.expr import call
from looptune.tir.serialize import func_from_json, func_to_json
from looptune.tune import (EvaluatorConfig, JSONDatabase, MemoryDatabase, NoTuningRecordError,
                           SQLiteDatabase, TuningRecord, compile_tir, tune_tir)
from looptune.tune.error import DatabaseError, DatabaseWarning, TuneError


@dataclass(frozen=True)
class Case:
    id: str
    category: str
    what: str                   # the bad input, in words (docs/bad_inputs.md)
    error: type                 # looptune's error type, or DatabaseWarning
    words: tuple                # the message must contain each (case-insensitive)
    trigger: Callable           # trigger(env) feeds the bad input
    needs: str = ""             # "cc", "torch" or "onnx"
    after: Callable | None = None  # after(env): what must still hold afterwards


class Env:
    """A case's directory, and the environment variables and working directory it changes
    (restored by `restore`)."""

    def __init__(self, path):
        self.path = Path(path)
        self._saved_env: dict = {}
        self._cwd = None

    def setenv(self, name: str, value: str) -> None:
        self._saved_env.setdefault(name, os.environ.get(name))
        os.environ[name] = value

    def chdir(self) -> None:
        self._cwd = self._cwd or os.getcwd()
        os.chdir(self.path)

    def restore(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if self._cwd is not None:
            os.chdir(self._cwd)


def check(case: Case, path) -> str:
    """Run one case in the empty directory `path`: its error (or warning) must be the
    expected looptune type and name the problem. Returns the message; AssertionError if not."""
    env = Env(path)
    warns = issubclass(case.error, Warning)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                case.trigger(env)
            except Exception as e:
                if warns or not isinstance(e, case.error):
                    raise  # not the expected error: the case fails with its traceback
                message = str(e)
            else:
                assert warns, f"no {case.error.__name__} was raised"
                found = [str(w.message) for w in caught if issubclass(w.category, case.error)]
                assert found, f"no {case.error.__name__}: {[str(w.message) for w in caught]}"
                message = "\n".join(found)
        missing = [w for w in case.words if w.lower() not in message.lower()]
        assert not missing, f"the message lacks {missing}: {message}"
        assert "Traceback" not in message
        if case.after is not None:
            case.after(env)
        return message
    finally:
        env.restore()


# ---------------------------------------------------------------------------- helpers
def ph(*shape, name="A", dtype="float32"):
    return te.placeholder(shape, dtype, name=name)


def two_stage():
    A = ph(32, 24)
    B = ph(24, 16, name="B")
    k = te.reduce_axis(24, "k")
    C = te.compute((32, 16), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = te.compute((32, 16), lambda i, j: C[i, j] * 2.0, name="D")
    return te.create_prim_func([A, B, D])


def refused(action, before=None):
    """A schedule case: `action(sch, C, D, (i, j, k), (di, dj))` on a fresh two-stage
    schedule (after `before(sch, (i, j, k))`) must leave the IR and the trace as they were."""
    def trigger(env):
        sch = Schedule(two_stage(), seed=0)
        c, d = sch.get_block("C"), sch.get_block("D")
        loops, dloops = sch.get_loops(c), sch.get_loops(d)
        if before is not None:
            before(sch, loops)
        func, n = sch.func, len(sch.trace)
        try:
            action(sch, c, d, loops, dloops)
        finally:
            assert sch.func is func and len(sch.trace) == n, "a refused request changed it"
    return trigger


def add_func(n=64):
    A, B = ph(n), ph(n, name="B")
    return te.create_prim_func([A, B, te.compute((n,), lambda i: A[i] + B[i], name="C")])


@lru_cache(maxsize=1)
def add_kernel():
    return lt.build(add_func())


def called(make_args):
    """A kernel-call case: the arrays of `make_args()` must come out of the refused call
    unchanged (nothing written)."""
    def trigger(env):
        args = make_args()
        before = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
        try:
            add_kernel()(*args)
        finally:
            for a, b in zip(args, before):
                if isinstance(a, np.ndarray):
                    np.testing.assert_array_equal(a, b)
    return trigger


def arrays(n=64):
    rng = np.random.default_rng(0)
    return [rng.uniform(-1, 1, n).astype("float32") for _ in range(2)] + [np.zeros(n, "float32")]


def scale_func():
    A = ph(16, 8)
    return te.create_prim_func([A, te.compute((16, 8), lambda i, j: A[i, j] * 2.0, name="B")])


def tune(func=None, **kw):
    kw.setdefault("database", MemoryDatabase())
    kw.setdefault("max_trials_global", 4)
    return tune_tir(func or scale_func(), kw.pop("target", "cpu"), progress=False, **kw)


# ---------------------------------------------------------------------------- databases
HOST = Target.create("cpu")
N_STORED = 3


def good_traces(func):
    out = []
    for f in (2, 4, 8):
        sch = Schedule(func)
        i, _ = sch.get_loops(sch.get_block("B"))
        sch.split(i, [None, f])
        out.append(sch.trace)
    return out


def open_db(kind: str, env):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if kind == "sqlite":
            return SQLiteDatabase(work_dir=env.path / "work")
        return JSONDatabase(env.path / "work")


def stored(kind: str, env):
    """A database in env.path/work holding N_STORED good records (1, 2, 3 ms)."""
    db = open_db(kind, env)
    wl = db.commit_workload(scale_func())
    for i, trace in enumerate(good_traces(wl.func)):
        db.commit_tuning_record(TuningRecord(wl, trace, ((i + 1) * 1e-3,), HOST,
                                             measure={"num_threads": 1}))
    if kind == "sqlite":
        db.close()
    return wl


def record_json(wl, trace_json=None, **fields) -> dict:
    """A record of wl claiming 1 us (faster than every good one), as stored."""
    obj = TuningRecord(wl, good_traces(wl.func)[0], (1e-6,), HOST,
                       measure={"num_threads": 1}).to_json()
    if trace_json is not None:
        obj["trace"] = trace_json
    obj.update(fields)
    return obj


def inject(kind: str, env, wl, text: str) -> None:
    """Store one raw record (text, as a writer other than looptune would)."""
    if kind == "sqlite":
        with contextlib.closing(sqlite3.connect(env.path / "work" / "database.sqlite")) as c:
            with c:
                c.execute("INSERT INTO records (workload, target, median_secs, error_class, time,"
                          " record) VALUES (?, ?, 1e-6, NULL, 0, ?)", (wl.key, HOST.key(), text))
    else:
        with open(env.path / "work" / "database_tuning_record.json", "a") as f:
            f.write(text + "\n")


def still_stored(kind: str):
    """after: the good records (1, 2 and 3 ms) are all still there."""
    def after(env):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            recs = open_db(kind, env).get_all_tuning_records()
        times = sorted(r.median_secs for r in recs if r.ok and r.median_secs >= 1e-3)
        assert times == pytest.approx([1e-3, 2e-3, 3e-3])
    return after


def malicious(kind: str, trace_json=None, raw: str | None = None, query=False, **fields):
    """A database case: good records, then one bad record; opening (and, with `query`,
    looking up the best schedule) must report it and use the good ones."""
    def trigger(env):
        wl = stored(kind, env)
        inject(kind, env, wl, raw if raw is not None else
               json.dumps(record_json(wl, trace_json, **fields)))
        db = open_db_warning(kind, env)
        if query:
            sch = db.query_schedule(scale_func(), HOST)
            want = Schedule(scale_func())
            good_traces(scale_func())[0].apply_to_schedule(want)
            assert sch is not None and structural_equal(sch.func, want.func)
    return trigger


def open_db_warning(kind, env):
    """Open without silencing warnings: the case checks them."""
    if kind == "sqlite":
        db = SQLiteDatabase(work_dir=env.path / "work")
    else:
        db = JSONDatabase(env.path / "work")
    len(db)
    return db


def trace_with(*insts) -> dict:
    return {"version": 2, "insts": [list(i) for i in insts], "decisions": []}


GET_B = ("GetBlock", [], [{"s": "B"}], ["b0"])
LOOPS = ("GetLoops", ["b0"], [], ["l1", "l2"])


def unchanged_file(name: str):
    """after: the file a failed open looked at is byte for byte what it was."""
    def after(env):
        assert (env.path / name).read_bytes() == (env.path / (name + ".orig")).read_bytes()
    return after


def keep_copy(path: Path) -> None:
    path.with_name(path.name + ".orig").write_bytes(path.read_bytes())


def sqlite_not_a_database(env):
    p = env.path / "database.sqlite"
    p.write_text("looptune results, as a spreadsheet: 1 ms, 2 ms\n" * 50)
    keep_copy(p)
    SQLiteDatabase(p)


def sqlite_truncated(env):
    stored("sqlite", env)
    p = env.path / "work" / "database.sqlite"
    data = p.read_bytes()
    p.write_bytes(data[: len(data) // 2])
    keep_copy(p)
    len(SQLiteDatabase(p))


def sqlite_newer_schema(env):
    stored("sqlite", env)
    p = env.path / "work" / "database.sqlite"
    with contextlib.closing(sqlite3.connect(p)) as c, c:
        c.execute("UPDATE meta SET value='2' WHERE name='schema_version'")
    SQLiteDatabase(p)


def back_to_schema_1_then_stored(env):
    """after: the refused open changed nothing; with its version back, it is all there."""
    with contextlib.closing(sqlite3.connect(env.path / "work" / "database.sqlite")) as c, c:
        tables = {r[0] for r in c.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        c.execute("UPDATE meta SET value='1' WHERE name='schema_version'")
    assert tables >= {"meta", "workloads", "records"}
    still_stored("sqlite")(env)


def json_not_a_database(env):
    stored("json", env)
    p = env.path / "work" / "database_tuning_record.json"
    p.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00 this is an image, not records\n" * 3)
    keep_copy(p)
    open_db_warning("json", env)


def json_truncated(env):
    stored("json", env)
    p = env.path / "work" / "database_tuning_record.json"
    data = p.read_bytes()
    p.write_bytes(data[: len(data) - 40])  # the last record loses its end
    open_db_warning("json", env)


def truncated_record_then_commit(env):
    """after: the two whole records are there, and a new commit is not swallowed by the
    partial line."""
    db = open_db("json", env)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert len(db) == N_STORED - 1
        wl = db.commit_workload(scale_func())
        db.commit_tuning_record(TuningRecord(wl, good_traces(wl.func)[2], (5e-3,), HOST))
        assert len(open_db("json", env)) == N_STORED


def compile_with_only_a_stale_record(env):
    db = MemoryDatabase()
    wl = db.commit_workload(scale_func())
    stale = Schedule(two_stage())
    stale.split(stale.get_loops(stale.get_block("C"))[0], [None, 4])  # block C: not here
    db.commit_tuning_record(TuningRecord(wl, stale.trace, (1e-3,), HOST))
    env.db = db
    compile_tir(db, scale_func(), HOST)


def db_len_unchanged(n):
    def after(env):
        assert len(env.db) == n
    return after


def compile_skips_a_stale_record(env):
    wl = stored("sqlite", env)
    stale = Schedule(two_stage())
    stale.split(stale.get_loops(stale.get_block("C"))[0], [None, 4])
    inject("sqlite", env, wl, json.dumps(record_json(wl, stale.trace.to_json())))
    db = open_db_warning("sqlite", env)
    mod = compile_tir(db, scale_func(), HOST)
    assert mod.record.median_secs == pytest.approx(1e-3)
    a = np.random.default_rng(0).uniform(-1, 1, (16, 8)).astype("float32")
    b = np.zeros_like(a)
    mod(a, b)
    np.testing.assert_allclose(b, a * 2)


def deep(n=100_000) -> str:
    return "[" * n + "]" * n


# ---------------------------------------------------------------------------- CLI
def cli(*argv):
    """A CLI case: `looptune ARGV` prints one `looptune: error: ...` line and exits 2; the
    same command run through cli.dispatch raises the error the case expects."""
    def trigger(env):
        env.chdir()
        err = io.StringIO()
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = main(list(argv))
        lines = err.getvalue().strip().splitlines()
        assert rc == 2 and lines and lines[-1].startswith("looptune: error: "), err.getvalue()
        assert "Traceback" not in err.getvalue()
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            dispatch(parser().parse_args(list(argv)))
    return trigger


def a_file(env):
    (env.path / "notes.txt").write_text("not a model\n")


# ---------------------------------------------------------------------------- model import
def onnx_model(nodes, inputs, outputs, inits=(), opset=17):
    from onnx import TensorProto, helper, numpy_helper
    g = helper.make_graph(
        nodes, "m", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def from_onnx(*nodes, inputs=(("x", [2, 3]),), outputs=(("y", [2, 3]),), **kw):
    def trigger(env):
        from onnx import helper
        lt.from_onnx(onnx_model([helper.make_node(*n[:3], **(n[3] if len(n) > 3 else {}))
                                 for n in nodes], inputs, outputs, **kw))
    return trigger


def onnx_file(content: bytes | None):
    def trigger(env):
        p = env.path / "model.onnx"
        if content is not None:
            p.write_bytes(content)
        lt.from_onnx(str(p))
    return trigger


def from_torch(forward, *example_shapes):
    def trigger(env):
        import torch

        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(3, 4)

            def forward(self, x):
                return forward(self, x)

        lt.from_torch(M(), tuple(torch.randn(*s) for s in example_shapes))
    return trigger


def data_dependent(m, x):
    return x * 2 if x.sum() > 0 else x


# ---------------------------------------------------------------------------- the catalogue
def _te_compute(shape, fcompute, *tensors):
    return lambda env: te.create_prim_func([*tensors, te.compute(shape, fcompute, name="C")])


_A4, _I4 = ph(4), ph(4, name="I", dtype="int32")
_R8 = te.reduce_axis(8, "r")
_K = te.reduce_axis(4, "k")

CASES = [
    # te: tensor expressions
    Case("te-read-past-the-end", "te", "C[i] = A[i] for i < 8 with A of 4 elements",
         te.TEError, ("A[i]", "0..7", "extent 4", "if_then_else"),
         _te_compute((8,), lambda i: _A4[i], _A4)),
    Case("te-negative-index", "te", "C[i] = A[i - 1]", te.TEError,
         ("-1..2", "outside its extent 4"), _te_compute((4,), lambda i: _A4[i - 1], _A4)),
    Case("te-reduction-past-the-end", "te", "sum of A[r] over r < 8, A of 4 elements",
         te.TEError, ("A[r]", "0..7", "extent 4"),
         _te_compute((1,), lambda i: te.sum(_A4[_R8], axis=_R8), _A4)),
    Case("te-float-shape", "te", "placeholder of shape (2.5, 3)", te.TEError,
         ("placeholder X", "tuple of ints", "2.5"), lambda env: ph(2.5, 3, name="X")),
    Case("te-zero-extent", "te", "placeholder of shape (3, 0)", te.TEError,
         ("placeholder X", ">= 1", "[3, 0]"), lambda env: ph(3, 0, name="X")),
    Case("te-unknown-dtype", "te", "placeholder of dtype float128", te.TEError,
         ("unknown dtype 'float128'", "supported", "float32"),
         lambda env: ph(4, dtype="float128")),
    Case("te-compute-unknown-dtype", "te", "te.compute(..., dtype='complex64')", te.TEError,
         ("compute C", "unknown dtype 'complex64'", "supported"),
         lambda env: te.compute((4,), lambda i: _A4[i], name="C", dtype="complex64")),
    Case("te-index-count", "te", "A[i, i] on a 1-D tensor", te.TEError,
         ("tensor A", "1 dimension", "indexed with 2"),
         _te_compute((4,), lambda i: _A4[i, i], _A4)),
    Case("te-float-index", "te", "A[i * 0.5]", te.TEError,
         ("tensor A", "float32", "indices must be integers"),
         _te_compute((4,), lambda i: _A4[i * 0.5], _A4)),
    Case("te-python-if", "te", "`A[i] if A[i] > 0 else 0` in fcompute", te.TEError,
         ("compute C", "no truth value", "te.if_then_else"),
         _te_compute((4,), lambda i: _A4[i] if _A4[i] > 0 else 0.0, _A4)),
    Case("te-float-intrinsic-of-int", "te", "te.exp of an int32 tensor", te.TEError,
         ("compute C", "exp expects a float", "astype"),
         _te_compute((4,), lambda i: te.exp(_I4[i]), _I4)),
    Case("te-unknown-intrinsic", "te", "the intrinsic 'expm1'", te.TEError,
         ("compute C", "unknown intrinsic 'expm1'", "known: "),
         _te_compute((4,), lambda i: call("expm1", _A4[i]), _A4)),
    Case("te-nonlinear-index-outside", "te", "A[i * i] on a tensor of 4", te.TEError,
         ("compute C", "A[i * i]", "0..9", "outside its extent 4"),
         _te_compute((4,), lambda i: _A4[i * i], _A4)),
    Case("te-unbounded-index", "te", "A[exp(i).astype('int32')]: an index nothing bounds",
         te.TEError, ("compute C", "cannot bound the index", "of A", "te.if_then_else"),
         _te_compute((4,), lambda i: _A4[te.exp(i.astype("float32")).astype("int32")], _A4)),
    Case("te-reduce-axis-outside-reduction", "te", "A[k] with a reduce axis k but no te.sum",
         te.TEError, ("k", "not axes of this compute", "te.reduce_axis"),
         _te_compute((4,), lambda i: _A4[_K], _A4)),
    Case("te-reduction-not-outermost", "te", "te.sum(A[k], axis=k) * 2", te.TEError,
         ("outermost", "separate te.compute"),
         _te_compute((4,), lambda i: te.sum(_A4[_K], axis=_K) * 2.0, _A4)),
    Case("te-empty-reduce-axis", "te", "te.reduce_axis(0)", te.TEError,
         ("reduce_axis k", "empty"), lambda env: te.reduce_axis(0, "k")),
    Case("te-placeholder-not-passed", "te", "create_prim_func without an input it reads",
         te.TEError, ("placeholder A", "not passed to create_prim_func", "argument list"),
         lambda env: te.create_prim_func([te.compute((4,), lambda i: _A4[i] * 2.0)])),
    Case("te-op-shape-mismatch", "te", "ops.matmul of (4, 5) and (6, 7)", te.TEError,
         ("matmul", "inner dimensions 5 and 6"),
         lambda env: te.ops.matmul(ph(4, 5), ph(6, 7, name="B"))),
    Case("te-op-zero-stride", "te", "ops.conv2d_nchw with stride 0", te.TEError,
         ("conv2d_nchw", "stride must be >= 1"),
         lambda env: te.ops.conv2d_nchw(ph(1, 3, 8, 8), ph(4, 3, 3, 3, name="W"), stride=0)),

    # schedule primitives
    Case("sch-unknown-block", "schedule", "get_block('nope')", ScheduleError,
         ("no block named 'nope'", "blocks are: C, D"),
         refused(lambda s, c, d, L, D: s.get_block("nope"))),
    Case("sch-block-for-a-loop", "schedule", "split(a block handle, ...)", ScheduleError,
         ("expected a loop handle", "get_loops"),
         refused(lambda s, c, d, L, D: s.split(c, [None, 4]))),
    Case("sch-split-factors-not-a-list", "schedule", "split(loop, None)", ScheduleError,
         ("factors must be a list", "[None, 8]"),
         refused(lambda s, c, d, L, D: s.split(L[0], None))),
    Case("sch-split-too-small", "schedule", "split of a 32-loop by [3, 4]", ScheduleError,
         ("multiply to 12", "extent 32", "None"),
         refused(lambda s, c, d, L, D: s.split(L[0], [3, 4]))),
    Case("sch-split-overflow", "schedule", "split by [2**31, None] (a huge record)",
         ScheduleError, ("multiply to 2147483648", "int32", "about the extent 32"),
         refused(lambda s, c, d, L, D: s.split(L[0], [2 ** 31, None]))),
    Case("sch-split-float-factor", "schedule", "split(loop, [4.5, None])", ScheduleError,
         ("expected an integer", "4.5"),
         refused(lambda s, c, d, L, D: s.split(L[0], [4.5, None]))),
    Case("sch-fuse-not-adjacent", "schedule", "fuse(i, k) with j between them", ScheduleError,
         ("not directly nested", "adjacent"),
         refused(lambda s, c, d, L, D: s.fuse(L[0], L[2]))),
    Case("sch-reorder-two-nests", "schedule", "reorder loops of two nests", ScheduleError,
         ("not in one loop nest", "same nest"),
         refused(lambda s, c, d, L, D: s.reorder(L[1], D[0]))),
    Case("sch-vectorize-reduction", "schedule", "vectorize the reduction loop", ScheduleError,
         ("cannot vectorize loop k", "reduction", "rfactor"),
         refused(lambda s, c, d, L, D: s.vectorize(L[2]))),
    Case("sch-stale-loop", "schedule", "a loop handle used after split replaced it",
         ScheduleError, ("loop i no longer exists", "use the loops"),
         refused(lambda s, c, d, L, D: s.parallel(L[0]), before=lambda s, L: s.split(L[0], [
             None, 4]))),
    Case("sch-compute-inline-reduction", "schedule", "compute_inline of a reduction",
         ScheduleError, ("block C is a reduction", "elementwise"),
         refused(lambda s, c, d, L, D: s.compute_inline(c))),
    Case("sch-compute-at-an-output", "schedule", "compute_at of the block writing an output",
         ScheduleError, ("argument of the function", "computed whole"),
         refused(lambda s, c, d, L, D: s.compute_at(d, L[0]))),
    Case("sch-buffer-index-type", "schedule", "cache_read(block, 'a', 'global')",
         ScheduleError, ("cache_read", "read_buffer_index must be an int", "'a'"),
         refused(lambda s, c, d, L, D: s.cache_read(c, "a", "global"))),
    Case("sch-buffer-index-range", "schedule", "cache_read of read buffer #9", ScheduleError,
         ("no read buffer #9", "0: A, 1: B"),
         refused(lambda s, c, d, L, D: s.cache_read(c, 9, "global"))),
    Case("sch-unknown-scope", "schedule", "cache_write(..., 'texture')", ScheduleError,
         ("unknown storage scope 'texture'", "global, local"),
         refused(lambda s, c, d, L, D: s.cache_write(c, 0, "texture"))),
    Case("sch-rfactor-spatial-loop", "schedule", "rfactor of a spatial loop", ScheduleError,
         ("rfactor", "needs a reduction loop"),
         refused(lambda s, c, d, L, D: s.rfactor(L[0], 0))),
    Case("sch-decompose-without-init", "schedule", "decompose_reduction of an elementwise block",
         ScheduleError, ("block D has no init",),
         refused(lambda s, c, d, L, D: s.decompose_reduction(d, D[0]))),
    Case("sch-sample-probs-type", "schedule", "sample_categorical([1, 2], ['a', 'b'])",
         ScheduleError, ("probs must be numbers",),
         refused(lambda s, c, d, L, D: s.sample_categorical([1, 2], ["a", "b"]))),
    Case("sch-tile-decision-type", "schedule", "sample_perfect_tile(..., decision=5)",
         ScheduleError, ("tile decision must be a list",),
         refused(lambda s, c, d, L, D: s.sample_perfect_tile(L[0], 2, decision=5))),
    Case("sch-bad-annotation", "schedule", "annotate(loop, 'k', [1, 2])", ScheduleError,
         ("annotate k", "int, float, str or sampled value"),
         refused(lambda s, c, d, L, D: s.annotate(L[0], "k", [1, 2]))),

    # build
    Case("build-no-compiler", "build", "CC names a program that does not exist", BuildError,
         ("cannot run the C compiler", "/nonexistent/looptune-cc", "set CC"),
         lambda env: (env.setenv("CC", "/nonexistent/looptune-cc"), lt.build(add_func()))),
    Case("build-compiler-does-not-run", "build", "CC=false (exits 1)", BuildError,
         ("'false' does not run", "set CC"),
         lambda env: (env.setenv("CC", "false"), lt.build(add_func()))),
    Case("build-compiler-error", "build", "LOOPTUNE_CFLAGS makes the compile fail",
         BuildError, ("the C compiler failed", "LOOPTUNE_CFLAGS", "source: ", ".c"),
         lambda env: (env.setenv("LOOPTUNE_CFLAGS", "-include /nonexistent/looptune.h"),
                      lt.build(add_func())), needs="cc"),
    Case("build-cache-not-writable", "build", "LOOPTUNE_CACHE_DIR under a regular file",
         BuildError, ("kernel cache", "LOOPTUNE_CACHE_DIR"),
         lambda env: (a_file(env), env.setenv("LOOPTUNE_CACHE_DIR",
                                              str(env.path / "notes.txt" / "cache")),
                      lt.build(add_func())), needs="cc"),
    Case("build-cuda-target", "build", "lt.build(func, target='cuda')", BuildError,
         ("building for cuda is not supported", "target='cpu'"),
         lambda env: lt.build(add_func(), target="cuda")),
    Case("build-unknown-target", "build", "lt.build(func, target='tpu')", TargetError,
         ("unknown target 'tpu'", "'cpu'"), lambda env: lt.build(add_func(), target="tpu")),
    Case("build-target-bad-json", "build", "a target given as broken JSON", TargetError,
         ("not valid JSON", "Target.to_json"),
         lambda env: lt.build(add_func(), target='{"kind": cpu}')),
    Case("build-bad-thread-count", "build", "lt.build(func, num_threads=-1)", RunError,
         ("thread count", ">= 1", "-1"),
         lambda env: lt.build(add_func(), num_threads=-1), needs="cc"),

    # calling a kernel
    Case("call-missing-argument", "call", "mod(a, b) for a kernel of three arrays", RunError,
         ("takes 3 arrays (A, B, C)", "got 2"), called(lambda: arrays()[:2]), needs="cc"),
    Case("call-wrong-shape", "call", "an output of 32 elements for 64", RunError,
         ("argument C must have shape (64,)", "(32,)"),
         called(lambda: arrays()[:2] + [np.zeros(32, "float32")]), needs="cc"),
    Case("call-wrong-dtype", "call", "a float64 input for float32", RunError,
         ("argument B must have dtype float32", "float64", "astype"),
         called(lambda: [arrays()[0], arrays()[1].astype("float64"), arrays()[2]]), needs="cc"),
    Case("call-byte-order", "call", "a big-endian float32 input", RunError,
         ("argument A must have dtype float32", ">f4"),
         called(lambda: [arrays()[0].astype(">f4")] + arrays()[1:]), needs="cc"),
    Case("call-non-contiguous", "call", "a strided view as input", RunError,
         ("argument B must be C-contiguous", "ascontiguousarray"),
         called(lambda: [arrays()[0], np.ones(128, "float32")[::2], arrays()[2]]), needs="cc"),
    Case("call-aliased-output", "call", "mod(a, b, a): the output is an input", RunError,
         ("overlap", "pass a copy"),
         called(lambda: (lambda a, b, c: [a, b, a])(*arrays())), needs="cc"),
    Case("call-read-only-output", "call", "a read-only output array", RunError,
         ("argument C is an output", "writeable"),
         called(lambda: arrays()[:2] + [np.frombuffer(bytes(256), "float32")]), needs="cc"),
    Case("call-not-an-array", "call", "a Python list as input", RunError,
         ("argument A must be a numpy array", "list"),
         called(lambda: [list(arrays()[0])] + arrays()[1:]), needs="cc"),
    Case("call-timer-zero-repeats", "call", "time_evaluator(repeat=0)", RunError,
         ("number and repeat must be at least 1", "repeat=0"),
         lambda env: add_kernel().time_evaluator(repeat=0), needs="cc"),

    # tuning
    Case("tune-zero-trials", "tuning", "max_trials_global=0", TuneError,
         ("max_trials_global", "at least 1", "got 0"), lambda env: tune(max_trials_global=0)),
    Case("tune-fractional-trials", "tuning", "max_trials_global=2.5", TuneError,
         ("max_trials_global", "whole number"), lambda env: tune(max_trials_global=2.5)),
    Case("tune-zero-batch", "tuning", "num_trials_per_iter=0", TuneError,
         ("num_trials_per_iter", "at least 1"), lambda env: tune(num_trials_per_iter=0)),
    Case("tune-negative-time", "tuning", "max_time_s=-5", TuneError,
         ("max_time_s", "positive number of seconds"), lambda env: tune(max_time_s=-5)),
    Case("tune-unknown-target", "tuning", "target='tpu'", TargetError,
         ("unknown target 'tpu'", "'cpu'"), lambda env: tune(target="tpu")),
    Case("tune-target-without-rules", "tuning", "a target kind with no rules (opencl)", TuneError,
         ("no default schedule rules for target kind 'opencl'", "sch_rules="),
         lambda env: tune(target=Target(kind="opencl"))),
    Case("tune-unknown-strategy", "tuning", "strategy='annealing'", TuneError,
         ("unknown search strategy 'annealing'", "registered: evolutionary, replay-trace"),
         lambda env: tune(strategy="annealing")),
    Case("tune-unknown-cost-model", "tuning", "cost_model='gbdt'", TuneError,
         ("unknown cost model 'gbdt'", "registered: mlp, random, xgb"),
         lambda env: tune(cost_model="gbdt")),
    Case("tune-unknown-scheduler", "tuning", "task_scheduler='fifo'", TuneError,
         ("unknown task scheduler 'fifo'", "gradient, round-robin"),
         lambda env: tune(task_scheduler="fifo")),
    Case("tune-work-dir-not-writable", "tuning", "a work dir under a regular file", TuneError,
         ("work dir", "cannot be created", "work_dir"),
         lambda env: (a_file(env), tune(database=None, work_dir=env.path / "notes.txt" / "w"))),
    Case("tune-bad-evaluator", "tuning", "EvaluatorConfig(num_threads=-2)", TuneError,
         ("num_threads must be a whole number >= 1", "-2"),
         lambda env: tune(evaluator=EvaluatorConfig(num_threads=-2))),
    Case("tune-no-compiler", "tuning", "tuning with CC naming a missing program", BuildError,
         ("does not build", "cannot run the C compiler", "set CC"),
         lambda env: (env.setenv("CC", "/nonexistent/looptune-cc"), tune(max_trials_global=1))),
    Case("tune-never-tuned", "tuning", "compile_tir of a workload the database never saw",
         NoTuningRecordError, ("never tuned", "tune it first", "looptune.build"),
         lambda env: compile_tir(MemoryDatabase(), scale_func())),

    # databases
    Case("db-sqlite-not-a-database", "databases", "an SQLite path holding a text file",
         DatabaseError, ("not a readable SQLite database", "another work dir"),
         sqlite_not_a_database, after=unchanged_file("database.sqlite")),
    Case("db-sqlite-truncated", "databases", "an SQLite file cut in half", DatabaseError,
         ("not a readable SQLite database", "truncated", "restore it"), sqlite_truncated,
         after=unchanged_file("work/database.sqlite")),
    Case("db-sqlite-newer-schema", "databases", "an SQLite database of schema version 2",
         DatabaseError, ("schema version 2", "another looptune version", "another work dir"),
         sqlite_newer_schema, after=back_to_schema_1_then_stored),
    Case("db-sqlite-path-is-a-directory", "databases", "SQLiteDatabase(a directory)",
         DatabaseError, ("is a directory", "work_dir="), lambda env: SQLiteDatabase(env.path)),
    Case("db-json-work-dir-is-a-file", "databases", "JSONDatabase(a regular file)",
         DatabaseError, ("cannot be created", "directory"),
         lambda env: (a_file(env), JSONDatabase(env.path / "notes.txt"))),
    Case("db-json-not-a-database", "databases", "a JSON record file holding binary data",
         DatabaseWarning, ("database_tuning_record.json, line 1", "corrupt line"),
         json_not_a_database, after=unchanged_file("work/database_tuning_record.json")),
    Case("db-json-truncated", "databases", "a JSON record file whose last line was cut",
         DatabaseWarning, ("line 3", "partial last line"), json_truncated,
         after=truncated_record_then_commit),
    Case("db-record-newer-format", "databases", "a record of format version 2",
         DatabaseWarning, ("format 2", "another looptune version"),
         malicious("json", version=2), after=still_stored("json")),
    Case("db-record-does-not-replay", "databases", "compile_tir with a record of another "
         "workload's trace (and good ones)", DatabaseWarning,
         ("no longer replays", "no block named 'C'"), compile_skips_a_stale_record,
         needs="cc", after=still_stored("sqlite")),
    Case("db-only-record-does-not-replay", "databases", "compile_tir whose only record does "
         "not replay", NoTuningRecordError, ("none of the 1 best records", "re-tune"),
         compile_with_only_a_stale_record, after=db_len_unchanged(1)),
    Case("db-malicious-unknown-instruction", "databases", "a record running instruction "
         "'RunShell'", DatabaseWarning, ("unknown instruction kind 'RunShell'", "id 4"),
         malicious("sqlite", trace_with(("RunShell", [], [{"s": "rm -rf /"}], []))),
         after=still_stored("sqlite")),
    Case("db-malicious-huge-split", "databases", "a record splitting by 2**33 x 2**33 (the "
         "kernel would never end)", DatabaseWarning, ("does not replay", "int32"),
         malicious("sqlite", trace_with(GET_B, LOOPS, ("Split", ["l1", 2 ** 33, 2 ** 33], [],
                                                       ["l3", "l4"])), query=True),
         after=still_stored("sqlite")),
    Case("db-malicious-huge-number", "databases", "a record with a 400-digit split factor",
         DatabaseWarning, ("does not replay", "split of loop i"),
         malicious("json", trace_with(GET_B, LOOPS, ("Split", ["l1", 10 ** 400, None], [],
                                                     ["l3", "l4"])), query=True),
         after=still_stored("json")),
    Case("db-malicious-negative-time", "databases", "a record claiming -1 s", DatabaseWarning,
         ("run_secs must be positive and finite", "[-1.0]"),
         malicious("sqlite", run_secs=[-1.0]), after=still_stored("sqlite")),
    Case("db-malicious-zero-time", "databases", "a record claiming 0 s", DatabaseWarning,
         ("run_secs must be positive and finite", "[0.0]"),
         malicious("json", run_secs=[0.0]), after=still_stored("json")),
    Case("db-malicious-deep-nesting-json", "databases", "a record line of 100,000 nested "
         "lists", DatabaseWarning, ("line 4", "RecursionError"),
         malicious("json", raw=deep()), after=still_stored("json")),
    Case("db-malicious-deep-nesting-sqlite", "databases", "an SQLite record of 100,000 "
         "nested lists", DatabaseWarning, ("id 4", "RecursionError"),
         malicious("sqlite", raw=deep()), after=still_stored("sqlite")),
    Case("db-malicious-block-name", "databases", "a record naming block 'B\\n*/ #error'",
         DatabaseWarning, ("does not replay", "no block named"),
         malicious("sqlite", trace_with(("GetBlock", [], [{"s": "B\n*/ #error x"}], ["b0"]),
                                        ("GetLoops", ["b0"], [], ["l1", "l2"]),
                                        ("Parallel", ["l1"], [], [])), query=True),
         after=still_stored("sqlite")),
    Case("db-null-record", "databases", "an SQLite record that is JSON null", DatabaseWarning,
         ("id 4", "not a JSON object"), malicious("sqlite", raw="null"),
         after=still_stored("sqlite")),

    # command line
    Case("cli-unknown-op", "CLI", "looptune tune nosuchop", CLIError,
         ("unknown workload 'nosuchop'", "built-in operator", "matmul"), cli("tune", "nosuchop")),
    Case("cli-shape-without-value", "CLI", "--shape M", CLIError,
         ("--shape", "KEY=VALUE"), cli("tune", "matmul", "--shape", "M")),
    Case("cli-shape-not-a-number", "CLI", "--shape M=abc", CLIError,
         ("--shape M=abc", "integers", "M=512"), cli("tune", "matmul", "--shape", "M=abc")),
    Case("cli-shape-unknown-parameter", "CLI", "--shape X=5 for matmul", CLIError,
         ("unknown parameter(s) X", "valid ones", "M=512"),
         cli("tune", "matmul", "--shape", "X=5")),
    Case("cli-shape-zero", "CLI", "--shape M=0", CLIError, ("--shape M=0", ">= 1"),
         cli("tune", "matmul", "--shape", "M=0")),
    Case("cli-conv-stride-zero", "CLI", "looptune tune conv2d --shape stride=0", CLIError,
         ("stride=0", "stride must be >= 1"), cli("tune", "conv2d", "--shape", "stride=0")),
    Case("cli-zero-trials", "CLI", "--trials 0", CLIError, ("--trials must be at least 1",),
         cli("tune", "matmul", "--trials", "0")),
    Case("cli-negative-threads", "CLI", "--threads -2", CLIError,
         ("--threads must be at least 1", "-2"), cli("tune", "matmul", "--threads", "-2")),
    Case("cli-unknown-target", "CLI", "--target tpu", TargetError, ("unknown target 'tpu'",),
         cli("tune", "matmul", "--shape", "M=8,N=8,K=8", "--target", "tpu")),
    Case("cli-model-not-onnx", "CLI", "looptune tune-model notes.txt", CLIError,
         ("notes.txt", ".onnx"),
         lambda env: (a_file(env), cli("tune-model", "notes.txt")(env))),

    # model import
    Case("onnx-unsupported-operator", "model import", "an ONNX Hardmax node", ImportError_,
         ("Hardmax x1 (e.g. node y)", "cannot be imported by looptune",
          "looptune inspect"),
         from_onnx(("Hardmax", ["x"], ["y"])), needs="onnx"),
    Case("onnx-dynamic-shape", "model import", "an ONNX input of shape [batch, 3]",
         ImportError_, ("input x has a dynamic dimension (batch)", "static shapes"),
         from_onnx(("Relu", ["x"], ["y"]), inputs=(("x", ["batch", 3]),)), needs="onnx"),
    Case("onnx-dynamic-reshape", "model import", "an ONNX Reshape to a shape computed at run "
         "time", ImportError_, ("node y", "must be a constant"),
         from_onnx(("Relu", ["x"], ["r"]), ("Reshape", ["r", "x"], ["y"])), needs="onnx"),
    Case("onnx-old-opset", "model import", "an ONNX model of opset 9", ImportError_,
         ("opset 9", "opset 13", "version_converter"),
         from_onnx(("Relu", ["x"], ["y"]), opset=9), needs="onnx"),
    Case("onnx-not-a-model", "model import", "from_onnx of a file holding random bytes",
         ImportError_, ("is not an ONNX model", "export it again"),
         onnx_file(b"\x00\xff not protobuf \xde\xad" * 20), needs="onnx"),
    Case("onnx-missing-file", "model import", "from_onnx of a path that does not exist",
         ImportError_, ("cannot read the ONNX model", "No such file", "existing .onnx"),
         onnx_file(None), needs="onnx"),
    Case("onnx-undefined-input", "model import", "an ONNX node reading a name nothing "
         "defines", ImportError_, ("reads zz", "which no input", "check_model"),
         from_onnx(("Add", ["x", "zz"], ["y"])), needs="onnx"),
    Case("torch-unsupported-operator", "model import", "torch.sort and torch.topk in a module",
         ImportError_, ("aten.sort.default x1 (e.g. node sort)", "aten.topk.default x1",
                        "cannot be imported by looptune"),
         from_torch(lambda m, x: x.sort(0)[0] + x.topk(3)[0], (2, 3)), needs="torch"),
    Case("torch-data-dependent-shape", "model import", "control flow on a tensor's value",
         ImportError_, ("torch.export cannot export", "data-dependent", "control flow"),
         from_torch(data_dependent, (2, 3)), needs="torch"),
    Case("torch-wrong-example-inputs", "model import", "example inputs of the wrong shape",
         ImportError_, ("torch.export cannot export", "example inputs"),
         from_torch(lambda m, x: m.fc(x), (2, 5)), needs="torch"),
]
N_CASES = len(CASES)


_MARKS = {"cc": [pytest.mark.cc], "torch": [], "onnx": [], "": []}


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id, marks=_MARKS[c.needs])
                                  for c in CASES])
def test_bad_input(case, tmp_path):
    if case.needs in ("torch", "onnx"):
        pytest.importorskip(case.needs)
    check(case, tmp_path)


def test_the_catalogue_is_complete_and_documented():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids)) and N_CASES >= 60
    assert {c.category for c in CASES} == {"te", "schedule", "build", "call", "tuning",
                                           "databases", "CLI", "model import"}
    doc = (Path(__file__).parent.parent / "docs" / "bad_inputs.md").read_text()
    assert [i for i in ids if f"`{i}`" not in doc] == []
    assert f"{N_CASES} cases" in doc


# ---------------------------------------------------------------------------- item by item
NASTY = "f*/\n#error injected \\\n/* ??/"


def nasty_func():
    """A workload whose function and loop names hold C comment markers, a newline, a line
    splice and a trigraph (as a malicious database record could)."""
    obj = func_to_json(scale_func())
    obj["func"]["name"] = NASTY
    obj["vars"] = [[NASTY + name, dtype] for name, dtype in obj["vars"]]
    return func_from_json(json.dumps(obj))


def test_names_from_a_workload_cannot_escape_c_comments():
    sch = Schedule(nasty_func())
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 3])  # a guarded tail: lowering adds comments naming the loop
    source = CRenderer().render(lower(sch.func), meta={"target": NASTY})
    assert "#error" in source  # the name is shown...
    for line in source.splitlines():
        assert not line.lstrip().startswith("#error")  # ...but only inside a comment
        if "//" in line:
            comment = line.split("//", 1)[1]
            assert "*/" not in comment and "/*" not in comment and "??" not in comment
        assert not line.endswith("\\")


@pytest.mark.cc
def test_a_workload_with_nasty_names_compiles_and_computes_right():
    sch = Schedule(nasty_func())
    i, j = sch.get_loops(sch.get_block("B"))
    sch.split(i, [None, 3])
    mod = lt.build(sch)
    a = np.random.default_rng(1).uniform(-1, 1, (16, 8)).astype("float32")
    b = np.full_like(a, np.nan)
    mod(a, b)
    np.testing.assert_allclose(b, a * 2)


@pytest.mark.cc
@pytest.mark.parametrize("reducer, ref", [("max", np.max), ("min", np.min)])
def test_max_and_min_start_from_infinity_as_in_numpy(reducer, ref):
    """te.max of values that are all -inf (or none, with where=) is -inf, as in numpy's
    np.max(..., initial=-inf); the C prints INFINITY."""
    A = ph(5, 7)
    k = te.reduce_axis(7, "k")
    fn = getattr(te, reducer)
    R = te.compute((5,), lambda i: fn(A[i, k], axis=k, where=A[i, k] > -0.5), name="R")
    mod = lt.build(te.create_prim_func([A, R]))
    assert "INFINITY" in mod.source
    a = np.random.default_rng(2).uniform(-1, 1, (5, 7)).astype("float32")
    a[1] = -np.inf if reducer == "max" else np.inf
    a[3] = -0.9  # no element passes `where`
    got = np.zeros(5, "float32")
    mod(a, got)
    inf = np.inf if reducer == "min" else -np.inf
    want = ref(np.where(a > -0.5, a, inf), axis=1, initial=inf)
    np.testing.assert_array_equal(got, want)
    assert got[3] == inf and got[1] == inf


@pytest.mark.cc
def test_a_vectorized_max_starts_from_a_vector_of_minus_infinity():
    A = ph(7, 16)
    k = te.reduce_axis(7, "k")
    R = te.compute((16,), lambda i: te.max(A[k, i], axis=k, where=A[k, i] > -0.5), name="R")
    sch = Schedule(te.create_prim_func([A, R]))
    r = sch.get_block("R")
    i, kk = sch.get_loops(r)
    sch.reorder(kk, i)
    init = sch.decompose_reduction(r, kk)
    sch.vectorize(sch.get_loops(init)[-1])
    mod = lt.build(sch)
    assert re.search(r"lt_bcast_float32x\d+\(\(-INFINITY\)\)", mod.source), mod.source
    a = np.random.default_rng(4).uniform(-1, 1, (7, 16)).astype("float32")
    a[:, 3] = -0.9
    got = np.zeros(16, "float32")
    mod(a, got)
    want = np.max(np.where(a > -0.5, a, -np.inf), axis=0, initial=-np.inf)
    np.testing.assert_array_equal(got, want)
    assert got[3] == -np.inf


@pytest.mark.cc
def test_a_full_reduction_to_a_0d_buffer():
    A = ph(37, 5)
    k, j = te.reduce_axis(37, "k"), te.reduce_axis(5, "j")
    S = te.compute((), lambda: te.sum(A[k, j], axis=[k, j]), name="S")
    func = te.create_prim_func([A, S])
    a = np.random.default_rng(3).uniform(-1, 1, (37, 5)).astype("float32")
    from looptune.tir import interpreter
    s = np.zeros((), "float32")
    interpreter.run(func, a, s)
    np.testing.assert_allclose(s, a.sum(), rtol=1e-5, atol=1e-5)
    sch = Schedule(func)
    kk, _ = sch.get_loops(sch.get_block("S"))
    _, k1 = sch.split(kk, [None, 8])
    sch.rfactor(k1, 0)
    for target in (func, sch):
        s = np.zeros((), "float32")
        lt.build(target)(a, s)
        np.testing.assert_allclose(s, a.sum(), rtol=1e-5, atol=1e-5)


def test_replaying_a_trace_with_a_huge_split_is_refused():
    """Trace replay goes through the same check: a record cannot make a kernel loop 2**66
    times."""
    t = Trace.from_json(trace_with(GET_B, LOOPS, ("Split", ["l1", 2 ** 33, 2 ** 33], [],
                                                  ["l3", "l4"])))
    with pytest.raises(ScheduleError, match="int32"):
        t.apply_to_schedule(Schedule(scale_func()))
