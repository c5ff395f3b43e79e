"""Indexing and embeddings: ``embedding`` and its backward, ``index``, ``index_put``, ``index_select``,
``gather``, the scatters (``scatter_add``, ``scatter.src``, ``scatter.value``: DeepSeek-V3's group-limited routing
marks the groups kept, ``mask.scatter_(1, group_idx, 1)``), ``index_add``, ``nonzero`` and ``one_hot``."""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, RowWise, fail, fmt_shape

from .helpers import ABSENT, _check_same, _dim, _int64, _n, _optional, _with_scalar, broadcast, broadcasts_to


def _embedding_shape(shapes, attrs, cx):
    w, idx = shapes
    if len(w) != 2:
        fail(f"aten.embedding: weight must be rank 2, got {fmt_shape(w)}")
    return tuple(idx) + (w[1],)


def _embedding_backward_shape(shapes, attrs, cx):
    g, idx = shapes
    if len(g) != len(idx) + 1:
        fail(f"aten.embedding_dense_backward: grad_output {fmt_shape(g)} is not indices {fmt_shape(idx)} "
             f"plus an embedding dim")
    _check_same("aten.embedding_dense_backward", tuple(g[:-1]), tuple(idx), cx,
                "grad_output leading dims and indices shape")
    return (S.norm(attrs["num_weights"]), g[-1])


def _embedding_backward_ref(xs, attrs):
    g, idx = xs
    n, pad = int(attrs["num_weights"]), int(attrs["padding_idx"])
    g = g.reshape(-1, g.shape[-1])
    idx = idx.reshape(-1).astype(np.int64)
    if attrs["scale_grad_by_freq"]:
        g = g / np.bincount(idx, minlength=n)[idx][:, None]
    keep = idx != pad
    out = np.zeros((n, g.shape[1]), dtype=g.dtype)
    np.add.at(out, idx[keep], g[keep])
    return out


def _index_parts(name, shapes, absent, extra: int):
    """(self, [index or None ...], trailing inputs) of index.Tensor / index_put."""
    full = _optional(name, shapes, absent)
    if full[0] is None or any(t is None for t in full[len(full) - extra:]):
        fail(f"{name}: only entries of indices may be absent")
    return full[0], full[1:len(full) - extra], full[len(full) - extra:]


def _indexed_shape(name, x, idx, cx):
    """Shape of x[idx] under numpy/torch advanced indexing (integer index tensors)."""
    if len(idx) > len(x):
        fail(f"{name}: {len(idx)} indices for a rank-{len(x)} tensor")
    present = [i for i, t in enumerate(idx) if t is not None]
    if not present:
        return tuple(x)
    b = broadcast(name, [idx[i] for i in present], cx)
    rest = [d for i, d in enumerate(x[:len(idx)]) if idx[i] is None]
    tail = list(x[len(idx):])
    if present == list(range(present[0], present[-1] + 1)):  # adjacent: the index dims replace them in place
        return tuple(x[:present[0]]) + b + tuple(x[present[-1] + 1:])
    return b + tuple(rest) + tuple(tail)


def _index_key(idx):
    return tuple(slice(None) if t is None else t for t in idx)


def _index_shape(shapes, attrs, cx):
    x, idx, _ = _index_parts("aten.index.Tensor", shapes, attrs["absent"], 0)
    return _indexed_shape("aten.index.Tensor", x, idx, cx)


def _rows_of(w, ids):
    """Row indices of an embedding lookup: torch raises for an id outside [0, rows) (NumPy would wrap -1)."""
    ids = np.asarray(ids).astype(np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= w.shape[0]):
        raise IndexError(f"embedding: id outside [0, {w.shape[0]})")
    return ids


def _index_ref(xs, attrs):
    x, idx, _ = _index_parts("aten.index.Tensor", xs, attrs["absent"], 0)
    return np.asarray(x[_index_key(idx)])


def _index_put_shape(shapes, attrs, cx):
    name = "aten.index_put"
    x, idx, (v,) = _index_parts(name, shapes, attrs["absent"], 1)
    sub = _indexed_shape(name, x, idx, cx)
    broadcasts_to(name, v, sub, cx, "values")
    return tuple(x)


def _index_put_ref(xs, attrs):
    x, idx, (v,) = _index_parts("aten.index_put", xs, attrs["absent"], 1)
    out = x.copy()
    key = _index_key(idx)
    if attrs["accumulate"]:
        np.add.at(out, key, np.broadcast_to(v, out[key].shape))
    else:
        out[key] = v
    return out


def _selected_shape(name, x, idx, dim):
    """Shape of x's entries along dim at a rank-0/1 index (index_select; what index_add adds)."""
    d = _dim(name, dim, len(x))
    if len(idx) > 1:
        fail(f"{name}: index must be rank 0 or 1, got {fmt_shape(idx)}")
    out = list(x)
    if x:
        out[d] = idx[0] if idx else 1
    return tuple(out)


