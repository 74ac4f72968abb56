"""compile_model: every kernel of a model, with its best verified record or a default
schedule, linked with a generated C runner into one shared library.

The library's entry point `lt_model_packed(void** args)` takes the model's inputs then its
outputs and calls the kernels in order: graph inputs and outputs are the caller's arrays,
intermediates live in one arena laid out by a static memory plan (memory.py), weights in a
read-only blob embedded in the library itself (`.incbin`). One native call per inference.
"""
from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np

from ..build import generate_source
from ..codegen import CRenderer, c_comment
from ..runtime.compiler import compile_library
from ..runtime.ndarray import pack_last_axis
from ..schedule.primitives.layout import PACKED
from ..target import Target
from ..tir import dtype as dt
from ..tune.database.base import Database
from ..dlight import default_schedule
from .fuse import fuse
from .ir import Graph
from .memory import pack_weights, plan_arena
from .simplify import prepare
from .tasks import tasks_of_groups

FORMAT_VERSION = 2


def _source_of(view):
    """The value whose bytes a chain of views (reshapes) shows."""
    from .op import get_graph_op
    while view.producer is not None and get_graph_op(view.producer.op).kind == "view":
        view = view.producer.inputs[0]
    return view


def schedule_task(task, database: Database | None, target: Target, *, check: bool,
                  num_threads):
    """(Schedule, record or None): the best record that replays and verifies, else the
    rule-based default."""
    if database is not None and database.has_workload(task.func):
        from ..tune.tune import NoTuningRecordError, compile_tir
        try:
            mod = compile_tir(database, task.func, target, check=check, num_threads=num_threads)
            return mod.schedule, mod.record
        except NoTuningRecordError as e:  # tuned, but nothing usable here: say so
            warnings.warn(f"{task.task_name}: {e}; it runs with the default schedule",
                          stacklevel=3)
    return default_schedule(task.func, target), None


def compile_model(graph: Graph, database: Database | None = None, target="cpu", *,
                  num_threads: int | None = None, check: bool = True):
    """Compile `graph` into a CompiledModel: `compiled(*numpy_inputs)` returns its outputs.
    Tasks with a record in `database` (a Database, or a work dir's path) use their best
    verified one, the others a rule-based default schedule. `num_threads`: the threads every
    kernel uses (default: the records', else all cores). On a cuda target the result is a
    CudaModel (compile_cuda.py), which needs an NVIDIA GPU."""
    from .executor import CompiledModel
    if not isinstance(graph, Graph):
        raise TypeError(f"compile_model needs a looptune Graph, got {type(graph).__name__}")
    target = Target.create(target)
    if database is not None and not isinstance(database, Database):
        from ..tune.tune import _database
        database = _database(None, database)
    graph = prepare(graph)
    groups = fuse(graph)
    tasks = tasks_of_groups(groups)
    if target.kind == "cuda":
        from .compile_cuda import compile_model_cuda
        return compile_model_cuda(graph, groups, tasks, database, target, check=check)

    units, kernels, task_info = [], {}, []
    threads_used = set()
    for task in tasks:
        sch, record = schedule_task(task, database, target, check=check,
                                    num_threads=num_threads)
        func = sch.func
        func = type(func)(task.task_name, func.params, func.body, func.attrs)
        _, source = generate_source(func, target)
        symbol = CRenderer.symbol(func)
        units.append((f"{symbol}.c", source, [f"-Dlt_set_num_threads={symbol}_set_num_threads"]))
        for g in task.groups:
            kernels[id(g)] = (symbol, func)
        if record is not None:
            threads_used.add(record.measure.get("num_threads"))
        task_info.append({"task_name": task.task_name, "weight": task.weight,
                          "workload": task.key, "tuned": record is not None,
                          "record_ms": None if record is None else record.median_secs * 1e3})

    runner, blob, desc = _runner(graph, groups, kernels)
    units.append(("lt_model.c", runner, []))
    units.append(("lt_weights.S", _weights_asm(), []))
    lib = _build(units, blob, graph.name)
    if num_threads is None:
        known = {t for t in threads_used if t}
        num_threads = known.pop() if len(known) == 1 else target.cores
    desc.update({"format": FORMAT_VERSION, "name": graph.name, "target": target.key(),
                 "num_threads": int(num_threads), "tasks": task_info})
    return CompiledModel(lib, desc)


def _build(units, blob: bytes, name: str):
    return compile_library(units, name=f"model_{name}", data_files={"lt_weights.bin": blob})


def _weights_asm() -> str:
    return """    .section .rodata
    .balign 64
    .globl lt_model_weights
    .type lt_model_weights, @object
lt_model_weights:
    .incbin "lt_weights.bin"
    .byte 0
    .section .note.GNU-stack,"",@progbits
"""


@dataclasses.dataclass
class MemoryPlan:
    """Where each value of a compiled model lives: the caller's input and output arrays (by
    argument slot), one arena of intermediates (by offset), one blob of weights (by offset
    per layout), and the outputs that copy another value."""
    steps: list  # (input values, output value) per group, views resolved to their source
    out_slots: dict  # id(value) -> argument slot (inputs first, then outputs)
    in_slot: dict  # id(value) -> argument slot
    copies: list  # (output index, source value)
    arena: dict  # id(value) -> byte offset
    arena_bytes: int
    weight_offsets: dict  # (id(value), packing factor) -> byte offset
    blob: bytes


