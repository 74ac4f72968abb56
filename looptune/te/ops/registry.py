"""The operator registry: each named workload knows how to build its tensors, its default
(realistic) shape, a numpy reference and its FLOP count, so tuning and tests share one list."""
from __future__ import annotations

import functools
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable, Mapping

from ...registry import Registry
from ..tensor import TEError


@dataclass(frozen=True)
class OpDef:
    """`build(**params)` returns [inputs..., output] (the create_prim_func arguments);
    `reference(*input_arrays, **params)` returns the output computed with numpy;
    `flops(**params)` counts arithmetic operations (an intrinsic or a comparison counts 1)."""

    name: str
    build: Callable[..., list]
    reference: Callable[..., Any]
    defaults: Mapping[str, Any]
    flops: Callable[..., int]
    doc: str = ""

    def __post_init__(self):
        object.__setattr__(self, "defaults", MappingProxyType(dict(self.defaults)))


OPS = Registry("operator", error=TEError)


def register_op(opdef: OpDef) -> OpDef:
    if opdef.name in OPS:
        raise TEError(f"operator {opdef.name!r} is already registered")
    return OPS.add(opdef.name, opdef)


def get_op(name: str) -> OpDef:
    return OPS.lookup(name)


def workload(name: str, **overrides):
    """(tensors, reference, flops) for operator `name` at its default shape with `overrides`;
    `reference(*input_arrays)` is bound to the same parameters."""
    op = get_op(name)
    unknown = sorted(set(overrides) - set(op.defaults))
    if unknown:
        valid = ", ".join(f"{k}={v!r}" for k, v in op.defaults.items())
        raise TEError(f"workload {name}: unknown parameter(s) {', '.join(unknown)}; "
                      f"the valid ones (with defaults) are {valid}")
    params = {**op.defaults, **overrides}
    return op.build(**params), functools.partial(op.reference, **params), int(op.flops(**params))
