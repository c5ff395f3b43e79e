"""Compute operators of the ``hlo`` dialect: XLA HLO instructions as the ``hlo`` frontend emits them.

Conventions shared with the frontend (``graphguard/frontends/hlo/convert.py``):

* name: ``hlo.<opcode>`` with ``-`` written ``_`` (``exponential-minus-one`` -> ``hlo.exponential_minus_one``);
  a custom call is ``hlo.custom_call.<target>`` (a pack defines it; see the frontend's README);
* inputs: the instruction's operands in order; everything else is a typed attribute (dimension numbers as
  ``ints``, the output shape of shape-making ops as ``scalars``, dtypes as numpy-style names: ``float32``,
  ``bfloat16``, ``int32``, ``bool``...);
* data movement never reaches this dialect when it is clean: reshape/bitcast -> ``core.reshape``, transpose ->
  ``core.permute``, stride-1 slice and constant-offset dynamic-slice -> ``core.slice``, concatenate ->
  ``core.concat``, constant-offset dynamic-update-slice and pad -> ``core.concat`` of slices and constants;
  ``hlo.slice`` / ``hlo.pad`` / ``hlo.dynamic_slice`` / ``hlo.dynamic_update_slice`` cover the other cases.
* HLO has no implicit broadcasting: elementwise operands have equal shapes (``select``/``clamp`` also take
  scalar predicates/bounds).

References compute floating point in float64 whatever the declared float dtype; integer and bool results
keep their exact dtype (integer ``divide``/``remainder`` truncate toward zero, as XLA does).
"""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, Bilinear, OpDef, fail, float_to_int, fmt_shape, numel, same_shapes

# =================================================================================================
# Helpers
# =================================================================================================


def np_dtype(d: str | None):
    """The NumPy dtype a reference computes in: float64 for every float dtype, exact ints and bool."""
    if d in ("bool", "pred"):
        return np.bool_
    if d and d.startswith(("int", "uint")):
        try:
            return np.dtype(d)
        except TypeError:
            return np.int64
    return np.float64


def _is_int(x: np.ndarray) -> bool:
    return x.dtype.kind in "iu"


def _number(v) -> float | int:
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else float(v)
    return v


def _ints(shape) -> list[int]:
    return [int(d) for d in shape]


def _same(cx, a, b) -> bool:
    return cx.prove("==", a, b)


def _check_dims(name: str, dims, rank: int, what: str = "dimensions") -> None:
    if len(set(dims)) != len(dims) or any(not 0 <= d < rank for d in dims):
        fail(f"{name}: {what} {list(dims)} are not distinct dims of a rank-{rank} tensor")


def _id_shape(shapes, attrs, cx):
    return tuple(shapes[0])


def _first(ds, a):
    return ds[0] if ds else "float32"


def _attr_dtype(ds, a):
    return a["dtype"]


def _bool(ds, a):
    return "bool"


# =================================================================================================
# Elementwise
# =================================================================================================


def _int_div(x, y):
    q = np.floor_divide(x, y)
    fix = (np.remainder(x, y) != 0) & ((x < 0) != (y < 0))
    return np.where(fix, q + 1, q).astype(np.result_type(x, y))


def _divide(x, y):
    if _is_int(x) and _is_int(y):
        with np.errstate(divide="ignore"):
            return _int_div(x, y)
    return np.true_divide(x, y)


def _logical(fn_bool, fn_int):
    return lambda x, y: fn_bool(x, y) if x.dtype == np.bool_ else fn_int(x, y)


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x)


def _float(fn):
    return lambda x: fn(np.asarray(x, dtype=np.float64) if not np.issubdtype(x.dtype, np.floating) else x)


def _bin(name, fn, doc, dtype=None, scaling=False, **props):
    """A binary elementwise op (equal shapes: HLO does not broadcast); ``props``: its other properties."""
    return OpDef(f"hlo.{name}", 2, lambda s, a, cx, n=name: same_shapes(f"hlo.{n}", s),
                 lambda xs, a: np.asarray(fn(xs[0], xs[1])), doc=doc, dtype=dtype, scaling=scaling,
                 elementwise=(0, 1), **props)


