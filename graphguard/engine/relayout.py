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

The same evaluation on labels proves an operator's output directly where its inputs are related in layouts
its G_d counterparts do not share: ``movement_first`` (a transpose or view of sharded inputs, asked before the
search: the ranks' own transposes and views), ``moved_outputs`` (data movement at constant indices), ``elementwise_outputs``
(an elementwise operator: an output entry is f of its inputs' labels), ``rows_through`` (a row-wise operator --
``OpDef.rows`` or ``RowWise`` -- of rows re-sorted: the same rows of the operator of the ranks' tensors). With
entries as sums of labels (:class:`Sums`: reductions across ranks, ``scatter_add`` into zeros) G_s outputs
known over intermediate G_d tensors are carried to G_d's outputs (``summed_outputs``); with entries as
polynomials (:class:`Poly`: references that add and multiply, checked at a random point) an operator is the
sum over ranks of their products (``sum_outputs``: a contraction dim the ranks split in any interleaving).
Equal labels, multisets or polynomials mean equal values in real arithmetic, the model every lemma states.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction

import itertools

import numpy as np

from ..ir.expr import AConst, App, Leaf, PVar, Term, app, base_name, flat_args, leaves, rank_of, size, substitute
from ..ir.graph import Node
from ..ir.semantics import term_eval
from .normalise import identities

MOVES = frozenset({"core.concat", "core.slice", "core.permute", "core.reshape", "core.identity"})
MAX_ENTRIES = 1 << 20  # labels evaluated per problem (the operator's input and the ranks' tensors together)


def is_movement(t: Term) -> bool:
    return isinstance(t, Leaf) or (isinstance(t, App) and t.op in MOVES and all(is_movement(a) for a in t.args))


def _concrete(shape) -> tuple[int, ...] | None:
    return tuple(shape) if all(type(d) is int for d in shape) else None


def labelled(names, shape_of, limit: int = MAX_ENTRIES) -> dict[str, np.ndarray] | None:
    """Every entry of every named tensor its own integer (None where a shape is symbolic or too big)."""
    out, start = {}, 0
    for n in names:
        shp = _concrete(shape_of(n))
        if shp is None:
            return None
        k = int(np.prod(shp, dtype=np.int64))
        if start + k > limit:
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


def _positions_in(chunk: np.ndarray, i: int, pos: dict[int, int]) -> tuple[int, np.ndarray] | None:
    """(i, the flat positions of ``chunk``'s labels in tensor i) where it holds them all, else None."""
    got = [pos.get(int(x)) for x in chunk.reshape(-1)]
    if not got or any(g is None for g in got):
        return None
    return i, np.array(got, dtype=np.int64).reshape(chunk.shape)


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


MAX_PERMUTED_RANK = 6  # permutations tried per part in _permuted_parts (6! = 720)


def _dims_permuted(y: np.ndarray, c: np.ndarray) -> tuple[int, ...] | None:
    """The permutation p of y's dims with ``y.transpose(p) == c`` (labels), or None."""
    if y.ndim != c.ndim or y.ndim > MAX_PERMUTED_RANK:
        return None
    return next((p for p in itertools.permutations(range(y.ndim))
                 if tuple(y.shape[i] for i in p) == c.shape and np.array_equal(y.transpose(p), c)), None)


def _permuted_parts(x: np.ndarray, ys: list[np.ndarray], y_terms: list[Term]) -> list[Term]:
    """``concat(L(y_0), L(y_1), ..., dim=d)`` equal to ``x`` where the y hold copied entries (broadcasts: no entry
    has one position, so no layout is read off positions), each L a permutation of y's dims (unit dims dropped
    and restored by reshapes); the parts cut along one dim of x, or along two adjacent dims merged (each rank one
    query head of one KV head: heads x repeats). Label arrays compared, part by part."""
    w = len(ys)
    views = [(x, None)] + [(x.reshape(x.shape[:d] + (x.shape[d] * x.shape[d + 1],) + x.shape[d + 2:]), d)
                           for d in range(x.ndim - 1)]
    for view, merged in views:
        for d in range(view.ndim):
            if view.shape[d] % w or view.shape[d] == 0:
                continue
            parts = []
            for chunk, y, t in zip(np.split(view, w, axis=d), ys, y_terms):
                p = _dims_permuted(y, chunk)  # (the same dims; else with the unit dims dropped and restored)
                if p is not None:
                    parts.append(t if p == tuple(range(y.ndim)) else app("core.permute", t, dims=p))
                    continue
                cs = tuple(n for n in chunk.shape if n != 1)
                ysq = y.reshape(tuple(n for n in y.shape if n != 1))
                p = _dims_permuted(ysq, chunk.reshape(cs))
                if p is None:
                    break
                if ysq.shape != y.shape:
                    t = app("core.reshape", t, shape=tuple(ysq.shape))
                if p != tuple(range(ysq.ndim)):
                    t = app("core.permute", t, dims=p)
                if cs != chunk.shape:
                    t = app("core.reshape", t, shape=tuple(chunk.shape))
                parts.append(t)
            else:
                out = app("core.concat", *parts, dim=d) if w > 1 else parts[0]
                return [out if merged is None else app("core.reshape", out, shape=tuple(x.shape))]
    return []


def solve(x: np.ndarray, ys: list[np.ndarray], y_terms: list[Term], y_shapes: list[tuple]) -> list[Term]:
    """Terms over ``y_terms`` equal to ``x`` (label arrays): ``concat(L_0(y_a), L_1(y_b), ..., dim=d)`` with
    each ``y`` used once, else the ranks' rows interleaved (:func:`chunks`) or a layout of their concatenation;
    and ``L(y)`` or y's rows reordered for each y that holds all of x (replicated copies)."""
    where: dict[int, tuple[int, int]] = {}
    pos_of: dict[int, dict[int, int]] = {}  # each tensor's labels -> positions (replicas: several hold one)
    for i, y in enumerate(ys):
        flat = y.reshape(-1)
        if len(np.unique(flat)) != flat.size:
            continue  # an entry copied twice (an expand): no unique position
        pos_of[i] = {lab: p for p, lab in enumerate(flat.tolist())}
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
            if hit is not None and hit[0] in used:  # (the first holder taken: a replica on another rank)
                hit = next((h for h in (_positions_in(chunk, i, pos_of[i]) for i in pos_of if i not in used)
                            if h is not None), None)
            if hit is None or hit[0] in used:
                break
            t = layout(y_terms[hit[0]], y_shapes[hit[0]], hit[1])
            if t is None:
                break
            used.add(hit[0])
            parts.append(t)
        else:
            out.append(app("core.concat", *parts, dim=d))
    if not out and any(i not in {v[0] for v in where.values()} for i in range(w)):
        out += _permuted_parts(x, ys, y_terms)
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


def _is_broadcast(op) -> bool:
    """A broadcast of its one input (``aten.expand``, ``hlo.broadcast``): data movement, any dialect."""
    return op is not None and op.arity == 1 and op.data_movement and bool(op.broadcast or op.broadcast_to)


def _counterparts(g_d, v: Node, keep=lambda n: True, reg=None) -> list[list[Node]]:
    """v's G_d counterparts: operators of v's op and arity, grouped by output name across ranks (rank order);
    with ``reg``, for a broadcast v, every dialect's broadcasts (PyTorch's ``expand`` beside XLA's
    ``broadcast``: both are data movement, which the labels compare)."""
    groups: dict[str, list[Node]] = {}
    wide = reg is not None and _is_broadcast(reg.get(v.op))
    for n in g_d.nodes:
        same = n.op == v.op or (wide and _is_broadcast(reg.get(n.op)))
        if same and len(n.inputs) == len(v.inputs) and len(n.outputs) == len(v.outputs) and keep(n):
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
            v = _value(c, self.reg) if c is not None else None
            got = const_label(v, self.const_labels) if v is not None else None
        elif is_movement(term) and all(self.get(leaf) is not None for leaf in set(leaves(term))):
            got = term_eval(term, self.memo.__getitem__, self.reg)
        elif op is not None and op.data_movement and len(n.outputs) == 1 and self.get(n.inputs[0]) is not None:
            consts = [self.const_of(i) for i in n.inputs[1:]]
            vals = [_value(c, self.reg) if c is not None else None for c in consts]
            if all(x is not None for x in vals):
                got = _moves(op, vals, dict(n.attrs), self.memo[n.inputs[0]], self.rng)
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
        :func:`_moves` checks one (its reference on labels and on random values at the same indices)."""
        vals = [self.const_of(i) for i in n.inputs]
        vals = [_value(c, self.reg) if c is not None else None for c in vals]
        free = [k for k, v in enumerate(vals) if v is None]
        if len(free) != 1 or not any(free[0] in grp for grp in op.linear_groups(dict(n.attrs))):
            return None
        lab = self.get(n.inputs[free[0]])
        if lab is None:
            return None
        return _moves(op, [v for v in vals if v is not None], dict(n.attrs), lab, self.rng, at=free[0])

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
            val = _value(c, self.reg) if c is not None else None
            if val is None or not np.all(np.asarray(val) == value):
                continue
            lab = self.get(x)
            if lab is not None:
                return lab
        return None


def _propagated(ctx, v: Node, R: dict, grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for an input of v over the inputs of its G_d counterparts, whose labels G_d's definitions
    compute from the relation's tensors (:class:`Propagated`): the counterparts' inputs need not be explored
    (an expert's rows after an all-to-all, an all-gather and a re-sort by expert). An input known only as sums
    of the ranks' tensors (a gradient before its reduce-scatter) is carried as sums (:class:`Sums`: the
    reduce-scatter, the moves after it), each distinct multiset of labels a label of its own. The counterparts'
    own G_d definitions are added (``grow``), so that v's output meets theirs."""
    g_d, reg = ctx.g_d, ctx.egraph.reg
    groups = _counterparts(g_d, v)
    out, used = [], []
    for k, x in enumerate(v.inputs):
        rels = R.get(x, ())
        for e in [e for e in rels if is_movement(e)][:2] + [e for e in rels if _summed(e)][:2]:
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
                key = _Multisets()
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


class _Multisets:
    """Sums of labelled entries (:class:`Sums`' tuples) as integer labels, one per distinct multiset."""

    def __init__(self):
        self.ids: dict[tuple, int] = {}

    def __call__(self, a: np.ndarray) -> np.ndarray:
        return np.array([self.ids.setdefault(tuple(sorted(t)), len(self.ids)) for t in a.reshape(-1)],
                        dtype=np.int64).reshape(a.shape)


def _moves(op, arrays, attrs, labels: np.ndarray, rng, at: int = 0) -> np.ndarray | None:
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


MAX_MOVED = 1 << 16  # labelled entries of one data-movement problem answered before the search
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
            is_movement(terms[0]) or (_is_broadcast(reg.get(terms[0].op)) and all(map(is_movement, terms[0].args)))):
        return none
    crossing = not is_movement(terms[0])  # (a broadcast, against any dialect's)
    ranks = 1 if crossing and g_d.world_size == 1 else 2  # (one rank: its tensors are all there is)
    rels = []
    for x in v.inputs:
        rx = list(R.get(x, ()))
        if not rx or not all(is_movement(e) and len({rank_of(n) for n in leaves(e)}) >= ranks for e in rx):
            return none
        rels.append(rx)
    out_shape = _concrete(g_s.shape(v.outputs[0]))
    if out_shape is None or not 0 < int(np.prod(out_shape, dtype=np.int64)) <= MAX_MOVED:
        return none
    groups = _counterparts(g_d, v, reg=reg)
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
                if a not in lab and _concrete(g_d.shape(a)) == lab[n].shape:
                    lab[a] = lab[n]
        replica_labels(ctx, R, lab)
        prop = Propagated(ctx, lab, const_of)
        known, near = set(lab), []
        for g in groups:  # (the counterparts reading labelled tensors or views of them, nearest first)
            steps = [sum(len(c) for c in cs) for cs in ([_reach(g_d, i, known) for i in n.inputs] for n in g)
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


MAX_COUNTERPARTS = 64  # G_d operators one elementwise search may read


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


def const_label(values: np.ndarray, table: dict) -> np.ndarray:
    """A constant's entries labelled by value (negative labels, one per distinct value in ``table``): equal values,
    one label, in both programs -- an entry of ``where(mask, scores, -30000)`` is then the same function of the
    same labels as XLA's ``select`` of its -30000 constant."""
    flat = [table.setdefault(float(x), -1 - len(table)) for x in np.asarray(values, dtype=np.float64).reshape(-1)]
    return np.array(flat, dtype=np.int64).reshape(np.shape(values))


def _labelled_inputs(ctx, v: Node, R: dict, max_out: int, max_labels: int | None = None, const_of=None,
                     const_labels: dict | None = None):
    """The common start of the label searches for v's output: its concrete shape (1 to ``max_out`` entries),
    each input's first relation of data movement over G_d tensors, those tensors labelled (at most
    ``max_labels`` entries) and the inputs' labels; replicated copies of an input (other relations that are one
    tensor of its shape) get the same labels (equal data). A labelled tensor that G_d computes from other
    labelled ones by moving data holds their labels (:func:`_derived_labels`). None where any of that is
    missing."""
    out_shape = _concrete(ctx.g_s.shape(v.outputs[0]))
    if out_shape is None or not 0 < int(np.prod(out_shape, dtype=np.int64)) <= max_out:
        return None
    rels, consts = [], {}
    for x in v.inputs:
        e = next((e for e in R.get(x, ()) if is_movement(e) and next(leaves(e), None) is not None), None)
        if e is None and const_labels is not None:  # (a constant input: its entries labelled by value)
            c = next((e for e in R.get(x, ()) if next(leaves(e), None) is None), None)
            val = _value(c, ctx.egraph.reg) if c is not None else None
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
            if isinstance(e, Leaf) and e.name not in lab and _concrete(ctx.g_d.shape(e.name)) == a.shape:
                lab[e.name] = a
    replica_labels(ctx, R, lab)
    return out_shape, rels, lab, ev


def replica_labels(ctx, R: dict, lab: dict[str, np.ndarray]) -> None:
    """The other ranks' replicas of a labelled tensor, where the relations or G_d's definitions show them equal
    (:func:`_same_computation`), hold the same labels: a rank's copy of the RoPE tables, read by that rank's
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
            if ctx.g_d.shape(m) == ctx.g_d.shape(n) and _same_computation(ctx.g_d, R, n, m, ctx.egraph.reg, memo,
                                                                           aliases=aliases):
                lab[m] = lab[n]


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
            shp = _concrete(self.ctx.g_d.shape(t))
            if shp is not None:
                got = self.memo[t] = np.full(shp, -1, dtype=np.int64)
        return got


def elementwise_outputs(ctx, snap, v: Node, R: dict, explored: set[str], grow, const_of) -> list[tuple[Term, Term]]:
    """Equalities for the output of an elementwise G_s operator (``OpDef.elementwise`` on every input, NumPy
    broadcasting allowed) whose inputs are each related as data movement, possibly in different layouts (an
    expert's activations as the ranks' column halves, its routing weights as rows an all-to-all delivered).
    Every entry of the relation's G_d tensors is labelled and the labels carried through G_d's definitions
    (:class:`Propagated`) to the inputs of v's G_d counterparts (same op and attributes, same dtypes). An
    output entry of v whose input entries carry the labels (a, b, ...) is f(a, b, ...); so is each entry of a
    counterpart's output whose input entries carry the same labels. Where every output entry of v finds one,
    v's output is that data movement of the counterparts' outputs (``solve`` on fresh labels). The G_s side is
    v's op applied to the inputs' relations (congruent to v's output)."""
    op = ctx.egraph.reg.get(v.op)
    g_s, g_d = ctx.g_s, ctx.g_d
    if (op is None or len(v.outputs) != 1 or not v.inputs
            or sorted(op.elementwise) != list(range(len(v.inputs)))):
        return []
    const_labels: dict = {}
    got = _labelled_inputs(ctx, v, R, MAX_ELEMENTWISE, const_of=const_of, const_labels=const_labels)
    if got is None:
        return []
    out_shape, rels, lab, ev = got
    try:
        xs = [np.broadcast_to(a, out_shape) for a in ev]
    except ValueError:
        return []
    dtypes = [g_s.tensors[x].dtype for x in v.inputs] + [g_s.tensors[v.outputs[0]].dtype]
    attrs = dict(v.attrs)
    nodes = [(n, n.inputs) for ns in _named_first(_counterparts(g_d, v), v) for n in ns
             if dict(n.attrs) == attrs and [g_d.tensors[t].dtype for t in n.inputs + n.outputs] == dtypes]
    nodes += [(n, reads) for n, reads in _renamed_counterparts(ctx, v, dtypes)
              if (n, reads) not in nodes]
    prop = Propagated(ctx, lab, const_of, const_labels)
    where: dict[tuple, tuple[int, int]] = {}  # input labels -> (counterpart, flat output index)
    used, ys, base = [], [], 0
    for n, reads in nodes:
        if len(used) >= MAX_COUNTERPARTS:
            break
        z = _concrete(g_d.shape(n.outputs[0]))
        ins = [prop.get(t) for t in reads]
        if z is None or any(a is None for a in ins):
            continue
        try:
            ins = [np.broadcast_to(a, z).reshape(-1) for a in ins]
        except ValueError:
            continue
        size = int(np.prod(z, dtype=np.int64))
        if base + size > MAX_ELEMENTWISE * 4:
            break
        k = len(used)
        for q, key in enumerate(zip(*ins)):
            where.setdefault(key, (k, q))
        used.append(n)
        ys.append(np.arange(base, base + size, dtype=np.int64).reshape(z))
        base += size
    if not used:
        return []
    flat = [a.reshape(-1) for a in xs]
    got = np.empty(len(flat[0]), dtype=np.int64)
    hits = set()
    for p, key in enumerate(zip(*flat)):
        hit = where.get(key)
        if hit is None:
            return []
        got[p] = ys[hit[0]].reshape(-1)[hit[1]]
        hits.add(hit[0])
    lhs = app(v.op, *rels, **attrs)
    keep = sorted(hits)  # (the counterparts x reads: a replica's copy on another rank computes the same entries)
    used, ys = [used[k] for k in keep], [ys[k] for k in keep]
    terms = solve(got.reshape(out_shape), ys, [Leaf(n.outputs[0]) for n in used], [tuple(y.shape) for y in ys])
    return [(lhs, t) for t in terms]


def _renamed_counterparts(ctx, v: Node, dtypes: list) -> list[tuple[Node, list[str]]]:
    """G_d counterparts of another dialect's op or expression that a lemma says computes the same function: a
    rule ``f(?a, ?b, attrs) => g(?a, ?b, attrs')`` -- distinct variables, constant attributes
    (``aten.mul.Tensor(?a, ?b) => hlo.multiply(?a, ?b)``, aten-hlo 836) -- or ``f(?x) => e`` with ``e`` an
    expression of elementwise ops over f's variables (``aten.silu(?x) => hlo.multiply(?x, hlo.logistic(?x))``,
    family 1222), each found spelt out in G_d's definitions (every op of ``e`` the producer of the tensor read
    there, attributes equal) and the condition holding on the tensors bound: there ``f`` and ``e`` agree (the
    lemma, fuzzed), and every op of both is elementwise, so each output entry of the G_d node is f of the
    bound tensors' entries at that position, as :func:`elementwise_outputs` needs. (node, the tensors bound to
    f's operands) each."""
    from .lemma import EvalContext, check_condition
    g_d, out, reg = ctx.g_d, [], ctx.egraph.reg
    attrs = dict(v.attrs)

    def elementwise(p, bound: dict) -> bool:  # every op of the pattern elementwise in all its operands,
        if isinstance(p, PVar):  # attributes constants or the lhs's
            return True
        op = reg.get(p.op) if isinstance(p, App) else None
        return (op is not None and sorted(op.elementwise) == list(range(len(p.args)))
                and all(isinstance(x, AConst) or isinstance(x, PVar) and x.name in bound for _, x in p.attrs)
                and all(elementwise(a, bound) for a in p.args))

    def match(p, t: str, env: dict, bound: dict) -> bool:
        if isinstance(p, PVar):
            return env.setdefault(p.name, t) == t
        n = g_d.producer.get(t)
        return (n is not None and n.op == p.op and len(n.outputs) == 1 and len(n.inputs) == len(p.args)
                and dict(n.attrs) == {k: x.value if isinstance(x, AConst) else bound[x.name] for k, x in p.attrs}
                and all(match(a, u, env, bound) for a, u in zip(p.args, n.inputs)))

    for r in getattr(ctx.egraph, "rules", ()):
        lhs, rhs = r.lhs, r.rhs
        if not isinstance(lhs, App) or not isinstance(rhs, App) or lhs.op != v.op or rhs.op == v.op:
            continue
        if len(lhs.args) != len(v.inputs) or not all(isinstance(a, PVar) for a in lhs.args) or \
                len({a.name for a in lhs.args}) != len(lhs.args):
            continue
        bound = {x.name: attrs.get(k) for k, x in lhs.attrs if isinstance(x, PVar)}  # (attribute variables: v's)
        if set(attrs) != {k for k, _ in lhs.attrs} or any(
                not (isinstance(x, PVar) or isinstance(x, AConst) and x.value == attrs[k]) for k, x in lhs.attrs):
            continue
        if not elementwise(rhs, bound) or {a.name for a in _pattern_vars(rhs)} != {a.name for a in lhs.args}:
            continue
        ec = EvalContext(lambda leaf: g_d.shape(leaf.name), ctx.egraph.cx, ctx.egraph.reg.functions,
                         lambda leaf: g_d.tensors[leaf.name].dtype)
        for n in g_d.nodes:
            if n.op != rhs.op or len(n.outputs) != 1 or g_d.tensors[n.outputs[0]].dtype != dtypes[-1]:
                continue
            env: dict = {}
            if not match(rhs, n.outputs[0], env, bound):
                continue
            reads = [env[a.name] for a in lhs.args]
            if [g_d.tensors[t].dtype for t in reads] != dtypes[:-1]:
                continue
            if check_condition(r, {**bound, **{a.name: Leaf(t) for a, t in zip(lhs.args, reads)}}, ec):
                out.append((n, reads))
    return list({(n.outputs[0], tuple(reads)): (n, reads) for n, reads in out}.values())  # (two rules, one node)


def _pattern_vars(p) -> list:
    """The tensor variables of a rule's side."""
    if isinstance(p, PVar):
        return [p]
    return [x for a in getattr(p, "args", ()) for x in _pattern_vars(a)]


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
    out_shape = _concrete(g_s.shape(v.outputs[0]))
    attrs = dict(v.attrs)
    rd = _row_dims(op, attrs, len(out_shape)) if out_shape is not None else None
    if rd is None:
        return []
    p, dims = rd
    x_shape = _concrete(g_s.shape(v.inputs[p]))
    rels = [next(iter(R.get(x, ())), None) for x in v.inputs]
    if x_shape is None or len(x_shape) != len(out_shape) or any(r is None for r in rels) or \
            any(x_shape[d] != out_shape[d] for d in range(len(out_shape)) if d not in dims):
        return []
    for e in [e for e in R.get(v.inputs[p], ()) if is_movement(e) and next(leaves(e), None) is not None][:4]:
        got = _rows_of(v, reg, g_d, rels[:p] + [e] + rels[p + 1:], p, dims, x_shape, out_shape, R)
        if got:
            return got
    return []


def _subst(t: Term, names: dict[str, str]) -> Term:
    if isinstance(t, Leaf):
        return Leaf(names.get(t.name, t.name))
    return App(t.op, tuple(_subst(a, names) for a in t.args), t.attrs) if isinstance(t, App) else t


def _covers(t: Term, n: str, shape_of, reg) -> bool:
    """Is ``t`` data movement of the tensor ``n`` alone that reads every entry of it (permutes, reshapes, a
    concatenation of copies -- not a slice)? Then ``t(n) == t(m)`` entry by entry means ``n == m``."""
    if not is_movement(t) or set(leaves(t)) != {n}:
        return False
    lab = labelled([n], shape_of)
    if lab is None:
        return False
    return bool(np.isin(lab[n], term_eval(t, lab.__getitem__, reg)).all())


def _same_computation(g_d, R: dict, n: str, m: str, reg, memo: dict, depth: int = 24, aliases=None) -> bool:
    """Do the G_d tensors ``n`` and ``m`` hold the same values: proven equal earlier (``aliases``), replicas
    shown by the relations (_replica), two outputs of one operator that G_d defines by the same term (an
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
    if g_d.shape(n) == g_d.shape(m) and _replica(R, n, m, g_d.shape, reg):
        ok = True
    elif a is not None and a is b:
        terms = g_d.node_terms(a)
        ok = terms[a.outputs.index(n)] == terms[a.outputs.index(m)]
    elif a is not None and b is not None and depth > 0 and a.op == b.op and dict(a.attrs) == dict(b.attrs) \
            and len(a.inputs) == len(b.inputs) and len(a.outputs) == 1 == len(b.outputs):
        op = reg.get(a.op)
        if op is not None and not op.collective and op.meaning is None:
            ok = all(_same_computation(g_d, R, x, y, reg, memo, depth - 1, aliases)
                     for x, y in zip(a.inputs, b.inputs))
    memo[key] = ok
    return ok


def _replica(R: dict, n: str, m: str, shape_of, reg) -> bool:
    """Are the G_d tensors ``n`` and ``m`` equal (replicas), as some G_s tensor's relations show: a term over
    ``n`` that reads all of it, and the same term over ``m``?"""
    for ts in R.values():
        if len(ts) > 1:
            for t in ts:
                if n in set(leaves(t)) and _subst(t, {n: m}) in ts and _covers(t, n, shape_of, reg):
                    return True
    return False


def _column_shards(v: Node, X: Term, rels: list[Term], p: int, R: dict, shape_of, reg) -> Term | None:
    """A matmul of rows X (over one rank's tensors) by a weight that is the ranks' column shards,
    ``concat(w_0, w_1, ..., dim=1)`` each over one rank's tensors: the concatenation of each shard's product with
    the rows over *that* rank's replicas (``ln1@1`` for ``ln1@0``), where a G_s tensor's relations already hold
    both the term over rank 0's replica and the same term over the other rank's (so the replicas are equal).
    None where that is not the case (then the product is taken with X as it is)."""
    if v.op not in ("aten.mm", "core.matmul") or p != 0 or len(rels) != 2:
        return None
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
            out.append(app(v.op, X, part))
            continue
        names = {n: f"{base_name(n)}@{r}" for n in set(leaves(X))}
        Xr = _subst(X, names)
        # the replicas are equal where some G_s tensor's relations show it (_replica)
        proved = all(_replica(R, n, m, shape_of, reg) for n, m in names.items())
        if not proved:
            return None
        out.append(app(v.op, Xr, part))
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
    joins two tuples), and so does a ``data_movement`` operator at constant indices (:func:`_moves`); an
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
            vals = [_value(c, self.reg) if c is not None else None for c in vals]
            if all(x is not None for x in vals):
                got = _sums_or_none(_moves(op, vals, dict(n.attrs), self.memo[n.inputs[0]], self.rng))
        if got is None and op is not None and op.linear_groups(dict(n.attrs)) and len(n.outputs) == 1:
            got = self._linear(n, op)
        self.memo[t] = got
        return got

    def _linear(self, n: Node, op) -> np.ndarray | None:
        ins, vals, lin = [], [], set()
        for i, x in enumerate(n.inputs):
            c = self.const_of(x)
            v = _value(c, self.reg) if c is not None else None
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


def _summed(t: Term) -> bool:
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
    key = _Multisets()
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
    key = _Multisets()
    return xa.shape == xb.shape and np.array_equal(key(xa), key(xb))


# -- polynomial labels: operators that add and multiply, related as sums over the ranks ---------------------------

# (HF Mixtral's experts' backward bmm at TP 4 -- [32, 128, 192] x [32, 192, 1], 8 pieces -- needs 1 << 21 and
# 1 << 16: its verify then peaks at 2.0 GB and takes 47 s; at 1 << 18 / 1 << 14 it was refused)
MAX_MONOMIALS = 1 << 21  # monomials one polynomial evaluation may hold (estimated first: 8 x that)
MAX_POLY_ENTRIES = 1 << 16  # output entries of one polynomial problem (Python objects; its labelled entries: 32 x)
MAX_ELEMENTWISE = 1 << 19  # output entries of one elementwise problem (Llama-3.2-1B's logits: 256k)


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
    got = _labelled_inputs(ctx, v, R, MAX_POLY_ENTRIES, 32 * MAX_POLY_ENTRIES)
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
    for group in _named_first(_counterparts(g_d, v), v):  # (each group alone first: another operator may
        nodes, zs = [], []  # compute the same products, a recomputation)
        for n in group:
            if dict(n.attrs) != attrs or len(everyone[0]) >= MAX_COUNTERPARTS:
                continue
            ins = [prop.get(t) for t in n.inputs]
            if any(a is None for a in ins):
                continue
            z = _poly_op(op, [_polys(a) for a in ins], dict(n.attrs), point)
            if z is not None and z.shape == _concrete(g_d.shape(n.outputs[0])):
                nodes.append(n)
                zs.append(z)
        got = _sum_of(lhs, xs, nodes, zs, out_shape) if nodes else []
        if got:
            return got
        everyone[0].extend(nodes)
        everyone[1].extend(zs)
    return _sum_of(lhs, xs, *everyone, out_shape) if everyone[0] else []


def _named_first(groups: list[list[Node]], v: Node) -> list[list[Node]]:
    """Counterpart groups, the one named as v's output first (a capture names a rank's copy of an operator as
    the specification's)."""
    return sorted(groups, key=lambda ns: base_name(ns[0].outputs[0]) != base_name(v.outputs[0]))


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


def laid_out(which: np.ndarray, at: np.ndarray, names: list[Term], shapes: list[tuple], out_shape) -> list[Term]:
    """An output whose every entry is one entry of one of the tensors ``names`` (entry e: tensor ``which[e]``,
    flat position ``at[e]``) as a layout of them (``solve`` on labels: the tensors' entries numbered in turn)."""
    base = np.cumsum([0] + [int(np.prod(z, dtype=np.int64)) for z in shapes])
    ys = [np.arange(base[k], base[k + 1], dtype=np.int64).reshape(z) for k, z in enumerate(shapes)]
    return solve((base[which] + at).reshape(out_shape), ys, names, shapes)


def summed_layouts(parts: list, names: list[Term], shapes: list[tuple], out_shape) -> Term | None:
    """An output whose every entry is the sum of one entry of each of the same tensors ``names[k]`` (``parts``:
    per output entry, the sorted (k, flat position) it sums) as the sum of a layout of each; None where the
    entries sum other tensors or a position map is no layout."""
    ks = [k for k, _ in parts[0]] if parts else []
    if not ks or any([k for k, _ in g] != ks for g in parts):
        return None
    return sum_of_layouts([np.array([g[j][1] for g in parts], dtype=np.int64).reshape(out_shape)
                           for j in range(len(ks))], [names[k] for k in ks], [shapes[k] for k in ks])


def sum_of_layouts(pos: list[np.ndarray], names: list[Term], shapes: list[tuple]) -> Term | None:
    """The sum over k of the layout of tensor ``names[k]`` that puts its flat position ``pos[k][e]`` at each
    output entry e (:func:`layout`, else its rows as slices); None where one is no layout."""
    terms = []
    for p, name, z in zip(pos, names, shapes):
        t = layout(name, z, p)
        if t is None:
            whole = np.arange(int(np.prod(z, dtype=np.int64)), dtype=np.int64).reshape(z)
            t = next(iter(chunks(p, [whole], [name])), None)
        if t is None:
            return None
        terms.append(t)
    return terms[0] if len(terms) == 1 else app("core.sum", *terms)


# -- products on labels: a bilinear product of views of G_d tensors, against another dialect's product ----------

def _product_axes(op: str, attrs: dict, rx: int, ry: int):
    """(lhs batch, lhs contracting, rhs batch, rhs contracting) dims of a product op; None for another op. Its
    output: the batch dims, then lhs's free dims, then rhs's (in order) -- ``mm``, ``bmm``, XLA's ``dot``."""
    if op == "aten.mm" and rx == ry == 2:
        return [], [1], [], [0]
    if op == "aten.bmm" and rx == ry == 3:
        return [0], [2], [0], [1]
    if op == "hlo.dot":
        return ([int(d) for d in attrs.get("lhs_batch", ())], [int(d) for d in attrs.get("lhs_contracting", ())],
                [int(d) for d in attrs.get("rhs_batch", ())], [int(d) for d in attrs.get("rhs_contracting", ())])
    return None


def product_signatures(op: str, attrs: dict, x: np.ndarray, y: np.ndarray) -> np.ndarray | None:
    """Each output entry of the product of label arrays x, y as the pairs of entries it sums, sorted (each pair
    its two labels in order: products commute -- XLA's ``dot(w, x)`` beside PyTorch's ``x @ w.T``): an object
    array of the output's shape; None for an op not a product."""
    ax = _product_axes(op, attrs, x.ndim, y.ndim)
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


def products_first(ctx, v: Node, R: dict, const_of) -> list[Term]:
    """The output of a G_s product (``mm``, ``bmm``) of inputs related as data movement of G_d tensors, as a layout
    of G_d products' outputs (any dialect's: XLA's ``dot`` with two batch dims beside PyTorch's ``bmm`` of their
    merged views): every entry of the relations' G_d tensors labelled, each product's output entry written as the
    pairs of input entries it sums (:func:`product_signatures`), and the G_s output solved over the G_d
    counterparts' outputs on those (``solve``). Equal pairs, equal sums: exact over the reals. [] where nothing is
    found (the search runs)."""
    g_s, g_d, reg = ctx.g_s, ctx.g_d, ctx.egraph.reg
    if len(v.inputs) != 2 or len(v.outputs) != 1 or _product_axes(v.op, v.attrs, len(g_s.shape(v.inputs[0])),
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
        return _products_of_whole_shards(ctx, v, picked, R, const_of)
    try:
        xs = [term_eval(e, lab.__getitem__, reg) for e in picked]
    except Exception:  # noqa: BLE001 -- shapes the references refuse: nothing is claimed
        return []
    sig = product_signatures(v.op, v.attrs, xs[0], xs[1])
    replica_labels(ctx, R, lab)  # (a replicated activation: every rank's copy labelled)
    prop = Propagated(ctx, dict(lab), const_of)
    if sig is None:  # (too many pairs to enumerate: the same proof on the positions of the entries)
        return _products_by_positions(ctx, v, xs, prop)
    cands = []
    for n in g_d.nodes:
        if len(n.inputs) != 2 or len(n.outputs) != 1 or _product_axes(n.op, n.attrs, 0, 0) is None and n.op != v.op:
            continue
        if g_d.tensors[n.outputs[0]].dtype != g_s.tensors[v.outputs[0]].dtype:
            continue
        a, b = prop.get(n.inputs[0]), prop.get(n.inputs[1])
        if a is None or b is None:
            continue
        s = product_signatures(n.op, n.attrs, a, b)
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
    return (solve(x, ys, [Leaf(n.outputs[0]) for n, _ in cands], [tuple(y.shape) for y in ys])
            or _partial_products(sig, cands))


def _products_of_whole_shards(ctx, v: Node, picked: list[Term], R: dict, const_of) -> list[Term]:
    """``mm(x, concat(W_0, ..., W_n, dim=1))`` -- a column-parallel weight too large to label (an LM head's
    vocabulary) -- where each shard W_r is read whole by one G_d product (any dialect's) contracting W_r's dim 0:
    with only x's entries labelled, each row of x must be a row of that product's other operand, its entries in
    the contraction's order (the replicated activation on each rank, ``replica_labels``). Then v's entry (i, j),
    j in shard r at j', is ``sum_k x[i, k] W_r[k, j']`` -- the G_d product's entry (p_i, j'), term for term.
    The concatenation of the products' outputs, laid out; [] where anything else holds."""
    g_d, g_s, reg = ctx.g_d, ctx.g_s, ctx.egraph.reg
    if v.op != "aten.mm" or len(picked) != 2:
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
        ws = _concrete(g_d.shape(w.name))
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
            ax = _product_axes(n.op, n.attrs, 2, 2)
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
            t = layout(Leaf(n.outputs[0]), _concrete(g_d.shape(n.outputs[0])), pos)
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
    ax = _product_axes(v.op, v.attrs, xs[0].ndim, xs[1].ndim)
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
        axn = _product_axes(n.op, n.attrs, 0, 0) if len(n.inputs) == 2 and len(n.outputs) == 1 else None
        if axn is None or g_d.tensors[n.outputs[0]].dtype != g_s.tensors[v.outputs[0]].dtype:
            continue
        a, b = prop.get(n.inputs[0]), prop.get(n.inputs[1])
        z = _concrete(g_d.shape(n.outputs[0]))
        if a is None or b is None or z is None:
            continue
        alb, alc, arb, arc = _product_axes(n.op, n.attrs, a.ndim, b.ndim)
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
