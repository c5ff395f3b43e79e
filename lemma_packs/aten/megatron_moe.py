"""Operators and lemmas for megatron-core's MoE layer (``examples/megatron-moe``). References: 1350-1359.

Megatron's all-to-all dispatcher with ``moe_pad_expert_input_to_capacity`` works on fixed shapes: the router
keeps, per expert, the ``capacity`` tokens of highest probability (``topk`` along the token dim, written as ones
into a zero mask with ``scatter``), the dispatcher orders each expert's tokens with a stable ``argsort`` of that
mask and picks them with ``index_select``. With a capacity equal to the number of tokens (capacity factor
experts / top-k) nothing is dropped: ``topk`` over a whole dim picks every index once, so the mask is all ones,
its ``argsort`` is the identity order, and the dispatch sends every token to every expert (the probabilities of
the experts a token was not routed to are 0).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.lemma import L, keeps_order
from graphguard.ir.ops import AttrSpec, multi_output

from .ops import _dim

NUMBERS = range(1350, 1360)  # this file's lemma numbers (the plugin loader refuses others)


def _sort_shapes(shapes, attrs, cx):
    _dim("aten.sort.stable", attrs["dim"], len(shapes[0]))
    return [tuple(shapes[0]), tuple(shapes[0])]


def _sort_ref(xs, attrs):
    x = xs[0]
    if x.ndim == 0:
        return [x.copy(), np.zeros((), np.int64)]
    d = _dim("aten.sort.stable", attrs["dim"], x.ndim)
    if attrs["descending"]:  # stable descending: equal entries keep their order (reverse a stable ascending
        # sort of the reversed tensor, then map the indices back)
        n = x.shape[d]
        flipped = np.flip(x, axis=d)
        order = np.flip(np.argsort(flipped, axis=d, kind="stable"), axis=d)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=d, kind="stable")
    return [np.take_along_axis(x, order, axis=d), order.astype(np.int64)]


OPS = multi_output("aten.sort.stable", 1, _sort_shapes, _sort_ref,
                   (AttrSpec("stable", "bool", optional=True), AttrSpec("dim", "int", -1, dim_of=0),
                    AttrSpec("descending", "bool", False)),
                   names=("values", "indices"), dtypes=lambda ds, a: [ds[0], "int64"],
                   doc="Entries sorted along dim (ascending, or descending) and their indices; equal entries "
                       "keep their order when stable is true (and, in graphguard's reference, always).")

def _slice_keeps_order(ctx, x, p, d, a, b) -> bool:
    """Is ``slice(permute(x, p), dim=d, start=a, end=b)`` a permute that moves only size-1 dims (of the
    slice of x it permutes), i.e. the same data in the same order?"""
    shape = list(ctx.shape_of(x))
    if not 0 <= int(d) < len(p) or int(p[int(d)]) >= len(shape):
        raise ValueError("not a permutation of the operand's dims")
    shape[int(p[int(d)])] = S.sym(b) - S.sym(a)
    return keeps_order(ctx.cx, shape, p)


# functions of this module's conditions and right-hand sides (the graphguard_lemma_functions hook)
FUNCTIONS = {
    "slice_keeps_order": _slice_keeps_order,
    "sliced_permuted_shape": lambda ctx, x, p, d, a, b: tuple(
        b - a if k == int(d) else ctx.shape_of(x)[int(i)] for k, i in enumerate(p)),
}

_FULL = "aten.full(size=?s, fill_value=?v, dtype=?t)"
# the dispatch's token order, [experts, n]: tokens 0..n-1 once per expert (1326); its rows as an index column
# [experts * n, 1] broadcast along the hidden dim (scatter_add / gather), or flat [experts * n] (index_add)
_ORDER = "aten.expand(reshape(aten.arange(end=?n, dtype=?p), shape=?u), size=?s, implicit=?i)"
_ORDER_OK = "?u == [1, ?n] and len(?s) == 2 and at(?s, 1) == ?n and (?p == None or ?p == \"int64\")"
_COLUMN = f"aten.expand(reshape({_ORDER}, shape=?v), size=?w, implicit=?j)"
_COLUMN_OK = (f"{_ORDER_OK} and ?v == [at(?s, 0) * ?n, 1] and (?w == [-1, size({{y}}, 1)]"
              " or ?w == [at(?s, 0) * ?n, size({y}, 1)])")

LEMMAS = [
    # the router's combine weights: the top-k probabilities written into a zero [tokens, experts] matrix along
    # the expert dim; tokens (the dim of the concat, not the written one) are independent rows
    L(1350, "scatter-into-full-of-concats",
      f"aten.scatter.src({_FULL}, concat(?i, ?j, dim=?c), concat(?a, ?b, dim=?c), dim=?d)"
      f" => concat(aten.scatter.src(aten.full(size=set_at(?s, ?c, size(?i, ?c)), fill_value=?v, dtype=?t), ?i, ?a, dim=?d),"
      f" aten.scatter.src(aten.full(size=set_at(?s, ?c, size(?j, ?c)), fill_value=?v, dtype=?t), ?j, ?b, dim=?d), dim=?c)",
      "?c != ?d and shape(?i) == shape(?a) and shape(?j) == shape(?b) and at(?s, ?c) == size(?i, ?c) + size(?j, ?c)",
      index={"i": "at(?s, ?d)", "j": "at(?s, ?d)"},
      examples=[{"i": [3, 2], "j": [2, 2], "a": [3, 2], "b": [2, 2], "s": [5, 4], "v": 0, "t": "float32", "c": 0, "d": 1},
                {"i": [2, 2], "j": [1, 2], "a": [2, 2], "b": [1, 2], "s": [3, 5], "v": 1, "t": "float32", "c": 0, "d": 1},
                {"i": [2, 1], "j": [2, 3], "a": [2, 1], "b": [2, 3], "s": [4, 4], "v": 0, "t": "float32", "c": 1, "d": 0},
                {"i": [1, 3, 2], "j": [2, 3, 2], "a": [1, 3, 2], "b": [2, 3, 2], "s": [3, 3, 4], "v": 0,
                 "t": "float32", "c": 0, "d": 2}]),
    # the aux loss's routing map: ones written at each token's top-k experts into a zero [tokens, experts] matrix;
    # tokens (the dim of the concat, not the written one) are independent rows
    L(1359, "scatter-value-into-full-of-concat",
      f"aten.scatter.value({_FULL}, concat(?i, ?j, dim=?c), dim=?d, value=?w)"
      f" => concat(aten.scatter.value(aten.full(size=set_at(?s, ?c, size(?i, ?c)), fill_value=?v, dtype=?t), ?i, dim=?d,"
      f" value=?w), aten.scatter.value(aten.full(size=set_at(?s, ?c, size(?j, ?c)), fill_value=?v, dtype=?t), ?j, dim=?d,"
      f" value=?w), dim=?c)",
      "?c != ?d and at(?s, ?c) == size(?i, ?c) + size(?j, ?c)",
      index={"i": "at(?s, ?d)", "j": "at(?s, ?d)"},
      examples=[{"i": [3, 2], "j": [2, 2], "s": [5, 4], "v": 0, "t": "int32", "w": 1, "c": 0, "d": 1},
                {"i": [2, 2], "j": [1, 2], "s": [3, 5], "v": 1, "t": "float32", "w": 0, "c": 0, "d": 1},
                {"i": [2, 1], "j": [2, 3], "s": [4, 4], "v": 0, "t": "float32", "w": 2, "c": 1, "d": 0},
                {"i": [1, 2, 2], "j": [2, 2, 2], "s": [3, 3, 4], "v": 0, "t": "int64", "w": 1, "c": 0, "d": 2}]),
    # the capacity mask: top-k along a whole dim (k = its size) picks every index once, so writing a value at
    # the picked indices writes it everywhere
    L(1351, "scatter-at-every-topk-index",
      f"aten.scatter.value({_FULL}, aten.topk#1(?y, k=?k, dim=?d, largest=?l, sorted=?o), dim=?d, value=?w)"
      " => aten.full(size=?s, fill_value=?w, dtype=?t)",
      "shape(?y) == ?s and ?k == at(?s, ?d) and floating(?t)",  # a number written into an integer tensor promotes it
      examples=[{"y": [4, 3], "s": [4, 3], "k": 4, "d": 0, "l": True, "o": False, "v": 0, "t": "float32", "w": 1},
                {"y": [2, 5], "s": [2, 5], "k": 5, "d": 1, "l": False, "o": True, "v": 0, "t": "float64", "w": 3}]),
    # the probabilities' permutation: row e of the expert-major order is e * n + (0..n-1), i.e. 0..e*n-1 in order
    L(1352, "row-offsets-plus-column-arange-is-arange",
      "aten.add.Tensor(aten.mul.Tensor(reshape(aten.arange(end=?e, dtype=?p), shape=?u), aten.scalar_tensor(s=?n, dtype=?q)),"
      " aten.expand(reshape(aten.arange(end=?m, dtype=?r), shape=?w), size=?s, implicit=?i), alpha=1)"
      " => reshape(aten.arange(end=?e * ?n, dtype=?p), shape=[?e, ?n])",
      "?n == ?m and ?u == [?e, 1] and ?w == [1, ?n] and ?s == [?e, ?n] and ?q == \"int64\""
      " and (?p == None or ?p == \"int64\") and (?r == None or ?r == \"int64\")",
      examples=[{"e": e, "n": n, "m": n, "p": p, "q": "int64", "r": r, "u": [e, 1], "w": [1, n], "s": [e, n], "i": False}
                for e in (1, 2, 3, 5) for n in (1, 2, 4) for p, r in ((None, None), ("int64", None))]),
    # the unpermute: each expert's rows added back at token 0..n-1 (the stable order of 1326, expert-major) is
    # the sum over experts of the rows viewed [experts, n, hidden]
    L(1354, "scatter-add-at-repeated-arange-is-sum-over-repeats",
      f"aten.scatter_add(aten.zeros(size=?z, dtype=?t), {_COLUMN}, ?y, dim=0)"
      " => aten.sum.dim_IntList(reshape(?y, shape=[at(?s, 0), ?n, size(?y, 1)]), dim=[0], keepdim=false, dtype=None)",
      f"rank(?y) == 2 and ?z == [?n, size(?y, 1)] and {_COLUMN_OK.format(y='?y')}"
      " and size(?y, 0) == at(?s, 0) * ?n and dtype(?y) == ?t",
      examples=[{"n": n, "e": e, "h": h, "y": [e * n, h], "z": [n, h], "t": "float32", "p": None, "u": [1, n], "s": [e, n],
                 "i": False, "v": [e * n, 1], "w": w, "j": False}
                for n in (1, 2, 3) for e in (1, 2, 4) for h in (1, 3) for w in ([-1, h], [e * n, h])][:24]),
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
    # its backward: the gradient rows gathered at token 0..n-1 for each expert are the gradient repeated per expert
    L(1356, "gather-at-repeated-arange-is-repeat",
      f"aten.gather(?g, {_COLUMN}, dim=0)"
      " => reshape(aten.expand(reshape(?g, shape=[1, ?n, size(?g, 1)]), size=[at(?s, 0), ?n, size(?g, 1)], implicit=false),"
      " shape=[at(?s, 0) * ?n, size(?g, 1)])",
      f"rank(?g) == 2 and size(?g, 0) == ?n and {_COLUMN_OK.format(y='?g')}",
      examples=[{"n": n, "g": [n, h], "p": None, "u": [1, n], "s": [e, n], "i": False, "v": [e * n, 1], "w": w, "j": False}
                for n in (1, 2, 3) for e in (1, 2, 4) for h in (1, 3) for w in ([-1, h], [e * n, h])][:24]),
    # the backward of the permutations (index_select's): added back into zeros at 0..n-1, the rows are themselves;
    # at 0..n-1 once per expert, the sum over the experts
    L(1357, "index-add-at-arange-into-zeros",
      "aten.index_add(aten.full(size=?z, fill_value=0, dtype=?t), aten.arange(end=?n, dtype=?p), ?y, dim=0, alpha=1) => ?y",
      "?z == shape(?y) and at(?z, 0) == ?n and dtype(?y) == ?t and (?p == None or ?p == \"int64\")",
      examples=[{"z": z, "y": z, "n": z[0], "t": t, "p": p} for z in ([1], [4], [6, 2], [3, 1, 2], [5, 3])
                for t in ("float32", "float64") for p in (None, "int64")]),
    L(1358, "index-add-at-repeated-arange-is-sum-over-repeats",
      f"aten.index_add(aten.full(size=?z, fill_value=0, dtype=?t), reshape({_ORDER}, shape=?w), ?y, dim=0, alpha=1)"
      " => aten.sum.dim_IntList(reshape(?y, shape=[at(?s, 0), ?n, size(?y, 1)]), dim=[0], keepdim=false, dtype=None)",
      f"rank(?y) == 2 and ?z == [?n, size(?y, 1)] and {_ORDER_OK} and ?w == [at(?s, 0) * ?n]"
      " and size(?y, 0) == at(?s, 0) * ?n and dtype(?y) == ?t",
      examples=[{"n": n, "y": [e * n, h], "z": [n, h], "t": "float32", "p": None, "u": [1, n], "s": [e, n], "i": False,
                 "w": [e * n]} for n in (1, 2, 3, 5) for e in (1, 2, 4) for h in (1, 3)]),
    # x[0..n-1] along a dim of size n is x
    L(1353, "index-select-of-arange-is-identity",
      "aten.index_select(?x, aten.arange(end=?n, dtype=?p), dim=?d) => ?x",
      "?n == size(?x, ?d) and (?p == None or ?p == \"int64\")"),
]
