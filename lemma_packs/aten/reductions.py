"""Reductions: sums, means and maxes over dims -- a mean as a scaled sum, a sum over a unit dim dropped, the
mean of two equal halves; what the operator properties' reduction families (engine/families.py) do not state.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import KEPT_UNGUARDED, L

# the numbers its lemmas have, then 2350-2399 for new ones
NUMBERS = (range(393, 394), range(410, 411), range(474, 476), range(1502, 1504), range(1506, 1507),
           range(1400, 1401), range(1859, 1860), range(2350, 2400))


LEMMAS = [
    L(410, "mean-of-equal-halves",
      "aten.mean(concat(?a, ?b, dim=?d), dtype=?t) => aten.mul.Scalar(sum(aten.mean(?a, dtype=?t), aten.mean(?b, dtype=?t)), other=0.5)",
      "shape(?a) == shape(?b)"),
    L(393, "sum-over-a-unit-dim", "aten.sum.dim_IntList(?x, dim=?k, keepdim=true, dtype=None) => ?x",
      "len(?k) == 1 and size(?x, at(?k, 0)) == 1 and floating(dtype(?x))"),
    L(474, "max-values-is-amax", "aten.max.dim#0(?x, dim=?d, keepdim=?k) => aten.amax(?x, dim=[?d], keepdim=?k)",
      "rank(?x) >= 1"),
    # (commuting operands: family 1208, commutes-where-mirrored, aten:1208[aten.add.Tensor / aten.mul.Tensor])
    # mean = sum / n (n: the elements folded into one; exact as a rational factor)
    L(1502, "mean-is-scaled-sum",
      "aten.mean.dim(?x, dim=?d, keepdim=?k, dtype=?t) => aten.mul.Scalar(aten.sum.dim_IntList(?x, dim=?d, keepdim=?k, dtype=?t), other=1.0 / numel_at(?x, ?d))",
      "numel_at(?x, ?d) > 0 and finite(1.0 / numel_at(?x, ?d))"),
    L(1503, "mean-all-is-scaled-sum",
      "aten.mean(?x, dtype=?t) => aten.mul.Scalar(aten.sum(?x, dtype=?t), other=1.0 / numel(?x))",
      "numel(?x) > 0 and finite(1.0 / numel(?x))"),
    L(1506, "sum-over-a-unit-dim-dropped",
      "aten.sum.dim_IntList(?x, dim=?k, keepdim=false, dtype=None) => reshape(?x, shape=drop_at(shape(?x), at(?k, 0)))",
      "len(?k) == 1 and size(?x, at(?k, 0)) == 1 and floating(dtype(?x))",
      examples=[{"x": [1, 2, 3], "k": [0]}, {"x": [2, 1], "k": [1]}]),
    # the backward of repeat (of a size-1 dim, 1504's expand): the gradient viewed with the repeats split off
    # before a unit dim and summed over them -- the keepdim sum of expand's backward
    L(1859, "sum-before-an-inserted-unit-dim",
      "aten.sum.dim_IntList(reshape(?x, shape=?s), dim=?k, keepdim=false, dtype=?t)"
      " => aten.sum.dim_IntList(?x, dim=?k, keepdim=true, dtype=?t)",
      "len(?k) == 1 and at(?k, 0) + 1 < len(?s) and at(?s, at(?k, 0) + 1) == 1"
      " and drop_at(?s, at(?k, 0) + 1) == shape(?x)",
      examples=[{"x": [2, 4, 3], "s": [2, 4, 1, 3], "k": [1]}, {"x": [2, 1, 4, 6, 4], "s": [2, 1, 4, 1, 6, 4], "k": [2]},
                {"x": [3, 2], "s": [3, 1, 2], "k": [0]}, {"x": [3, 2], "s": [3, 2, 1], "k": [1]}]),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    L(1400, "mean-of-concat-other-dims",
      "aten.mean.dim(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd, dtype=?t)"
      " => concat(aten.mean.dim(?a, dim=?k, keepdim=?kd, dtype=?t), aten.mean.dim(?b, dim=?k, keepdim=?kd, dtype=?t), dim=reduced_dim(?d, ?k, ?kd))",
      "?k != None and len(?k) > 0 and not contains(?k, ?d)", duplicates=KEPT_UNGUARDED),
    # all_reduce(max): the max over a concatenation along a reduced dim is the max of the parts' maxes
    L(475, "amax-of-concat-along-it",
      "aten.amax(concat(?a, ?b, dim=?d), dim=?k, keepdim=?kd)"
      " => max(aten.amax(?a, dim=?k, keepdim=?kd), aten.amax(?b, dim=?k, keepdim=?kd))",
      "contains(?k, ?d) and size(?a, ?d) > 0 and size(?b, ?d) > 0", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
