"""A gradient known only up to a constant factor (lemmas 540-559).

Data parallelism as DDP runs it: every rank's loss is the mean over its own shard, so its gradients are
``world`` times its slice of the sequential ones until the all-reduce averages them. The factor is exact and
rides along: every operator here is linear in the argument that carries it, so ``op(scale(g, f), ...)`` is
``scale(op(g, ...), f)``. The engine keeps such a relation only where nothing clean exists and never in R_o.
"""
from graphguard.ir.lemma import L

_LNB = "?x, ?m, ?r, ?w, ?c, normalized_shape=?n, output_mask=?o"
_LNB_EXAMPLE = [{"g": [2, 3, 4], "x": [2, 3, 4], "m": [2, 3, 1], "r": [2, 3, 1], "w": [4], "c": [4], "n": [4],
                 "o": [1, 1, 1], "f": 0.5}]

LEMMAS = [
    L(540, "mse-backward-of-scaled-grad",
      "aten.mse_loss_backward(scale(?g, factor=?f), ?a, ?b, reduction=?r)"
      " => scale(aten.mse_loss_backward(?g, ?a, ?b, reduction=?r), factor=?f)"),
    L(541, "gelu-backward-of-scaled-grad",
      "aten.gelu_backward(scale(?g, factor=?f), ?x, approximate=?a) => scale(aten.gelu_backward(?g, ?x, approximate=?a), factor=?f)"),
    L(542, "layer-norm-backward-input-of-scaled-grad",
      f"aten.native_layer_norm_backward#0(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#0(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(543, "layer-norm-backward-weight-of-scaled-grad",
      f"aten.native_layer_norm_backward#1(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#1(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(544, "layer-norm-backward-bias-of-scaled-grad",
      f"aten.native_layer_norm_backward#2(scale(?g, factor=?f), {_LNB}) => scale(aten.native_layer_norm_backward#2(?g, {_LNB}), factor=?f)",
      examples=_LNB_EXAMPLE),
    L(545, "sum-dims-of-scale",
      "aten.sum.dim_IntList(scale(?x, factor=?f), dim=?d, keepdim=?k, dtype=?t) => scale(aten.sum.dim_IntList(?x, dim=?d, keepdim=?k, dtype=?t), factor=?f)",
      "?t == None or floating(?t)"),
    L(546, "sum-of-scale", "aten.sum(scale(?x, factor=?f), dtype=?t) => scale(aten.sum(?x, dtype=?t), factor=?f)",
      "?t == None or floating(?t)"),
    L(547, "mul-of-scale-left", "aten.mul.Tensor(scale(?a, factor=?f), ?b) => scale(aten.mul.Tensor(?a, ?b), factor=?f)"),
    L(548, "mul-of-scale-right", "aten.mul.Tensor(?a, scale(?b, factor=?f)) => scale(aten.mul.Tensor(?a, ?b), factor=?f)"),
    L(549, "add-of-scales",
      "aten.add.Tensor(scale(?a, factor=?f), scale(?b, factor=?f), alpha=?k) => scale(aten.add.Tensor(?a, ?b, alpha=?k), factor=?f)"),
    L(550, "expand-of-scale",
      "aten.expand(scale(?x, factor=?f), size=?s, implicit=?i) => scale(aten.expand(?x, size=?s, implicit=?i), factor=?f)"),
    L(551, "div-of-scaled-numerator", "aten.div.Tensor(scale(?a, factor=?f), ?b) => scale(aten.div.Tensor(?a, ?b), factor=?f)"),
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
