"""Compute operators of the ``onnx`` dialect: ONNX operators as the ``onnx`` frontend emits them.

Conventions shared with the frontend (``graphguard/frontends/onnx/convert.py``):

* name: ``onnx.<OpType>`` for the default domain (``onnx.MatMul``, ``onnx.LayerNormalization``);
* inputs: the node's tensor inputs in order; shape-carrying inputs read from constants (``ReduceSum``'s axes,
  ``Expand``'s shape) become attributes; ONNX attributes keep their names, typed (``keepdims`` a bool, dtypes as
  numpy-style names: ``Cast``'s ``to`` is the attribute ``dtype``), except ``LayerNormalization``'s ``axis``,
  given as ``normalized_shape``: the input's shape from ``axis`` on (as ATen's layer norm states it);
* data movement never reaches this dialect: Transpose -> ``core.permute``, Reshape / Flatten / Squeeze /
  Unsqueeze -> ``core.reshape``, Concat -> ``core.concat``, step-1 Slice -> ``core.slice``, Split ->
  ``core.split``, Identity -> ``core.identity``; Shape, and any op whose inputs are all constants, is folded.

The NumPy references are ONNX's own: each call runs the operator through ``onnx.reference.ReferenceEvaluator``
(a one-node model per operator, attribute values and input dtypes; cached). Floating-point inputs arrive as
float64 and are computed in float64 (``Cast`` to a float dtype computes in float64, as the other packs do).
"""
from __future__ import annotations

import functools
from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, Reduction, RowWise, fail, float_to_int, fmt_shape, numel, promote

OPSET = 20  # the one-node models' opset (Gelu needs 20; ReduceSum/ReduceMean take axes as an input there)

# ONNX element types and graphguard's dtype names (TensorProto.DataType values)
DTYPE_OF = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
            10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16", 17: "float8_e4m3fn",
            18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz"}
ELEM_OF = {v: k for k, v in DTYPE_OF.items()}
FLOATS = ("float16", "bfloat16", "float32", "float64")


def np_dtype(d: str):
    """The NumPy dtype a reference computes in: float64 for every float dtype, exact ints and bool."""
    if d == "bool":
        return np.bool_
    if d.startswith(("int", "uint")):
        return np.dtype(d)
    return np.float64


