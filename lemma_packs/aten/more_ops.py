"""More ATen operators: comparisons and logical ops of two tensors, abs, flip, roll, amin, var, vector norms.

Each declares its algebraic properties (:class:`graphguard.ir.ops.OpDef`), so the engine's lemma families
(engine/families.py) carry it through concatenations, partial sums and scalar factors; flip along a cut dim, which
no property states, has its own lemma (``views_movement.py``, 1250).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, Reduction, RowWise, fail
from graphguard.ir.ops import dtype_category as _cat

from .ops import COMM, DIMS_OPT, DTYPE, KEEPDIM, _bin, _bool, _dims, _n, _reduce_op, _un


def _no_bool(name):
    def f(ds, a):
        if ds[0] in ("bool", "pred"):
            fail(f"aten.{name}: not defined for bool tensors")
        return ds[0]
    return f


def _float_in(name):
    """Defined for floating-point inputs only; the result's dtype is the ``dtype`` attribute where given."""
    def f(ds, a):
        if _cat(ds[0]) != 2 or (a.get("dtype") and _cat(a["dtype"]) != 2):
            fail(f"aten.{name}: needs a floating-point input, got {ds[0]}")
        return a.get("dtype") or ds[0]
    return f


def _var(x, axes, keep, a):
    c = a.get("correction")
    if "unbiased" in a:
        c = 1 if a["unbiased"] else 0
    return np.var(x, axis=axes, keepdims=keep, ddof=1 if c is None else _n(c))


def _vector_norm(x, axes, keep, a):
    o = _n(a["ord"])
    ax = np.abs(x)
    if o == np.inf:
        return np.max(ax, axis=axes, keepdims=keep)
    if o == -np.inf:
        return np.min(ax, axis=axes, keepdims=keep)
    if o == 0:
        return np.sum(ax != 0, axis=axes, keepdims=keep).astype(np.float64)
    return np.sum(ax ** o, axis=axes, keepdims=keep) ** (1.0 / o)


def _flip_shape(shapes, attrs, cx):
    _dims("aten.flip", attrs["dims"], len(shapes[0])) if attrs["dims"] else None
    return tuple(shapes[0])


def _roll_shape(shapes, attrs, cx):
    x, shifts, dims = shapes[0], attrs["shifts"], attrs["dims"]
    if dims:
        _dims("aten.roll", dims, len(x))
    if (len(shifts) != len(dims)) if dims else len(shifts) != 1:
        fail(f"aten.roll: {len(shifts)} shift(s) for dims {list(dims)}")
    return tuple(x)


def _roll_ref(xs, a):
    x, dims = xs[0], a["dims"]
    shifts = [int(s) for s in a["shifts"]]
    if not dims:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, axis=tuple(dims))


OTHER = AttrSpec("other", "number")

OPS = [
    _bin("gt.Tensor", lambda x, y, a: np.greater(x, y), "self > other (broadcasting), bool.", dtype=_bool, computes="gt"),
    _bin("ge.Tensor", lambda x, y, a: np.greater_equal(x, y), "self >= other (broadcasting), bool.", dtype=_bool,
         computes="ge"),
    _bin("ne.Tensor", lambda x, y, a: np.not_equal(x, y), "self != other (broadcasting), bool.", dtype=_bool,
         commutative=True),
    _bin("bitwise_xor.Tensor", lambda x, y, a: np.bitwise_xor(x, y), "self ^ other (bool or integer, broadcasting).",
         **COMM),
    _bin("logical_and", lambda x, y, a: np.logical_and(x, y), "self and other as bool (nonzero is true).",
         dtype=_bool, **COMM),
    _bin("logical_or", lambda x, y, a: np.logical_or(x, y), "self or other as bool (nonzero is true).",
         dtype=_bool, **COMM),
    _bin("logical_xor", lambda x, y, a: np.logical_xor(x, y), "self xor other as bool (nonzero is true).",
         dtype=_bool, **COMM),
    _un("abs", lambda x, a: np.abs(x), "|self| (not for bool).", _no_bool("abs")),
    OpDef("aten.flip", 1, _flip_shape, lambda xs, a: np.flip(xs[0], tuple(a["dims"])).copy() if a["dims"] else xs[0],
          (AttrSpec("dims", "ints", dim_of=0),), doc="Reverse the order of entries along dims.",
          data_movement=True, linear=(0,), rowwise=RowWise("dims")),
    OpDef("aten.roll", 1, _roll_shape, _roll_ref,
          (AttrSpec("shifts", "scalars"), AttrSpec("dims", "ints", (), dim_of=0)),
          doc="Shift entries cyclically by shifts along dims (no dims: along the flattened tensor).",
          data_movement=True, linear=(0,), rowwise=RowWise("dims")),
    _reduce_op("amin", lambda x, axes, keep, a: np.min(x, axis=axes, keepdims=keep),
               (AttrSpec("dim", "ints", (), dim_of=0), KEEPDIM), "Minimum over dims ([] = all).",
               reduction=Reduction("dim", "keepdim", "aten.minimum")),
    _reduce_op("var", _var, (AttrSpec("unbiased", "bool", True),), "Variance of every element (a 0-dim tensor).",
               _float_in("var"), all_dims=True, reduction=Reduction(None)),
    _reduce_op("var.dim", _var, (DIMS_OPT, AttrSpec("unbiased", "bool", True), KEEPDIM),
               "Variance over dims (None or [] = all; unbiased: divide by n - 1).", _float_in("var.dim"),
               reduction=Reduction("dim", "keepdim")),
    _reduce_op("var.correction", _var, (DIMS_OPT, AttrSpec("correction", "number", optional=True), KEEPDIM),
               "Variance over dims (None or [] = all), dividing by n - correction (None: 1).",
               _float_in("var.correction"), reduction=Reduction("dim", "keepdim")),
    _reduce_op("linalg_vector_norm", _vector_norm, (AttrSpec("ord", "number", 2), DIMS_OPT, KEEPDIM, DTYPE),
               "Vector ord-norm over dims (None = all): (sum |x|^ord)^(1/ord); inf: max |x|, -inf: min, 0: count "
               "of nonzeros.", _float_in("linalg_vector_norm"), reduction=Reduction("dim", "keepdim")),
]
