"""Data types as strings: "float32", "int32", "bool", and vector forms such as "float32x8"."""
from __future__ import annotations

from functools import lru_cache

# element type -> (kind, bits, C type, numpy name)
_ELEMENTS = {
    "bool": ("bool", 8, "bool", "bool"),
    "int8": ("int", 8, "int8_t", "int8"),
    "int16": ("int", 16, "int16_t", "int16"),
    "int32": ("int", 32, "int32_t", "int32"),
    "int64": ("int", 64, "int64_t", "int64"),
    "uint8": ("uint", 8, "uint8_t", "uint8"),
    "float16": ("float", 16, "_Float16", "float16"),
    # C: the bits (GCC's C before 13 has no __bf16; codegen/c.py computes in float32);
    # numpy: ml_dtypes.bfloat16 (numpy_name)
    "bfloat16": ("float", 16, "uint16_t", "bfloat16"),
    "float32": ("float", 32, "float", "float32"),
    "float64": ("float", 64, "double", "float64"),
}
_RANK = {"bool": 0, "uint": 1, "int": 2, "float": 3}


class DTypeError(TypeError):
    """An unknown or unsupported data type."""


@lru_cache(maxsize=None)
def parse(dtype: str) -> tuple[str, int]:
    """'float32x8' -> ('float32', 8); raises DTypeError naming the supported types."""
    if not isinstance(dtype, str):
        raise DTypeError(f"dtype must be a string such as 'float32', got {dtype!r}")
    base, lanes = dtype, 1
    if "x" in dtype:
        base, _, n = dtype.partition("x")
        if not n.isdigit() or int(n) < 1:
            raise DTypeError(f"bad vector dtype {dtype!r}; write e.g. 'float32x8'")
        lanes = int(n)
    if base not in _ELEMENTS:
        raise DTypeError(f"unknown dtype {dtype!r}; supported: {', '.join(_ELEMENTS)}")
    return base, lanes


def check(dtype) -> str:
    """Normalise a dtype given as a string or numpy dtype; raise DTypeError if unknown."""
    if not isinstance(dtype, str):
        name = getattr(dtype, "name", None) or getattr(dtype, "__name__", None)
        dtype = {"float": "float32", "int": "int32"}.get(name, name)
    parse(dtype)
    return dtype


def element(dtype: str) -> str:
    return parse(dtype)[0]


def lanes(dtype: str) -> int:
    return parse(dtype)[1]


def with_lanes(dtype: str, n: int) -> str:
    base = element(dtype)
    return base if n == 1 else f"{base}x{n}"


def kind(dtype: str) -> str:
    return _ELEMENTS[element(dtype)][0]


def bits(dtype: str) -> int:
    return _ELEMENTS[element(dtype)][1]


def is_float(dtype: str) -> bool:
    return kind(dtype) == "float"


def is_int(dtype: str) -> bool:
    return kind(dtype) in ("int", "uint")


def is_bool(dtype: str) -> bool:
    return kind(dtype) == "bool"


def c_type(dtype: str) -> str:
    return _ELEMENTS[element(dtype)][2]


def numpy_name(dtype: str) -> str:
    """numpy's name of the element type; `np.dtype(numpy_name(d))` is the array dtype.
    numpy has no bfloat16: ml_dtypes (pip install ml_dtypes, part of looptune[cuda])
    registers it, and is imported here when needed."""
    e = element(dtype)
    if e == "bfloat16":
        _ml_dtypes()
    return _ELEMENTS[e][3]


def numpy_dtype(dtype: str):
    """The numpy dtype of arrays of `dtype`'s elements."""
    import numpy as np
    return np.dtype(numpy_name(dtype))


def _ml_dtypes():
    try:
        import ml_dtypes
    except ImportError:
        raise DTypeError("bfloat16 arrays need the ml_dtypes package (numpy has no bfloat16): "
                         "pip install ml_dtypes, or pip install 'looptune[cuda]'") from None
    return ml_dtypes


def nbytes(dtype: str) -> int:
    return max(1, bits(dtype) // 8) * lanes(dtype)


@lru_cache(maxsize=None)
def promote(a: str, b: str) -> str:
    """The dtype of a binary arithmetic result: float beats int, wider beats narrower."""
    if a == b:
        return a
    (ea, la), (eb, lb) = parse(a), parse(b)
    if la != lb and la != 1 and lb != 1:
        raise DTypeError(f"cannot combine vectors of {la} and {lb} lanes ({a}, {b})")
    n = max(la, lb)
    ka, kb = _RANK[kind(ea)], _RANK[kind(eb)]
    if {ea, eb} == {"float16", "bfloat16"}:  # neither holds the other: as torch does
        e = "float32"
    elif ka != kb:
        e = ea if ka > kb else eb
    else:
        e = ea if bits(ea) >= bits(eb) else eb
    return with_lanes(e, n)