def _onnx_value(spec: AttrSpec, v):
    """An attribute value as the ONNX node attribute it came from."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, Fraction):
        return float(v)
    if isinstance(v, tuple):
        return [int(x) for x in v]
    return v


@functools.lru_cache(maxsize=512)
def _evaluator(op_type: str, attrs: tuple, in_elems: tuple, extra: tuple, opset: int = OPSET):
    """A ReferenceEvaluator for one node ``op_type`` on inputs of ONNX element types ``in_elems`` plus
    constant inputs ``extra`` ((name, int64 values), ...)."""
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator
    names = [f"i{k}" for k in range(len(in_elems))]
    inputs = [helper.make_tensor_value_info(n, e, None) for n, e in zip(names, in_elems)]
    inits = [helper.make_tensor(n, TensorProto.INT64, [len(v)], list(v)) for n, v in extra]
    node = helper.make_node(op_type, names + [n for n, _ in extra], ["y"], **dict(attrs))
    out = helper.make_value_info("y", helper.TypeProto())
    graph = helper.make_graph([node], op_type, inputs, [out], initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model)


def run_onnx(op_type: str, xs, attrs: dict | None = None, extra: tuple = (), opset: int = OPSET) -> np.ndarray:
    """Run ONNX operator ``op_type`` on arrays ``xs`` with ONNX attributes ``attrs`` (ReferenceEvaluator)."""
    from onnx.helper import np_dtype_to_tensor_dtype
    xs = [np.asarray(x) for x in xs]
    elems = tuple(int(np_dtype_to_tensor_dtype(x.dtype)) for x in xs)
    ev = _evaluator(op_type, tuple(sorted((attrs or {}).items())), elems, tuple(extra), opset)
    (y,) = ev.run(None, {f"i{k}": x for k, x in enumerate(xs)})
    return np.asarray(y)


def _ref(op_type: str, to_onnx=None):
    """The reference of an op whose attributes map one to one onto the ONNX node's (``to_onnx`` rewrites them:
    ``(attrs) -> (onnx_attrs, extra constant inputs)``)."""
    def ref(xs, a):
        if to_onnx is not None:
            attrs, extra = to_onnx(a)
        else:
            attrs, extra = {k: _onnx_value(None, v) for k, v in a.items() if v is not None}, ()
        return run_onnx(op_type, xs, attrs, extra)
    return ref


# =================================================================================================
# Shapes
# =================================================================================================

def broadcast_shapes(name: str, shapes, cx) -> tuple:
    """NumPy (multidirectional) broadcasting of ``shapes``; a size-1 dim stretches."""
    r = max(len(s) for s in shapes)
    out = []
    for k in range(r):
        dims = [s[len(s) - r + k] for s in shapes if len(s) - r + k >= 0]
        big = [d for d in dims if not cx.prove("==", d, 1)]
        if not big:
            out.append(1)
            continue
        for d in big[1:]:
            if not cx.prove("==", d, big[0]):
                fail(f"{name}: shapes {', '.join(fmt_shape(s) for s in shapes)} do not broadcast")
        out.append(big[0])
    return tuple(out)


def _bcast(name):
    return lambda shapes, a, cx: broadcast_shapes(name, shapes, cx)


def _same(shapes, a, cx):
    return tuple(shapes[0])


def _matmul_shape(shapes, a, cx):
    x, y = shapes
    if not x or not y:
        fail(f"onnx.MatMul: needs tensors of rank >= 1, got {fmt_shape(x)} and {fmt_shape(y)}")
    xs, ys = (tuple(x) if len(x) > 1 else (1,) + tuple(x)), (tuple(y) if len(y) > 1 else tuple(y) + (1,))
    if not cx.prove("==", xs[-1], ys[-2]):
        fail(f"onnx.MatMul: inner dimensions differ: {fmt_shape(x)} @ {fmt_shape(y)}")
    batch = broadcast_shapes("onnx.MatMul", [xs[:-2], ys[:-2]], cx) if len(xs) > 2 or len(ys) > 2 else ()
    return batch + ((xs[-2],) if len(x) > 1 else ()) + ((ys[-1],) if len(y) > 1 else ())


def _gemm_shape(shapes, a, cx):
    x, w, c = shapes
    if len(x) != 2 or len(w) != 2:
        fail(f"onnx.Gemm: A and B must be matrices, got {fmt_shape(x)} and {fmt_shape(w)}")
    m, k = (x[1], x[0]) if a["transA"] else (x[0], x[1])
    k2, n = (w[1], w[0]) if a["transB"] else (w[0], w[1])
    if not cx.prove("==", k, k2):
        fail(f"onnx.Gemm: inner dimensions differ: {fmt_shape(x)} and {fmt_shape(w)} (transA={a['transA']}, "
             f"transB={a['transB']})")
    out = broadcast_shapes("onnx.Gemm", [(m, n), c], cx)
    if len(out) != 2 or not (cx.prove("==", out[0], m) and cx.prove("==", out[1], n)):
        fail(f"onnx.Gemm: C {fmt_shape(c)} does not broadcast to [{S.text(m)}, {S.text(n)}]")
    return (m, n)


def _axis_ok(name, shape, axis):
    if not 0 <= axis < max(len(shape), 1):
        fail(f"{name}: axis {axis} out of range for a rank-{len(shape)} tensor")


def _softmax_shape(shapes, a, cx):
    _axis_ok("onnx.Softmax", shapes[0], a["axis"])
    return tuple(shapes[0])


def _reduce_shape(name):
    def f(shapes, a, cx):
        (x,) = shapes
        axes = a["axes"] or tuple(range(len(x)))
        if len(set(axes)) != len(axes) or any(not 0 <= d < len(x) for d in axes):
            fail(f"{name}: axes {list(axes)} are not distinct dims of a rank-{len(x)} tensor")
        if a["keepdims"]:
            return tuple(1 if k in axes else d for k, d in enumerate(x))
        return tuple(d for k, d in enumerate(x) if k not in axes)
    return f


def _layer_norm_shape(shapes, a, cx, name="onnx.LayerNormalization"):
    x = shapes[0]
    row = tuple(a["normalized_shape"])
    if len(row) == 0 or len(row) > len(x) or not all(cx.prove("==", u, v) for u, v in zip(row, x[len(x) - len(row):])):
        fail(f"{name}: normalized_shape {fmt_shape(row)} is not the trailing shape of "
             f"{fmt_shape(x)}")
    for t in shapes[1:]:  # scale (and LayerNormalization's bias)
        if len(t) > len(row) or broadcast_shapes(name, [row, t], cx) != row:
            fail(f"{name}: scale/bias {fmt_shape(t)} does not broadcast to the rows "
                 f"{fmt_shape(row)}")
    return tuple(x)


def _expand_shape(shapes, a, cx):
    (x,) = shapes
    out = tuple(a["shape"])
    if len(x) > len(out) or broadcast_shapes("onnx.Expand", [x, out], cx) != out:
        fail(f"onnx.Expand: {fmt_shape(x)} does not broadcast to {fmt_shape(out)}")
    return out


def _const_shape(shapes, a, cx):
    if a["values"] is not None:
        n = len([v for v in a["values"].split(",") if v.strip()])
        if not cx.prove("==", numel(a["shape"]), n):
            fail(f"onnx.Constant: {n} values for shape {fmt_shape(a['shape'])}")
    return tuple(a["shape"])


def _ints(shape) -> list[int]:
    return [int(d) for d in shape]


def _const_ref(xs, a):
    text = a["values"].strip()
    vals = [float(v) if any(c in v for c in ".eEna") else int(v) for v in text.split(",")] if text else []
    return np.asarray(vals, dtype=np_dtype(a["dtype"])).reshape(_ints(a["shape"]))


def _fill_ref(xs, a):
    v = a["value"]
    return np.full(_ints(a["shape"]), float(v) if isinstance(v, Fraction) and v.denominator != 1 else
                   (int(v) if isinstance(v, Fraction) else v), dtype=np_dtype(a["dtype"]))


# =================================================================================================
# Attribute translations for the references
# =================================================================================================

def _cast_onnx(a):
    d = a["dtype"]
    return {"to": ELEM_OF["float64"] if d in FLOATS else ELEM_OF[d]}, ()


_ONNX_CAST = _ref("Cast", _cast_onnx)


def _cast_ref(xs, a):
    """onnx.reference's Cast, except from floating point to an integer type: truncated and saturated, as every
    pack's cast (``graphguard.ir.ops.float_to_int``; ONNX leaves NaN and out-of-range values undefined)."""
    x = np.asarray(xs[0])
    if x.dtype.kind == "f" and np.dtype(np_dtype(a["dtype"])).kind in "iu":
        return float_to_int(x, np_dtype(a["dtype"]))
    return _ONNX_CAST(xs, a)


