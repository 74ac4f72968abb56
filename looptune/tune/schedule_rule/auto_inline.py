"""AutoInline: fold elementwise stages into their consumers (or producers)."""
from __future__ import annotations

from ...schedule import ScheduleError
from .analysis import has_select, is_elementwise
from .base import ScheduleRule


@ScheduleRule.registry.register("auto-inline")
class AutoInline(ScheduleRule):
    """into_consumer: compute_inline elementwise producers that are not outputs.
    into_producer: reverse_compute_inline elementwise consumers into their producer.
    disallow_if_then_else: keep stages with conditions (padding) for compute_at instead, as
    an inlined condition blocks vectorization of the consumer."""

    def __init__(self, into_consumer: bool = True, into_producer: bool = False,
                 disallow_if_then_else: bool = True):
        self.into_consumer = into_consumer
        self.into_producer = into_producer
        self.disallow_if_then_else = disallow_if_then_else

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or not is_elementwise(b):
            return [sch]
        if self.disallow_if_then_else and has_select(b):
            return [sch]
        for on, prim in ((self.into_consumer, sch.compute_inline),
                         (self.into_producer, sch.reverse_compute_inline)):
            if on:
                try:
                    prim(block)
                    return [sch]
                except ScheduleError:
                    pass
        return [sch]
