"""`looptune inspect MODEL`: what looptune makes of a model, without compiling anything:
its operators (how many of each, and which the importer cannot translate), then, when it
imports, its fused kernels and distinct tasks with their weights and work."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

from .tune import CLIError


def source_operators(path: Path) -> tuple[str, Counter]:
    """(a description of the file, operator -> count) as the file states them."""
    if path.suffix == ".onnx":
        import onnx
        model = onnx.load(str(path), load_external_data=False)
        opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")),
                     None)
        ops = Counter(n.op_type if n.domain in ("", "ai.onnx") else f"{n.domain}.{n.op_type}"
                      for n in model.graph.node)
        return f"ONNX opset {opset}, {sum(ops.values())} nodes", ops
    import torch
    ep = torch.export.load(str(path))
    ops = Counter(str(n.target) for n in ep.graph.nodes if n.op == "call_function")
    return f"torch.export program, {sum(ops.values())} calls", ops


def run(args) -> int:
    from ..frontend.common import ImportError_, UnsupportedOperators
    from .model import MODEL_FILES, import_model
    path = Path(args.model)
    if not path.is_file():
        raise CLIError(f"no such file: {args.model}")
    if path.suffix not in MODEL_FILES:
        raise CLIError(f"{args.model}: inspect reads .onnx files and .pt2 files "
                       "(torch.export.save)")
    try:
        what, ops = source_operators(path)
    except ImportError as e:
        raise CLIError(f"{args.model}: {e}") from None
    except Exception as e:  # noqa: BLE001 - protobuf/torch load errors, one message
        raise CLIError(f"{args.model} cannot be read ({type(e).__name__}: {e})") from None
    problems, graph, error = {}, None, None
    try:
        graph = import_model(path)
    except UnsupportedOperators as e:
        problems = e.problems
    except (ImportError_, ValueError, TypeError) as e:
        error = str(e)
    print(f"{path.name}: {what}, {len(ops)} operators")
    print(f"  {'operator':<44} {'count':>6}  imports")
    for op, n in sorted(ops.items(), key=lambda kv: (-kv[1], kv[0])):
        bad = op in problems or any(op.endswith("." + p) or p.endswith(op) for p in problems)
        print(f"  {op[:44]:<44} {n:>6}  {'NO' if bad else 'yes'}")
    if problems:
        print(f"not importable: {len(problems)} operator(s) unsupported:")
        for op, (count, node, why) in sorted(problems.items(), key=lambda kv: -kv[1][0]):
            print(f"  {op} x{count} (e.g. node {node})" + (f": {why}" if why else ""))
        return 1
    if error is not None:
        print(f"not importable: {error}")
        return 1
    from ..graph.fuse import fuse
    from ..graph.simplify import prepare
    from ..graph.tasks import tasks_of_groups
    from ..tir.analysis import flop_count
    groups = fuse(prepare(graph))
    tasks = tasks_of_groups(groups)
    ins = ", ".join(f"{v.name}: {v.type}" for v in graph.inputs)
    print(f"imports: {len(graph.nodes)} graph operators, {len(groups)} kernels, {len(tasks)} "
          f"distinct tasks; inputs {ins}")
    rows = [(t.task_name, t.weight, flop_count(t.func) * t.weight) for t in tasks]
    total = sum(r[2] for r in rows) or 1.0
    print(f"  {'task':<48} {'weight':>6} {'MFLOP':>9} {'share':>6}")
    for name, weight, flops in rows:
        print(f"  {name[:48]:<48} {weight:>6} {flops / 1e6:>9.1f} {100 * flops / total:>5.1f}%")
    print(f"total {total / 1e6:.3g} MFLOP per inference")
    return 0
