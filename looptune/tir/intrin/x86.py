"""x86 tensor intrinsics: int8 dot products (AVX512-VNNI, AVX-VNNI, plain AVX2) and bf16 dot
products (AVX512-BF16), and AMX's int8 and bf16 tile products (below).

Each computes, per output lane j, C[j] += sum over k of A[k] * B[j, k]: A's group of k values
is broadcast to every lane, B holds the lanes' groups one after another (a weight packed as
[K / group][N][group], pack_layout's layout of an [N][K] weight with factor = group), and C
is a row of the accumulator tile. A is unsigned and B signed, as the instructions take them.
"""
from __future__ import annotations

from ..buffer import Buffer
from ..expr import BufferLoad, cast
from ..stmt import BufferStore
from .base import TensorIntrin, nest, register


def _dot(name, lanes, group, a_dtype, b_dtype, acc_dtype):
    C = Buffer("C", (lanes,), acc_dtype)
    A = Buffer("A", (group,), a_dtype)
    B = Buffer("B", (lanes, group), b_dtype)

    def store(j, k):
        c = BufferLoad(C, (j,), acc_dtype)
        prod = cast(BufferLoad(A, (k,), a_dtype), acc_dtype) * cast(
            BufferLoad(B, (j, k), b_dtype), acc_dtype)
        return BufferStore(C, c + prod, (j,))

    return nest(name, (C, A, B), (("j", lanes), ("k", group)), store)


def _c_dot(name: str, ctype_c: str, ctype_ab: tuple, body: str) -> str:
    a, b = ctype_ab
    return (f"static inline void lt_intrin_{name}({ctype_c}* restrict c, const {a}* restrict a, "
            f"const {b}* restrict b) {{\n{body}\n}}")


VNNI_512 = register(TensorIntrin(
    "x86_dot_u8s8_16x4", _dot("x86_dot_u8s8_16x4", 16, 4, "uint8", "int8", "int32"),
    requires=("avx512_vnni", "avx512f"),
    impl=_c_dot("x86_dot_u8s8_16x4", "int32_t", ("uint8_t", "int8_t"), """\
  int32_t a4; memcpy(&a4, a, 4);
  __m512i acc = _mm512_loadu_si512((const void*)c);
  acc = _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(a4), _mm512_loadu_si512((const void*)b));
  _mm512_storeu_si512((void*)c, acc);"""),
    doc="AVX512-VNNI vpdpbusd: 16 int32 lanes += 4 u8 x s8 products each", macs=64))

VNNI_256 = register(TensorIntrin(
    "x86_dot_u8s8_8x4_avxvnni", _dot("x86_dot_u8s8_8x4_avxvnni", 8, 4, "uint8", "int8", "int32"),
    requires=("avx_vnni",),
    impl=_c_dot("x86_dot_u8s8_8x4_avxvnni", "int32_t", ("uint8_t", "int8_t"), """\
  int32_t a4; memcpy(&a4, a, 4);
  __m256i acc = _mm256_loadu_si256((const __m256i*)c);
  acc = _mm256_dpbusd_avx_epi32(acc, _mm256_set1_epi32(a4), _mm256_loadu_si256((const __m256i*)b));
  _mm256_storeu_si256((__m256i*)c, acc);"""),
    doc="AVX-VNNI vpdpbusd (VEX, 256-bit): 8 int32 lanes += 4 u8 x s8 products each", macs=32))

