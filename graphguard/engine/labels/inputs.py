"""Relayouts of inputs: a G_s operator's input related in one layout, written again (on labels) over the
inputs of its G_d counterparts, which read another -- found among explored tensors and their views, or
computed by G_d's definitions from the relation's tensors (labels, or sums of labels before a reduce-scatter).
These are equalities for the operator's last search (its output is then the lemmas' business).
"""
from __future__ import annotations

from ...ir.expr import Leaf, Term, leaves
from ...ir.graph import Node
from ...ir.semantics import term_eval
from .counterparts import counterparts, reached_counterparts
from .layout import concrete, is_movement, labelled, solve
from .propagate import Propagated
from .sums import Multisets, Sums, is_summed


def relayouts(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of=None) -> list[tuple[Term, Term]]:
    """Equalities (the relation of an input of v, the same data over the inputs of v's G_d counterparts)
    proven by labelled evaluation. The counterparts are G_d operators of v's op, grouped by output name across
    ranks, whose input is an explored tensor or a view of one (a few data-movement operators down: their G_d
    definitions are added by ``grow(facts)``, which returns the saturated snapshot)."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    known = set(explored) | {leaf for x in v.inputs for e in R.get(x, ()) for leaf in leaves(e)}
    groups, snap = reached_counterparts(ctx, snap, v, known, range(len(v.inputs)), grow)
    out = []
    for nodes in groups:
        for k, x in enumerate(v.inputs):
            moves = [e for e in R.get(x, ()) if is_movement(e)][:4]
            for e in moves:
                base = frozenset(leaves(e))
                y_terms = []
                for n in nodes:
                    y = n.inputs[k]
                    found = [t for t in snap.clean_variants(snap.find(Leaf(y)), base) if is_movement(t)]
                    if not found:
                        break
                    y_terms.append((y, found[0]))
                else:
                    lab = labelled(sorted(base), g_d.shape)
                    shapes = [concrete(g_d.shape(y)) for y, _ in y_terms]
                    if lab is None or any(s is None for s in shapes):
                        continue
                    xs = term_eval(e, lab.__getitem__, reg)
                    ys = [term_eval(t, lab.__getitem__, reg) for _, t in y_terms]
                    got = [(e, t) for t in solve(xs, ys, [Leaf(y) for y, _ in y_terms], shapes) if t != e]
                    if got:
                        out.extend(got)
                        break
    if const_of is not None:  # (the inputs no explored view relates: through collectives, by G_d's definitions)
        out += [q for q in _propagated(ctx, v, R, grow, const_of) if q not in out]
    return out


def _propagated(ctx, v: Node, R: dict, grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for an input of v over the inputs of its G_d counterparts, whose labels G_d's definitions
    compute from the relation's tensors (:class:`Propagated`): the counterparts' inputs need not be explored
    (an expert's rows after an all-to-all, an all-gather and a re-sort by expert). An input known only as sums
    of the ranks' tensors (a gradient before its reduce-scatter) is carried as sums (:class:`Sums`: the
    reduce-scatter, the moves after it), each distinct multiset of labels a label of its own. The counterparts'
    own G_d definitions are added (``grow``), so that v's output meets theirs."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    groups = counterparts(g_d, v)
    out, used = [], []
    for k, x in enumerate(v.inputs):
        rels = R.get(x, ())
        for e in [e for e in rels if is_movement(e)][:2] + [e for e in rels if is_summed(e)][:2]:
            base = sorted(set(leaves(e)))
            if is_movement(e):
                lab = labelled(base, g_d.shape)
                if lab is None:
                    continue
                prop, key = Propagated(ctx, lab, const_of), None
                xs = term_eval(e, lab.__getitem__, reg)
            else:
                prop = Sums(ctx, base, const_of)
                xs = prop.eval(e) if prop.ok else None
                if xs is None:
                    continue
                key = Multisets()
                xs = key(xs)
            for nodes in groups:
                # (the ranks whose input the labelled tensors reach: the others hold replicated copies, or
                # other data)
                nodes = [n for n in nodes if prop.get(n.inputs[k]) is not None]
                ys = [prop.get(n.inputs[k]) for n in nodes]
                if not nodes or all(n.inputs[k] in base for n in nodes):
                    continue
                if key is not None:
                    ys = [key(y) for y in ys]
                got = [(e, t) for t in solve(xs, ys, [Leaf(n.inputs[k]) for n in nodes],
                                             [tuple(y.shape) for y in ys]) if t != e]
                if got:
                    out.extend(got)
                    used.extend(nodes)
            if out:
                break
    if used:
        grow([(Leaf(o), t) for n in used for o, t in zip(n.outputs, g_d.node_terms(n))])
    return out
