"""A tiny C library for honest timing: run a packed kernel `number` times between two
clock_gettime calls, and flush the caches by streaming through a large buffer."""
from __future__ import annotations

import ctypes
import math
from functools import lru_cache

from .compiler import compile_shared

_SOURCE = r"""
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
typedef int32_t (*lt_packed_fn)(void**);

double lt_time_packed(lt_packed_fn fn, void** args, int32_t number, int32_t* status) {
  struct timespec t0, t1;
  *status = 0;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int32_t i = 0; i < number; ++i) {
    int32_t rc = fn(args);
    if (rc != 0) { *status = rc; return -1.0; }
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
}

static volatile char* lt_flush_buf = 0;
static size_t lt_flush_size = 0;

void lt_flush_cache(size_t bytes) {
  if (lt_flush_size < bytes) {
    free((void*)lt_flush_buf);
    lt_flush_buf = (volatile char*)malloc(bytes);
    lt_flush_size = lt_flush_buf ? bytes : 0;
  }
  for (size_t i = 0; i < lt_flush_size; i += 64) lt_flush_buf[i] += 1;
}
"""


@lru_cache(maxsize=1)
def timer_lib():
    path = compile_shared(_SOURCE, name="lt_timer", flags=("-O2", "-fPIC", "-shared"))
    lib = ctypes.CDLL(str(path))
    lib.lt_time_packed.restype = ctypes.c_double
    lib.lt_time_packed.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                                   ctypes.POINTER(ctypes.c_int32)]
    lib.lt_flush_cache.restype = None
    lib.lt_flush_cache.argtypes = [ctypes.c_size_t]
    return lib


def calibrate(timed, number: int, min_repeat_ms: float) -> tuple[int, float | None]:
    """(calls per repeat, seconds of the last calibration run): `number` grown until one
    repeat of `timed(n)` (seconds for n calls) lasts at least `min_repeat_ms`; None when no
    calibration was asked for. The last calibration run is itself a full repeat."""
    n, t = number, None
    if min_repeat_ms > 0:
        while True:
            t = timed(n)
            if t * 1e3 >= min_repeat_ms:
                break
            scale = min_repeat_ms / max(t * 1e3, 1e-3)
            n = max(n + 1, min(int(math.ceil(n * scale * 1.1)), n * 100))
    return n, t
