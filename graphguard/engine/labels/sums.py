"""Sums on labels: entries of G_d tensors as multisets of labelled entries (a sum across ranks joins them; a
``linear`` op into zeros at constant indices, checked at a random point, too). Equal multisets are equal
sums in real arithmetic: G_s outputs known over intermediate G_d tensors are carried to G_d's outputs
(``summed_outputs``), and two layouts of one sum compared (``same_entries``).
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import App, Leaf, Term, leaves
from ...ir.graph import Node
from ...ir.semantics import term_eval
from .layout import MOVES, is_movement, labelled, solve
from .propagate import MAX_PROPAGATED, const_value, copied_labels


class Multisets:
    """Sums of labelled entries (:class:`Sums`' tuples) as integer labels, one per distinct multiset."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return np.array([self.ids.setdefault(tuple(sorted(t)), len(self.ids)) for t in a.reshape(-1)],
                        dtype=np.int64).reshape(a.shape)


MAX_SUMMED = 1 << 18  # entries labelled by sums (object arrays: a tuple of labels each)


def _tuples(shape, fill=None) -> np.ndarray:
    """An object array of label tuples: ``fill(i)`` for entry i (flat), else empty (a zero)."""
    out = np.empty(shape, dtype=object)
    flat = out.reshape(-1)
    for i in range(flat.size):
        flat[i] = fill(i) if fill is not None else ()
    return out


def _sums_or_none(a) -> np.ndarray | None:
    """``a`` if it is an object array of label tuples (sums), else None: a reference that turned the tuples into
    numbers (an ``np.asarray`` of them) says nothing of sums."""
    if not isinstance(a, np.ndarray) or a.dtype != object or \
            any(not isinstance(e, tuple) or any(type(x) is not int for x in e) for e in a.reshape(-1)):
        return None
    return a


def _summands(names, shape_of) -> tuple[dict[str, np.ndarray], int] | None:
    """Each entry of the named tensors a label of its own, as a one-label sum (tuple); and the label count. None
    where a shape is not concrete or the entries pass MAX_SUMMED."""
    lab = labelled(names, shape_of)
    count = sum(a.size for a in lab.values()) if lab is not None else 0
    if lab is None or count > MAX_SUMMED:
        return None
    return {n: _tuples(a.shape, lambda i, flat=a.reshape(-1): (int(flat[i]),)) for n, a in lab.items()}, count


class Sums:
    """Entries of G_d tensors as sums of labelled entries: each entry a tuple of labels (a multiset; empty for
    a zero), computed by G_d's own definitions from the labelled tensors. Data movement and collectives
    (their meanings: concatenations, slices, sums across ranks) act on the tuples by the core references (a sum
    joins two tuples), and so does a ``data_movement`` operator at constant indices (:func:`copied_labels`); an
    operator declared ``linear`` in its non-constant inputs, whose constant inputs are
    indices or zeros, is evaluated by its reference on the tuples (``scatter_add`` into zeros joins the rows
    sent to one place) and the result checked at a random point: each label a random value, the reference on
    the values must equal the sums the tuples say. Anything else leaves the tensor without sums. Two entries
    with the same multiset of labels are equal (real arithmetic, as the sum lemmas state)."""

    def __init__(self, ctx, names, const_of):
        self.ctx, self.reg, self.const_of = ctx, ctx.egraph.reg, const_of
        self.rng = np.random.default_rng(0)
        got = _summands(names, ctx.g_d.shape)
        self.memo: dict[str, np.ndarray | None] = got[0] if got is not None else {}
        self.ok = bool(self.memo)
        self.point = self.rng.standard_normal(got[1] if got is not None else 0)
        self.evaluated = 0

    def value(self, a: np.ndarray) -> np.ndarray:
        """The sums' values at the random point."""
        flat = np.array([sum(self.point[list(t)]) if t else 0.0 for t in a.reshape(-1)], dtype=np.float64)
        return flat.reshape(a.shape)

    def eval(self, t: Term) -> np.ndarray | None:
        try:
            return _sums_or_none(term_eval(t, self.memo.__getitem__, self.reg))
        except Exception:  # noqa: BLE001 -- an op whose reference does not take tuples
            return None

    def get(self, t: str) -> np.ndarray | None:
        if t in self.memo:
            return self.memo[t]
        self.memo[t] = None
        n = self.ctx.g_d.producer.get(t)
        if n is None or self.evaluated >= MAX_PROPAGATED:
            return None
        self.evaluated += 1
        term = self.ctx.g_d.node_terms(n)[n.outputs.index(t)]
        op = self.reg.get(n.op)
        got = None
        if _summing(term) and all(self.get(leaf) is not None for leaf in set(leaves(term))):
            got = self.eval(term)
        elif op is not None and op.data_movement and len(n.outputs) == 1 and self.get(n.inputs[0]) is not None:
            vals = [self.const_of(i) for i in n.inputs[1:]]  # (at constant indices: as Propagated moves labels)
            vals = [const_value(c, self.reg) if c is not None else None for c in vals]
            if all(x is not None for x in vals):
                got = _sums_or_none(copied_labels(op, vals, dict(n.attrs), self.memo[n.inputs[0]], self.rng))
        if got is None and op is not None and op.linear_groups(dict(n.attrs)) and len(n.outputs) == 1:
            got = self._linear(n, op)
        self.memo[t] = got
        return got

    def _linear(self, n: Node, op) -> np.ndarray | None:
        ins, vals, lin = [], [], set()
        for i, x in enumerate(n.inputs):
            c = self.const_of(x)
            v = const_value(c, self.reg) if c is not None else None
            if v is not None and (np.asarray(v).dtype.kind in "iub" or not np.any(v)):
                ins.append(_tuples(np.shape(v)) if np.asarray(v).dtype.kind == "f" else np.asarray(v))
                vals.append(np.asarray(v))
                continue
            a = self.get(x)
            if a is None:
                return None
            ins.append(a)
            vals.append(self.value(a))
            lin.add(i)
        if not lin or not any(lin <= set(g) for g in op.linear_groups(dict(n.attrs))):
            return None
        try:
            got = np.asarray(op.ref(ins, dict(n.attrs)))
            want = np.asarray(op.ref(vals, dict(n.attrs)), dtype=np.float64)
        except Exception:  # noqa: BLE001
            return None
        if got.shape != want.shape or _sums_or_none(got) is None:
            return None
        return got if np.allclose(self.value(got), want, rtol=1e-9, atol=1e-9) else None


