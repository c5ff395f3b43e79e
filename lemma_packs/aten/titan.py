"""Operators and lemmas torchtitan's Llama-3 needs beyond the rest of the ATen pack. References: 1700-1799.

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

from graphguard.ir.lemma import L
from graphguard.ir.ops import AttrSpec, fail, fmt_shape, multi_output

from .ops import ABSENT, _optional, _same, _softmax
from .vocab import _LOCAL as _CE_LOCAL, _MASK as _CE_MASK, _UNSQ, _unsq

NUMBERS = range(1700, 1800)  # this file's lemma numbers (the plugin loader refuses others)


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
# Lemmas
# =================================================================================================

# without attn_mask (torchtitan's causal attention): the mask is absent
_F = ("aten._scaled_dot_product_flash_attention_for_cpu#{k}({q}, {kk}, {v}, dropout_p=?p, is_causal=?c, scale=?s,"
      " absent=[3])")
_B = ("aten._scaled_dot_product_flash_attention_for_cpu_backward#{k}({g}, {q}, {kk}, {v}, {o}, {l},"
      " dropout_p=?p, is_causal=?c, scale=?s, absent=[6])")


def _fwd(k, q, kk, v):
    return _F.format(k=k, q=q, kk=kk, v=v)


def _bwd(k, g, q, kk, v, o, lse):
    return _B.format(k=k, g=g, q=q, kk=kk, v=v, o=o, l=lse)


def _cat(a, b, d):
    return f"concat({a}, {b}, dim={d})"


# the query heads split in the key/value heads' ratio (whole groups on each side), key and value alike
_GROUPS = ("size(?q1, 1) * size(?k2, 1) == size(?q2, 1) * size(?k1, 1) and size(?k1, 1) == size(?v1, 1)"
           " and size(?k1, 1) >= 1 and size(?k2, 1) >= 1 and ?p == 0")
_BATCH = "size(?q1, 0) == size(?k1, 0) and size(?k1, 0) == size(?v1, 0) and ?p == 0"


def _like_query(d):
    """The backward's grad_out, out and logsumexp split where the query is."""
    return " and ".join(f"size(?{t}1, {d}) == size(?q1, {d})" for t in "gol")


def _attn_examples(heads):
    out = []
    for b1, b2, h1, h2, r, n, e in ((1, 1, 1, 1, 2, 3, 2), (2, 1, 2, 1, 1, 2, 3), (1, 2, 1, 2, 3, 2, 2),
                                    (1, 1, 2, 2, 2, 4, 1), (2, 2, 1, 3, 1, 1, 2)):
        if heads:
            q1, q2, k1, k2 = [b1, h1 * r, n, e], [b1, h2 * r, n, e], [b1, h1, n, e], [b1, h2, n, e]
        else:
            q1, q2, k1, k2 = [b1, h1 * r, n, e], [b2, h1 * r, n, e], [b1, h1, n, e], [b2, h1, n, e]
        out.append({"q1": q1, "q2": q2, "k1": k1, "k2": k2, "v1": k1, "v2": k2, "g1": q1, "g2": q2, "o1": q1,
                    "o2": q2, "l1": q1[:3], "l2": q2[:3]})
    return out


def _split_fwd(k, d):
    lhs = _fwd(k, _cat("?q1", "?q2", d), _cat("?k1", "?k2", d), _cat("?v1", "?v2", d))
    return f"{lhs} => {_cat(_fwd(k, '?q1', '?k1', '?v1'), _fwd(k, '?q2', '?k2', '?v2'), d)}"


def _split_bwd(k, d):
    c = {n: _cat(f"?{n}1", f"?{n}2", d) for n in "gqkvol"}
    lhs = _bwd(k, c["g"], c["q"], c["k"], c["v"], c["o"], c["l"])
    parts = [_bwd(k, f"?g{i}", f"?q{i}", f"?k{i}", f"?v{i}", f"?o{i}", f"?l{i}") for i in (1, 2)]
    return f"{lhs} => {_cat(parts[0], parts[1], d)}"


