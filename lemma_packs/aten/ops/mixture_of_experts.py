"""Mixture-of-experts layers: grouped matrix products (``_grouped_mm``, the experts' kernel) and the routing ops
around them: ``sort`` (``argsort``; graphguard's reference keeps equal entries in order), ``histc`` (the experts'
token counts), ``index_copy`` (tokens put back in their order), and slices at bounds the data decides
(``slice_at``, ``slice_scatter_at``). The lemmas: ``products.py`` and ``indexing.py`` beside this package.

``_grouped_mm(x, w, offs)`` with ``x [S, K]`` (rows sorted by expert) and ``w [E, K, N]``: group ``g`` is the
rows ``offs[g - 1]:offs[g]`` (``offs[-1]`` read as 0), multiplied by ``w[g]`` -- HF transformers' default
``grouped_mm`` experts in bfloat16, torchtitan's MoE. The offsets are data (a cumulative histogram of the
routing), the same tensor on every rank where the routing is replicated. Its backward adds the form
``_grouped_mm(a, b, offs)`` with ``a [K, S]``, ``b [S, N]``: ``out[g] = a[:, s_g:e_g] @ b[s_g:e_g]``
(``[E, K, N]``, zero for an empty group) -- the weight's gradient.

What the lemmas use is that within a group the op is a matrix product: it splits along the output columns
(1900), along the contraction (1901: the sum of the parts' products, a row-parallel expert), and in the
weight-gradient form along K and N (1902, 1903). It does *not* split along the token rows: which group a row
is in depends on its position, so no lemma cuts ``x``'s rows.

Rows of ``x`` past ``offs[-1]`` belong to no group, and the kernel leaves those output rows as they were in
memory (not a function of the inputs). The reference fills them with NaN, which every lemma here carries to
the same rows of both sides; HF masks them before use (its sentinel rows), and without expert parallelism
``offs[-1]`` is the number of rows, so there are none. Non-increasing offsets are taken as the kernel takes
them: each group from the previous offset to its own, a later group writing over an earlier one.

Routing with fixed shapes (megatron-core's all-to-all dispatcher with ``moe_pad_expert_input_to_capacity``):
the router keeps, per expert, the ``capacity`` tokens of highest probability (``topk`` along the token dim,
written as ones into a zero mask with ``scatter``), the dispatcher orders each expert's tokens with a stable
``argsort`` of that mask (``sort.stable``) and picks them with ``index_select``. With a capacity equal to the
number of tokens (capacity factor experts / top-k) nothing is dropped: ``topk`` over a whole dim picks every
index once, so the mask is all ones, its ``argsort`` is the identity order, and the dispatch sends every token to
every expert (the probabilities of the experts a token was not routed to are 0).

A grouped GEMM written as a loop over experts (HF's Aria, ``sequential_experts_gemm``) slices the permuted
tokens at bounds it reads from a tensor, ``x[cumsum[e]:cumsum[e + 1]]`` (``.item()``: TorchDynamo's unbacked
``u0``). Capture keeps the 0-d tensors the bounds come from as operands: ``slice_at(x, start, end)`` and
``slice_scatter_at(base, src, start, end)`` (``out[start:end] = src``). The slice's length is a size the data
decides (``count``: one symbol per sliced length and pair of bounds in a graph); the engine equates two counts
where the bounds are equal tensors and the sliced dims equally long (``data_size_args``), whatever is sliced.
Bounds are read as Python reads them (a negative one counts from the end, both clamped to the dim)."""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

from .helpers import ABSENT, _dim, _optional, _same


_NAME = "aten._grouped_mm"


def _parts(xs, a):
    x, w, offs, bias = _optional(_NAME, xs, a.get("absent"), 4)
    if bias is not None:
        fail(f"{_NAME}: a bias is not supported")
    return x, w, offs


def _shape(shapes, a, cx):
    x, w, offs = _parts(shapes, a)
    if offs is None:
        fail(f"{_NAME}: only the forms with offsets (2-D x 3-D, 2-D x 2-D) are supported")
    if len(offs) != 1:
        fail(f"{_NAME}: offsets {fmt_shape(offs)} are not a vector")
    if len(x) == 2 and len(w) == 3:
        if not _same(cx, w[0], offs[0]) or not _same(cx, x[1], w[1]):
            fail(f"{_NAME}: {fmt_shape(x)} @ {fmt_shape(w)} with offsets {fmt_shape(offs)}")
        return (x[0], w[2])
    if len(x) == 2 and len(w) == 2:
        if not _same(cx, x[1], w[0]):
            fail(f"{_NAME}: {fmt_shape(x)} @ {fmt_shape(w)}: the grouped dims differ")
        return (offs[0], x[0], w[1])
    fail(f"{_NAME}: {fmt_shape(x)} @ {fmt_shape(w)}: only 2-D x 3-D and 2-D x 2-D with offsets are supported")


