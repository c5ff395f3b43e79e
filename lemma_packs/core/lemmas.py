"""Lemmas of the core pack. References: 1xx clean-op algebra, 2xx compute ops over clean ops.

Elementwise ops over concats, commutation and regrouping where mirrored, partial sums and scalar factors through
linear ops and data movement are derived from the ops' declared properties (engine/families.py, 12xx).

Concat and sum are binary inside terms (n-ary ones are left-nested), so these lemmas apply to any degree.
"""
from graphguard.ir.lemma import KEPT_UNGUARDED, L

NUMBERS = range(100, 300)  # this file's lemma numbers (the plugin loader refuses others)

CLEAN = [
    L(101, "slice-full", "slice(?x, dim=?d, start=0, end=?e) => ?x", "?e == size(?x, ?d)"),
    L(102, "concat-adjacent-slices",
      "concat(slice(?x, dim=?d, start=?a, end=?b), slice(?x, dim=?d, start=?b, end=?c), dim=?d)"
      " => slice(?x, dim=?d, start=?a, end=?c)"),
    # constrained (§4.3): X[0:c] = concat(X[0:b], X[b:c]) only where both slices already exist. Prefixes
    # suffice because n-ary concats are left-nested; the unconstrained 102 covers existing concats.
    L(119, "prefix-from-adjacent-slices",
      "concat(slice(?x, dim=?d, start=0, end=?b), slice(?x, dim=?d, start=?b, end=?c), dim=?d)"
      " => slice(?x, dim=?d, start=0, end=?c)", exists="args"),
    L(103, "slice-of-slice",
      "slice(slice(?x, dim=?d, start=?a, end=?b), dim=?d, start=?s, end=?e)"
      " => slice(?x, dim=?d, start=?a + ?s, end=?a + ?e)"),
    L(104, "slice-of-concat-left",
      "slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e) => slice(?p, dim=?d, start=?s, end=?e)",
      "?e <= size(?p, ?d)"),
    L(105, "slice-of-concat-right",
      "slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e)"
      " => slice(?q, dim=?d, start=?s - size(?p, ?d), end=?e - size(?p, ?d))",
      "?s >= size(?p, ?d)"),
    L(128, "slice-across-concat",
      "slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e)"
      " => concat(slice(?p, dim=?d, start=?s, end=size(?p, ?d)), slice(?q, dim=?d, start=0, end=?e - size(?p, ?d)), dim=?d)",
      "?s < size(?p, ?d) and size(?p, ?d) < ?e"),
    L(106, "slice-of-concat-other-dim",
      "slice(concat(?p, ?q, dim=?d), dim=?k, start=?s, end=?e)"
      " => concat(slice(?p, dim=?k, start=?s, end=?e), slice(?q, dim=?k, start=?s, end=?e), dim=?d)",
      "?k != ?d"),
    L(120, "concat-of-same-range-slices",
      "concat(slice(?p, dim=?k, start=?s, end=?e), slice(?q, dim=?k, start=?s, end=?e), dim=?d)"
      " => slice(concat(?p, ?q, dim=?d), dim=?k, start=?s, end=?e)",
      "?k != ?d and size(?p, ?k) == size(?q, ?k)", when="concat(?p, ?q, dim=?d)"),
    L(107, "concat-assoc", "concat(?a, concat(?b, ?c, dim=?d), dim=?d) => concat(concat(?a, ?b, dim=?d), ?c, dim=?d)"),
    L(108, "permute-permute", "permute(permute(?x, dims=?p), dims=?q) => permute(?x, dims=compose(?p, ?q))"),
    L(109, "permute-identity", "permute(?x, dims=?p) => ?x", "is_identity(?p)"),
    L(110, "permute-concat",
      "permute(concat(?a, ?b, dim=?d), dims=?p) => concat(permute(?a, dims=?p), permute(?b, dims=?p), dim=index(?p, ?d))"),
    L(111, "permute-slice",
      "permute(slice(?x, dim=?d, start=?s, end=?e), dims=?p) => slice(permute(?x, dims=?p), dim=index(?p, ?d), start=?s, end=?e)"),
    # (and back, only where the operand's slice exists: the slice a program takes before its transpose)
    L(115, "slice-of-permute",
      "slice(permute(?x, dims=?p), dim=?d, start=?s, end=?e) => permute(slice(?x, dim=?k, start=?s, end=?e), dims=?p)",
      "?k == at(?p, ?d)", when="slice(?x, dim=?k, start=?s, end=?e)"),
    L(112, "reshape-reshape", "reshape(reshape(?x, shape=?s), shape=?t) => reshape(?x, shape=?t)"),
    L(113, "reshape-identity", "reshape(?x, shape=?s) => ?x", "?s == shape(?x)"),
    L(114, "identity", "identity(?x) => ?x"),
    L(121, "reshape-of-concat",
      "reshape(concat(?a, ?b, dim=?d), shape=?s)"
      " => concat(reshape(?a, shape=reshape_part(?a, ?d, ?s)), reshape(?b, shape=reshape_part(?b, ?d, ?s)), dim=reshape_dim(?a, ?d, ?s))",
      "reshape_concat_ok(?a, ?b, ?d, ?s)"),
    # (122, 123 the other way restate the families elementwise-of-reshapes / -of-permutes, 1213 / 1217 [core.sum],
    # without their guards)
    L(122, "reshape-of-sum", "reshape(sum(?a, ?b), shape=?s) <=> sum(reshape(?a, shape=?s), reshape(?b, shape=?s))",
      "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(123, "permute-of-sum", "permute(sum(?a, ?b), dims=?p) <=> sum(permute(?a, dims=?p), permute(?b, dims=?p))",
      "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(124, "permute-of-batch-merging-reshape",
      "permute(reshape(?x, shape=?s), dims=?p)"
      " => reshape(permute(?x, dims=batch_perm(?x, ?p)), shape=[at(?s, 0), at(?s, at(?p, 1)), at(?s, at(?p, 2))])",
      "batch_perm_ok(?x, ?s, ?p)"),
    L(126, "concat-interchange",
      "concat(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), dim=?k) => concat(concat(?a, ?c, dim=?k), concat(?b, ?e, dim=?k), dim=?d)",
      "?k != ?d and size(?a, ?d) == size(?c, ?d)"),
    # the other association, only into groups that tile the first part (pairs of ranks, quads...): views
    # that split a sharded dim into groups need concat((a, b), (c, d)), left nesting gives (((a, b), c), d)
    L(127, "concat-regroup",
      "concat(concat(?a, ?b, dim=?d), ?c, dim=?d) => concat(?a, concat(?b, ?c, dim=?d), dim=?d)",
      "size(?a, ?d) // (size(?b, ?d) + size(?c, ?d)) * (size(?b, ?d) + size(?c, ?d)) == size(?a, ?d)", late=True),
    # constrained (§4.3) to concatenations a tensor holds: each part of a rank's concatenation is a slice of
    # that rank's tensor (a rank's share of a packed [gate | up] gradient, computed by one bmm, holds its gate
    # and up columns). Everywhere, it would slice every concatenation the lemmas build.
    L(132, "parts-of-a-held-concat",
      "concat(?a, ?b, dim=?d) => concat(slice(concat(?a, ?b, dim=?d), dim=?d, start=0, end=size(?a, ?d)),"
      " slice(concat(?a, ?b, dim=?d), dim=?d, start=size(?a, ?d), end=size(?a, ?d) + size(?b, ?d)), dim=?d)",
      exists="tensor"),
    L(131, "sum-swap-where-grouped", "sum(sum(?a, ?b), ?c) => sum(sum(?a, ?c), ?b)", when="sum(?a, ?c)"),
]

