"""One Registry class keeps every named thing: instructions, operators, workloads, graph
operators and the tuner's pluggable parts."""
from __future__ import annotations

import pytest

from looptune.graph.ir import GraphError
from looptune.graph.op.base import GRAPH_OPS, get_graph_op
from looptune.registry import Registry
from looptune.schedule import INSTRUCTIONS
from looptune.te import TEError
from looptune.te.ops.registry import OPS, get_op
from looptune.tune.error import TuneError
from looptune.tune.postproc import Postproc
from looptune.tune.task import WORKLOADS


def test_every_registry_is_a_registry_with_its_own_error():
    for reg in (INSTRUCTIONS, OPS, WORKLOADS, GRAPH_OPS, Postproc.registry):
        assert isinstance(reg, Registry)
        assert len(reg) > 0 or reg is WORKLOADS  # workloads are registered by the user
    assert "Split" in INSTRUCTIONS and INSTRUCTIONS["Split"].list_outputs
    with pytest.raises(TEError, match="unknown operator 'nope'; registered: .*matmul"):
        get_op("nope")
    with pytest.raises(GraphError, match="node n1: unknown operator 'nope'; registered: .*relu"):
        get_graph_op("nope", "n1")
    with pytest.raises(TuneError, match="unknown postprocessor 'nope'; registered: .*verify-cpu"):
        Postproc.create("nope")


def test_a_registry_refuses_a_second_thing_under_a_taken_name():
    reg = Registry("widget", error=LookupError, hint=" (see the docs)")

    @reg.register("a")
    class A:
        pass

    assert A.registered_name == "a" and reg.add("a", A) is A  # the same thing again is fine
    with pytest.raises(ValueError, match="widget 'a' is already registered"):
        reg.add("a", object())
    with pytest.raises(LookupError, match=r"unknown widget 'b'; registered: a \(see the docs\)"):
        reg.lookup("b")
    assert isinstance(reg.create("a", A), A) and list(reg) == ["a"]
