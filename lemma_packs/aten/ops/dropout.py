"""Dropout: ``native_dropout`` (a fixed-seed mask in the reference) and its backward."""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, multi_output

from .helpers import _bcast_shape


_DROPOUT_SEED = 0


def _dropout_mask(shape, p: float, train) -> np.ndarray:
    """The reference's mask: all true when p == 0 or not training; otherwise a *fixed-seed* Bernoulli(1-p)
    draw (numpy default_rng(0)) -- only its distribution, not its values, matches torch."""
    if p == 0 or train is False:
        return np.ones(shape, dtype=bool)
    if p >= 1:
        return np.zeros(shape, dtype=bool)
    return np.random.default_rng(_DROPOUT_SEED).random(shape) >= p


def _dropout_ref(xs, attrs):
    (x,) = xs
    p = float(attrs["p"])
    mask = _dropout_mask(x.shape, p, attrs["train"])
    if p == 0 or attrs["train"] is False:
        return [x.copy(), mask]
    if p >= 1:
        return [np.zeros_like(x), mask]
    return [x * mask / (1.0 - p), mask]


DROPOUT_BACKWARD = OpDef(
    "aten.native_dropout_backward", 2, _bcast_shape("aten.native_dropout_backward"),
    lambda xs, a: xs[0] * xs[1] * float(a["scale"]), (AttrSpec("scale", "number"),),
    doc="grad_output * mask * scale.", elementwise=(0, 1), broadcasting=True, linear=(0,))


OPS = multi_output("aten.native_dropout", 1, lambda s, a, cx: [tuple(s[0]), tuple(s[0])], _dropout_ref,
                   (AttrSpec("p", "number"), AttrSpec("train", "bool", optional=True)),
                   names=("output", "mask"), dtypes=lambda ds, a: [ds[0], "bool"],
                   doc="Dropout: (input * mask / (1 - p), mask). Identity with an all-true mask when p == 0 "
                       "or train is false; otherwise the reference draws a fixed-seed mask.") + [DROPOUT_BACKWARD]
