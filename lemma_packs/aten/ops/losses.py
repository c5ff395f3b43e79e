"""Losses: ``mse_loss`` and its backward."""
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


OPS = [
    OpDef("aten.mse_loss", 2, _mse_shape, _mse_ref, (_REDUCTION,), doc="Mean/sum/none of (self - target)^2.",
          dtype=lambda ds, a: _float_only("mse_loss")([promote(*ds)], a)),
    OpDef("aten.mse_loss_backward", 3, _mse_bw_shape, _mse_bw_ref, (AttrSpec("reduction", "int"),),
          doc="Gradient of mse_loss w.r.t. self: 2 (self - target) grad_output [/ numel for mean].",
          dtype=lambda ds, a: _float_only("mse_loss_backward")([promote(*ds)], a)),
]