ATTENTION = [
    L(1700, "cpu-attention-of-head-groups", _split_fwd(0, 1), _GROUPS, examples=_attn_examples(True)),
    L(1701, "cpu-attention-lse-of-head-groups", _split_fwd(1, 1), _GROUPS, examples=_attn_examples(True)),
    L(1702, "cpu-attention-of-batch-shards", _split_fwd(0, 0), _BATCH, examples=_attn_examples(False)),
    L(1703, "cpu-attention-lse-of-batch-shards", _split_fwd(1, 0), _BATCH, examples=_attn_examples(False)),
] + [L(1704 + k, f"cpu-attention-backward-{w}-of-head-groups", _split_bwd(k, 1),
       f"{_GROUPS} and {_like_query(1)}", examples=_attn_examples(True))
     for k, w in enumerate(("query", "key", "value"))
     ] + [L(1707 + k, f"cpu-attention-backward-{w}-of-batch-shards", _split_bwd(k, 0),
            f"{_BATCH} and {_like_query(0)}", examples=_attn_examples(False))
          for k, w in enumerate(("query", "key", "value"))]


# -- torchtitan's vocabulary-parallel embedding ----------------------------------------------------------------
# rank r owns rows [s, e): ids in range, (i >= s) & (i < e); shifted ids clamped into the shard
_MASK = "aten.bitwise_and.Tensor(aten.ge.Scalar({i}, other={s}), aten.lt.Scalar({i}, other={e}))"
_LOCAL = "aten.clamp(aten.sub.Tensor({i}, aten.scalar_tensor(s={s}, dtype=int64)), min=0, max={x})"  # x: e - s - 1
# mask.unsqueeze(-1).to(out.dtype); on a right side u, t are unit_dim_after(?i) and the table's dtype
_CAST = "aten._to_copy(reshape(" + _MASK + ", shape={u}), dtype={t})"
# the rows looked up, times the mask
_LOOKUP = (f"aten.mul.Tensor(aten.embedding({{w}}, {_LOCAL}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
           f" {_CAST})")
# its backward: the gradient times the mask, summed into the shard's rows
_EMB_BW = (f"aten.embedding_dense_backward(aten.mul.Tensor({{g}}, {_CAST}), {_LOCAL}, num_weights={{n}},"
           " padding_idx=?pi, scale_grad_by_freq=false)")
_A, _B, _AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"


def _lookup(w, i, s, e, x=None, u="?u", t="?t"):
    """The masked lookup of rows [s, e); ``x`` the clamp's bound, ``u``/``t`` the cast mask's shape and dtype
    (variables on a left side)."""
    return _LOOKUP.format(w=w, i=i, s=s, e=e, x=x or f"({e}) - ({s}) - 1", u=u, t=t)


def _emb_bw(g, i, s, e, n, x=None, u="?u", t="?t"):
    return _EMB_BW.format(g=g, i=i, s=s, e=e, n=n, x=x or f"({e}) - ({s}) - 1", u=u, t=t)


def unit_dim_after(ctx, t):
    """A lemma function: tensor t's shape with a trailing 1 (``t.unsqueeze(-1)``)."""
    return tuple(ctx.shape_of(t)) + (1,)


FUNCTIONS = {"unit_dim_after": unit_dim_after}


