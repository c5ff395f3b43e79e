"""Replicas on labels: which G_d tensors hold equal values -- copies a relation shows equal, tensors G_d computes
by the same operator from such copies, the leaves two data-movement forms of one tensor pair up -- so that a
replica read by another rank carries the same labels.
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import App, Leaf, Term, base_name, leaves, rank_of
from ...ir.semantics import term_eval
from .layout import MAX_MOVED, is_movement, labelled


def equal_leaves(e: Term, f: Term, shape_of, reg) -> list[tuple[str, str]]:
    """Pairs (n, m) of a leaf of ``e`` and a leaf of ``f`` holding equal values, where e and f are data movement
    equal to one tensor: every entry of m lands, in f, where an entry of n lands in e, and the entries so paired
    are n's in its own order (then m == n entry by entry). Evaluated on labels; [] where shapes are symbolic or
    too large."""
    le, lf = sorted(set(leaves(e))), sorted(set(leaves(f)))
    lab = labelled(le + [f"\x00{n}" for n in lf], lambda n: shape_of(n.lstrip("\x00")))
    if lab is None or sum(a.size for a in lab.values()) > MAX_MOVED:
        return []
    try:
        x = term_eval(e, lab.__getitem__, reg)
        y = term_eval(f, lambda n: lab["\x00" + n], reg)
    except Exception:  # noqa: BLE001 -- shapes the references refuse: nothing is claimed
        return []
    if x.shape != y.shape:
        return []
    to_x: dict[int, int] = {}
    for a, b in zip(y.reshape(-1).tolist(), x.reshape(-1).tolist()):
        if to_x.setdefault(a, b) != b:
            return []  # (one entry of f equal to two of e: a broadcast -- nothing paired)
    owner = {int(a.reshape(-1)[0]): n for n, a in ((n, lab[n]) for n in le) if a.size}
    out = []
    for m in lf:
        ym = lab["\x00" + m].reshape(-1)
        if not ym.size or int(ym[0]) not in to_x:
            continue
        n = owner.get(to_x[int(ym[0])])
        if n is None or n == m or lab[n].shape != lab["\x00" + m].shape:
            continue
        if all(to_x.get(int(a)) == int(b) for a, b in zip(ym.tolist(), lab[n].reshape(-1).tolist())):
            out.append((n, m))
    return out


def _by_base(g_d) -> dict[str, list[str]]:
    """G_d's tensors by base name (``ln1`` -> ``ln1@0``, ``ln1@1``...), kept on the graph while its tensors
    are unchanged."""
    key = len(g_d.tensors)
    got = getattr(g_d, "_relayout_by_base", None)
    if got is None or got[0] != key:
        index: dict[str, list[str]] = {}
        for t in g_d.tensors:
            index.setdefault(base_name(t), []).append(t)
        got = (key, index)
        g_d._relayout_by_base = got
    return got[1]


def replica_labels(ctx, R: dict, lab: dict[str, np.ndarray]) -> None:
    """The other ranks' replicas of a labelled tensor, where the relations or G_d's definitions show them equal
    (:func:`same_computation`), hold the same labels: a rank's copy of the RoPE tables, read by that rank's
    heads; a KV head's copy on the next rank (more ranks than KV heads), read by that rank's query heads. So
    does the tensor a labelled output copies (``identity``), which G_d's readers read."""
    by_base = _by_base(ctx.g_d)
    memo: dict = {}
    aliases = getattr(ctx, "aliases", {})
    for n in list(lab):  # (an output that is a copy of a tensor: the tensor its readers read)
        p = ctx.g_d.producer.get(n)
        if p is not None and p.op == "core.identity" and p.inputs[0] not in lab:
            lab[p.inputs[0]] = lab[n]
    for n in [n for n in lab if rank_of(n) is not None]:
        for m in sorted(t for t in by_base.get(base_name(n), ()) if t != n and t not in lab):
            if ctx.g_d.shape(m) == ctx.g_d.shape(n) and same_computation(ctx.g_d, R, n, m, ctx.egraph.reg, memo,
                                                                           aliases=aliases):
                lab[m] = lab[n]


def rename_leaves(t: Term, names: dict[str, str]) -> Term:
    if isinstance(t, Leaf):
        return Leaf(names.get(t.name, t.name))
    return App(t.op, tuple(rename_leaves(a, names) for a in t.args), t.attrs) if isinstance(t, App) else t


def _covers(t: Term, n: str, shape_of, reg) -> bool:
    """Is ``t`` data movement of the tensor ``n`` alone that reads every entry of it (permutes, reshapes, a
    concatenation of copies -- not a slice)? Then ``t(n) == t(m)`` entry by entry means ``n == m``."""
    if not is_movement(t) or set(leaves(t)) != {n}:
        return False
    lab = labelled([n], shape_of)
    if lab is None:
        return False
    return bool(np.isin(lab[n], term_eval(t, lab.__getitem__, reg)).all())


def same_computation(g_d, R: dict, n: str, m: str, reg, memo: dict, depth: int = 24, aliases=None) -> bool:
    """Do the G_d tensors ``n`` and ``m`` hold the same values: proven equal earlier (``aliases``), replicas
    shown by the relations (is_replica), two outputs of one operator that G_d defines by the same term (an
    all-gather's on each rank of its group), or computed by the same operator (not a collective), with the same
    attributes, from such tensors pairwise?"""
    if n == m or (aliases and m in aliases.get(n, ())):
        return True
    key = (n, m)
    if key in memo:
        return memo[key]
    memo[key] = False  # (no cycles in a graph; a repeated question while open is answered no)
    a, b = g_d.producer.get(n), g_d.producer.get(m)
    ok = False
    if g_d.shape(n) == g_d.shape(m) and is_replica(R, n, m, g_d.shape, reg):
        ok = True
    elif a is not None and a is b:
        terms = g_d.node_terms(a)
        ok = terms[a.outputs.index(n)] == terms[a.outputs.index(m)]
    elif a is not None and b is not None and depth > 0 and a.op == b.op and dict(a.attrs) == dict(b.attrs) \
            and len(a.inputs) == len(b.inputs) and len(a.outputs) == 1 == len(b.outputs):
        op = reg.get(a.op)
        if op is not None and not op.collective and op.meaning is None:
            ok = all(same_computation(g_d, R, x, y, reg, memo, depth - 1, aliases)
                     for x, y in zip(a.inputs, b.inputs))
    memo[key] = ok
    return ok


def is_replica(R: dict, n: str, m: str, shape_of, reg) -> bool:
    """Are the G_d tensors ``n`` and ``m`` equal (replicas), as some G_s tensor's relations show: a term over
    ``n`` that reads all of it, and the same term over ``m``?"""
    for ts in R.values():
        if len(ts) > 1:
            for t in ts:
                if n in set(leaves(t)) and rename_leaves(t, {n: m}) in ts and _covers(t, n, shape_of, reg):
                    return True
    return False