COMPUTE = [
    L(201, "matmul-block-k",
      "matmul(concat(?a, ?b, dim=1), concat(?c, ?e, dim=0)) => sum(matmul(?a, ?c), matmul(?b, ?e))",
      "size(?a, 1) == size(?c, 0)",
      examples=[{"a": [2, 3], "b": [2, 1], "c": [3, 4], "e": [1, 4]}, {"a": [1, 2], "b": [1, 2], "c": [2, 3], "e": [2, 3]},
                {"a": [3, 1], "b": [3, 4], "c": [1, 2], "e": [4, 2]}]),
    # constrained (§4.3): split the rows only where G_d multiplies a row block (micro-batches, sequence
    # shards) -- after an all-gather the full rows are at hand, and splitting 8 row blocks against 8 column
    # blocks would build every product of prefixes
    L(202, "matmul-rows", "matmul(concat(?a, ?b, dim=0), ?w) => concat(matmul(?a, ?w), matmul(?b, ?w), dim=0)",
      when="matmul(?b, ?w)"),
    # ... or a summand of a row block (a gradient summed over the ranks that hold one replicated KV head)
    L(222, "matmul-rows-of-partial-sums",
      "matmul(concat(?a, sum(?c, ?e), dim=0), ?w) => concat(matmul(?a, ?w), sum(matmul(?c, ?w), matmul(?e, ?w)), dim=0)",
      when="matmul(?e, ?w)"),
    # ... or a slice of rows (rows of several ranks interleaved: relayout.py's chunks), where G_d multiplies them
    L(223, "matmul-rows-of-slice",
      "matmul(slice(?a, dim=0, start=?s, end=?e), ?w) => slice(matmul(?a, ?w), dim=0, start=?s, end=?e)",
      when="matmul(?a, ?w)", late=True, tensors=("a",)),
    L(224, "matmul-rows-of-last-slice",  # (concatenations are left-nested: peel the last part)
      "matmul(concat(?a, slice(?c, dim=0, start=?s, end=?e), dim=0), ?w)"
      " => concat(matmul(?a, ?w), slice(matmul(?c, ?w), dim=0, start=?s, end=?e), dim=0)",
      when="matmul(?c, ?w)", late=True, tensors=("c",),
      examples=[{"a": [2, 3], "c": [4, 3], "w": [3, 2], "s": 1, "e": 3}, {"a": [1, 2], "c": [2, 2], "w": [2, 5], "s": 0, "e": 1},
                {"a": [3, 4], "c": [3, 4], "w": [4, 1], "s": 0, "e": 3}]),
    L(203, "matmul-cols", "matmul(?x, concat(?a, ?b, dim=1)) => concat(matmul(?x, ?a), matmul(?x, ?b), dim=1)"),
    L(219, "batched-matmul-batch-split",
      "batched_matmul(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d)) => concat(batched_matmul(?a, ?c), batched_matmul(?b, ?e), dim=?d)",
      "?d < rank(?a) - 2 and size(?a, ?d) == size(?c, ?d)",
      examples=[{"a": [2, 3, 4], "b": [1, 3, 4], "c": [2, 4, 2], "e": [1, 4, 2], "d": 0},
                {"a": [2, 2, 3, 4], "b": [2, 1, 3, 4], "c": [2, 2, 4, 5], "e": [2, 1, 4, 5], "d": 1},
                {"a": [1, 2, 3], "b": [2, 2, 3], "c": [1, 3, 1], "e": [2, 3, 1], "d": 0}]),
    L(220, "batched-matmul-rows",
      "batched_matmul(concat(?a, ?b, dim=?d), ?w) => concat(batched_matmul(?a, ?w), batched_matmul(?b, ?w), dim=?d)",
      "?d == rank(?a) - 2"),
    L(221, "batched-matmul-block-k",
      "batched_matmul(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k)) => sum(batched_matmul(?a, ?c), batched_matmul(?b, ?e))",
      "?d == rank(?a) - 1 and ?k == rank(?c) - 2 and size(?a, ?d) == size(?c, ?k)",
      examples=[{"a": [2, 3, 4], "b": [2, 3, 1], "c": [2, 4, 5], "e": [2, 1, 5], "d": 2, "k": 1},
                {"a": [2, 2, 3, 2], "b": [2, 2, 3, 2], "c": [2, 2, 2, 4], "e": [2, 2, 2, 4], "d": 3, "k": 2}]),
    L(210, "add-is-sum", "add(?a, ?b) => sum(?a, ?b)"),
]

