"""RandomComputeLocation: let the search choose where a producer is computed - at one of its
consumers' loops, where it is, or inlined - through sample_compute_location."""
from __future__ import annotations

from ...schedule import ScheduleError
from .base import ScheduleRule
from .multi_level_tiling import TILED


@ScheduleRule.registry.register("random-compute-location")
class RandomComputeLocation(ScheduleRule):
    """For a producer that is not an output and not tiled by MultiLevelTiling: compute it at a
    sampled location (sample_compute_location), so the search and MutateComputeLocation decide."""

    def apply(self, sch, block) -> list:
        b = sch.get(block)
        if b.name == "root" or any(w.buffer in sch.func.params for w in b.writes):
            return [sch]
        if b.annotation(TILED) is not None:  # placed by multi-level tiling already
            return [sch]
        if not sch.get_consumers(block):
            return [sch]
        try:
            loc = sch.sample_compute_location(block)
            sch.compute_at(block, loc)
        except ScheduleError:
            pass
        return [sch]
