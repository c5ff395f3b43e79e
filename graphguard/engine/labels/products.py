"""Products on labels: a bilinear product (``OpDef.bilinear``) of views of G_d tensors against another dialect's
products -- each output entry the multiset of pairs of input entries it sums, decided by enumeration
(``product_signatures``) or, above the enumeration cap, on the entries' positions (``_products_by_positions``);
a weight too large to label read whole by one product per shard (``_products_of_whole_shards``).
"""
from __future__ import annotations

from collections import Counter

import numpy as np

from ...ir.expr import App, Leaf, Term, app, flat_args, leaves
from ...ir.graph import Node
from ...ir.semantics import term_eval
from .layout import concrete, is_movement, labelled, laid_out, layout, solve, sum_of_layouts, summed_layouts
from .propagate import Propagated
from .replicas import replica_labels


# -- products on labels: a bilinear product of views of G_d tensors, against another dialect's product ----------

def product_axes(reg, op: str, attrs: dict, rx: int, ry: int):
    """(lhs batch, lhs contracting, rhs batch, rhs contracting) dims of a product (its ``OpDef.bilinear``) whose
    inputs have ranks rx, ry; None for an op that is no product at those ranks. Its output: the batch dims, then
    lhs's free dims, then rhs's (in order)."""
    b = _bilinear(reg, op)
    return b.axes(attrs, rx, ry) if b is not None else None


def _bilinear(reg, op: str):
    d = reg.get(op)
    return d.bilinear if d is not None else None


def _stated(reg, n: Node) -> bool:
    """A G_d product met against another dialect's: two inputs, one output, its dims stated by its attributes
    (XLA's general ``dot``; a product at fixed ranks on the ranks -- ``mm``, ``bmm`` -- is left to the search)."""
    b = _bilinear(reg, n.op) if len(n.inputs) == 2 and len(n.outputs) == 1 else None
    return b is not None and b.stated


