"""Attention: ``scaled_dot_product_attention``, and ``_scaled_dot_product_flash_attention_for_cpu`` (and its
backward), what ``F.scaled_dot_product_attention`` becomes on CPU under aot_autograd, grouped-query attention
included (key/value with fewer heads than the query; query head h reads key/value head ``h // (Hq / Hk)``). The
flash forward returns the output and the log-sum-exp of each query row; the backward reads both (as the kernel
does: ``P = exp(S - lse)``, ``dS = P * (dP - rowsum(dO * O))``). Attention is independent per batch entry and per
head group, so a split of the batch, or of the heads that keeps whole groups together (the query split in the same
ratio as key/value), commutes with it (the lemmas: ``attention.py`` beside this package)."""
from __future__ import annotations

import math
from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

from .dropout import _dropout_mask
from .helpers import ABSENT, _optional, _same, broadcast, broadcasts_to
from .normalisation import _softmax


def _sdpa_shape(shapes, attrs, cx):
    name = "aten.scaled_dot_product_attention"
    q, k, v, m = _optional(name, shapes, attrs["absent"], 4)
    if q is None or k is None or v is None:
        fail(f"{name}: only attn_mask may be absent")
    if min(len(q), len(k), len(v)) < 2:
        fail(f"{name}: query/key/value must have rank >= 2")
    if not _same(cx, q[-1], k[-1]):
        fail(f"{name}: query {fmt_shape(q)} and key {fmt_shape(k)} differ in the embedding dim")
    if not _same(cx, k[-2], v[-2]):
        fail(f"{name}: key {fmt_shape(k)} and value {fmt_shape(v)} differ in sequence length")
    kb, vb = tuple(k[:-2]), tuple(v[:-2])
    if attrs["enable_gqa"] and len(q) >= 3 and len(k) >= 3:
        hq, hk = q[-3], k[-3]
        ratio = Fraction(hq, hk) if isinstance(hq, int) and isinstance(hk, int) else S.sym(hq) / S.sym(hk)
        if not _same(cx, hk, v[-3]) or not cx.integral(S.norm(ratio)):
            fail(f"{name}: with enable_gqa, query heads {S.text(hq)} must be a multiple of key/value heads")
        kb, vb = kb[:-1] + (hq,), vb[:-1] + (hq,)
    batch = broadcast(name, [tuple(q[:-2]), kb, vb], cx)
    if m is not None:
        broadcasts_to(name, m, batch + (q[-2], k[-2]), cx, "attn_mask")
    return batch + (q[-2], v[-1])


def _sdpa_ref(xs, attrs):
    q, k, v, m = _optional("aten.scaled_dot_product_attention", xs, attrs["absent"], 4)
    if attrs["enable_gqa"] and q.ndim >= 3 and k.ndim >= 3:
        r = q.shape[-3] // k.shape[-3]
        k, v = np.repeat(k, r, axis=-3), np.repeat(v, r, axis=-3)
    scale = 1.0 / math.sqrt(q.shape[-1]) if attrs["scale"] is None else float(attrs["scale"])
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * scale
    L, Sk = q.shape[-2], k.shape[-2]
    if attrs["is_causal"]:
        s = np.where(np.tril(np.ones((L, Sk), dtype=bool)), s, -np.inf)
    if m is not None:
        s = np.where(m, s, -np.inf) if m.dtype == np.bool_ else s + m
    p = _softmax(s, -1)
    dp = float(attrs["dropout_p"])
    if dp > 0:
        p = p * _dropout_mask(p.shape, dp, True) / (1.0 - dp)
    return np.matmul(p, v)


ATTENTION_OPS = [
    OpDef("aten.scaled_dot_product_attention", None, _sdpa_shape, _sdpa_ref,
          (AttrSpec("dropout_p", "number", 0), AttrSpec("is_causal", "bool", False),
           AttrSpec("scale", "number", optional=True), AttrSpec("enable_gqa", "bool", False), ABSENT),
          doc="softmax(q @ k^T * scale + mask) @ v (scale 1/sqrt(E) by default; bool masks keep true "
              "entries; is_causal = lower-triangular; dropout_p > 0 uses the reference's fixed-seed mask). "
              "attn_mask optional via absent."),
]


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


OPS = ATTENTION_OPS + (
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