# A tensor known only up to a constant factor (a data-parallel rank's gradient is world x its slice of the
# sequential one until the all-reduce averages it): the factor moves out through data movement and linear
# ops, and factors of equal summands or pieces combine, so that an average over ranks meets it again.
SCALED = [
    L(140, "concat-of-scales",
      "concat(scale(?a, factor=?f), scale(?b, factor=?f), dim=?d) => scale(concat(?a, ?b, dim=?d), factor=?f)"),
    L(141, "sum-of-scales", "sum(scale(?a, factor=?f), scale(?b, factor=?f)) => scale(sum(?a, ?b), factor=?f)"),
    L(145, "max-of-scales", "max(scale(?a, factor=?f), scale(?b, factor=?f)) => scale(max(?a, ?b), factor=?f)", "?f > 0"),
    L(142, "scale-of-scale", "scale(scale(?x, factor=?f), factor=?g) => scale(?x, factor=?f * ?g)"),
    L(143, "scale-by-one", "scale(?x, factor=?f) => ?x", "?f == 1"),
]

# a conversion to a wider dtype and back is the identity where the first one is exact (float16 -> float32 ->
# float16; graphguard/ir/dtypes.py: exact_conversion) -- not float32 -> float16 -> float32, which rounds
CONVERT = [
    L(150, "convert-back-from-an-exact-widening", "convert(convert(?x, dtype=?w), dtype=?t) => ?x",
      "?t == dtype(?x) and exact_conversion(dtype(?x), ?w)",
      examples=({"x": [2, 3], "w": "float32", "t": "float16", "x:dtype": "float16"},
                {"x": [4], "w": "float64", "t": "float32", "x:dtype": "float32"},
                {"x": [3], "w": "int32", "t": "int8", "x:dtype": "int8"})),
]

