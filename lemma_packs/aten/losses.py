"""Losses: mean-squared error over concatenated halves or shards, written out, and its backward; log-softmax
over vocabulary shards and its backward against a scaled one-hot target.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2600-2649 and 2860-2869 for new ones
NUMBERS = (range(411, 413), range(440, 442), range(1507, 1508), range(1730, 1731), range(1733, 1734),
           range(1853, 1854), range(2600, 2650), range(2860, 2870))


# torchtitan's loss parallel (``components/loss.py: _LossParallelCrossEntropy``) on vocabulary-sharded logits: the
# max and the sum of exponentials all-reduced, the target's log-probability gathered with a column index and
# zeroed where another rank owns the target (``index_put`` with the mask as a column)
_SUB = "aten.sub.Tensor({x}, {y}, alpha=1)"
_MAXES = "max(aten.amax(?a, dim=[?d], keepdim=true), aten.amax(?b, dim=[?d], keepdim=true))"
_SUMEXP = "aten.sum.dim_IntList(aten.exp({x}), dim=[?d], keepdim=true, dtype=None)"
_SUMS = f"sum({_SUMEXP.format(x=_SUB.format(x='?a', y=_MAXES))}, {_SUMEXP.format(x=_SUB.format(x='?b', y=_MAXES))})"


LEMMAS = [
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
    # log_softmax over a dim split in two: log_softmax(x) = x - m - log(sum(exp(x - m))) for any finite m, here
    # the max of the parts' maxes; the sum of exponentials is the sum of the parts' sums
    L(1730, "log-softmax-of-concat-along-it",
      "aten._log_softmax(concat(?a, ?b, dim=?d), dim=?d, half_to_float=false)"
      f" => concat({_SUB.format(x=_SUB.format(x='?a', y=_MAXES), y=f'aten.log({_SUMS})')},"
      f" {_SUB.format(x=_SUB.format(x='?b', y=_MAXES), y=f'aten.log({_SUMS})')}, dim=?d)",
      "size(?a, ?d) > 0 and size(?b, ?d) > 0 and floating(dtype(?a))"),
    # the backward of cross-entropy as PyTorch decomposes it: nll_loss's gradient is a one-hot of -1 (scatter into
    # zeros, one index per row) times the per-row upstream gradient w; its row sum is -w, so log_softmax's backward
    # g - exp(ls) * sum(g) is (one-hot + exp(ls)) * w -- torchtitan's fused form
    L(1733, "log-softmax-backward-of-a-scaled-one-hot",
      "aten._log_softmax_backward_data(aten.mul.Tensor(aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y),"
      " ?t, dim=1, value=-1), ?w), ?l, dim=1, input_dtype=?it)"
      " => aten.mul.Tensor(aten.add.Tensor(aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y), ?t, dim=1,"
      " value=-1), aten.exp(?l), alpha=1), ?w)",
      "rank(?l) == 2 and ?z == shape(?l) and shape(?t) == [size(?l, 0), 1] and shape(?w) == [size(?l, 0), 1]"
      " and floating(?y) and ?y == dtype(?l) and ?it == dtype(?l) and dtype(?w) == dtype(?l)", index={"t": "size(?l, 1)"},
      examples=[{"l": [n, v], "t": [n, 1], "w": [n, 1], "z": [n, v], "y": y, "it": y, "l:dtype": y, "w:dtype": y}
                for n, v in ((3, 4), (1, 2), (4, 1), (2, 5), (5, 3))
                for y in ("float32", "float64", "float16", "bfloat16")]),
    L(1507, "mse-written-out",
      "aten.mse_loss(?a, ?b, reduction=1) => aten.mul.Scalar(aten.sum(aten.pow.Tensor_Scalar(aten.sub.Tensor(?a, ?b, alpha=1), exponent=2), dtype=None), other=1.0 / numel(?a))",
      "shape(?a) == shape(?b) and numel(?a) > 0 and finite(1.0 / numel(?a))",
      examples=[{"a": [2, 3], "b": [2, 3]}, {"a": [4], "b": [4]}]),
    # mse_loss_backward(g, a, y) (a mean: g a 0-dim gradient) is 2 / n * g * (a - y), which autograd writes
    # as (expand(g) / n) * (2 * (a - y) ** 1)
    L(1853, "mse-backward-written-out",
      "aten.mse_loss_backward(?g, ?a, ?b, reduction=1)"
      " => aten.mul.Scalar(aten.mul.Tensor(aten.expand(?g, size=shape(?a), implicit=false), aten.sub.Tensor(?a, ?b, alpha=1)),"
      " other=2.0 / numel(?a))",
      "rank(?g) == 0 and shape(?a) == shape(?b) and numel(?a) > 0 and finite(2.0 / numel(?a)) and floating(dtype(?a))"
      " and dtype(?g) == dtype(?a) and dtype(?b) == dtype(?a)",
      examples=[{"g": [], "a": [2, 3], "b": [2, 3]}, {"g": [], "a": [4, 1], "b": [4, 1]}]),
    # the sum's (reduction 2): 2 * g * (a - y), no 1 / n -- autograd's expand(g) * (2 * (a - y) ** 1) of a loss
    # written ((a - y) ** 2).sum()
    L(2600, "mse-sum-backward-written-out",
      "aten.mse_loss_backward(?g, ?a, ?b, reduction=2)"
      " => aten.mul.Scalar(aten.mul.Tensor(aten.expand(?g, size=shape(?a), implicit=false), aten.sub.Tensor(?a, ?b, alpha=1)),"
      " other=2.0)",
      "rank(?g) == 0 and shape(?a) == shape(?b) and numel(?a) > 0 and floating(dtype(?a))"
      " and dtype(?g) == dtype(?a) and dtype(?b) == dtype(?a)",
      examples=[{"g": [], "a": [2, 3], "b": [2, 3]}, {"g": [], "a": [4, 1], "b": [4, 1]}]),
]
