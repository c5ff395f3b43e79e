"""Operators and lemmas for megatron-core's MoE layer (``examples/.incomplete/megatron-moe``). References: 1350-1399.

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

from graphguard.engine.lemma import L
from graphguard.ir.ops import AttrSpec, multi_output

from .ops import _dim


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

_FULL = "aten.full(size=?s, fill_value=?v, dtype=?t)"

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
    # the capacity mask: top-k along a whole dim (k = its size) picks every index once, so writing a value at
    # the picked indices writes it everywhere
    L(1351, "scatter-at-every-topk-index",
      f"aten.scatter.value({_FULL}, aten.topk#1(?y, k=?k, dim=?d, largest=?l, sorted=?o), dim=?d, value=?w)"
      " => aten.full(size=?s, fill_value=?w, dtype=?t)",
      "shape(?y) == ?s and ?k == at(?s, ?d) and floating(?t)",  # a number written into an integer tensor promotes it
      examples=[{"y": [4, 3], "s": [4, 3], "k": 4, "d": 0, "l": True, "o": False, "v": 0, "t": "float32", "w": 1},
                {"y": [2, 5], "s": [2, 5], "k": 5, "d": 1, "l": False, "o": True, "v": 0, "t": "float64", "w": 3}]),
]
