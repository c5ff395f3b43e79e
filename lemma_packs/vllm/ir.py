"""vLLM IR operators (the ``vllm_ir`` namespace of vLLM 0.3x) and the KV-cache write, as captured.

vLLM 0.3x writes its norms as *vLLM IR* ops (``vllm/ir/ops``), torch custom ops whose provider (``native``:
plain torch; ``vllm_c``: the ``_C`` kernels, on GPUs) is chosen when the graph is lowered; a captured graph
holds the op itself:

    vllm_ir.rms_norm(x, weight?, epsilon=, variance_size=None)   -> x / sqrt(mean(x^2, -1) + eps) * weight
    vllm_ir.fused_add_rms_norm(x, x_residual, weight?, epsilon=, variance_size=None)
        -> (rms_norm(x + x_residual), x + x_residual)
    vllm_ir.fused_add_rms_norm.maybe_inplace(...)                 (captured under auto_functionalized_v2)
        -> (rms_norm(x + x_residual), x + x_residual, x', x_residual')
    vllm.unified_kv_cache_update(key, value, layer_name=)        -> an empty [0] tensor

``maybe_inplace`` may or may not overwrite ``x`` and ``x_residual`` with its results (the provider decides);
callers read only the returns. Its outputs #2 and #3 (the arguments after the call) are modelled as the
in-place provider leaves them (the results); no lemma reasons about them, so graphs relate them only where both
compute the same op on related inputs. ``variance_size`` (a norm over the first n entries of the last dim) is
refused unless absent; ``weight`` may be absent (``absent=[1]``, a norm without weight).

``vllm.unified_kv_cache_update`` writes key and value into the layer's KV cache (a side effect the graph does
not hold) and returns an empty tensor that ``vllm.unified_attention_with_output`` takes as
``kv_cache_dummy_dep``, only to keep the write before the read. The pack's attention reference is one fresh
sequence in prefill (see ``ops.py``): the cache then holds exactly this call's keys and values, so the token
carries no data.

References compute in float64 (vLLM's native providers compute in float32 and round to the input's dtype).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

from .ops import _rms, _same

RMS_IR, FUSED_IR = "vllm_ir.rms_norm", "vllm_ir.fused_add_rms_norm"
FUSED_IR_INPLACE = "vllm_ir.fused_add_rms_norm.maybe_inplace"
KV_UPDATE = "vllm.unified_kv_cache_update"
_ATTRS = (AttrSpec("epsilon", "number"), AttrSpec("variance_size", "scalar", optional=True),
          AttrSpec("absent", "ints", default=()))


def _weight(name, shapes, attrs, n_act, cx):
    """The activations and the weight (None where absent) of a norm's inputs; the weight spans the last dim."""
    absent = tuple(attrs["absent"] or ())
    if attrs["variance_size"] is not None:
        fail(f"{name}: variance_size={attrs['variance_size']} (a norm over part of the last dim) is not supported")
    if absent not in ((), (n_act,)) or len(shapes) != n_act + (0 if absent else 1):
        fail(f"{name}: {len(shapes)} input(s) with absent {list(absent)}: expected {n_act} activation(s) and an "
             f"optional weight")
    xs, w = shapes[:n_act], (None if absent else shapes[n_act])
    x = xs[0]
    if len(x) < 1:
        fail(f"{name}: input must have at least one dim")
    if w is not None:
        _same(name, tuple(w), (x[-1],), cx, "weight and the input's last dim")
    return xs, w


def _norm(x, w, eps):
    return _rms(x, 1.0 if w is None else w, eps)


def _rms_shape(shapes, attrs, cx):
    (x,), _ = _weight(RMS_IR, shapes, attrs, 1, cx)
    return tuple(x)


def _rms_ref(xs, attrs):
    return _norm(xs[0], xs[1] if len(xs) > 1 else None, attrs["epsilon"])


def _fused_shapes(name, n_out):
    def shapes_fn(shapes, attrs, cx):
        (x, r), _ = _weight(name, shapes, attrs, 2, cx)
        _same(name, tuple(x), tuple(r), cx, "x and x_residual shapes")
        return [tuple(x)] * n_out
    return shapes_fn


def _fused_ref(n_out):
    def ref(xs, attrs):
        s = xs[0] + xs[1]
        out = _norm(s, xs[2] if len(xs) > 2 else None, attrs["epsilon"])
        return [out, s, out, s][:n_out]
    return ref


def _kv_shape(shapes, attrs, cx):
    k, v = shapes
    if len(k) != 3 or len(v) != 3 or not cx.prove("==", k[0], v[0]) or not cx.prove("==", k[1], v[1]):
        fail(f"{KV_UPDATE}: key {fmt_shape(k)} and value {fmt_shape(v)} must be [tokens, kv_heads, head_size]")
    return (0,)


OPS = [
    OpDef(RMS_IR, None, _rms_shape, _rms_ref, _ATTRS, dtype=lambda ds, a: ds[0],
          doc="vLLM IR RMSNorm over the last dim: x / sqrt(mean(x^2, -1) + epsilon) * weight."),
    OpDef(KV_UPDATE, 2, _kv_shape, lambda xs, a: np.zeros((0,), dtype=xs[0].dtype), (AttrSpec("layer_name", "str"),),
          dtype=lambda ds, a: ds[0],
          doc="vLLM's KV-cache write: returns an empty token ordering it before the attention that reads it."),
] + multi_output(FUSED_IR, None, _fused_shapes(FUSED_IR, 2), _fused_ref(2), _ATTRS, names=("output", "residual"),
                 dtypes=lambda ds, a: [ds[0], ds[0]],
                 doc="vLLM IR fused residual add + RMSNorm: (rms_norm(x + x_residual), x + x_residual).") \
  + multi_output(FUSED_IR_INPLACE, None, _fused_shapes(FUSED_IR_INPLACE, 4), _fused_ref(4), _ATTRS,
                 names=("output", "residual", "x", "x_residual"), dtypes=lambda ds, a: [ds[0]] * 4,
                 doc="vLLM IR fused residual add + RMSNorm that may write its results into x and x_residual: "
                     "(output, residual, x after, x_residual after).")
