"""Normalisation layers: softmax and log-softmax (and their backward, from the output), layer norm and its
backward."""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, RowWise, fail, fmt_shape, multi_output, numel

from .helpers import ABSENT, _check_same, _conc, _dim, _float_only, _optional


def _softmax(x, dim):
    e = np.exp(x - np.max(x, axis=dim, keepdims=True))
    return e / np.sum(e, axis=dim, keepdims=True)


def _log_softmax(x, dim):
    z = x - np.max(x, axis=dim, keepdims=True)
    return z - np.log(np.sum(np.exp(z), axis=dim, keepdims=True))


def _softmax_shape(name):
    def f(shapes, attrs, cx):
        x = shapes[0]
        _dim(name, attrs["dim"], len(x))
        if len(shapes) == 2:
            _check_same(name, shapes[0], shapes[1], cx)
        return tuple(x)
    return f


def _sm_dim(x, a):
    return _dim("softmax", a["dim"], x.ndim) if x.ndim else None


def _half_to_float(name):
    """A softmax's result dtype: float32 for a half input under ``half_to_float``; floating inputs only (torch
    has no softmax kernel for integers or booleans)."""
    only = _float_only(name)

    def f(ds, a):
        d = only(ds, a)
        return "float32" if a["half_to_float"] and d in ("float16", "bfloat16") else d
    return f


SOFTMAX_OPS = [
    OpDef("aten._softmax", 1, _softmax_shape("aten._softmax"), lambda xs, a: _softmax(xs[0], _sm_dim(xs[0], a)),
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("half_to_float", "bool")), doc="Softmax along dim.",
          dtype=_half_to_float("_softmax"), rowwise=RowWise("dim"),
          shift_invariant=("dim", "aten.div.Tensor(aten.exp(?x0), {t})",
                           "aten.sum.dim_IntList(aten.exp({x}), dim=[?p_dim], keepdim=true, dtype=None)",
                           {"half_to_float": False})),
    OpDef("aten._log_softmax", 1, _softmax_shape("aten._log_softmax"),
          lambda xs, a: _log_softmax(xs[0], _sm_dim(xs[0], a)),
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("half_to_float", "bool")), doc="Log-softmax along dim.",
          dtype=_half_to_float("_log_softmax"), rowwise=RowWise("dim"), shift_invariant=("dim",)),
    OpDef("aten._softmax_backward_data", 2, _softmax_shape("aten._softmax_backward_data"),
          lambda xs, a: xs[1] * (xs[0] - np.sum(xs[0] * xs[1], axis=_sm_dim(xs[0], a), keepdims=True)),
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("input_dtype", "str")),
          doc="Gradient of softmax from its output: output * (grad - sum(grad * output, dim)).",
          dtype=lambda ds, a: a["input_dtype"], rowwise=RowWise("dim", (0, 1)), linear=(0,)),
    OpDef("aten._log_softmax_backward_data", 2, _softmax_shape("aten._log_softmax_backward_data"),
          lambda xs, a: xs[0] - np.exp(xs[1]) * np.sum(xs[0], axis=_sm_dim(xs[0], a), keepdims=True),
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("input_dtype", "str")),
          doc="Gradient of log-softmax from its output: grad - exp(output) * sum(grad, dim).",
          dtype=lambda ds, a: a["input_dtype"], rowwise=RowWise("dim", (0, 1)), linear=(0,)),
]


def _ln_split(name, x, ns, cx):
    k = len(ns)
    if k == 0 or len(x) < k:
        fail(f"{name}: normalized_shape {fmt_shape(ns)} does not fit input {fmt_shape(x)}")
    _check_same(name, tuple(x[len(x) - k:]), tuple(ns), cx, "trailing input dims and normalized_shape")
    return tuple(x[:len(x) - k]) + (1,) * k


def _ln_shapes(shapes, attrs, cx):
    x, w, b = _optional("aten.native_layer_norm", shapes, attrs["absent"], 3)
    if x is None:
        fail("aten.native_layer_norm: input cannot be absent")
    ns = attrs["normalized_shape"]
    stat = _ln_split("aten.native_layer_norm", x, ns, cx)
    for t in (w, b):
        if t is not None:
            _check_same("aten.native_layer_norm", t, ns, cx, "weight/bias and normalized_shape")
    return [tuple(x), stat, stat]


def _ln_ref(xs, attrs):
    x, w, b = _optional("aten.native_layer_norm", xs, attrs["absent"], 3)
    k = len(attrs["normalized_shape"])
    axes = tuple(range(x.ndim - k, x.ndim))
    mean = np.mean(x, axis=axes, keepdims=True)
    rstd = 1.0 / np.sqrt(np.var(x, axis=axes, keepdims=True) + float(attrs["eps"]))
    out = (x - mean) * rstd
    if w is not None:
        out = out * w
    if b is not None:
        out = out + b
    return [out, mean, rstd]


