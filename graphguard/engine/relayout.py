"""Layouts proven by index maps: a G_s input known as data movement over G_d tensors, written again over the
tensors that the G_d counterparts of its operator read.

A term of data-movement ops only (``concat``, ``slice``, ``permute``, ``reshape``, ``identity``) copies entries
of its leaves and never looks at their values. Evaluated with every entry of every leaf labelled by its own
integer, it says which entry lands where; two such terms over the same leaves are equal for all values of
the leaves exactly when their label arrays are equal. An equality found here is therefore a theorem of the
concrete shapes (none is tried where a shape is symbolic), checked by evaluation, not a lemma instance.

It is asked where lemmas alone find no clean expression for an operator's outputs: the operator's input is
related in one layout (an expert-major concatenation of the ranks' chunks before an all-to-all) while each
rank's copy of the operator reads another (the rows that all-to-all delivered). ``relayouts`` searches, for
each input of the G_s operator, a concatenation along one dim of the ranks' inputs -- each reshaped and
permuted -- or one rank's input alone (replicated) whose labels equal the input's.
"""
from __future__ import annotations

import numpy as np

from ..ir.expr import App, Leaf, Term, app, base_name, leaves, rank_of
from ..ir.graph import Node
from ..ir.semantics import term_eval

MOVES = frozenset({"core.concat", "core.slice", "core.permute", "core.reshape", "core.identity"})
MAX_ENTRIES = 1 << 20  # labels evaluated per problem (the operator's input and the ranks' tensors together)


def is_movement(t: Term) -> bool:
    return isinstance(t, Leaf) or (isinstance(t, App) and t.op in MOVES and all(is_movement(a) for a in t.args))


def _concrete(shape) -> tuple[int, ...] | None:
    return tuple(shape) if all(type(d) is int for d in shape) else None


def labelled(names, shape_of) -> dict[str, np.ndarray] | None:
    """Every entry of every named tensor its own integer (None where a shape is symbolic or too big)."""
    out, start = {}, 0
    for n in names:
        shp = _concrete(shape_of(n))
        if shp is None:
            return None
        k = int(np.prod(shp, dtype=np.int64))
        if start + k > MAX_ENTRIES:
            return None
        out[n] = np.arange(start, start + k, dtype=np.int64).reshape(shp)
        start += k
    return out


def _digits(p: np.ndarray) -> list[tuple[int, int]] | None:
    """``p`` (flat positions, x's row-major order) as mixed-radix digits, innermost first: [(radix, stride)] with
    ``p[i] = sum(digit_j(i) * stride_j)``; maximal runs of one stride are one digit. None where p is not so."""
    n, block, out = p.size, 1, []
    if p[0] != 0:
        return None
    while block < n:
        stride = int(p[block])
        if stride <= 0:
            return None
        r = 1
        head = p[:block]
        while block * (r + 1) <= n and np.array_equal(p[block * r:block * (r + 1)], head + r * stride):
            r += 1
        if r == 1 or n % (block * r):
            return None
        out.append((r, stride))
        block *= r
    return out


def layout(y: Term, y_shape: tuple[int, ...], pos: np.ndarray) -> Term | None:
    """A term ``L(y)`` (reshape, permute, reshape) whose entry at each index is ``y.flatten()[pos[index]]``, or
    None where ``pos`` is not such a layout. Any permutation of the digits of a mixed-radix reading of y's
    entries is one: x's flat index is split into digits (innermost first) whose strides in y, sorted, are a
    row-major shape of y; y is reshaped to that shape, its dims permuted into x's digit order, reshaped to x."""
    total = int(np.prod(y_shape, dtype=np.int64))
    if pos.size != total or pos.size == 0:
        return None
    if total == 1:
        return y if tuple(y_shape) == tuple(pos.shape) else app("core.reshape", y, shape=tuple(int(s) for s in pos.shape))
    digits = _digits(pos.reshape(-1))
    if digits is None:
        return None
    by_stride = sorted(range(len(digits)), key=lambda j: digits[j][1])  # y's dims, innermost first
    expect = 1
    for j in by_stride:
        if digits[j][1] != expect:
            return None
        expect *= digits[j][0]
    if expect != total:
        return None
    y_dims = list(reversed(by_stride))  # y's row-major shape, outermost first, as digit ids
    x_dims = list(reversed(range(len(digits))))  # x's digit order, outermost first
    perm = [y_dims.index(j) for j in x_dims]
    if perm == sorted(perm):  # the same order: a view
        return y if tuple(y_shape) == tuple(pos.shape) else app("core.reshape", y, shape=tuple(int(s) for s in pos.shape))
    t, shp = y, tuple(y_shape)
    src = tuple(digits[j][0] for j in y_dims)
    if src != shp:
        t, shp = app("core.reshape", t, shape=src), src
    t = app("core.permute", t, dims=tuple(perm))
    shp = tuple(shp[q] for q in perm)
    if shp != tuple(pos.shape):
        t = app("core.reshape", t, shape=tuple(int(s) for s in pos.shape))
    return t


