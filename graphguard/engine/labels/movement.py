"""Data movement on labels: the output of a G_s operator that only moves data (a transpose, a view, a broadcast,
a gather at constant indices), written over its G_d counterparts' outputs by evaluating both on labelled
entries -- ``movement_first`` before the search, ``moved_outputs`` (constant indices) after it.
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import App, Leaf, Term, app, base_name, leaves, rank_of, size, substitute
from ...ir.graph import Node
from ...ir.semantics import term_eval
from .counterparts import counterparts, is_broadcast, reached_counterparts, view_chain
from .layout import MAX_MOVED, MOVES, concrete, is_movement, labelled, solve
from .propagate import Propagated, const_value, copied_labels
from .replicas import replica_labels


def moved_outputs(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for the output of a data-movement G_s operator (``OpDef.data_movement``: entries of input 0
    copied at indices its other inputs give) whose input 0 is related as data movement and whose other inputs
    are constants (in G_s by R; on each rank by ``const_of``, the constants lemmas prove G_d's index tensors
    equal to): the operator evaluated on labelled entries, in G_s and on every rank, says which rank's output
    entry each output entry is (``solve``). The G_s side of each equality is the operator applied to the
    input's relation (congruent to v's output)."""
    op = ctx.egraph.reg.get(v.op)
    g_d, reg = ctx.g_d, ctx.egraph.reg
    if op is None or not op.data_movement or len(v.outputs) != 1:
        return []
    idx_s = []
    for x in v.inputs[1:]:
        c = next((e for e in R.get(x, ()) if next(leaves(e), None) is None), None)
        if c is None:
            return []
        idx_s.append(c)
    known = set(explored) | {leaf for e in R.get(v.inputs[0], ()) for leaf in leaves(e)}
    groups, snap = reached_counterparts(ctx, snap, v, known, [0], grow)
    if not groups:
        return []
    rng = np.random.default_rng(0)
    idx_vals = [const_value(c, reg) for c in idx_s]
    if any(x is None for x in idx_vals):
        return []
    out = []
    for nodes in groups:
        consts = [[const_of(i) for i in n.inputs[1:]] for n in nodes]
        if any(c is None for cs in consts for c in cs):
            continue
        for e in [e for e in R.get(v.inputs[0], ()) if is_movement(e)][:4]:
            base = frozenset(leaves(e))
            y_terms = []
            for n in nodes:
                found = [t for t in snap.clean_variants(snap.find(Leaf(n.inputs[0])), base) if is_movement(t)]
                if not found:
                    break
                y_terms.append(found[0])
            else:
                lab = labelled(sorted(base), g_d.shape)
                if lab is None:
                    continue
                try:
                    xs = copied_labels(op, idx_vals, dict(v.attrs), term_eval(e, lab.__getitem__, reg), rng)
                    ys = [copied_labels(op, [const_value(c, reg) for c in cs], dict(n.attrs),
                                 term_eval(t, lab.__getitem__, reg), rng) for n, cs, t in zip(nodes, consts, y_terms)]
                except Exception:  # noqa: BLE001
                    continue
                if xs is None or any(y is None for y in ys):
                    continue
                shapes = [tuple(y.shape) for y in ys]
                lhs = app(v.op, e, *idx_s, **dict(v.attrs))
                got = [(lhs, t) for t in solve(xs, ys, [Leaf(n.outputs[0]) for n in nodes], shapes)]
                if got:
                    out.extend(got)
                    break
    return out


MAX_MOVED_FORMS = 4  # combinations of the inputs' relations a data-movement operator is answered for
MAX_ALIAS_STEPS = 3  # data-movement steps from a labelled tensor searched for equal copies


