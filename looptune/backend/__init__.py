"""One Backend per target kind: lower -> render -> compile -> load. Every path that builds
code goes through it (see base.py)."""
from .base import Artifact, Backend, Source, args_info, unpack, written_params
from .cpu import CPUBackend
from .cuda import CUDABackend

__all__ = ["Artifact", "Backend", "CPUBackend", "CUDABackend", "Source", "args_info",
           "unpack", "written_params"]
