"""Lemmas of the ATen pack. References: 3xx.

Bridges to the core dialect (``aten.mm`` is ``matmul``; ``addmm`` is ``mm`` plus a broadcast bias), then
what the ops' declared properties (ops.py) do not state: batched matmuls over batch/row/column/contraction
splits, layer-norm backward over row splits, scalar constants, views. Elementwise ops over concats (with
broadcasting), row-wise ops (softmax, layer norm) along an unsharded dim, reductions of concats, partial sums
and scalar factors through linear ops are the engine's lemma families (engine/families.py, 12xx).
"""
from graphguard.ir.lemma import L

from .data_ops import LEMMAS as DATA_BOUNDS
from .lemmas_more import LEMMAS as MORE
from .megatron import LEMMAS as MEGATRON
from .megatron_ce import LEMMAS as MEGATRON_CE
from .megatron_moe import LEMMAS as MEGATRON_MOE
from .grouped import LEMMAS as GROUPED
from .hf import LEMMAS as HF
from .moe import LEMMAS as MOE
from .normal import LEMMAS as NORMAL
from .normal2 import LEMMAS as NORMAL2
from .ranges import LEMMAS as RANGES
from .scaled import LEMMAS as SCALED
from .vllm_vocab import LEMMAS as VLLM_VOCAB
from .titan import LEMMAS as TITAN
from .vocab import LEMMAS as VOCAB
from .zoo import LEMMAS as ZOO

NUMBERS = (range(300, 470), range(490, 500))  # (470-489: vocab.py)

BRIDGES = [
    L(301, "mm-is-matmul", "aten.mm(?a, ?b) <=> matmul(?a, ?b)"),
    L(302, "addmm-is-mm-plus-bias", "aten.addmm(?c, ?a, ?b) => aten.add.Tensor(aten.mm(?a, ?b), ?c)"),
    L(303, "add-is-sum", "aten.add.Tensor(?a, ?b) => sum(?a, ?b)", "shape(?a) == shape(?b)"),
    L(304, "baddbmm-is-bmm-plus", "aten.baddbmm(?c, ?a, ?b) => aten.add.Tensor(aten.bmm(?a, ?b), ?c)"),
    L(306, "add-of-partial-sums",
      "aten.add.Tensor(sum(?a, ?b), sum(?c, ?e)) => sum(aten.add.Tensor(?a, ?c), aten.add.Tensor(?b, ?e))",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)", when="aten.add.Tensor(?b, ?e)"),
    L(305, "expand-to-own-shape", "aten.expand(?x, size=?s, implicit=?i) => ?x", "?s == shape(?x)"),
]


MATMUL = [
    L(364, "bmm-of-batch-merging-views",
      "aten.bmm(reshape(?x, shape=?s), reshape(?y, shape=?t))"
      " => reshape(batched_matmul(?x, ?y), shape=[at(?s, 0), at(?s, 1), at(?t, 2)])",
      "bmm_view_ok(?x, ?y, ?s, ?t)",
      examples=[{"x": x, "y": y, "s": s_, "t": t} for x, y, s_, t in (
          ([2, 3, 4, 5], [2, 3, 5, 2], [6, 4, 5], [6, 5, 2]), ([2, 2, 3], [2, 3, 4], [2, 2, 3], [2, 3, 4]),
          ([1, 2, 3, 4], [1, 2, 4, 1], [2, 3, 4], [2, 4, 1]), ([3, 1, 2, 2], [3, 1, 2, 3], [3, 2, 2], [3, 2, 3]))]),
    L(365, "bmm-is-batched-matmul", "aten.bmm(?a, ?b) => batched_matmul(?a, ?b)"),
    L(360, "bmm-batch", "aten.bmm(concat(?a, ?b, dim=0), concat(?c, ?e, dim=0)) => concat(aten.bmm(?a, ?c), aten.bmm(?b, ?e), dim=0)",
      "size(?a, 0) == size(?c, 0)",
      examples=[{"a": [2, 3, 4], "b": [1, 3, 4], "c": [2, 4, 2], "e": [1, 4, 2]},
                {"a": [1, 2, 2], "b": [3, 2, 2], "c": [1, 2, 3], "e": [3, 2, 3]}]),
    L(361, "bmm-rows", "aten.bmm(concat(?a, ?b, dim=1), ?w) => concat(aten.bmm(?a, ?w), aten.bmm(?b, ?w), dim=1)"),
    L(362, "bmm-cols", "aten.bmm(?x, concat(?a, ?b, dim=2)) => concat(aten.bmm(?x, ?a), aten.bmm(?x, ?b), dim=2)"),
    L(363, "bmm-block-k", "aten.bmm(concat(?a, ?b, dim=2), concat(?c, ?e, dim=1)) => sum(aten.bmm(?a, ?c), aten.bmm(?b, ?e))",
      "size(?a, 2) == size(?c, 1)",
      examples=[{"a": [2, 3, 2], "b": [2, 3, 1], "c": [2, 2, 4], "e": [2, 1, 4]},
                {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 3, 2], "e": [1, 3, 2]}]),
]