def movement_first(ctx, v: Node, R: dict, const_of) -> tuple[list[Term], list]:
    """The output of a G_s operator of data movement only (a transpose, a view) whose inputs are sharded --
    every relation of each a data movement over several ranks' tensors -- as the same data over its G_d
    counterparts' outputs (the same op, grouped by name across ranks), proven on labelled entries for every
    combination of the inputs' relations (:class:`Propagated` carries the labels to the counterparts' outputs;
    ``solve`` writes v's labels over theirs); with the aliases the labels show (:func:`_label_aliases`) and v
    over its inputs' first relations. ([], []) where the labels do not answer every combination (the search
    runs)."""
    g_s, g_d, reg = ctx.g_s, ctx.g_d, ctx.egraph.reg
    none: tuple[list, list] = ([], [])
    if len(v.outputs) != 1 or not v.inputs:
        return none
    terms = g_s.node_terms(v)
    if len(terms) != 1 or not isinstance(terms[0], App) or not (
            is_movement(terms[0]) or (is_broadcast(reg.get(terms[0].op)) and all(map(is_movement, terms[0].args)))):
        return none
    crossing = not is_movement(terms[0])  # (a broadcast, against any dialect's)
    ranks = 1 if crossing and g_d.world_size == 1 else 2  # (one rank: its tensors are all there is)
    rels = []
    for x in v.inputs:
        rx = list(R.get(x, ()))
        if not rx or not all(is_movement(e) and len({rank_of(n) for n in leaves(e)}) >= ranks for e in rx):
            return none
        rels.append(rx)
    out_shape = concrete(g_s.shape(v.outputs[0]))
    if out_shape is None or not 0 < int(np.prod(out_shape, dtype=np.int64)) <= MAX_MOVED:
        return none
    groups = counterparts(g_d, v, reg=reg)
    combos = [[e] for e in rels[0]]
    for rx in rels[1:]:
        combos = [c + [e] for c in combos for e in rx]
    if (not groups and not crossing) or len(combos) > MAX_MOVED_FORMS:
        return none
    out: list[Term] = []
    aliases: list = []
    for picked in combos:
        lab = labelled(sorted({leaf for e in picked for leaf in leaves(e)}), g_d.shape)
        if lab is None or sum(a.size for a in lab.values()) > MAX_MOVED:
            return none
        try:
            ins = {x: term_eval(e, lab.__getitem__, reg) for x, e in zip(v.inputs, picked)}
            xs = term_eval(terms[0], ins.__getitem__, reg)
        except Exception:  # noqa: BLE001 -- shapes the references refuse: nothing is claimed
            return none
        if tuple(xs.shape) != out_shape:
            return none
        for n in list(lab):  # (copies proven equal earlier -- replicated KV heads -- hold the same labels)
            for a in ctx.aliases.get(n, ()):
                if a not in lab and concrete(g_d.shape(a)) == lab[n].shape:
                    lab[a] = lab[n]
        replica_labels(ctx, R, lab)
        prop = Propagated(ctx, lab, const_of)
        known, near = set(lab), []
        for g in groups:  # (the counterparts reading labelled tensors or views of them, nearest first)
            steps = [sum(len(c) for c in cs) for cs in ([view_chain(g_d, i, known) for i in n.inputs] for n in g)
                     if all(c is not None for c in cs)]
            if steps:
                near.append((min(steps), len(near), g))
            elif crossing and any(prop.get(n.outputs[0]) is not None for n in g):  # (through a concat: farther)
                near.append((MAX_MOVED, len(near), g))
        found: list[Term] = []
        for _, _, nodes in sorted(near):
            kept = [(n, y) for n, y in ((n, prop.get(n.outputs[0])) for n in nodes) if y is not None]
            if kept:
                found += solve(xs, [y for _, y in kept], [Leaf(n.outputs[0]) for n, _ in kept],
                               [tuple(y.shape) for _, y in kept])
        if not found and crossing:  # (no broadcast: the G_d tensors themselves, or their copies moved,
            for held in _moved_copies(ctx, prop, lab):  # every rank's replica labelled -- more ranks than KV heads)
                found = solve(xs, [prop.get(n) for n in held], [Leaf(n) for n in held],
                              [prop.get(n).shape for n in held])
                if found:
                    break
        if not found:
            if crossing:  # (a broadcast: the combinations the labels answer, the others left to the e-graph)
                continue
            return none
        best = min(found, key=size)
        op_form = substitute(terms[0], dict(zip(v.inputs, picked)))
        # (the ranks' rows interleaved, or one rank's copy: the search's; a broadcast answered is kept however
        # long -- its operator form is no clean term)
        if (size(best) > size(op_form) and not crossing) or len({rank_of(n) for n in leaves(best)}) < ranks:
            return none
        if best not in out:
            out.append(best)
        aliases += _label_aliases(ctx, prop, list(leaves(best)))
    if not out:
        return none
    op_form = substitute(terms[0], {x: rx[0] for x, rx in zip(v.inputs, rels)})
    return out + ([op_form] if op_form not in out else []), aliases


def _moved_copies(ctx, prop: "Propagated", lab: dict) -> list[list[str]]:
    """The labelled G_d tensors, then those G_d's data movement makes of them step by step (a cache
    concatenated from its old entries and the new ones, then viewed), in groups of one base name, nearest
    first: the tensors a broadcast's output may be written over where G_d broadcasts nothing."""
    g_d = ctx.g_d
    layers = [sorted(n for n in lab if rank_of(n) is not None)]
    known = set(lab)
    for _ in range(MAX_ALIAS_STEPS):
        new = sorted({n.outputs[0] for t in layers[-1] for n in g_d.consumers.get(t, ())
                      if n.op in MOVES and len(n.outputs) == 1 and n.outputs[0] not in known
                      and all(i in known for i in n.inputs) and prop.get(n.outputs[0]) is not None})
        if not new:
            break
        known |= set(new)
        layers.append(new)
    out = [layers[0]]
    for names in layers[1:]:
        groups: dict[str, list[str]] = {}
        for n in names:
            groups.setdefault(base_name(n), []).append(n)
        out += list(groups.values())
    return out


def _label_aliases(ctx, prop: "Propagated", names) -> list[tuple[str, set[str]]]:
    """(y, G_d tensors holding y's entries in y's layout) for each named y: the tensors G_d computes from the
    labelled ones by data movement within MAX_ALIAS_STEPS operators, equal to y where their labels are."""
    g_d = ctx.g_d
    prop = Propagated(ctx, {t: a for t, a in prop.memo.items() if a is not None}, prop.const_of)
    frontier = list(prop.memo)
    seen = set(frontier)
    for _ in range(MAX_ALIAS_STEPS):
        nxt = []
        for t in frontier:
            for n in g_d.consumers.get(t, ()):
                for o in n.outputs:
                    if o not in seen:
                        seen.add(o)
                        if prop.get(o) is not None:
                            nxt.append(o)
        frontier = nxt
    by_labels: dict[tuple, set[str]] = {}
    for t, a in prop.memo.items():
        if a is not None:
            by_labels.setdefault((a.shape, a.tobytes()), set()).add(t)
    out = []
    for y in dict.fromkeys(names):
        a = prop.memo.get(y)
        same = by_labels.get((a.shape, a.tobytes()), set()) - {y} if a is not None else set()
        if same:
            out.append((y, same))
    return out
