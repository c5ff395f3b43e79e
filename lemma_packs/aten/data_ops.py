"""ATen operators whose bounds or sizes the data decides, and the routing ops around them (their
lemmas, 1360-1367: ``indexing.py``).

A grouped GEMM written as a loop over experts (HF's Aria, ``sequential_experts_gemm``) slices the permuted
tokens at bounds it reads from a tensor, ``x[cumsum[e]:cumsum[e + 1]]`` (``.item()``: TorchDynamo's unbacked
``u0``). Capture keeps the 0-d tensors the bounds come from as operands: ``slice_at(x, start, end)`` and
``slice_scatter_at(base, src, start, end)`` (``out[start:end] = src``). The slice's length is a size the data
decides (``count``: one symbol per sliced length and pair of bounds in a graph); the engine equates two counts
where the bounds are equal tensors and the sliced dims equally long (``data_size_args``), whatever is sliced.
Bounds are read as Python reads them (a negative one counts from the end, both clamped to the dim).

``histc`` (the experts' token counts), ``sort`` (``argsort``; graphguard's reference keeps equal entries in
order) and ``index_copy`` (tokens put back in their order) complete the router.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output

from .megatron_moe import _sort_ref, _sort_shapes
from .ops import _dim


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
