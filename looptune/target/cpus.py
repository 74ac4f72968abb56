"""The ISA extensions of the CPUs a target string can name (`llvm -mcpu=skylake-avx512`), in
/proc/cpuinfo's spelling: what code built for such a target may use, as GCC's -march for
that CPU enables them."""
from __future__ import annotations

_SSE = "sse sse2 pni ssse3 sse4_1 sse4_2 popcnt"
_HASWELL = _SSE + " avx avx2 fma f16c bmi1 bmi2 movbe abm aes pclmulqdq"
_BROADWELL = _HASWELL + " adx"
_SKX = _BROADWELL + " avx512f avx512cd avx512bw avx512dq avx512vl"
_CLX = _SKX + " avx512_vnni"
_ICX = _CLX + (" avx512ifma avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq gfni vaes"
               " vpclmulqdq sha_ni")
_SPR = _ICX + " avx512_bf16 avx512_fp16 avx_vnni amx_tile amx_bf16 amx_int8"
_ZEN = _BROADWELL + " sha_ni"
_ZEN3 = _ZEN + " vaes vpclmulqdq"
_ZEN4 = _ZEN3 + (" avx512f avx512cd avx512bw avx512dq avx512vl avx512_vnni avx512ifma"
                 " avx512vbmi avx512_vbmi2 avx512_bitalg avx512_vpopcntdq avx512_bf16 gfni")

X86_CPUS = {name: tuple(sorted(feats.split())) for name, feats in {
    "x86-64": "sse sse2", "x86-64-v2": _SSE, "x86-64-v3": _HASWELL, "x86-64-v4": _SKX,
    "core-avx2": _HASWELL, "haswell": _HASWELL, "broadwell": _BROADWELL, "skylake": _BROADWELL,
    "skylake-avx512": _SKX, "cascadelake": _CLX, "icelake-server": _ICX,
    "icelake-client": _ICX, "sapphirerapids": _SPR,
    "znver1": _ZEN, "znver2": _ZEN, "znver3": _ZEN3, "znver4": _ZEN4,
    "znver5": _ZEN4 + " avx_vnni",
}.items()}

ARM_CPUS = {name: ("asimd", "fp") for name in (
    "generic", "cortex-a53", "cortex-a72", "cortex-a76", "neoverse-n1", "neoverse-v1",
    "neoverse-n2", "apple-m1", "apple-m2")}
