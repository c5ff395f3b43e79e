"""Operators and lemmas torchtitan's Llama-3 needs beyond the rest of the ATen pack. Its lemmas
(1700-1735) are in the pack's subject files: ``attention.py`` (1700-1709), ``vocab_lookups.py`` (1710-1713,
1734-1735), ``indexing.py`` (1714-1715, 1731-1732), ``losses.py`` (1730, 1733).

* ``aten._scaled_dot_product_flash_attention_for_cpu`` (and its backward): what
  ``F.scaled_dot_product_attention`` becomes on CPU under aot_autograd, grouped-query attention included
  (key/value with fewer heads than the query; query head h reads key/value head ``h // (Hq / Hk)``). The
  forward returns the output and the log-sum-exp of each query row; the backward reads both (as the kernel
  does: ``P = exp(S - lse)``, ``dS = P * (dP - rowsum(dO * O))``). Attention is independent per batch
  entry and per head group, so a split of the batch, or of the heads that keeps whole groups together (the
  query split in the same ratio as key/value), commutes with it (1700-1709, forward and backward).
* torchtitan's vocabulary-parallel ``Embedding`` (``torchtitan/models/common/embedding.py``): rank r owns
  rows [s, e) of the table; ids outside are masked ``(i >= s) & (i < e)``, shifted and clamped into the
  shard, ``clamp(i - s, 0, e - s - 1)``, looked up, and the rows multiplied by the mask cast to the table's
  dtype; the sum over ranks is the full lookup (1710-1713, the forward and the backward). A batch split over
  data-parallel ranks: the lookup of split ids is the split lookups, and the table's gradient the sum of the
  parts' (1714, 1715).
* RMSNorm's mean over the hidden dim on sequence or batch shards: family 1205 (aten:1205[aten.mean.dim]).

The lemmas state real-number equalities: torchtitan zeroes another rank's rows by multiplying them by 0, which
is not a lookup where the table holds inf or NaN (the fuzzer leaves such indeterminate forms uncompared).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, fail, fmt_shape, multi_output

from .ops import ABSENT, _optional, _same, _softmax


# =================================================================================================
# Attention on CPU (flash kernel)
# =================================================================================================

_FWD = "aten._scaled_dot_product_flash_attention_for_cpu"
_BWD = "aten._scaled_dot_product_flash_attention_for_cpu_backward"
_ATTRS = (AttrSpec("dropout_p", "number", 0), AttrSpec("is_causal", "bool", False),
          AttrSpec("scale", "number", optional=True), ABSENT)


def _check_qkv(name, q, k, v, m, attrs, cx):
    if q is None or k is None or v is None:
        fail(f"{name}: only attn_mask may be absent")
    if not len(q) == len(k) == len(v) == 4:
        fail(f"{name}: query, key and value must be [batch, heads, seq, dim], got "
             f"{fmt_shape(q)}, {fmt_shape(k)}, {fmt_shape(v)}")
    if attrs["dropout_p"] != 0:
        fail(f"{name}: dropout_p={float(attrs['dropout_p'])} is not supported (only 0)")
    if not (_same(cx, q[0], k[0]) and _same(cx, k[0], v[0])):
        fail(f"{name}: batch sizes differ: {fmt_shape(q)}, {fmt_shape(k)}, {fmt_shape(v)}")
    if not (_same(cx, q[3], k[3]) and _same(cx, k[3], v[3])):
        fail(f"{name}: query, key and value must have the same head size: {fmt_shape(q)}, {fmt_shape(k)}, "
             f"{fmt_shape(v)}")
    if not (_same(cx, k[1], v[1]) and _same(cx, k[2], v[2])):
        fail(f"{name}: key {fmt_shape(k)} and value {fmt_shape(v)} differ in heads or length")
    if not (isinstance(q[1], int) and isinstance(k[1], int) and k[1] >= 1 and q[1] % k[1] == 0):
        fail(f"{name}: query heads {q[1]} must be a multiple of key/value heads {k[1]}")
    if m is not None and not (len(m) <= 4 and all(_same(cx, d, 1) or _same(cx, d, t) for d, t in
                                                 zip(m[::-1], (k[2], q[2], q[1], q[0])))):
        fail(f"{name}: attn_mask {fmt_shape(m)} does not broadcast to [{fmt_shape(q)[1:-1]}, ...]")


def _fwd_shapes(shapes, attrs, cx):
    q, k, v, m = _optional(_FWD, shapes, attrs["absent"], 4)
    _check_qkv(_FWD, q, k, v, m, attrs, cx)
    return [tuple(q), tuple(q[:3])]


def _scores(q, k, m, attrs):
    """S = q k^T * scale (+ mask), key heads repeated to the query's; masked entries -inf."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if attrs["scale"] is None else float(attrs["scale"])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    if attrs["is_causal"]:
        s = np.where(np.tril(np.ones(s.shape[-2:], dtype=bool)), s, -np.inf)
    if m is not None:
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m
    return s, scale


