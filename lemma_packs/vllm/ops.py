"""Operators of vLLM's ``_C`` dialect, in the functional form of their captured (auto_functionalized) calls.

vLLM's kernel ``_C::rms_norm(Tensor! result, Tensor input, Tensor weight, float epsilon) -> ()`` writes
``result``; the fx frontend drops a written-only argument (a fresh ``empty`` buffer) from the inputs and
makes every mutated argument an output (see ``auto_functionalized`` in ``graphguard/frontends/fx/convert.py``):

    _C.rms_norm(input, weight, epsilon=)                 -> result        (rms over the last dim)
    _C.fused_add_rms_norm(input, residual, weight, epsilon=) -> (input', residual')
        residual' = input + residual, input' = rms_norm(residual')
    _C.silu_and_mul(input)                               -> result = silu(x[..., :d]) * x[..., d:]
    _C.rotary_embedding(positions, query, key, cos_sin_cache, head_size=, is_neox=) -> (query', key')
    vllm.unified_attention_with_output(query, key, value, layer_name=, absent=) -> output

``_C::rotary_embedding(Tensor positions, Tensor! query, Tensor!? key, int head_size, Tensor cos_sin_cache,
bool is_neox) -> ()`` rotates, for token t, the first ``rot = cos_sin_cache.size(1)`` entries of each head
(``head_size`` entries of a token's row) by the angles of row ``positions[t]`` of the cache, whose first
half holds the cosines and the second the sines: pairs (x[i], x[i + rot/2]) in the neox style, (x[2i],
x[2i+1]) in the GPT-J style. ``vllm.rope(positions, x, cos_sin_cache, head_size=, is_neox=)`` is not a vLLM
op but the pack's name for what the kernel does to *one* of query and key (lemmas 720, 721 say so), which
lets the lemmas distribute it without carrying the other tensor along.

``vllm::unified_attention_with_output(Tensor query, Tensor key, Tensor value, Tensor! output, str
layer_name, Tensor? output_scale=None, Tensor? output_block_scale=None[, Tensor? kv_cache_dummy_dep=None])
-> ()`` writes attention into ``output`` (a fresh buffer: dropped from the inputs); vLLM 0.3x passes the KV-cache
write's token as ``kv_cache_dummy_dep`` (see ``ir.py``), which the reference ignores. The kernel reads its scale, mask and KV cache from
the layer named ``layer_name``; the reference is what a Qwen2/Llama layer asks for on one sequence in
prefill: causal attention with scale ``head_size ** -0.5``, query [T, Hq, D], key [T, Hk, D] and value
[T, Hk, Dv] with query head h reading KV head ``h // (Hq / Hk)`` (grouped-query attention), output
[T, Hq, Dv]. Quantised outputs (``output_scale``...) are refused; a zero-filled ``output`` buffer given as
an input (not a fresh ``empty``) is accepted and ignored, as the kernel overwrites it.

References compute in float64.
"""
from __future__ import annotations

import math

import numpy as np
import sympy as sp

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
ROTARY, ROPE, ATTN = "_C.rotary_embedding", "vllm.rope", "vllm.unified_attention_with_output"
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


def _tokens_heads(name, what, x, positions, head_size, cx):
    """x is [T, ...] with T the positions' length and a row per token of whole heads."""
    if len(x) < 2:
        fail(f"{name}: {what} {fmt_shape(x)} must be [tokens, ...] with at least two dims")
    if not cx.prove("==", x[0], positions[0]):
        fail(f"{name}: {what} {fmt_shape(x)} and positions {fmt_shape(positions)} differ in tokens")
    row = S.norm(sp.Mul(*[S.sym(d) for d in x[1:]]))
    if not cx.integral(S.norm(S.sym(row) / head_size)):
        fail(f"{name}: a token's row of {what} {fmt_shape(x)} is not whole heads of size {head_size}")


