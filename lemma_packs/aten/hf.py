"""Lemmas for HF transformers' models under HF's own TP plans (bench/hf_zoo.py). References: 1401-1406
(``NUMBERS``: 1400-1499).

RoPE applied to a prefix of the head dim (``q[..., :rotary_dim]``, ``q[..., rotary_dim:]`` and their concat)
leaves an empty tensor where the prefix is the whole head (Phi-3): concatenating an empty tensor adds
nothing.

MoE experts (``batched_mm``) gather each token's expert weights, ``W[expert_ids]``, from weights sharded along
another dim (``packed_colwise``: both halves of the fused gate/up projection sharded): gathering rows commutes
with concatenating or slicing along the other dims.

Activations HF writes out elementwise (xIELU: ``where(x > 0, ..., expm1(min(x, eps)) ...)``) on column-sharded
activations: elementwise ops commute with concatenation -- the families the ATen ops' declared properties
derive (engine/families.py: elementwise-of-concats, 1201), no lemma here.

Per-head normalisation (Qwen3's q_norm / k_norm, OLMo's...) reduces over the head dim of heads sharded
across ranks: a mean over dims the concat does not split is the concat of the parts' means -- the family
reduction-of-concat-other-dims (aten:1205[aten.mean.dim]), not a lemma here.
"""
from graphguard.ir.lemma import L

NUMBERS = range(1400, 1500)  # this file's lemma numbers (the plugin loader refuses others)

_D = "?k - rank(?i) + 1"  # the dim of the indexed tensor that dim ?k of the gathered rows is
_FILL = "aten.full(size=?s, fill_value=?f, dtype=?t)"


def _fill(size: str) -> str:
    return f"aten.full(size=set_at(?s, {_D}, {size}), fill_value=?f, dtype=?t)"

# rows gathered by integer indices (a boolean mask selects entries instead: another op)
_INT_INDEX = '(dtype(?i) == "int64" or dtype(?i) == "int32")'


LEMMAS = [
    L(1401, "concat-with-empty-right", "concat(?a, ?b, dim=?d) => ?a", "size(?b, ?d) == 0",
      examples=[{"a": [2, 3], "b": [2, 0], "d": 1}, {"a": [0, 2], "b": [0, 2], "d": 0}]),
    L(1402, "concat-with-empty-left", "concat(?a, ?b, dim=?d) => ?b", "size(?a, ?d) == 0",
      examples=[{"a": [2, 0, 4], "b": [2, 3, 4], "d": 1}]),
    L(1403, "index-rows-of-concat-other-dim",
      "aten.index.Tensor(concat(?a, ?b, dim=?d), ?i, absent=?n)"
      " => concat(aten.index.Tensor(?a, ?i, absent=?n), aten.index.Tensor(?b, ?i, absent=?n), dim=?d + rank(?i) - 1)",
      f"len(?n) == 0 and ?d >= 1 and {_INT_INDEX}",
      index={"i": "size(?a, 0)"},
      examples=[{"a": [4, 2, 3], "b": [4, 1, 3], "i": [5], "d": 1, "n": []},
                {"a": [3, 2, 2], "b": [3, 2, 1], "i": [2, 2], "d": 2, "n": []}]),
    L(1404, "index-rows-of-slice-other-dim",
      "aten.index.Tensor(slice(?x, dim=?d, start=?s, end=?e), ?i, absent=?n)"
      " => slice(aten.index.Tensor(?x, ?i, absent=?n), dim=?d + rank(?i) - 1, start=?s, end=?e)",
      f"len(?n) == 0 and ?d >= 1 and {_INT_INDEX}", index={"i": "size(?x, 0)"},
      examples=[{"x": [4, 6, 3], "i": [5], "d": 1, "s": 2, "e": 5, "n": []}]),
    # ... and their backward: the gathered rows' gradients accumulated back (index_put into a fill)
    L(1405, "index-put-rows-of-concat-other-dim",
      f"aten.index_put({_FILL}, ?i, concat(?a, ?b, dim=?k), accumulate=?acc, absent=?n)"
      f" => concat(aten.index_put({_fill('size(?a, ?k)')}, ?i, ?a, accumulate=?acc, absent=?n),"
      f" aten.index_put({_fill('size(?b, ?k)')}, ?i, ?b, accumulate=?acc, absent=?n), dim={_D})",
      f"len(?n) == 0 and {_D} >= 1 and rank(?a) == len(?s) + rank(?i) - 1"
      f" and size(?a, ?k) + size(?b, ?k) == at(?s, {_D}) and {_INT_INDEX}",
      index={"i": "at(?s, 0)"},
      examples=[{"s": s, "f": f, "t": "float64", "i": i, "a": a, "b": b, "k": k, "acc": acc, "n": []}
                for s, f, i, a, b, k, acc in (
                    ([4, 6, 3], 0, [5], [5, 2, 3], [5, 4, 3], 1, True), ([4, 6], 0, [2, 3], [2, 3, 1], [2, 3, 5], 2, False),
                    ([3, 4, 2, 2], 1.5, [6], [6, 4, 2, 1], [6, 4, 2, 1], 3, True), ([2, 3], 0, [4], [4, 1], [4, 2], 1, True),
                    ([5, 2, 4], 0, [3], [3, 2, 1], [3, 2, 3], 2, True), ([2, 4, 2], -1, [7], [7, 3, 2], [7, 1, 2], 1, False),
                    ([6, 5], 0, [1], [1, 2], [1, 3], 1, True), ([3, 2, 6], 0, [4, 2], [4, 2, 2, 4], [4, 2, 2, 2], 3, True))]),
    L(1406, "index-put-rows-of-slice-other-dim",
      f"aten.index_put({_FILL}, ?i, slice(?v, dim=?k, start=?x, end=?y), accumulate=?acc, absent=?n)"
      f" => slice(aten.index_put({_fill('size(?v, ?k)')}, ?i, ?v, accumulate=?acc, absent=?n), dim={_D}, start=?x, end=?y)",
      f"len(?n) == 0 and {_D} >= 1 and rank(?v) == len(?s) + rank(?i) - 1 and {_INT_INDEX}",
      index={"i": "at(?s, 0)"},
      examples=[{"s": [4, 2, 3], "f": 0, "t": "float64", "i": [5], "v": [5, 6, 3], "k": 1, "x": 1, "y": 3,
                 "acc": True, "n": []}]),
]

# elementwise ops (comparisons with a number, log1p, expm1, clamp, minimum/maximum, where) of concats are the
# engine's lemma families (engine/families.py, 1201-1202) from the ops' declared properties
