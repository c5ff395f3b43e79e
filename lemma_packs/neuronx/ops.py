"""Operators of the NeuronX pack: AWS Neuron's custom-call targets as the ``hlo`` frontend passes them.

An HLO ``custom-call`` with ``custom_call_target="T"`` reaches the IR as the op ``hlo.custom_call.T``
(``graphguard/frontends/hlo/convert.py``): its operands are the op's inputs, in order, and its
``backend_config`` is the op's attribute of that name when the op declares one. The NeuronX builders
(transformers-neuronx ``hlo.py``, torch-neuronx ``xla_impl/ops.py``) emit these four:

    AwsNeuronTransferWithStaticRing(x)                          -> x (moves a weight; an identity)
    AwsNeuronRmsNorm(x, weight, eps), backend_config="<dim>"    -> x / sqrt(mean(x^2, dim) + eps) * weight
    AwsNeuronSoftmax(x), backend_config="<dim>"                 -> softmax of x along dim
    AwsNeuronGeluApprxTanh(x)                                   -> 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))

``eps`` is an operand (an ``f32[]`` constant), the weight a vector as long as the normalised dim, broadcast
along the others. ``backend_config`` holds the dim as decimal text (``str(dim).encode()``); it is typed
``scalar`` here, so the text is read as the dim (a negative one counts from the end; absent: the last dim).
The RmsNorm input is usually ``f32`` and its declared result the model's dtype (``f16``/``bf16``): the
declared HLO dtype wins. References compute in float64 like the ``hlo`` pack's.
"""
from __future__ import annotations

import math

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

PREFIX = "hlo.custom_call."
RING, RMS, SOFTMAX, GELU = (PREFIX + t for t in ("AwsNeuronTransferWithStaticRing", "AwsNeuronRmsNorm",
                                                 "AwsNeuronSoftmax", "AwsNeuronGeluApprxTanh"))
# NeuronX writes the normalised / softmax dim as text; -1 (no backend_config) is the last dim
DIM = AttrSpec("backend_config", "scalar", default=-1, dim_of=0)


def _dim(name: str, shape, attrs) -> int:
    """The dim named by backend_config, in [0, rank)."""
    k, r = attrs["backend_config"], len(shape)
    if not isinstance(k, int) or not -r <= k < r:
        fail(f"{name}: backend_config={S.text(k)} is not a dim of a rank-{r} tensor {fmt_shape(shape)}")
    return k % r


def _f64(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float64)


def _rms_shape(shapes, attrs, cx):
    x, w, eps = shapes
    k = _dim(RMS, x, attrs)
    if len(w) != 1 or not cx.prove("==", w[0], x[k]):
        fail(f"{RMS}: weight {fmt_shape(w)} is not a vector as long as dim {k} of input {fmt_shape(x)}")
    if len(eps) > 1 or (len(eps) == 1 and not cx.prove("==", eps[0], 1)):
        fail(f"{RMS}: eps {fmt_shape(eps)} is not a scalar")
    return tuple(x)


def _rms_ref(xs, attrs):
    x, w, eps = (_f64(v) for v in xs)
    k = _dim(RMS, x.shape, attrs)
    view = [1] * x.ndim
    view[k] = x.shape[k]
    return x / np.sqrt(np.mean(x * x, axis=k, keepdims=True) + eps.reshape(())) * w.reshape(view)


def _softmax_shape(shapes, attrs, cx):
    _dim(SOFTMAX, shapes[0], attrs)
    return tuple(shapes[0])


def _softmax_ref(xs, attrs):
    x = _f64(xs[0])
    k = _dim(SOFTMAX, x.shape, attrs)
    e = np.exp(x - np.max(x, axis=k, keepdims=True))
    return e / np.sum(e, axis=k, keepdims=True)


def _gelu_tanh(x):
    x = _f64(x)
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def _same_shape(shapes, attrs, cx):
    return tuple(shapes[0])


OPS = [
    OpDef(RING, 1, _same_shape, lambda xs, a: xs[0],  # (its input, as core.identity's: no copy of a weight)
          doc="AwsNeuronTransferWithStaticRing: moves a tensor (a weight) to the device; its value is unchanged."),
    OpDef(RMS, 3, _rms_shape, _rms_ref, (DIM,),
          doc="AwsNeuronRmsNorm(x, weight, eps): x / sqrt(mean(x^2) + eps) * weight along dim backend_config "
              "(the weight broadcast along the other dims; eps a scalar operand).",
          dtype=lambda ds, a: None),  # the call's declared result dtype
    OpDef(SOFTMAX, 1, _softmax_shape, _softmax_ref, (DIM,),
          doc="AwsNeuronSoftmax(x): softmax along dim backend_config."),
    OpDef(GELU, 1, _same_shape, lambda xs, a: _gelu_tanh(xs[0]),
          doc="AwsNeuronGeluApprxTanh(x): GELU, tanh approximation, elementwise."),
]
