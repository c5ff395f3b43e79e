"""What the onnx-aten bridge's lemmas prove -- and what they must not: each case a pair of terms over the tensors
of ``SHAPES`` (or with its own shapes and dtypes), proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the
loaded lemmas. tests/test_pack_proofs.py collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

SHAPES = {"A": [2, 3], "B": [2, 3], "X": [2, 3, 4], "W": [4, 5], "Q": [2, 2, 3, 4], "K": [2, 2, 4, 3], "K2": [2, 2, 4, 3],
          "U": [1, 3]}
C2 = "onnx.ConstantFill(shape=[], value=2, dtype=float32)"
C3 = "onnx.ConstantFill(shape=[], value=3, dtype=float32)"


PROVES = [
    ("onnx.Sub(A, B)", "aten.sub.Tensor(A, B, alpha=1)"),
    ("onnx.Mul(A, B)", "aten.mul.Tensor(A, B)"),
    ("onnx.Div(A, B)", "aten.div.Tensor(A, B)"),
    ("onnx.Sigmoid(A)", "aten.sigmoid(A)"),
    ("onnx.Softmax(X, axis=2)", "aten._softmax(X, dim=2, half_to_float=false)"),
    ("onnx.MatMul(X, W)", "reshape(aten.mm(reshape(X, shape=[6, 4]), W), shape=[2, 3, 5])"),
    # 2133-2142: constants, RMSNorm's and SiLU's pieces, the attention's batched MatMul
    (f"onnx.Pow(A, {C2})", "aten.pow.Tensor_Scalar(A, exponent=2)"),
    (f"onnx.Mul(A, {C2})", "aten.mul.Scalar(A, other=2)"),
    ("onnx.ReduceMean(X, axes=[2], keepdims=true)", "aten.mean.dim(X, dim=[2], keepdim=true)"),
    ("onnx.Reciprocal(onnx.Sqrt(A))", "aten.rsqrt(A)"),
    ("aten.rsqrt(A)", "onnx.Reciprocal(onnx.Sqrt(A))"),
    ("onnx.Mul(A, onnx.Sigmoid(A))", "aten.silu(A)"),
    ("onnx.MatMul(Q, K)", "batched_matmul(Q, K)"),
    ("onnx.Expand(U, shape=[2, 3])", "aten.expand(U, size=[2, 3], implicit=false)"),
    (f"onnx.Div(A, {C3})", "aten.mul.Scalar(A, other=1/3)"),
    (C2, "aten.scalar_tensor(s=2, dtype=float32)"),
    ("aten.silu(A)", "onnx.Mul(A, onnx.Sigmoid(A))"),
]

# (a dtype per case where it matters)
_MUST_NOT = [
    ("onnx.Sub(A, B)", "aten.sub.Tensor(B, A, alpha=1)", None),
    ("onnx.Sub(A, B)", "aten.sub.Tensor(A, B, alpha=2)", None),
    ("onnx.Div(A, B)", "aten.div.Tensor(A, B)", {"A": "int32", "B": "int32"}),  # ONNX truncates integers
    ("onnx.Softmax(X, axis=2)", "aten._softmax(X, dim=1, half_to_float=false)", None),
    ("onnx.MatMul(X, W)", "reshape(aten.mm(reshape(permute(X, dims=[1, 0, 2]), shape=[6, 4]), W), shape=[2, 3, 5])",
     None),
    (f"onnx.Pow(A, {C2})", "aten.pow.Tensor_Scalar(A, exponent=3)", None),
    (f"onnx.Mul(A, {C2})", "aten.mul.Scalar(A, other=1/2)", None),
    ("onnx.ReduceMean(X, axes=[2], keepdims=true)", "aten.mean.dim(X, dim=[1], keepdim=true)", None),
    ("onnx.Reciprocal(onnx.Sqrt(A))", "aten.rsqrt(B)", None),
    ("onnx.Mul(B, onnx.Sigmoid(A))", "aten.silu(A)", None),
    ("onnx.MatMul(Q, K)", "batched_matmul(Q, K2)", None),
    ("onnx.Expand(U, shape=[2, 3])", "aten.expand(U, size=[3, 3], implicit=false)", None),
    (f"onnx.Div(A, {C3})", "aten.mul.Scalar(A, other=3)", None),
    (C2, "aten.scalar_tensor(s=3, dtype=float32)", None),
    (C2, "aten.scalar_tensor(s=2, dtype=float64)", None),
    ("aten.rsqrt(A)", "onnx.Reciprocal(onnx.Sqrt(B))", None),
    ("aten.silu(A)", "onnx.Mul(A, onnx.Sigmoid(B))", None),
    (f"onnx.Div(A, {C3})", "aten.mul.Scalar(A, other=1/3)", {"A": "int64"}),  # ONNX truncates integers
]
MUST_NOT_PROVE = [(lhs, rhs) if dt is None else (lhs, rhs, SHAPES, dt) for lhs, rhs, dt in _MUST_NOT]
