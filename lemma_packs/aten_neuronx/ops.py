"""Operators of the aten-neuronx pack.

``aten.hf_rms_norm(x, weight, eps, dtype)``: HF transformers' ``LlamaRMSNorm`` (and every RMSNorm HF copies
from it) from the float32 copy of its input -- ``weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps)).to(dtype)``
-- as one op. It declares that expression (``fuses``): a graph spelling it out op by op (the fx capture of HF's
module: ``pow``, ``mean``, ``add``, ``rsqrt``, ``mul``, ``_to_copy``, ``mul``; the intermediates read nowhere
else) is collapsed into this op before proving (the pass ``fuse_expressions``, ``graphguard/passes/fusion.py``),
and family 1218 states the identity for ``lemmas check`` to fuzz. ``eps`` is the 0-dim tensor the graph adds (an
``aten.scalar_tensor``), as ``AwsNeuronRmsNorm`` takes it as an operand.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

HF_RMS = "aten.hf_rms_norm"

_FUSES = ("aten.mul.Tensor(?x1, aten._to_copy(aten.mul.Tensor(?x0, aten.rsqrt(aten.add.Tensor(aten.mean.dim("
          "aten.pow.Tensor_Scalar(?x0, exponent=2), dim=?p_k, keepdim=true, dtype=None), ?x2, alpha=1))),"
          " dtype=?p_dtype))",
          "rank(?x0) >= 1 and ?p_k == [rank(?x0) - 1] and rank(?x1) == 1 and size(?x1, 0) == size(?x0, rank(?x0) - 1) and rank(?x2) == 0"
          " and dtype(?x0) == \"float32\"")


def _shape(shapes, attrs, cx):
    x, w, eps = shapes
    if not x or len(w) != 1 or not cx.prove("==", w[0], x[-1]):
        fail(f"{HF_RMS}: weight {fmt_shape(w)} is not a vector as long as the last dim of input {fmt_shape(x)}")
    if len(eps) != 0:
        fail(f"{HF_RMS}: eps {fmt_shape(eps)} is not a 0-dim tensor")
    return tuple(x)


def _ref(xs, attrs):
    x, w, eps = (np.asarray(v, dtype=np.float64) for v in xs)
    y = x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    return w * y


_ref.fuses_examples = tuple(
    {"x0": x, "x1": [x[-1]], "x2": [], "p_dtype": t, "p_k": [len(x) - 1], "x0:dtype": "float32", "x1:dtype": w,
     "x2:dtype": "float32"}
    for x, t, w in (([2, 3, 4], "float16", "float16"), ([3, 5], "float32", "float32"), ([1, 2, 2, 3], "float16", "float16"),
                    ([4, 1, 2], "float32", "float16"), ([6], "float16", "float32")))


def _dtype(ds, attrs):
    from graphguard.ir.ops import promote  # (the weight times the result cast to dtype: torch's promotion)
    return promote(ds[1], attrs["dtype"])


OPS = [
    OpDef(HF_RMS, 3, _shape, _ref, (AttrSpec("dtype", "str"),),
          doc="HF's RMSNorm from the float32 copy x: weight * (x * rsqrt(mean(x^2, -1, keepdim) + eps)).to(dtype); "
              "eps a 0-dim tensor.", dtype=_dtype, rowwise=None, fuses=_FUSES),
]
