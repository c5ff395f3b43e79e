"""Partial sums (one per rank, all-reduced later): concatenations and expands of them, complementary zero pads
added up, ``view_as_complex``/``view_as_real`` of a sum.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import KEPT_UNGUARDED, L

# the numbers its lemmas have, then 2700-2749 and 2800-2803 for new ones (2700-2703: the zero-padded all-gather)
NUMBERS = (range(306, 307), range(425, 432), range(520, 527), range(563, 564), range(1802, 1804), range(2700, 2750), range(2800, 2804))


_ACC_PADS = (([2, 3], [2, 3], 0, [4, 3]), ([2, 1], [2, 3], 1, [2, 4]), ([3], [2], 0, [5]), ([1, 4], [3, 4], 0, [4, 4]),
             ([2, 2, 1], [2, 2, 2], 2, [2, 2, 3]), ([0, 2], [2, 2], 0, [2, 2]), ([2, 4, 6, 2], [2, 4, 6, 2], 3, [2, 4, 6, 4]))
_PADS = [{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64"}
         for a, b, d in (([2, 3], [2, 3], 0), ([1, 4], [3, 4], 0), ([2, 1], [2, 3], 1), ([3], [2], 0), ([0, 2], [2, 2], 0),
                         ([2, 2, 1], [2, 2, 2], 2))]


LEMMAS = [
    # the backward of x[..., :k] and x[..., k:] (slice_scatter into zeros) adds two zero-padded halves;
    # stated for the whole pattern: "x + 0 = x" alone would put x inside its own class (sum(0, x))
    L(425, "add-of-complementary-zero-pads",
      "aten.add.Tensor(concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    L(426, "add-of-complementary-zero-pads-mirrored",
      "aten.add.Tensor(concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    # the same two pads summed as the ranks' partial results are (core sum: the pads' add once it is a sum)
    L(427, "sum-of-complementary-zero-pads",
      "sum(concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    L(429, "sum-of-complementary-zero-pads-mirrored",
      "sum(concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => concat(?a, ?b, dim=?d)", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=_PADS),
    # ... and accumulated one at a time into a third gradient (the backward of cat((-x2, x1)) added to x * cos's
    # gradient after it: (g + pad(b)) + pad(a))
    L(430, "complementary-zero-pads-accumulated",
      "sum(sum(?m, concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d)), concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d))"
      " => sum(?m, concat(?a, ?b, dim=?d))", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=[{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64", "m": m}
                for a, b, d, m in _ACC_PADS]),
    L(431, "complementary-zero-pads-accumulated-mirrored",
      "sum(sum(?m, concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d)), concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d))"
      " => sum(?m, concat(?a, ?b, dim=?d))", "shape(?a) == ?u and shape(?b) == ?s and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=[{"a": a, "b": b, "u": a, "s": b, "d": d, "t": "float64", "m": m}
                for a, b, d, m in _ACC_PADS]),
    # an all-gather written as an all-reduce of zero-padded shards, at any number of ranks: the all-reduce's
    # sum (left-nested in group order) accumulates one shard at a time -- the ranks so far, then zeros, plus the
    # next rank's shard between zeros -- into the ranks so far and the next, then zeros (the last rank: 427)
    L(2700, "sum-of-zero-padded-prefix-and-next-shard",
      "sum(concat(?a, aten.full(size=?s, fill_value=0, dtype=?t), dim=?d),"
      " concat(concat(aten.full(size=?u, fill_value=0, dtype=?t), ?b, dim=?d), aten.full(size=?v, fill_value=0, dtype=?t), dim=?d))"
      " => concat(concat(?a, ?b, dim=?d), aten.full(size=?v, fill_value=0, dtype=?t), dim=?d)",
      "shape(?a) == ?u and dtype(?a) == ?t and dtype(?b) == ?t",
      examples=[{"a": a, "b": b, "u": a, "s": s, "v": v, "d": d, "t": "float64"}
                for a, b, s, v, d in (([2, 3], [1, 3], [3, 3], [2, 3], 0), ([2, 1], [2, 2], [2, 5], [2, 3], 1),
                                      ([3], [2], [4], [2], 0), ([2, 2, 2], [2, 2, 1], [2, 2, 3], [2, 2, 2], 2),
                                      ([1, 4], [1, 4], [3, 4], [2, 4], 0), ([3, 2], [3, 1], [3, 2], [3, 1], 1),
                                      ([4], [1], [3], [2], 0), ([2, 3, 1], [2, 1, 1], [2, 4, 1], [2, 3, 1], 1),
                                      ([1, 1], [2, 1], [3, 1], [1, 1], 0), ([2, 2], [2, 2], [2, 4], [2, 2], 1))]),
    # the fills a program writes a shard into: zeros of the default dtype, and any slice of a fill
    L(2701, "zeros-are-a-fill", "aten.zeros(size=?s, dtype=?t) => aten.full(size=?s, fill_value=0, dtype=?t)",
      "is_dtype(?t)"),
    L(2702, "zeros-of-the-default-dtype", "aten.zeros(size=?s, dtype=?t) => aten.full(size=?s, fill_value=0, dtype=float32)",
      "?t == None", examples=[{"s": [a, b][:k], "t": None} for a in (1, 2, 3, 5) for b in (1, 4) for k in (1, 2)]
      + [{"s": [2, 3, c], "t": None} for c in (1, 2, 3, 4, 5, 6)] + [{"s": [], "t": None}]),
    L(2703, "slice-of-a-fill",
      "slice(aten.full(size=?s, fill_value=?f, dtype=?t), dim=?d, start=?a, end=?e)"
      " => aten.full(size=set_at(?s, ?d, ?e - ?a), fill_value=?f, dtype=?t)"),
    L(306, "add-of-partial-sums",
      "aten.add.Tensor(sum(?a, ?b), sum(?c, ?e)) => sum(aten.add.Tensor(?a, ?c), aten.add.Tensor(?b, ?e))",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e)", when="aten.add.Tensor(?b, ?e)"),
    # tensor-parallel experts: each expert's output is a partial sum; stacking them stacks the partials
    L(524, "concat-of-partial-sums",
      "concat(sum(?a, ?c), sum(?b, ?e), dim=?d) => sum(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d))",
      "shape(?a) == shape(?c) and shape(?b) == shape(?e) and dtype(?a) == dtype(?b) and dtype(?c) == dtype(?e)",
      # constrained (§4.3): with concat interchange it would enumerate pairings. On the last summands, so that
      # left-nested sums (world size 4: sum(sum(sum(a0, a1), a2), a3)) take apart one rank at a time
      when="concat(?c, ?e, dim=?d)"),
    L(525, "expand-of-partial-sum",
      "aten.expand(sum(?a, ?b), size=?s, implicit=?i) => sum(aten.expand(?a, size=?s, implicit=?i), aten.expand(?b, size=?s, implicit=?i))",
      "shape(?a) == shape(?b)"),
    # both are linear: the ranks' partial sums of a RoPE gradient go through (the family linear-over-sum, 1203,
    # asks floating(), which a complex input is not, and one dtype of the summands, which these ops need)
    L(1802, "view-as-complex-of-sum",
      "aten.view_as_complex(sum(?a, ?b)) => sum(aten.view_as_complex(?a), aten.view_as_complex(?b))",
      "dtype(?a) == dtype(?b)"),
    L(1803, "view-as-real-of-sum",
      "aten.view_as_real(sum(?a, ?b)) => sum(aten.view_as_real(?a), aten.view_as_real(?b))",
      "dtype(?a) == dtype(?b)"),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

_IA = "dim=?d, alpha=?al"  # index_add's attributes
KEPT = [
    L(523, "sum-dim-of-partial-sum",
      "aten.sum.dim_IntList(sum(?a, ?b), dim=?k, keepdim=?kd, dtype=?t)"
      " => sum(aten.sum.dim_IntList(?a, dim=?k, keepdim=?kd, dtype=?t), aten.sum.dim_IntList(?b, dim=?k, keepdim=?kd, dtype=?t))",
      'shape(?a) == shape(?b) and (?t == None or floating(?t)) and dtype(?a) != "bool"', duplicates=KEPT_UNGUARDED),
    L(526, "softmax-backward-of-partial-sum",
      "aten._softmax_backward_data(sum(?a, ?b), ?y, dim=?k, input_dtype=?t)"
      " => sum(aten._softmax_backward_data(?a, ?y, dim=?k, input_dtype=?t), aten._softmax_backward_data(?b, ?y, dim=?k, input_dtype=?t))",
      "shape(?a) == shape(?b) and floating(dtype(?a)) and floating(dtype(?y))", duplicates=KEPT_UNGUARDED),
    L(428, "neg-of-partial-sum", "aten.neg(sum(?a, ?b)) => sum(aten.neg(?a), aten.neg(?b))", "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(520, "mul-of-partial-sum-left", "aten.mul.Tensor(sum(?a, ?b), ?c) => sum(aten.mul.Tensor(?a, ?c), aten.mul.Tensor(?b, ?c))",
      "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(521, "mul-of-partial-sum-right", "aten.mul.Tensor(?c, sum(?a, ?b)) => sum(aten.mul.Tensor(?c, ?a), aten.mul.Tensor(?c, ?b))",
      "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(522, "sum-all-of-partial-sum", "aten.sum(sum(?a, ?b), dtype=?t) => sum(aten.sum(?a, dtype=?t), aten.sum(?b, dtype=?t))",
      'shape(?a) == shape(?b) and (?t == None or floating(?t)) and dtype(?a) != "bool"', duplicates=KEPT_UNGUARDED),
    # tensor-parallel experts: each rank adds its partial rows (index_add is linear in self and source)
    L(563, "index-add-of-partial-sums",
      f"aten.index_add(sum(?p, ?q), ?i, sum(?a, ?b), {_IA}) => sum(aten.index_add(?p, ?i, ?a, {_IA}), aten.index_add(?q, ?i, ?b, {_IA}))",
      "shape(?p) == shape(?q) and shape(?a) == shape(?b) and floating(dtype(?p)) and floating(dtype(?q)) and finite(?al)",
      index={"i": "size(?p, ?d)"}, duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
