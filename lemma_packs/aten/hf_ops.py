"""ATen operators HF transformers' models emit beyond the examples' (the TP-plan zoo, bench/hf_zoo.py).

The elementwise maths of activations HF defines itself (xIELU:
``log1p``, ``expm1``). And ``scatter.value``: DeepSeek-V3's group-limited routing marks the groups kept
(``mask.scatter_(1, group_idx, 1)``).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

from .ops import _bin, _bool, _dim, _float_ref, _floating, _n, _un, _with_scalar

def _scatter_value_shape(shapes, attrs, cx):
    x, idx = shapes
    d = _dim("aten.scatter.value", attrs["dim"], len(x))
    if len(idx) != len(x):
        fail(f"aten.scatter.value: index {fmt_shape(idx)} and self {fmt_shape(x)} differ in rank")
    for i in range(len(x)):
        if i != d and not cx.prove("<=", idx[i], x[i]):
            fail(f"aten.scatter.value: index {fmt_shape(idx)} exceeds self {fmt_shape(x)} on dim {i}")
    return tuple(x)


def _scatter_value_ref(xs, attrs):
    x, idx = xs
    out = x.copy()
    if x.ndim == 0:
        return np.full_like(out, _n(attrs["value"]))
    coords = list(np.indices(idx.shape))
    coords[_dim("aten.scatter.value", attrs["dim"], x.ndim)] = idx.astype(np.int64)
    out[tuple(coords)] = _n(attrs["value"])
    return out


HF_OPS = [
    _un("log1p", _float_ref(np.log1p), "Elementwise log(1 + self).", _floating),
    _un("expm1", _float_ref(np.expm1), "Elementwise exp(self) - 1.", _floating),
    OpDef("aten.scatter.value", 2, _scatter_value_shape, _scatter_value_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("value", "number")),
          doc="Copy of self with value written at index along dim (out[index[i][j]][j] = value for dim 0).",
          dtype=_with_scalar("value")),
]