def _repeat(k, q):
    return np.repeat(k, q.shape[1] // k.shape[1], axis=1)


def _fwd_ref(xs, attrs):
    q, k, v, m = _optional(_FWD, xs, attrs["absent"], 4)
    s, _ = _scores(q, _repeat(k, q), m, attrs)
    top = np.max(s, axis=-1, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        lse = np.log(np.sum(np.exp(s - top), axis=-1)) + top[..., 0]
    return [np.matmul(_softmax(s, -1), _repeat(v, q)), lse]


def _bwd_shapes(shapes, attrs, cx):
    g, q, k, v, o, lse, m = _optional(_BWD, shapes, attrs["absent"], 7)
    if None in (g, o, lse):
        fail(f"{_BWD}: only attn_mask may be absent")
    _check_qkv(_BWD, q, k, v, m, attrs, cx)
    for what, t, want in (("grad_out", g, q), ("out", o, q), ("logsumexp", lse, q[:3])):
        if len(t) != len(want) or not all(_same(cx, a, b) for a, b in zip(t, want)):
            fail(f"{_BWD}: {what} {fmt_shape(t)} does not match query {fmt_shape(q)}")
    return [tuple(q), tuple(k), tuple(v)]


def _bwd_ref(xs, attrs):
    g, q, k, v, o, lse, m = _optional(_BWD, xs, attrs["absent"], 7)
    kx, vx = _repeat(k, q), _repeat(v, q)
    s, scale = _scores(q, kx, m, attrs)
    with np.errstate(over="ignore", invalid="ignore"):
        p = np.where(np.isneginf(s), 0.0, np.exp(s - lse[..., None]))
    dv = np.matmul(np.swapaxes(p, -1, -2), g)
    dp = np.matmul(g, np.swapaxes(vx, -1, -2))
    ds = p * (dp - np.sum(g * o, axis=-1, keepdims=True))
    dq = np.matmul(ds, kx) * scale
    dk = np.matmul(np.swapaxes(ds, -1, -2), q) * scale

    def fold(t, like):  # the query heads of a group summed back onto their key/value head
        b, h, n, e = like.shape
        return t.reshape(b, h, t.shape[1] // h, n, e).sum(axis=2)
    return [dq, fold(dk, k), fold(dv, v)]


def _fwd_dtypes(ds, attrs):
    return [ds[0], "float32" if ds[0] in ("float16", "bfloat16") else ds[0]]


OPS = (
    multi_output(_FWD, None, _fwd_shapes, _fwd_ref, _ATTRS, names=("output", "logsumexp"), dtypes=_fwd_dtypes,
                 doc="softmax(q k^T * scale + mask) v per batch entry and head, key/value heads shared by "
                     "groups of Hq/Hk query heads (grouped-query attention); also the log-sum-exp of each "
                     "row of scores. is_causal: lower-triangular. dropout_p must be 0; attn_mask via absent.")
    + multi_output(_BWD, None, _bwd_shapes, _bwd_ref, _ATTRS, names=("grad_query", "grad_key", "grad_value"),
                   dtypes=lambda ds, a: [ds[1], ds[2], ds[3]],
                   doc="Gradients of the CPU flash attention from grad_out, q, k, v, out and logsumexp, as the "
                       "kernel computes them: P = exp(S - logsumexp), dS = P * (dP - rowsum(grad_out * out)); "
                       "a key/value head's gradient sums over its query heads.")
)

# =================================================================================================
# Lemma functions (the lemmas: attention.py, vocab_lookups.py, indexing.py, losses.py)
# =================================================================================================


def unit_dim_after(ctx, t):
    """A lemma function: tensor t's shape with a trailing 1 (``t.unsqueeze(-1)``)."""
    return tuple(ctx.shape_of(t)) + (1,)


FUNCTIONS = {"unit_dim_after": unit_dim_after}