def _positions(chunk: np.ndarray, where: dict[int, tuple[int, int]]) -> tuple[int, np.ndarray] | None:
    """The one tensor (index) holding every label of ``chunk`` and the flat positions of those labels in it."""
    flat = chunk.reshape(-1)
    if flat.size == 0:
        return None
    owner = where.get(int(flat[0]))
    if owner is None:
        return None
    got = [where.get(int(x)) for x in flat]
    if any(g is None or g[0] != owner[0] for g in got):
        return None
    return owner[0], np.array([g[1] for g in got], dtype=np.int64).reshape(chunk.shape)


MAX_CHUNKS = 64


def chunks(x: np.ndarray, ys: list[np.ndarray], y_terms: list[Term]) -> list[Term]:
    """``x`` as a concatenation along one dim of slices of the ranks' tensors along the same dim, the other dims
    as they are: rows of several ranks interleaved (tokens of data-parallel ranks merged with a sequence-parallel
    rank's). Consecutive rows of one tensor are one slice; a whole tensor stands for itself."""
    out = []
    for d in range(x.ndim):
        rest = x.shape[:d] + x.shape[d + 1:]
        cand = [i for i, y in enumerate(ys) if y.ndim == x.ndim and y.shape[:d] + y.shape[d + 1:] == rest]
        if not cand or x.shape[d] == 0:
            continue
        row_of = {}  # the label at the first entry of each row of a candidate -> (tensor, row)
        for i in cand:
            first = np.moveaxis(ys[i], d, 0).reshape(ys[i].shape[d], -1)[:, :1]
            for j, lab in enumerate(first[:, 0].tolist()):
                row_of.setdefault(lab, (i, j))
        rows = np.moveaxis(x, d, 0).reshape(x.shape[d], -1)
        runs = []
        for k in range(x.shape[d]):
            hit = row_of.get(int(rows[k, 0])) if rows.shape[1] else None
            if hit is None:
                break
            i, j = hit
            if not np.array_equal(np.moveaxis(ys[i], d, 0).reshape(ys[i].shape[d], -1)[j], rows[k]):
                break
            if runs and runs[-1][0] == i and runs[-1][2] == j:
                runs[-1][2] = j + 1
            else:
                runs.append([i, j, j + 1])
        else:
            if len(runs) > MAX_CHUNKS or len(runs) < 2:
                continue
            parts = [y_terms[i] if (a, b) == (0, ys[i].shape[d]) else app("core.slice", y_terms[i], dim=d, start=a, end=b)
                     for i, a, b in runs]
            out.append(app("core.concat", *parts, dim=d))
    return out


