"""x86 tensor intrinsics: int8 dot products (AVX512-VNNI, AVX-VNNI, plain AVX2) and bf16 dot
products (AVX512-BF16).

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

INT8_DOTS = (VNNI_512, VNNI_256, AVX2)  # best first: what a rule offers for u8 x s8 -> s32
BF16_DOTS = (BF16_512,)
