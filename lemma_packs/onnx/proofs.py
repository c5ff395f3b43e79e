"""What the onnx pack's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES`` (MatMul over concatenated operands 2001-2004, Gemm as MatMul plus C 2010/2011, Add as the clean sum
2012), proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas. tests/test_pack_proofs.py
collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

SHAPES = {"X": [2, 3, 4], "A": [4, 2], "B": [4, 1], "P": [3, 1], "Q": [3, 4], "C": [1, 2], "E": [4, 2],
          "M": [2, 3], "N": [3, 3], "K": [2, 3], "S": [2, 3], "T": [2, 3], "U": [2, 3, 4], "V": [1, 3, 4],
          "W": [2, 4, 2], "Z": [1, 4, 2]}

PROVES = [
    # x @ [A | B]: the product's columns split alike (2001)
    ("onnx.MatMul(X, concat(A, B, dim=1))", "concat(onnx.MatMul(X, A), onnx.MatMul(X, B), dim=2)"),
    # [p | q] @ [C; E]: a partial sum (2003, a row-parallel linear layer)
    ("onnx.MatMul(concat(P, Q, dim=1), concat(C, E, dim=0))", "sum(onnx.MatMul(P, C), onnx.MatMul(Q, E))"),
    # batched products split along a batch dim both operands share (2004)
    ("onnx.MatMul(concat(U, V, dim=0), concat(W, Z, dim=0))",
     "concat(onnx.MatMul(U, W), onnx.MatMul(V, Z), dim=0)"),
    # Gemm is MatMul plus C (2010), with B transposed (2011)
    ("onnx.Gemm(M, N, K, alpha=1, beta=1, transA=0, transB=0)", "onnx.Add(onnx.MatMul(M, N), K)"),
    ("onnx.Gemm(M, N, K, alpha=1, beta=1, transA=0, transB=1)",
     "onnx.Add(onnx.MatMul(M, permute(N, dims=[1, 0])), K)"),
    # Add of same-shaped tensors is the clean sum (2012)
    ("onnx.Add(S, T)", "sum(S, T)"),
]

MUST_NOT_PROVE = [
    # the column blocks in the other order
    ("onnx.MatMul(X, concat(A, B, dim=1))", "concat(onnx.MatMul(X, B), onnx.MatMul(X, A), dim=2)"),
    # a transposed B is not B
    ("onnx.Gemm(M, N, K, alpha=1, beta=1, transA=0, transB=1)", "onnx.Add(onnx.MatMul(M, N), K)"),
    # alpha = 2 scales the product
    ("onnx.Gemm(M, N, K, alpha=2, beta=1, transA=0, transB=0)", "onnx.Add(onnx.MatMul(M, N), K)"),
    # the batch halves paired the other way
    ("onnx.MatMul(concat(U, V, dim=0), concat(W, Z, dim=0))",
     "concat(onnx.MatMul(V, Z), onnx.MatMul(U, W), dim=0)"),
]