def _summing(t: Term) -> bool:
    return isinstance(t, Leaf) or (isinstance(t, App) and (t.op in MOVES or t.op == "core.sum")
                                   and all(_summing(a) for a in t.args))


def is_summed(t: Term) -> bool:
    """A clean term with a sum across ranks in it (data movement and sums only)."""
    return _summing(t) and not is_movement(t) and next(leaves(t), None) is not None


def summed_outputs(ctx, e: Term, outputs: list[str], const_of) -> list[Term]:
    """Terms over G_d outputs equal to ``e`` (a clean term of data movement and sums over other G_d tensors):
    both sides as sums of labelled entries (:class:`Sums`), every distinct multiset of labels a label of its
    own, then ``solve`` (the ranks' outputs holding e's entries in their layout)."""
    if not _summing(e) or next(leaves(e), None) is None:
        return []
    sums = Sums(ctx, sorted(set(leaves(e))), const_of)
    if not sums.ok:
        return []
    xs = sums.eval(e)
    if xs is None:
        return []
    key = Multisets()
    x = key(xs)
    ys, names = [], []
    for o in outputs:
        a = sums.get(o)
        if a is not None and a.size:
            ys.append(key(a))
            names.append(o)
    if not ys or not set(x.reshape(-1).tolist()) <= {i for y in ys for i in y.reshape(-1).tolist()}:
        return []
    return solve(x, ys, [Leaf(o) for o in names], [tuple(y.shape) for y in ys])



def same_entries(a: Term, b: Term, shape_of, reg) -> bool:
    """Whether two clean terms of data movement and sums over the same tensors hold the same entries: each
    entry of those tensors a label, both terms evaluated on multisets of labels (a sum joins them) and
    compared entry by entry -- two layouts of one concatenation written differently
    (``permute(reshape(concat(a, b, c, d)))`` and ``concat(concat(a, b), concat(c, d), dim=1)``)."""
    if not (_summing(a) and _summing(b)) or set(leaves(a)) != set(leaves(b)) or next(leaves(a), None) is None:
        return False
    got = _summands(sorted(set(leaves(a))), shape_of)
    if got is None:
        return False
    try:
        xa, xb = (term_eval(t, got[0].__getitem__, reg) for t in (a, b))
    except Exception:  # noqa: BLE001 -- a term the references cannot evaluate on labels: not shown equal
        return False
    key = Multisets()
    return xa.shape == xb.shape and np.array_equal(key(xa), key(xb))
