"""Layouts solved on labels: every entry of every G_d tensor its own integer, and a label array written as data
movement of others.

A term of data-movement ops only (``concat``, ``slice``, ``permute``, ``reshape``, ``identity``) copies entries
of its leaves and never looks at their values. Evaluated with every entry of every leaf labelled by its own
integer, it says which entry lands where; two such terms over the same leaves are equal for all values of
the leaves exactly when their label arrays are equal. An equality found here is therefore a theorem of the
concrete shapes (none is tried where a shape is symbolic), checked by evaluation, not a lemma instance.
``solve`` writes a label array over the ranks' arrays (a concatenation of layouts, the rows interleaved, one
replica's copy); ``laid_out`` / ``sum_of_layouts`` do so where each entry is known by its position.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ir.expr import App, Leaf, Term, app, leaves


MOVES = frozenset({"core.concat", "core.slice", "core.permute", "core.reshape", "core.identity"})
MAX_MOVED = 1 << 16  # labelled entries of one data-movement problem answered before the search
MAX_ENTRIES = 1 << 20  # labels evaluated per problem (the operator's input and the ranks' tensors together)


def is_movement(t: Term) -> bool:
    return isinstance(t, Leaf) or (isinstance(t, App) and t.op in MOVES and all(is_movement(a) for a in t.args))


def concrete(shape) -> tuple[int, ...] | None:
    return tuple(shape) if all(type(d) is int for d in shape) else None


def labelled(names, shape_of, limit: int = MAX_ENTRIES) -> dict[str, np.ndarray] | None:
    """Every entry of every named tensor its own integer (None where a shape is symbolic or too big)."""
    out, start = {}, 0
    for n in names:
        shp = concrete(shape_of(n))
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
