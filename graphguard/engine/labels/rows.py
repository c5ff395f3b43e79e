"""Rows on labels: a row-wise G_s operator (``OpDef.rows`` or a ``RowWise``) of rows that its G_d counterparts
read in another order -- the operator of the rows' source, those rows picked out.
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import App, Leaf, Term, app, base_name, flat_args, leaves, rank_of
from ...ir.graph import Node
from ...ir.semantics import term_eval
from .layout import chunks, concrete, is_movement, labelled, layout
from .replicas import is_replica, rename_leaves


def _row_dims(op, attrs: dict, ndim: int) -> tuple[int, tuple[int, ...]] | None:
    """A row-wise op's row input and the dims its rows span (the other dims index the rows, in input and output
    alike): ``OpDef.rows`` (trailing dims), or a :class:`RowWise` with one row input and no index inputs."""
    if op.rows:
        p, trailing = op.rows
        return p, tuple(range(ndim - trailing, ndim))
    rw = op.rowwise
    if rw is None or len(rw.args) != 1 or rw.index or rw.dims not in attrs:
        return None
    d = attrs[rw.dims]
    if isinstance(d, int):
        dims = (d,)
    elif isinstance(d, (list, tuple)) and all(isinstance(x, int) for x in d):
        dims = tuple(d) if op.attr_spec(rw.dims).kind == "ints" else tuple(range(ndim - len(d), ndim))
    else:
        return None
    dims = tuple(sorted({x % ndim for x in dims})) if ndim else ()
    return (rw.args[0], dims) if dims and len(dims) < ndim else None


def _as_rows(a: np.ndarray, dims: tuple[int, ...]) -> np.ndarray:
    """``a``'s rows (the index over the dims not in ``dims``) as a 2-D array, one row each."""
    other = [d for d in range(a.ndim) if d not in dims]
    b = np.transpose(a, other + list(dims))
    return b.reshape(int(np.prod([a.shape[d] for d in other], dtype=np.int64)), -1)


def rows_through(ctx, v: Node, R: dict) -> list[tuple[Term, Term]]:
    """Equalities carrying a row layout through a row-wise G_s operator (``OpDef.rows``, or a ``RowWise`` with
    one row input): where each row of the row input's relation is, on labelled entries, a whole row of a term
    X over its G_d tensors -- one of them, or all of them concatenated along a dim (an expert's rows re-sorted
    from the ranks' column halves) --, the operator of x is the same rows of the operator of X, the other inputs
    used whole (the declaration says so, fuzzed). The right side is not clean: lemmas take the operator of X on
    (a matmul of column halves is a sum of the ranks' products)."""
    op = ctx.egraph.reg.get(v.op)
    g_s, g_d, reg = ctx.g_s, ctx.g_d, ctx.egraph.reg
    if op is None or len(v.outputs) != 1:
        return []
    out_shape = concrete(g_s.shape(v.outputs[0]))
    attrs = dict(v.attrs)
    rd = _row_dims(op, attrs, len(out_shape)) if out_shape is not None else None
    if rd is None:
        return []
    p, dims = rd
    x_shape = concrete(g_s.shape(v.inputs[p]))
    rels = [next(iter(R.get(x, ())), None) for x in v.inputs]
    if x_shape is None or len(x_shape) != len(out_shape) or any(r is None for r in rels) or \
            any(x_shape[d] != out_shape[d] for d in range(len(out_shape)) if d not in dims):
        return []
    for e in [e for e in R.get(v.inputs[p], ()) if is_movement(e) and next(leaves(e), None) is not None][:4]:
        got = _rows_of(v, reg, g_d, rels[:p] + [e] + rels[p + 1:], p, dims, x_shape, out_shape, R)
        if got:
            return got
    return []


