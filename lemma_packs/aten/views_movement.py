"""Views and data movement: reshapes, permutes, expands, repeats, slices, flips and concatenations of them
(Megatron's [s, b*heads, hn] views of head-sharded q and k, MoE's split and merged views, HF's empty RoPE parts,
``view_as_complex``/``view_as_real`` of shards). The conditions' view functions (``merge_perm``, ...) are
``view_functions.py``'s.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2250-2299 for new ones
NUMBERS = (range(305, 306), range(510, 512), range(1250, 1251), range(1301, 1302), range(1306, 1307),
           range(1321, 1322), range(1325, 1326), range(1355, 1356), range(1401, 1403), range(1504, 1505),
           range(1800, 1802), range(1855, 1856), range(2250, 2300))


_SRC = "reshape_src_dim(?x, ?s, ?d)"
_A, _B = "reshape_src_index(?x, ?s, ?d, ?a)", "reshape_src_index(?x, ?s, ?d, ?b)"


LEMMAS = [
    L(305, "expand-to-own-shape", "aten.expand(?x, size=?s, implicit=?i) => ?x", "?s == shape(?x)"),
    # [world * E/world, t, H] <-> [world, E/world, t, H]: a slice of the view is a view of a slice
    L(510, "slice-of-reshape",
      f"slice(reshape(?x, shape=?s), dim=?d, start=?a, end=?b)"
      f" => reshape(slice(?x, dim={_SRC}, start={_A}, end={_B}), shape=set_at(?s, ?d, ?b - ?a))",
      f"{_A} >= 0 and {_B} >= 0 and numel(?x) >= 1",  # an empty x lines up with any layout of its view
      examples=[{"x": [6, 4], "s": [2, 3, 4], "d": 0, "a": 1, "b": 2},
                {"x": [2, 3, 4], "s": [1, 2, 3, 4], "d": 1, "a": 0, "b": 1},
                {"x": [2, 4, 3], "s": [2, 2, 2, 3], "d": 1, "a": 1, "b": 2},
                {"x": [3, 2, 4], "s": [6, 4], "d": 0, "a": 2, "b": 6},
                {"x": [3, 2, 4], "s": [6, 4], "d": 0, "a": 1, "b": 4}]),
    # a slice along the outer of two dims of a view is a slice, by whole rows of the inner, of the view that
    # merges them (Megatron's all-to-all chunks [ranks, experts, tokens] of the rows [experts, ranks * tokens]);
    # only towards a merged view that exists
    L(511, "slice-of-split-view-is-slice-of-merged-view",
      "slice(reshape(?x, shape=?s), dim=?d, start=?a, end=?b)"
      " => reshape(slice(reshape(?x, shape=?c), dim=?d, start=?a * at(?s, ?d + 1), end=?b * at(?s, ?d + 1)),"
      " shape=set_at(?s, ?d, ?b - ?a))",
      "?d + 1 < len(?s) and ?c == set_at(drop_at(?s, ?d + 1), ?d, at(?s, ?d) * at(?s, ?d + 1))",
      when="reshape(?x, shape=?c)",
      examples=[{"x": [16, 8], "s": [2, 2, 4, 8], "c": [2, 8, 8], "d": 1, "a": 0, "b": 1},
                {"x": [16, 8], "s": [2, 2, 4, 8], "c": [2, 8, 8], "d": 1, "a": 1, "b": 2},
                {"x": [6, 4], "s": [3, 2, 4], "c": [6, 4], "d": 0, "a": 1, "b": 3},
                {"x": [2, 12], "s": [2, 3, 4], "c": [2, 12], "d": 1, "a": 0, "b": 2},
                {"x": [4, 6], "s": [4, 3, 2], "c": [4, 6], "d": 1, "a": 2, "b": 3}]),
    # a transpose of a view merging neighbouring dims: transpose first, with each merged run moved whole
    L(1301, "permute-of-merging-reshape",
      "permute(reshape(?x, shape=?s), dims=?p) => reshape(permute(?x, dims=merge_perm(?x, ?s, ?p)), shape=permuted(?s, ?p))",
      "len(merge_perm(?x, ?s, ?p)) == rank(?x) and len(?s) < rank(?x)",
      examples=[{"x": [3, 2, 4, 5], "s": [3, 8, 5], "p": [1, 0, 2]},
                {"x": [3, 2, 4, 5], "s": [6, 4, 5], "p": [2, 0, 1]},
                {"x": [3, 2, 4, 5], "s": [3, 8, 5], "p": [1, 2, 0]},
                {"x": [2, 3, 1, 4], "s": [6, 4], "p": [1, 0]},
                {"x": [8, 2, 1, 4], "s": [8, 2, 4], "p": [1, 0, 2]},
                {"x": [3, 1, 2, 1], "s": [3, 2, 1], "p": [2, 0, 1]},
                {"x": [2, 3, 4], "s": [2, 12], "p": [1, 0]}]),
    # the same for a view that splits dims (the backward of a merging view): transpose first, each split dim whole
    L(1306, "permute-of-splitting-reshape",
      "permute(reshape(?x, shape=?s), dims=?p) => reshape(permute(?x, dims=split_perm(?x, ?s, ?p)), shape=permuted(?s, ?p))",
      "len(split_perm(?x, ?s, ?p)) == rank(?x) and len(?s) > rank(?x)",
      examples=[{"x": [4, 8, 5], "s": [2, 2, 8, 5], "p": [2, 0, 1, 3]},
                {"x": [4, 8, 5], "s": [2, 2, 8, 5], "p": [3, 2, 0, 1]},
                {"x": [6, 4], "s": [2, 3, 4], "p": [2, 0, 1]},
                {"x": [6, 4], "s": [6, 2, 2], "p": [1, 2, 0]},
                {"x": [2, 8, 4], "s": [2, 1, 8, 4], "p": [2, 0, 1, 3]}]),
    # a number broadcast (a mean's backward) splits where a narrower copy of it exists (as 421, whose split dims
    # are size-1 dims of x; a number has none: every dim of its copy is new)
    L(1321, "expand-of-number-splits-at-narrower-copy",
      "aten.expand(?x, size=?s, implicit=?i) => concat(aten.expand(?x, size=?t, implicit=?i),"
      " aten.expand(?x, size=set_at(?s, narrower_dim(?s, ?t), at(?s, narrower_dim(?s, ?t)) - at(?t, narrower_dim(?s, ?t))),"
      " implicit=?i), dim=narrower_dim(?s, ?t))",
      "rank(?x) == 0 and narrower_dim(?s, ?t) >= 0", when="aten.expand(?x, size=?t, implicit=?i)",
      examples=[{"x": [], "s": [4, 3], "t": [1, 3], "i": False}, {"x": [], "s": [2, 8], "t": [2, 3], "i": False},
                {"x": [], "s": [5], "t": [2], "i": False}]),
    L(1325, "permute-of-fill",
      "permute(aten.full(size=?s, fill_value=?v, dtype=?a), dims=?p) => aten.full(size=[at(?s, at(?p, 0)), at(?s, at(?p, 1))], fill_value=?v, dtype=?a)",
      "len(?s) == 2 and len(?p) == 2"),
    # a slice of a transpose that leaves one row of the dim it moves moves no data: a view of the slice
    # (Megatron's all-to-all chunk of [experts, ranks, tokens] transposed to [ranks, experts, tokens])
    L(1355, "slice-of-unit-moving-permute-is-view-of-slice",
      "slice(permute(?x, dims=?p), dim=?d, start=?a, end=?b)"
      " => reshape(slice(?x, dim=at(?p, ?d), start=?a, end=?b), shape=sliced_permuted_shape(?x, ?p, ?d, ?a, ?b))",
      "?a >= 0 and ?a <= ?b and ?b <= size(?x, at(?p, ?d)) and slice_keeps_order(?x, ?p, ?d, ?a, ?b)",
      examples=[{"x": [2, 2, 4, 3], "p": [1, 0, 2, 3], "d": 0, "a": 0, "b": 1},
                {"x": [2, 2, 4, 3], "p": [1, 0, 2, 3], "d": 0, "a": 1, "b": 2},
                {"x": [3, 2, 2], "p": [2, 0, 1], "d": 0, "a": 1, "b": 2},
                {"x": [1, 3, 2], "p": [1, 0, 2], "d": 1, "a": 0, "b": 1},
                {"x": [2, 5], "p": [1, 0], "d": 1, "a": 0, "b": 1}]),
    # repeat that copies only dims of size 1 is a broadcast (grouped-query attention's KV heads)
    L(1504, "repeat-of-size-one-dims-is-expand",
      "aten.repeat(?x, repeats=?r) => aten.expand(?x, size=repeat_size(?x, ?r), implicit=false)",
      "len(repeat_size(?x, ?r)) > 0",
      examples=[{"x": [2, 1, 3], "r": [1, 4, 1]}, {"x": [1, 3], "r": [2, 1]}, {"x": [2, 1, 1, 3], "r": [1, 2, 3, 1]}]),
    # a slice of an expanded tensor along a dim it is broadcast in: a narrower expand (the per-micro-batch
    # gradients of torch.stack(losses).sum() are slices of expand(g))
    L(1855, "slice-of-expand-along-broadcast",
      "slice(aten.expand(?x, size=?s, implicit=?i), dim=?d, start=?a, end=?b)"
      " => aten.expand(?x, size=set_at(?s, ?d, ?b - ?a), implicit=?i)",
      "const_along(?x, len(?s), ?d)",
      examples=[{"x": [1], "s": [3], "d": 0, "a": 1, "b": 2}, {"x": [2, 1], "s": [2, 4], "d": 1, "a": 0, "b": 3},
                {"x": [3], "s": [2, 3], "d": 0, "a": 1, "b": 2}]),
    L(1401, "concat-with-empty-right", "concat(?a, ?b, dim=?d) => ?a", "size(?b, ?d) == 0",
      examples=[{"a": [2, 3], "b": [2, 0], "d": 1}, {"a": [0, 2], "b": [0, 2], "d": 0}]),
    L(1402, "concat-with-empty-left", "concat(?a, ?b, dim=?d) => ?b", "size(?a, ?d) == 0",
      examples=[{"a": [2, 0, 4], "b": [2, 3, 4], "d": 1}]),
    # reversing a concatenation along its own dim reverses the parts and their order
    L(1250, "flip-of-concat-along-it",
      "aten.flip(concat(?a, ?b, dim=?d), dims=?k) => concat(aten.flip(?b, dims=?k), aten.flip(?a, dims=?k), dim=?d)",
      "contains(?k, ?d)"),
    L(1800, "view-as-complex-of-concat",
      "aten.view_as_complex(concat(?a, ?b, dim=?d)) => concat(aten.view_as_complex(?a), aten.view_as_complex(?b), dim=?d)",
      "?d < rank(?a) - 1",
      examples=[{"a": [2, 3, 2], "b": [1, 3, 2], "d": 0}, {"a": [2, 1, 4, 2], "b": [2, 3, 4, 2], "d": 1}]),
    L(1801, "view-as-real-of-concat",
      "aten.view_as_real(concat(?a, ?b, dim=?d)) => concat(aten.view_as_real(?a), aten.view_as_real(?b), dim=?d)",
      examples=[{"a": [2, 3], "b": [1, 3], "d": 0}, {"a": [2, 1, 4], "b": [2, 3, 4], "d": 1}]),
]
