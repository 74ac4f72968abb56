"""The CPU model code: a generated C runner linked, with every kernel's object as it was
compiled (and verified) and the weights embedded (`.incbin`), into one shared library.

The library's entry point `lt_model_packed(void** args)` takes the model's inputs, its
outputs, then the arena, and calls the kernels in order: graph inputs and outputs are the
caller's arrays, intermediates live in the arena laid out by the static memory plan
(memory.py), weights in a read-only blob in the library itself. One native call per
inference; the library keeps no state of its own, so calls on several arenas run at once.
"""
from __future__ import annotations

import hashlib

from ..codegen import c_comment, c_string
from ..schedule.primitives.layout import PACKED
from ..tir import dtype as dt
from .executor import FORMAT_VERSION, CompiledModel, semantic_hash
from .memory import nbytes
from .planner import ModelPlan


def build_cpu_model(plan: ModelPlan, *, num_threads: int | None = None) -> CompiledModel:
    """Link the plan's kernels and runner into a CompiledModel. `num_threads`: the threads
    every kernel uses (default: the records', if they agree, else all cores)."""
    desc = {**plan.desc, "format": FORMAT_VERSION, "isa": plan.target.isa(),
            "weights_sha256": hashlib.sha256(plan.memory.blob).hexdigest()}
    desc["hash"] = semantic_hash(desc)
    units = [("lt_model.c", runner_source(plan, desc["hash"]), []),
             ("lt_weights.S", WEIGHTS_ASM, [])]
    lib = plan.backend.link(units, name=f"model_{plan.graph.name}",
                            objects=[k.artifact.object_path for k in plan.kernels],
                            data_files={"lt_weights.bin": plan.memory.blob})
    source = "the num_threads argument"
    if num_threads is None:
        known = {k.record.measure.get("num_threads") for k in plan.kernels if k.record}
        known.discard(None)
        source = "the kernels' tuning records" if len(known) == 1 else "the target's cores"
        num_threads = known.pop() if len(known) == 1 else plan.target.cores
    model = CompiledModel(lib, {**desc, "num_threads": num_threads}, threads_from=source)
    model.desc["num_threads"] = model.num_threads  # as checked (and clamped) for this machine
    return model


WEIGHTS_ASM = """    .section .rodata
    .balign 64
    .globl lt_model_weights
    .type lt_model_weights, @object
lt_model_weights:
    .incbin "lt_weights.bin"
    .byte 0
    .section .note.GNU-stack,"",@progbits
"""


def runner_source(plan: ModelPlan, desc_hash: str = "") -> str:
    """The C of the runner: `lt_model_packed(args)` calls the kernels in order on the
    caller's arrays, the caller's arena (the last argument) and the weights;
    `lt_model_profile` times each call; `lt_model_hash()` returns `desc_hash`
    (executor.semantic_hash of what it was built for)."""
    graph, mem = plan.graph, plan.memory
    n_in = len(graph.inputs)
    arena_slot = n_in + len(graph.outputs)
    steps, out_slots, in_slot, copies = mem.steps, mem.out_slots, mem.in_slot, mem.copies
    arena, arena_bytes, woff = mem.arena, mem.arena_bytes, mem.weight_offsets

    def ptr(v, factor: int = 0) -> str:
        ctype = dt.c_type(v.dtype)
        if id(v) in in_slot:
            return f"({ctype}*)args[{in_slot[id(v)]}]"
        if id(v) in out_slots:
            return f"({ctype}*)args[{out_slots[id(v)]}]"
        if v.is_const:
            return f"({ctype}*)(lt_model_weights + {woff[(id(v), factor)]})"
        return f"({ctype}*)(lt_arena + {arena[id(v)]})"

    protos, calls, setters, timed, index_errors = [], [], [], [], []
    declared = set()
    for g, (ins, out) in zip(plan.groups, steps):
        kernel = plan.of(g)
        symbol, func = kernel.symbol, kernel.func
        if symbol not in declared:
            declared.add(symbol)
            params = ", ".join(f"{dt.c_type(b.dtype)}*" for b in func.params)
            protos.append(f"int32_t {symbol}({params});")
            protos.append(f"void {symbol}_set_num_threads(int);")
            setters.append(f"  {symbol}_set_num_threads(n);")
            # defined by kernels with checked indices (codegen/c.py), else null
            protos.append(f"int32_t {symbol}_index_error(int64_t*, const char**) "
                          "__attribute__((weak));")
        packed = dict(func.attr(PACKED, ()))
        args = ", ".join(ptr(v, packed.get(i, 0)) for i, v in enumerate(ins + [out]))
        k = len(timed)
        calls.append(f"  if ((rc = {symbol}({args})) != 0) {{ lt_failed = {k}; return rc; }}  "
                     f"// {c_comment(g.output.name)}")
        timed.append(f"  t0 = lt_now(); rc = {symbol}({args}); "
                     f"ms[{k}] = lt_now() - t0; if (rc != 0) {{ lt_failed = {k}; return rc; }}")
        values = ", ".join(c_string(v.name) for v in ins + [out])
        index_errors += [f"    case {k}: {{  // a kernel parameter's buffer is named as its value",
                         f"      static const char* const values[] = {{{values}}};",
                         f"      int32_t site = {symbol}_index_error ? "
                         f"{symbol}_index_error(info, names) : 0;",
                         f"      if (site && info[4] >= 0 && info[4] < {len(ins) + 1}) "
                         "names[0] = values[info[4]];",
                         f"      names[2] = {c_string(g.output.name)};",
                         "      return site;", "    }"]
    for j, src in copies:
        calls.append(f"  memcpy(args[{n_in + j}], {ptr(src)}, {nbytes(src)});")
    source = "\n".join([
        "// Machine generated by looptune: the runner of a compiled model.",
        "#include <stdint.h>", "#include <stdlib.h>", "#include <string.h>",
        "#include <time.h>",
        "extern const char lt_model_weights[];",
        "// what this library was built for: loading checks it against the description",
        f'const char* lt_model_hash(void) {{ return "{desc_hash}"; }}',
        *protos,
        "void lt_set_num_threads(int n) {", *setters, "}",
        "static _Thread_local int32_t lt_failed = -1;  // the step whose kernel failed last",
        "// What the failed kernel says of its index out of range (runtime.Module.failure)",
        "int32_t lt_model_index_error(int64_t* info, const char** names) {",
        "  switch (lt_failed) {", *index_errors, "  }", "  return 0;", "}",
        "int32_t lt_model_packed(void** args) {",
        "  int32_t rc = 0;",
        f"  char* lt_arena = (char*)args[{arena_slot}];  // the caller's: {arena_bytes} bytes",
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
        f"  char* lt_arena = (char*)args[{arena_slot}];",
        *timed,
        *calls[len(timed):],
        "  return rc;",
        "}", ""])
    return source