def _column_shards(v: Node, X: Term, rels: list[Term], p: int, R: dict, shape_of, reg) -> Term | None:
    """A matrix product (``OpDef.bilinear``, ``x @ w``) of rows X (over one rank's tensors) by a weight that is the
    ranks' column shards, ``concat(w_0, w_1, ..., dim=1)`` each over one rank's tensors: the concatenation of each shard's product with
    the rows over *that* rank's replicas (``ln1@1`` for ``ln1@0``), where a G_s tensor's relations already hold
    both the term over rank 0's replica and the same term over the other rank's (so the replicas are equal).
    None where that is not the case (then the product is taken with X as it is)."""
    op = reg.get(v.op)
    if op is None or op.bilinear is None or not op.bilinear.matmul(v.attrs) or p != 0 or len(rels) != 2:
        return None
    attrs = dict(v.attrs)
    w = rels[1]
    if not isinstance(w, App) or w.op != "core.concat" or w.attrd.get("dim") != 1:
        return None
    parts = flat_args(w)
    mine = {rank_of(n) for n in leaves(X)}
    if len(mine) != 1 or None in mine:
        return None
    (r0,) = mine
    out = []
    for part in parts:
        rs = {rank_of(n) for n in leaves(part)}
        if len(rs) != 1 or None in rs:
            return None
        (r,) = rs
        if r == r0:
            out.append(app(v.op, X, part, **attrs))
            continue
        names = {n: f"{base_name(n)}@{r}" for n in set(leaves(X))}
        Xr = rename_leaves(X, names)
        # the replicas are equal where some G_s tensor's relations show it (is_replica)
        proved = all(is_replica(R, n, m, shape_of, reg) for n, m in names.items())
        if not proved:
            return None
        out.append(app(v.op, Xr, part, **attrs))
    return app("core.concat", *out, dim=1) if len(out) > 1 else None


def _rows_of(v: Node, reg, g_d, rels: list[Term], p: int, dims, x_shape, out_shape,
             R: dict | None = None) -> list[tuple[Term, Term]]:
    """:func:`rows_through` for one relation ``rels[p]`` of the row input."""
    e, attrs = rels[p], dict(v.attrs)
    names = list(dict.fromkeys(leaves(e)))
    lab = labelled(sorted(names), g_d.shape)
    if lab is None:
        return []
    xr = _as_rows(term_eval(e, lab.__getitem__, reg), dims)
    if not xr.size:
        return []
    cands = [(Leaf(n), lab[n]) for n in names if lab[n].ndim == len(x_shape)]
    if len(x_shape) == 2 and len(dims) == 1 and dims[0] == 1:
        # matrix rows stored as one dim of a G_d tensor of another rank (hidden-major [H, S, B]: a row is a column
        # of H entries): that dim moved last, the others flattened in order -- as a dot contracting it reads them
        for n in names:
            L = lab[n]
            for k in range(L.ndim):
                if L.shape[k] != x_shape[1] or (L.ndim == 2 and k == 1):
                    continue
                rest = int(L.size // L.shape[k])
                if k == 0:
                    X = app("core.permute", app("core.reshape", Leaf(n), shape=(L.shape[0], rest)), dims=(1, 0))
                elif k == L.ndim - 1:
                    X = app("core.reshape", Leaf(n), shape=(rest, L.shape[k]))
                else:
                    continue
                cands.append((X, np.moveaxis(L, k, -1).reshape(rest, L.shape[k])))
    if len(names) > 1 and all(lab[n].ndim == len(x_shape) for n in names):
        for d in range(len(x_shape)):
            try:
                cands.append((app("core.concat", *(Leaf(n) for n in names), dim=d),
                              np.concatenate([lab[n] for n in names], axis=d)))
            except ValueError:
                continue
    out = []
    for X, xl in cands:
        if any(xl.shape[d] != x_shape[d] for d in dims):
            continue
        at = {tuple(r): i for i, r in reversed(list(enumerate(_as_rows(xl, dims).tolist())))}
        pi = [at.get(tuple(r)) for r in xr.tolist()]
        if any(i is None for i in pi):
            continue
        fx_shape = tuple(out_shape[d] if d in dims else xl.shape[d] for d in range(len(out_shape)))
        fx = (R is not None and _column_shards(v, X, rels, p, R, g_d.shape, reg)) or \
            app(v.op, *[X if i == p else r for i, r in enumerate(rels)], **attrs)
        whole = np.arange(int(np.prod(fx_shape, dtype=np.int64)), dtype=np.int64).reshape(fx_shape)
        picked = _as_rows(whole, dims)[np.asarray(pi, dtype=np.int64)]
        other = [d for d in range(len(out_shape)) if d not in dims]
        pos = np.transpose(picked.reshape([out_shape[d] for d in other] + [out_shape[d] for d in dims]),
                           np.argsort(other + list(dims)))
        t = layout(fx, fx_shape, pos)
        lhs = app(v.op, *rels, **attrs)
        out.extend((lhs, t) for t in ([t] if t is not None else chunks(pos, [whole], [fx])[:1]) if t != lhs)
        if out:
            break
    return out