def plan_memory(graph: Graph, groups: list, kernels: dict) -> MemoryPlan:
    """The MemoryPlan of the groups in order; `kernels` maps id(group) to (symbol, func)."""
    n_in = len(graph.inputs)
    out_slots = {}
    copies = []  # (output index, source value): outputs another output or input already holds
    for j, v in enumerate(graph.outputs):
        src = _source_of(v)
        if src.producer is not None and id(src) not in out_slots:
            out_slots[id(src)] = n_in + j
        else:
            copies.append((j, src))
    steps = [([_source_of(v) for v in g.inputs], g.output) for g in groups]
    arena, arena_bytes = plan_arena(steps, set(out_slots))
    # constants, each in the layout its kernel reads (schedule.pack_layout), once per layout
    constants, seen = [], set()

    def use_const(v, factor: int):
        if (id(v), factor) not in seen:
            seen.add((id(v), factor))
            data = np.asarray(v.data, dtype=v.dtype)
            constants.append(((id(v), factor), pack_last_axis(data, factor) if factor else data))

    for g, (ins, _) in zip(groups, steps):
        packed = dict(kernels[id(g)][1].attr(PACKED, ()))
        for i, v in enumerate(ins):
            if v.is_const:
                use_const(v, packed.get(i, 0))
    for _, src in copies:
        if src.is_const:
            use_const(src, 0)
    woff, blob = pack_weights(constants)
    in_slot = {id(v): i for i, v in enumerate(graph.inputs)}
    return MemoryPlan(steps, out_slots, in_slot, copies, arena, arena_bytes, woff, blob)


def _runner(graph: Graph, groups: list, kernels: dict):
    """(C source of the runner, weights blob, JSON-ready description)."""
    n_in = len(graph.inputs)
    plan = plan_memory(graph, groups, kernels)
    steps, out_slots, in_slot, copies = plan.steps, plan.out_slots, plan.in_slot, plan.copies
    arena, arena_bytes, woff, blob = plan.arena, plan.arena_bytes, plan.weight_offsets, plan.blob

    def ptr(v, factor: int = 0) -> str:
        ctype = dt.c_type(v.dtype)
        if id(v) in in_slot:
            return f"({ctype}*)args[{in_slot[id(v)]}]"
        if id(v) in out_slots:
            return f"({ctype}*)args[{out_slots[id(v)]}]"
        if v.is_const:
            return f"({ctype}*)(lt_model_weights + {woff[(id(v), factor)]})"
        return f"({ctype}*)(lt_arena + {arena[id(v)]})"

    protos, calls, setters, timed = [], [], [], []
    declared = set()
    for g, (ins, out) in zip(groups, steps):
        symbol, func = kernels[id(g)]
        if symbol not in declared:
            declared.add(symbol)
            params = ", ".join(f"{dt.c_type(b.dtype)}*" for b in func.params)
            protos.append(f"int32_t {symbol}({params});")
            protos.append(f"void {symbol}_set_num_threads(int);")
            setters.append(f"  {symbol}_set_num_threads(n);")
        packed = dict(func.attr(PACKED, ()))
        args = ", ".join(ptr(v, packed.get(i, 0)) for i, v in enumerate(ins + [out]))
        calls.append(f"  if ((rc = {symbol}({args})) != 0) return rc;  "
                     f"// {c_comment(g.output.name)}")
        timed.append(f"  t0 = lt_now(); rc = {symbol}({args}); "
                     f"ms[{len(timed)}] = lt_now() - t0; if (rc != 0) return rc;")
    for j, src in copies:
        calls.append(f"  memcpy(args[{n_in + j}], {ptr(src)}, {_nbytes(src)});")
    source = "\n".join([
        "// Machine generated by looptune: the runner of a compiled model.",
        "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
        "#include <time.h>",
        "extern const char lt_model_weights[];",
        *protos,
        f"static char* lt_arena = 0;  // {arena_bytes} bytes of intermediates",
        "void lt_set_num_threads(int n) {", *setters, "}",
        "int32_t lt_model_packed(void** args) {",
        "  int32_t rc = 0;",
        f"  if (!lt_arena && !(lt_arena = aligned_alloc(64, {max(arena_bytes, 64)}))) return -1;",
        *calls,
        "  return rc;",
        "}",
        "static double lt_now(void) {",
        "  struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);",
        "  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;",
        "}",
        "// The same calls, each kernel's milliseconds written to ms[i] (CompiledModel.profile).",
        "int32_t lt_model_profile(void** args, double* ms) {",
        "  int32_t rc = 0; double t0;",
        f"  if (!lt_arena && !(lt_arena = aligned_alloc(64, {max(arena_bytes, 64)}))) return -1;",
        *timed,
        *calls[len(timed):],
        "  return rc;",
        "}", ""])
    return source, blob, model_description(graph, groups, kernels, plan)


def model_description(graph: Graph, groups: list, kernels: dict, plan: MemoryPlan) -> dict:
    """The JSON-ready description of a compiled model's interface, kernels and memory."""
    return {
        "inputs": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype}
                   for v in graph.inputs],
        "outputs": [{"name": v.name, "shape": list(v.shape), "dtype": v.dtype}
                    for v in graph.outputs],
        "kernels": len(groups),
        "steps": [{"kernel": kernels[id(g)][0], "output": g.output.name} for g in groups],
        "arena_bytes": plan.arena_bytes, "weights_bytes": len(plan.blob),
    }


def _nbytes(v) -> int:
    from .memory import nbytes
    return nbytes(v)


def describe(desc: dict) -> str:
    return json.dumps(desc, indent=2)
