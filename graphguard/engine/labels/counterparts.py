"""Counterparts: the G_d operators that compute, across ranks, what one G_s operator computes (the same op and
arity, grouped by output name), and the data-movement chains that lead a known tensor to their inputs.
"""
from __future__ import annotations

from ...ir.expr import Leaf, base_name, rank_of
from ...ir.graph import Node
from .layout import MOVES


MAX_COUNTERPARTS = 64  # G_d operators one elementwise search may read


def view_chain(g_d, y: str, known: set[str], limit: int = 6) -> list[Node] | None:
    """The data-movement operators (one input each) from a known tensor down to ``y``, or None."""
    chain, t = [], y
    while t not in known:
        n = g_d.producer.get(t)
        if n is None or n.op not in MOVES or len(n.inputs) != 1 or len(chain) >= limit:
            return None
        chain.append(n)
        t = n.inputs[0]
    return chain


def is_broadcast(op) -> bool:
    """A broadcast of its one input (``aten.expand``, ``hlo.broadcast``): data movement, any dialect."""
    return op is not None and op.arity == 1 and op.data_movement and bool(op.broadcast or op.broadcast_to)


def counterparts(g_d, v: Node, keep=lambda n: True, reg=None) -> list[list[Node]]:
    """v's G_d counterparts: operators of v's op and arity, grouped by output name across ranks (rank order);
    with ``reg``, for a broadcast v, every dialect's broadcasts (PyTorch's ``expand`` beside XLA's
    ``broadcast``: both are data movement, which the labels compare)."""
    groups: dict[str, list[Node]] = {}
    wide = reg is not None and is_broadcast(reg.get(v.op))
    for n in g_d.nodes:
        same = n.op == v.op or (wide and is_broadcast(reg.get(n.op)))
        if same and len(n.inputs) == len(v.inputs) and len(n.outputs) == len(v.outputs) and keep(n):
            groups.setdefault(base_name(n.outputs[0]), []).append(n)
    return [sorted(ns, key=lambda n: rank_of(n.outputs[0]) or 0) for ns in groups.values()]


def reached_counterparts(ctx, snap, v: Node, known: set[str], ks, grow):
    """The counterparts one of whose inputs ``ks`` is a known tensor or a view of one (a few data-movement
    operators down), and the snapshot with those views' G_d definitions added (``grow``)."""
    g_d, facts = ctx.g_d, {}

    def keep(n):
        chains = [view_chain(g_d, n.inputs[k], known) for k in ks]
        for m in (m for c in chains for m in c or ()):
            facts[m.name] = [(Leaf(o), t) for o, t in zip(m.outputs, g_d.node_terms(m))]
        return any(c is not None for c in chains)
    groups = counterparts(g_d, v, keep)
    if facts:
        snap = grow([f for fs in facts.values() for f in fs])
    return groups, snap


def named_first(groups: list[list[Node]], v: Node) -> list[list[Node]]:
    """Counterpart groups, the one named as v's output first (a capture names a rank's copy of an operator as
    the specification's)."""
    return sorted(groups, key=lambda ns: base_name(ns[0].outputs[0]) != base_name(v.outputs[0]))