# Without VNNI: vpmaddubsw would add two u8 x s8 products into int16 with saturation (255 *
# 127 * 2 > 32767), so that path is not exact. Here A's and B's even and odd bytes are
# widened to int16 in place (masks and shifts) and vpmaddwd adds int16 products into int32:
# exact for every input, 6 instructions per 32 products instead of 1.
AVX2 = register(TensorIntrin(
    "x86_dot_u8s8_8x4_avx2", _dot("x86_dot_u8s8_8x4_avx2", 8, 4, "uint8", "int8", "int32"),
    requires=("avx2",),
    impl=_c_dot("x86_dot_u8s8_8x4_avx2", "int32_t", ("uint8_t", "int8_t"), """\
  int32_t a4; memcpy(&a4, a, 4);
  const __m256i av = _mm256_set1_epi32(a4);
  const __m256i bv = _mm256_loadu_si256((const __m256i*)b);
  const __m256i a_even = _mm256_and_si256(av, _mm256_set1_epi16(0x00ff));
  const __m256i a_odd = _mm256_srli_epi16(av, 8);
  const __m256i b_even = _mm256_srai_epi16(_mm256_slli_epi16(bv, 8), 8);
  const __m256i b_odd = _mm256_srai_epi16(bv, 8);
  __m256i acc = _mm256_loadu_si256((const __m256i*)c);
  acc = _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(a_even, b_even),
                                               _mm256_madd_epi16(a_odd, b_odd)));
  _mm256_storeu_si256((__m256i*)c, acc);"""),
    doc="AVX2 (exact): 8 int32 lanes += 4 u8 x s8 products each, through int16 vpmaddwd",
    macs=32))

BF16_512 = register(TensorIntrin(
    "x86_dot_bf16_16x2", _dot("x86_dot_bf16_16x2", 16, 2, "bfloat16", "bfloat16", "float32"),
    requires=("avx512_bf16", "avx512f"),
    impl=_c_dot("x86_dot_bf16_16x2", "float", ("uint16_t", "uint16_t"), """\
  int32_t a2; memcpy(&a2, a, 4);
  __m512 acc = _mm512_loadu_ps(c);
  acc = _mm512_dpbf16_ps(acc, (__m512bh)_mm512_set1_epi32(a2),
                         (__m512bh)_mm512_loadu_si512((const void*)b));
  _mm512_storeu_ps(c, acc);"""),
    doc="AVX512-BF16 vdpbf16ps: 16 float32 lanes += 2 bf16 x bf16 products each", macs=32))



# ---------------------------------------------------------------------------- AMX
# What every AMX kernel shares, once per C file: Linux hands out the tile registers on
# request (arch_prctl ARCH_REQ_XCOMP_PERM, once per process); a kernel configures them (eight
# tiles of 16 rows of 64 bytes) when it starts on a thread and releases them when it ends
# there, counting nested starts (a parallel loop's iteration on the kernel's own thread).
AMX_RUNTIME = """#ifndef LT_AMX_RUNTIME
#define LT_AMX_RUNTIME
#include <sys/syscall.h>
#include <unistd.h>
static _Thread_local int lt_amx_depth = 0;
/* in static data: built on the stack, GCC dropped the stores of rows and columns as dead
   (it does not know that ldtilecfg reads them), and every tile load then faulted */
static const struct { uint8_t palette, start; uint8_t reserved[14]; uint16_t colsb[16];
                      uint8_t rows[16]; } lt_amx_cfg __attribute__((aligned(64))) =
    {1, 0, {0}, {64, 64, 64, 64, 64, 64, 64, 64}, {16, 16, 16, 16, 16, 16, 16, 16}};
static inline void lt_amx_begin(void) {
  static int granted = 0;
  if (lt_amx_depth++ > 0) return;
  if (!granted) { syscall(SYS_arch_prctl, 0x1023, 18); granted = 1; }
  _tile_loadconfig(&lt_amx_cfg);
}
static inline void lt_amx_end(void) { if (--lt_amx_depth == 0) _tile_release(); }
#endif"""