def _un(name, fn, doc, dtype=None, **props):
    return OpDef(f"hlo.{name}", 1, _id_shape, lambda xs, a: np.asarray(fn(xs[0])), doc=doc, dtype=dtype,
                 elementwise=(0,), **props)


COMM = {"commutative": True, "associative": True}


COMPARISONS = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal, "GT": np.greater,
               "GE": np.greater_equal}


def _select_shape(shapes, attrs, cx):
    p, t, f = shapes
    out = same_shapes("hlo.select", [t, f])
    if len(p) and not (len(p) == len(out) and all(_same(cx, a, b) for a, b in zip(p, out))):
        fail(f"hlo.select: predicate {fmt_shape(p)} is neither a scalar nor shaped like {fmt_shape(out)}")
    return out


def _clamp_shape(shapes, attrs, cx):
    lo, x, hi = shapes
    for b in (lo, hi):
        if len(b) and not (len(b) == len(x) and all(_same(cx, u, v) for u, v in zip(b, x))):
            fail(f"hlo.clamp: bound {fmt_shape(b)} is neither a scalar nor shaped like {fmt_shape(x)}")
    return tuple(x)


def _convert(x, a):
    d = a["dtype"]
    if d == "bool":
        return np.asarray(x) != 0
    if np_dtype(d) == np.float64:
        return np.asarray(x, dtype=np.float64)
    return float_to_int(x, np_dtype(d))


def _not(x):
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _round_afz(x):
    return np.sign(x) * np.floor(np.abs(x) + 0.5)


DTYPE = AttrSpec("dtype", "str")

