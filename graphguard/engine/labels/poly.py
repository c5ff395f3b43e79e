"""Polynomials on labels: operators that only add and multiply evaluated symbolically on labelled entries
(exact rational coefficients, checked at a random point); v's output as the sum over ranks of a layout of
each rank's partial result (``sum_outputs``: a contraction dim the ranks split in any interleaving).
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from ...ir.expr import Leaf, Term, app
from ...ir.graph import Node
from .counterparts import MAX_COUNTERPARTS, counterparts, named_first
from .layout import concrete, laid_out, summed_layouts
from .propagate import Propagated, labelled_inputs


# -- polynomial labels: operators that add and multiply, related as sums over the ranks ---------------------------

# (HF Mixtral's experts' backward bmm at TP 4 -- [32, 128, 192] x [32, 192, 1], 8 pieces -- needs 1 << 21 and
# 1 << 16: its verify then peaks at 2.0 GB and takes 47 s; at 1 << 18 / 1 << 14 it was refused)
MAX_MONOMIALS = 1 << 21  # monomials one polynomial evaluation may hold (estimated first: 8 x that)
MAX_POLY_ENTRIES = 1 << 16  # output entries of one polynomial problem (Python objects; its labelled entries: 32 x)




class Poly:
    """A polynomial in labelled entries with exact rational coefficients: ``{monomial: coefficient}``, a
    monomial a sorted tuple of labels. NumPy's object arrays of these evaluate the references of operators
    that only add and multiply (``mm``, ``bmm``, ``mul``, ``sum``) symbolically; anything else (a comparison,
    a cast, a transcendental function) raises."""
    __slots__ = ("t",)

    def __init__(self, t):
        self.t = t

    @staticmethod
    def _of(x):
        if isinstance(x, Poly):
            return x
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, float, Fraction, np.integer, np.floating)):
            raise TypeError(f"not a polynomial: {type(x).__name__}")
        c = Fraction(float(x)) if isinstance(x, (float, np.floating)) else Fraction(int(x))
        return Poly({(): c} if c else {})

    @staticmethod
    def _acc(t: dict, m: tuple, c) -> None:
        """Add c to monomial m's coefficient in t, dropping it where it cancels."""
        s = t.get(m, 0) + c
        if s:
            t[m] = s
        else:
            t.pop(m, None)

    def __add__(self, o):
        t = dict(self.t)
        for m, c in Poly._of(o).t.items():
            Poly._acc(t, m, c)
        return Poly(t)

    __radd__ = __add__

    def __neg__(self):
        return Poly({m: -c for m, c in self.t.items()})

    def __sub__(self, o):
        return self + (-Poly._of(o))

    def __rsub__(self, o):
        return Poly._of(o) + (-self)

    def __mul__(self, o):
        o = Poly._of(o)
        t: dict = {}
        for m1, c1 in self.t.items():
            for m2, c2 in o.t.items():
                Poly._acc(t, tuple(sorted(m1 + m2)), c1 * c2)
        return Poly(t)

    __rmul__ = __mul__

    def value(self, point: np.ndarray) -> float:
        return float(sum(float(c) * float(np.prod(point[list(m)])) for m, c in self.t.items()))


def _polys(labels: np.ndarray) -> np.ndarray:
    out = np.empty(labels.shape, dtype=object)
    flat, lab = out.reshape(-1), labels.reshape(-1)
    for i in range(flat.size):
        flat[i] = Poly({(int(lab[i]),): Fraction(1)})
    return out


def _poly_values(a: np.ndarray, point: np.ndarray) -> np.ndarray:
    return np.array([p.value(point) if isinstance(p, Poly) else np.nan for p in a.reshape(-1)],
                    dtype=np.float64).reshape(a.shape)


def _poly_op(op, ins: list[np.ndarray], attrs: dict, point: np.ndarray) -> np.ndarray | None:
    """``op``'s reference on polynomial arrays, checked at a random point (each label a random value: the
    reference on the values must equal the polynomials' values), else None."""
    try:
        with np.errstate(all="ignore"):
            got = np.asarray(op.ref(ins, attrs), dtype=object)
            want = np.asarray(op.ref([_poly_values(a, point) for a in ins], attrs), dtype=np.float64)
    except Exception:  # noqa: BLE001 -- not an operator of additions and products
        return None
    if got.shape != want.shape or any(not isinstance(p, Poly) for p in got.reshape(-1)):
        return None
    if sum(len(p.t) for p in got.reshape(-1)) > MAX_MONOMIALS:
        return None
    have = _poly_values(got, point)
    scale = max(1.0, float(np.max(np.abs(want))) if want.size else 1.0)
    return got if np.allclose(have, want, rtol=1e-9, atol=1e-9 * scale) else None


