"""Compute operators of the ``aten`` dialect: PyTorch ATen ops as the PyTorch frontend emits them.

Conventions shared with the frontend:

* name: ``aten.<op>`` plus ``.<overload>`` unless the overload is ``default`` (``aten.add.Tensor``);
* inputs: the schema's Tensor arguments in schema order (a ``Tensor[]`` contributes its elements);
  every other argument is an attribute named as in the schema -- int -> int, SymInt -> scalar,
  int[] -> ints, SymInt[] -> scalars, float/Scalar -> number, bool -> bool, str -> str,
  ScalarType -> str (a numpy-style dtype name such as ``float32``); bool[] (only ``output_mask``) -> ints
  of 0/1. Device, layout, memory-format, pin-memory, non-blocking and generator arguments are dropped;
* optional tensors (``Tensor?``, ``Tensor?[]``): only present ones are inputs, and the attribute
  ``absent`` lists the positions, in the flattened tensor-argument list, of the missing ones;
* ops with several outputs are defined with :func:`multi_output` (``aten.max.dim#0``, ``#1``).

References compute floating point in float64 whatever the declared float dtype (``float32``,
``bfloat16``...); integer and bool results keep their exact dtype.

The helpers here (``_bin``, ``_un``, ``broadcast``...) are what the modules beside this one build their ops with
(``hf_ops``, ``zoo_ops``, ``more_ops``...); this module imports none of them -- the pack's ``__init__`` joins the
lists.
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import (AttrSpec, Bilinear, OpDef, Reduction, RowWise, fail, float_to_int, fmt_shape, multi_output,
                               numel, promote, same_shapes)
from graphguard.ir.ops import dtype_category as _cat

# =================================================================================================
# Helpers: dims, broadcasting, optional inputs, attribute values, dtypes
# =================================================================================================


def _dim(name: str, d: int, rank: int) -> int:
    """Normalise a (possibly negative) dim; a rank-0 tensor accepts dim 0 / -1 as torch does."""
    r = max(rank, 1)
    if not -r <= d < r:
        fail(f"{name}: dim {d} out of range for a rank-{rank} tensor")
    return d % r


def _dims(name: str, dims, rank: int) -> tuple[int, ...]:
    """Normalised reduction dims; None or () mean every dim."""
    if not dims:
        return tuple(range(rank))
    out = tuple(_dim(name, d, rank) for d in dims)
    if len(set(out)) != len(out):
        fail(f"{name}: dim {list(dims)} repeats a dimension")
    return tuple(d for d in out if d < rank)


def _same(cx, a, b) -> bool:
    return cx.prove("==", a, b)


def broadcast(name: str, shapes, cx) -> tuple:
    """NumPy/torch broadcasting of several shapes (dims equal, or one of them provably 1)."""
    r = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(r):
        d = 1
        for s in shapes:
            j = len(s) - r + i
            if j < 0:
                continue
            x = s[j]
            if _same(cx, x, 1) or _same(cx, x, d):
                continue
            if _same(cx, d, 1):
                d = x
                continue
            fail(f"{name}: shapes {', '.join(fmt_shape(t) for t in shapes)} do not broadcast "
                 f"({S.text(d)} vs {S.text(x)} on dim {i})")
        out.append(S.norm(d))
    return tuple(out)


def broadcasts_to(name: str, s, target, cx, what: str = "operand") -> None:
    """``s`` broadcasts to ``target`` without changing it (each trailing dim of s is 1 or equal)."""
    k = len(target) - len(s)
    if k < 0 or not all(_same(cx, d, 1) or _same(cx, d, target[k + i]) for i, d in enumerate(s)):
        fail(f"{name}: {what} {fmt_shape(s)} does not broadcast to {fmt_shape(target)}")


def _check_same(name: str, a, b, cx, what: str = "shapes") -> None:
    if len(a) != len(b) or not all(_same(cx, x, y) for x, y in zip(a, b)):
        fail(f"{name}: {what} differ: {fmt_shape(a)} vs {fmt_shape(b)}")


def _optional(name: str, xs, absent, total: int | None = None) -> list:
    """Re-insert None for absent optional tensors: the full (flattened) tensor-argument list."""
    absent = set(absent or ())
    n = len(xs) + len(absent)
    if total is not None and n != total:
        fail(f"{name}: {len(xs)} input(s) and {len(absent)} absent position(s) do not make {total} "
             f"tensor arguments")
    if any(not 0 <= p < n for p in absent):
        fail(f"{name}: absent positions {sorted(absent)} out of range")
    it = iter(xs)
    return [None if i in absent else next(it) for i in range(n)]


def _n(v):
    """A number attribute as a Python value: integral Fractions become ints (exact integer maths)."""
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else float(v)
    if isinstance(v, (int, float)):
        return v
    return float(v)


def _integral(v) -> bool:
    return v is None or (isinstance(v, Fraction) and v.denominator == 1) or (isinstance(v, int))


def _conc(shape) -> list[int]:
    return [int(d) for d in shape]


def _np_dtype(d: str | None):
    """The NumPy dtype a reference computes in: float64 for every float dtype."""
    if d is None or _cat(d) == 2:
        return np.float64
    if d in ("bool", "pred"):
        return np.bool_
    try:
        return np.dtype(d)
    except TypeError:
        return np.int64


def _first(ds, a):
    return ds[0] if ds else "float32"


def _promoted(ds, a):
    return promote(*ds)


def _floating(ds, a):
    d = promote(*ds)
    return d if _cat(d) == 2 else "float32"


def _with_scalar(*keys):
    """Tensor op scalar: an integral tensor with a non-integral number becomes float32; bool with a number
    becomes int64."""
    def f(ds, a):
        d = ds[0]
        vals = [a.get(k) for k in keys]
        if _cat(d) < 2 and not all(_integral(v) for v in vals):
            return "float32"
        if _cat(d) == 0 and any(v is not None for v in vals):
            return "int64"
        return d
    return f


def _bool(ds, a):
    return "bool"


def _int64(ds, a):
    return "int64"


def _attr_dtype(default):
    """The ``dtype`` attribute when given, else ``default(ds, a)``."""
    def f(ds, a):
        return a.get("dtype") or default(ds, a)
    return f


def _float_only(name):
    """Ops torch defines for floating-point inputs and results only (mean, mse_loss): the result's dtype (the
    ``dtype`` attribute where given, else the input's)."""
    def f(ds, a):
        d = a.get("dtype") or (ds[0] if ds else "float32")
        if _cat(d) != 2:
            fail(f"aten.{name}: needs a floating-point input and result, got {d}")
        return d
    return f


