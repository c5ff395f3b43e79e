"""Operators of vLLM's ``_C`` dialect, in the functional form of their captured (auto_functionalized) calls.

vLLM's kernel ``_C::rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()`` writes
``result``; the fx frontend drops a written-only argument (a fresh ``empty`` buffer) from the inputs and
makes every mutated argument an output (see ``auto_functionalized`` in ``graphguard/frontends/fx/convert.py``):

    _C.rms_norm(input, weight, epsilon=)                 -> result        (rms over the last dim)
    _C.fused_add_rms_norm(input, residual, weight, epsilon=) -> (input', residual')
        residual' = input + residual, input' = rms_norm(residual')
    _C.silu_and_mul(input)                               -> result = silu(x[..., :d]) * x[..., d:]

References compute in float64.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
EPS = (AttrSpec("epsilon", "number"),)


def _same(name, a, b, cx, what):
    if len(a) != len(b) or not all(cx.prove("==", x, y) for x, y in zip(a, b)):
        fail(f"{name}: {what} differ: {fmt_shape(a)} vs {fmt_shape(b)}")


def _weight(name, x, w, cx):
    if len(x) < 1:
        fail(f"{name}: input must have at least one dim")
    _same(name, tuple(w), (x[-1],), cx, "weight and the input's last dim")


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + float(eps)) * w


def _rms_shape(shapes, attrs, cx):
    x, w = shapes
    _weight(RMS, x, w, cx)
    return tuple(x)


def _fused_shapes(shapes, attrs, cx):
    x, r, w = shapes
    _same(FUSED, tuple(x), tuple(r), cx, "input and residual shapes")
    _weight(FUSED, x, w, cx)
    return [tuple(x), tuple(x)]


def _fused_ref(xs, attrs):
    x, r, w = xs
    s = x + r
    return [_rms(s, w, attrs["epsilon"]), s]


def _silu_shape(shapes, attrs, cx):
    (x,) = shapes
    if len(x) < 1:
        fail(f"{SILU}: input must have at least one dim")
    last = x[-1]
    half = S.norm(S.parse(f"({S.text(last)})/2")) if not isinstance(last, int) else last // 2
    if not cx.prove("==", S.norm(S.parse(f"2*({S.text(half)})")), last):
        fail(f"{SILU}: last dim {S.text(last)} of input {fmt_shape(x)} is not even")
    return tuple(x[:-1]) + (half,)


def _silu_ref(xs, attrs):
    (x,) = xs
    d = x.shape[-1] // 2
    g = x[..., :d]
    return g / (1.0 + np.exp(-g)) * x[..., d:]


OPS = [
    OpDef(RMS, 2, _rms_shape, lambda xs, a: _rms(xs[0], xs[1], a["epsilon"]), EPS,
          doc="vLLM RMSNorm over the last dim: input / sqrt(mean(input^2, -1) + epsilon) * weight."),
    OpDef(SILU, 1, _silu_shape, _silu_ref,
          doc="vLLM SiluAndMul: silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2."),
] + multi_output(FUSED, 3, _fused_shapes, _fused_ref, EPS, names=("input", "residual"),
                 doc="vLLM fused residual add + RMSNorm: (rms_norm(input + residual), input + residual).")