def _reduce_onnx(a):
    return {"keepdims": int(a["keepdims"])}, (("axes", tuple(a["axes"] or ())),)


def _layer_norm_ref(xs, a):
    axis = xs[0].ndim - len(a["normalized_shape"])
    return run_onnx("LayerNormalization", xs, {"axis": axis, "epsilon": float(a["epsilon"])})


def _rms_norm_shape(shapes, a, cx):
    return _layer_norm_shape(shapes, a, cx, "onnx.RMSNormalization")


def _rms_norm_ref(xs, a):
    axis = xs[0].ndim - len(a["normalized_shape"])
    return run_onnx("RMSNormalization", xs, {"axis": axis, "epsilon": float(a["epsilon"])}, opset=23)


def _float_in(name):
    def f(ds, a):
        if ds and ds[0] not in FLOATS:
            fail(f"{name}: needs a floating-point input, got {ds[0]}")
        return ds[0] if ds else "float32"
    return f


def _same_dtypes(name):
    """ONNX gives both inputs one dtype (the frontend's graphs always do); terms the lemmas build may combine
    two (a partial sum of two dtypes): NumPy promotes them, as the reference computes."""
    return lambda ds, a: promote(*ds)


# =================================================================================================
# The operators
# =================================================================================================

COMM = {"commutative": True, "associative": True}


def _promoted(ref):
    """ONNX gives both inputs one dtype; a term the lemmas build may combine two (a partial sum of two dtypes, a
    0-dim constant): computed in their promoted dtype, the one the op's dtype function declares."""
    def f(xs, a):
        xs = [np.asarray(x) for x in xs]
        names = {x.dtype.name for x in xs}
        if len(names) > 1:
            target = promote(*(x.dtype.name for x in xs))
            dt = next((x.dtype for x in xs if x.dtype.name == target), None) or np.dtype(target)
            xs = [x.astype(dt) for x in xs]
        return ref(xs, a)
    return f


def _binary(name, doc, **props):
    return OpDef(f"onnx.{name}", 2, _bcast(f"onnx.{name}"), _promoted(_ref(name)), doc=doc, elementwise=(0, 1),
                 broadcasting=True, dtype=_same_dtypes(f"onnx.{name}"), **props)


def _unary(name, doc, attrs=(), dtype=None, **props):
    return OpDef(f"onnx.{name}", 1, _same, _ref(name), attrs, doc=doc, elementwise=(0,),
                 dtype=dtype or _float_in(f"onnx.{name}"), **props)


DTYPE = AttrSpec("dtype", "str", choices=tuple(sorted(ELEM_OF)))
SHAPE = AttrSpec("shape", "scalars")
AXES = AttrSpec("axes", "ints", optional=True, dim_of=0)
KEEPDIMS = AttrSpec("keepdims", "bool", default=True)

