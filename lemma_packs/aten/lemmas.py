"""Lemmas of the ATen pack. References: 3xx.

Bridges to the core dialect (``aten.mm`` is ``matmul``; ``addmm`` is ``mm`` plus a broadcast bias), then
ATen compute ops distributed over clean ops: elementwise ops (with broadcasting) over concats, batched
matmuls over batch/row/column/contraction splits, and row-wise ops (softmax, layer norm) along an
unsharded dimension.
"""
from graphguard.engine.lemma import L

from .hf import LEMMAS as HF
from .moe import LEMMAS as MOE
from .scaled import LEMMAS as SCALED
from .vocab import LEMMAS as VOCAB

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

ELEMENTWISE = [
    L(310, "add-of-concats",
      "aten.add.Tensor(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k), alpha=?al) => concat(aten.add.Tensor(?a, ?c, alpha=?al), aten.add.Tensor(?b, ?e, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and ?k == bdim(?c, rank(?a), ?d) and size(?a, ?d) == size(?c, ?k)"
      " and size(?b, ?d) == size(?e, ?k)"),
    L(311, "add-of-concat-and-broadcast",
      "aten.add.Tensor(concat(?a, ?b, dim=?d), ?c, alpha=?al) => concat(aten.add.Tensor(?a, ?c, alpha=?al), aten.add.Tensor(?b, ?c, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(312, "add-of-broadcast-and-concat",
      "aten.add.Tensor(?c, concat(?a, ?b, dim=?d), alpha=?al) => concat(aten.add.Tensor(?c, ?a, alpha=?al), aten.add.Tensor(?c, ?b, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(313, "sub-of-concats",
      "aten.sub.Tensor(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k), alpha=?al) => concat(aten.sub.Tensor(?a, ?c, alpha=?al), aten.sub.Tensor(?b, ?e, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and ?k == bdim(?c, rank(?a), ?d) and size(?a, ?d) == size(?c, ?k)"
      " and size(?b, ?d) == size(?e, ?k)"),
    L(314, "sub-of-concat-and-broadcast",
      "aten.sub.Tensor(concat(?a, ?b, dim=?d), ?c, alpha=?al) => concat(aten.sub.Tensor(?a, ?c, alpha=?al), aten.sub.Tensor(?b, ?c, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(315, "sub-of-broadcast-and-concat",
      "aten.sub.Tensor(?c, concat(?a, ?b, dim=?d), alpha=?al) => concat(aten.sub.Tensor(?c, ?a, alpha=?al), aten.sub.Tensor(?c, ?b, alpha=?al), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(316, "mul-of-concats",
      "aten.mul.Tensor(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k)) => concat(aten.mul.Tensor(?a, ?c), aten.mul.Tensor(?b, ?e), dim=?d)",
      "rank(?a) >= rank(?c) and ?k == bdim(?c, rank(?a), ?d) and size(?a, ?d) == size(?c, ?k)"
      " and size(?b, ?d) == size(?e, ?k)"),
    L(317, "mul-of-concat-and-broadcast",
      "aten.mul.Tensor(concat(?a, ?b, dim=?d), ?c) => concat(aten.mul.Tensor(?a, ?c), aten.mul.Tensor(?b, ?c), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(318, "mul-of-broadcast-and-concat",
      "aten.mul.Tensor(?c, concat(?a, ?b, dim=?d)) => concat(aten.mul.Tensor(?c, ?a), aten.mul.Tensor(?c, ?b), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(319, "div-of-concats",
      "aten.div.Tensor(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k)) => concat(aten.div.Tensor(?a, ?c), aten.div.Tensor(?b, ?e), dim=?d)",
      "rank(?a) >= rank(?c) and ?k == bdim(?c, rank(?a), ?d) and size(?a, ?d) == size(?c, ?k)"
      " and size(?b, ?d) == size(?e, ?k)"),
    L(320, "div-of-concat-and-broadcast",
      "aten.div.Tensor(concat(?a, ?b, dim=?d), ?c) => concat(aten.div.Tensor(?a, ?c), aten.div.Tensor(?b, ?c), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(321, "div-of-broadcast-and-concat",
      "aten.div.Tensor(?c, concat(?a, ?b, dim=?d)) => concat(aten.div.Tensor(?c, ?a), aten.div.Tensor(?c, ?b), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(330, "gelu-of-concat", "aten.gelu(concat(?a, ?b, dim=?d), approximate=?s) => concat(aten.gelu(?a, approximate=?s), aten.gelu(?b, approximate=?s), dim=?d)"),
    L(331, "relu-of-concat", "aten.relu(concat(?a, ?b, dim=?d)) => concat(aten.relu(?a), aten.relu(?b), dim=?d)"),
    L(332, "silu-of-concat", "aten.silu(concat(?a, ?b, dim=?d)) => concat(aten.silu(?a), aten.silu(?b), dim=?d)"),
    L(333, "sigmoid-of-concat", "aten.sigmoid(concat(?a, ?b, dim=?d)) => concat(aten.sigmoid(?a), aten.sigmoid(?b), dim=?d)"),
    L(334, "tanh-of-concat", "aten.tanh(concat(?a, ?b, dim=?d)) => concat(aten.tanh(?a), aten.tanh(?b), dim=?d)"),
    L(335, "exp-of-concat", "aten.exp(concat(?a, ?b, dim=?d)) => concat(aten.exp(?a), aten.exp(?b), dim=?d)"),
    L(336, "log-of-concat", "aten.log(concat(?a, ?b, dim=?d)) => concat(aten.log(?a), aten.log(?b), dim=?d)"),
    L(337, "neg-of-concat", "aten.neg(concat(?a, ?b, dim=?d)) => concat(aten.neg(?a), aten.neg(?b), dim=?d)"),
    L(338, "rsqrt-of-concat", "aten.rsqrt(concat(?a, ?b, dim=?d)) => concat(aten.rsqrt(?a), aten.rsqrt(?b), dim=?d)"),
    L(339, "sqrt-of-concat", "aten.sqrt(concat(?a, ?b, dim=?d)) => concat(aten.sqrt(?a), aten.sqrt(?b), dim=?d)"),
    L(340, "cos-of-concat", "aten.cos(concat(?a, ?b, dim=?d)) => concat(aten.cos(?a), aten.cos(?b), dim=?d)"),
    L(341, "sin-of-concat", "aten.sin(concat(?a, ?b, dim=?d)) => concat(aten.sin(?a), aten.sin(?b), dim=?d)"),
    L(342, "pow-TensorScalar-of-concat", "aten.pow.Tensor_Scalar(concat(?a, ?b, dim=?d), exponent=?p) => concat(aten.pow.Tensor_Scalar(?a, exponent=?p), aten.pow.Tensor_Scalar(?b, exponent=?p), dim=?d)"),
    L(343, "mul-Scalar-of-concat", "aten.mul.Scalar(concat(?a, ?b, dim=?d), other=?o) => concat(aten.mul.Scalar(?a, other=?o), aten.mul.Scalar(?b, other=?o), dim=?d)"),
    L(344, "div-Scalar-of-concat", "aten.div.Scalar(concat(?a, ?b, dim=?d), other=?o) => concat(aten.div.Scalar(?a, other=?o), aten.div.Scalar(?b, other=?o), dim=?d)"),
    L(345, "add-Scalar-of-concat", "aten.add.Scalar(concat(?a, ?b, dim=?d), other=?o, alpha=?al) => concat(aten.add.Scalar(?a, other=?o, alpha=?al), aten.add.Scalar(?b, other=?o, alpha=?al), dim=?d)"),
    L(346, "sub-Scalar-of-concat", "aten.sub.Scalar(concat(?a, ?b, dim=?d), other=?o, alpha=?al) => concat(aten.sub.Scalar(?a, other=?o, alpha=?al), aten.sub.Scalar(?b, other=?o, alpha=?al), dim=?d)"),
    L(347, "rsub-Scalar-of-concat", "aten.rsub.Scalar(concat(?a, ?b, dim=?d), other=?o, alpha=?al) => concat(aten.rsub.Scalar(?a, other=?o, alpha=?al), aten.rsub.Scalar(?b, other=?o, alpha=?al), dim=?d)"),
    L(348, "tocopy-of-concat", "aten._to_copy(concat(?a, ?b, dim=?d), dtype=?t) => concat(aten._to_copy(?a, dtype=?t), aten._to_copy(?b, dtype=?t), dim=?d)"),
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

_LN_EXAMPLES = [{"a": a, "b": b, "w": n, "c": n, "n": n, "d": d}
                for a, b, n, d in (([2, 3, 4], [1, 3, 4], [4], 0), ([2, 3, 4], [2, 2, 4], [4], 1), ([3, 4], [1, 4], [4], 0),
                                   ([2, 2, 6], [2, 3, 6], [6], 1), ([1, 2, 3], [2, 2, 3], [2, 3], 0))]

ROWWISE = [
    L(370, "softmax-of-concat", "aten._softmax(concat(?a, ?b, dim=?d), dim=?k, half_to_float=?h)"
      " => concat(aten._softmax(?a, dim=?k, half_to_float=?h), aten._softmax(?b, dim=?k, half_to_float=?h), dim=?d)", "?k != ?d"),
    L(371, "log-softmax-of-concat", "aten._log_softmax(concat(?a, ?b, dim=?d), dim=?k, half_to_float=?h)"
      " => concat(aten._log_softmax(?a, dim=?k, half_to_float=?h), aten._log_softmax(?b, dim=?k, half_to_float=?h), dim=?d)", "?k != ?d"),
    L(372, "layer-norm-of-concat",
      "aten.native_layer_norm#0(concat(?a, ?b, dim=?d), ?w, ?c, normalized_shape=?n, eps=?e)"
      " => concat(aten.native_layer_norm#0(?a, ?w, ?c, normalized_shape=?n, eps=?e), aten.native_layer_norm#0(?b, ?w, ?c, normalized_shape=?n, eps=?e), dim=?d)",
      "?d < rank(?a) - len(?n)", examples=_LN_EXAMPLES),
]

REDUCTIONS = [
    L(390, "sum-of-concat-other-dims",
      "aten.sum.dim_IntList(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd, dtype=?t)"
      " => concat(aten.sum.dim_IntList(?a, dim=?k, keepdim=?kd, dtype=?t), aten.sum.dim_IntList(?b, dim=?k, keepdim=?kd, dtype=?t), dim=reduced_dim(?d, ?k, ?kd))",
      "not contains(?k, ?d)"),
    L(391, "sum-of-concat-along-it",
      "aten.sum.dim_IntList(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd, dtype=?t)"
      " => sum(aten.sum.dim_IntList(?a, dim=?k, keepdim=?kd, dtype=?t), aten.sum.dim_IntList(?b, dim=?k, keepdim=?kd, dtype=?t))",
      "contains(?k, ?d)"),
    L(393, "sum-over-a-unit-dim", "aten.sum.dim_IntList(?x, dim=?k, keepdim=true, dtype=None) => ?x",
      "len(?k) == 1 and size(?x, at(?k, 0)) == 1 and floating(dtype(?x))"),
    L(392, "sum-all-of-concat", "aten.sum(concat(?a, ?b, dim=?d), dtype=?t) => sum(aten.sum(?a, dtype=?t), aten.sum(?b, dtype=?t))"),
]

BACKWARD = [
    L(380, "gelu-backward-of-concats",
      "aten.gelu_backward(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), approximate=?s) => concat(aten.gelu_backward(?a, ?c, approximate=?s), aten.gelu_backward(?b, ?e, approximate=?s), dim=?d)",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(381, "sigmoid-backward-of-concats",
      "aten.sigmoid_backward(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(aten.sigmoid_backward(?a, ?c), aten.sigmoid_backward(?b, ?e), dim=?d)",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(382, "silu-backward-of-concats",
      "aten.silu_backward(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(aten.silu_backward(?a, ?c), aten.silu_backward(?b, ?e), dim=?d)",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(383, "tanh-backward-of-concats",
      "aten.tanh_backward(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(aten.tanh_backward(?a, ?c), aten.tanh_backward(?b, ?e), dim=?d)",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(384, "threshold-backward-of-concats",
      "aten.threshold_backward(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), threshold=?t) => concat(aten.threshold_backward(?a, ?c, threshold=?t), aten.threshold_backward(?b, ?e, threshold=?t), dim=?d)",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
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
    L(375, "layer-norm-mean-of-concat",
      "aten.native_layer_norm#1(concat(?a, ?b, dim=?d), ?w, ?c, normalized_shape=?n, eps=?e)"
      " => concat(aten.native_layer_norm#1(?a, ?w, ?c, normalized_shape=?n, eps=?e), aten.native_layer_norm#1(?b, ?w, ?c, normalized_shape=?n, eps=?e), dim=?d)",
      "?d < rank(?a) - len(?n)", examples=_LN_EXAMPLES),
    L(376, "layer-norm-rstd-of-concat",
      "aten.native_layer_norm#2(concat(?a, ?b, dim=?d), ?w, ?c, normalized_shape=?n, eps=?e)"
      " => concat(aten.native_layer_norm#2(?a, ?w, ?c, normalized_shape=?n, eps=?e), aten.native_layer_norm#2(?b, ?w, ?c, normalized_shape=?n, eps=?e), dim=?d)",
      "?d < rank(?a) - len(?n)", examples=_LN_EXAMPLES),
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

ROWWISE_BACKWARD = [
    L(373, "softmax-backward-of-concats",
      "aten._softmax_backward_data(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), dim=?k, input_dtype=?t)"
      " => concat(aten._softmax_backward_data(?a, ?c, dim=?k, input_dtype=?t), aten._softmax_backward_data(?b, ?e, dim=?k, input_dtype=?t), dim=?d)",
      "?k != ?d and shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
    L(374, "log-softmax-backward-of-concats",
      "aten._log_softmax_backward_data(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), dim=?k, input_dtype=?t)"
      " => concat(aten._log_softmax_backward_data(?a, ?c, dim=?k, input_dtype=?t), aten._log_softmax_backward_data(?b, ?e, dim=?k, input_dtype=?t), dim=?d)",
      "?k != ?d and shape(?a) == shape(?c) and shape(?b) == shape(?e)"),
]

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
    L(409, "scalar-factor-of-sum", "aten.mul.Scalar(sum(?a, ?b), other=?c) <=> sum(aten.mul.Scalar(?a, other=?c), aten.mul.Scalar(?b, other=?c))",
      "finite(?c)"),
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
    L(428, "neg-of-partial-sum", "aten.neg(sum(?a, ?b)) => sum(aten.neg(?a), aten.neg(?b))", "shape(?a) == shape(?b)"),
    L(410, "mean-of-equal-halves",
      "aten.mean(concat(?a, ?b, dim=?d), dtype=?t) => aten.mul.Scalar(sum(aten.mean(?a, dtype=?t), aten.mean(?b, dtype=?t)), other=0.5)",
      "shape(?a) == shape(?b)"),
    # a replicated bias added to each partial sum as bias / W (DTensor's Replicate -> Partial redistribution)
    L(490, "partial-sums-of-scaled-bias",
      "sum(aten.add.Tensor(?a, aten.mul.Scalar(?c, other=?f)), aten.add.Tensor(?b, aten.mul.Scalar(?c, other=?g)))"
      " => aten.add.Tensor(sum(?a, ?b), aten.mul.Scalar(?c, other=?f + ?g))",
      "shape(?a) == shape(?b) and floating(dtype(?c)) and finite(?f) and finite(?g)"),
]

# broadcasting views (grouped-query attention repeats each KV head for its query heads)
_XD = "?d + len(?s) - rank(?a)"  # the concat dim in expand's output (expand may add leading dims)
VIEWS = [
    L(420, "expand-of-concat",
      f"aten.expand(concat(?a, ?b, dim=?d), size=?s, implicit=?i) => concat(aten.expand(?a, size=set_at(?s, {_XD}, size(?a, ?d)), implicit=?i),"
      f" aten.expand(?b, size=set_at(?s, {_XD}, size(?b, ?d)), implicit=?i), dim={_XD})",
      f"at(?s, {_XD}) == size(?a, ?d) + size(?b, ?d) or at(?s, {_XD}) == -1",
      examples=[{"a": [2, 1, 3], "b": [1, 1, 3], "d": 0, "s": [2, 3, 4, 3], "i": False}]),
    # constrained (§4.3): a broadcast copy splits where a narrower copy of the same tensor exists
    L(421, "expand-splits-at-narrower-copy",
      "aten.expand(?x, size=?s, implicit=?i) => concat(aten.expand(?x, size=?t, implicit=?i),"
      " aten.expand(?x, size=set_at(?s, expand_split_dim(?x, ?s, ?t), at(?s, expand_split_dim(?x, ?s, ?t)) - at(?t, expand_split_dim(?x, ?s, ?t))), implicit=?i),"
      " dim=expand_split_dim(?x, ?s, ?t))",
      "expand_split_dim(?x, ?s, ?t) >= 0", when="aten.expand(?x, size=?t, implicit=?i)",
      examples=[{"x": [2, 1, 3], "s": [2, 4, 3], "t": [2, 1, 3], "i": False}]),
]

LEMMAS = VIEWS + CONSTANTS + LAYER_NORM + ROWWISE_BACKWARD + BRIDGES + ELEMENTWISE + MATMUL + ROWWISE + REDUCTIONS + BACKWARD + MOE + VOCAB + SCALED + HF