def _acc_dtype(ds, a):
    """sum/cumsum without dtype: integral inputs accumulate in int64."""
    return "int64" if _cat(ds[0]) < 2 else ds[0]


def _cast(x, a, key="dtype"):
    d = a.get(key)
    return np.asarray(x) if d is None else float_to_int(x, _np_dtype(d))


DTYPE = AttrSpec("dtype", "str", optional=True)


# =================================================================================================
# Matrix products
# =================================================================================================


def _mm_shape(shapes, attrs, cx):
    a, b = shapes[-2:]
    if len(a) != 2 or len(b) != 2:
        fail(f"aten.mm: expects rank-2 tensors, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not _same(cx, a[1], b[0]):
        fail(f"aten.mm: inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    return (a[0], b[1])


def _bmm_shape(shapes, attrs, cx):
    a, b = shapes[-2:]
    if len(a) != 3 or len(b) != 3:
        fail(f"aten.bmm: expects rank-3 tensors, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not _same(cx, a[0], b[0]):
        fail(f"aten.bmm: batch dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    if not _same(cx, a[2], b[1]):
        fail(f"aten.bmm: inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    return (a[0], a[1], b[2])


def _addmm_shape(name, inner):
    def f(shapes, attrs, cx):
        out = inner(shapes, attrs, cx)
        broadcasts_to(name, shapes[0], out, cx, "self")
        return out
    return f


def _addmm_ref(xs, a):
    s, m1, m2 = xs
    beta, alpha = _n(a["beta"]), _n(a["alpha"])
    prod = np.matmul(m1, m2)
    prod = prod if alpha == 1 else alpha * prod
    if beta == 0:
        return prod + np.zeros_like(s)  # torch ignores self (even nan/inf) when beta == 0
    return (s if beta == 1 else beta * s) + prod


BETA_ALPHA = (AttrSpec("beta", "number", 1), AttrSpec("alpha", "number", 1))

MATMUL_OPS = [
    OpDef("aten.mm", 2, _mm_shape, lambda xs, a: xs[0] @ xs[1], doc="Matrix product of rank-2 tensors.",
          linear=(0, 1), rows=(0, 1), bilinear=Bilinear((), (1,), (), (0,), ranks=(2, 2))),
    OpDef("aten.bmm", 2, _bmm_shape, lambda xs, a: np.matmul(xs[0], xs[1]),
          doc="Batched matrix product of rank-3 tensors (same batch size).", linear=(0, 1),
          bilinear=Bilinear((0,), (2,), (0,), (1,), ranks=(3, 3))),
    OpDef("aten.addmm", 3, _addmm_shape("aten.addmm", _mm_shape), _addmm_ref, BETA_ALPHA,
          doc="beta * self + alpha * (mat1 @ mat2); self broadcasts to the product.",
          biased=("aten.mm", "aten.add.Tensor", {"beta": 1, "alpha": 1})),
    OpDef("aten.baddbmm", 3, _addmm_shape("aten.baddbmm", _bmm_shape), _addmm_ref, BETA_ALPHA,
          doc="beta * self + alpha * bmm(batch1, batch2); self broadcasts to the product."),
]


# =================================================================================================
# Elementwise
# =================================================================================================


def _bcast_shape(name):
    return lambda shapes, attrs, cx: broadcast(name, shapes, cx)


def _id_shape(shapes, attrs, cx):
    return tuple(shapes[0])


def _bin(name, fn, doc, dtype=_promoted, attrs=(), scaling=False, **props):
    """A binary elementwise op (broadcasting); ``props``: its other algebraic properties."""
    return OpDef(f"aten.{name}", 2, _bcast_shape(f"aten.{name}"), lambda xs, a: fn(xs[0], xs[1], a), attrs,
                 doc=doc, dtype=dtype, scaling=scaling, elementwise=(0, 1), broadcasting=True, **props)


def _un(name, fn, doc, dtype=None, attrs=(), **props):
    """A unary elementwise op."""
    return OpDef(f"aten.{name}", 1, _id_shape, lambda xs, a: fn(xs[0], a), attrs, doc=doc, dtype=dtype,
                 elementwise=(0,), **props)


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


ALPHA = AttrSpec("alpha", "number", 1)
OTHER = AttrSpec("other", "number")
APPROX = AttrSpec("approximate", "str", "none", ("none", "tanh"))

ELEMENTWISE_OPS = [
    _bin("add.Tensor", lambda x, y, a: x + _scaled(y, a["alpha"]), "self + alpha * other (broadcasting).",
         attrs=(ALPHA,), linear=((0, 1),), identity=((1, 0, {"alpha": 1}), (0, 0, {"alpha": 1})), **COMM1),
    _bin("sub.Tensor", lambda x, y, a: x - _scaled(y, a["alpha"]), "self - alpha * other (broadcasting).",
         attrs=(ALPHA,), linear=((0, 1),), identity=((1, 0, {"alpha": 1}),)),
    _bin("mul.Tensor", lambda x, y, a: x * y, "self * other (broadcasting).", scaling=True, linear=(0, 1),
         identity=((1, 1, {}), (0, 1, {})), computes="mul", **COMM,
         scalar_form=((1, "aten.mul.Scalar", "other", 1), (0, "aten.mul.Scalar", "other", 1))),
    _bin("div.Tensor", lambda x, y, a: np.true_divide(x, y), "self / other, true division (broadcasting).",
         dtype=_floating, scaling=True, linear=(0,), identity=((1, 1, {}),),
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
        _with_scalar("exponent"), (AttrSpec("exponent", "number"),)),
    _un("neg", lambda x, a: np.negative(x), "-self.", linear=(0,), scaling=True),
    _un("sqrt", _float_ref(np.sqrt), "Elementwise square root.", _floating),
    _un("rsqrt", _float_ref(lambda x: 1.0 / np.sqrt(x)), "Elementwise 1 / sqrt(self).", _floating),
    _un("exp", _float_ref(np.exp), "Elementwise exp.", _floating, computes="exp"),
    _un("log", _float_ref(np.log), "Elementwise natural log.", _floating),
    _un("cos", _float_ref(np.cos), "Elementwise cosine.", _floating, computes="cos"),
    _un("sin", _float_ref(np.sin), "Elementwise sine.", _floating, computes="sin"),
    _un("tanh", _float_ref(np.tanh), "Elementwise tanh.", _floating),
    _un("sigmoid", _float_ref(_sigmoid), "Elementwise 1 / (1 + exp(-self)).", _floating, computes="logistic"),
    _un("silu", lambda x, a: x * _sigmoid(x), "Elementwise self * sigmoid(self) (SiLU / swish).", computes="silu"),
    _un("relu", lambda x, a: np.maximum(x, np.zeros((), x.dtype)), "Elementwise max(self, 0)."),
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


# =================================================================================================
# Softmax, layer norm, dropout
# =================================================================================================


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
          dtype=_half_to_float("_softmax"), rowwise=RowWise("dim")),
    OpDef("aten._log_softmax", 1, _softmax_shape("aten._log_softmax"),
          lambda xs, a: _log_softmax(xs[0], _sm_dim(xs[0], a)),
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("half_to_float", "bool")), doc="Log-softmax along dim.",
          dtype=_half_to_float("_log_softmax"), rowwise=RowWise("dim")),
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

ABSENT = AttrSpec("absent", "ints", default=())


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
    + multi_output("aten.native_dropout", 1, lambda s, a, cx: [tuple(s[0]), tuple(s[0])], _dropout_ref,
                   (AttrSpec("p", "number"), AttrSpec("train", "bool", optional=True)),
                   names=("output", "mask"), dtypes=lambda ds, a: [ds[0], "bool"],
                   doc="Dropout: (input * mask / (1 - p), mask). Identity with an all-true mask when p == 0 "
                       "or train is false; otherwise the reference draws a fixed-seed mask.")
)

DROPOUT_BACKWARD = OpDef(
    "aten.native_dropout_backward", 2, _bcast_shape("aten.native_dropout_backward"),
    lambda xs, a: xs[0] * xs[1] * float(a["scale"]), (AttrSpec("scale", "number"),),
    doc="grad_output * mask * scale.", elementwise=(0, 1), broadcasting=True, linear=(0,))


# =================================================================================================
# Reductions
# =================================================================================================


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


# =================================================================================================
# Indexing and embeddings
# =================================================================================================


def _embedding_shape(shapes, attrs, cx):
    w, idx = shapes
    if len(w) != 2:
        fail(f"aten.embedding: weight must be rank 2, got {fmt_shape(w)}")
    return tuple(idx) + (w[1],)


def _embedding_backward_shape(shapes, attrs, cx):
    g, idx = shapes
    if len(g) != len(idx) + 1:
        fail(f"aten.embedding_dense_backward: grad_output {fmt_shape(g)} is not indices {fmt_shape(idx)} "
             f"plus an embedding dim")
    _check_same("aten.embedding_dense_backward", tuple(g[:-1]), tuple(idx), cx,
                "grad_output leading dims and indices shape")
    return (S.norm(attrs["num_weights"]), g[-1])


def _embedding_backward_ref(xs, attrs):
    g, idx = xs
    n, pad = int(attrs["num_weights"]), int(attrs["padding_idx"])
    g = g.reshape(-1, g.shape[-1])
    idx = idx.reshape(-1).astype(np.int64)
    if attrs["scale_grad_by_freq"]:
        g = g / np.bincount(idx, minlength=n)[idx][:, None]
    keep = idx != pad
    out = np.zeros((n, g.shape[1]), dtype=g.dtype)
    np.add.at(out, idx[keep], g[keep])
    return out


def _index_parts(name, shapes, absent, extra: int):
    """(self, [index or None ...], trailing inputs) of index.Tensor / index_put."""
    full = _optional(name, shapes, absent)
    if full[0] is None or any(t is None for t in full[len(full) - extra:]):
        fail(f"{name}: only entries of indices may be absent")
    return full[0], full[1:len(full) - extra], full[len(full) - extra:]


def _indexed_shape(name, x, idx, cx):
    """Shape of x[idx] under numpy/torch advanced indexing (integer index tensors)."""
    if len(idx) > len(x):
        fail(f"{name}: {len(idx)} indices for a rank-{len(x)} tensor")
    present = [i for i, t in enumerate(idx) if t is not None]
    if not present:
        return tuple(x)
    b = broadcast(name, [idx[i] for i in present], cx)
    rest = [d for i, d in enumerate(x[:len(idx)]) if idx[i] is None]
    tail = list(x[len(idx):])
    if present == list(range(present[0], present[-1] + 1)):  # adjacent: the index dims replace them in place
        return tuple(x[:present[0]]) + b + tuple(x[present[-1] + 1:])
    return b + tuple(rest) + tuple(tail)


def _index_key(idx):
    return tuple(slice(None) if t is None else t for t in idx)


def _index_shape(shapes, attrs, cx):
    x, idx, _ = _index_parts("aten.index.Tensor", shapes, attrs["absent"], 0)
    return _indexed_shape("aten.index.Tensor", x, idx, cx)


def _rows_of(w, ids):
    """Row indices of an embedding lookup: torch raises for an id outside [0, rows) (NumPy would wrap -1)."""
    ids = np.asarray(ids).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= w.shape[0]):
        raise IndexError(f"embedding: id outside [0, {w.shape[0]})")
    return ids


def _index_ref(xs, attrs):
    x, idx, _ = _index_parts("aten.index.Tensor", xs, attrs["absent"], 0)
    return np.asarray(x[_index_key(idx)])


def _index_put_shape(shapes, attrs, cx):
    name = "aten.index_put"
    x, idx, (v,) = _index_parts(name, shapes, attrs["absent"], 1)
    sub = _indexed_shape(name, x, idx, cx)
    broadcasts_to(name, v, sub, cx, "values")
    return tuple(x)


def _index_put_ref(xs, attrs):
    x, idx, (v,) = _index_parts("aten.index_put", xs, attrs["absent"], 1)
    out = x.copy()
    key = _index_key(idx)
    if attrs["accumulate"]:
        np.add.at(out, key, np.broadcast_to(v, out[key].shape))
    else:
        out[key] = v
    return out


def _selected_shape(name, x, idx, dim):
    """Shape of x's entries along dim at a rank-0/1 index (index_select; what index_add adds)."""
    d = _dim(name, dim, len(x))
    if len(idx) > 1:
        fail(f"{name}: index must be rank 0 or 1, got {fmt_shape(idx)}")
    out = list(x)
    if x:
        out[d] = idx[0] if idx else 1
    return tuple(out)


def _index_select_shape(shapes, attrs, cx):
    x, idx = shapes
    return _selected_shape("aten.index_select", x, idx, attrs["dim"])


def _index_select_ref(xs, attrs):
    x, idx = xs
    if x.ndim == 0:
        return x.copy()
    return np.take(x, idx.reshape(-1), axis=_dim("aten.index_select", attrs["dim"], x.ndim))


def _gather_shape(shapes, attrs, cx):
    x, idx = shapes
    d = _dim("aten.gather", attrs["dim"], len(x))
    if len(idx) != len(x):
        fail(f"aten.gather: index {fmt_shape(idx)} and self {fmt_shape(x)} differ in rank")
    for i, (a, b) in enumerate(zip(idx, x)):
        if i != d and not cx.prove("<=", a, b):
            fail(f"aten.gather: index {fmt_shape(idx)} exceeds self {fmt_shape(x)} on dim {i}")
    return tuple(idx)


def _gather_ref(xs, attrs):
    x, idx = xs
    if x.ndim == 0:
        return x.copy()
    d = _dim("aten.gather", attrs["dim"], x.ndim)
    x = x[tuple(slice(None) if i == d else slice(0, n) for i, n in enumerate(idx.shape))]
    return np.take_along_axis(x, idx.astype(np.int64), axis=d)


def _scatter_add_shape(shapes, attrs, cx):
    x, idx, src = shapes
    d = _dim("aten.scatter_add", attrs["dim"], len(x))
    if not len(idx) == len(x) == len(src):
        fail(f"aten.scatter_add: self {fmt_shape(x)}, index {fmt_shape(idx)} and src {fmt_shape(src)} "
             f"differ in rank")
    for i in range(len(x)):
        if not cx.prove("<=", idx[i], src[i]) or (i != d and not cx.prove("<=", idx[i], x[i])):
            fail(f"aten.scatter_add: index {fmt_shape(idx)} exceeds src {fmt_shape(src)} or self "
                 f"{fmt_shape(x)} on dim {i}")
    return tuple(x)


def _scatter_add_ref(xs, attrs):
    x, idx, src = xs
    out = x.copy()
    if x.ndim == 0:
        return out + src
    d = _dim("aten.scatter_add", attrs["dim"], x.ndim)
    coords = list(np.indices(idx.shape))
    coords[d] = idx.astype(np.int64)
    np.add.at(out, tuple(coords), src[tuple(slice(0, n) for n in idx.shape)])
    return out


def _scatter_src_ref(xs, attrs):
    x, idx, src = xs
    out = x.copy()
    if x.ndim == 0:
        return src.copy()
    d = _dim("aten.scatter.src", attrs["dim"], x.ndim)
    coords = list(np.indices(idx.shape))
    coords[d] = idx.astype(np.int64)
    out[tuple(coords)] = src[tuple(slice(0, n) for n in idx.shape)]  # (torch leaves repeated indices unspecified)
    return out


def _one_hot_shape(shapes, attrs, cx):
    if attrs["num_classes"] < 0:
        fail("aten.one_hot: num_classes=-1 gives a data-dependent shape; pass num_classes")
    return tuple(shapes[0]) + (attrs["num_classes"],)


def _one_hot_ref(xs, attrs):
    x = xs[0].astype(np.int64)
    n = attrs["num_classes"]
    if n < 0:
        n = int(x.max()) + 1 if x.size else 0
    return (x[..., None] == np.arange(n)).astype(np.int64)



def _nonzero_ref(xs, attrs):
    out = np.argwhere(xs[0]).astype(np.int64)
    n = attrs["count"]
    if isinstance(n, int) and n != len(out):  # a size symbol gets its value from the data (replay binds it)
        fail(f"aten.nonzero: {len(out)} nonzero entries where the graph says {n}")
    return out


def _index_add_shape(shapes, attrs, cx):
    x, idx, src = shapes
    want = _selected_shape("aten.index_add", x, idx, attrs["dim"])
    if len(src) != len(want) or any(not cx.prove("==", a, b) for a, b in zip(src, want)):
        fail(f"aten.index_add: source {fmt_shape(src)} does not fit self {fmt_shape(x)} at index {fmt_shape(idx)}")
    return tuple(x)


def _index_add_ref(xs, attrs):
    x, idx, src = xs
    out = x.astype(np.result_type(x, src), copy=True)
    d = _dim("aten.index_add", attrs["dim"], max(x.ndim, 1))
    key = [slice(None)] * x.ndim
    key[d] = idx.reshape(-1).astype(np.int64)
    np.add.at(out, tuple(key), _n(attrs["alpha"]) * src)
    return out

INDEX_OPS = [
    OpDef("aten.embedding", 2, _embedding_shape, lambda xs, a: xs[0][_rows_of(xs[0], xs[1])],
          (AttrSpec("padding_idx", "scalar", -1), AttrSpec("scale_grad_by_freq", "bool", False),
           AttrSpec("sparse", "bool", False)),
          doc="Rows of weight picked by indices: weight[indices] (padding_idx etc. only affect the gradient).",
          data_movement=True),
    OpDef("aten.embedding_dense_backward", 2, _embedding_backward_shape, _embedding_backward_ref,
          (AttrSpec("num_weights", "scalar"), AttrSpec("padding_idx", "scalar"),
           AttrSpec("scale_grad_by_freq", "bool")),
          doc="Gradient of embedding: grad rows summed into [num_weights, D] by index (padding_idx rows "
              "skipped, optionally divided by index frequency)."),
    OpDef("aten.index.Tensor", None, _index_shape, _index_ref, (ABSENT,),
          doc="Advanced indexing self[i0, i1, ...] with integer index tensors (absent = full slices), "
              "numpy/torch placement of the broadcast index dims."),
    OpDef("aten.index_put", None, _index_put_shape, _index_put_ref,
          (AttrSpec("accumulate", "bool", False), ABSENT),
          doc="Copy of self with self[indices] = values (+= with accumulate; absent = full slices)."),
    OpDef("aten.index_select", 2, _index_select_shape, _index_select_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Entries of self along dim at a rank-0/1 index.", data_movement=True),
    OpDef("aten.gather", 2, _gather_shape, _gather_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("sparse_grad", "bool", False)),
          doc="out[i][j] = self[index[i][j]][j] (for dim 0; index-shaped).", rowwise=RowWise("dim", (0, 1), index=(1,)),
          data_movement=True),
    OpDef("aten.scatter_add", 3, _scatter_add_shape, _scatter_add_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Copy of self with src added at index along dim (out[index[i][j]][j] += src[i][j] for dim 0).",
          linear=((0, 2),)),
    OpDef("aten.nonzero", 1, lambda shapes, a, cx: (a["count"], len(shapes[0])), _nonzero_ref,
          (AttrSpec("count", "scalar"),), dtype=_int64, data_sizes=(("count", 0),),
          doc="Coordinates of the nonzero entries, one row each in row-major order: [count, rank] (count: a "
              "size the data decides, the captured symbol)."),
    OpDef("aten.index_add", 3, _index_add_shape, _index_add_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("alpha", "number", 1)),
          doc="Copy of self with alpha * source added at index along dim (repeated indices accumulate).",
          linear=((0, 2),)),
    OpDef("aten.scatter.src", 3, _scatter_add_shape, _scatter_src_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Copy of self with src written at index along dim (out[index[i][j]][j] = src[i][j] for dim 0)."),
    OpDef("aten.one_hot", 1, _one_hot_shape, _one_hot_ref, (AttrSpec("num_classes", "int", -1),),
          doc="One-hot int64 encoding with num_classes classes (a trailing dim).", dtype=_int64),
]


# =================================================================================================
# Factories and shape ops
# =================================================================================================


def _arange_len(start, end):
    if isinstance(start, float) or isinstance(end, float):  # nan/inf bounds
        fail(f"aten.arange: bounds {start}..{end} are not finite")
    return max(math.ceil(Fraction(end) - Fraction(start)), 0)


def _arange_dtype(ds, a):
    if a.get("dtype"):
        return a["dtype"]
    return "int64" if _integral(a.get("start", 0)) and _integral(a["end"]) else "float32"


def _arange_ref(xs, a):
    start = _n(a.get("start", Fraction(0)))
    return np.arange(start, _n(a["end"])).astype(_np_dtype(_arange_dtype([], a)))


def _fill_dtype(key):
    def f(ds, a):
        if a.get("dtype"):
            return a["dtype"]
        if ds:
            return ds[0]
        return "int64" if key and _integral(a[key]) else "float32"
    return f


def _filled(shape, value, dtype):
    return np.full(_conc(shape), _n(value)).astype(_np_dtype(dtype))


def _expand_shape(shapes, attrs, cx):
    x, size = shapes[0], attrs["size"]
    if len(size) < len(x):
        fail(f"aten.expand: size {fmt_shape(size)} has fewer dims than self {fmt_shape(x)}")
    lead = len(size) - len(x)
    out = []
    for i, s in enumerate(size):
        if i < lead:
            if _same(cx, s, -1):
                fail(f"aten.expand: -1 is not allowed for the new leading dim {i}")
            out.append(S.norm(s))
            continue
        d = x[i - lead]
        if _same(cx, s, -1) or _same(cx, s, d):
            out.append(S.norm(d))
        elif _same(cx, d, 1):
            out.append(S.norm(s))
        else:
            fail(f"aten.expand: cannot expand {fmt_shape(x)} to {fmt_shape(size)} (dim {i})")
    return tuple(out)


def _expand_ref(xs, a):
    x = xs[0]
    lead = len(a["size"]) - x.ndim
    shape = [int(x.shape[i - lead]) if i >= lead and int(s) == -1 else int(s) for i, s in enumerate(a["size"])]
    return np.broadcast_to(x, shape).copy()


def _repeat_shape(shapes, attrs, cx):
    x, reps = shapes[0], attrs["repeats"]
    if len(reps) < len(x):
        fail(f"aten.repeat: repeats {fmt_shape(reps)} has fewer dims than self {fmt_shape(x)}")
    padded = (1,) * (len(reps) - len(x)) + tuple(x)
    return tuple(S.norm(S.sym(d) * S.sym(r)) for d, r in zip(padded, reps))


FACTORY_OPS = [
    OpDef("aten.arange.start", 0, lambda s, a, cx: (_arange_len(a["start"], a["end"]),), _arange_ref,
          (AttrSpec("start", "number"), AttrSpec("end", "number"), DTYPE),
          doc="[start, start+1, ...) below end (int64 for integral bounds, else float32, unless dtype).",
          dtype=_arange_dtype),
    OpDef("aten.arange", 0, lambda s, a, cx: (_arange_len(0, a["end"]),), _arange_ref,
          (AttrSpec("end", "number"), DTYPE),
          doc="[0, 1, ...) below end (int64 for an integral end, else float32, unless dtype).",
          dtype=_arange_dtype),
    OpDef("aten.zeros", 0, lambda s, a, cx: tuple(a["size"]),
          lambda xs, a: _filled(a["size"], 0, a["dtype"]), (AttrSpec("size", "scalars"), DTYPE),
          doc="A tensor of zeros (float32 unless dtype).", dtype=_fill_dtype(None)),
    OpDef("aten.ones", 0, lambda s, a, cx: tuple(a["size"]),
          lambda xs, a: _filled(a["size"], 1, a["dtype"]), (AttrSpec("size", "scalars"), DTYPE),
          doc="A tensor of ones (float32 unless dtype).", dtype=_fill_dtype(None)),
    OpDef("aten.full", 0, lambda s, a, cx: tuple(a["size"]),
          lambda xs, a: _filled(a["size"], a["fill_value"], _fill_dtype("fill_value")([], a)),
          (AttrSpec("size", "scalars"), AttrSpec("fill_value", "number"), DTYPE),
          doc="A tensor filled with fill_value (int64 for an integral value, else float32, unless dtype).",
          dtype=_fill_dtype("fill_value"), fill="fill_value"),
    OpDef("aten.scalar_tensor", 0, lambda s, a, cx: (),
          lambda xs, a: _filled((), a["s"], a["dtype"] or "float32"), (AttrSpec("s", "number"), DTYPE),
          doc="A 0-dim tensor holding s (float32 unless dtype).", dtype=_attr_dtype(lambda ds, a: "float32"),
          fill="s"),
    OpDef("aten.zeros_like", 1, _id_shape, lambda xs, a: _filled(xs[0].shape, 0, a["dtype"] or xs[0].dtype.name),
          (DTYPE,), doc="Zeros shaped like self.", dtype=_attr_dtype(_first)),
    OpDef("aten.ones_like", 1, _id_shape, lambda xs, a: _filled(xs[0].shape, 1, a["dtype"] or xs[0].dtype.name),
          (DTYPE,), doc="Ones shaped like self.", dtype=_attr_dtype(_first)),
    OpDef("aten.empty_like", 1, _id_shape, lambda xs, a: _filled(xs[0].shape, 0, a["dtype"] or xs[0].dtype.name),
          (DTYPE,), doc="Uninitialised tensor shaped like self (the reference gives zeros).",
          dtype=_attr_dtype(_first)),
    OpDef("aten.full_like", 1, _id_shape,
          lambda xs, a: _filled(xs[0].shape, a["fill_value"], a["dtype"] or xs[0].dtype.name),
          (AttrSpec("fill_value", "number"), DTYPE), doc="fill_value shaped like self.", dtype=_attr_dtype(_first)),
    OpDef("aten.new_zeros", 1, lambda s, a, cx: tuple(a["size"]),
          lambda xs, a: _filled(a["size"], 0, a["dtype"] or xs[0].dtype.name), (AttrSpec("size", "scalars"), DTYPE),
          doc="Zeros of the given size (self's dtype unless dtype).", dtype=_attr_dtype(_first)),
    OpDef("aten.expand", 1, _expand_shape, _expand_ref,
          (AttrSpec("size", "scalars"), AttrSpec("implicit", "bool", False)),
          doc="Broadcast self to size (-1 keeps a dim; new dims lead).", broadcast=True, data_movement=True,
          broadcast_to="size"),
    OpDef("aten.repeat", 1, _repeat_shape, lambda xs, a: np.tile(xs[0], _conc(a["repeats"])),
          (AttrSpec("repeats", "scalars"),), doc="Tile self repeats[i] times along each dim (new dims lead).",
          data_movement=True),
]


# =================================================================================================
# Attention
# =================================================================================================


def _sdpa_shape(shapes, attrs, cx):
    name = "aten.scaled_dot_product_attention"
    q, k, v, m = _optional(name, shapes, attrs["absent"], 4)
    if q is None or k is None or v is None:
        fail(f"{name}: only attn_mask may be absent")
    if min(len(q), len(k), len(v)) < 2:
        fail(f"{name}: query/key/value must have rank >= 2")
    if not _same(cx, q[-1], k[-1]):
        fail(f"{name}: query {fmt_shape(q)} and key {fmt_shape(k)} differ in the embedding dim")
    if not _same(cx, k[-2], v[-2]):
        fail(f"{name}: key {fmt_shape(k)} and value {fmt_shape(v)} differ in sequence length")
    kb, vb = tuple(k[:-2]), tuple(v[:-2])
    if attrs["enable_gqa"] and len(q) >= 3 and len(k) >= 3:
        hq, hk = q[-3], k[-3]
        ratio = Fraction(hq, hk) if isinstance(hq, int) and isinstance(hk, int) else S.sym(hq) / S.sym(hk)
        if not _same(cx, hk, v[-3]) or not cx.integral(S.norm(ratio)):
            fail(f"{name}: with enable_gqa, query heads {S.text(hq)} must be a multiple of key/value heads")
        kb, vb = kb[:-1] + (hq,), vb[:-1] + (hq,)
    batch = broadcast(name, [tuple(q[:-2]), kb, vb], cx)
    if m is not None:
        broadcasts_to(name, m, batch + (q[-2], k[-2]), cx, "attn_mask")
    return batch + (q[-2], v[-1])


def _sdpa_ref(xs, attrs):
    q, k, v, m = _optional("aten.scaled_dot_product_attention", xs, attrs["absent"], 4)
    if attrs["enable_gqa"] and q.ndim >= 3 and k.ndim >= 3:
        r = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if attrs["scale"] is None else float(attrs["scale"])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    L, Sk = q.shape[-2], k.shape[-2]
    if attrs["is_causal"]:
        s = np.where(np.tril(np.ones((L, Sk), dtype=bool)), s, -np.inf)
    if m is not None:
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m
    p = _softmax(s, -1)
    dp = float(attrs["dropout_p"])
    if dp > 0:
        p = p * _dropout_mask(p.shape, dp, True) / (1.0 - dp)
    return np.matmul(p, v)


ATTENTION_OPS = [
    OpDef("aten.scaled_dot_product_attention", None, _sdpa_shape, _sdpa_ref,
          (AttrSpec("dropout_p", "number", 0), AttrSpec("is_causal", "bool", False),
           AttrSpec("scale", "number", optional=True), AttrSpec("enable_gqa", "bool", False), ABSENT),
          doc="softmax(q @ k^T * scale + mask) @ v (scale 1/sqrt(E) by default; bool masks keep true "
              "entries; is_causal = lower-triangular; dropout_p > 0 uses the reference's fixed-seed mask). "
              "attn_mask optional via absent."),
]


_MAX_VALUES = next(o for o in REDUCTION_OPS if o.name == "aten.max.dim#0")
_MAX_VALUES.reduction = Reduction("dim", "keepdim", "max")  # (the indices of two halves do not combine)

OPS: list[OpDef] = (MATMUL_OPS + ELEMENTWISE_OPS + SOFTMAX_OPS + NORM_OPS + [DROPOUT_BACKWARD] + REDUCTION_OPS
                    + INDEX_OPS + FACTORY_OPS + ATTENTION_OPS)


# -- losses --------------------------------------------------------------------------------------------

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


OPS += [
    OpDef("aten.mse_loss", 2, _mse_shape, _mse_ref, (_REDUCTION,), doc="Mean/sum/none of (self - target)^2.",
          dtype=lambda ds, a: _float_only("mse_loss")([promote(*ds)], a)),
    OpDef("aten.mse_loss_backward", 3, _mse_bw_shape, _mse_bw_ref, (AttrSpec("reduction", "int"),),
          doc="Gradient of mse_loss w.r.t. self: 2 (self - target) grad_output [/ numel for mean].",
          dtype=lambda ds, a: _float_only("mse_loss_backward")([promote(*ds)], a)),
]

OPS += [  # HF transformers' causal mask (examples/hf-llama-tp)
    _bin("le.Tensor", lambda x, y, a: np.less_equal(x, y), "self <= other (broadcasting), bool.", dtype=_bool,
         computes="le"),
]