def _rope_check(name, positions, cache, head_size, cx):
    if len(positions) != 1:
        fail(f"{name}: positions must be [tokens], got {fmt_shape(positions)}")
    if len(cache) != 2:
        fail(f"{name}: cos_sin_cache must be [max_position, rot_dim], got {fmt_shape(cache)}")
    if not isinstance(head_size, int) or head_size < 1:
        fail(f"{name}: head_size {head_size} must be a positive integer")
    rot = cache[1]
    if not (cx.prove("<=", rot, head_size) and cx.prove(">=", rot, 2) and cx.integral(S.norm(S.sym(rot) / 2))):
        fail(f"{name}: rot_dim {S.text(rot)} (cos_sin_cache's last dim) must be even, >= 2 and <= head_size "
             f"{head_size}")


def _rope_ref_one(positions, x, cache, head_size, neox):
    t = positions.shape[0]
    heads = x.reshape(t, -1, int(head_size)).astype(np.float64)  # a copy
    rot = cache.shape[1]
    half = rot // 2
    cs = cache[positions.astype(np.int64)]  # [T, rot]: the cosines, then the sines
    cos, sin = cs[:, None, :half], cs[:, None, half:rot]
    if neox:
        i1, i2 = slice(0, half), slice(half, rot)
    else:
        i1, i2 = slice(0, rot, 2), slice(1, rot, 2)
    x1, x2 = heads[..., i1].copy(), heads[..., i2].copy()
    heads[..., i1] = x1 * cos - x2 * sin
    heads[..., i2] = x2 * cos + x1 * sin
    return heads.reshape(x.shape)


def _rotary_shapes(shapes, attrs, cx):
    p, q, k, c = shapes
    h = attrs["head_size"]
    if attrs["rope_dim_offset"] != 0 or attrs["inverse"]:
        fail(f"{ROTARY}: rope_dim_offset={attrs['rope_dim_offset']}, inverse={attrs['inverse']} (a rotation of "
             f"dims other than each head's first rot_dim, or its inverse) is not supported")
    _rope_check(ROTARY, p, c, h, cx)
    _tokens_heads(ROTARY, "query", q, p, h, cx)
    _tokens_heads(ROTARY, "key", k, p, h, cx)
    return [tuple(q), tuple(k)]


def _rotary_ref(xs, attrs):
    p, q, k, c = xs
    h, neox = attrs["head_size"], attrs["is_neox"]
    return [_rope_ref_one(p, q, c, h, neox), _rope_ref_one(p, k, c, h, neox)]


def _rope_shape(shapes, attrs, cx):
    p, x, c = shapes
    _rope_check(ROPE, p, c, attrs["head_size"], cx)
    _tokens_heads(ROPE, "input", x, p, attrs["head_size"], cx)
    return tuple(x)


ROPE_ATTRS = (AttrSpec("head_size", "int"), AttrSpec("is_neox", "bool"))
# vLLM >= 0.2x: the kernel also takes where the rotated dims start and whether to rotate backwards
ROTARY_ATTRS = ROPE_ATTRS + (AttrSpec("rope_dim_offset", "int", 0), AttrSpec("inverse", "bool", False))
_ATTN_ABSENT = AttrSpec("absent", "ints", default=())


def _attn_parts(xs, absent):
    """(query, key, value) of the captured inputs. The schema's tensors, flattened: query, key, value, [output],
    output_scale, output_block_scale, [kv_cache_dummy_dep] -- ``output`` only where it is read (not a fresh
    buffer), ``kv_cache_dummy_dep`` from vLLM 0.3x on (the token ``vllm.unified_kv_cache_update`` returns to
    order the cache write before the read; it holds no data). ``absent`` lists the positions of the missing
    optional ones. Quantised outputs (``output_scale``, ``output_block_scale`` present) are refused."""
    absent = set(absent or ())
    n = len(xs) + len(absent)
    if any(not 0 <= a < n for a in absent):
        fail(f"{ATTN}: absent positions {sorted(absent)} outside the {n} tensor arguments")
    # the layouts: (output given, dep slot) -> positions of output_scale and output_block_scale
    layouts = {5: [(False, False)], 6: [(True, False), (False, True)], 7: [(True, True)]}.get(n)
    if layouts is None:
        fail(f"{ATTN}: {len(xs)} input(s) with absent {sorted(absent)} do not match (query, key, value, [output,] "
             f"output_scale, output_block_scale[, kv_cache_dummy_dep])")
    for out, dep in layouts:
        scales = {3 + out, 4 + out}
        if scales <= absent and absent - scales <= ({5 + out} if dep else set()):
            return xs[:3]
    fail(f"{ATTN}: quantised outputs (output_scale / output_block_scale) are not supported")


