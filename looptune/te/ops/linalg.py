"""Linear algebra: matmul (optionally transposed), matmul + add, batch matmul, dense layers.
A reduction always sits in its own stage; bias and activation follow as elementwise stages,
so schedules can tile the reduction and inline or fuse the epilogue."""
from __future__ import annotations

from ... import te
from ._common import check, expect_tensor, shape_str


def matmul(A, B, transpose_a: bool = False, transpose_b: bool = False, name: str = "matmul",
           out_dtype: str | None = None):
    """C[i, j] = sum_k A[i, k] * B[k, j]; A is (K, M) if transpose_a, B is (N, K) if transpose_b.
    `out_dtype`: the products and their sum in that type (int8 operands summed in "int32"),
    each operand cast to it; None: the operands' own."""
    expect_tensor("matmul", "A", A, "MK" if not transpose_a else "KM")
    expect_tensor("matmul", "B", B, "KN" if not transpose_b else "NK")
    M, Ka = A.shape[::-1] if transpose_a else A.shape
    Kb, N = B.shape[::-1] if transpose_b else B.shape
    check(Ka == Kb, f"matmul: A is {shape_str(A.shape)}{' (transposed)' if transpose_a else ''} "
                    f"and B is {shape_str(B.shape)}{' (transposed)' if transpose_b else ''}: "
                    f"the inner dimensions {Ka} and {Kb} must match")
    k = te.reduce_axis(Ka, "k")

    def widen(x): return x if out_dtype is None else x.astype(out_dtype)
    def a(i, kk): return widen(A[kk, i] if transpose_a else A[i, kk])
    def b(kk, j): return widen(B[j, kk] if transpose_b else B[kk, j])

    return te.compute((M, N), lambda i, j: te.sum(a(i, k) * b(k, j), axis=k), name=name,
                      tag="matmul")


def matmul_add(A, B, C, name: str = "matmul_add"):
    """out = A @ B + C, as two stages (the matmul, then an elementwise add)."""
    expect_tensor("matmul_add", "C", C)
    mm = matmul(A, B)
    check(C.shape == mm.shape, f"matmul_add: C is {shape_str(C.shape)} but A @ B is "
                               f"{shape_str(mm.shape)} (A {shape_str(A.shape)}, B "
                               f"{shape_str(B.shape)}); they must have the same shape")
    return te.compute(mm.shape, lambda i, j: mm[i, j] + C[i, j], name=name, tag="elemwise")


def batch_matmul(A, B, name: str = "batch_matmul"):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]; a batch of 1 broadcasts."""
    expect_tensor("batch_matmul", "A", A, "BMK")
    expect_tensor("batch_matmul", "B", B, "BKN")
    (ba, M, Ka), (bb, Kb, N) = A.shape, B.shape
    check(Ka == Kb, f"batch_matmul: A is {shape_str(A.shape)} and B is {shape_str(B.shape)}: "
                    f"the inner dimensions {Ka} and {Kb} must match")
    check(ba == bb or 1 in (ba, bb),
          f"batch_matmul: A is {shape_str(A.shape)} and B is {shape_str(B.shape)}: the batch "
          f"sizes {ba} and {bb} must match (or one of them be 1)")
    k = te.reduce_axis(Ka, "k")

    def body(b, i, j):
        return te.sum(A[b if ba > 1 else 0, i, k] * B[b if bb > 1 else 0, k, j], axis=k)

    return te.compute((max(ba, bb), M, N), body, name=name, tag="batch_matmul")


def dense(X, W, bias=None, relu: bool = False, name: str = "dense"):
    """out = X @ W (+ bias) (then relu), W of shape (in, out). The matmul is one stage; bias and
    relu, when asked for, are one elementwise stage after it."""
    expect_tensor("dense", "X", X, ["batch", "in"])
    expect_tensor("dense", "W", W, ["in", "out"])
    check(X.shape[1] == W.shape[0],
          f"dense: X is {shape_str(X.shape)} and W is {shape_str(W.shape)}: X's features "
          f"{X.shape[1]} must match W's input dimension {W.shape[0]} (W is (in, out))")
    out_features = W.shape[1]
    if bias is not None:
        expect_tensor("dense", "bias", bias)
        check(bias.shape == (out_features,), f"dense: bias is {shape_str(bias.shape)} but must "
                                             f"be ({out_features},), one value per output")
    mm = matmul(X, W, name=name if bias is None and not relu else name + "_matmul")
    if bias is None and not relu:
        return mm

    def epilogue(i, j):
        v = mm[i, j] + bias[j] if bias is not None else mm[i, j]
        return te.max(v, 0) if relu else v

    return te.compute(mm.shape, epilogue, name=name, tag="elemwise")