def _index_select_shape(shapes, attrs, cx):
    x, idx = shapes
    return _selected_shape("aten.index_select", x, idx, attrs["dim"])


def _index_select_ref(xs, attrs):
    x, idx = xs
    if x.ndim == 0:
        return x.copy()
    return np.take(x, idx.reshape(-1), axis=_dim("aten.index_select", attrs["dim"], x.ndim))


def _gather_shape(shapes, attrs, cx):
    x, idx = shapes
    d = _dim("aten.gather", attrs["dim"], len(x))
    if len(idx) != len(x):
        fail(f"aten.gather: index {fmt_shape(idx)} and self {fmt_shape(x)} differ in rank")
    for i, (a, b) in enumerate(zip(idx, x)):
        if i != d and not cx.prove("<=", a, b):
            fail(f"aten.gather: index {fmt_shape(idx)} exceeds self {fmt_shape(x)} on dim {i}")
    return tuple(idx)


def _gather_ref(xs, attrs):
    x, idx = xs
    if x.ndim == 0:
        return x.copy()
    d = _dim("aten.gather", attrs["dim"], x.ndim)
    x = x[tuple(slice(None) if i == d else slice(0, n) for i, n in enumerate(idx.shape))]
    return np.take_along_axis(x, idx.astype(np.int64), axis=d)


def _scatter_add_shape(shapes, attrs, cx):
    x, idx, src = shapes
    d = _dim("aten.scatter_add", attrs["dim"], len(x))
    if not len(idx) == len(x) == len(src):
        fail(f"aten.scatter_add: self {fmt_shape(x)}, index {fmt_shape(idx)} and src {fmt_shape(src)} "
             f"differ in rank")
    for i in range(len(x)):
        if not cx.prove("<=", idx[i], src[i]) or (i != d and not cx.prove("<=", idx[i], x[i])):
            fail(f"aten.scatter_add: index {fmt_shape(idx)} exceeds src {fmt_shape(src)} or self "
                 f"{fmt_shape(x)} on dim {i}")
    return tuple(x)


def _scatter_add_ref(xs, attrs):
    x, idx, src = xs
    out = x.copy()
    if x.ndim == 0:
        return out + src
    d = _dim("aten.scatter_add", attrs["dim"], x.ndim)
    coords = list(np.indices(idx.shape))
    coords[d] = idx.astype(np.int64)
    np.add.at(out, tuple(coords), src[tuple(slice(0, n) for n in idx.shape)])
    return out


def _scatter_src_ref(xs, attrs):
    x, idx, src = xs
    out = x.copy()
    if x.ndim == 0:
        return src.copy()
    d = _dim("aten.scatter.src", attrs["dim"], x.ndim)
    coords = list(np.indices(idx.shape))
    coords[d] = idx.astype(np.int64)
    out[tuple(coords)] = src[tuple(slice(0, n) for n in idx.shape)]  # (torch leaves repeated indices unspecified)
    return out


def _one_hot_shape(shapes, attrs, cx):
    if attrs["num_classes"] < 0:
        fail("aten.one_hot: num_classes=-1 gives a data-dependent shape; pass num_classes")
    return tuple(shapes[0]) + (attrs["num_classes"],)


def _one_hot_ref(xs, attrs):
    x = xs[0].astype(np.int64)
    n = attrs["num_classes"]
    if n < 0:
        n = int(x.max()) + 1 if x.size else 0
    return (x[..., None] == np.arange(n)).astype(np.int64)



def _nonzero_ref(xs, attrs):
    out = np.argwhere(xs[0]).astype(np.int64)
    n = attrs["count"]
    if isinstance(n, int) and n != len(out):  # a size symbol gets its value from the data (replay binds it)
        fail(f"aten.nonzero: {len(out)} nonzero entries where the graph says {n}")
    return out


def _index_add_shape(shapes, attrs, cx):
    x, idx, src = shapes
    want = _selected_shape("aten.index_add", x, idx, attrs["dim"])
    if len(src) != len(want) or any(not cx.prove("==", a, b) for a, b in zip(src, want)):
        fail(f"aten.index_add: source {fmt_shape(src)} does not fit self {fmt_shape(x)} at index {fmt_shape(idx)}")
    return tuple(x)


def _index_add_ref(xs, attrs):
    x, idx, src = xs
    out = x.astype(np.result_type(x, src), copy=True)
    d = _dim("aten.index_add", attrs["dim"], max(x.ndim, 1))
    key = [slice(None)] * x.ndim
    key[d] = idx.reshape(-1).astype(np.int64)
    np.add.at(out, tuple(key), _n(attrs["alpha"]) * src)
    return out


