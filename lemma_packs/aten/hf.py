"""Lemmas for HF transformers' models under HF's own TP plans (bench/hf_zoo.py). References: 14xx.

Per-head normalisation (Qwen3's q_norm / k_norm, OLMo's...) reduces over the head dim of heads sharded
across ranks: a mean over dims the concat does not split is the concat of the parts' means.
"""
from graphguard.engine.lemma import L

LEMMAS = [
    L(1400, "mean-of-concat-other-dims",
      "aten.mean.dim(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd, dtype=?t)"
      " => concat(aten.mean.dim(?a, dim=?k, keepdim=?kd, dtype=?t), aten.mean.dim(?b, dim=?k, keepdim=?kd, dtype=?t), dim=reduced_dim(?d, ?k, ?kd))",
      "?k != None and len(?k) > 0 and not contains(?k, ?d)"),
]
