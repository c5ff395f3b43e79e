"""Lemmas of the ONNX pack. References: 2000-2099.

What the ops' declared properties (ops.py) do not state: MatMul over concats of its operands (NumPy matmul:
a matrix operand broadcast over the other's batch dims), Gemm as MatMul plus a broadcast C, Add of same-shaped
tensors as the clean sum. Elementwise ops over concats (with broadcasting), Softmax and LayerNormalization
along an unnormalised dim, reductions of concats, partial sums through MatMul/Add/ReduceSum are the engine's
lemma families (engine/families.py, 12xx).
"""
from graphguard.ir.lemma import L

NUMBERS = range(2000, 2100)  # this file's lemma numbers (the plugin loader refuses others)

MATMUL = [
    # x @ [A | B] (B a matrix, x of any rank >= 2): the columns of the product split the same way
    L(2001, "onnx-matmul-cols",
      "onnx.MatMul(?x, concat(?a, ?b, dim=?d)) => concat(onnx.MatMul(?x, ?a), onnx.MatMul(?x, ?b), dim=rank(?x) - 1)",
      "rank(?a) == 2 and ?d == 1 and rank(?x) >= 2",
      examples=[{"x": [2, 3, 4], "a": [4, 2], "b": [4, 1], "d": 1}, {"x": [3, 4], "a": [4, 1], "b": [4, 3], "d": 1}]),
    # [x; y] @ W along a row or batch dim of the left operand (W a matrix): constrained, as core 202
    L(2002, "onnx-matmul-rows",
      "onnx.MatMul(concat(?a, ?b, dim=?d), ?w) => concat(onnx.MatMul(?a, ?w), onnx.MatMul(?b, ?w), dim=?d)",
      "rank(?w) == 2 and rank(?a) >= 2 and ?d < rank(?a) - 1", when="onnx.MatMul(?b, ?w)",
      examples=[{"a": [2, 3, 4], "b": [1, 3, 4], "w": [4, 2], "d": 0}, {"a": [2, 3, 4], "b": [2, 1, 4], "w": [4, 2], "d": 1}]),
    # [x | y] @ [A; B]: the contraction splits into a partial sum (row-parallel linear layers)
    L(2003, "onnx-matmul-block-k",
      "onnx.MatMul(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=0)) => sum(onnx.MatMul(?a, ?c), onnx.MatMul(?b, ?e))",
      "rank(?c) == 2 and rank(?a) >= 2 and ?d == rank(?a) - 1 and size(?a, ?d) == size(?c, 0)",
      examples=[{"a": [2, 3, 2], "b": [2, 3, 1], "c": [2, 4], "e": [1, 4], "d": 2},
                {"a": [3, 1], "b": [3, 4], "c": [1, 2], "e": [4, 2], "d": 1}]),
    # batched products split along a batch dim both operands share (attention heads)
    L(2004, "onnx-matmul-batch",
      "onnx.MatMul(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(onnx.MatMul(?a, ?c), onnx.MatMul(?b, ?e), dim=?d)",
      "rank(?a) == rank(?c) and ?d < rank(?a) - 2 and size(?a, ?d) == size(?c, ?d) and size(?b, ?d) == size(?e, ?d)",
      examples=[{"a": [2, 3, 4], "b": [1, 3, 4], "c": [2, 4, 2], "e": [1, 4, 2], "d": 0},
                {"a": [1, 2, 3, 4], "b": [1, 1, 3, 4], "c": [1, 2, 4, 5], "e": [1, 1, 4, 5], "d": 1}]),
]

BRIDGES = [
    L(2010, "onnx-gemm-is-matmul-plus-c",
      "onnx.Gemm(?a, ?b, ?c, alpha=1, beta=1, transA=0, transB=0) => onnx.Add(onnx.MatMul(?a, ?b), ?c)"),
    L(2011, "onnx-gemm-transposed-b",
      "onnx.Gemm(?a, ?b, ?c, alpha=1, beta=1, transA=0, transB=1)"
      " => onnx.Add(onnx.MatMul(?a, permute(?b, dims=[1, 0])), ?c)"),
    L(2012, "onnx-add-is-sum", "onnx.Add(?a, ?b) => sum(?a, ?b)", "shape(?a) == shape(?b)"),
]

LEMMAS = MATMUL + BRIDGES
