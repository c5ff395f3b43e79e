"""What the core pack's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES``, proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas. tests/test_pack_proofs.py
collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

SHAPES = {"A0": [4, 3], "A1": [4, 5], "B0": [3, 2], "B1": [5, 2], "W": [6, 2], "P": [2, 3], "Q": [3, 3],
          "X": [4, 3], "Y": [4, 3], "X5": [5, 3], "R0": [2, 6], "R1": [2, 6]}

PROVES = [
    ("matmul(concat(A0, A1, dim=1), concat(B0, B1, dim=0))", "sum(matmul(A0, B0), matmul(A1, B1))"),
    ("matmul(concat(R0, R1, dim=0), W)", "concat(matmul(R0, W), matmul(R1, W), dim=0)"),
    ("slice(concat(P, Q, dim=0), dim=0, start=0, end=2)", "P"),
    ("slice(concat(P, Q, dim=0), dim=0, start=2, end=5)", "Q"),
    ("slice(concat(P, Q, dim=0), dim=0, start=3, end=5)", "slice(Q, dim=0, start=1, end=3)"),
    ("concat(slice(X, dim=0, start=0, end=2), slice(X, dim=0, start=2, end=4), dim=0)", "X"),
    ("permute(permute(X, dims=[1, 0]), dims=[1, 0])", "X"),
    ("slice(permute(X, dims=[1, 0]), dim=1, start=0, end=2)", "permute(slice(X, dim=0, start=0, end=2), dims=[1, 0])"),
    ("reshape(reshape(X, shape=[12]), shape=[4, 3])", "X"),
    ("sub(concat(R0, R1, dim=0), concat(R1, R0, dim=0))", "concat(sub(R0, R1), sub(R1, R0), dim=0)"),
    ("add(X, Y)", "sum(X, Y)"),
    ("identity(X)", "X"),
    ("concat(P, concat(Q, P, dim=0), dim=0)", "concat(concat(P, Q, dim=0), P, dim=0)"),
    # a constant factor moves out of data movement and matmuls, and combines (140-148)
    ("concat(scale(R0, factor=1/2), scale(R1, factor=1/2), dim=0)", "scale(concat(R0, R1, dim=0), factor=1/2)"),
    ("sum(scale(X, factor=1/4), scale(Y, factor=1/4))", "scale(sum(X, Y), factor=1/4)"),
    ("scale(scale(X, factor=2), factor=1/2)", "X"),
    ("matmul(scale(R0, factor=1/2), W)", "scale(matmul(R0, W), factor=1/2)"),
    ("permute(scale(X, factor=3), dims=[1, 0])", "scale(permute(X, dims=[1, 0]), factor=3)"),
]

MUST_NOT_PROVE = [
    # swapped shards: same shapes, different values
    ("matmul(concat(R0, R1, dim=0), W)", "concat(matmul(R1, W), matmul(R0, W), dim=0)"),
    # a partial range is not the whole tensor
    ("concat(slice(X5, dim=0, start=0, end=2), slice(X5, dim=0, start=2, end=4), dim=0)", "slice(X5, dim=0, start=1, end=5)"),
    # off by one
    ("slice(concat(P, Q, dim=0), dim=0, start=1, end=3)", "P"),
    # mismatched pairing of elementwise operands
    ("sub(concat(R0, R1, dim=0), concat(R1, R0, dim=0))", "concat(sub(R1, R0), sub(R0, R1), dim=0)"),
    # a sum is not one of its operands; sum is not concat
    ("sum(X, Y)", "X"),
    ("permute(X, dims=[1, 0])", "reshape(X, shape=[3, 4])"),
    ("matmul(concat(A0, A1, dim=1), concat(B0, B1, dim=0))", "matmul(A0, B0)"),
    # factors: different ones never combine, none disappears, and a nonlinear op keeps its own
    ("sum(scale(X, factor=1/2), scale(Y, factor=1/4))", "scale(sum(X, Y), factor=1/2)"),
    ("concat(scale(R0, factor=1/2), R1, dim=0)", "scale(concat(R0, R1, dim=0), factor=1/2)"),
    ("scale(X, factor=1/2)", "X"),
    ("scale(scale(X, factor=2), factor=2)", "X"),
    ("exp(scale(X, factor=2))", "scale(exp(X), factor=2)"),
]
