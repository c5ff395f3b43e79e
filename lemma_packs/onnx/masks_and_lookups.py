"""ONNX operators of masks and lookups in transformer exports (Where, comparisons, logic, Gather, Trilu,
Max/Min, Abs, Log). References from ``onnx.reference`` as in ops.py."""
from __future__ import annotations

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, promote

from .ops import _binary, _ref, _same, _unary, broadcast_shapes, run_onnx


def _cmp(name, doc):
    return OpDef(f"onnx.{name}", 2, lambda s, a, cx, n=name: broadcast_shapes(f"onnx.{n}", s, cx), _ref(name),
                 doc=doc, elementwise=(0, 1), broadcasting=True, dtype=lambda ds, a: "bool")


def _as_bool(op_type, n_bool):
    """The ONNX reference on inputs whose first ``n_bool`` are read as bool (nonzero is true): ONNX types them
    bool, which the frontend's graphs always do; terms built by lemmas may carry other dtypes there."""
    import numpy as np

    def ref(xs, a):
        return run_onnx(op_type, [np.asarray(x) != 0 if k < n_bool else x for k, x in enumerate(xs)])
    return ref


def _where_shape(shapes, a, cx):
    return broadcast_shapes("onnx.Where", shapes, cx)


def _where_dtype(ds, a):
    return promote(ds[1], ds[2])


def _gather_shape(shapes, a, cx):
    x, idx = shapes
    ax = a["axis"]
    if not 0 <= ax < len(x):
        fail(f"onnx.Gather: axis {ax} out of range for {fmt_shape(x)}")
    return tuple(x[:ax]) + tuple(idx) + tuple(x[ax + 1:])


def _gather_dtype(ds, a):
    if ds[1] not in ("int32", "int64"):
        fail(f"onnx.Gather: indices must be int32 or int64, got {ds[1]}")
    return ds[0]


def _trilu_shape(shapes, a, cx):
    if len(shapes[0]) < 2:
        fail(f"onnx.Trilu: needs a rank >= 2 tensor, got {fmt_shape(shapes[0])}")
    return tuple(shapes[0])


def _trilu_ref(xs, a):
    import numpy as np
    return run_onnx("Trilu", list(xs) + [np.asarray(a["k"], dtype=np.int64)], {"upper": int(a["upper"])})


MASK_AND_LOOKUP_OPS = [
    _cmp("Equal", "a == b (broadcasting; bool)."),
    _cmp("Less", "a < b (broadcasting; bool)."),
    _cmp("Greater", "a > b (broadcasting; bool)."),
    OpDef("onnx.And", 2, lambda s, a, cx: broadcast_shapes("onnx.And", s, cx), _as_bool("And", 2),
          doc="a and b (bool; nonzero is true).", elementwise=(0, 1), broadcasting=True, dtype=lambda ds, a: "bool",
          commutative=True, associative=True),
    OpDef("onnx.Not", 1, _same, _as_bool("Not", 1), doc="not x (bool; nonzero is true).", elementwise=(0,),
          dtype=lambda ds, a: "bool"),
    OpDef("onnx.Where", 3, _where_shape, _as_bool("Where", 1), doc="cond ? a : b (broadcasting; cond nonzero is true).",
          elementwise=(0, 1, 2),
          broadcasting=True, dtype=_where_dtype, linear=((1, 2),)),
    _binary("Max", "max(a, b) (broadcasting).", commutative=True, associative=True),
    _binary("Min", "min(a, b) (broadcasting).", commutative=True, associative=True),
    _unary("Abs", "|x|.", dtype=lambda ds, a: ds[0]),
    _unary("Log", "log(x)."),
    OpDef("onnx.Gather", 2, _gather_shape, _ref("Gather"), (AttrSpec("axis", "int", 0, dim_of=0),),
          doc="x indexed along axis by the (integer) indices tensor.", dtype=_gather_dtype),
    OpDef("onnx.Trilu", 1, _trilu_shape, _trilu_ref, (AttrSpec("upper", "bool", True), AttrSpec("k", "int", 0)),
          doc="The upper (or lower) triangle of the last two dims from diagonal k (k read from its constant input).",
          dtype=lambda ds, a: ds[0]),
]
