"""Operators of the ``apex`` dialect: the fused layer norm of NVIDIA Apex (as used by Megatron-LM).

A custom op ``apex::NAME`` (``torch.library.custom_op``) reaches the IR as ``apex.NAME``; its tensor
arguments are inputs in schema order and every other argument is an attribute named as in the schema (the
fx frontend's conventions, see ``lemma_packs/aten/ops/__init__.py``). Like apex's ``forward_affine``, the forward
returns (output, mean, invvar) with the statistics flattened to one value per normalised row ([n1]); the
backward takes them back. References compute in float64.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, fail, fmt_shape, multi_output, numel

FWD, BWD = "apex.fused_layer_norm_affine", "apex.fused_layer_norm_affine_bwd"


def _same(name, a, b, cx, what):
    if len(a) != len(b) or not all(cx.prove("==", x, y) for x, y in zip(a, b)):
        fail(f"{name}: {what} differ: {fmt_shape(a)} vs {fmt_shape(b)}")


def _rows(name, x, ns, cx):
    """n1: the number of normalised rows of x (the product of its dims before normalized_shape)."""
    k = len(ns)
    if k == 0 or len(x) < k:
        fail(f"{name}: normalized_shape {fmt_shape(ns)} does not fit input {fmt_shape(x)}")
    _same(name, tuple(x[len(x) - k:]), tuple(ns), cx, "trailing input dims and normalized_shape")
    return numel(tuple(x[:len(x) - k]))


def _fwd_shapes(shapes, attrs, cx):
    x, w, b = shapes
    ns = tuple(attrs["normalized_shape"])
    n1 = _rows(FWD, x, ns, cx)
    _same(FWD, w, ns, cx, "weight and normalized_shape")
    _same(FWD, b, ns, cx, "bias and normalized_shape")
    return [tuple(x), (n1,), (n1,)]


def _fwd_ref(xs, attrs):
    x, w, b = xs
    axes = tuple(range(x.ndim - len(attrs["normalized_shape"]), x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    invvar = 1.0 / np.sqrt(np.var(x, axis=axes, keepdims=True) + float(attrs["eps"]))
    return [(x - mean) * invvar * w + b, mean.reshape(-1), invvar.reshape(-1)]


def _bwd_shapes(shapes, attrs, cx):
    g, mean, invvar, x, w = shapes
    ns = tuple(attrs["normalized_shape"])
    n1 = _rows(BWD, x, ns, cx)
    _same(BWD, g, x, cx, "grad_output and input shapes")
    _same(BWD, mean, (n1,), cx, "mean and the input's rows")
    _same(BWD, invvar, (n1,), cx, "invvar and the input's rows")
    _same(BWD, w, ns, cx, "weight and normalized_shape")
    return [tuple(x), ns, ns]


def _bwd_ref(xs, attrs):
    g, mean, invvar, x, w = xs
    k = len(attrs["normalized_shape"])
    axes = tuple(range(x.ndim - k, x.ndim))
    stat = x.shape[:x.ndim - k] + (1,) * k
    mean, invvar = mean.reshape(stat), invvar.reshape(stat)
    xhat = (x - mean) * invvar
    gw = g * w
    gx = invvar * (gw - np.mean(gw, axis=axes, keepdims=True) - xhat * np.mean(gw * xhat, axis=axes, keepdims=True))
    return [gx, np.sum((g * xhat).reshape((-1,) + w.shape), axis=0), np.sum(g.reshape((-1,) + w.shape), axis=0)]


def _acc(d: str) -> str:  # apex keeps the statistics in float32 (float64 for float64 input)
    return "float64" if d == "float64" else "float32"


OPS = (
    multi_output(FWD, 3, _fwd_shapes, _fwd_ref, (AttrSpec("normalized_shape", "scalars"), AttrSpec("eps", "number")),
                 names=("output", "mean", "invvar"), dtypes=lambda ds, a: [ds[0], _acc(ds[0]), _acc(ds[0])],
                 doc="Apex fused layer norm with weight and bias over the trailing normalized_shape dims: "
                     "(output, mean, invvar), the statistics flattened to [n1] rows.")
    + multi_output(BWD, 5, _bwd_shapes, _bwd_ref, (AttrSpec("normalized_shape", "scalars"),),
                   names=("grad_input", "grad_weight", "grad_bias"), dtypes=lambda ds, a: [ds[3], ds[4], ds[4]],
                   doc="Gradients of fused_layer_norm_affine from (grad_output, mean, invvar, input, weight).")
)