_FLOAT_MASK = "floating(?t) and ?t == dtype(?a) and ?p == -1"  # torchtitan has no padding row
_U, _T = "unit_dim_after(?i)", "dtype(?a)"
EMBEDDING = [
    # constrained (§4.3) to rank 0's cast mask (ids compared with 0), which also gives the mask's shape and dtype
    L(1710, "embedding-of-vocab-shards-mask-multiplied",
      "aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({_lookup('?a', '?i', 0, _A, u=_U, t=_T)}, {_lookup('?b', '?i', _A, _AB, u=_U, t=_T)})",
      f"rank(?a) == 2 and {_A} >= 1 and {_B} >= 1 and floating(dtype(?a)) and ?p == -1",
      when="aten.ge.Scalar(?i, other=0)",
      index={"i": _AB},
      examples=[{"a": [3, 4], "b": [2, 4], "i": [2, 3], "p": -1}, {"a": [2, 3], "b": [2, 3], "i": [5], "p": -1},
                {"a": [1, 2], "b": [3, 2], "i": [1, 2, 2], "p": -1}]),
    # a masked lookup of a concatenation (more than two ranks): the parts' masked lookups, the shift moved along
    L(1711, "mask-multiplied-lookup-of-vocab-shards",
      f"{_lookup('concat(?a, ?b, dim=0)', '?i', '?s', '?e', '?x')}"
      f" => sum({_lookup('?a', '?i', '?s', '?s + ' + _A)}, {_lookup('?b', '?i', '?s + ' + _A, '?e')})",
      f"?s // 1 == ?s and ?e - ?s == {_AB} and ?x == ?e - ?s - 1 and {_A} >= 1 and {_B} >= 1 and ({_UNSQ})"
      f" and {_FLOAT_MASK}",
      index={"i": "?e + 2"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": i, "u": _unsq(i), "s": s, "e": s + a + b, "t": "float32",
                 "x": a + b - 1, "p": -1}
                for a, b, i, s in ((2, 3, [7], 1), (1, 2, [2, 3], 0), (4, 4, [3, 4], 4), (3, 1, [6], 2),
                                   (2, 2, [1, 2, 4], 0))]),
    # backward, constrained to a rank's cast mask comparing the ids with its shard's end ?n
    L(1712, "embedding-backward-splits-at-vocab-shard-mask-multiplied",
      "aten.embedding_dense_backward(?g, ?i, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"
      f" => concat({_emb_bw('?g', '?i', 0, '?n', '?n', u=_U, t='dtype(?g)')},"
      f" {_emb_bw('?g', '?i', '?n', '?v', '?v - ?n', u=_U, t='dtype(?g)')}, dim=0)",
      "?pi == -1 and ?n // 1 == ?n and 0 < ?n and ?n < ?v and rank(?g) == rank(?i) + 1 and floating(dtype(?g))",
      when="aten.lt.Scalar(?i, other=?n)",
      index={"i": "?v"},
      examples=[{"g": g, "i": g[:-1], "v": v, "n": n, "pi": -1}
                for g, v, n in (([2, 3, 4], 5, 2), ([5, 2], 3, 1), ([4, 3], 8, 4), ([1, 2], 2, 1), ([3, 2, 2], 6, 5))]),
    L(1713, "mask-multiplied-embedding-backward-splits",
      f"{_emb_bw('?g', '?i', '?s', '?e', '?w', '?x')}"
      f" => concat({_emb_bw('?g', '?i', '?s', '?m', '?k')}, {_emb_bw('?g', '?i', '?m', '?e', '?e - ?m')}, dim=0)",
      f"?pi == -1 and ?s // 1 == ?s and ?w == ?e - ?s and ?k == ?m - ?s and ?s < ?m and ?m < ?e and ({_UNSQ})"
      " and ?x == ?e - ?s - 1 and ?y == ?m - ?s - 1 and floating(?t) and ?t == dtype(?g)",
      when=_emb_bw("?g", "?i", "?s", "?m", "?k", "?y"), index={"i": "?e + 2"},
      examples=[{"g": [2, 3, 4], "i": [2, 3], "u": [2, 3, 1], "s": s, "e": e, "w": e - s, "m": m, "k": m - s,
                 "pi": -1, "t": "float32", "x": e - s - 1, "y": m - s - 1}
                for s, m, e in ((1, 3, 6), (0, 2, 4), (4, 8, 16), (2, 3, 4), (0, 1, 5))]),
]

