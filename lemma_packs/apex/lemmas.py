"""Lemmas of the apex pack. References: 6xx.

Rows split along a dim before ``normalized_shape`` are normalised independently: the output concatenates
along that dim. The statistics are flattened to one value per row in row-major order, so they concatenate
(on dim 0) when the rows are split on dim 0 -- the sequence dim of Megatron's [seq, batch, hidden]
activations. In the backward, the input gradient concatenates and the weight and bias gradients are sums
of per-shard partials: under sequence parallelism they must be all-reduced.
"""
import math

from graphguard.ir.lemma import L

NUMBERS = range(600, 700)  # this file's lemma numbers (the plugin loader refuses others)

FWD, BWD = "apex.fused_layer_norm_affine", "apex.fused_layer_norm_affine_bwd"
_WB = "?w, ?c, normalized_shape=?n, eps=?e"


def _fwd_seed(a, b, d, n):  # fuzzer seeds: shards a, b on dim d, normalized_shape n
    return {"a": a, "b": b, "d": d, "n": n, "w": n, "c": n, "e": "1/100000"}


_ROW_SEEDS = [_fwd_seed([2, 3, 4], [1, 3, 4], 0, [4]), _fwd_seed([3, 2, 4], [1, 2, 4], 0, [2, 4]),
              _fwd_seed([2, 5], [3, 5], 0, [5]), _fwd_seed([1, 2, 2, 3], [2, 2, 2, 3], 0, [3]),
              _fwd_seed([4, 1, 2], [4, 1, 2], 0, [1, 2])]
_FWD_SEEDS = _ROW_SEEDS + [_fwd_seed([2, 3, 4], [2, 2, 4], 1, [4]), _fwd_seed([2, 1, 3, 4], [2, 2, 3, 4], 1, [3, 4])]

FORWARD = [
    L(601, "fused-layer-norm-of-concat", f"{FWD}#0(concat(?a, ?b, dim=?d), {_WB})"
      f" => concat({FWD}#0(?a, {_WB}), {FWD}#0(?b, {_WB}), dim=?d)", "?d < rank(?a) - len(?n)", examples=_FWD_SEEDS),
    L(602, "fused-layer-norm-mean-of-row-concat", f"{FWD}#1(concat(?a, ?b, dim=0), {_WB})"
      f" => concat({FWD}#1(?a, {_WB}), {FWD}#1(?b, {_WB}), dim=0)", "rank(?a) > len(?n)", examples=_ROW_SEEDS),
    L(603, "fused-layer-norm-invvar-of-row-concat", f"{FWD}#2(concat(?a, ?b, dim=0), {_WB})"
      f" => concat({FWD}#2(?a, {_WB}), {FWD}#2(?b, {_WB}), dim=0)", "rank(?a) > len(?n)", examples=_ROW_SEEDS),
]

# (grad_output, mean, invvar, input) split into the same rows on dim 0; the weight is whole
_SHARDED = "concat(?g1, ?g2, dim=0), concat(?m1, ?m2, dim=0), concat(?r1, ?r2, dim=0), concat(?x1, ?x2, dim=0), ?w, normalized_shape=?n"
_PART1, _PART2 = "?g1, ?m1, ?r1, ?x1, ?w, normalized_shape=?n", "?g2, ?m2, ?r2, ?x2, ?w, normalized_shape=?n"
_ROWS = ("rank(?x1) > len(?n) and shape(?g1) == shape(?x1) and size(?m1, 0) == size(?r1, 0)"
         " and size(?m1, 0) * numel(?w) == numel(?x1)")


def _bwd_seed(x1, x2, n):  # shards x1, x2 on dim 0 (with their grad_output and statistics), normalized_shape n
    r1, r2 = math.prod(x1[:len(x1) - len(n)]), math.prod(x2[:len(x2) - len(n)])
    return {"g1": x1, "x1": x1, "m1": [r1], "r1": [r1], "g2": x2, "x2": x2, "m2": [r2], "r2": [r2], "w": n, "n": n}


_BWD_SEEDS = [_bwd_seed([2, 3, 4], [1, 3, 4], [4]), _bwd_seed([3, 2, 4], [1, 2, 4], [2, 4]), _bwd_seed([2, 5], [3, 5], [5]),
              _bwd_seed([1, 2, 2, 3], [2, 2, 2, 3], [3]), _bwd_seed([4, 1, 2], [4, 1, 2], [1, 2])]

BACKWARD = [
    L(604, "fused-layer-norm-backward-input-of-row-concats",
      f"{BWD}#0({_SHARDED}) => concat({BWD}#0({_PART1}), {BWD}#0({_PART2}), dim=0)", _ROWS, examples=_BWD_SEEDS),
    L(605, "fused-layer-norm-backward-weight-of-row-concats",
      f"{BWD}#1({_SHARDED}) => sum({BWD}#1({_PART1}), {BWD}#1({_PART2}))", _ROWS, examples=_BWD_SEEDS),
    L(606, "fused-layer-norm-backward-bias-of-row-concats",
      f"{BWD}#2({_SHARDED}) => sum({BWD}#2({_PART1}), {BWD}#2({_PART2}))", _ROWS, examples=_BWD_SEEDS),
]

LEMMAS = FORWARD + BACKWARD
