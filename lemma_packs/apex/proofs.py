"""What the apex pack's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES``, proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas. tests/test_pack_proofs.py
collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

FWD, BWD = "apex.fused_layer_norm_affine", "apex.fused_layer_norm_affine_bwd"

A = "normalized_shape=[8], eps=0.00001"
SHAPES = {"X0": [2, 3, 8], "X1": [2, 3, 8], "W": [8], "B": [8], "G0": [2, 3, 8], "G1": [2, 3, 8], "M0": [6], "M1": [6],
          "R0": [6], "R1": [6], "H0": [2, 3, 4], "H1": [2, 3, 4], "W0": [4], "W1": [4], "B0": [4], "B1": [4]}


def fwd(k, x, w="W", b="B", attrs=A):
    return f"{FWD}#{k}({x}, {w}, {b}, {attrs})"


def bwd(k, g, m, r, x):
    return f"{BWD}#{k}({g}, {m}, {r}, {x}, W, normalized_shape=[8])"


def cat(a, b, d=0):
    return f"concat({a}, {b}, dim={d})"


SHARDED_BWD = lambda k: bwd(k, cat("G0", "G1"), cat("M0", "M1"), cat("R0", "R1"), cat("X0", "X1"))  # noqa: E731

PROVES = [
    (fwd(0, cat("X0", "X1", 0)), cat(fwd(0, "X0"), fwd(0, "X1"), 0)),  # sequence-sharded rows
    (fwd(0, cat("X0", "X1", 1)), cat(fwd(0, "X0"), fwd(0, "X1"), 1)),  # batch-sharded rows
    (fwd(1, cat("X0", "X1", 0)), cat(fwd(1, "X0"), fwd(1, "X1"), 0)),
    (fwd(2, cat("X0", "X1", 0)), cat(fwd(2, "X0"), fwd(2, "X1"), 0)),
    (SHARDED_BWD(0), cat(bwd(0, "G0", "M0", "R0", "X0"), bwd(0, "G1", "M1", "R1", "X1"))),
    (SHARDED_BWD(1), f"sum({bwd(1, 'G0', 'M0', 'R0', 'X0')}, {bwd(1, 'G1', 'M1', 'R1', 'X1')})"),
    (SHARDED_BWD(2), f"sum({bwd(2, 'G0', 'M0', 'R0', 'X0')}, {bwd(2, 'G1', 'M1', 'R1', 'X1')})"),
]

MUST_NOT_PROVE = [
    # the normalised dim split (each half normalised on its own): a plausible but wrong TP layer norm
    (fwd(0, cat("H0", "H1", 2), cat("W0", "W1"), cat("B0", "B1")),
     cat(fwd(0, "H0", "W0", "B0", "normalized_shape=[4], eps=0.00001"),
         fwd(0, "H1", "W1", "B1", "normalized_shape=[4], eps=0.00001"), 2)),
    # flattened statistics of rows split on dim 1 interleave: they are not the concat of the shards' on dim 0
    (fwd(1, cat("X0", "X1", 1)), cat(fwd(1, "X0"), fwd(1, "X1"), 0)),
    # another eps
    (fwd(0, cat("X0", "X1", 0)), cat(fwd(0, "X0", attrs="normalized_shape=[8], eps=0.001"),
                                     fwd(0, "X1", attrs="normalized_shape=[8], eps=0.001"), 0)),
    # one shard's partial weight gradient is not the gradient (sequence parallelism needs the all-reduce)
    (SHARDED_BWD(1), bwd(1, "G0", "M0", "R0", "X0")),
    # the statistics of the other shard
    (SHARDED_BWD(0), cat(bwd(0, "G0", "M1", "R1", "X0"), bwd(0, "G1", "M0", "R0", "X1"))),
]
