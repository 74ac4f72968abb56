"""Testing tools that ship with looptune: random workloads and random schedules for
differential testing, and the schedule fuzzer (`python -m looptune.testing.fuzz`)."""
from .schedgen import block_names, fuzz_schedule, random_block_schedule, random_schedule

__all__ = ["block_names", "fuzz_schedule", "random_block_schedule", "random_schedule"]
