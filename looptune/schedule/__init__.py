"""Traced schedules: transform a PrimFunc's loops and blocks; every step is recorded."""
from .error import ScheduleError
from .schedule import Checkpoint, Schedule
from .trace import (INSTRUCTIONS, BlockRV, ExprRV, Instruction, InstructionKind, LoopRV, RV,
                    Trace, instruction, register_instruction)

__all__ = ["BlockRV", "Checkpoint", "ExprRV", "INSTRUCTIONS", "Instruction", "InstructionKind",
           "LoopRV", "RV", "Schedule", "ScheduleError", "Trace", "instruction",
           "register_instruction"]