def sum_outputs(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for the output of a G_s operator that adds and multiplies (its reference evaluates on
    polynomials: ``bmm``, ``mm``, ``mul``, ...) whose inputs are related as data movement, and whose G_d
    counterparts (same op and attributes) each compute part of it -- a contraction whose dim the ranks split in
    any interleaving (a packed gate/up projection at TP 4). Every entry of the relation's G_d tensors is a
    variable; v's output and the counterparts' outputs (their inputs' labels carried through G_d's definitions,
    :class:`Propagated`) are polynomials in them. Where each entry of v is the sum of one entry of each of the
    same counterparts, the equality is v = sum over those counterparts of a layout of each (``layout``)."""
    op = ctx.egraph.reg.get(v.op)
    g_d = ctx.g_d
    if op is None or len(v.outputs) != 1 or not v.inputs:
        return []
    got = labelled_inputs(ctx, v, R, MAX_POLY_ENTRIES, 32 * MAX_POLY_ENTRIES)
    if got is None:
        return []
    out_shape, rels, lab, ev = got
    # (the monomials a product of two inputs holds, estimated before any is built: a matmul's out x k)
    n_out = int(np.prod(out_shape, dtype=np.int64))
    if n_out * np.sqrt(float(np.prod([max(a.size, 1) for a in ev[:2]])) / n_out) > 8 * MAX_MONOMIALS:
        return []
    point = np.random.default_rng(0).standard_normal(1 + max(int(a.max()) for a in lab.values() if a.size))
    attrs = dict(v.attrs)
    xs = _poly_op(op, [_polys(a) for a in ev], attrs, point)
    if xs is None or xs.shape != out_shape:
        return []
    lhs = app(v.op, *rels, **attrs)
    everyone: tuple[list, list] = ([], [])
    prop = Propagated(ctx, lab, const_of)  # (the group named as v first: its evaluations are counted)
    for group in named_first(counterparts(g_d, v), v):  # (each group alone first: another operator may
        nodes, zs = [], []  # compute the same products, a recomputation)
        for n in group:
            if dict(n.attrs) != attrs or len(everyone[0]) >= MAX_COUNTERPARTS:
                continue
            ins = [prop.get(t) for t in n.inputs]
            if any(a is None for a in ins):
                continue
            z = _poly_op(op, [_polys(a) for a in ins], dict(n.attrs), point)
            if z is not None and z.shape == concrete(g_d.shape(n.outputs[0])):
                nodes.append(n)
                zs.append(z)
        got = _sum_of(lhs, xs, nodes, zs, out_shape) if nodes else []
        if got:
            return got
        everyone[0].extend(nodes)
        everyone[1].extend(zs)
    return _sum_of(lhs, xs, *everyone, out_shape) if everyone[0] else []


def _sum_of(lhs: Term, xs: np.ndarray, nodes: list[Node], zs: list[np.ndarray], out_shape) -> list[tuple[Term, Term]]:
    """:func:`sum_outputs`' match of v's polynomials ``xs`` to sums of the counterparts' entries ``zs``."""
    where: dict[tuple, tuple[int, int]] = {}  # a monomial -> the first counterpart entry holding it
    for k, z in enumerate(zs):
        for q, p in enumerate(z.reshape(-1)):
            for m in p.t:
                where.setdefault(m, (k, q))
    parts = []  # per entry of v: its counterpart entries, in counterpart order
    for p in xs.reshape(-1):
        rest, got = Poly(dict(p.t)), []
        while rest.t:
            hit = where.get(next(iter(rest.t)))
            if hit is None or any(k == hit[0] for k, _ in got):
                return []
            got.append(hit)
            rest = rest - zs[hit[0]].reshape(-1)[hit[1]]
        parts.append(sorted(got))
    names, shapes = [Leaf(n.outputs[0]) for n in nodes], [tuple(z.shape) for z in zs]
    if parts and all(len(g) == 1 for g in parts):  # each entry one counterpart's: the ranks' outputs laid out
        which = np.array([g[0][0] for g in parts], dtype=np.int64)
        at = np.array([g[0][1] for g in parts], dtype=np.int64)
        return [(lhs, t) for t in laid_out(which, at, names, shapes, out_shape)]
    t = summed_layouts(parts, names, shapes, out_shape)
    return [(lhs, t)] if t is not None else []
