"""Calling a kernel from Python in about a tenth of a microsecond: the arrays are checked in C.

`mod(*arrays)` reads each array's data pointer, shape, dtype and flags in C, from numpy's
object layout, checks them against the kernel's signature (and written arrays against
overlap), and calls the kernel. Anything the C check does not accept - a wrong shape, an
ndarray subclass, overlapping buffers - goes back to Python, which checks that call the slow
way, with the error messages people act on. (Getting a pointer in Python, `a.ctypes.data` or
`a.__array_interface__`, costs about a microsecond per array by itself.)

The C is built on first use with the kernels' compiler, one of two ways:
- a CPython extension (`_EXT_SOURCE`, with Python.h): each Module keeps a `FastCall` (the
  kernel's address and signature), and `Module.__call__` becomes the extension's C method,
  so that no Python frame and no ctypes conversion come between the call and the kernel
  (about 0.1 us for 2 to 4 arrays: benchmarks/call_overhead.py);
- where Python.h is missing or the extension does not build, a plain C function called
  through ctypes (`_CTYPES_SOURCE`, `lt_call`; about 0.6 us, most of it ctypes' own cost).

The layout read is numpy's PyArrayObject after the object header (data, nd, dimensions,
strides, base, descr, flags; the same from numpy 1.7 to 2.x). It is checked on probe arrays
when either library loads; if anything differs (a future numpy; for the ctypes library also a
debug or free-threaded Python), the other way, or else Python, checks every call.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import importlib.util
import sys
import sysconfig
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..tir import dtype as dt
from .compiler import compile_shared

MISMATCH = 0x40000000  # the C check's answer for "check these arguments in Python"
MAX_ARGS = 64
# By default the extension releases the GIL while a kernel runs only if its arrays hold this
# many bytes or more: releasing and taking it back costs about 30 ns, a quarter of a call,
# while such a kernel takes microseconds at least. A kernel on less holds the GIL for what it
# takes, microseconds mostly (as numpy holds it for small ufunc loops); where other threads
# must run whatever a kernel does (a watchdog beside a kernel that may hang), ask for release.
RELEASE_GIL_BYTES = 256 << 10

# What both libraries share: the check, and what it reads (for the layout probe). The
# including source defines lt_object, the object header.
_CHECK = r"""
#include <stdint.h>
typedef int32_t (*lt_packed_fn)(void**);
typedef struct { lt_object head; char* data; int nd; intptr_t* dims; intptr_t* strides;
                 void* base; void* descr; int flags; } lt_array;

#define LT_C_CONTIGUOUS 0x0001
#define LT_WRITEABLE 0x0400
#define LT_MISMATCH 0x40000000
#define LT_MAX_ARGS 64

/* The kernel's arguments from n objects into ptrs, or LT_MISMATCH where they do not fit.
   spec: [number of arguments, address of numpy.ndarray, then per argument:
          address of its dtype, bytes, written (0/1), ndim, shape...] */