def _lnb_shapes(shapes, attrs, cx):
    name = "aten.native_layer_norm_backward"
    g, x, mean, rstd, w, b = _optional(name, shapes, attrs["absent"], 6)
    if None in (g, x, mean, rstd):
        fail(f"{name}: only weight and bias may be absent")
    ns = tuple(attrs["normalized_shape"])
    stat = _ln_split(name, x, ns, cx)
    _check_same(name, g, x, cx, "grad_out and input shapes")
    for t in (mean, rstd):
        if not cx.prove("==", numel(t), numel(stat)):
            fail(f"{name}: mean/rstd {fmt_shape(t)} do not match input {fmt_shape(x)}")
    return [tuple(x), tuple(w) if w is not None else ns, tuple(b) if b is not None else ns]


def _lnb_ref(xs, attrs):
    g, x, mean, rstd, w, _b = _optional("aten.native_layer_norm_backward", xs, attrs["absent"], 6)
    ns = _conc(attrs["normalized_shape"])
    k = len(ns)
    axes = tuple(range(x.ndim - k, x.ndim))
    lead = tuple(range(x.ndim - k))
    stat = x.shape[:x.ndim - k] + (1,) * k
    mean, rstd = mean.reshape(stat), rstd.reshape(stat)
    xhat = (x - mean) * rstd
    gw = g * w if w is not None else g
    gx = rstd * (gw - np.mean(gw, axis=axes, keepdims=True) - xhat * np.mean(gw * xhat, axis=axes, keepdims=True))
    d_w = np.sum(g * xhat, axis=lead).reshape(ns)
    d_b = np.sum(g, axis=lead).reshape(ns)
    return [gx, d_w, d_b]


NORM_OPS = (
    multi_output("aten.native_layer_norm", None, _ln_shapes, _ln_ref,
                 (AttrSpec("normalized_shape", "scalars"), AttrSpec("eps", "number"), ABSENT),
                 names=("output", "mean", "rstd"), rowwise=RowWise("normalized_shape", inputs=3),
                 doc="Layer norm over the trailing normalized_shape dims; also returns mean and 1/std "
                     "(shaped like the input with those dims kept as 1). Optional weight/bias via absent.")
    + multi_output("aten.native_layer_norm_backward", None, _lnb_shapes, _lnb_ref,
                   (AttrSpec("normalized_shape", "scalars"), AttrSpec("output_mask", "ints"), ABSENT),
                   names=("grad_input", "grad_weight", "grad_bias"),
                   doc="Gradients of native_layer_norm (all three computed; output_mask, as 0/1 ints, "
                       "only says which torch returns). Optional weight/bias via absent.")
)

# layer norm over the last dim as the ops compute it (family 1228 unfolds it, the variance then too: a layer norm
# of a hidden dim the ranks shard is their deviations from the all-reduced mean over the all-reduced variance):
# the output (without weight and bias, with weight, with both), the mean and 1/std
_LAST = "[rank(?x0) - 1]"
_MEAN = f"aten.mean.dim(?x0, dim={_LAST}, keepdim=true, dtype=None)"
# (eps as the kernel adds it: rounded to float32, the accumulation type of float32 and narrower inputs; float64's own)
_EPS_T = "float32"
_RSTD = (f"aten.rsqrt(aten.add.Tensor(aten.var.correction(?x0, dim={_LAST}, correction=0, keepdim=true),"
         f" aten.scalar_tensor(s=rounded(?p_eps, \"{_EPS_T}\"), dtype={_EPS_T}), alpha=1))")
_NORMED = f"aten.mul.Tensor(aten.sub.Tensor(?x0, {_MEAN}, alpha=1), {_RSTD})"
_LN_COND = ("len(?p_normalized_shape) == 1 and at(?p_normalized_shape, 0) == size(?x0, rank(?x0) - 1)"
            " and size(?x0, rank(?x0) - 1) >= 1 and ?p_eps > 0 and dtype(?x0) == \"float32\"")
_LN_EXAMPLES = [{"x0": x, "x1": x[-1:], "x2": x[-1:], "p_normalized_shape": x[-1:], "p_eps": e}
                for x, e in (([3, 4], 1e-5), ([2, 3, 5], 0.1), ([4, 1], 1e-3), ([1, 6], 1.0))]
_LN_UNFOLDS = {
    "aten.native_layer_norm#0": (
        (_NORMED, _LN_COND, _LN_EXAMPLES, {}, {"absent": [1, 2]}),
        (f"aten.mul.Tensor({_NORMED}, ?x1)", _LN_COND, _LN_EXAMPLES, {}, {"absent": [2]}),
        (f"aten.add.Tensor(aten.mul.Tensor({_NORMED}, ?x1), ?x2, alpha=1)", _LN_COND, _LN_EXAMPLES, {}, {"absent": []})),
    "aten.native_layer_norm#1": ((_MEAN, _LN_COND, _LN_EXAMPLES, {}, {"absent": [1, 2]}),),
    "aten.native_layer_norm#2": ((_RSTD, _LN_COND, _LN_EXAMPLES, {}, {"absent": [1, 2]}),),
}
for _op in NORM_OPS:
    _op.unfolds = _LN_UNFOLDS.get(_op.name, ())


OPS = SOFTMAX_OPS + NORM_OPS