def product_signatures(bilinear, attrs: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Each output entry of the product of label arrays x, y as the pairs of entries it sums, sorted (each pair
    its two labels in order: products commute -- XLA's ``dot(w, x)`` beside PyTorch's ``x @ w.T``): an object
    array of the output's shape; None where ``bilinear`` (an ``OpDef.bilinear``) is None or not for these ranks."""
    ax = bilinear.axes(attrs, x.ndim, y.ndim) if bilinear is not None else None
    if ax is None:
        return None
    lb, lc, rb, rc = ax
    lf = [d for d in range(x.ndim) if d not in lb + lc]
    rf = [d for d in range(y.ndim) if d not in rb + rc]
    if len(lb) != len(rb) or len(lc) != len(rc):
        return None
    xt = x.transpose(lb + lf + lc)
    yt = y.transpose(rb + rf + rc)
    nb = len(lb)
    bshape, fl, fr = xt.shape[:nb], xt.shape[nb:nb + len(lf)], yt.shape[nb:nb + len(rf)]
    if bshape != yt.shape[:nb] or xt.shape[nb + len(lf):] != yt.shape[nb + len(rf):]:
        return None
    k = int(np.prod(xt.shape[nb + len(lf):], dtype=np.int64))
    if int(np.prod(bshape + fl + fr, dtype=np.int64)) * max(k, 1) > MAX_PRODUCT_TERMS:
        return None  # (too many pairs to enumerate: the search's)
    xs = xt.reshape(bshape + fl + (k,))
    ys = yt.reshape(bshape + fr + (k,))
    out = np.empty(bshape + fl + fr, dtype=object)
    for idx in np.ndindex(*out.shape):
        b, i, j = idx[:nb], idx[nb:nb + len(fl)], idx[nb + len(fl):]
        out[idx] = tuple(sorted((min(p), max(p)) for p in zip(xs[b + i].tolist(), ys[b + j].tolist())))
    return out


MAX_PRODUCT_TERMS = 1 << 16  # (output entries x summands) a product on labels may enumerate
MAX_PRODUCT_LABELS = 1 << 25  # labelled entries of a product's inputs (a production layer's weight shards)
MAX_PRODUCT_CHUNK = 1 << 22  # (output entries x summands) checked at once on positions


def products_first(ctx, v: Node, R: dict, const_of) -> list[tuple[str, Term]]:
    """The output of a G_s product (``OpDef.bilinear``: ``mm``, ``bmm``) of inputs related as data movement of G_d
    tensors, as a layout of G_d products' outputs (any dialect's: XLA's ``dot`` with two batch dims beside
    PyTorch's ``bmm`` of their merged views): every entry of the relations' G_d tensors labelled, each product's output entry written as the
    pairs of input entries it sums (:func:`product_signatures`), and the G_s output solved over the G_d
    counterparts' outputs on those (``solve``). Equal pairs, equal sums: exact over the reals. Each term with its
    case: ``pairs`` (solved on the pairs), ``partial`` (the ranks' partial products summed), ``positions`` (the
    pairs too many: decided on positions), ``whole-shards`` (a weight too large to label). [] where nothing is
    found (the search runs)."""
    g_s, g_d, reg = ctx.g_s, ctx.g_d, ctx.egraph.reg
    if len(v.inputs) != 2 or len(v.outputs) != 1 or product_axes(reg, v.op, v.attrs, len(g_s.shape(v.inputs[0])),
                                                                  len(g_s.shape(v.inputs[1]))) is None:
        return []
    if any(n.op == v.op for n in g_d.nodes):  # (G_d computes the same op: the search relates them, every form)
        return []
    picked = []
    for x in v.inputs:
        rx = [e for e in R.get(x, ()) if is_movement(e)]
        if not rx:
            return []
        picked.append(rx[0])
    lab = labelled(sorted({leaf for e in picked for leaf in leaves(e)}), g_d.shape, MAX_PRODUCT_LABELS)
    if lab is None:  # (a weight too large to label: its shards read whole, each by one G_d product)
        return [("whole-shards", t) for t in _products_of_whole_shards(ctx, v, picked, R, const_of)]
    try:
        xs = [term_eval(e, lab.__getitem__, reg) for e in picked]
    except Exception:  # noqa: BLE001 -- shapes the references refuse: nothing is claimed
        return []
    sig = product_signatures(_bilinear(reg, v.op), v.attrs, xs[0], xs[1])
    replica_labels(ctx, R, lab)  # (a replicated activation: every rank's copy labelled)
    prop = Propagated(ctx, dict(lab), const_of)
    if sig is None:  # (too many pairs to enumerate: the same proof on the positions of the entries)
        return [("positions", t) for t in _products_by_positions(ctx, v, xs, prop)]
    cands = []
    for n in g_d.nodes:
        if not _stated(reg, n):
            continue
        if g_d.tensors[n.outputs[0]].dtype != g_s.tensors[v.outputs[0]].dtype:
            continue
        a, b = prop.get(n.inputs[0]), prop.get(n.inputs[1])
        if a is None or b is None:
            continue
        s = product_signatures(_bilinear(reg, n.op), n.attrs, a, b)
        if s is not None:
            cands.append((n, s))
    if not cands:
        return []
    # (the counterparts summing pairs x's entries sum: by rank order)
    need = {pr for pairs in sig.reshape(-1) for pr in pairs}
    cands = [(n, s) for n, s in cands if any(pr in need for pairs in s.reshape(-1) for pr in pairs)]
    if not cands:
        return []
    ids: dict[tuple, int] = {}
    x = np.vectorize(lambda t: ids.setdefault(t, len(ids)), otypes=[np.int64])(sig)
    ys = [np.vectorize(lambda t: ids.setdefault(t, len(ids)), otypes=[np.int64])(s) for _, s in cands]
    pairs = solve(x, ys, [Leaf(n.outputs[0]) for n, _ in cands], [tuple(y.shape) for y in ys])
    return [("pairs", t) for t in pairs] or [("partial", t) for t in _partial_products(sig, cands)]


def _products_of_whole_shards(ctx, v: Node, picked: list[Term], R: dict, const_of) -> list[Term]:
    """``mm(x, concat(W_0, ..., W_n, dim=1))`` -- a column-parallel weight too large to label (an LM head's
    vocabulary) -- where each shard W_r is read whole by one G_d product (any dialect's) contracting W_r's dim 0:
    with only x's entries labelled, each row of x must be a row of that product's other operand, its entries in
    the contraction's order (the replicated activation on each rank, ``replica_labels``). Then v's entry (i, j),
    j in shard r at j', is ``sum_k x[i, k] W_r[k, j']`` -- the G_d product's entry (p_i, j'), term for term.
    The concatenation of the products' outputs, laid out; [] where anything else holds."""
    g_d, g_s, reg = ctx.g_d, ctx.g_s, ctx.egraph.reg
    bil = _bilinear(reg, v.op)
    if bil is None or not bil.matmul(v.attrs) or len(picked) != 2:
        return []
    xe, ye = picked
    parts = flat_args(ye) if isinstance(ye, App) and ye.op == "core.concat" and ye.attrd.get("dim") == 1 else [ye]
    if not all(isinstance(w, Leaf) for w in parts) or {w.name for w in parts} & set(leaves(xe)):
        return []
    lab = labelled(sorted(set(leaves(xe))), g_d.shape)
    if lab is None:
        return []
    try:
        X = term_eval(xe, lab.__getitem__, reg)
    except Exception:  # noqa: BLE001 -- shapes the references refuse: nothing is claimed
        return []
    if X.ndim != 2:
        return []
    replica_labels(ctx, R, lab)
    prop = Propagated(ctx, dict(lab), const_of)
    rows_x = [tuple(r) for r in X.tolist()]
    want = g_s.tensors[v.outputs[0]].dtype
    terms = []
    for w in parts:
        ws = concrete(g_d.shape(w.name))
        if ws is None or len(ws) != 2 or ws[0] != X.shape[1]:
            return []
        found = None
        for n in g_d.consumers.get(w.name, ()):
            if len(n.inputs) != 2 or len(n.outputs) != 1 or n.inputs.count(w.name) != 1 \
                    or g_d.tensors[n.outputs[0]].dtype != want:
                continue
            wi = n.inputs.index(w.name)
            other = prop.get(n.inputs[1 - wi])
            if other is None or other.ndim != 2:
                continue
            ax = product_axes(reg, n.op, n.attrs, 2, 2)
            if ax is None:
                continue
            lb, lc, rb, rc = ax
            (wb, wc), (ob, oc) = ((lb, lc), (rb, rc)) if wi == 0 else ((rb, rc), (lb, lc))
            if wb or ob or wc != [0] or len(oc) != 1:
                continue
            A = other.transpose([1 - oc[0], oc[0]])  # [P, K]: its rows, entries in the contraction's order
            where = {}
            for p_, row in enumerate(A.tolist()):
                where.setdefault(tuple(row), p_)
            ps = [where.get(r) for r in rows_x]
            if None in ps:
                continue
            pn, jn = A.shape[0], ws[1]
            p_of = np.array(ps, dtype=np.int64)[:, None]
            q = np.arange(jn, dtype=np.int64)[None, :]
            pos = q * pn + p_of if wi == 0 else p_of * jn + q  # (its output: lhs free dims, then rhs free)
            t = layout(Leaf(n.outputs[0]), concrete(g_d.shape(n.outputs[0])), pos)
            if t is not None:
                found = t
                break
        if found is None:
            return []
        terms.append(found)
    return [terms[0] if len(terms) == 1 else app("core.concat", *terms, dim=1)]


def _as_bik(a: np.ndarray, batch, free, contracting) -> np.ndarray:
    """A product operand's labels as [batch, free, contracting], each group of dims flattened."""
    t = a.transpose(list(batch) + list(free) + list(contracting))
    nb, nf = len(batch), len(free)
    size = lambda dims: int(np.prod(dims, dtype=np.int64))  # noqa: E731
    return t.reshape(size(t.shape[:nb]), size(t.shape[nb:nb + nf]), size(t.shape[nb + nf:]))


def _products_by_positions(ctx, v: Node, xs: list[np.ndarray], prop: "Propagated") -> list[Term]:
    """:func:`products_first` where the pairs are too many to enumerate (a production layer's projections): the
    same equality of pair multisets, decided on positions. With v = X[b, i, k] Y[b, j, k] summed over k and each
    G_d product r = A_r[b', p, c] B_r[b', q, c] summed over c, the pair (X[b, i, k], Y[b, j, k]) is a term of r's
    entry (b', p, q) exactly where Y's entry sits in B_r at (b', q, c) and X's in A_r at (b', p, c) -- the same
    b' and c (or the two operands the other way round: products commute). Every Y label located once (no
    replicas on that side), every X label located in the rank Y's says; then v's entry (b, i, j) is the sum over
    the ranks it meets of their entries, provided each rank's k's cover its c's once with p and q fixed. Exact:
    the multisets of pairs are equal. [] where anything else holds."""
    g_d, g_s = ctx.g_d, ctx.g_s
    ax = product_axes(ctx.egraph.reg, v.op, v.attrs, xs[0].ndim, xs[1].ndim)
    if ax is None:
        return []
    lb, lc, rb, rc = ax
    lf = [d for d in range(xs[0].ndim) if d not in lb + lc]
    rf = [d for d in range(xs[1].ndim) if d not in rb + rc]
    X, Y = _as_bik(xs[0], lb, lf, lc), _as_bik(xs[1], rb, rf, rc)
    out_shape = tuple(xs[0].shape[d] for d in lb) + tuple(xs[0].shape[d] for d in lf) + \
        tuple(xs[1].shape[d] for d in rf)
    cands = []
    for n in g_d.nodes:
        if not _stated(ctx.egraph.reg, n) or g_d.tensors[n.outputs[0]].dtype != g_s.tensors[v.outputs[0]].dtype:
            continue
        a, b = prop.get(n.inputs[0]), prop.get(n.inputs[1])
        z = concrete(g_d.shape(n.outputs[0]))
        if a is None or b is None or z is None:
            continue
        alb, alc, arb, arc = product_axes(ctx.egraph.reg, n.op, n.attrs, a.ndim, b.ndim)
        af = [d for d in range(a.ndim) if d not in alb + alc]
        bf = [d for d in range(b.ndim) if d not in arb + arc]
        cands.append((n, _as_bik(a, alb, af, alc), _as_bik(b, arb, bf, arc), z))
    if not cands:
        return []
    top = 1 + max(int(max(X.max(initial=0), Y.max(initial=0))),
                  max(int(max(A.max(initial=0), B.max(initial=0))) for _, A, B, _ in cands))
    for swap in (False, True):
        got = _located_products(X, Y, [(A, B) if not swap else (B, A) for _, A, B, _ in cands], top, swap)
        if got is None:
            continue
        pos, ranks = got  # pos[r]: each v entry's flat position in rank r's output ([b, i, j]), -1 where none
        names = [Leaf(cands[r][0].outputs[0]) for r in ranks]
        shapes = [tuple(cands[r][3]) for r in ranks]
        if len(ranks) == 1 or not all((pos[r] >= 0).all() for r in ranks):
            # (each entry one rank's: the ranks' outputs laid out)
            hits = np.stack([pos[r] >= 0 for r in ranks])
            if (hits.sum(axis=0) != 1).any():
                return []
            which = hits.argmax(axis=0)
            at = np.take_along_axis(np.stack([pos[r] for r in ranks]), which[None], axis=0)[0]
            return laid_out(which.reshape(-1), at.reshape(-1), names, shapes, out_shape)
        t = sum_of_layouts([pos[r].reshape(out_shape) for r in ranks], names, shapes)
        return [t] if t is not None else []
    return []


def _located_products(X, Y, ops: list[tuple[np.ndarray, np.ndarray]], top: int, swap: bool):
    """:func:`_products_by_positions` for one pairing of operands (``ops``: per G_d product, the operand meeting
    X's labels, then Y's, each [b', free, c]): per rank, v's entries' flat positions in its output (-1 where the
    entry meets it not), and the ranks met; None where the pairs do not decompose."""
    nb, ni, nk = X.shape
    nj = Y.shape[1]
    probe = int(Y.reshape(-1)[0]) if Y.size else -1  # (the other pairing, cheaply told apart: Y's first label
    if not any((B == probe).any() for _, B in ops):  # in no operand of this side)
        return None
    # Y's labels, each in one rank's operand: rank, batch, free index, contraction index
    small = np.int32 if top < (1 << 31) else np.int64
    y_rank = np.full(top, -1, dtype=np.int8 if len(ops) < 127 else np.int64)
    y_at = np.full(top, -1, dtype=small)
    for r, (_, B) in enumerate(ops):
        flat = B.reshape(-1)
        if (y_rank[flat] >= 0).any():
            return None  # (a label in two places: a replica on this side)
        y_rank[flat] = r
        y_at[flat] = np.arange(flat.size, dtype=small)
        if (y_at[flat] != np.arange(flat.size, dtype=small)).any():
            return None  # (a label twice in one operand: a broadcast)
    R, at = y_rank[Y].astype(np.int64), y_at[Y].astype(np.int64)
    if (R < 0).any():
        return None
    shapes_b = [B.shape for _, B in ops]
    if len(set(shapes_b)) == 1:  # (the ranks' operands of one shape: one unravel)
        Bp, Q, C = np.unravel_index(at, shapes_b[0])
    else:
        Bp, Q, C = (np.empty_like(at) for _ in range(3))
        for r, (bn, qn, cn) in enumerate(shapes_b):
            m = R == r
            Bp[m], Q[m], C[m] = np.unravel_index(at[m], (bn, qn, cn))
    ranks = np.nonzero(np.bincount(R.reshape(-1), minlength=len(ops)))[0].tolist()
    if not _distinct_incidences(R, C):
        return None  # (a Y label at two k's -- a repeated operand along the contraction: a pair counted twice)
    # each (b, j): per rank, one batch entry and one free index, its k's covering the rank's c's once; rep: the
    # first k of (b, j) meeting the same rank (computed on one column where every column meets the ranks alike)
    if (R == R[:, :, :1]).all():  # (each column one rank's: column-parallel)
        if any(nk != shapes_b[r][2] for r in ranks):
            return None
        rep = np.zeros_like(R)
        if (Bp != Bp[:, :, :1]).any() or (Q != Q[:, :, :1]).any():
            return None
    else:
        alike = (R == R[:, :1]).all()
        Rc = R[:, :1] if alike else R
        rep = np.empty_like(Rc)
        for r in ranks:
            m = Rc == r
            first = np.argmax(m, axis=2)
            rep[m] = np.broadcast_to(first[:, :, None], m.shape)[m]
            count = m.sum(axis=2)
            if ((count != 0) & (count != shapes_b[r][2])).any():
                return None
        rep = np.broadcast_to(rep, R.shape)
        take = lambda a: np.take_along_axis(a, rep, axis=2)  # noqa: E731
        if (take(Bp) != Bp).any() or (take(Q) != Q).any():
            return None
    # X's labels in each rank's operand (replicas allowed: each rank's own copy)
    Xb, Xp, Xc = (np.full((len(ops),) + X.shape, -1, dtype=np.int64) for _ in range(3))
    for r, (A, _) in enumerate(ops):
        inv = np.full(top, -1, dtype=np.int64)
        flat = A.reshape(-1)
        inv[flat] = np.arange(flat.size)
        if (inv[flat] != np.arange(flat.size)).any():
            return None  # (a label twice in one operand: a broadcast)
        hit = inv[X]
        ok = hit >= 0
        b_, p_, c_ = np.unravel_index(np.where(ok, hit, 0), A.shape)
        Xb[r], Xp[r], Xc[r] = np.where(ok, b_, -1), np.where(ok, p_, -1), np.where(ok, c_, -1)
    pos = {r: np.full((nb, ni, nj), -1, dtype=np.int64) for r in ranks}
    groups = _column_groups(R, Bp, C)
    if groups is not None:  # (columns alike along k -- row- or column-parallel: X checked once per group)
        for b, js, j0 in groups:
            rk, ki1 = R[b, j0], np.arange(nk)
            xb, xp, xc = Xb[rk, b, :, ki1].T, Xp[rk, b, :, ki1].T, Xc[rk, b, :, ki1].T  # [ni, nk]
            if (xp < 0).any() or (xb != Bp[b, j0][None]).any() or (xc != C[b, j0][None]).any():
                return None
            if (xp[:, rep[b, j0]] != xp).any():
                return None
            for r in sorted(set(rk.tolist())):
                k0 = int(np.argmax(rk == r))
                _, pn, _ = ops[r][0].shape
                qn = shapes_b[r][1]
                bq, qq, pp = Bp[b, js, k0], Q[b, js, k0], xp[:, k0]
                pos[r][b][:, js] = (bq[None] * pn + pp[:, None]) * qn + qq[None] if not swap else \
                    (bq[None] * qn + qq[None]) * pn + pp[:, None]
        return pos, ranks
    step = max(1, MAX_PRODUCT_CHUNK // max(1, nb * ni * nk))
    bi = np.arange(nb)[:, None, None, None]
    ii = np.arange(ni)[None, :, None, None]
    ki = np.arange(nk)[None, None, None, :]
    for j0 in range(0, nj, step):
        js = slice(j0, min(nj, j0 + step))
        r4 = R[:, None, js, :]  # [nb, 1, jc, nk]
        xb, xp, xc = Xb[r4, bi, ii, ki], Xp[r4, bi, ii, ki], Xc[r4, bi, ii, ki]  # [nb, ni, jc, nk]
        if (xp < 0).any() or (xb != Bp[:, None, js, :]).any() or (xc != C[:, None, js, :]).any():
            return None
        rep4 = np.broadcast_to(rep[:, None, js, :], xp.shape)
        if (np.take_along_axis(xp, rep4, axis=3) != xp).any():
            return None
        for r in ranks:
            m = R[:, js, :] == r  # [nb, jc, nk]
            has = m.any(axis=2)  # [nb, jc]
            k0 = np.argmax(m, axis=2)  # [nb, jc]
            bq = np.take_along_axis(Bp[:, js, :], k0[:, :, None], axis=2)[:, :, 0]
            qq = np.take_along_axis(Q[:, js, :], k0[:, :, None], axis=2)[:, :, 0]
            pp = np.take_along_axis(xp, np.broadcast_to(k0[:, None, :, None], xp.shape[:3] + (1,)), axis=3)[..., 0]
            _, pn, _ = ops[r][0].shape
            qn = shapes_b[r][1]
            p_flat = (bq[:, None, :] * pn + pp) * qn + qq[:, None, :] if not swap else \
                (bq[:, None, :] * qn + qq[:, None, :]) * pn + pp
            pos[r][:, :, js] = np.where(has[:, None, :], p_flat, -1)
    return pos, ranks


def _distinct_incidences(R: np.ndarray, C: np.ndarray) -> bool:
    """Whether each (b, j)'s contraction k meets every (rank, contraction index) at most once. Coverage is
    counted on *distinct* incidences: with a label repeated along k (``concat(y, y, dim=0)``: grouped-query
    attention's replicated KV heads), k's count per rank can equal the rank's contraction length while half of
    its c's are met twice and half never -- a sum that is not the product's."""
    if R.shape[-1] < 2:
        return True
    key = np.sort(R.astype(np.int64) * (int(C.max(initial=0)) + 1) + C, axis=-1)
    return not (key[..., 1:] == key[..., :-1]).any()


def _column_groups(R: np.ndarray, Bp: np.ndarray, C: np.ndarray) -> list | None:
    """Columns j of v (per batch entry b) whose k's meet the same ranks, batch entries and contraction indices:
    (b, their j's, one of them) each -- one group per b where every column is alike (a row-parallel product:
    the ranks split k), one per b and rank where each column meets one rank (column-parallel); None otherwise."""
    nb = R.shape[0]
    if (R == R[:, :1]).all() and (Bp == Bp[:, :1]).all() and (C == C[:, :1]).all():
        return [(b, np.arange(R.shape[1]), 0) for b in range(nb)]
    if not (R == R[:, :, :1]).all():
        return None
    out = []
    for b in range(nb):
        for r in np.unique(R[b, :, 0]).tolist():
            js = np.nonzero(R[b, :, 0] == r)[0]
            j0 = int(js[0])
            if (Bp[b, js] != Bp[b, j0][None]).any() or (C[b, js] != C[b, j0][None]).any():
                return None
            out.append((b, js, j0))
    return out


def _partial_products(sig: np.ndarray, cands: list) -> list[Term]:
    """The G_s product as the sum over G_d products of a layout of each: every G_s entry's pairs (``sig``) are
    the disjoint union of one entry's pairs of each of the same counterparts (``cands``: the ranks' partial
    products of a contraction dim they split, summed by an all-reduce after). Equal multisets of pairs, equal
    sums over the reals. [] where the pairs decompose otherwise."""
    where: dict[tuple, tuple[int, int]] = {}  # a pair -> the first counterpart entry holding it
    flat = [s.reshape(-1) for _, s in cands]
    for k, f in enumerate(flat):
        for q, pairs in enumerate(f):
            for pr in pairs:
                where.setdefault(pr, (k, q))
    parts = []
    for pairs in sig.reshape(-1):
        rest, got = Counter(pairs), []
        while rest:
            hit = where.get(next(iter(rest)))
            if hit is None or any(k == hit[0] for k, _ in got):
                return []
            held = Counter(flat[hit[0]][hit[1]])
            if held - rest:  # (the counterpart's entry sums a pair this entry does not)
                return []
            rest -= held
            got.append(hit)
        parts.append(sorted(got))
    if not parts or len(parts[0]) < 2:  # (one counterpart each: solve's case, not found there)
        return []
    t = summed_layouts(parts, [Leaf(n.outputs[0]) for n, _ in cands], [tuple(s.shape) for _, s in cands],
                       sig.shape)
    return [t] if t is not None else []
