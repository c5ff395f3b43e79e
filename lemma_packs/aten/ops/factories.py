"""Factories: tensors made from attributes alone or shaped like another (``arange``, ``zeros``, ``ones``,
``full``, ``scalar_tensor``, ``*_like``, ``new_zeros``)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail

from .helpers import DTYPE, _attr_dtype, _conc, _first, _id_shape, _integral, _n, _np_dtype


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


OPS = [
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
]