def solve(x: np.ndarray, ys: list[np.ndarray], y_terms: list[Term], y_shapes: list[tuple]) -> list[Term]:
    """Terms over ``y_terms`` equal to ``x`` (label arrays): ``concat(L_0(y_a), L_1(y_b), ..., dim=d)`` with
    each ``y`` used once, else the ranks' rows interleaved (:func:`chunks`) or a layout of their concatenation;
    and ``L(y)`` or y's rows reordered for each y that holds all of x (replicated copies)."""
    where: dict[int, tuple[int, int]] = {}
    for i, y in enumerate(ys):
        flat = y.reshape(-1)
        if len(np.unique(flat)) != flat.size:
            continue  # an entry copied twice (an expand): no unique position
        for p, lab in enumerate(flat.tolist()):
            where.setdefault(lab, (i, p))
    out = []
    w = len(ys)
    for d in range(x.ndim):
        if w < 2 or x.shape[d] % w or x.shape[d] == 0:
            continue
        parts, used = [], set()
        for chunk in np.split(x, w, axis=d):
            hit = _positions(chunk, where)
            if hit is None or hit[0] in used:
                break
            t = layout(y_terms[hit[0]], y_shapes[hit[0]], hit[1])
            if t is None:
                break
            used.add(hit[0])
            parts.append(t)
        else:
            out.append(app("core.concat", *parts, dim=d))
    if not out and w > 1:
        out += [t for t in chunks(x, ys, y_terms) if len(set(leaves(t))) > 1]  # (one tensor's rows: below)
        for d in range(ys[0].ndim if not out else 0):  # x a layout of the ranks' tensors concatenated (chunks interleaved)
            if any(y.ndim != ys[0].ndim or y.shape[:d] + y.shape[d + 1:] != ys[0].shape[:d] + ys[0].shape[d + 1:]
                   for y in ys):
                continue
            whole = np.concatenate(ys, axis=d)
            if whole.size != x.size or len(np.unique(whole)) != whole.size:
                break
            at = {lab: p for p, lab in enumerate(whole.reshape(-1).tolist())}
            if any(int(lab) not in at for lab in x.reshape(-1)[:1]):
                break
            try:
                pos = np.array([at[int(lab)] for lab in x.reshape(-1)], dtype=np.int64).reshape(x.shape)
            except KeyError:
                break
            t = layout(app("core.concat", *y_terms, dim=d), whole.shape, pos)
            if t is not None:
                out.append(t)
                break
    for i in range(w):  # one tensor holding all of x (replicated copies: each of them)
        flat = ys[i].reshape(-1)
        own = {lab: (i, p) for p, lab in enumerate(flat.tolist())} if len(np.unique(flat)) == flat.size else {}
        hit = _positions(x, own)
        t = layout(y_terms[i], y_shapes[i], hit[1]) if hit is not None else None
        # ... and its rows in another order as slices (what row-wise lemmas carry through an operator)
        for t in ([t] if t is not None else []) + chunks(x, [ys[i]], [y_terms[i]])[:1]:
            if t not in out:
                out.append(t)
    return out


def _reach(g_d, y: str, known: set[str], limit: int = 6) -> list[Node] | None:
    """The data-movement operators (one input each) from a known tensor down to ``y``, or None."""
    chain, t = [], y
    while t not in known:
        n = g_d.producer.get(t)
        if n is None or n.op not in MOVES or len(n.inputs) != 1 or len(chain) >= limit:
            return None
        chain.append(n)
        t = n.inputs[0]
    return chain


def _counterparts(g_d, v: Node, keep=lambda n: True) -> list[list[Node]]:
    """v's G_d counterparts: operators of v's op and arity, grouped by output name across ranks (rank order)."""
    groups: dict[str, list[Node]] = {}
    for n in g_d.nodes:
        if n.op == v.op and len(n.inputs) == len(v.inputs) and len(n.outputs) == len(v.outputs) and keep(n):
            groups.setdefault(base_name(n.outputs[0]), []).append(n)
    return [sorted(ns, key=lambda n: rank_of(n.outputs[0]) or 0) for ns in groups.values()]


def _reached(ctx, snap, v: Node, known: set[str], ks, grow):
    """The counterparts one of whose inputs ``ks`` is a known tensor or a view of one (a few data-movement
    operators down), and the snapshot with those views' G_d definitions added (``grow``)."""
    g_d, facts = ctx.g_d, {}

    def keep(n):
        chains = [_reach(g_d, n.inputs[k], known) for k in ks]
        for m in (m for c in chains for m in c or ()):
            facts[m.name] = [(Leaf(o), t) for o, t in zip(m.outputs, g_d.node_terms(m))]
        return any(c is not None for c in chains)
    groups = _counterparts(g_d, v, keep)
    if facts:
        snap = grow([f for fs in facts.values() for f in fs])
    return groups, snap


def _value(c: Term, reg) -> np.ndarray | None:
    """A constant term's value by the references (None where they cannot evaluate it)."""
    try:
        return term_eval(c, lambda name: None, reg)
    except Exception:  # noqa: BLE001 -- a constant the references cannot evaluate
        return None


