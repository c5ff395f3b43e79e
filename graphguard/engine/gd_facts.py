"""What G_d says by itself, whatever R says: its constants and their terms, each operator filed under one input
(what the frontier watches), index tensors that G_d's own definition proves constant, the definitions of the
broadcasts a relation names."""
from __future__ import annotations

import time

from ..ir.expr import Leaf, Term, substitute
from ..ir.graph import Graph, Node
from .context import Context
from .egraph import Budget, BudgetExceeded

def index_constant(ctx: Context, t: str) -> Term | None:
    """The constant that an integer or boolean G_d tensor computed from the data provably is, or None: its
    G_d definition (at most ``MAX_INDEX_ANCESTRY`` operators back) saturated with the lemmas on its own,
    and a term without G_d tensors read off its e-class. Megatron's capacity-padded dispatch sorts a mask
    that a top-k over every token makes all ones: each rank's token order is then a constant, as in G_s,
    though no relation names it. Decided once per tensor (index tensors only: masks and orders are what a
    rank derives from its data without carrying it)."""
    memo = ctx.index_constants
    if t in memo:
        return memo[t]
    memo[t] = None
    g_d = ctx.g_d
    info = g_d.tensors.get(t)
    const = structure(ctx)[0]
    if info is None or t in const or t not in g_d.producer or not is_index_dtype(info.dtype):
        return None
    nodes, stack, seen = [], [g_d.producer[t]], set()
    while stack:
        m = stack.pop()
        if m.name in seen:
            continue
        seen.add(m.name)
        nodes.append(m)
        if len(nodes) > MAX_INDEX_ANCESTRY:
            return None
        stack.extend(g_d.producer[i] for i in m.inputs if i in g_d.producer)
    eg = ctx.egraph
    eg.push_nested()
    try:
        eg.union_all([(Leaf(o), term) for m in nodes for o, term in zip(m.outputs, g_d.node_terms(m))])
        try:
            snap = eg.saturate(INDEX_BUDGET, time.monotonic() + INDEX_BUDGET.seconds, {})
        except BudgetExceeded:
            return None
        memo[t] = snap.constant_term(snap.find(Leaf(t)))
    finally:
        eg.pop_nested()
    return memo[t]


def constant_term(ctx: Context, t: str, depth: int = 32) -> Term | None:
    """A G_d tensor as a term without G_d tensors: its definition where it is computed from no input (a
    structural constant), else what :func:`index_constant` proves; None if neither."""
    if t not in structure(ctx)[0]:
        return index_constant(ctx, t)
    n = ctx.g_d.producer.get(t)
    if n is None or depth <= 0:
        return None
    subst = {}
    for i in n.inputs:
        c = constant_term(ctx, i, depth - 1)
        if c is None:
            return None
        subst[i] = c
    return substitute(ctx.g_d.node_terms(n)[n.outputs.index(t)], subst)


def is_index_dtype(dtype: str) -> bool:
    return dtype in ("bool", "pred") or dtype.startswith(("int", "uint"))


MAX_INDEX_ANCESTRY = 32  # G_d operators an index tensor's definition may take to be read as a constant
INDEX_BUDGET = Budget(iterations=12, enodes=4000, seconds=10.0)


def broadcast_definitions(ctx: Context, names: list[str]) -> list[tuple[Term, Term]]:
    """``(b, broadcast(x))`` for each named G_d tensor that a broadcast produces: G_d facts, true whatever R
    says. R relates G_s tensors to G_d *names*, so a G_s tensor kept as copies of a wide broadcast (a rank's q
    heads' RoPE table) would otherwise be opaque where a narrower piece of it is needed (its k head's)."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    defs = [(n, g_d.producer.get(n)) for n in names]
    return [(Leaf(t), g_d.node_terms(p)[0]) for t, p in defs if p is not None and reg.get(p.op).broadcast]

# all_to_all and split: their outputs, together, hold exactly the data of their inputs (so do the slices
# a backward takes of a concatenation)


def structure(ctx: Context) -> tuple[frozenset, dict[str, list[Node]], frozenset, frozenset]:
    """Per G_d, computed once: its constant tensors (computed from no graph input); each non-constant
    operator filed under one of its non-constant inputs, the one read by the fewest operators -- an operator
    whose inputs are all related is found there, and a tensor that many operators read (a replicated weight,
    a shared constant) costs nothing per G_s operator; its outputs, and those of G_s."""
    if ctx.structure is None:
        g_d = ctx.g_d
        const: set[str] = set()
        for n in g_d.topo_order():
            if all(i in const for i in n.inputs):
                const.update(n.outputs)
        watch: dict[str, list[Node]] = {}
        for n in g_d.nodes:
            ins = [i for i in n.inputs if i not in const]
            if ins:
                # (an index tensor last: it may be a constant only a lemma sees, see index_constant)
                pivot = min(ins, key=lambda i: (is_index_dtype(g_d.tensors[i].dtype), len(g_d.consumers.get(i, ()))))
                watch.setdefault(pivot, []).append(n)
        ctx.structure = (frozenset(const), watch, frozenset(g_d.outputs), frozenset(ctx.g_s.outputs))
    return ctx.structure


def constants_for(g_d: Graph, n: Node, const: frozenset, explored: dict[str, Node]) -> list[Node]:
    """``n`` after the not yet explored operators that compute its constant inputs (their definitions are G_d
    facts the lemmas may need, e.g. the zeros of a padding)."""
    out, seen, stack = [], set(), [n]
    while stack:
        m = stack.pop()
        if m.name in explored or m.name in seen:
            continue
        seen.add(m.name)
        out.append(m)
        stack.extend(g_d.producer[i] for i in m.inputs if i in const)
    return out[::-1]