# the batch of a data-parallel job: the ids split along a dim, the table whole
_EDB = "aten.embedding_dense_backward({g}, {i}, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"
EMBEDDING += [
    L(1714, "embedding-of-id-shards",
      "aten.embedding(?w, concat(?i, ?j, dim=?d), padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      " => concat(aten.embedding(?w, ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
      " aten.embedding(?w, ?j, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q), dim=?d)",
      "rank(?w) == 2 and ?p == -1", index={"i": "size(?w, 0)", "j": "size(?w, 0)"},
      examples=[{"w": [5, 3], "i": i, "j": j, "d": d, "p": -1}
                for i, j, d in (([2, 4], [1, 4], 0), ([2, 3], [2, 1], 1), ([3], [2], 0), ([1, 2, 2], [1, 1, 2], 1))]),
    # the table's gradient from a split batch: the parts' gradients summed (what data parallelism all-reduces
    # or reduce-scatters)
    L(1715, "embedding-backward-of-batch-shards",
      _EDB.format(g="concat(?g, ?h, dim=?d)", i="concat(?i, ?j, dim=?d)")
      + f" => sum({_EDB.format(g='?g', i='?i')}, {_EDB.format(g='?h', i='?j')})",
      "?pi == -1 and rank(?g) == rank(?i) + 1 and size(?g, ?d) == size(?i, ?d)", index={"i": "?v", "j": "?v"},
      examples=[{"g": i + [3], "h": j + [3], "i": i, "j": j, "d": d, "v": 5, "pi": -1}
                for i, j, d in (([2, 4], [1, 4], 0), ([2, 3], [2, 1], 1), ([3], [2], 0), ([1, 2, 2], [1, 1, 2], 1))]),
]

# torchtitan's loss parallel (``components/loss.py: _LossParallelCrossEntropy``) on vocabulary-sharded logits: the
# max and the sum of exponentials all-reduced, the target's log-probability gathered with a column index and
# zeroed where another rank owns the target (``index_put`` with the mask as a column)
_SUB = "aten.sub.Tensor({x}, {y}, alpha=1)"
_MAXES = "max(aten.amax(?a, dim=[?d], keepdim=true), aten.amax(?b, dim=[?d], keepdim=true))"
_SUMEXP = "aten.sum.dim_IntList(aten.exp({x}), dim=[?d], keepdim=true, dtype=None)"
_SUMS = f"sum({_SUMEXP.format(x=_SUB.format(x='?a', y=_MAXES))}, {_SUMEXP.format(x=_SUB.format(x='?b', y=_MAXES))})"
# torchtitan's one-hot of a rank's targets in [s, e) (Megatron's masks and masked local ids, vocab.py): zeros [n, e - s] with (mask - 1) at (row, masked local id)
_OH = ("aten.index_put(aten.full(size={z}, fill_value=0, dtype=?y), aten.arange(end={n}, dtype=None),"
       f" {_CE_LOCAL.format(i='?i', s='{s}', e='{e}')},"
       f" aten.sub.Tensor(aten._to_copy({_CE_MASK.format(i='?i', s='{s}', e='{e}')}, dtype=?y),"
       " aten.scalar_tensor(s=1, dtype=?y), alpha=1))")
LOSS = [
    # log_softmax over a dim split in two: log_softmax(x) = x - m - log(sum(exp(x - m))) for any finite m, here
    # the max of the parts' maxes; the sum of exponentials is the sum of the parts' sums
    L(1730, "log-softmax-of-concat-along-it",
      "aten._log_softmax(concat(?a, ?b, dim=?d), dim=?d, half_to_float=false)"
      f" => concat({_SUB.format(x=_SUB.format(x='?a', y=_MAXES), y=f'aten.log({_SUMS})')},"
      f" {_SUB.format(x=_SUB.format(x='?b', y=_MAXES), y=f'aten.log({_SUMS})')}, dim=?d)",
      "size(?a, ?d) > 0 and size(?b, ?d) > 0 and floating(dtype(?a))"),
    # gather along dim 1 with a column of indices is advanced indexing by (arange, indices)
    L(1731, "gather-of-an-index-column-is-index",
      "aten.gather(?x, reshape(?i, shape=?s), dim=1, sparse_grad=?g)"
      " => reshape(aten.index.Tensor(?x, aten.arange.start(start=0, end=size(?x, 0)), ?i), shape=?s)",
      "rank(?x) == 2 and ?s == [size(?x, 0), 1] and shape(?i) == [size(?x, 0)]", index={"i": "size(?x, 1)"},
      examples=[{"x": [n, v], "i": [n], "s": [n, 1]} for n, v in ((3, 4), (1, 2), (5, 1), (2, 6))]),
    # a boolean mask of the tensor's own shape and a single value: index_put is elementwise, so it commutes
    # with a reshape of both
    L(1732, "masked-index-put-of-reshapes",
      "aten.index_put(reshape(?y, shape=?s), reshape(?m, shape=?s), ?z)"
      " => reshape(aten.index_put(?y, ?m, ?z), shape=?s)",
      "shape(?m) == shape(?y) and dtype(?m) == \"bool\" and shape(?z) == [] and dtype(?z) == dtype(?y)",
      examples=[{"y": y, "m": y, "z": [], "s": s, "m:dtype": "bool", "y:dtype": t, "z:dtype": t}
                for y, s, t in (([4], [4, 1], "float32"), ([2, 3], [6], "float64"), ([3, 2], [2, 1, 3], "int64"),
                                ([1], [1, 1], "float16"), ([2, 2], [4], "bfloat16"), ([0, 3], [3, 0], "float32"),
                                ([5, 1], [5], "int32"), ([2, 2, 2], [4, 2], "float64"), ([6], [2, 3], "bool"),
                                ([3], [1, 3, 1], "float32"))]),

    # the backward of cross-entropy as PyTorch decomposes it: nll_loss's gradient is a one-hot of -1 (scatter into
    # zeros, one index per row) times the per-row upstream gradient w; its row sum is -w, so log_softmax's backward
    # g - exp(ls) * sum(g) is (one-hot + exp(ls)) * w -- torchtitan's fused form
    L(1733, "log-softmax-backward-of-a-scaled-one-hot",
      "aten._log_softmax_backward_data(aten.mul.Tensor(aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y),"
      " ?t, dim=1, value=-1), ?w), ?l, dim=1, input_dtype=?it)"
      " => aten.mul.Tensor(aten.add.Tensor(aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y), ?t, dim=1,"
      " value=-1), aten.exp(?l), alpha=1), ?w)",
      "rank(?l) == 2 and ?z == shape(?l) and shape(?t) == [size(?l, 0), 1] and shape(?w) == [size(?l, 0), 1]"
      " and floating(?y) and ?y == dtype(?l) and ?it == dtype(?l) and dtype(?w) == dtype(?l)", index={"t": "size(?l, 1)"},
      examples=[{"l": [n, v], "t": [n, 1], "w": [n, 1], "z": [n, v], "y": y, "it": y, "l:dtype": y, "w:dtype": y}
                for n, v in ((3, 4), (1, 2), (4, 1), (2, 5), (5, 3))
                for y in ("float32", "float64", "float16", "bfloat16")]),
    # that one-hot over a vocabulary split at m (the first rank's shard end, where its mask compares the ids):
    # each rank's one-hot of its own targets, -1 where it owns the target and 0 elsewhere (mask - 1), written
    # at the masked local ids
    L(1734, "one-hot-of-vocab-shards",
      "aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y), reshape(?i, shape=?u), dim=1, value=-1)"
      f" => concat({_OH.format(n='size(?i, 0)', z='[size(?i, 0), ?m]', s=0, e='?m')},"
      f" {_OH.format(n='size(?i, 0)', z='[size(?i, 0), at(?z, 1) - ?m]', s='?m', e='at(?z, 1)')}, dim=1)",
      "rank(?i) == 1 and ?u == [size(?i, 0), 1] and len(?z) == 2 and at(?z, 0) == size(?i, 0) and ?m // 1 == ?m"
      " and 0 < ?m and ?m < at(?z, 1) and floating(?y)", when="aten.ge.Scalar(?i, other=?m)",
      index={"i": "at(?z, 1)"},
      examples=[{"i": [n], "u": [n, 1], "z": [n, v], "m": m} for n, v, m in ((3, 4, 2), (1, 5, 1), (4, 6, 5), (2, 3, 1))]),
    # ... and a rank's one-hot of [s, e) split again at m (more ranks)
    L(1735, "masked-one-hot-of-vocab-shards",
      f"{_OH.format(n='?n', z='?z', s='?s', e='?e')}"
      f" => concat({_OH.format(n='?n', z='[?n, ?m - ?s]', s='?s', e='?m')},"
      f" {_OH.format(n='?n', z='[?n, ?e - ?m]', s='?m', e='?e')}, dim=1)",
      "rank(?i) == 1 and size(?i, 0) == ?n and ?z == [?n, ?e - ?s] and ?s // 1 == ?s and ?m // 1 == ?m and ?s < ?m"
      " and ?m < ?e and floating(?y)", when="aten.ge.Scalar(?i, other=?m)", index={"i": "?e + 2"},
      examples=[{"i": [n], "n": n, "z": [n, e - s], "s": s, "e": e, "m": m}
                for n, s, m, e in ((3, 1, 3, 6), (2, 0, 2, 4), (4, 4, 8, 16), (1, 2, 3, 4), (5, 0, 1, 5))]),
]

LEMMAS = ATTENTION + EMBEDDING + LOSS
