"""Normalisation layers: ``native_layer_norm_backward`` of rows split along a dim before the normalised ones.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2500-2549 for new ones
NUMBERS = (range(377, 380), range(2500, 2550))


# layer-norm backward over rows split along a non-normalised dim: grad_input concatenates, the weight and
# bias gradients are partial sums (one per shard) -- the reason SP needs an all-reduce of them
_LNB_SHARDED = ("concat(?g1, ?g2, dim=?d), concat(?x1, ?x2, dim=?d), concat(?m1, ?m2, dim=?d), concat(?r1, ?r2, dim=?d),"
                " ?w, ?c, normalized_shape=?n, output_mask=?o")
_LNB_1 = "?g1, ?x1, ?m1, ?r1, ?w, ?c, normalized_shape=?n, output_mask=?o"
_LNB_2 = "?g2, ?x2, ?m2, ?r2, ?w, ?c, normalized_shape=?n, output_mask=?o"
_LNB_COND = ("?d < rank(?x1) - len(?n) and shape(?g1) == shape(?x1) and shape(?g2) == shape(?x2)"
             " and size(?m1, ?d) == size(?x1, ?d) and size(?r1, ?d) == size(?x1, ?d)")
_LNB_EXAMPLE = [{"g1": [2, 3, 4], "x1": [2, 3, 4], "m1": [2, 3, 1], "r1": [2, 3, 1], "g2": [1, 3, 4],
                 "x2": [1, 3, 4], "m2": [1, 3, 1], "r2": [1, 3, 1], "w": [4], "c": [4], "d": 0, "n": [4],
                 "o": [1, 1, 1]}]


LEMMAS = [
    L(377, "layer-norm-backward-input-of-concats",
      f"aten.native_layer_norm_backward#0({_LNB_SHARDED}) => concat(aten.native_layer_norm_backward#0({_LNB_1}),"
      f" aten.native_layer_norm_backward#0({_LNB_2}), dim=?d)", _LNB_COND, examples=_LNB_EXAMPLE),
    L(378, "layer-norm-backward-weight-of-concats",
      f"aten.native_layer_norm_backward#1({_LNB_SHARDED}) => sum(aten.native_layer_norm_backward#1({_LNB_1}),"
      f" aten.native_layer_norm_backward#1({_LNB_2}))", _LNB_COND, examples=_LNB_EXAMPLE),
    L(379, "layer-norm-backward-bias-of-concats",
      f"aten.native_layer_norm_backward#2({_LNB_SHARDED}) => sum(aten.native_layer_norm_backward#2({_LNB_1}),"
      f" aten.native_layer_norm_backward#2({_LNB_2}))", _LNB_COND, examples=_LNB_EXAMPLE),
]
