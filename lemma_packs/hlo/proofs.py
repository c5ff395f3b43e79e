"""What the hlo pack's lemmas prove -- and what they must not (the e-graph alone, no G_d program): each case a pair
of terms over the tensors of ``SHAPES`` -- ``A``/``B`` halves of a [4, 6] tensor cut along dim 1, ``C``/``E`` the
halves of a second one, ``X`` whole -- proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas.
tests/test_pack_proofs.py collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

SHAPES = {"A": [4, 3], "B": [4, 3], "C": [4, 3], "E": [4, 3], "X": [4, 6], "W1": [3, 5], "W2": [3, 5],
          "V": [4], "Q1": [2, 3, 2, 4], "Q2": [2, 3, 2, 4], "K1": [2, 3, 2, 4], "K2": [2, 3, 2, 4],
          "S": [4, 6], "T": [4, 6], "U1": [3], "U2": [3],
          "H1": [2, 1, 4, 2], "H2": [2, 2, 4, 2], "M": [2, 4], "N": [3, 3]}
AB, CE = "concat(A, B, dim=1)", "concat(C, E, dim=1)"
K = "hlo.constant(shape=[4, 6], value=0.5, dtype=float32)"
K3 = "hlo.constant(shape=[4, 3], value=0.5, dtype=float32)"
ROWMAX = "hlo.reduce({x}, dims=[1], reducer=max, init=-1000)"
ROWSUM = "hlo.reduce({x}, dims=[1], reducer=sum, init=0)"


def softmax_rows(x: str, rows: int, cols: int) -> str:
    """XLA's softmax along dim 1 of a [rows, cols] tensor: max, subtract, exp, sum, divide."""
    bc = "hlo.broadcast({r}, shape=[%d, %d], dimensions=[0])" % (rows, cols)
    e = f"hlo.exponential(hlo.subtract({x}, {bc.format(r=ROWMAX.format(x=x))}))"
    return f"hlo.divide({e}, {bc.format(r=ROWSUM.format(x=e))})"


PROVES = [
    # elementwise ops over operands cut alike; a splat constant is cut where a concatenation of its shape is
    (f"hlo.tanh({AB})", "concat(hlo.tanh(A), hlo.tanh(B), dim=1)"),
    (f"hlo.divide({AB}, {CE})", "concat(hlo.divide(A, C), hlo.divide(B, E), dim=1)"),
    (f"hlo.multiply({AB}, {K})", f"concat(hlo.multiply(A, {K3}), hlo.multiply(B, {K3}), dim=1)"),
    (f"hlo.multiply({AB}, hlo.broadcast(concat(U1, U2, dim=0), shape=[4, 6], dimensions=[1]))",
     "concat(hlo.multiply(A, hlo.broadcast(U1, shape=[4, 3], dimensions=[1])),"
     " hlo.multiply(B, hlo.broadcast(U2, shape=[4, 3], dimensions=[1])), dim=1)"),
    (f"hlo.maximum({AB}, hlo.broadcast(V, shape=[4, 6], dimensions=[0]))",
     "concat(hlo.maximum(A, hlo.broadcast(V, shape=[4, 3], dimensions=[0])),"
     " hlo.maximum(B, hlo.broadcast(V, shape=[4, 3], dimensions=[0])), dim=1)"),
    # dots: contracting dims cut -> a sum; batch dims cut -> a concatenation (attention scores by heads)
    (f"hlo.dot({AB}, concat(W1, W2, dim=0), lhs_contracting=[1], rhs_contracting=[0])",
     "sum(hlo.dot(A, W1, lhs_contracting=[1], rhs_contracting=[0]), hlo.dot(B, W2, lhs_contracting=[1], rhs_contracting=[0]))"),
    ("hlo.dot(concat(Q1, Q2, dim=2), concat(K1, K2, dim=2), lhs_batch=[0, 2], rhs_batch=[0, 2], lhs_contracting=[3],"
     " rhs_contracting=[3])",
     "concat(hlo.dot(Q1, K1, lhs_batch=[0, 2], rhs_batch=[0, 2], lhs_contracting=[3], rhs_contracting=[3]),"
     " hlo.dot(Q2, K2, lhs_batch=[0, 2], rhs_batch=[0, 2], lhs_contracting=[3], rhs_contracting=[3]), dim=1)"),
    # reductions along the cut dim: the parts' sum / max; along another dim: a concatenation
    (ROWSUM.format(x=AB), f"sum({ROWSUM.format(x='A')}, {ROWSUM.format(x='B')})"),
    (ROWMAX.format(x=AB), f"max({ROWMAX.format(x='A')}, {ROWMAX.format(x='B')})"),
    ("hlo.reduce(concat(A, B, dim=0), dims=[1], reducer=sum, init=0)",
     f"concat({ROWSUM.format(x='A')}, {ROWSUM.format(x='B')}, dim=0)"),
    # softmax along rows, the rows cut: no lemma of its own, the pieces compose
    (softmax_rows("concat(A, B, dim=0)", 8, 3), f"concat({softmax_rows('A', 4, 3)}, {softmax_rows('B', 4, 3)}, dim=0)"),
    # partial sums: through a dot and a row reduction
    ("hlo.dot(sum(S, T), concat(W1, W2, dim=0), lhs_contracting=[1], rhs_contracting=[0])",
     "sum(hlo.dot(S, concat(W1, W2, dim=0), lhs_contracting=[1], rhs_contracting=[0]),"
     " hlo.dot(T, concat(W1, W2, dim=0), lhs_contracting=[1], rhs_contracting=[0]))"),
    (ROWSUM.format(x="sum(S, T)"), f"sum({ROWSUM.format(x='S')}, {ROWSUM.format(x='T')})"),
    # a transpose moving only size-1 dims is a reshape (XLA writes one head per rank's transpose so)
    ("permute(H1, dims=[0, 2, 1, 3])", "reshape(H1, shape=[2, 4, 1, 2])"),
    # a replicated mask broadcast over the heads: with one head per rank each rank's copy inserts a size-1 dim
    # (a reshape to the frontend); the sequential broadcast is the ranks' copies side by side (884, 885)
    ("hlo.broadcast(M, shape=[2, 3, 4], dimensions=[0, 2])",
     "concat(reshape(M, shape=[2, 1, 4]), reshape(M, shape=[2, 1, 4]), reshape(M, shape=[2, 1, 4]), dim=1)"),
    ("hlo.broadcast(M, shape=[2, 4, 1], dimensions=[0, 1])", "reshape(M, shape=[2, 4, 1])"),
]

