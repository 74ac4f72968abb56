"""Vectorized float32 exp, sigmoid, tanh, erf and round for GCC vector types of any width.

A vectorized loop whose body calls one of these becomes straight-line vector code instead of
a scalar libm call per element (what softmax, GELU, SiLU and layer_norm epilogues need).
Accuracy over the whole float32 range, measured against float64 references by
tests/test_vector_math.py:

    exp      relative error <= 4e-7 (measured 8e-8: 1 ulp); exact 0 below -103.98 and +inf
             above 88.73 (where float32 overflows)
    sigmoid  absolute error <= 2e-7 (measured 9e-8): 1 / (1 + exp(-x))
    tanh     absolute error <= 3e-7 (measured 7e-8); an odd polynomial below |x| 0.625
             (relative error <= 3e-7 there)
    erf      absolute error <= 4e-7 (measured 3e-7); the Taylor series below |x| 0.5 (relative
             error <= 3e-7 there), Abramowitz-Stegun 7.1.26 above

round (half to even, numpy's) is exact: |x| + 2**23 - 2**23 in the default rounding mode
(as rintf, which scalar code calls), the sign put back (-0.3 rounds to -0.0), |x| >= 2**23,
infinities and NaN as they are. A quantizing kernel's round in a loop of exp (a quantized
sigmoid) kept the whole loop scalar without it.

exp is Cody-Waite range reduction (x = n ln2 + r, |r| <= ln2 / 2) with Cephes' degree-6
polynomial for e^r, scaled by 2^n in two steps so that results down to the denormals and up
to FLT_MAX come out right. NaN inputs give NaN.
"""
from __future__ import annotations

OPS = ("exp", "sigmoid", "tanh", "erf", "round")


def definitions(dtype: str, lanes: int) -> str:
    """C definitions of lt_<op>_<dtype> for a float32 vector type lt_<dtype> (declared
    before) of `lanes` lanes."""
    V, M = f"lt_{dtype}", f"lt_i32x{lanes}_vm"  # the vector type and its lane-mask type
    b = f"lt_bcast_{dtype}"
    return f"""typedef int32_t {M} __attribute__((vector_size({4 * lanes})));
static inline {V} lt_sel_{dtype}({M} m, {V} a, {V} b) {{
  return ({V})((m & ({M})a) | (~m & ({M})b)); }}
static inline {V} lt_exp_{dtype}({V} x) {{
  {V} xc = lt_sel_{dtype}(x > {b}(88.8f), {b}(88.8f), x);
  xc = lt_sel_{dtype}(xc < {b}(-104.0f), {b}(-104.0f), xc);
  {V} t = xc * 1.44269504088896341f;
  {M} n = __builtin_convertvector(t + lt_sel_{dtype}(t >= 0.0f, {b}(0.5f), {b}(-0.5f)), {M});
  {V} fn = __builtin_convertvector(n, {V});
  {V} r = xc - fn * 0.693359375f;
  r = r - fn * -2.12194440e-4f;
  {V} p = {b}(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  {V} y = p * r * r + r + 1.0f;
  {M} h = n >> 1;
  y = y * ({V})((h + 127) << 23) * ({V})((n - h + 127) << 23);
  y = lt_sel_{dtype}(x > 88.7228394f, {b}(__builtin_inff()), y);
  y = lt_sel_{dtype}(x < -103.972084f, {b}(0.0f), y);
  return lt_sel_{dtype}(x != x, x, y); }}
static inline {V} lt_round_{dtype}({V} x) {{
  {V} ax = ({V})(({M})x & 0x7fffffff);
  {V} r = (ax + 8388608.0f) - 8388608.0f;
  r = ({V})(({M})r | (({M})x & (int32_t)0x80000000));
  return lt_sel_{dtype}(ax < 8388608.0f, r, x); }}
static inline {V} lt_sigmoid_{dtype}({V} x) {{
  return 1.0f / (1.0f + lt_exp_{dtype}(-x)); }}
static inline {V} lt_tanh_{dtype}({V} x) {{
  {V} ax = ({V})(({M})x & 0x7fffffff);
  {V} z = x * x;
  {V} p = {b}(-5.70498872745e-3f);
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  {V} small = p * z * x + x;
  {V} big = 1.0f - 2.0f / (lt_exp_{dtype}(2.0f * ax) + 1.0f);
  big = ({V})(({M})big | (({M})x & (int32_t)0x80000000));
  return lt_sel_{dtype}(ax < 0.625f, small, big); }}
static inline {V} lt_erf_{dtype}({V} x) {{
  {V} ax = ({V})(({M})x & 0x7fffffff);
  {V} z = x * x;
  {V} s = {b}(-7.5757575757575758e-4f);
  s = s * z + 4.6296296296296296e-3f;
  s = s * z - 2.3809523809523810e-2f;
  s = s * z + 1.0e-1f;
  s = s * z - 3.3333333333333333e-1f;
  s = s * z + 1.0f;
  {V} small = s * x * 1.1283791670955126f;
  {V} t = 1.0f / (1.0f + 0.3275911f * ax);
  {V} q = {b}(1.061405429f);
  q = q * t - 1.453152027f;
  q = q * t + 1.421413741f;
  q = q * t - 0.284496736f;
  q = q * t + 0.254829592f;
  {V} big = 1.0f - q * t * lt_exp_{dtype}(-z);
  big = ({V})(({M})big | (({M})x & (int32_t)0x80000000));
  return lt_sel_{dtype}(ax < 0.5f, small, big); }}"""