# A call computes a 32 x 32 accumulator tile (four 16 x 16 tiles of the unit) over `nko` steps
# of 64 int8 (32 bf16) along the reduction, holding the four accumulator tiles in tile
# registers throughout: per step two A tiles (16 rows each) and two B tiles (16 groups of the
# reduction each) are loaded and four tile products run. A's rows, B's group rows and C's rows
# may be any distance apart (strides at run time); within a row they are contiguous, B's as
# [j][group] as VNNI's. The tiles are configured around the kernel's calls (AMX_RUNTIME).
def _amx(name, group, a_dtype, b_dtype, acc_dtype, product, ctypes_):
    ksteps = 16  # groups per tile row: 64 bytes of int8, 32 bf16 = 16 groups of 4 or 2
    C = Buffer("C", (32, 32), acc_dtype)
    A = Buffer("A", (32, ksteps * group), a_dtype)
    B = Buffer("B", (ksteps, 32, group), b_dtype)

    def store(i, j, ko, kq, kr):
        c = BufferLoad(C, (i, j), acc_dtype)
        a = cast(BufferLoad(A, (i, ko * (ksteps * group) + kq * group + kr), a_dtype), acc_dtype)
        b = cast(BufferLoad(B, (ko * ksteps + kq, j, kr), b_dtype), acc_dtype)
        return BufferStore(C, c + a * b, (i, j))

    desc = nest(name, (C, A, B), (("i", 32), ("j", 32), ("ko", 1), ("kq", ksteps),
                                  ("kr", group)), store)
    tc, ta, tb = ctypes_
    esize = {"int32_t": 4, "float": 4, "uint8_t": 1, "int8_t": 1, "uint16_t": 2}
    impl = f"""{AMX_RUNTIME}
static inline void lt_intrin_{name}({tc}* restrict c, const {ta}* restrict a,
    const {tb}* restrict b, int64_t ldc, int64_t lda, int64_t ldb, int64_t b_ko, int64_t nko) {{
  const int64_t sc = ldc * {esize[tc]}, sa = lda * {esize[ta]}, sb = ldb * {esize[tb]};
  _tile_loadd(0, c, sc); _tile_loadd(1, c + 16, sc);
  _tile_loadd(2, c + 16 * ldc, sc); _tile_loadd(3, c + 16 * ldc + 16, sc);
  for (int64_t ko = 0; ko < nko; ++ko) {{
    const {ta}* ak = a + ko * {ksteps * group};
    const {tb}* bk = b + ko * b_ko;
    _tile_loadd(4, ak, sa); _tile_loadd(5, ak + 16 * lda, sa);
    _tile_loadd(6, bk, sb); _tile_loadd(7, bk + 16 * {group}, sb);
    {product}(0, 4, 6); {product}(1, 4, 7); {product}(2, 5, 6); {product}(3, 5, 7);
  }}
  _tile_stored(0, c, sc); _tile_stored(1, c + 16, sc);
  _tile_stored(2, c + 16 * ldc, sc); _tile_stored(3, c + 16 * ldc + 16, sc);
}}"""
    # strides at run time: C's and A's rows (loop i), B's group rows (kq) and steps (ko)
    return desc, impl, ((0, 0), (1, 0), (2, 3), (2, 2)), (2,)


def _register_amx(name, group, a_dtype, b_dtype, acc_dtype, product, ctypes_, requires, doc):
    desc, impl, strided, free = _amx(name, group, a_dtype, b_dtype, acc_dtype, product, ctypes_)
    return register(TensorIntrin(name, desc, requires=requires, impl=impl, strided=strided,
                                 free=free, doc=doc, macs=32 * 32 * 16 * group,
                                 begin="lt_amx_begin();", end="lt_amx_end();"))


AMX_INT8 = _register_amx(
    "x86_amx_u8s8_32x32", 4, "uint8", "int8", "int32", "_tile_dpbusd",
    ("int32_t", "uint8_t", "int8_t"), ("amx_tile", "amx_int8"),
    "AMX tdpbusd: a 32 x 32 int32 tile += (32 x 64k u8) x (64k x 32 s8), k steps in the unit")
AMX_BF16 = _register_amx(
    "x86_amx_bf16_32x32", 2, "bfloat16", "bfloat16", "float32", "_tile_dpbf16ps",
    ("float", "uint16_t", "uint16_t"), ("amx_tile", "amx_bf16"),
    "AMX tdpbf16ps: a 32 x 32 float32 tile += (32 x 32k bf16) x (32k x 32 bf16)")

INT8_DOTS = (AMX_INT8, VNNI_512, VNNI_256, AVX2)  # best first: what a rule offers
BF16_DOTS = (AMX_BF16, BF16_512)