ELEMENTWISE = [
    _bin("add", np.add, "a + b (same shapes).", linear=((0, 1),), **COMM),
    _bin("subtract", np.subtract, "a - b (same shapes).", linear=((0, 1),)),
    _bin("multiply", np.multiply, "a * b (same shapes).", scaling=True, linear=(0, 1), computes="mul", **COMM),
    _bin("divide", _divide, "a / b (same shapes; integers truncate toward zero).", scaling=True),
    _bin("remainder", lambda x, y: np.fmod(x, y), "Remainder with the sign of a (C fmod; same shapes)."),
    _bin("maximum", np.maximum, "Elementwise max (same shapes).", **COMM),
    _bin("minimum", np.minimum, "Elementwise min (same shapes).", **COMM),
    _bin("power", lambda x, y: np.power(x, y), "a ** b (same shapes)."),
    _bin("atan2", lambda x, y: np.arctan2(x, y), "atan2(a, b) (same shapes)."),
    _bin("and", _logical(np.logical_and, np.bitwise_and), "Logical (pred) or bitwise (integer) and.", computes="and", **COMM),
    _bin("or", _logical(np.logical_or, np.bitwise_or), "Logical (pred) or bitwise (integer) or.", computes="or", **COMM),
    _bin("xor", _logical(np.logical_xor, np.bitwise_xor), "Logical (pred) or bitwise (integer) xor.", **COMM),
    _bin("shift_left", lambda x, y: np.left_shift(x, y), "a << b (integers)."),
    _bin("shift_right_arithmetic", lambda x, y: np.right_shift(x, y), "a >> b, sign-extending (integers)."),
    OpDef("hlo.compare", 2, lambda s, a, cx: same_shapes("hlo.compare", s),
          lambda xs, a: np.asarray(COMPARISONS[a["direction"]](xs[0], xs[1])),
          (AttrSpec("direction", "str", choices=tuple(COMPARISONS)),),
          doc="a <direction> b as pred (EQ, NE, LT, LE, GT, GE; same shapes).", dtype=_bool, elementwise=(0, 1),
          computes={d.lower(): {"direction": d} for d in COMPARISONS}),
    OpDef("hlo.select", 3, _select_shape, lambda xs, a: np.where(xs[0], xs[1], xs[2]),
          doc="pred ? on_true : on_false (pred shaped like the operands, or a scalar).",
          dtype=lambda ds, a: ds[1], elementwise=(0, 1, 2), linear=((1, 2),), computes="where"),
    OpDef("hlo.clamp", 3, _clamp_shape, lambda xs, a: np.minimum(np.maximum(xs[1], xs[0]), xs[2]),
          doc="min(max(x, lo), hi) with clamp(lo, x, hi) operand order (bounds may be scalars).",
          dtype=lambda ds, a: ds[1], elementwise=(0, 1, 2)),
    OpDef("hlo.convert", 1, _id_shape, lambda xs, a: _convert(xs[0], a), (DTYPE,),
          doc="Element type conversion (float -> int truncates toward zero; -> pred is != 0).",
          dtype=_attr_dtype, elementwise=(0,)),
    _un("negate", np.negative, "-x.", linear=(0,), computes="neg"),
    _un("abs", np.abs, "|x|."),
    _un("sign", np.sign, "Sign of x (-1, 0, 1)."),
    _un("exponential", _float(np.exp), "exp(x).", computes="exp"),
    _un("exponential_minus_one", _float(np.expm1), "exp(x) - 1."),
    _un("log", _float(np.log), "Natural log."),
    _un("log_plus_one", _float(np.log1p), "log(1 + x)."),
    _un("sqrt", _float(np.sqrt), "Square root."),
    _un("rsqrt", _float(lambda x: 1.0 / np.sqrt(x)), "1 / sqrt(x)."),
    _un("cbrt", _float(np.cbrt), "Cube root."),
    _un("tanh", _float(np.tanh), "tanh(x)."),
    _un("logistic", _float(lambda x: 1.0 / (1.0 + np.exp(-x))), "1 / (1 + exp(-x)) (sigmoid).", computes="logistic"),
    _un("sine", _float(np.sin), "sin(x).", computes="sin"),
    _un("cosine", _float(np.cos), "cos(x).", computes="cos"),
    _un("tan", _float(np.tan), "tan(x)."),
    _un("erf", _float(_erf), "The error function."),
    _un("floor", np.floor, "Round toward -inf."),
    _un("ceil", np.ceil, "Round toward +inf."),
    _un("round_nearest_afz", _round_afz, "Round to nearest, ties away from zero."),
    _un("round_nearest_even", np.round, "Round to nearest, ties to even."),
    _un("not", _not, "Logical (pred) or bitwise (integer) not."),
    _un("is_finite", np.isfinite, "x is neither inf nor nan, as pred.", dtype=_bool),
]


# =================================================================================================
# Shape-making ops: constants, iota, broadcast, slice, reverse, pad, dynamic slices
# =================================================================================================


def _out_shape(shapes, attrs, cx):
    return tuple(attrs["shape"])


def _literal_values(a) -> np.ndarray:
    text = a["values"].strip()
    vals = [float(v) if any(c in v for c in ".eEna") else int(v) for v in text.split(",")] if text else []
    out = np.asarray(vals, dtype=np_dtype(a["dtype"]))
    shape = _ints(a["shape"])
    if out.size != math.prod(shape):
        fail(f"hlo.literal: {out.size} values for shape {shape}")
    return out.reshape(shape)


def _literal_shape(shapes, attrs, cx):
    n = len([v for v in attrs["values"].split(",") if v.strip()])
    if not cx.prove("==", numel(attrs["shape"]), n):
        fail(f"hlo.literal: {n} values for shape {fmt_shape(attrs['shape'])}")
    return tuple(attrs["shape"])


def _iota_shape(shapes, attrs, cx):
    shape = tuple(attrs["shape"])
    if not 0 <= attrs["dimension"] < len(shape):
        fail(f"hlo.iota: dimension {attrs['dimension']} out of range for shape {fmt_shape(shape)}")
    return shape


def _iota_ref(xs, a):
    shape = _ints(a["shape"])
    d = a["dimension"]
    line = np.arange(shape[d]).astype(np_dtype(a["dtype"]))
    view = [1] * len(shape)
    view[d] = shape[d]
    return np.broadcast_to(line.reshape(view), shape).copy()