def _scatter_value_shape(shapes, attrs, cx):
    x, idx = shapes
    d = _dim("aten.scatter.value", attrs["dim"], len(x))
    if len(idx) != len(x):
        fail(f"aten.scatter.value: index {fmt_shape(idx)} and self {fmt_shape(x)} differ in rank")
    for i in range(len(x)):
        if i != d and not cx.prove("<=", idx[i], x[i]):
            fail(f"aten.scatter.value: index {fmt_shape(idx)} exceeds self {fmt_shape(x)} on dim {i}")
    return tuple(x)


def _scatter_value_ref(xs, attrs):
    x, idx = xs
    out = x.copy()
    if x.ndim == 0:
        return np.full_like(out, _n(attrs["value"]))
    coords = list(np.indices(idx.shape))
    coords[_dim("aten.scatter.value", attrs["dim"], x.ndim)] = idx.astype(np.int64)
    out[tuple(coords)] = _n(attrs["value"])
    return out


OPS = [
    OpDef("aten.embedding", 2, _embedding_shape, lambda xs, a: xs[0][_rows_of(xs[0], xs[1])],
          (AttrSpec("padding_idx", "scalar", -1), AttrSpec("scale_grad_by_freq", "bool", False),
           AttrSpec("sparse", "bool", False)),
          doc="Rows of weight picked by indices: weight[indices] (padding_idx etc. only affect the gradient).",
          data_movement=True, index_domain=((1, 0, 0, False),)),
    OpDef("aten.embedding_dense_backward", 2, _embedding_backward_shape, _embedding_backward_ref,
          (AttrSpec("num_weights", "scalar"), AttrSpec("padding_idx", "scalar"),
           AttrSpec("scale_grad_by_freq", "bool")),
          doc="Gradient of embedding: grad rows summed into [num_weights, D] by index (padding_idx rows "
              "skipped, optionally divided by index frequency)."),
    OpDef("aten.index.Tensor", None, _index_shape, _index_ref, (ABSENT,),
          doc="Advanced indexing self[i0, i1, ...] with integer index tensors (absent = full slices), "
              "numpy/torch placement of the broadcast index dims."),
    OpDef("aten.index_put", None, _index_put_shape, _index_put_ref,
          (AttrSpec("accumulate", "bool", False), ABSENT),
          doc="Copy of self with self[indices] = values (+= with accumulate; absent = full slices)."),
    OpDef("aten.index_select", 2, _index_select_shape, _index_select_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Entries of self along dim at a rank-0/1 index.", data_movement=True,
          index_domain=((1, 0, "dim", False),)),
    OpDef("aten.gather", 2, _gather_shape, _gather_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("sparse_grad", "bool", False)),
          doc="out[i][j] = self[index[i][j]][j] (for dim 0; index-shaped).", rowwise=RowWise("dim", (0, 1), index=(1,)),
          data_movement=True, index_domain=((1, 0, "dim", False),)),
    OpDef("aten.scatter_add", 3, _scatter_add_shape, _scatter_add_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Copy of self with src added at index along dim (out[index[i][j]][j] += src[i][j] for dim 0).",
          linear=((0, 2),), index_domain=((1, 0, "dim", False),)),
    OpDef("aten.nonzero", 1, lambda shapes, a, cx: (a["count"], len(shapes[0])), _nonzero_ref,
          (AttrSpec("count", "scalar"),), dtype=_int64, data_sizes=(("count", 0),),
          doc="Coordinates of the nonzero entries, one row each in row-major order: [count, rank] (count: a "
              "size the data decides, the captured symbol)."),
    OpDef("aten.index_add", 3, _index_add_shape, _index_add_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("alpha", "number", 1)),
          doc="Copy of self with alpha * source added at index along dim (repeated indices accumulate).",
          linear=((0, 2),), index_domain=((1, 0, "dim", False),)),
    OpDef("aten.scatter.src", 3, _scatter_add_shape, _scatter_src_ref, (AttrSpec("dim", "int", dim_of=0),),
          doc="Copy of self with src written at index along dim (out[index[i][j]][j] = src[i][j] for dim 0).",
          index_domain=((1, 0, "dim", False),)),
    OpDef("aten.one_hot", 1, _one_hot_shape, _one_hot_ref, (AttrSpec("num_classes", "int", -1),),
          doc="One-hot int64 encoding with num_classes classes (a trailing dim).", dtype=_int64),
    OpDef("aten.scatter.value", 2, _scatter_value_shape, _scatter_value_ref,
          (AttrSpec("dim", "int", dim_of=0), AttrSpec("value", "number")),
          doc="Copy of self with value written at index along dim (out[index[i][j]][j] = value for dim 0).",
          dtype=_with_scalar("value")),
]
