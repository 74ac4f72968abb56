"""Calling a kernel from Python in about a microsecond.

`Module.__call__` hands the tuple of arrays straight to a small C function, `lt_call`, that
reads each array's data pointer, shape, dtype and flags from numpy's object layout, checks
them against the kernel's signature (and written arrays against overlap), and calls the
kernel. Anything it does not accept - a wrong shape, an ndarray subclass, overlapping
buffers - it hands back, and Python checks that call the slow way, with the error messages
people act on. (Getting a pointer in Python, `a.ctypes.data` or `a.__array_interface__`, costs
about a microsecond per array by itself.)

The layout read is the start of CPython's object header and of numpy's PyArrayObject
(data, nd, dimensions, strides, base, descr, flags; the same from numpy 1.7 to 2.x). It is
checked on probe arrays when the library loads; if anything differs (a debug or free-threaded
Python, a future numpy), every call takes the Python path.
"""
from __future__ import annotations

import ctypes
from functools import lru_cache

import numpy as np

from ..tir import dtype as dt
from .compiler import compile_shared

MISMATCH = 0x40000000  # lt_call's answer for "check these arguments in Python"
MAX_ARGS = 64

_SOURCE = r"""
#include <stdint.h>
typedef int32_t (*lt_packed_fn)(void**);

/* Read without Python or numpy headers: the object header, a tuple, an ndarray. */
typedef struct { intptr_t refcnt; void* type; intptr_t size; void* items[]; } lt_tuple;
typedef struct { intptr_t refcnt; void* type; char* data; int nd; intptr_t* dims;
                 intptr_t* strides; void* base; void* descr; int flags; } lt_array;

#define LT_C_CONTIGUOUS 0x0001
#define LT_WRITEABLE 0x0400
#define LT_MISMATCH 0x40000000
#define LT_MAX_ARGS 64

/* spec: [number of arguments, address of numpy.ndarray, then per argument:
          address of its dtype, bytes, written (0/1), ndim, shape...] */
int32_t lt_call(lt_packed_fn fn, const int64_t* spec, const lt_tuple* args) {
  int64_t n = spec[0];
  if (args->size != n || n > LT_MAX_ARGS) return LT_MISMATCH;
  void* ptrs[LT_MAX_ARGS];
  char* end[LT_MAX_ARGS];
  const int64_t* p = spec + 2;
  for (int64_t i = 0; i < n; ++i) {
    const lt_array* a = (const lt_array*)args->items[i];
    if (a->type != (void*)(intptr_t)spec[1] || a->descr != (void*)(intptr_t)p[0])
      return LT_MISMATCH;
    int nd = (int)p[3];
    if (a->nd != nd) return LT_MISMATCH;
    for (int d = 0; d < nd; ++d)
      if (a->dims[d] != p[4 + d]) return LT_MISMATCH;
    int need = LT_C_CONTIGUOUS | (p[2] ? LT_WRITEABLE : 0);
    if ((a->flags & need) != need) return LT_MISMATCH;
    ptrs[i] = a->data;
    end[i] = a->data + p[1];
    p += 4 + nd;
  }
  p = spec + 2;
  for (int64_t i = 0; i < n; p += 4 + p[3], ++i) {
    if (!p[2]) continue;  /* a written array may share no byte with any other argument */
    for (int64_t j = 0; j < n; ++j)
      if (j != i && (char*)ptrs[i] < end[j] && (char*)ptrs[j] < end[i]) return LT_MISMATCH;
  }
  return fn(ptrs);
}

/* What lt_call would read, for the layout check: per item type, data, nd, shape[0], dtype,
   flags. */
void lt_probe(const lt_tuple* args, int64_t* out) {
  out[0] = args->size;
  for (intptr_t i = 0; i < args->size; ++i) {
    const lt_array* a = (const lt_array*)args->items[i];
    int64_t* o = out + 1 + 6 * i;
    o[0] = (int64_t)(intptr_t)a->type;
    o[1] = (int64_t)(intptr_t)a->data;
    o[2] = a->nd;
    o[3] = a->nd > 0 ? a->dims[0] : -1;
    o[4] = (int64_t)(intptr_t)a->descr;
    o[5] = a->flags & (LT_C_CONTIGUOUS | LT_WRITEABLE);
  }
}
"""


def _layout_matches(lib) -> bool:
    base = np.zeros((3, 5), "float32")
    frozen = np.arange(7, dtype="int64")
    frozen.flags.writeable = False
    probes = (base, base[:, 1:], frozen, np.float64(1.0) * np.ones(2))
    out = (ctypes.c_int64 * (1 + 6 * len(probes)))()
    lib.lt_probe(probes, out)
    if out[0] != len(probes):
        return False
    for i, a in enumerate(probes):
        flags = (1 if a.flags.c_contiguous else 0) | (0x400 if a.flags.writeable else 0)
        want = (id(type(a)), a.__array_interface__["data"][0], a.ndim, a.shape[0], id(a.dtype),
                flags)
        if tuple(out[1 + 6 * i: 7 + 6 * i]) != want:
            return False
    return True


@lru_cache(maxsize=1)
def call_lib():
    """The lt_call library, or None when this Python's object layout is not the expected one
    (or it cannot be built): then calls are checked in Python."""
    try:
        lib = ctypes.CDLL(str(compile_shared(_SOURCE, name="lt_call",
                                             flags=("-O2", "-fPIC", "-shared"))))
    except Exception:  # noqa: BLE001 - no compiler here: the Python path still works
        return None
    lib.lt_call.restype = ctypes.c_int32
    lib.lt_call.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.py_object]
    lib.lt_probe.restype = None
    lib.lt_probe.argtypes = [ctypes.py_object, ctypes.c_void_p]
    return lib if _layout_matches(lib) else None


def call_spec(args) -> tuple | None:
    """(the signature lt_call checks for a list of ArgInfo, the dtype objects it points at,
    to be kept alive with it), or None with too many arguments."""
    if len(args) > MAX_ARGS:
        return None
    words, dtypes = [len(args), id(np.ndarray)], []
    for a in args:
        want = np.dtype(dt.numpy_name(a.dtype))
        dtypes.append(want)
        nbytes = int(np.prod(a.shape, dtype=np.int64)) * want.itemsize
        words += [id(want), nbytes, int(a.written), len(a.shape), *map(int, a.shape)]
    return (ctypes.c_int64 * len(words))(*words), tuple(dtypes)
