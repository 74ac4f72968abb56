"""torch.compile(model, backend="looptune"): TorchDynamo hands looptune each FX graph it
captures; looptune compiles it and returns the function that runs it.

    model = torch.compile(model, backend="looptune")              # default schedules
    model = torch.compile(model, backend="looptune",
                          options={"work_dir": "tuned/"})         # with tuned records
    with torch.no_grad():
        y = model(x)

Options: "work_dir" or "database" (records to use: a work dir's path or a Database),
"target" (default "cpu"), "num_threads". The backend is registered through the
`torch_dynamo_backends` entry point, so `backend="looptune"` works once looptune is
installed (`looptune_backend` is the same function, to pass directly).

- Inference only: with gradients enabled and a parameter or input that requires them, it
  raises (use torch.no_grad() or torch.inference_mode()).
- Parameters are read when the graph is compiled, as constants (so convolution weights are
  packed once): changing them afterwards needs a new torch.compile.
- Static shapes: a graph with symbolic shapes (dynamo's automatic dynamic shapes, after a
  call at a new shape) runs in PyTorch, with one line saying so; torch.compile(...,
  dynamic=False) recompiles per shape instead.
- An operator looptune cannot translate stays in PyTorch: the graph is cut around it (one
  line per operator), and the parts on either side are compiled by looptune.
"""
from __future__ import annotations

import warnings

import numpy as np

from .common import ImportError_, UnsupportedOperators
from .torch import _decompositions, _torch, from_torch
from .torch_ops import HANDLERS, SKIP

OPTIONS = ("work_dir", "database", "target", "num_threads")
MODULE_STATE = ("._parameters[", "._buffers[")  # in dynamo's names of module attributes


class TorchCompileError(ImportError_):
    """looptune's torch.compile backend cannot serve this graph (training, bad options)."""


def looptune_backend(gm, example_inputs, *, options: dict | None = None):
    """The TorchDynamo backend: returns a callable with gm's signature."""
    torch = _torch()
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise TorchCompileError(f"torch.compile(backend='looptune'): unknown option(s) "
                                f"{', '.join(unknown)}; the options are {', '.join(OPTIONS)}")
    _refuse_training(torch, gm, example_inputs)
    if not all(isinstance(x, torch.Tensor) and not _symbolic(x) for x in example_inputs):
        warnings.warn("looptune: this graph has symbolic shapes (dynamo's dynamic shapes); "
                      "it runs in PyTorch. torch.compile(..., dynamic=False) compiles each "
                      "shape with looptune", stacklevel=2)
        return gm.forward
    frozen, inputs = _freeze(torch, gm, example_inputs)
    with torch.no_grad():
        ep = torch.export.export(frozen, tuple(inputs))
    try:
        graph = from_torch(ep, name=type(gm).__name__)
    except UnsupportedOperators as e:
        return _partitioned(torch, ep, frozen, inputs, options, e)
    run = _compiled_call(torch, graph, frozen, inputs, options)
    keep = frozen.input_positions
    return lambda *args: run(*[args[i] for i in keep])


def _refuse_training(torch, gm, example_inputs) -> None:
    if not torch.is_grad_enabled():
        return
    names = [n.target for n in gm.graph.nodes if n.op == "placeholder"]
    needs = [n for n, p in gm.named_parameters() if p.requires_grad] + \
        [names[i] if i < len(names) else f"input {i}" for i, x in enumerate(example_inputs)
         if isinstance(x, torch.Tensor) and x.requires_grad]
    if needs:
        raise TorchCompileError(
            f"looptune's torch.compile backend serves inference, and this call would need "
            f"gradients ({needs[0]} requires them). Run the model under torch.no_grad() or "
            "torch.inference_mode() (or call model.requires_grad_(False)); for training use "
            "a backend with autograd, such as torch.compile's default 'inductor'")


def _source(node) -> str:
    """Where dynamo took a graph input from: "L['fn']._modules['1']._buffers['running_var']"."""
    source = getattr(node.meta.get("grapharg"), "source", None)
    try:
        return source.name if isinstance(source.name, str) else source.name()
    except Exception:  # noqa: BLE001 - dynamo's internals vary between versions
        return ""


def _symbolic(t) -> bool:
    return any(not isinstance(s, int) for s in t.shape)