def _groups(offs, n):
    offs = np.asarray(offs).reshape(-1)
    if offs.dtype.kind not in "iu":
        fail(f"{_NAME}: offsets of dtype {offs.dtype} (integers expected)")
    if offs.size and (offs.min() < 0 or offs.max() > n):
        fail(f"{_NAME}: offsets outside 0..{n}")
    start = 0
    for g, end in enumerate(offs.tolist()):
        yield g, start, end
        start = end


def _ref(xs, a):
    x, w, offs = _parts(xs, a)
    if x.dtype.kind != "f" or w.dtype.kind != "f":
        fail(f"{_NAME}: operands of dtype {x.dtype} and {w.dtype} (torch's kernel takes floating point only)")
    if w.ndim == 3:
        out = np.full((x.shape[0], w.shape[2]), np.nan, dtype=np.result_type(x, w))
        for g, s, e in _groups(offs, x.shape[0]):
            if e > s:
                out[s:e] = x[s:e] @ w[g]
        return out
    out = np.zeros((np.asarray(offs).size, x.shape[0], w.shape[1]), dtype=np.result_type(x, w))
    for g, s, e in _groups(offs, x.shape[1]):
        if e > s:
            out[g] = x[:, s:e] @ w[s:e]
    return out


def _dtype(ds, a):
    return a.get("out_dtype") or ds[0]


def _sort_shapes(shapes, attrs, cx):
    _dim("aten.sort.stable", attrs["dim"], len(shapes[0]))
    return [tuple(shapes[0]), tuple(shapes[0])]


def _sort_ref(xs, attrs):
    x = xs[0]
    if x.ndim == 0:
        return [x.copy(), np.zeros((), np.int64)]
    d = _dim("aten.sort.stable", attrs["dim"], x.ndim)
    if attrs["descending"]:  # stable descending: equal entries keep their order (reverse a stable ascending
        # sort of the reversed tensor, then map the indices back)
        n = x.shape[d]
        flipped = np.flip(x, axis=d)
        order = np.flip(np.argsort(flipped, axis=d, kind="stable"), axis=d)
        order = n - 1 - order
    else:
        order = np.argsort(x, axis=d, kind="stable")
    return [np.take_along_axis(x, order, axis=d), order.astype(np.int64)]


def _bound_shapes(name, shapes, first):
    for i in (first, first + 1):
        if tuple(shapes[i]) != ():
            fail(f"{name}: bound {i - first} is a tensor of shape {fmt_shape(shapes[i])}, not a 0-d one")


def _bounds(name, xs, first, n):
    lo, hi = xs[first], xs[first + 1]
    if lo.dtype.kind not in "iub" or hi.dtype.kind not in "iub":
        fail(f"{name}: bounds of dtype {lo.dtype}/{hi.dtype}, not integers")
    return range(n)[int(lo):int(hi)]


def _slice_at_shape(shapes, a, cx):
    x = shapes[0]
    d = _dim("aten.slice_at", a["dim"], len(x))
    _bound_shapes("aten.slice_at", shapes, 1)
    if not cx.prove("==", x[d], a["length"]):
        fail(f"aten.slice_at: dim {d} of {fmt_shape(x)} is not {S.text(a['length'])} long")
    return tuple(a["count"] if i == d else s for i, s in enumerate(x))


def _slice_at_ref(xs, a):
    x = xs[0]
    d = _dim("aten.slice_at", a["dim"], x.ndim)
    rows = _bounds("aten.slice_at", xs, 1, x.shape[d])
    n = a["count"]
    if isinstance(n, int) and n != len(rows):  # a size symbol gets its value from the data (replay binds it)
        fail(f"aten.slice_at: {len(rows)} entries between the bounds where the graph says {n}")
    return np.take(x, np.arange(rows.start, rows.stop, dtype=np.int64), axis=d)


def _slice_scatter_at_shape(shapes, a, cx):
    base, src = shapes[0], shapes[1]
    d = _dim("aten.slice_scatter_at", a["dim"], len(base))
    _bound_shapes("aten.slice_scatter_at", shapes, 2)
    if len(src) != len(base) or any(not cx.prove("==", p, q) for i, (p, q) in enumerate(zip(base, src)) if i != d):
        fail(f"aten.slice_scatter_at: src {fmt_shape(src)} does not fit base {fmt_shape(base)} along dim {d}")
    return tuple(base)


def _slice_scatter_at_ref(xs, a):
    base, src = xs[0], xs[1]
    d = _dim("aten.slice_scatter_at", a["dim"], base.ndim)
    rows = _bounds("aten.slice_scatter_at", xs, 2, base.shape[d])
    if src.shape[d] != len(rows):
        fail(f"aten.slice_scatter_at: {src.shape[d]} rows for {len(rows)} places between the bounds")
    out = np.array(base, copy=True)
    idx = [slice(None)] * base.ndim
    idx[d] = slice(rows.start, rows.stop)
    out[tuple(idx)] = src
    return out