def _attn_shape(shapes, attrs, cx):
    q, k, v = _attn_parts(shapes, attrs["absent"])
    if not len(q) == len(k) == len(v) == 3:
        fail(f"{ATTN}: query {fmt_shape(q)}, key {fmt_shape(k)}, value {fmt_shape(v)} must be [tokens, heads, "
             f"head_size]")
    if not (cx.prove("==", q[0], k[0]) and cx.prove("==", k[0], v[0])):
        fail(f"{ATTN}: query {fmt_shape(q)}, key {fmt_shape(k)} and value {fmt_shape(v)} differ in tokens")
    if not (cx.prove("==", q[2], k[2]) and cx.prove("==", k[1], v[1])):
        fail(f"{ATTN}: query {fmt_shape(q)} and key {fmt_shape(k)} differ in head size, or key and value "
             f"{fmt_shape(v)} in heads")
    if not (cx.prove(">=", k[1], 1) and cx.integral(S.norm(S.sym(q[1]) / S.sym(k[1])))):
        fail(f"{ATTN}: query heads {S.text(q[1])} are not a multiple of KV heads {S.text(k[1])}")
    out = (q[0], q[1], v[2])
    for extra in shapes[3:]:  # an output buffer read (zero-filled) or the KV-cache write's token
        if len(extra) == 3 and not all(cx.prove("==", a, b) for a, b in zip(extra, out)):
            fail(f"{ATTN}: output buffer {fmt_shape(extra)} is not {fmt_shape(out)}")
        if len(extra) not in (1, 3):
            fail(f"{ATTN}: extra input {fmt_shape(extra)} is neither an output buffer nor a KV-cache token")
    return out


def _attn_ref(xs, attrs):
    q, k, v = _attn_parts(xs, attrs["absent"])
    g = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)  # query head h reads KV head h // g
    s = np.einsum("thd,shd->hts", q, k) / math.sqrt(q.shape[2])
    t = q.shape[0]
    s = np.where(np.tril(np.ones((t, t), dtype=bool)), s, -np.inf)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    p /= p.sum(axis=-1, keepdims=True)
    return np.einsum("hts,shd->thd", p, v)


OPS = [
    OpDef(RMS, 2, _rms_shape, lambda xs, a: _rms(xs[0], xs[1], a["epsilon"]), EPS,
          doc="vLLM RMSNorm over the last dim: input / sqrt(mean(input^2, -1) + epsilon) * weight."),
    OpDef(SILU, 1, _silu_shape, _silu_ref,
          doc="vLLM SiluAndMul: silu(x[..., :d]) * x[..., d:] with d = x.shape[-1] // 2."),
] + multi_output(FUSED, 3, _fused_shapes, _fused_ref, EPS, names=("input", "residual"),
                 doc="vLLM fused residual add + RMSNorm: (rms_norm(input + residual), input + residual).") \
  + multi_output(ROTARY, 4, _rotary_shapes, _rotary_ref, ROTARY_ATTRS, names=("query", "key"),
                 dtypes=lambda ds, a: [ds[1], ds[2]],
                 doc="vLLM rotary embedding of query and key (in place in vLLM): each head's first rot_dim "
                     "entries rotated by the cos/sin of the token's position (neox or GPT-J pairs).") \
  + [OpDef(ROPE, 3, _rope_shape, lambda xs, a: _rope_ref_one(xs[0], xs[1], xs[2], a["head_size"], a["is_neox"]),
           ROPE_ATTRS, dtype=lambda ds, a: ds[1],
           doc="What _C.rotary_embedding does to one tensor (query or key): the pack's own op, used by lemmas."),
     OpDef(ATTN, None, _attn_shape, _attn_ref, (AttrSpec("layer_name", "str", ""), _ATTN_ABSENT),
           doc="vLLM attention into an output buffer: causal, scale head_size^-0.5, grouped-query heads "
               "([T, Hq, D] x [T, Hk, D] x [T, Hk, Dv] -> [T, Hq, Dv]).")]
