"""A gradient known only up to a constant factor (lemmas 540-559).

Data parallelism as DDP runs it: every rank's loss is the mean over its own shard, so its gradients are
``world`` times its slice of the sequential ones until the all-reduce averages them. The factor is exact and
rides along: every operator here is linear in the argument that carries it, so ``op(scale(g, f), ...)`` is
``scale(op(g, ...), f)``. The engine keeps such a relation only where nothing clean exists and never in R_o.
"""
from graphguard.ir.lemma import L

NUMBERS = range(540, 560)  # this file's lemma numbers (the plugin loader refuses others)

_LNB = "?x, ?m, ?r, ?w, ?c, normalized_shape=?n, output_mask=?o"
_LNB_EXAMPLE = [{"g": [2, 3, 4], "x": [2, 3, 4], "m": [2, 3, 1], "r": [2, 3, 1], "w": [4], "c": [4], "n": [4],
                 "o": [1, 1, 1], "f": 0.5}]

LEMMAS = [
    L(540, "mse-backward-of-scaled-grad",
      "aten.mse_loss_backward(scale(?g, factor=?f), ?a, ?b, reduction=?r)"
      " => scale(aten.mse_loss_backward(?g, ?a, ?b, reduction=?r), factor=?f)"),
    L(542, "layer-norm-backward-input-of-scaled-grad",
      f"aten.native_layer_norm_backward#0(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#0(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(543, "layer-norm-backward-weight-of-scaled-grad",
      f"aten.native_layer_norm_backward#1(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#1(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(544, "layer-norm-backward-bias-of-scaled-grad",
      f"aten.native_layer_norm_backward#2(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#2(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(552, "neg-of-scale", "aten.neg(scale(?x, factor=?f)) => scale(aten.neg(?x), factor=?f)"),
    # (folded, not pushed inside: scale(x * c, f) is a new class x * c, and where G_d holds y and 2 y, y = (2 y) / 2
    # would grow 4 y, 8 y, ... without end)
    L(553, "mul-scalar-of-scale", "aten.mul.Scalar(scale(?x, factor=?f), other=?c) => scale(?x, factor=?f * ?c)",
      "floating(dtype(?x)) and finite(?c)"),
    # ... and the other nesting (the average of ranks' c x: scale(sum(c x0, c x1), 1/2), c moved out of the sum)
    # a positive factor commutes with a max (an all-reduce max of 2 x taken back by / 2)
    L(555, "max-of-positive-multiples",
      "max(aten.mul.Scalar(?a, other=?c), aten.mul.Scalar(?b, other=?c)) => aten.mul.Scalar(max(?a, ?b), other=?c)",
      "?c > 0 and finite(?c) and floating(dtype(?a))"),
    L(554, "scale-of-mul-scalar", "scale(aten.mul.Scalar(?x, other=?c), factor=?f) => scale(?x, factor=?f * ?c)",
      "floating(dtype(?x)) and finite(?c)"),
]
