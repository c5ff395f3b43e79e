"""Scalar factors: constants folded into products, factors moved through sums and ops, ``mul.Scalar`` as
``scale`` -- and a gradient known only up to a constant factor (data parallelism as DDP runs it: ``scale(g, f)``
through the backward ops).

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import KEPT_UNGUARDED, L

# the numbers its lemmas have, then 2650-2699 for new ones
NUMBERS = (range(400, 406), range(409, 410), range(490, 491), range(530, 531), range(540, 550), range(551, 552),
           range(552, 556), range(1303, 1304), range(1320, 1321), range(1322, 1323), range(1850, 1851), range(2650, 2700))


# Scalar constants: every multiplication or division by a constant becomes ``mul.Scalar`` (where the 0-dim tensor
# holds the constant exactly: a float one, or an integral constant in a wide integer dtype) and constants
# are folded, so (x * 1/2) * (t / 2) and (x * 1/4) * t meet. Needed for means and loss scaling.
# the 0-dim tensor scalar_tensor(s=?c, dtype=?t) holds ?c exactly (dtype None is torch's default, float32)
HOLDS_C = '(?t == None or floating(?t) or ((?t == "int64" or ?t == "int32") and ?c // 1 == ?c))'


_LNB = "?x, ?m, ?r, ?w, ?c, normalized_shape=?n, output_mask=?o"
_LNB_EXAMPLE = [{"g": [2, 3, 4], "x": [2, 3, 4], "m": [2, 3, 1], "r": [2, 3, 1], "w": [4], "c": [4], "n": [4],
                 "o": [1, 1, 1], "f": 0.5}]


LEMMAS = [
    L(400, "div-by-constant", "aten.div.Tensor(?x, aten.scalar_tensor(s=?c, dtype=?t)) => aten.mul.Scalar(?x, other=1 / ?c)",
      "?c != 0 and floating(dtype(?x)) and " + HOLDS_C),
    L(401, "mul-by-constant", "aten.mul.Tensor(?x, aten.scalar_tensor(s=?c, dtype=?t)) => aten.mul.Scalar(?x, other=?c)",
      "floating(dtype(?x)) and " + HOLDS_C),
    L(402, "constant-times", "aten.mul.Tensor(aten.scalar_tensor(s=?c, dtype=?t), ?x) => aten.mul.Scalar(?x, other=?c)",
      "floating(dtype(?x)) and " + HOLDS_C),
    L(403, "fold-scalar-factors", "aten.mul.Scalar(aten.mul.Scalar(?x, other=?a), other=?b) => aten.mul.Scalar(?x, other=?a * ?b)",
      "finite(?a) and finite(?b) and floating(dtype(?x))"),
    L(404, "scalar-factor-out-left", "aten.mul.Tensor(aten.mul.Scalar(?x, other=?a), ?y) => aten.mul.Scalar(aten.mul.Tensor(?x, ?y), other=?a)"),
    L(405, "scalar-factor-out-right", "aten.mul.Tensor(?y, aten.mul.Scalar(?x, other=?a)) => aten.mul.Scalar(aten.mul.Tensor(?y, ?x), other=?a)"),
    # (the other way, a factor of a sum distributed, restates the family linear-over-sum's
    # aten:1203[aten.mul.Scalar] without its guards)
    L(409, "scalar-factor-of-sum", "aten.mul.Scalar(sum(?a, ?b), other=?c) <=> sum(aten.mul.Scalar(?a, other=?c), aten.mul.Scalar(?b, other=?c))",
      "finite(?c) and dtype(?a) != \"bool\" and dtype(?b) != \"bool\"", duplicates=KEPT_UNGUARDED),
    # a replicated bias added to each partial sum as bias / W (DTensor's Replicate -> Partial redistribution)
    L(490, "partial-sums-of-scaled-bias",
      "sum(aten.add.Tensor(?a, aten.mul.Scalar(?c, other=?f)), aten.add.Tensor(?b, aten.mul.Scalar(?c, other=?g)))"
      " => aten.add.Tensor(sum(?a, ?b), aten.mul.Scalar(?c, other=?f + ?g))",
      "shape(?a) == shape(?b) and floating(dtype(?c)) and finite(?f) and finite(?g)"),
    L(530, "mul-scalar-is-scale", "aten.mul.Scalar(?x, other=?c) => scale(?x, factor=?c)",
      "?c > 0 and ?c < 1 and floating(dtype(?x))"),
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
    # a mean's backward: a number broadcast, then divided by the tokens -- the number divided, then broadcast, as
    # a product with the inverse (as 400), whose factors fold (403) with Megatron's 1 / micro-batches
    L(1320, "div-of-broadcast-number",
      "aten.div.Scalar(aten.expand(?x, size=?s, implicit=?i), other=?c)"
      " => aten.expand(aten.mul.Scalar(?x, other=1 / ?c), size=?s, implicit=?i)",
      "rank(?x) == 0 and ?c != 0 and finite(?c) and floating(dtype(?x))",
      examples=[{"x": [], "s": [2, 3], "i": False, "c": 8}, {"x": [], "s": [4], "i": False, "c": 3}]),
    L(1850, "div-by-number-is-mul",
      "aten.div.Scalar(?x, other=?c) => aten.mul.Scalar(?x, other=1 / ?c)",
      "?c != 0 and finite(?c) and floating(dtype(?x))"),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    L(541, "gelu-backward-of-scaled-grad",
      "aten.gelu_backward(scale(?g, factor=?f), ?x, approximate=?a) => scale(aten.gelu_backward(?g, ?x, approximate=?a), factor=?f)", duplicates=KEPT_UNGUARDED),
    L(545, "sum-dims-of-scale",
      "aten.sum.dim_IntList(scale(?x, factor=?f), dim=?d, keepdim=?k, dtype=?t) => scale(aten.sum.dim_IntList(?x, dim=?d, keepdim=?k, dtype=?t), factor=?f)",
      "?t == None or floating(?t)", duplicates=KEPT_UNGUARDED),
    # scaling by a number commutes with a view
    L(1303, "mul-scalar-of-reshape",
      "aten.mul.Scalar(reshape(?x, shape=?s), other=?c) => reshape(aten.mul.Scalar(?x, other=?c), shape=?s)", duplicates=KEPT_UNGUARDED),
    # a gradient known up to a factor (scaled.py) through Megatron's attention-mask backward: zeros stay zeros
    L(1322, "masked-fill-zero-of-scale",
      "aten.masked_fill.Scalar(scale(?x, factor=?f), ?m, value=0) => scale(aten.masked_fill.Scalar(?x, ?m, value=0), factor=?f)",
      "floating(dtype(?x))", duplicates=KEPT_UNGUARDED),
    L(546, "sum-of-scale", "aten.sum(scale(?x, factor=?f), dtype=?t) => scale(aten.sum(?x, dtype=?t), factor=?f)",
      "?t == None or floating(?t)", duplicates=KEPT_UNGUARDED),
    L(547, "mul-of-scale-left", "aten.mul.Tensor(scale(?a, factor=?f), ?b) => scale(aten.mul.Tensor(?a, ?b), factor=?f)", duplicates=KEPT_UNGUARDED),
    L(548, "mul-of-scale-right", "aten.mul.Tensor(?a, scale(?b, factor=?f)) => scale(aten.mul.Tensor(?a, ?b), factor=?f)", duplicates=KEPT_UNGUARDED),
    L(549, "add-of-scales",
      "aten.add.Tensor(scale(?a, factor=?f), scale(?b, factor=?f), alpha=?k) => scale(aten.add.Tensor(?a, ?b, alpha=?k), factor=?f)", duplicates=KEPT_UNGUARDED),
    L(551, "div-of-scaled-numerator", "aten.div.Tensor(scale(?a, factor=?f), ?b) => scale(aten.div.Tensor(?a, ?b), factor=?f)", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
