"""Propagation through G_d: labels of the relation's G_d tensors carried by G_d's own definitions wherever every
operator on the way provably moves data (core data movement, collectives that mean data movement, a
``data_movement`` op at constant indices, ``x + 0`` at a constant G_d provably computes), and the labelled
start shared by the label proofs of an operator's output (:func:`labelled_inputs`).
"""
from __future__ import annotations

import numpy as np

from ...ir.expr import Leaf, Term, leaves
from ...ir.graph import Node
from ...ir.semantics import term_eval
from ...ir.values import identities
from .layout import concrete, is_movement, labelled
from .replicas import replica_labels


def const_value(c: Term, reg) -> np.ndarray | None:
    """A constant term's value by the references (None where they cannot evaluate it)."""
    try:
        return term_eval(c, lambda name: None, reg)
    except Exception:  # noqa: BLE001 -- a constant the references cannot evaluate
        return None


MAX_PROPAGATED = 256  # G_d operators one label propagation may evaluate


class Propagated:
    """Labels of G_d tensors computed from labelled G_d tensors by G_d's own definitions, where every operator
    on the way moves data: core data movement and collectives whose meaning is data movement (all-gather,
    all-to-all, split), evaluated on the labels; a ``data_movement`` operator whose other inputs are constants
    (``const_of``), evaluated by :func:`copied_labels` (its reference on labels, checked on values). Anything else
    (a reduction, arithmetic, an input not labelled) leaves the tensor without labels."""

    def __init__(self, ctx, labels: dict[str, np.ndarray], const_of, const_labels: dict | None = None):
        self.ctx, self.reg, self.const_of = ctx, ctx.egraph.reg, const_of
        self.memo: dict[str, np.ndarray | None] = dict(labels)
        self.evaluated = 0
        self.rng = np.random.default_rng(0)
        self.const_labels = const_labels  # (given: a constant G_d tensor's entries labelled by value, see const_label)

    def get(self, t: str) -> np.ndarray | None:
        if t in self.memo:
            return self.memo[t]
        self.memo[t] = None
        g_d = self.ctx.g_d
        n = g_d.producer.get(t)
        if n is None or self.evaluated >= MAX_PROPAGATED:
            return None
        self.evaluated += 1
        term = g_d.node_terms(n)[n.outputs.index(t)]
        op = self.reg.get(n.op)
        got = None
        if not n.inputs and self.const_labels is not None and self.const_of is not None:
            c = self.const_of(t)
            v = const_value(c, self.reg) if c is not None else None
            got = const_label(v, self.const_labels) if v is not None else None
        elif is_movement(term) and all(self.get(leaf) is not None for leaf in set(leaves(term))):
            got = term_eval(term, self.memo.__getitem__, self.reg)
        elif op is not None and op.data_movement and len(n.outputs) == 1 and self.get(n.inputs[0]) is not None:
            consts = [self.const_of(i) for i in n.inputs[1:]]
            vals = [const_value(c, self.reg) if c is not None else None for c in consts]
            if all(x is not None for x in vals):
                got = copied_labels(op, vals, dict(n.attrs), self.memo[n.inputs[0]], self.rng)
        if got is None and op is not None and op.identity and len(n.outputs) == 1 and self.const_of is not None:
            got = self._through_identity(op, n, t)
        if got is None and op is not None and op.linear_groups(dict(n.attrs)) and len(n.outputs) == 1 and \
                self.const_of is not None:
            got = self._linear_move(op, n)
        self.memo[t] = got
        return got

    def _linear_move(self, op, n: Node) -> np.ndarray | None:
        """An op linear in one input (jointly with others that are constant here: ``index_add`` into zeros at a
        constant order) whose every output entry is one entry of that input -- a data movement, checked as
        :func:`copied_labels` checks one (its reference on labels and on random values at the same indices)."""
        vals = [self.const_of(i) for i in n.inputs]
        vals = [const_value(c, self.reg) if c is not None else None for c in vals]
        free = [k for k, v in enumerate(vals) if v is None]
        if len(free) != 1 or not any(free[0] in grp for grp in op.linear_groups(dict(n.attrs))):
            return None
        lab = self.get(n.inputs[free[0]])
        if lab is None:
            return None
        return copied_labels(op, [v for v in vals if v is not None], dict(n.attrs), lab, self.rng, at=free[0])

    def _through_identity(self, op, n: Node, t: str) -> np.ndarray | None:
        """``x + 0``, ``x * 1`` (``OpDef.identity``, fuzzed) where the constant is one G_d provably computes
        (``const_of``: a routing mask that a top-k over every token makes all ones): x's labels."""
        g_d = self.ctx.g_d
        for k, value in identities(op, dict(n.attrs)):
            other = [i for i in range(len(n.inputs)) if i != k]
            if len(other) != 1:
                continue
            x = n.inputs[other[0]]
            if g_d.shape(x) != g_d.shape(t) or g_d.tensors[x].dtype != g_d.tensors[t].dtype:
                continue
            c = self.const_of(n.inputs[k])
            val = const_value(c, self.reg) if c is not None else None
            if val is None or not np.all(np.asarray(val) == value):
                continue
            lab = self.get(x)
            if lab is not None:
                return lab
        return None


