"""Compute operators of the core dialect (not clean): matmul and elementwise arithmetic."""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import DTYPES, AttrSpec, Bilinear, OpDef, fail, float_to_int, fmt_shape, same_shapes


def _matmul_shape(shapes, attrs, cx):
    a, b = shapes
    if len(a) != 2 or len(b) != 2:
        fail(f"matmul: expects two rank-2 tensors, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not cx.prove("==", a[1], b[0]):
        fail(f"matmul: inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    return (a[0], b[1])


def _ew(name, fn, doc, **props):
    return OpDef(f"core.{name}", 2, lambda s, a, cx, n=name: same_shapes(n, s), lambda xs, a: fn(*xs), doc=doc,
                 elementwise=(0, 1), **props)


def _unary(name, fn, doc, **props):
    return OpDef(f"core.{name}", 1, lambda s, a, cx: tuple(s[0]), lambda xs, a: fn(xs[0]), doc=doc,
                 elementwise=(0,), **props)


def _full_shape(shapes, attrs, cx):
    return tuple(attrs["shape"])


def _bmatmul_shape(shapes, attrs, cx):
    a, b = shapes
    if len(a) < 2 or len(a) != len(b):
        fail(f"batched_matmul: needs two tensors of the same rank >= 2, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not all(cx.prove("==", x, y) for x, y in zip(a[:-2], b[:-2])) or not cx.prove("==", a[-1], b[-2]):
        fail(f"batched_matmul: shapes {fmt_shape(a)} and {fmt_shape(b)} do not line up")
    return tuple(a[:-1]) + (b[-1],)


def _convert(xs, a):
    """``convert`` as the ``hlo`` pack's references compute it: to bool ``!= 0``, to an integer truncated and
    saturated (``float_to_int``), to a float the value itself in float64 (every float dtype computes in float64
    here: what rounding to the narrower type loses, the lemmas' conditions keep out -- ``exact_conversion``)."""
    x, d = np.asarray(xs[0]), a["dtype"]
    if d == "bool":
        return x != 0
    if d.startswith(("int", "uint")):
        return float_to_int(x, d)
    return np.asarray(x, dtype=np.float64)


OPS = [
    OpDef("core.convert", 1, lambda s, a, cx: tuple(s[0]), _convert,
          (AttrSpec("dtype", "str", choices=tuple(sorted(DTYPES))),), dtype=lambda ds, a: a["dtype"],
          elementwise=(0,), doc="Elementwise conversion to dtype (a float to an integer truncated toward zero, "
          "saturated; to bool: != 0). A relation's convert(p@0, dtype=t) (graphguard/ir/relation.py)."),
    OpDef("core.batched_matmul", 2, _bmatmul_shape, lambda xs, a: np.matmul(xs[0], xs[1]),
          doc="Matrix product over the last two dims, equal leading (batch) dims.", linear=(0, 1)),
    OpDef("core.matmul", 2, _matmul_shape, lambda xs, a: xs[0] @ xs[1], doc="Matrix product of rank-2 tensors.",
          linear=(0, 1), rows=(0, 1), bilinear=Bilinear((), (1,), (), (0,), ranks=(2, 2))),
    _ew("add", np.add, "Elementwise a + b (same shapes).", commutative=True, associative=True, linear=((0, 1),)),
    _ew("sub", np.subtract, "Elementwise a - b (same shapes).", linear=((0, 1),)),
    _ew("mul", np.multiply, "Elementwise a * b (same shapes).", commutative=True, associative=True, linear=(0, 1)),
    _ew("div", np.divide, "Elementwise a / b (same shapes).", linear=(0,)),
    _unary("neg", np.negative, "Elementwise -x.", linear=(0,)),
    _unary("relu", lambda x: np.maximum(x, 0), "Elementwise max(x, 0)."),
    _unary("exp", np.exp, "Elementwise exp(x)."),
    OpDef("core.full", 0, _full_shape, lambda xs, a: np.full([int(d) for d in a["shape"]],
                                                            float(a["value"])),
          (AttrSpec("shape", "scalars"), AttrSpec("value", "number")), doc="A constant tensor.", fill="value"),
]