def relayouts(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of=None) -> list[tuple[Term, Term]]:
    """Equalities (the relation of an input of v, the same data over the inputs of v's G_d counterparts)
    proven by labelled evaluation. The counterparts are G_d operators of v's op, grouped by output name across
    ranks, whose input is an explored tensor or a view of one (a few data-movement operators down: their G_d
    definitions are added by ``grow(facts)``, which returns the saturated snapshot)."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    known = set(explored) | {leaf for x in v.inputs for e in R.get(x, ()) for leaf in leaves(e)}
    groups, snap = _reached(ctx, snap, v, known, range(len(v.inputs)), grow)
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
                    shapes = [_concrete(g_d.shape(y)) for y, _ in y_terms]
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


MAX_PROPAGATED = 256  # G_d operators one label propagation may evaluate


class Propagated:
    """Labels of G_d tensors computed from labelled G_d tensors by G_d's own definitions, where every operator
    on the way moves data: core data movement and collectives whose meaning is data movement (all-gather,
    all-to-all, split), evaluated on the labels; a ``data_movement`` operator whose other inputs are constants
    (``const_of``), evaluated by :func:`_moves` (its reference on labels, checked on values). Anything else
    (a reduction, arithmetic, an input not labelled) leaves the tensor without labels."""

    def __init__(self, ctx, labels: dict[str, np.ndarray], const_of):
        self.ctx, self.reg, self.const_of = ctx, ctx.egraph.reg, const_of
        self.memo: dict[str, np.ndarray | None] = dict(labels)
        self.evaluated = 0
        self.rng = np.random.default_rng(0)

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
        if is_movement(term) and all(self.get(leaf) is not None for leaf in set(leaves(term))):
            got = term_eval(term, self.memo.__getitem__, self.reg)
        elif op is not None and op.data_movement and len(n.outputs) == 1 and self.get(n.inputs[0]) is not None:
            consts = [self.const_of(i) for i in n.inputs[1:]]
            vals = [_value(c, self.reg) if c is not None else None for c in consts]
            if all(x is not None for x in vals):
                got = _moves(op, vals, dict(n.attrs), self.memo[n.inputs[0]], self.rng)
        self.memo[t] = got
        return got


def _propagated(ctx, v: Node, R: dict, grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for an input of v over the inputs of its G_d counterparts, whose labels G_d's definitions
    compute from the relation's tensors (:class:`Propagated`): the counterparts' inputs need not be explored
    (an expert's rows after an all-to-all, an all-gather and a re-sort by expert). The counterparts' own G_d
    definitions are added (``grow``), so that v's output meets theirs."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    groups = _counterparts(g_d, v)
    out, used = [], []
    for k, x in enumerate(v.inputs):
        for e in [e for e in R.get(x, ()) if is_movement(e)][:2]:
            base = sorted(set(leaves(e)))
            lab = labelled(base, g_d.shape)
            if lab is None:
                continue
            prop = Propagated(ctx, lab, const_of)
            xs = term_eval(e, lab.__getitem__, reg)
            for nodes in groups:
                ys = [prop.get(n.inputs[k]) for n in nodes]
                if any(y is None for y in ys) or all(n.inputs[k] in lab for n in nodes):
                    continue
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


def _moves(op, arrays, attrs, labels: np.ndarray, rng) -> np.ndarray | None:
    """``op``'s output on ``labels`` (input 0) if the op provably copies entries there: its reference on the
    labels, checked against its reference on random values of the same shapes at the same indices (an op that
    computes rather than copies is refused)."""
    try:
        pos = np.asarray(op.ref([np.arange(labels.size, dtype=np.int64).reshape(labels.shape)] + list(arrays), attrs))
        vals = rng.standard_normal(labels.shape)
        want = np.asarray(op.ref([vals] + list(arrays), attrs), dtype=np.float64)
    except Exception:  # noqa: BLE001 -- not defined here: nothing is claimed
        return None
    if pos.shape != want.shape or pos.dtype.kind not in "iu":
        return None
    flat = vals.reshape(-1)
    if pos.size and (pos.min() < 0 or pos.max() >= flat.size or not np.array_equal(flat[pos], want)):
        return None
    return labels.reshape(-1)[pos]


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
    groups, snap = _reached(ctx, snap, v, known, [0], grow)
    if not groups:
        return []
    rng = np.random.default_rng(0)
    idx_vals = [_value(c, reg) for c in idx_s]
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
                    xs = _moves(op, idx_vals, dict(v.attrs), term_eval(e, lab.__getitem__, reg), rng)
                    ys = [_moves(op, [_value(c, reg) for c in cs], dict(n.attrs),
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