def _broadcast_shape(shapes, attrs, cx):
    (x,) = shapes
    out, dims = tuple(attrs["shape"]), attrs["dimensions"]
    if len(dims) != len(x):
        fail(f"hlo.broadcast: dimensions {list(dims)} do not map every dim of {fmt_shape(x)}")
    _check_dims("hlo.broadcast", dims, len(out))
    for i, d in enumerate(dims):
        if not (_same(cx, x[i], out[d]) or _same(cx, x[i], 1)):
            fail(f"hlo.broadcast: operand {fmt_shape(x)} dim {i} does not fit output {fmt_shape(out)} dim {d}")
    return out


def _broadcast_ref(xs, a):
    (x,) = xs
    out, dims = _ints(a["shape"]), list(a["dimensions"])
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order) if order != list(range(len(dims))) else x
    view = [1] * len(out)
    for i in order:
        view[dims[i]] = x.shape[order.index(i)]
    return np.broadcast_to(x.reshape(view), out).copy()


def _slice_shape(shapes, attrs, cx):
    (x,) = shapes
    st, li, sd = attrs["starts"], attrs["limits"], attrs["strides"]
    if not len(st) == len(li) == len(sd) == len(x):
        fail(f"hlo.slice: starts/limits/strides must have one entry per dim of {fmt_shape(x)}")
    out = []
    for a, b, s, n in zip(st, li, sd, x):
        if s < 1 or not (0 <= a <= b and cx.prove("<=", b, n)):
            fail(f"hlo.slice: [{a}:{b}:{s}] is not a slice of a dim of size {S.text(n)}")
        out.append(-(-(b - a) // s))
    return tuple(out)


def _slice_ref(xs, a):
    return xs[0][tuple(slice(s, l, t) for s, l, t in zip(a["starts"], a["limits"], a["strides"]))].copy()


def _reverse_shape(shapes, attrs, cx):
    _check_dims("hlo.reverse", attrs["dimensions"], len(shapes[0]))
    return tuple(shapes[0])


def _pad_shape(shapes, attrs, cx):
    x, v = shapes
    lo, hi, it = attrs["low"], attrs["high"], attrs["interior"]
    if len(v):
        fail(f"hlo.pad: the padding value must be a scalar, got {fmt_shape(v)}")
    if not len(lo) == len(hi) == len(it) == len(x):
        fail(f"hlo.pad: low/high/interior must have one entry per dim of {fmt_shape(x)}")
    out = []
    for n, a, b, i in zip(x, lo, hi, it):
        n = int(n)
        size = n + a + b + max(n - 1, 0) * i
        if i < 0 or size < 0:
            fail(f"hlo.pad: padding {a}_{b}_{i} of a dim of size {n} is invalid")
        out.append(size)
    return tuple(out)


def _pad_ref(xs, a):
    x, v = xs
    lo, hi, it = a["low"], a["high"], a["interior"]
    grown = [n + max(n - 1, 0) * i for n, i in zip(x.shape, it)]
    full = [g + max(l, 0) + max(h, 0) for g, l, h in zip(grown, lo, hi)]
    out = np.full(full, v, dtype=np.result_type(x, v))
    out[tuple(slice(max(l, 0), max(l, 0) + g, i + 1) for l, g, i in zip(lo, grown, it))] = x
    crop = tuple(slice(max(-l, 0), f - max(-h, 0)) for l, h, f in zip(lo, hi, full))
    return out[crop].copy()


def _starts(name, shapes, k):
    """Scalar start-index operands (one per dim of the sliced operand)."""
    starts = shapes[k:]
    if len(starts) != len(shapes[0]) or any(len(s) for s in starts):
        fail(f"{name}: needs one scalar start index per dim of {fmt_shape(shapes[0])}")


def _clamped(starts, dims, sizes):
    return [min(max(int(np.asarray(s).reshape(())), 0), int(n) - int(z)) for s, n, z in zip(starts, dims, sizes)]


def _dynamic_slice_shape(shapes, attrs, cx):
    _starts("hlo.dynamic_slice", shapes, 1)
    x, sizes = shapes[0], attrs["sizes"]
    if len(sizes) != len(x) or any(not (0 <= z and cx.prove("<=", z, n)) for z, n in zip(sizes, x)):
        fail(f"hlo.dynamic_slice: sizes {list(sizes)} do not fit {fmt_shape(x)}")
    return tuple(sizes)


def _dynamic_slice_ref(xs, a):
    x, sizes = xs[0], a["sizes"]
    st = _clamped(xs[1:], x.shape, sizes)
    return x[tuple(slice(s, s + z) for s, z in zip(st, sizes))].copy()


def _dus_shape(shapes, attrs, cx):
    _starts("hlo.dynamic_update_slice", [shapes[0]] + list(shapes[2:]), 1)
    x, u = shapes[0], shapes[1]
    if len(u) != len(x) or any(not cx.prove("<=", b, a) for a, b in zip(x, u)):
        fail(f"hlo.dynamic_update_slice: update {fmt_shape(u)} does not fit in {fmt_shape(x)}")
    return tuple(x)


def _dus_ref(xs, a):
    x, u = xs[0], xs[1]
    st = _clamped(xs[2:], x.shape, u.shape)
    out = np.array(x, dtype=np.result_type(x, u), copy=True)
    out[tuple(slice(s, s + z) for s, z in zip(st, u.shape))] = u
    return out


SHAPES = AttrSpec("shape", "scalars")

SHAPE_OPS = [
    OpDef("hlo.constant", 0, _out_shape,
          lambda xs, a: np.full(_ints(a["shape"]), _number(a["value"]), dtype=np_dtype(a["dtype"])),
          (SHAPES, AttrSpec("value", "number"), DTYPE), doc="A tensor filled with one value (a splat constant).",
          dtype=_attr_dtype, fill="value"),
    OpDef("hlo.literal", 0, _literal_shape, lambda xs, a: _literal_values(a),
          (SHAPES, AttrSpec("values", "str"), DTYPE),
          doc="A constant given element by element (values: comma-separated, row-major).", dtype=_attr_dtype),
    OpDef("hlo.iota", 0, _iota_shape, _iota_ref, (SHAPES, AttrSpec("dimension", "int"), DTYPE),
          doc="0, 1, 2, ... along dimension, constant along the others.", dtype=_attr_dtype),
    OpDef("hlo.broadcast", 1, _broadcast_shape, _broadcast_ref, (SHAPES, AttrSpec("dimensions", "ints")),
          doc="Operand dim i becomes output dim dimensions[i]; the other output dims repeat it.", broadcast=True,
          data_movement=True),
    OpDef("hlo.slice", 1, _slice_shape, _slice_ref,
          (AttrSpec("starts", "ints"), AttrSpec("limits", "ints"), AttrSpec("strides", "ints")),
          doc="x[starts:limits:strides] on every dim (stride-1 slices become core.slice).", data_movement=True),
    OpDef("hlo.reverse", 1, _reverse_shape, lambda xs, a: np.flip(xs[0], tuple(a["dimensions"])).copy(),
          (AttrSpec("dimensions", "ints"),), doc="Reverse the order of elements along dimensions.",
          data_movement=True),
    OpDef("hlo.pad", 2, _pad_shape, _pad_ref,
          (AttrSpec("low", "ints"), AttrSpec("high", "ints"), AttrSpec("interior", "ints")),
          doc="Pad x with the scalar value: low/high edges (negative crops) and interior gaps per dim."),
    OpDef("hlo.dynamic_slice", None, _dynamic_slice_shape, _dynamic_slice_ref, (AttrSpec("sizes", "scalars"),),
          doc="x[s0:s0+size0, ...] with scalar start operands, clamped to stay in bounds."),
    OpDef("hlo.dynamic_update_slice", None, _dus_shape, _dus_ref,
          doc="x with update written at scalar start operands (clamped to stay in bounds)."),
]


# =================================================================================================
# Dot, reduce, gather
# =================================================================================================


def _dot_dims(name, a, b, attrs):
    lb, rb, lc, rc = (tuple(attrs[k]) for k in ("lhs_batch", "rhs_batch", "lhs_contracting", "rhs_contracting"))
    _check_dims(name, lb + lc, len(a), "lhs batch+contracting dims")
    _check_dims(name, rb + rc, len(b), "rhs batch+contracting dims")
    if len(lb) != len(rb) or len(lc) != len(rc):
        fail(f"{name}: lhs and rhs have different numbers of batch or contracting dims")
    lf = [d for d in range(len(a)) if d not in lb + lc]
    rf = [d for d in range(len(b)) if d not in rb + rc]
    return lb, rb, lc, rc, lf, rf


def _dot_shape(shapes, attrs, cx):
    a, b = shapes
    lb, rb, lc, rc, lf, rf = _dot_dims("hlo.dot", a, b, attrs)
    for x, y in list(zip(lb, rb)) + list(zip(lc, rc)):
        if not _same(cx, a[x], b[y]):
            fail(f"hlo.dot: lhs {fmt_shape(a)} dim {x} and rhs {fmt_shape(b)} dim {y} differ")
    return tuple(a[d] for d in lb) + tuple(a[d] for d in lf) + tuple(b[d] for d in rf)


def _dot_ref(xs, attrs):
    a, b = xs
    lb, rb, lc, rc, lf, rf = _dot_dims("hlo.dot", a.shape, b.shape, attrs)
    letters = iter("abcdefghijklmnopqrstuvwxyz")
    la = [""] * a.ndim
    lb_ = [""] * b.ndim
    for x, y in list(zip(lb, rb)) + list(zip(lc, rc)):
        la[x] = lb_[y] = next(letters)
    for d in lf:
        la[d] = next(letters)
    for d in rf:
        lb_[d] = next(letters)
    out = "".join(la[d] for d in lb) + "".join(la[d] for d in lf) + "".join(lb_[d] for d in rf)
    return np.asarray(np.einsum(f"{''.join(la)},{''.join(lb_)}->{out}", a, b))


REDUCERS = {"sum": (np.add, np.sum), "prod": (np.multiply, np.prod), "max": (np.maximum, np.max),
            "min": (np.minimum, np.min), "and": (np.logical_and, np.all), "or": (np.logical_or, np.any)}


def _reduce_shape(shapes, attrs, cx):
    (x,) = shapes
    dims = attrs["dims"]
    _check_dims("hlo.reduce", dims, len(x))
    return tuple(d for i, d in enumerate(x) if i not in dims)


def _reduce_ref(xs, a):
    (x,) = xs
    combine, whole = REDUCERS[a["reducer"]]
    init = _number(a["init"])
    dims = tuple(a["dims"])
    if x.dtype == np.bool_ and a["reducer"] in ("sum", "max"):
        combine, whole = (np.logical_or, np.any)
    if dims and any(x.shape[d] == 0 for d in dims):
        out_shape = [n for i, n in enumerate(x.shape) if i not in dims]
        return np.full(out_shape, init, dtype=x.dtype)
    r = whole(x, axis=dims) if dims else x
    return np.asarray(combine(r, np.asarray(init, dtype=x.dtype)))


def _gather_parts(name, x, idx, a):
    od, cd, sm = tuple(a["offset_dims"]), tuple(a["collapsed_slice_dims"]), tuple(a["start_index_map"])
    ivd, sizes = a["index_vector_dim"], tuple(a["slice_sizes"])
    if a["operand_batching_dims"] or a["start_indices_batching_dims"]:
        fail(f"{name}: batching dims are not supported yet")
    if not 0 <= ivd <= len(idx):
        fail(f"{name}: index_vector_dim {ivd} out of range for indices {fmt_shape(idx)}")
    k = idx[ivd] if ivd < len(idx) else 1
    if int(k) != len(sm):
        fail(f"{name}: start_index_map {list(sm)} does not match {k} index components")
    _check_dims(name, sm, len(x), "start_index_map")
    _check_dims(name, cd, len(x), "collapsed_slice_dims")
    if len(sizes) != len(x) or any(not 0 <= int(z) <= int(n) for z, n in zip(sizes, x)):
        fail(f"{name}: slice_sizes {list(sizes)} do not fit operand {fmt_shape(x)}")
    if any(int(sizes[d]) != 1 for d in cd):
        fail(f"{name}: collapsed dims {list(cd)} must have slice size 1")
    batch = [d for i, d in enumerate(idx) if i != ivd]
    offset = [sizes[d] for d in range(len(x)) if d not in cd]
    if len(od) != len(offset) or list(od) != sorted(od) or any(not 0 <= d < len(batch) + len(offset) for d in od):
        fail(f"{name}: offset_dims {list(od)} do not match the {len(offset)} uncollapsed dims")
    return od, cd, sm, ivd, sizes, batch, offset


def _gather_shape(shapes, attrs, cx):
    x, idx = shapes
    od, _, _, _, _, batch, offset = _gather_parts("hlo.gather", x, idx, attrs)
    out, bi, oi = [], iter(batch), iter(offset)
    for j in range(len(batch) + len(offset)):
        out.append(next(oi) if j in od else next(bi))
    return tuple(out)


def _gather_ref(xs, attrs):
    x, idx = xs
    od, cd, sm, ivd, sizes, batch, offset = _gather_parts("hlo.gather", x.shape, idx.shape, attrs)
    ix = idx[..., None] if ivd == idx.ndim else np.moveaxis(idx, ivd, -1)
    sizes = _ints(sizes)
    pieces = []
    for b in np.ndindex(*ix.shape[:-1]):
        start = [0] * x.ndim
        for k, d in enumerate(sm):
            start[d] = int(ix[b + (k,)])
        start = [min(max(s, 0), n - z) for s, n, z in zip(start, x.shape, sizes)]
        sl = x[tuple(slice(s, s + z) for s, z in zip(start, sizes))]
        pieces.append(sl.reshape([z for d, z in enumerate(sizes) if d not in cd]))
    arr = np.stack(pieces) if pieces else np.zeros((0,) + tuple(int(o) for o in offset), x.dtype)
    arr = arr.reshape(tuple(int(n) for n in ix.shape[:-1]) + tuple(int(o) for o in offset))
    nb, perm, bi, oi = len(batch), [], iter(range(len(batch))), iter(range(len(offset)))
    for j in range(len(batch) + len(offset)):
        perm.append(nb + next(oi) if j in od else next(bi))
    return np.transpose(arr, perm).copy()


COMPUTE = [
    OpDef("hlo.dot", 2, _dot_shape, _dot_ref,
          (AttrSpec("lhs_batch", "ints", ()), AttrSpec("rhs_batch", "ints", ()),
           AttrSpec("lhs_contracting", "ints", ()), AttrSpec("rhs_contracting", "ints", ())),
          doc="General dot: sum over contracting dims; output dims are batch, lhs free, rhs free (in order).",
          linear=(0, 1), bilinear=Bilinear("lhs_batch", "lhs_contracting", "rhs_batch", "rhs_contracting")),
    OpDef("hlo.reduce", 1, _reduce_shape, _reduce_ref,
          (AttrSpec("dims", "ints"), AttrSpec("reducer", "str", choices=tuple(REDUCERS)),
           AttrSpec("init", "number")),
          doc="Reduce over dims with the reducer (sum, prod, max, min, and, or), combined with init."),
    OpDef("hlo.gather", 2, _gather_shape, _gather_ref,
          (AttrSpec("offset_dims", "ints"), AttrSpec("collapsed_slice_dims", "ints"),
           AttrSpec("start_index_map", "ints"), AttrSpec("index_vector_dim", "int"),
           AttrSpec("slice_sizes", "ints"), AttrSpec("operand_batching_dims", "ints", ()),
           AttrSpec("start_indices_batching_dims", "ints", ())),
          doc="XLA gather (slices of operand at start indices, clamped; embedding lookups). Batching dims "
              "are not supported yet."),
]


OPS: list[OpDef] = ELEMENTWISE + SHAPE_OPS + COMPUTE