static int32_t lt_check(const int64_t* spec, void* const* items, intptr_t n, void** ptrs) {
  if (n != spec[0] || n > LT_MAX_ARGS) return LT_MISMATCH;
  char* end[LT_MAX_ARGS];
  const int64_t* p = spec + 2;
  for (intptr_t i = 0; i < n; ++i) {
    const lt_array* a = (const lt_array*)items[i];
    if ((void*)a->head.ob_type != (void*)(intptr_t)spec[1] ||
        a->descr != (void*)(intptr_t)p[0])
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
  for (intptr_t i = 0; i < n; p += 4 + p[3], ++i) {
    if (!p[2]) continue;  /* a written array may share no byte with any other argument */
    for (intptr_t j = 0; j < n; ++j)
      if (j != i && (char*)ptrs[i] < end[j] && (char*)ptrs[j] < end[i]) return LT_MISMATCH;
  }
  return 0;
}

/* What lt_check reads of one object: type, data, nd, shape[0], dtype, flags. */
static void lt_probe_one(const void* item, int64_t* o) {
  const lt_array* a = (const lt_array*)item;
  o[0] = (int64_t)(intptr_t)a->head.ob_type;
  o[1] = (int64_t)(intptr_t)a->data;
  o[2] = a->nd;
  o[3] = a->nd > 0 ? a->dims[0] : -1;
  o[4] = (int64_t)(intptr_t)a->descr;
  o[5] = a->flags & (LT_C_CONTIGUOUS | LT_WRITEABLE);
}
"""

# Called through ctypes: the object header and a tuple read without Python's headers.
_CTYPES_SOURCE = r"""
#include <stdint.h>
typedef struct { intptr_t ob_refcnt; void* ob_type; } lt_object;
""" + _CHECK + r"""
typedef struct { lt_object head; intptr_t size; void* items[]; } lt_tuple;

int32_t lt_call(lt_packed_fn fn, const int64_t* spec, const lt_tuple* args) {
  void* ptrs[LT_MAX_ARGS];
  int32_t rc = lt_check(spec, args->items, args->size, ptrs);
  return rc ? rc : fn(ptrs);
}

void lt_probe(const lt_tuple* args, int64_t* out) {
  out[0] = args->size;
  for (intptr_t i = 0; i < args->size; ++i) lt_probe_one(args->items[i], out + 1 + 6 * i);
}
"""

EXT_NAME = "lt_fastcall"  # the extension's module name (PyInit_lt_fastcall)

# The extension. FastCall(fn address, spec bytes, objects the spec points at, release_gil)
# is what a Module keeps as `_call`; method(cls) is the C twin of Module._call_in_python, put
# in place as Module.__call__.
_EXT_SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <string.h>
typedef PyObject lt_object;
""" + _CHECK + r"""
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  lt_packed_fn fn;
  int64_t* spec;
  PyObject* keep;  /* numpy.ndarray and the dtypes whose addresses the spec holds */
  char release_gil;  /* while the kernel runs, so that other threads can */
} FastCall;

static PyTypeObject FastCallType;
static PyObject* str_call;

/* 0, the kernel's own status, or LT_MISMATCH (nothing ran). */
static int32_t run(const FastCall* k, PyObject* const* items, Py_ssize_t n) {
  void* ptrs[LT_MAX_ARGS];
  int32_t rc = lt_check(k->spec, (void* const*)items, n, ptrs);
  if (rc) return rc;
  if (!k->release_gil) return k->fn(ptrs);
  Py_BEGIN_ALLOW_THREADS
  rc = k->fn(ptrs);
  Py_END_ALLOW_THREADS
  return rc;
}

/* call(arrays) -> status, as lt_call through ctypes */
static PyObject* fast_call_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                                      PyObject* kwnames) {
  if (PyVectorcall_NARGS(nargsf) != 1 || kwnames || !PyTuple_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError, "FastCall takes one tuple of arrays");
    return NULL;
  }
  PyObject* arrays = args[0];
  return PyLong_FromLong(run((FastCall*)self, ((PyTupleObject*)arrays)->ob_item,
                             PyTuple_GET_SIZE(arrays)));
}

/* A spec lt_check can walk without reading past its end. */
static int spec_is_whole(const int64_t* w, Py_ssize_t len) {
  if (len < 2 || w[0] < 0 || w[0] > LT_MAX_ARGS) return 0;
  Py_ssize_t p = 2;
  for (int64_t i = 0; i < w[0]; ++i) {
    if (p + 4 > len || w[p + 3] < 0) return 0;
    p += 4 + w[p + 3];
  }
  return p == len;
}

static PyObject* fast_call_new(PyTypeObject* type, PyObject* args, PyObject* kwargs) {
  PyObject *fn, *spec, *keep;
  int release_gil;
  if (kwargs && PyDict_GET_SIZE(kwargs)) {
    PyErr_SetString(PyExc_TypeError, "FastCall takes no keyword arguments");
    return NULL;
  }
  if (!PyArg_ParseTuple(args, "OSOp:FastCall", &fn, &spec, &keep, &release_gil)) return NULL;
  void* addr = PyLong_AsVoidPtr(fn);
  if (!addr) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "FastCall: null function");
    return NULL;
  }
  Py_ssize_t nbytes = PyBytes_GET_SIZE(spec);
  if (nbytes % 8 || !spec_is_whole((const int64_t*)PyBytes_AS_STRING(spec), nbytes / 8)) {
    PyErr_SetString(PyExc_ValueError, "FastCall: malformed spec");
    return NULL;
  }
  FastCall* self = (FastCall*)type->tp_alloc(type, 0);
  if (!self) return NULL;
  self->spec = PyMem_Malloc(nbytes);
  if (!self->spec) {
    Py_DECREF(self);
    return PyErr_NoMemory();
  }
  memcpy(self->spec, PyBytes_AS_STRING(spec), nbytes);
  self->fn = (lt_packed_fn)addr;
  self->vectorcall = fast_call_vectorcall;
  self->release_gil = (char)release_gil;
  Py_INCREF(keep);
  self->keep = keep;
  return (PyObject*)self;
}

static void fast_call_dealloc(PyObject* self) {
  FastCall* k = (FastCall*)self;
  PyMem_Free(k->spec);
  Py_XDECREF(k->keep);
  Py_TYPE(self)->tp_free(self);
}

static PyMemberDef fast_call_members[] = {
  {"release_gil", T_BOOL, offsetof(FastCall, release_gil), READONLY, NULL},
  {NULL, 0, 0, 0, NULL}};

static PyTypeObject FastCallType = {
  PyVarObject_HEAD_INIT(NULL, 0)
  .tp_name = "lt_fastcall.FastCall",
  .tp_doc = "call(arrays) -> status: checks the arrays against one kernel's signature and "
            "runs it (0: done; 0x40000000: check them in Python)",
  .tp_basicsize = sizeof(FastCall),
  .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
  .tp_vectorcall_offset = offsetof(FastCall, vectorcall),
  .tp_call = PyVectorcall_Call,
  .tp_new = fast_call_new,
  .tp_dealloc = fast_call_dealloc,
  .tp_members = fast_call_members,
};

/* self._checked_call(arrays, rc): Python checks the arrays (or reports the kernel's failure) */
static PyObject* checked_call(PyObject* self, PyObject* const* args, Py_ssize_t n, long rc) {
  PyObject* arrays = PyTuple_New(n);
  if (!arrays) return NULL;
  for (Py_ssize_t i = 0; i < n; ++i) PyTuple_SET_ITEM(arrays, i, Py_NewRef(args[i]));
  PyObject* out = PyObject_CallMethod(self, "_checked_call", "Ol", arrays, rc);
  Py_DECREF(arrays);
  return out;
}

/* Module.__call__: what Module._call_in_python does, without its frame, for a FastCall;
   ctypes' lt_call, or no fast call, goes to _call_in_python itself. */
static PyObject* module_call(PyObject* self, PyObject* const* args, Py_ssize_t n) {
  PyObject* call = PyObject_GetAttr(self, str_call);
  if (!call) return NULL;
  if (Py_TYPE(call) == &FastCallType) {
    long rc = run((FastCall*)call, args, n);
    Py_DECREF(call);
    return rc ? checked_call(self, args, n, rc) : Py_NewRef(Py_None);
  }
  Py_DECREF(call);
  PyObject* in_python = PyObject_GetAttrString(self, "_call_in_python");
  if (!in_python) return NULL;
  PyObject* out = PyObject_Vectorcall(in_python, args, n, NULL);
  Py_DECREF(in_python);
  return out;
}

static PyMethodDef module_call_def = {
  "__call__", (PyCFunction)(void (*)(void))module_call, METH_FASTCALL,
  "__call__($self, /, *arrays)\n--\n\nRun the kernel on numpy arrays, writing its outputs in "
  "place (checked in C; what C does not accept is checked in Python)."};

/* method(cls): module_call as a method of cls (a method descriptor, like a C type's own) */
static PyObject* method(PyObject* mod, PyObject* cls) {
  if (!PyType_Check(cls)) {
    PyErr_SetString(PyExc_TypeError, "method() takes a class");
    return NULL;
  }
  return PyDescr_NewMethod((PyTypeObject*)cls, &module_call_def);
}

/* probe(tuple) -> [len, then per item what lt_check reads], as lt_probe through ctypes */
static PyObject* probe(PyObject* mod, PyObject* items) {
  if (!PyTuple_Check(items)) {
    PyErr_SetString(PyExc_TypeError, "probe() takes a tuple");
    return NULL;
  }
  Py_ssize_t n = PyTuple_GET_SIZE(items);
  int64_t* words = PyMem_Calloc(1 + 6 * n, sizeof(int64_t));
  if (!words) return PyErr_NoMemory();
  words[0] = n;
  for (Py_ssize_t i = 0; i < n; ++i) lt_probe_one(PyTuple_GET_ITEM(items, i), words + 1 + 6 * i);
  PyObject* out = PyList_New(1 + 6 * n);
  for (Py_ssize_t i = 0; out && i < 1 + 6 * n; ++i) {
    PyObject* w = PyLong_FromLongLong(words[i]);
    if (!w) Py_CLEAR(out);
    else PyList_SET_ITEM(out, i, w);
  }
  PyMem_Free(words);
  return out;
}

static PyMethodDef functions[] = {
  {"method", method, METH_O, "method(cls): the C __call__ for cls"},
  {"probe", probe, METH_O, "probe(tuple): what the check reads of each item"},
  {NULL, NULL, 0, NULL}};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "lt_fastcall", NULL, -1,
                                        functions};

PyMODINIT_FUNC PyInit_lt_fastcall(void) {
  str_call = PyUnicode_InternFromString("_call");
  if (!str_call || PyType_Ready(&FastCallType) < 0) return NULL;
  PyObject* m = PyModule_Create(&module_def);
  if (!m) return NULL;
  Py_INCREF(&FastCallType);
  if (PyModule_AddObject(m, "FastCall", (PyObject*)&FastCallType) < 0) {
    Py_DECREF(&FastCallType);
    Py_DECREF(m);
    return NULL;
  }
  return m;
}
"""


def _layout_matches(probe) -> bool:
    """Whether the C check reads what numpy says, on probe arrays; probe(tuple) -> [count,
    then 6 words per item]."""
    base = np.zeros((3, 5), "float32")
    frozen = np.arange(7, dtype="int64")
    frozen.flags.writeable = False
    probes = (base, base[:, 1:], frozen, np.float64(1.0) * np.ones(2))
    out = probe(probes)
    if out[0] != len(probes):
        return False
    for i, a in enumerate(probes):
        flags = (1 if a.flags.c_contiguous else 0) | (0x400 if a.flags.writeable else 0)
        want = (id(type(a)), a.__array_interface__["data"][0], a.ndim, a.shape[0], id(a.dtype),
                flags)
        if tuple(out[1 + 6 * i: 7 + 6 * i]) != want:
            return False
    return True


def python_includes() -> list[str]:
    """Where this Python's C headers are (Python.h, pyconfig.h)."""
    paths = sysconfig.get_paths()
    return list(dict.fromkeys(p for p in (paths.get("include"), paths.get("platinclude")) if p))


@lru_cache(maxsize=1)
def call_ext():
    """The extension module, or None where it cannot be built here (no Python.h, no
    compiler) or numpy's layout is not the expected one: then call_lib is the fast call."""
    includes = python_includes()
    if not includes or not Path(includes[0], "Python.h").exists():
        return None
    # the Python it is built for belongs in the cache key (its headers' path may not say it)
    source = f"/* CPython {sys.version.split()[0]} {sys.implementation.cache_tag} " \
             f"{sysconfig.get_config_var('EXT_SUFFIX')} */\n" + _EXT_SOURCE
    try:
        path = compile_shared(source, name=EXT_NAME, flags=(
            "-O2", "-fPIC", "-shared", "-fvisibility=hidden", *(f"-I{i}" for i in includes)))
        loader = importlib.machinery.ExtensionFileLoader(EXT_NAME, str(path))
        spec = importlib.util.spec_from_file_location(EXT_NAME, path, loader=loader)
        ext = importlib.util.module_from_spec(spec)
        loader.exec_module(ext)
    except Exception:  # noqa: BLE001 - the ctypes library still works
        return None
    return ext if _layout_matches(ext.probe) else None


@lru_cache(maxsize=1)
def call_lib():
    """The lt_call library for ctypes, or None when this Python's object layout is not the
    expected one (or it cannot be built): then calls are checked in Python."""
    try:
        lib = ctypes.CDLL(str(compile_shared(_CTYPES_SOURCE, name="lt_call",
                                             flags=("-O2", "-fPIC", "-shared"))))
    except Exception:  # noqa: BLE001 - no compiler here: the Python path still works
        return None
    lib.lt_call.restype = ctypes.c_int32
    lib.lt_call.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.py_object]
    lib.lt_probe.restype = None
    lib.lt_probe.argtypes = [ctypes.py_object, ctypes.c_void_p]

    def probe(items):
        out = (ctypes.c_int64 * (1 + 6 * len(items)))()
        lib.lt_probe(items, out)
        return list(out)

    return lib if _layout_matches(probe) else None


