"""Schedule rules: how a design space is made from a workload."""
from .add_rfactor import AddRFactor
from .auto_bind import AutoBind
from .auto_inline import AutoInline
from .base import ScheduleRule
from .cross_thread_reduction import CrossThreadReduction
from .multi_level_tiling import MultiLevelTiling
from .multi_level_tiling_intrin import MultiLevelTilingWithIntrin
from .parallel_vectorize_unroll import ParallelizeVectorizeUnroll
from .random_compute_location import RandomComputeLocation

__all__ = ["AddRFactor", "AutoBind", "AutoInline", "CrossThreadReduction", "MultiLevelTiling",
           "MultiLevelTilingWithIntrin", "ParallelizeVectorizeUnroll", "RandomComputeLocation", "ScheduleRule"]