def _histc_ref(xs, a):
    x = xs[0]
    if x.dtype.kind != "f":
        fail("aten.histc: a floating-point input is required")
    bins, lo, hi = int(a["bins"]), float(a["min"]), float(a["max"])
    if bins <= 0:
        fail(f"aten.histc: bins = {bins}")
    v = x.reshape(-1).astype(np.float64)
    if lo == hi and v.size:  # torch: the data's own range
        lo, hi = float(v.min()), float(v.max())
    if lo == hi:
        lo, hi = lo - 1, hi + 1
    if lo > hi or not (np.isfinite(lo) and np.isfinite(hi)):
        fail(f"aten.histc: range [{lo}, {hi}]")
    v = v[(v >= lo) & (v <= hi)]
    idx = np.minimum(((v - lo) * bins / (hi - lo)).astype(np.int64), bins - 1)
    return np.bincount(idx, minlength=bins).astype(x.dtype)


def _histc_shape(shapes, a, cx):
    if int(a["bins"]) <= 0:
        fail(f"aten.histc: bins = {a['bins']}")
    return (int(a["bins"]),)


def _index_copy_shape(shapes, a, cx):
    x, idx, src = shapes
    d = _dim("aten.index_copy", a["dim"], len(x))
    if len(idx) > 1 or len(src) != len(x):
        fail(f"aten.index_copy: index {fmt_shape(idx)} / source {fmt_shape(src)} for self {fmt_shape(x)}")
    n = idx[0] if idx else 1
    if not cx.prove("==", src[d], n) or any(not cx.prove("==", p, q) for i, (p, q) in enumerate(zip(x, src)) if i != d):
        fail(f"aten.index_copy: source {fmt_shape(src)} does not fit self {fmt_shape(x)} at {S.text(n)} indices")
    return tuple(x)


def _index_copy_ref(xs, a):
    x, idx, src = xs
    d = _dim("aten.index_copy", a["dim"], x.ndim)
    idx = idx.reshape(-1).astype(np.int64)
    if idx.size and (idx.min() < -x.shape[d] or idx.max() >= x.shape[d]):
        fail("aten.index_copy: index out of range")
    if len(set((idx % max(x.shape[d], 1)).tolist())) != idx.size:
        fail("aten.index_copy: a repeated index (which copy wins is not defined)")
    out = np.array(x, copy=True)
    moved = np.moveaxis(out, d, 0)
    moved[idx] = np.moveaxis(src, d, 0)
    return out


OPS = [
    OpDef(_NAME, None, _shape, _ref, (AttrSpec("out_dtype", "str", optional=True), ABSENT), dtype=_dtype,
          doc="Grouped matrix product: x [S, K] by w [E, K, N], group g the rows offs[g-1]:offs[g] times w[g] "
              "(rows past offs[-1] undefined); x [K, S] by y [S, N]: out[g] = x[:, group] @ y[group].",
          linear=(0, 1)),
    OpDef("aten.slice_at", 3, _slice_at_shape, _slice_at_ref,
          (AttrSpec("dim", "int", 0, dim_of=0), AttrSpec("length", "scalar"), AttrSpec("count", "scalar")),
          doc="x[start:end] along dim, the bounds 0-d integer tensors (values the data decides, read with "
              ".item()); length: the sliced dim's size; count: the slice's length, a size the data decides.",
          data_sizes=(("count", "dim"),), data_size_args=(1, 2)),
    OpDef("aten.slice_scatter_at", 4, _slice_scatter_at_shape, _slice_scatter_at_ref,
          (AttrSpec("dim", "int", 0, dim_of=0),),
          doc="A copy of base with base[start:end] = src along dim, the bounds 0-d integer tensors (values the "
              "data decides)."),
    OpDef("aten.histc", 1, _histc_shape, _histc_ref,
          (AttrSpec("bins", "int", 100), AttrSpec("min", "number", 0), AttrSpec("max", "number", 0)),
          doc="Histogram of the entries in bins equal-width bins over [min, max] (the data's range where min = "
              "max); entries outside are left out, max falls in the last bin."),
    OpDef("aten.index_copy", 3, _index_copy_shape, _index_copy_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="A copy of self with its entries at index along dim replaced by source's (indices distinct)."),
] + multi_output("aten.sort", 1, _sort_shapes, _sort_ref,
                 (AttrSpec("dim", "int", -1, dim_of=0), AttrSpec("descending", "bool", False)),
                 names=("values", "indices"), dtypes=lambda ds, a: [ds[0], "int64"],
                 doc="Entries sorted along dim and their indices; equal entries come in the order of one "
                     "implementation (graphguard's reference: stable) -- a function of the data, the same on "
                     "every rank.")

OPS += multi_output("aten.sort.stable", 1, _sort_shapes, _sort_ref,
                    (AttrSpec("stable", "bool", optional=True), AttrSpec("dim", "int", -1, dim_of=0),
                     AttrSpec("descending", "bool", False)),
                    names=("values", "indices"), dtypes=lambda ds, a: [ds[0], "int64"],
                    doc="Entries sorted along dim (ascending, or descending) and their indices; equal entries "
                        "keep their order when stable is true (and, in graphguard's reference, always).")
