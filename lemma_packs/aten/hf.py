"""Lemmas for HF transformers' models under HF's own TP plans (bench/hf_zoo.py). References: 14xx.

RoPE applied to a prefix of the head dim (``q[..., :rotary_dim]``, ``q[..., rotary_dim:]`` and their concat)
leaves an empty tensor where the prefix is the whole head (Phi-3): concatenating an empty tensor adds
nothing.

MoE experts (``batched_mm``) gather each token's expert weights, ``W[expert_ids]``, from weights sharded along
another dim (``packed_colwise``: both halves of the fused gate/up projection sharded): gathering rows commutes
with concatenating or slicing along the other dims.

Per-head normalisation (Qwen3's q_norm / k_norm, OLMo's...) reduces over the head dim of heads sharded
across ranks: a mean over dims the concat does not split is the concat of the parts' means.
"""
from graphguard.engine.lemma import L

LEMMAS = [
    L(1401, "concat-with-empty-right", "concat(?a, ?b, dim=?d) => ?a", "size(?b, ?d) == 0",
      examples=[{"a": [2, 3], "b": [2, 0], "d": 1}, {"a": [0, 2], "b": [0, 2], "d": 0}]),
    L(1402, "concat-with-empty-left", "concat(?a, ?b, dim=?d) => ?b", "size(?a, ?d) == 0",
      examples=[{"a": [2, 0, 4], "b": [2, 3, 4], "d": 1}]),
    L(1400, "mean-of-concat-other-dims",
      "aten.mean.dim(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd, dtype=?t)"
      " => concat(aten.mean.dim(?a, dim=?k, keepdim=?kd, dtype=?t), aten.mean.dim(?b, dim=?k, keepdim=?kd, dtype=?t), dim=reduced_dim(?d, ?k, ?kd))",
      "?k != None and len(?k) > 0 and not contains(?k, ?d)"),
    L(1403, "index-rows-of-concat-other-dim",
      "aten.index.Tensor(concat(?a, ?b, dim=?d), ?i, absent=?n)"
      " => concat(aten.index.Tensor(?a, ?i, absent=?n), aten.index.Tensor(?b, ?i, absent=?n), dim=?d + rank(?i) - 1)",
      "len(?n) == 0 and ?d >= 1",
      examples=[{"a": [4, 2, 3], "b": [4, 1, 3], "i": [5], "d": 1, "n": []},
                {"a": [3, 2, 2], "b": [3, 2, 1], "i": [2, 2], "d": 2, "n": []}]),
    L(1404, "index-rows-of-slice-other-dim",
      "aten.index.Tensor(slice(?x, dim=?d, start=?s, end=?e), ?i, absent=?n)"
      " => slice(aten.index.Tensor(?x, ?i, absent=?n), dim=?d + rank(?i) - 1, start=?s, end=?e)",
      "len(?n) == 0 and ?d >= 1",
      examples=[{"x": [4, 6, 3], "i": [5], "d": 1, "s": 2, "e": 5, "n": []}]),
]
