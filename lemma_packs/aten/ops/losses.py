"""Losses: ``mse_loss`` and its backward; the loss with the written-out forms it fuses (family 1218).

Its backward declares none: a written-out sum's backward, expand(g) * (2 * (a - y) ** 1), fused into
mse_loss_backward at reduction 2, hides the written-out form aten 1853 matches for a loss written as
``((a - y) ** 2).sum() / n`` against mse_loss's mean (measured: that fwd+bwd program stopped proving) -- the
reductions' relation (mse_loss_backward(g, a, y, 1) = mse_loss_backward(g / n, a, y, 2)) is missing first."""
from __future__ import annotations

from graphguard.ir.ops import AttrSpec, OpDef, promote, same_shapes

from .helpers import _float_only


_REDUCTION = AttrSpec("reduction", "int", 1)  # 0 none, 1 mean, 2 sum (torch's Reduction enum)


def _mse_shape(shapes, attrs, cx):
    same_shapes("mse_loss", shapes)
    return tuple(shapes[0]) if attrs["reduction"] == 0 else ()


def _mse_ref(xs, attrs):
    d = (xs[0] - xs[1]) ** 2
    return d if attrs["reduction"] == 0 else (d.mean() if attrs["reduction"] == 1 else d.sum())


def _mse_bw_shape(shapes, attrs, cx):
    same_shapes("mse_loss_backward", shapes[1:])
    if len(shapes[0]):  # the loss's gradient: a scalar, or elementwise
        same_shapes("mse_loss_backward", shapes[:2])
    return tuple(shapes[1])


def _mse_bw_ref(xs, attrs):
    g, x, y = xs
    out = 2.0 * (x - y) * g
    return out / x.size if attrs["reduction"] == 1 else out


# mse_loss written out, as a program spells it (passes.fusion collapses it in both programs; family 1218 states each
# spelling, fuzzed): the mean (reduction 1) or the sum (2) of the squared difference, squared by ** 2 or as d * d.
# (reduction 0, (a - y) ** 2 alone, is not declared: every squared difference of a program would become a loss)
_D = "aten.sub.Tensor(?x0, ?x1, alpha=1)"
_SQUARES = (f"aten.pow.Tensor_Scalar({_D}, exponent=2)", f"aten.mul.Tensor({_D}, {_D})")
_MSE_COND = "shape(?x0) == shape(?x1) and floating(dtype(?x0)) and dtype(?x1) == dtype(?x0) and numel(?x0) > 0"
_MSE_EXAMPLES = ({"x0": [2, 3], "x1": [2, 3]}, {"x0": [4], "x1": [4]}, {"x0": [1, 2, 2], "x1": [1, 2, 2]})
MSE_SPELLINGS = tuple((f"aten.{red}({sq}, dtype=None)", _MSE_COND, _MSE_EXAMPLES, {}, {"reduction": r})
                      for red, r in (("mean", 1), ("sum", 2)) for sq in _SQUARES)

OPS = [
    OpDef("aten.mse_loss", 2, _mse_shape, _mse_ref, (_REDUCTION,), doc="Mean/sum/none of (self - target)^2.",
          dtype=lambda ds, a: _float_only("mse_loss")([promote(*ds)], a), fuses=MSE_SPELLINGS),
    OpDef("aten.mse_loss_backward", 3, _mse_bw_shape, _mse_bw_ref, (AttrSpec("reduction", "int"),),
          doc="Gradient of mse_loss w.r.t. self: 2 (self - target) grad_output [/ numel for mean].",
          dtype=lambda ds, a: _float_only("mse_loss_backward")([promote(*ds)], a)),
]