LEMMAS = CLEAN + COMPUTE + SCALED + CONVERT


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    L(116, "sum-of-slices",
      "sum(slice(?a, dim=?d, start=?s, end=?e), slice(?b, dim=?d, start=?s, end=?e)) => slice(sum(?a, ?b), dim=?d, start=?s, end=?e)",
      "shape(?a) == shape(?b)", duplicates=KEPT_UNGUARDED),
    L(118, "sum-assoc", "sum(?a, sum(?b, ?c)) => sum(sum(?a, ?b), ?c)", duplicates=KEPT_UNGUARDED),
    L(204, "matmul-sum-left", "matmul(sum(?a, ?b), ?w) => sum(matmul(?a, ?w), matmul(?b, ?w))", duplicates=KEPT_UNGUARDED),
    L(205, "matmul-sum-right", "matmul(?x, sum(?a, ?b)) => sum(matmul(?x, ?a), matmul(?x, ?b))", duplicates=KEPT_UNGUARDED),
    L(216, "mul-sum-left", "mul(sum(?a, ?b), ?w) => sum(mul(?a, ?w), mul(?b, ?w))", duplicates=KEPT_UNGUARDED),
    L(217, "sub-of-slices",
      "sub(slice(?x, dim=?d, start=?s, end=?e), slice(?y, dim=?d, start=?s, end=?e)) => slice(sub(?x, ?y), dim=?d, start=?s, end=?e)",
      "shape(?x) == shape(?y)", duplicates=KEPT_UNGUARDED),
    L(218, "add-of-slices",
      "add(slice(?x, dim=?d, start=?s, end=?e), slice(?y, dim=?d, start=?s, end=?e)) => slice(add(?x, ?y), dim=?d, start=?s, end=?e)",
      "shape(?x) == shape(?y)", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