OPS = [
    OpDef("onnx.MatMul", 2, _matmul_shape, _promoted(_ref("MatMul")), doc="NumPy matmul (batch dims broadcast).",
          linear=(0, 1), dtype=_same_dtypes("onnx.MatMul")),
    OpDef("onnx.Gemm", 3, _gemm_shape, _promoted(_ref("Gemm")),
          (AttrSpec("alpha", "number", Fraction(1)), AttrSpec("beta", "number", Fraction(1)),
           AttrSpec("transA", "int", 0), AttrSpec("transB", "int", 0)),
          doc="alpha * A' @ B' + beta * C (A' = A or its transpose, B' likewise; C broadcast).",
          dtype=_same_dtypes("onnx.Gemm")),
    _binary("Add", "a + b (broadcasting).", linear=((0, 1),), identity=((1, 0, {}), (0, 0, {})), **COMM),
    _binary("Sub", "a - b (broadcasting).", linear=((0, 1),), identity=((1, 0, {}),)),
    _binary("Mul", "a * b (broadcasting).", linear=(0, 1), scaling=True, identity=((1, 1, {}), (0, 1, {})), **COMM),
    _binary("Div", "a / b (broadcasting; integers truncate).", linear=(0,), scaling=True, identity=((1, 1, {}),)),
    _binary("Pow", "a ** b (broadcasting)."),
    _unary("Relu", "max(x, 0).", dtype=lambda ds, a: ds[0]),
    _unary("Neg", "-x.", dtype=lambda ds, a: ds[0], linear=(0,)),
    _unary("Gelu", "x * Phi(x) (approximate='tanh': the tanh form).",
           (AttrSpec("approximate", "str", "none", ("none", "tanh")),)),
    _unary("Erf", "The error function."),
    _unary("Tanh", "tanh(x)."),
    _unary("Sigmoid", "1 / (1 + exp(-x))."),
    _unary("Exp", "exp(x)."),
    _unary("Sqrt", "sqrt(x)."),
    _unary("Reciprocal", "1 / x."),
    OpDef("onnx.Cast", 1, _same, _cast_ref, (DTYPE,), doc="Convert to dtype.",
          dtype=lambda ds, a: a["dtype"], elementwise=(0,)),
    OpDef("onnx.Softmax", 1, _softmax_shape, _ref("Softmax"), (AttrSpec("axis", "int", -1, dim_of=0),),
          doc="Softmax along axis (opset 13+).", rowwise=RowWise("axis"), dtype=_float_in("onnx.Softmax")),
    OpDef("onnx.ReduceSum", 1, _reduce_shape("onnx.ReduceSum"), _ref("ReduceSum", _reduce_onnx), (AXES, KEEPDIMS),
          doc="Sum over axes (none: every dim).", reduction=Reduction("axes", "keepdims", "core.sum"), linear=(0,)),
    OpDef("onnx.ReduceMean", 1, _reduce_shape("onnx.ReduceMean"), _ref("ReduceMean", _reduce_onnx),
          (AXES, KEEPDIMS), doc="Mean over axes (none: every dim).", reduction=Reduction("axes", "keepdims"),
          linear=(0,), dtype=_float_in("onnx.ReduceMean")),
    OpDef("onnx.ReduceMax", 1, _reduce_shape("onnx.ReduceMax"), _ref("ReduceMax", _reduce_onnx), (AXES, KEEPDIMS),
          doc="Max over axes (none: every dim).", reduction=Reduction("axes", "keepdims", "core.max")),
    OpDef("onnx.LayerNormalization", 3, _layer_norm_shape, _layer_norm_ref,
          (AttrSpec("normalized_shape", "scalars"), AttrSpec("epsilon", "number", Fraction(1, 100000))),
          doc="(x - mean) / sqrt(var + epsilon) * scale + bias over the trailing dims of normalized_shape "
              "(output Y only).", rowwise=RowWise("normalized_shape"), dtype=_float_in("onnx.LayerNormalization")),
    OpDef("onnx.RMSNormalization", 2, _rms_norm_shape, _rms_norm_ref,
          (AttrSpec("normalized_shape", "scalars"), AttrSpec("epsilon", "number", Fraction(1, 100000))),
          doc="x / sqrt(mean(x ** 2) + epsilon) * scale over the trailing dims of normalized_shape (opset 23).",
          rowwise=RowWise("normalized_shape"), dtype=_float_in("onnx.RMSNormalization")),
    OpDef("onnx.Expand", 1, _expand_shape, lambda xs, a: np.broadcast_to(xs[0], _ints(a["shape"])).copy(), (SHAPE,),
          doc="Broadcast to shape (the output shape, read from the constant shape input).", broadcast=True,
          data_movement=True, broadcast_to="shape"),
    OpDef("onnx.Constant", 0, _const_shape, _const_ref, (SHAPE, AttrSpec("values", "str"), DTYPE),
          doc="A constant given entry by entry (values: comma-separated, row-major).", dtype=lambda ds, a: a["dtype"]),
    OpDef("onnx.ConstantFill", 0, lambda s, a, cx: tuple(a["shape"]), _fill_ref,
          (SHAPE, AttrSpec("value", "number"), DTYPE), doc="A constant tensor of one value.",
          dtype=lambda ds, a: a["dtype"], fill="value"),
]
