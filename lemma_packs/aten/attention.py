"""Attention: torchtitan's CPU flash attention (``aten._scaled_dot_product_flash_attention_for_cpu`` and its
backward) over head groups or batch shards, and Megatron's attention mask (``masked_fill`` of head-sharded scores).

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2550-2599 for new ones
NUMBERS = (range(1304, 1306), range(1700, 1710), range(2550, 2600))


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


LEMMAS = [
    # masked_fill is elementwise in its input and its (broadcast) mask: the attention mask [1, 1, s, s] applied
    # to head-sharded scores, or a mask sharded like the input
    L(1304, "masked-fill-of-concat-and-broadcast-mask",
      "aten.masked_fill.Scalar(concat(?a, ?b, dim=?d), ?m, value=?v)"
      " => concat(aten.masked_fill.Scalar(?a, ?m, value=?v), aten.masked_fill.Scalar(?b, ?m, value=?v), dim=?d)",
      "rank(?a) >= rank(?m) and const_along(?m, rank(?a), ?d)",
      examples=[{"a": [2, 1, 3, 3], "b": [2, 2, 3, 3], "m": [1, 1, 3, 3], "d": 1}, {"a": [2, 3], "b": [1, 3], "m": [3], "d": 0}]),
    L(1305, "masked-fill-of-concats",
      "aten.masked_fill.Scalar(concat(?a, ?b, dim=?d), concat(?m, ?n, dim=?k), value=?v)"
      " => concat(aten.masked_fill.Scalar(?a, ?m, value=?v), aten.masked_fill.Scalar(?b, ?n, value=?v), dim=?d)",
      "rank(?a) >= rank(?m) and ?k == bdim(?m, rank(?a), ?d) and size(?a, ?d) == size(?m, ?k)"
      " and size(?b, ?d) == size(?n, ?k)",
      examples=[{"a": [2, 3], "b": [1, 3], "m": [2, 3], "n": [1, 3], "d": 0, "k": 0},
                {"a": [2, 2, 3], "b": [2, 1, 3], "m": [2, 3], "n": [1, 3], "d": 1, "k": 0}]),
    *ATTENTION,
]