MUST_NOT_PROVE = [
    # softmax (any normalisation) along the cut dim is not the concatenation of the halves' softmaxes
    (softmax_rows(AB, 4, 6), f"concat({softmax_rows('A', 4, 3)}, {softmax_rows('B', 4, 3)}, dim=1)"),
    # the init value of a sum reduction is counted once, not once per part
    ("hlo.reduce(concat(A, B, dim=1), dims=[1], reducer=sum, init=1)",
     "sum(hlo.reduce(A, dims=[1], reducer=sum, init=1), hlo.reduce(B, dims=[1], reducer=sum, init=1))"),
    # a dot whose contracting dims are cut in different places
    (f"hlo.dot({AB}, concat(W1, W2, dim=0), lhs_contracting=[1], rhs_contracting=[0])",
     "sum(hlo.dot(A, W2, lhs_contracting=[1], rhs_contracting=[0]), hlo.dot(B, W1, lhs_contracting=[1], rhs_contracting=[0]))"),
    # elementwise ops of non-linear kind do not go through partial sums; division does not distribute
    ("hlo.tanh(sum(S, T))", "sum(hlo.tanh(S), hlo.tanh(T))"),
    ("hlo.divide(sum(S, T), X)", "sum(hlo.divide(S, X), hlo.divide(T, X))"),
    # a broadcast along the cut dim of its operand is not constant along it: each part gets its own piece
    (f"hlo.multiply({AB}, hlo.broadcast(concat(U1, U2, dim=0), shape=[4, 6], dimensions=[1]))",
     "concat(hlo.multiply(A, hlo.broadcast(U1, shape=[4, 3], dimensions=[1])),"
     " hlo.multiply(B, hlo.broadcast(U1, shape=[4, 3], dimensions=[1])), dim=1)"),
    # operands cut at different places
    (f"hlo.subtract({AB}, {CE})", "concat(hlo.subtract(A, E), hlo.subtract(B, C), dim=1)"),
    # a transpose that moves data is not a reshape
    ("permute(H2, dims=[0, 2, 1, 3])", "reshape(H2, shape=[2, 4, 2, 2])"),
    # a broadcast whose dimensions transpose its operand is not a reshape, nor made of reshaped copies
    ("hlo.broadcast(N, shape=[3, 1, 3], dimensions=[2, 0])", "reshape(N, shape=[3, 1, 3])"),
    ("hlo.broadcast(N, shape=[3, 2, 3], dimensions=[2, 0])",
     "concat(reshape(N, shape=[3, 1, 3]), reshape(N, shape=[3, 1, 3]), dim=1)"),
    # ... nor is a broadcast repeating the operand along a dim it maps (M's rows, not a new dim)
    ("hlo.broadcast(M, shape=[2, 2, 4], dimensions=[0, 2])", "reshape(concat(M, M, dim=0), shape=[2, 2, 4])"),
]
