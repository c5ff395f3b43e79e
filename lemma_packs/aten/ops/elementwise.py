"""Elementwise operators: arithmetic with tensors and numbers, comparisons and logical ops, unary maths
(``exp``, ``log1p``, ``floor``, activations and their backward), division with rounding, ``where``,
``masked_fill`` and dtype conversion (``_to_copy``).

Each declares its algebraic properties (:class:`graphguard.ir.ops.OpDef`), so the engine's lemma families
(engine/families.py) carry it through concatenations, partial sums and scalar factors."""
from __future__ import annotations

import math

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, promote
from graphguard.ir.ops import dtype_category as _cat

from .helpers import (DTYPE, _attr_dtype, _bcast_shape, _bin, _bool, _cast, _first, _floating, _id_shape, _n, _un,
                      _with_scalar, broadcast)


COMM = {"commutative": True, "associative": True}
COMM1 = {"commutative": {"alpha": 1}, "associative": {"alpha": 1}}  # x + 1 * y


def _scaled(v, alpha):
    alpha = _n(alpha)
    return v if alpha == 1 else alpha * v


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_SQRT2 = math.sqrt(2.0)
_K = math.sqrt(2.0 / math.pi)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _gelu(x, a):
    if a["approximate"] == "tanh":
        return 0.5 * x * (1.0 + np.tanh(_K * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1.0 + _erf(x / _SQRT2))


def _gelu_backward(g, x, a):
    if a["approximate"] == "tanh":
        inner = _K * (x + 0.044715 * x ** 3)
        t = np.tanh(inner)
        d_inner = _K * (1.0 + 3 * 0.044715 * x ** 2)
        return g * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * d_inner)
    cdf = 0.5 * (1.0 + _erf(x / _SQRT2))
    pdf = np.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)
    return g * (cdf + x * pdf)


def _silu_backward(g, x, a):
    s = _sigmoid(x)
    return g * s * (1.0 + x * (1.0 - s))


def _clamp(x, a):
    lo, hi = a["min"], a["max"]
    out = x
    if lo is not None:
        out = np.maximum(out, _n(lo))
    if hi is not None:
        out = np.minimum(out, _n(hi))
    return out


def _fill_where(x, m, v):
    return np.where(m, np.asarray(v).astype(x.dtype), x)


def _masked_fill_tensor_shape(shapes, attrs, cx):
    if len(shapes[2]) != 0:
        fail(f"aten.masked_fill.Tensor: value must be a 0-dim tensor, got {fmt_shape(shapes[2])}")
    return broadcast("aten.masked_fill.Tensor", shapes[:2], cx)


def _float_ref(fn):
    """Unary float maths (integral inputs promote to float)."""
    return lambda x, a: fn(np.asarray(x, dtype=np.float64) if x.dtype.kind in "biu" else x)


def _div_mode(x, y, a):
    m = a["rounding_mode"]
    if m is None:
        return np.true_divide(x, y)
    if x.dtype.kind in "biu" and y.dtype.kind in "biu":
        if np.any(y == 0):
            fail("aten.div.Tensor_mode: integer division by zero")
        q = np.floor_divide(x, y)
        if m == "trunc":  # toward zero: floor, plus one where the exact quotient is negative and inexact
            q = q + ((q < 0) & (q * y != x))
        return q.astype(np.result_type(x, y))
    q = np.true_divide(x, y)
    return np.trunc(q) if m == "trunc" else np.floor(q)


def _div_mode_dtype(ds, a):
    d = promote(*ds)
    return d if a.get("rounding_mode") is not None or _cat(d) == 2 else "float32"


def _floor(x, a):
    return x.copy() if x.dtype.kind in "biu" else np.floor(x)


def _no_bool(name):
    def f(ds, a):
        if ds[0] in ("bool", "pred"):
            fail(f"aten.{name}: not defined for bool tensors")
        return ds[0]
    return f


ALPHA = AttrSpec("alpha", "number", 1)
OTHER = AttrSpec("other", "number")
APPROX = AttrSpec("approximate", "str", "none", ("none", "tanh"))