def _freeze(torch, gm, example_inputs):
    """A module that holds the graph's inputs that are module state (dynamo passes a
    module's parameters and buffers as inputs) as buffers, so the import sees them as
    constants (batch-norm statistics folded, weights packed); and its other inputs."""
    sources = [_source(n) for n in gm.graph.nodes if n.op == "placeholder"]
    params = {i: x.detach() for i, x in enumerate(example_inputs)
              if isinstance(x, torch.nn.Parameter) or
              (i < len(sources) and any(k in sources[i] for k in MODULE_STATE))}
    keep = [i for i in range(len(example_inputs)) if i not in params]

    class Frozen(torch.nn.Module):
        """The FX graph module with its module-state inputs held as buffers."""

        input_positions = keep

        def __init__(self):
            super().__init__()
            self.gm = gm
            for i, t in params.items():
                self.register_buffer(f"param_{i}", t)

        def forward(self, *xs):
            it = iter(xs)
            return self.gm(*[getattr(self, f"param_{i}") if i in params else next(it)
                             for i in range(len(example_inputs))])

    return Frozen(), [example_inputs[i] for i in keep]


def _compiled_call(torch, graph, module, inputs, options):
    """Compile `graph` (imported from `module` at `inputs`) and return the function that runs
    it on torch tensors, returning what `module` returns (structure, dtypes, shapes)."""
    from ..graph.compile import compile_model
    from ..tune.tune import _database
    from torch.utils import _pytree as pytree
    db = options.get("database") or options.get("work_dir")
    database = None if db is None else _database(None, db)
    compiled = compile_model(graph, database, options.get("target", "cpu"),
                             num_threads=options.get("num_threads"))
    with torch.no_grad():
        ref = module(*inputs)
    flat, spec = pytree.tree_flatten(ref)
    like = [(t.dtype, tuple(t.shape)) for t in flat]
    in_dtypes = [np.dtype(d) for _, _, d in compiled.inputs]
    if len(flat) != len(compiled.outputs) or len(inputs) != len(in_dtypes):
        raise TorchCompileError(f"the compiled graph has {len(compiled.inputs)} inputs and "
                                f"{len(compiled.outputs)} outputs where the FX graph has "
                                f"{len(inputs)} and {len(flat)} (an importer bug)")

    def run(*args):
        arrays = [np.ascontiguousarray(a.detach().cpu().numpy(), dtype=d)
                  for a, d in zip(args, in_dtypes)]
        outs = compiled(*arrays)
        outs = outs if isinstance(outs, tuple) else (outs,)
        tensors = [torch.from_numpy(o).to(dtype).reshape(shape)
                   for o, (dtype, shape) in zip(outs, like)]
        return pytree.tree_unflatten(tensors, spec)

    run.compiled = compiled
    return run


def _supported(node) -> bool:
    key = str(node.target).replace("aten.", "", 1)
    return node.op == "call_function" and (key in HANDLERS or key in SKIP)


def _partitioned(torch, ep, frozen, inputs, options, err: UnsupportedOperators):
    """The graph cut around the operators looptune lacks: those run in PyTorch, each part
    between them is compiled by looptune (or runs in PyTorch too if it cannot be)."""
    from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
    from torch.fx.passes.operator_support import OperatorSupportBase

    for op, (count, _, why) in sorted(err.problems.items()):
        warnings.warn(f"looptune: {op} ({count} node(s)) stays in PyTorch"
                      + (f": {why}" if why else ""), stacklevel=3)

    class Support(OperatorSupportBase):
        """The operators the partitioner may give looptune."""

        def is_node_supported(self, submodules, node) -> bool:
            return _supported(node) and str(node.target) not in err.problems

    gm = ep.run_decompositions(_decompositions(torch)).module()
    parts = CapabilityBasedPartitioner(gm, Support(), allows_single_node_partition=True
                                       ).partition_and_fuse()
    seen = _inputs_of_parts(torch, parts, inputs)
    for name, args in seen.items():
        sub = getattr(parts, name)
        try:
            with torch.no_grad():
                sub_ep = torch.export.export(sub, tuple(args))
            run = _compiled_call(torch, from_torch(sub_ep, name=name), sub, args, options)
        except ImportError_ as e:
            warnings.warn(f"looptune: part {name} stays in PyTorch: "
                          f"{str(e).splitlines()[0]}", stacklevel=3)
            continue
        setattr(parts, name, _Part(torch, run))
    keep = frozen.input_positions
    return lambda *args: parts(*[args[i] for i in keep])


def _inputs_of_parts(torch, parts, inputs) -> dict:
    """Each fused part's arguments when `parts` runs on `inputs`."""
    seen = {}

    class Recorder(torch.fx.Interpreter):
        """Runs `parts` and keeps the first arguments of each fused part."""

        def call_module(self, target, args, kwargs):
            if target.startswith("fused_") and target not in seen:
                seen[target] = [a for a in args]
            return super().call_module(target, args, kwargs)

    with torch.no_grad():
        Recorder(parts).run(*inputs)
    return seen


def _Part(torch, run):
    class Part(torch.nn.Module):
        """A fused part run by looptune's compiled code."""

        def forward(self, *args):
            return run(*args)
    return Part()