REDUCTIONS = [
    L(393, "sum-over-a-unit-dim", "aten.sum.dim_IntList(?x, dim=?k, keepdim=true, dtype=None) => ?x",
      "len(?k) == 1 and size(?x, at(?k, 0)) == 1 and floating(dtype(?x))"),
]


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

LAYER_NORM = [
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


_ACC_PADS = (([2, 3], [2, 3], 0, [4, 3]), ([2, 1], [2, 3], 1, [2, 4]), ([3], [2], 0, [5]), ([1, 4], [3, 4], 0, [4, 4]),
             ([2, 2, 1], [2, 2, 2], 2, [2, 2, 3]), ([0, 2], [2, 2], 0, [2, 2]), ([2, 4, 6, 2], [2, 4, 6, 2], 3, [2, 4, 6, 4]))
_PADS = [{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64"}
         for a, b, d in (([2, 3], [2, 3], 0), ([1, 4], [3, 4], 0), ([2, 1], [2, 3], 1), ([3], [2], 0), ([0, 2], [2, 2], 0),
                         ([2, 2, 1], [2, 2, 2], 2))]

# Scalar constants: every multiplication or division by a constant becomes ``mul.Scalar`` (where the 0-dim tensor
# holds the constant exactly: a float one, or an integral constant in a wide integer dtype) and constants
# are folded, so (x * 1/2) * (t / 2) and (x * 1/4) * t meet. Needed for means and loss scaling.
# the 0-dim tensor scalar_tensor(s=?c, dtype=?t) holds ?c exactly (dtype None is torch's default, float32)
HOLDS_C = '(?t == None or floating(?t) or ((?t == "int64" or ?t == "int32") and ?c // 1 == ?c))'
CONSTANTS = [
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
    L(406, "times-one", "aten.mul.Scalar(?x, other=1) => ?x", 'dtype(?x) != "bool"'),
    L(407, "plus-zero", "aten.add.Tensor(?x, aten.scalar_tensor(s=0, dtype=?t)) => ?x",
      "dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t))"),
    L(408, "zero-plus", "aten.add.Tensor(aten.scalar_tensor(s=0, dtype=?t), ?x) => ?x",
      "dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t))"),
    # (the other way, a factor of a sum distributed, is the family linear-over-sum's aten:1203[aten.mul.Scalar])
    L(409, "scalar-factor-of-sum", "sum(aten.mul.Scalar(?a, other=?c), aten.mul.Scalar(?b, other=?c)) => aten.mul.Scalar(sum(?a, ?b), other=?c)",
      "finite(?c) and dtype(?a) != \"bool\" and dtype(?b) != \"bool\""),
    L(411, "mse-of-equal-halves",
      "aten.mse_loss(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), reduction=1)"
      " => aten.mul.Scalar(sum(aten.mse_loss(?a, ?c, reduction=1), aten.mse_loss(?b, ?e, reduction=1)), other=0.5)",
      "shape(?a) == shape(?b) and shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(412, "mse-backward-of-equal-halves",
      "aten.mse_loss_backward(?g, concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), reduction=1)"
      " => concat(aten.mse_loss_backward(aten.mul.Scalar(?g, other=0.5), ?a, ?c, reduction=1),"
      " aten.mse_loss_backward(aten.mul.Scalar(?g, other=0.5), ?b, ?e, reduction=1), dim=?d)",
      "rank(?g) == 0 and shape(?a) == shape(?b) and shape(?a) == shape(?c) and shape(?b) == shape(?e)",
      examples=[{"g": [], "a": [2, 3], "b": [2, 3], "c": [2, 3], "e": [2, 3], "d": 0}]),
    # any two parts (world size 4 nests concat(concat(concat(a, b), c), d)): a mean weighted by the parts' sizes
    L(440, "mse-of-concats",
      "aten.mse_loss(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), reduction=1)"
      " => sum(aten.mul.Scalar(aten.mse_loss(?a, ?c, reduction=1), other=1.0 * numel(?a) / (numel(?a) + numel(?b))),"
      " aten.mul.Scalar(aten.mse_loss(?b, ?e, reduction=1), other=1.0 * numel(?b) / (numel(?a) + numel(?b))))",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e) and numel(?a) > 0 and numel(?b) > 0",
      examples=[{"a": [3, 2], "b": [1, 2], "c": [3, 2], "e": [1, 2], "d": 0}]),
    L(441, "mse-backward-of-concats",
      "aten.mse_loss_backward(?g, concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), reduction=1)"
      " => concat(aten.mse_loss_backward(aten.mul.Scalar(?g, other=1.0 * numel(?a) / (numel(?a) + numel(?b))), ?a, ?c, reduction=1),"
      " aten.mse_loss_backward(aten.mul.Scalar(?g, other=1.0 * numel(?b) / (numel(?a) + numel(?b))), ?b, ?e, reduction=1), dim=?d)",
      "rank(?g) == 0 and shape(?a) == shape(?c) and shape(?b) == shape(?e)",
      examples=[{"g": [], "a": a, "b": b, "c": a, "e": b, "d": d}
                for a, b, d in (([3, 2], [1, 2], 0), ([2, 3], [2, 1], 1), ([4], [2], 0), ([1, 2, 3], [2, 2, 3], 0),
                                ([2, 2], [2, 2], 0))]),
    # the backward of x[..., :k] and x[..., k:] (slice_scatter into zeros) adds two zero-padded halves;
    # stated for the whole pattern: "x + 0 = x" alone would put x inside its own class (sum(0, x))
    L(425, "add-of-complementary-zero-pads",
      "aten.add.Tensor(concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    L(426, "add-of-complementary-zero-pads-mirrored",
      "aten.add.Tensor(concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    # the same two pads summed as the ranks' partial results are (core sum: the pads' add once it is a sum)
    L(427, "sum-of-complementary-zero-pads",
      "sum(concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    L(429, "sum-of-complementary-zero-pads-mirrored",
      "sum(concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    # ... and accumulated one at a time into a third gradient (the backward of cat((-x2, x1)) added to x * cos's
    # gradient after it: (g + pad(b)) + pad(a))
    L(430, "complementary-zero-pads-accumulated",
      "sum(sum(?m, concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d)), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => sum(?m, concat(?a, ?b, dim=?d))", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=[{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64", "m": m}
                for a, b, d, m in _ACC_PADS]),
    L(431, "complementary-zero-pads-accumulated-mirrored",
      "sum(sum(?m, concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d)), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => sum(?m, concat(?a, ?b, dim=?d))", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=[{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64", "m": m}
                for a, b, d, m in _ACC_PADS]),
    L(410, "mean-of-equal-halves",
      "aten.mean(concat(?a, ?b, dim=?d), dtype=?t) => aten.mul.Scalar(sum(aten.mean(?a, dtype=?t), aten.mean(?b, dtype=?t)), other=0.5)",
      "shape(?a) == shape(?b)"),
    # a replicated bias added to each partial sum as bias / W (DTensor's Replicate -> Partial redistribution)
    L(490, "partial-sums-of-scaled-bias",
      "sum(aten.add.Tensor(?a, aten.mul.Scalar(?c, other=?f)), aten.add.Tensor(?b, aten.mul.Scalar(?c, other=?g)))"
      " => aten.add.Tensor(sum(?a, ?b), aten.mul.Scalar(?c, other=?f + ?g))",
      "shape(?a) == shape(?b) and floating(dtype(?c)) and finite(?f) and finite(?g)"),
]

# broadcasting views (expand of concats, split at a narrower copy): families 1215 and 1216 of the broadcast_to
# property (graphguard/engine/families.py), for aten.expand and every other broadcast op
VIEWS = []

LEMMAS = VIEWS + CONSTANTS + LAYER_NORM + BRIDGES + MATMUL + REDUCTIONS + MOE + VOCAB + SCALED + VLLM_VOCAB + MEGATRON + MEGATRON_CE + MEGATRON_MOE + TITAN + NORMAL + NORMAL2 + RANGES + HF + MORE + ZOO + DATA_BOUNDS + GROUPED
