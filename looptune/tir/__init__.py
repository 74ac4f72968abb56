"""The loop-nest IR: buffers, expressions, loops and blocks, and what analyses them."""
from . import arith, dtype
from .buffer import Buffer
from .expr import (Binary, Broadcast, BufferLoad, Call, Cast, FloatImm, IntImm, Not, PrimExpr,
                   Ramp, Reduce, Select, Var, binary, call, cast, const, convert, select)
from .func import PrimFunc
from .functor import (collect_realizes, collect_vars, find_stmts, find_stmts_with_parents,
                      map_children, replace_buffers, stmt_children, substitute, transform,
                      uses_var, visit)
from .stmt import (Allocate, Block, BlockRealize, BufferRegion, BufferStore, Comment, Evaluate, For,
                   IfThenElse, IterVar, SeqStmt, Stmt, seq)
from .structural import structural_equal, structural_hash

__all__ = [
    "Allocate", "Binary", "Block", "BlockRealize", "Broadcast", "Buffer", "BufferLoad",
    "BufferRegion", "BufferStore", "Call", "Cast", "Comment", "Evaluate", "FloatImm", "For", "IfThenElse",
    "IntImm", "IterVar", "Not", "PrimExpr", "PrimFunc", "Ramp", "Reduce", "Select", "SeqStmt",
    "Stmt", "Var", "arith", "binary", "call", "cast", "collect_realizes", "collect_vars",
    "const", "convert", "dtype", "find_stmts", "find_stmts_with_parents", "map_children",
    "replace_buffers", "select", "seq", "stmt_children", "structural_equal", "structural_hash", "substitute",
    "transform", "uses_var", "visit",
]
