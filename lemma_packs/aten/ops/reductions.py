"""Reductions: sums, means, maxima and minima over dims (and their indices: ``max.dim``, ``argmax``, ``topk``),
cumulative sums, variances and vector norms."""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, Reduction, RowWise, fail, multi_output
from graphguard.ir.ops import dtype_category as _cat

from .helpers import DTYPE, _acc_dtype, _attr_dtype, _dim, _dims, _float_only, _int64, _n, _np_dtype


def _reduced(name, x, dims, keepdim):
    ds = _dims(name, dims, len(x))
    if keepdim:
        return tuple(1 if i in ds else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in ds)


def _reduce_op(name, fn, attrs, doc, dtype=None, all_dims=False, **props):
    full = f"aten.{name}"

    def shape(shapes, a, cx):
        return () if all_dims else _reduced(full, shapes[0], a["dim"], a["keepdim"])

    def ref(xs, a):
        x = xs[0]
        axes = None if all_dims else _dims(full, a["dim"], x.ndim)
        keep = False if all_dims else a["keepdim"]
        return np.asarray(fn(x, axes, keep, a))
    return OpDef(full, 1, shape, ref, attrs, doc=doc, dtype=dtype, **props)


def _sum(x, axes, keep, a):
    return np.sum(x, axis=axes, keepdims=keep, dtype=_np_dtype(_acc_dtype([x.dtype.name], a) if a.get("dtype")
                                                                is None else a["dtype"]))


def _mean(x, axes, keep, a):
    return np.mean(x, axis=axes, keepdims=keep, dtype=_np_dtype(a.get("dtype")) if a.get("dtype") else None)


def _topk_shapes(shapes, attrs, cx):
    x = shapes[0]
    d = _dim("aten.topk", attrs["dim"], len(x))
    k = attrs["k"]
    n = x[d] if x else 1
    if not (cx.prove(">=", k, 0) and cx.prove("<=", k, n)):
        fail(f"aten.topk: k={S.text(k)} is not within 0..{S.text(n)}")
    out = list(x)
    if x:
        out[d] = S.norm(k)
    return [tuple(out), tuple(out)]


def _topk_ref(xs, attrs):
    x = xs[0]
    if x.ndim == 0:
        return [x.copy(), np.zeros((), np.int64)]
    d = _dim("aten.topk", attrs["dim"], x.ndim)
    k = int(attrs["k"])
    order = np.argsort(-x if attrs["largest"] else x, axis=d, kind="stable")
    idx = np.take(order, np.arange(k), axis=d)
    return [np.take_along_axis(x, idx, axis=d), idx.astype(np.int64)]


def _max_dim_shapes(shapes, attrs, cx):
    out = _reduced("aten.max.dim", shapes[0], (attrs["dim"],), attrs["keepdim"])
    return [out, out]


def _max_dim_ref(xs, attrs):
    x = xs[0]
    if x.ndim == 0:
        return [x.copy(), np.zeros((), np.int64)]
    d = _dim("aten.max.dim", attrs["dim"], x.ndim)
    idx = np.argmax(x, axis=d, keepdims=attrs["keepdim"])
    return [np.max(x, axis=d, keepdims=attrs["keepdim"]), idx.astype(np.int64)]


def _argmax_shape(shapes, attrs, cx):
    x = shapes[0]
    if attrs["dim"] is None:
        return (1,) * len(x) if attrs["keepdim"] else ()
    return _reduced("aten.argmax", x, (attrs["dim"],), attrs["keepdim"])


def _argmax_ref(xs, attrs):
    x = xs[0]
    if attrs["dim"] is None:
        i = np.asarray(np.argmax(x), dtype=np.int64)
        return i.reshape((1,) * x.ndim) if attrs["keepdim"] else i
    if x.ndim == 0:
        return np.zeros((), np.int64)
    return np.argmax(x, axis=_dim("aten.argmax", attrs["dim"], x.ndim), keepdims=attrs["keepdim"]).astype(np.int64)


def _cumsum_ref(xs, a):
    x = xs[0]
    dt = _np_dtype(a["dtype"] if a["dtype"] else _acc_dtype([x.dtype.name], a))
    if x.ndim == 0:
        return x.astype(dt)
    return np.cumsum(x, axis=_dim("aten.cumsum", a["dim"], x.ndim), dtype=dt)


def _cumsum_shape(shapes, a, cx):
    _dim("aten.cumsum", a["dim"], len(shapes[0]))
    return tuple(shapes[0])


DIMS_OPT = AttrSpec("dim", "ints", optional=True, dim_of=0)
KEEPDIM = AttrSpec("keepdim", "bool", False)


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


