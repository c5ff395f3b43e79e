"""Operators and lemmas for megatron-core's MoE layer (``examples/megatron-moe``). Its lemmas
(1350-1359) are in ``indexing.py`` (1355: ``views_movement.py``).

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
from graphguard.ir.lemma import keeps_order
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
