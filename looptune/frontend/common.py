"""What both importers share: building nodes from framework operators, with numpy-side
constant handling and errors that name the operator and the node."""
from __future__ import annotations

import numpy as np

from ..graph.ir import GraphBuilder, GraphError, Value


class ImportError_(GraphError):
    """An operator or attribute the importer cannot translate."""


class UnsupportedOperators(ImportError_):
    """Every operator of a model the importer cannot translate, found in one pass.

    `problems` maps an operator name to (count, one node's name, why or None)."""

    def __init__(self, framework: str, model: str, problems: dict):
        self.framework = framework
        self.problems = dict(problems)
        total = sum(c for c, _, _ in self.problems.values())
        lines = [f"{model}: {total} node(s) of {len(self.problems)} {framework} operator(s) "
                 "cannot be imported by looptune:"]
        for op, (count, node, why) in sorted(self.problems.items(), key=lambda kv: -kv[1][0]):
            lines.append(f"  {op} x{count} (e.g. node {node})" + (f": {why}" if why else ""))
        lines.append("`looptune inspect MODEL` prints the model's operator coverage; "
                     "unsupported operators can be rewritten in the model or reported.")
        super().__init__("\n".join(lines))


class ProblemCollector:
    """Gathers the unsupported operators of one import, so that one error names them all."""

    def __init__(self):
        self.problems: dict = {}

    def add(self, op: str, node: str, why: str | None = None) -> None:
        count, first, first_why = self.problems.get(op, (0, node, why))
        self.problems[op] = (count + 1, first, first_why)

    def __bool__(self) -> bool:
        return bool(self.problems)

    def raise_if_any(self, framework: str, model: str) -> None:
        if self.problems:
            raise UnsupportedOperators(framework, model, self.problems)


def unsupported(framework: str, op: str, node: str, supported=None) -> ImportError_:
    return ImportError_(f"{framework} operator {op} (node {node}) is not supported by "
                        "looptune's importer")


class Emitter:
    """A GraphBuilder with the helpers translations need."""

    def __init__(self, name: str):
        self.g = GraphBuilder(name)

    def const(self, name: str, data) -> Value:
        return self.g.const(name, np.asarray(data, dtype=np.float32)
                            if np.asarray(data).dtype == np.float64 else data)

    def op(self, op: str, *inputs, name: str | None = None, **attrs) -> Value:
        return self.g.op(op, *inputs, name=name, **attrs)

    def reshape(self, x: Value, shape, name: str | None = None) -> Value:
        shape = tuple(int(s) for s in shape)
        if x.is_const:
            return self.const(x.name, x.data.reshape(shape))
        if x.shape == shape:
            return x
        return self.op("reshape", x, name=name, shape=shape)

    def matmul(self, a: Value, b: Value, name: str, emit=None) -> Value:
        """a @ b with numpy's rules for 1-D, 2-D and batched operands: (..., K) @ (K, N) as one
        2-D matmul, equal leading dimensions as one batch_matmul, a vector as a matrix of one
        row or column (reshapes are free views). `emit` makes the nodes (default: self.op)."""
        emit = emit or self.op
        if len(a.shape) == 1 or len(b.shape) == 1:
            y = self.matmul(self.reshape(a, (1,) + a.shape) if len(a.shape) == 1 else a,
                            self.reshape(b, b.shape + (1,)) if len(b.shape) == 1 else b,
                            name, emit)
            rows = () if len(a.shape) == 1 else y.shape[-2:-1]
            cols = () if len(b.shape) == 1 else y.shape[-1:]
            return self.reshape(y, y.shape[:-2] + rows + cols)
        if len(a.shape) == 2 and len(b.shape) == 2:
            return emit("matmul", a, b, name=name)
        if len(b.shape) == 2:  # (..., K) @ (K, N)
            lead = a.shape[:-1]
            y = emit("matmul", self.reshape(a, (int(np.prod(lead)), a.shape[-1])), b, name=name)
            return self.reshape(y, lead + (b.shape[-1],))
        if a.shape[:-2] != b.shape[:-2]:
            raise ImportError_(f"node {name}: batched matmul of {a.shape} and {b.shape} needs "
                               "equal batch dimensions")
        lead = a.shape[:-2]
        batch = int(np.prod(lead))
        y = emit("batch_matmul", self.reshape(a, (batch,) + a.shape[-2:]),
                 self.reshape(b, (batch,) + b.shape[-2:]), name=name)
        return self.reshape(y, lead + (a.shape[-2], b.shape[-1]))

    def binary(self, op: str, a, b, name: str | None = None) -> Value:
        """a op b where either may be a Python number (never both)."""
        if not isinstance(a, Value):
            return self.op(op, b, name=name, scalar=float(a), reverse=True)
        if not isinstance(b, Value):
            return self.op(op, a, name=name, scalar=float(b))
        return self.op(op, a, b, name=name)

    def channel_affine(self, x: Value, scale, shift, name: str) -> Value:
        """x * scale + shift per channel (axis 1 of NCHW): an inference batch norm. Right
        after a convolution, `fold_conv_affine` moves the scale into its weights."""
        k = x.shape[1]
        shape = (1, k) + (1,) * (len(x.shape) - 2)
        y = self.op("mul", x, self.const(name + "_scale", np.asarray(scale, np.float32)
                                         .reshape(shape)), name=name + "_mul")
        return self.op("add", y, self.const(name + "_shift", np.asarray(shift, np.float32)
                                            .reshape(shape)), name=name)
