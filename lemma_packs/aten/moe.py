"""Lemmas for mixture-of-experts layers (router, dense dispatch, all-to-all layouts, auxiliary loss).
References: 5xx.

Routing is row-wise (top-k over the experts of each token), so it distributes over token shards; the
dispatch layouts of expert parallelism are views whose slices are slices of their source; the auxiliary
loss and the gradients of replicated routers are sums, over which products and reductions distribute.
"""
from graphguard.ir.lemma import L

NUMBERS = (range(500, 540), range(560, 600))  # (540-559: scaled.py)

_K = "k=?k, dim=?j, largest=?l, sorted=?o"

ROUTING = [
    # one_hot as captured: eq(indices[..., None], arange(E))
    L(503, "eq-of-concat-and-broadcast",
      "aten.eq.Tensor(concat(?a, ?b, dim=?d), ?c) => concat(aten.eq.Tensor(?a, ?c), aten.eq.Tensor(?b, ?c), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
]

_SRC = "reshape_src_dim(?x, ?s, ?d)"
_A, _B = "reshape_src_index(?x, ?s, ?d, ?a)", "reshape_src_index(?x, ?s, ?d, ?b)"

LAYOUT = [
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
]

PARTIAL_SUMS = [
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
]

# A replicated loss divided by the world size (the fix of the aux-loss scaling bug): each rank holds a share
# y * 1/n, and the clean extraction sums n different shares back to y -- it reads them off core.scale.
SHARES = [
    L(530, "mul-scalar-is-scale", "aten.mul.Scalar(?x, other=?c) => scale(?x, factor=?c)",
      "?c > 0 and ?c < 1 and floating(dtype(?x))"),
]

# Dropless (sparse) dispatch: each expert's rows are added into the output (index_add); with experts spread
# over ranks, each rank adds its experts' rows into zeros and a reduction sums the ranks' partial outputs.
_IA = "dim=?d, alpha=?al"
SPARSE = [
    L(560, "index-add-into-partial-sum",
      f"aten.index_add(sum(?a, ?b), ?i, ?y, {_IA}) => sum(?a, aten.index_add(?b, ?i, ?y, {_IA}))",
      "shape(?a) == shape(?b) and floating(dtype(?b)) and finite(?al)", index={"i": "size(?a, ?d)"}),
    # the rows added to x are a partial sum of their own where they are also added to zeros (constrained: a
    # rank's first expert, index_add into zeros, must exist -- else every index_add would grow a zero term)
    L(561, "index-add-splits-off-zeros",
      f"aten.index_add(?x, ?i, ?y, {_IA}) => sum(?x, aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?y, {_IA}))",
      "?s == shape(?x) and floating(dtype(?x)) and floating(dtype(?y)) and finite(?al)", when=f"aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?y, {_IA})",
      index={"i": "size(?x, ?d)"}),
    # tensor-parallel experts: each rank adds its partial rows (index_add is linear in self and source)
    L(564, "index-add-into-zeros-of-partial-sum",
      f"aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), {_IA})"
      f" => sum(aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, {_IA}),"
      f" aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, {_IA}))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b)) and finite(?al)",
      index={"i": "at(?s, ?d)"}),
    # ... and their backward: the gradient rows accumulated back (index_put into zeros, linear in the values)
    L(565, "index-put-into-zeros-of-partial-sum",
      "aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), accumulate=true, absent=[])"
      " => sum(aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, accumulate=true, absent=[]),"
      " aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, accumulate=true, absent=[]))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, 0)"}),
    L(566, "index-put-2-into-zeros-of-partial-sum",
      "aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, sum(?a, ?b), accumulate=true, absent=[])"
      " => sum(aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, ?a, accumulate=true, absent=[]),"
      " aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, ?b, accumulate=true, absent=[]))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, 0)", "j": "at(?s, 1)"}),
    # the top-k weights' backward writes the incoming gradient into zeros at the chosen experts: linear in it
    L(562, "scatter-into-zeros-of-partial-sum",
      "aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), dim=?d)"
      " => sum(aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, dim=?d),"
      " aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, dim=?d))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, ?d)"}),
]

LEMMAS = ROUTING + LAYOUT + PARTIAL_SUMS + SHARES + SPARSE