def copied_labels(op, arrays, attrs, labels: np.ndarray, rng, at: int = 0) -> np.ndarray | None:
    """``op``'s output on ``labels`` (input ``at``; ``arrays`` the others) if the op provably copies entries
    there: its reference on the labels, checked against its reference on random values of the same shapes at
    the same indices (an op that computes rather than copies is refused)."""
    def ins(x):
        return list(arrays[:at]) + [x] + list(arrays[at:])
    try:
        pos = np.asarray(op.ref(ins(np.arange(labels.size, dtype=np.int64).reshape(labels.shape)), attrs))
        vals = rng.standard_normal(labels.shape)
        want = np.asarray(op.ref(ins(vals), attrs), dtype=np.float64)
    except Exception:  # noqa: BLE001 -- not defined here: nothing is claimed
        return None
    if pos.dtype.kind == "f" and pos.size and np.all(pos == np.round(pos)) and np.abs(pos).max() < 2 ** 52:
        pos = pos.astype(np.int64)  # (labels added into a float base of zeros: checked on values below)
    if pos.shape != want.shape or pos.dtype.kind not in "iu":
        return None
    flat = vals.reshape(-1)
    if pos.size and (pos.min() < 0 or pos.max() >= flat.size or not np.array_equal(flat[pos], want)):
        return None
    return labels.reshape(-1)[pos]


def const_label(values: np.ndarray, table: dict) -> np.ndarray:
    """A constant's entries labelled by value (negative labels, one per distinct value in ``table``): equal values,
    one label, in both programs -- an entry of ``where(mask, scores, -30000)`` is then the same function of the
    same labels as XLA's ``select`` of its -30000 constant."""
    flat = [table.setdefault(float(x), -1 - len(table)) for x in np.asarray(values, dtype=np.float64).reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(np.shape(values))


def labelled_inputs(ctx, v: Node, R: dict, max_out: int, max_labels: int | None = None, const_of=None,
                     const_labels: dict | None = None):
    """The common start of the label searches for v's output: its concrete shape (1 to ``max_out`` entries),
    each input's first relation of data movement over G_d tensors, those tensors labelled (at most
    ``max_labels`` entries) and the inputs' labels; replicated copies of an input (other relations that are one
    tensor of its shape) get the same labels (equal data). A labelled tensor that G_d computes from other
    labelled ones by moving data holds their labels (:func:`_derived_labels`). None where any of that is
    missing."""
    out_shape = concrete(ctx.g_s.shape(v.outputs[0]))
    if out_shape is None or not 0 < int(np.prod(out_shape, dtype=np.int64)) <= max_out:
        return None
    rels, consts = [], {}
    for x in v.inputs:
        e = next((e for e in R.get(x, ()) if is_movement(e) and next(leaves(e), None) is not None), None)
        if e is None and const_labels is not None:  # (a constant input: its entries labelled by value)
            c = next((e for e in R.get(x, ()) if next(leaves(e), None) is None), None)
            val = const_value(c, ctx.egraph.reg) if c is not None else None
            if val is not None:
                consts[len(rels)] = const_label(val, const_labels)
                rels.append(c)
                continue
        if e is None:
            return None
        rels.append(e)
    lab = labelled(sorted({leaf for e in rels for leaf in leaves(e)}), ctx.g_d.shape)
    if lab is None or (max_labels is not None and sum(a.size for a in lab.values()) > max_labels):
        return None
    if const_of is not None and len(lab) > 1:
        _derived_labels(ctx, lab, const_of)
    ev = [consts[i] if i in consts else term_eval(e, lab.__getitem__, ctx.egraph.reg) for i, e in enumerate(rels)]
    for x, a in zip(v.inputs, ev):
        for e in R.get(x, ()):
            if isinstance(e, Leaf) and e.name not in lab and concrete(ctx.g_d.shape(e.name)) == a.shape:
                lab[e.name] = a
    replica_labels(ctx, R, lab)
    return out_shape, rels, lab, ev


def _derived_labels(ctx, lab: dict[str, np.ndarray], const_of) -> None:
    """Where a relation names both a G_d tensor and tensors it is moved from (an expert's routing weights as
    rows of the ranks' tensors before an all-to-all and rows of the all-gather after it), give the later one
    the labels G_d's definitions carry to it (:class:`Propagated`), in G_d's order: equal entries, one label --
    else a counterpart reading the later tensor would never meet the entries the relation took from the
    earlier ones. Labels only merge where G_d provably copies an entry, so nothing unequal is equated."""
    order = {n: k for k, node in enumerate(ctx.g_d.topo_order()) for n in node.outputs}
    for n in sorted(lab, key=lambda t: order.get(t, -1)):
        if n not in ctx.g_d.producer:
            continue
        got = _Partly(ctx, {k: a for k, a in lab.items() if k != n}, const_of).get(n)
        if got is not None and got.shape == lab[n].shape and (got >= 0).any():
            lab[n] = np.where(got >= 0, got, lab[n])  # (entries of unlabelled origin keep their own labels)


class _Partly(Propagated):
    """:class:`Propagated` where an entry moved from no labelled tensor is -1 (unknown) instead of the whole
    tensor going without labels: an all-gather whose one part comes from labelled tensors, the other from
    tensors the relation does not name."""

    def get(self, t: str) -> np.ndarray | None:
        got = super().get(t)
        if got is None:
            shp = concrete(self.ctx.g_d.shape(t))
            if shp is not None:
                got = self.memo[t] = np.full(shp, -1, dtype=np.int64)
        return got