ELEMENTWISE_OPS = [
    _bin("add.Tensor", lambda x, y, a: x + _scaled(y, a["alpha"]), "self + alpha * other (broadcasting).",
         attrs=(ALPHA,), linear=((0, 1),), identity=((1, 0, {"alpha": 1}), (0, 0, {"alpha": 1})),
         computes={"add": {"alpha": 1}}, **COMM1),
    _bin("sub.Tensor", lambda x, y, a: x - _scaled(y, a["alpha"]), "self - alpha * other (broadcasting).",
         attrs=(ALPHA,), linear=((0, 1),), identity=((1, 0, {"alpha": 1}),), computes={"sub": {"alpha": 1}}),
    _bin("mul.Tensor", lambda x, y, a: x * y, "self * other (broadcasting).", scaling=True, linear=(0, 1),
         identity=((1, 1, {}), (0, 1, {})), computes="mul", **COMM,
         scalar_form=((1, "aten.mul.Scalar", "other", 1), (0, "aten.mul.Scalar", "other", 1))),
    _bin("div.Tensor", lambda x, y, a: np.true_divide(x, y), "self / other, true division (broadcasting).",
         dtype=_floating, scaling=True, linear=(0,), identity=((1, 1, {}),), computes="div",
         scalar_form=((1, "aten.mul.Scalar", "other", -1),)),
    _bin("maximum", lambda x, y, a: np.maximum(x, y), "Elementwise max (broadcasting).", **COMM),
    _bin("minimum", lambda x, y, a: np.minimum(x, y), "Elementwise min (broadcasting).", **COMM),
    _bin("lt.Tensor", lambda x, y, a: np.less(x, y), "self < other (broadcasting), bool.", dtype=_bool, computes="lt"),
    _bin("eq.Tensor", lambda x, y, a: np.equal(x, y), "self == other (broadcasting), bool.", dtype=_bool,
         commutative=True, computes="eq"),
    _bin("bitwise_or.Tensor", lambda x, y, a: np.bitwise_or(x, y), "self | other (bool or integer, broadcasting).",
         computes="or", **COMM),
    _bin("bitwise_and.Tensor", lambda x, y, a: np.bitwise_and(x, y), "self & other (bool or integer, broadcasting).",
         computes="and", **COMM),
    _un("add.Scalar", lambda x, a: x + _scaled(_n(a["other"]), a["alpha"]), "self + alpha * other (a number).",
        _with_scalar("other", "alpha"), (OTHER, ALPHA)),
    _un("sub.Scalar", lambda x, a: x - _scaled(_n(a["other"]), a["alpha"]), "self - alpha * other (a number).",
        _with_scalar("other", "alpha"), (OTHER, ALPHA)),
    _un("rsub.Scalar", lambda x, a: _n(a["other"]) - _scaled(x, a["alpha"]), "other - alpha * self (other a number).",
        _with_scalar("other", "alpha"), (OTHER, ALPHA)),
    # (not declared a scalar_factor: moving it out of every linear op, with 403 folding factors, grows
    # factor chains without bound on DTensor's scaled biases -- examples/gpt-tp-dtensor)
    _un("mul.Scalar", lambda x, a: x * _n(a["other"]), "self * other (a number).", _with_scalar("other"), (OTHER,),
        linear=(0,), scaling=True),
    _un("div.Scalar", lambda x, a: np.true_divide(x, _n(a["other"])), "self / other (a number), true division.",
        lambda ds, a: ds[0] if _cat(ds[0]) == 2 else "float32", (OTHER,), linear=(0,), scaling=True, divisor="other"),
    _un("pow.Tensor_Scalar", lambda x, a: np.power(x, _n(a["exponent"])), "self ** exponent (a number).",
        _with_scalar("exponent"), (AttrSpec("exponent", "number"),), homogeneous=(2, False, {"exponent": 2})),
    _un("neg", lambda x, a: np.negative(x), "-self.", linear=(0,), scaling=True),
    _un("sqrt", _float_ref(np.sqrt), "Elementwise square root.", _floating),
    _un("rsqrt", _float_ref(lambda x: 1.0 / np.sqrt(x)), "Elementwise 1 / sqrt(self).", _floating),
    _un("exp", _float_ref(np.exp), "Elementwise exp.", _floating, computes="exp", positive=True),
    _un("log", _float_ref(np.log), "Elementwise natural log.", _floating),
    _un("cos", _float_ref(np.cos), "Elementwise cosine.", _floating, computes="cos"),
    _un("sin", _float_ref(np.sin), "Elementwise sine.", _floating, computes="sin"),
    _un("tanh", _float_ref(np.tanh), "Elementwise tanh.", _floating),
    _un("sigmoid", _float_ref(_sigmoid), "Elementwise 1 / (1 + exp(-self)).", _floating, computes="logistic",
        positive=True),
    _un("silu", lambda x, a: x * _sigmoid(x), "Elementwise self * sigmoid(self) (SiLU / swish).", computes="silu"),
    _un("relu", lambda x, a: np.maximum(x, np.zeros((), x.dtype)), "Elementwise max(self, 0).",
        homogeneous=(1, True, {})),
    _un("gelu", _gelu, "GELU: exact (erf) or tanh approximation.", attrs=(APPROX,)),
    _un("clamp", _clamp, "Clamp to [min, max] (either bound may be None).", _with_scalar("min", "max"),
        (AttrSpec("min", "number", optional=True), AttrSpec("max", "number", optional=True))),
    _un("bitwise_not", lambda x, a: np.invert(x), "~self (logical not for bool)."),
    _un("logical_not", lambda x, a: np.logical_not(x), "not self, as bool.", _bool),
    _un("lt.Scalar", lambda x, a: x < _n(a["other"]), "self < other (a number), bool.", _bool, (OTHER,)),
    _un("le.Scalar", lambda x, a: x <= _n(a["other"]), "self <= other (a number), bool.", _bool, (OTHER,)),
    _un("gt.Scalar", lambda x, a: x > _n(a["other"]), "self > other (a number), bool.", _bool, (OTHER,)),
    _un("ge.Scalar", lambda x, a: x >= _n(a["other"]), "self >= other (a number), bool.", _bool, (OTHER,)),
    _un("eq.Scalar", lambda x, a: x == _n(a["other"]), "self == other (a number), bool.", _bool, (OTHER,)),
    _un("ne.Scalar", lambda x, a: x != _n(a["other"]), "self != other (a number), bool.", _bool, (OTHER,)),
    # backward of activations (grad first, same shapes after broadcasting)
    _bin("gelu_backward", _gelu_backward, "Gradient of gelu: grad_output * gelu'(self).", attrs=(APPROX,),
         linear=(0,)),
    _bin("sigmoid_backward", lambda g, y, a: g * y * (1.0 - y),
         "Gradient of sigmoid from its output: grad_output * output * (1 - output).", linear=(0,)),
    _bin("tanh_backward", lambda g, y, a: g * (1.0 - y * y),
         "Gradient of tanh from its output: grad_output * (1 - output^2).", linear=(0,)),
    _bin("silu_backward", _silu_backward, "Gradient of silu: grad_output * silu'(self).", linear=(0,)),
    _bin("threshold_backward", lambda g, x, a: np.where(x <= _n(a["threshold"]), np.zeros((), g.dtype), g),
         "grad_output where self > threshold, else 0 (relu's backward with threshold 0).",
         attrs=(AttrSpec("threshold", "number"),), linear=(0,)),
    OpDef("aten.where.self", 3, _bcast_shape("aten.where.self"), lambda xs, a: np.where(*xs), doc=
          "condition ? self : other (broadcasting).", dtype=lambda ds, a: promote(*ds[1:]),
          elementwise=(0, 1, 2), broadcasting=True, linear=((1, 2),), computes="where"),
    OpDef("aten.masked_fill.Scalar", 2, _bcast_shape("aten.masked_fill.Scalar"),
          lambda xs, a: _fill_where(xs[0], xs[1], _n(a["value"])), (AttrSpec("value", "number"),),
          doc="self with value where mask is true (broadcasting self and mask).", elementwise=(0, 1),
          broadcasting=True, linear=(0,), linear_when={"value": 0}),
    OpDef("aten.masked_fill.Tensor", 3, _masked_fill_tensor_shape,
          lambda xs, a: _fill_where(xs[0], xs[1], xs[2]),
          doc="self with the 0-dim tensor value where mask is true (broadcasting self and mask).",
          elementwise=(0, 1), broadcasting=True),
    OpDef("aten._to_copy", 1, _id_shape, lambda xs, a: _cast(xs[0], a), (DTYPE,),
          doc="A copy, converted to dtype when given (device/layout/memory format ignored).",
          dtype=_attr_dtype(_first), elementwise=(0,)),
]


OPS = ELEMENTWISE_OPS + [
    _bin("le.Tensor", lambda x, y, a: np.less_equal(x, y), "self <= other (broadcasting), bool.", dtype=_bool,
         computes="le"),
    _un("log1p", _float_ref(np.log1p), "Elementwise log(1 + self).", _floating),
    _un("expm1", _float_ref(np.expm1), "Elementwise exp(self) - 1.", _floating),
    _un("floor", _floor, "Round down (integers unchanged).", lambda ds, a: ds[0]),
    _bin("div.Tensor_mode", _div_mode,
         "self / other (broadcasting), rounded toward zero (rounding_mode 'trunc') or down ('floor'); None: true "
         "division.", dtype=_div_mode_dtype,
         attrs=(AttrSpec("rounding_mode", "str", optional=True, choices=("trunc", "floor")),)),
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
]
