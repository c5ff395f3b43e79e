"""What the aten-hlo bridge's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES``, an ATen expression and the HLO expression XLA computes it with, proved equal (``PROVES``) or not
(``MUST_NOT_PROVE``) by the loaded lemmas (834-843, 1100-1103; without this pack only the three marked
1220 hold, by that family). tests/test_pack_proofs.py collects every built-in
pack's ``proofs.py``."""
from __future__ import annotations

SHAPES = {"A": [2, 3], "B": [2, 3], "X": [2, 3, 4], "R": [2, 3, 1], "V": [4], "Q": [2, 2, 3, 4], "M": [3, 4],
          "M2": [3, 4], "K": [2, 3, 1, 4, 5]}


def const(shape, value, dtype="float32"):
    return f"hlo.constant(shape={shape}, value={value}, dtype={dtype})"


def sigmoid(x, shape):
    return f"hlo.divide({const(shape, 1)}, hlo.add(hlo.exponential(hlo.negate({x})), {const(shape, 1)}))"


def mean(x, dim, count, kept):  # XLA's mean: the sum over dim, divided by the count
    return (f"hlo.divide(reshape(hlo.reduce({x}, dims=[{dim}], reducer=sum, init=0), shape={kept}), "
            f"{const(kept, count)})")


PROVES = [
    ("aten.pow.Tensor_Scalar(A, exponent=2)", "hlo.multiply(A, A)"),  # 834
    ("aten.rsqrt(A)", "hlo.rsqrt(A)"),  # 835
    ("aten.mul.Tensor(A, B)", "hlo.multiply(A, B)"),  # 836 (family 1220 too)
    ("aten.mul.Tensor(V, X)", "hlo.multiply(hlo.broadcast(V, shape=[2, 3, 4], dimensions=[2]), X)"),  # 837 (and 1220)
    ("aten.mul.Tensor(X, R)",  # 838
     "hlo.multiply(X, hlo.broadcast(reshape(R, shape=[2, 3]), shape=[2, 3, 4], dimensions=[0, 1]))"),
    ("aten.mul.Scalar(A, other=2)", f"hlo.multiply(A, {const([2, 3], 2)})"),  # 839
    ("aten.mean.dim(X, dim=[2], keepdim=true)", mean("X", 2, 4, [2, 3, 1])),  # 841
    ("aten.silu(A)", f"hlo.multiply(A, {sigmoid('A', [2, 3])})"),  # 842
    # 1100
    ("aten.add.Tensor(Q, M, alpha=1)", "hlo.add(Q, hlo.broadcast(M, shape=[2, 2, 3, 4], dimensions=[2, 3]))"),
    # 1101 (and 1220)
    ("aten.mul.Tensor(Q, M)", "hlo.multiply(Q, hlo.broadcast(M, shape=[2, 2, 3, 4], dimensions=[2, 3]))"),
    ("aten.neg(A)", "hlo.negate(A)"),  # 1102
    ("aten.expand(K, size=[2, 3, 2, 4, 5], implicit=false)",  # 1103
     "hlo.broadcast(reshape(K, shape=[2, 3, 4, 5]), shape=[2, 3, 2, 4, 5], dimensions=[0, 1, 3, 4])"),
]

MUST_NOT_PROVE = [
    ("aten.pow.Tensor_Scalar(A, exponent=3)", "hlo.multiply(A, A)"),
    ("aten.rsqrt(A)", "hlo.rsqrt(B)"),
    ("aten.mul.Tensor(A, B)", "hlo.multiply(A, A)"),
    ("aten.mul.Scalar(A, other=2)", f"hlo.multiply(A, {const([2, 3], 3)})"),
    ("aten.mean.dim(X, dim=[2], keepdim=true)", mean("X", 2, 3, [2, 3, 1])),  # divided by the wrong count
    ("aten.silu(A)", f"hlo.multiply(B, {sigmoid('A', [2, 3])})"),
    ("aten.add.Tensor(Q, M2, alpha=1)", "hlo.add(Q, hlo.broadcast(M, shape=[2, 2, 3, 4], dimensions=[2, 3]))"),
    ("aten.neg(A)", "hlo.negate(B)"),
    ("aten.expand(K, size=[2, 3, 2, 4, 5], implicit=false)",  # the unit dim broadcast into the wrong place
     "permute(hlo.broadcast(reshape(K, shape=[2, 3, 4, 5]), shape=[2, 2, 3, 4, 5], dimensions=[0, 2, 3, 4]),"
     " dims=[1, 0, 2, 3, 4])"),
]