REDUCTION_OPS = [
    _reduce_op("sum", _sum, (DTYPE,), "Sum of every element (a 0-dim tensor).", _attr_dtype(_acc_dtype),
               all_dims=True, reduction=Reduction(None, combine="sum"), linear=(0,)),
    _reduce_op("sum.dim_IntList", _sum, (DIMS_OPT, KEEPDIM, DTYPE),
               "Sum over dims (None or [] = all), keepdim optional.", _attr_dtype(_acc_dtype),
               reduction=Reduction("dim", "keepdim", "sum"), linear=(0,)),
    _reduce_op("mean", _mean, (DTYPE,), "Mean of every element (a 0-dim tensor).", _float_only("mean"),
               all_dims=True, reduction=Reduction(None), linear=(0,)),
    _reduce_op("mean.dim", _mean, (DIMS_OPT, KEEPDIM, DTYPE), "Mean over dims (None or [] = all).",
               _float_only("mean.dim"), reduction=Reduction("dim", "keepdim"), linear=(0,)),
    _reduce_op("amax", lambda x, axes, keep, a: np.max(x, axis=axes, keepdims=keep),
               (AttrSpec("dim", "ints", (), dim_of=0), KEEPDIM), "Maximum over dims ([] = all).",
               reduction=Reduction("dim", "keepdim", "max")),
    OpDef("aten.argmax", 1, _argmax_shape, _argmax_ref, (AttrSpec("dim", "int", optional=True, dim_of=0), KEEPDIM),
          doc="Index of the (first) maximum along dim, or in the flattened tensor when dim is None.",
          dtype=_int64, reduction=Reduction("dim", "keepdim")),
    OpDef("aten.cumsum", 1, _cumsum_shape, _cumsum_ref, (AttrSpec("dim", "int", dim_of=0), DTYPE),
          doc="Inclusive cumulative sum along dim.", dtype=_attr_dtype(_acc_dtype), rowwise=RowWise("dim"),
          linear=(0,)),
] + multi_output("aten.max.dim", 1, _max_dim_shapes, _max_dim_ref, (AttrSpec("dim", "int", dim_of=0), KEEPDIM),
                 names=("values", "indices"), dtypes=lambda ds, a: [ds[0], "int64"],
                 doc="Maximum along dim and the index of its first occurrence.",
                 reduction=Reduction("dim", "keepdim")) \
  + multi_output("aten.topk", 1, _topk_shapes, _topk_ref,
                 (AttrSpec("k", "scalar"), AttrSpec("dim", "int", -1, dim_of=0), AttrSpec("largest", "bool", True),
                  AttrSpec("sorted", "bool", True)),
                 names=("values", "indices"), dtypes=lambda ds, a: [ds[0], "int64"],
                 doc="The k largest (or smallest) entries along dim, sorted (stable for ties), and their "
                     "indices.", rowwise=RowWise("dim"))


_MAX_VALUES = next(o for o in REDUCTION_OPS if o.name == "aten.max.dim#0")
_MAX_VALUES.reduction = Reduction("dim", "keepdim", "max")  # (the indices of two halves do not combine)


# the variance over one dim as the ops compute it in two passes: the sum of the squared deviations from the mean,
# divided by n - correction (family 1228 unfolds it, so a variance over a sharded dim is the ranks' sums of
# squared deviations from the all-reduced mean, all-reduced). The one-pass form, mean(x ** 2) - mean(x) ** 2, is
# equal over the reals only: it cancels catastrophically (negative where the variance is tiny), so no lemma states it
_DEV = "aten.sub.Tensor(?x0, aten.mean.dim(?x0, dim=?p_dim, keepdim=true, dtype=None), alpha=1)"
VAR_UNFOLDS = ((f"aten.div.Scalar(aten.sum.dim_IntList(aten.pow.Tensor_Scalar({_DEV}, exponent=2), dim=?p_dim,"
                " keepdim=?p_keepdim, dtype=None), other=size(?x0, at(?p_dim, 0)) - ?p_correction)",
                "len(?p_dim) == 1 and size(?x0, at(?p_dim, 0)) - ?p_correction >= 1 and floating(dtype(?x0))",
                [{"x0": x, "p_dim": [d], "p_correction": c, "p_keepdim": k}
                 for x, d, c, k in (([3, 4], 1, 0, True), ([3, 4], 0, 1, False), ([2, 3, 5], 2, 1, True),
                                    ([5], 0, 0, False), ([4, 2], 1, 1, True))]),)

OPS = REDUCTION_OPS + [
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
               _float_in("var.correction"), reduction=Reduction("dim", "keepdim"), unfolds=VAR_UNFOLDS),
    _reduce_op("linalg_vector_norm", _vector_norm, (AttrSpec("ord", "number", 2), DIMS_OPT, KEEPDIM, DTYPE),
               "Vector ord-norm over dims (None = all): (sum |x|^ord)^(1/ord); inf: max |x|, -inf: min, 0: count "
               "of nonzeros.", _float_in("linalg_vector_norm"), reduction=Reduction("dim", "keepdim")),
]