def call_spec(args) -> tuple | None:
    """(the words of the signature the C check reads for a list of ArgInfo, the objects whose
    addresses they hold, to be kept alive with them, the arrays' bytes in all), or None with
    too many arguments."""
    if len(args) > MAX_ARGS:
        return None
    words, keep, total = [len(args), id(np.ndarray)], [np.ndarray], 0
    for a in args:
        want = np.dtype(dt.numpy_name(a.dtype))
        keep.append(want)
        nbytes = int(np.prod(a.shape, dtype=np.int64)) * want.itemsize
        words += [id(want), nbytes, int(a.written), len(a.shape), *map(int, a.shape)]
        total += nbytes
    return words, tuple(keep), total


def fast_call(fn_addr: int, args, *, release_gil: bool | None = None):
    """`call(arrays) -> status` for the kernel at fn_addr with arguments `args` (ArgInfo):
    0 when it ran, MISMATCH when the arrays need Python's checks, else the kernel's failure.
    The extension's FastCall, or else ctypes' lt_call (which always releases the GIL);
    None where neither is available. release_gil: while the kernel runs (None: for arrays of
    RELEASE_GIL_BYTES or more)."""
    spec = call_spec(args)
    if spec is None:
        return None
    words, keep, nbytes = spec
    ext = call_ext()
    if ext is not None:
        if release_gil is None:
            release_gil = nbytes >= RELEASE_GIL_BYTES
        return ext.FastCall(fn_addr, np.array(words, np.int64).tobytes(), keep,
                            bool(release_gil))
    lib = call_lib()
    if lib is None:
        return None
    # the partial keeps the spec array, and so the dtypes it holds (keep), alive
    spec_array = (ctypes.c_int64 * len(words))(*words)
    spec_array._keep = keep
    return functools.partial(lib.lt_call, fn_addr, spec_array)


def install_c_method(cls) -> None:
    """Make cls.__call__ the extension's C twin of cls._call_in_python (no Python frame per
    call) where there is an extension, if cls.__call__ is still _call_in_python (a __call__
    put there on purpose, a test's wrapper say, stays)."""
    ext = call_ext()
    if ext is not None and vars(cls).get("__call__") is vars(cls).get("_call_in_python"):
        cls.__call__ = ext.method(cls)
