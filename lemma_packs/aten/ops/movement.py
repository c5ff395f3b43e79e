"""Data movement beyond the clean dialect's views: ``expand`` and ``repeat`` (copies along new or size-1 dims),
``flip`` and ``roll`` (entries reordered along dims). Flip along a cut dim, which no declared property states,
has its own lemma (``views_movement.py``, 1250)."""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, RowWise, fail, fmt_shape

from .helpers import _conc, _dims, _same


def _expand_shape(shapes, attrs, cx):
    x, size = shapes[0], attrs["size"]
    if len(size) < len(x):
        fail(f"aten.expand: size {fmt_shape(size)} has fewer dims than self {fmt_shape(x)}")
    lead = len(size) - len(x)
    out = []
    for i, s in enumerate(size):
        if i < lead:
            if _same(cx, s, -1):
                fail(f"aten.expand: -1 is not allowed for the new leading dim {i}")
            out.append(S.norm(s))
            continue
        d = x[i - lead]
        if _same(cx, s, -1) or _same(cx, s, d):
            out.append(S.norm(d))
        elif _same(cx, d, 1):
            out.append(S.norm(s))
        else:
            fail(f"aten.expand: cannot expand {fmt_shape(x)} to {fmt_shape(size)} (dim {i})")
    return tuple(out)


def _expand_ref(xs, a):
    x = xs[0]
    lead = len(a["size"]) - x.ndim
    shape = [int(x.shape[i - lead]) if i >= lead and int(s) == -1 else int(s) for i, s in enumerate(a["size"])]
    return np.broadcast_to(x, shape).copy()


def _repeat_shape(shapes, attrs, cx):
    x, reps = shapes[0], attrs["repeats"]
    if len(reps) < len(x):
        fail(f"aten.repeat: repeats {fmt_shape(reps)} has fewer dims than self {fmt_shape(x)}")
    padded = (1,) * (len(reps) - len(x)) + tuple(x)
    return tuple(S.norm(S.sym(d) * S.sym(r)) for d, r in zip(padded, reps))


def _flip_shape(shapes, attrs, cx):
    _dims("aten.flip", attrs["dims"], len(shapes[0])) if attrs["dims"] else None
    return tuple(shapes[0])


def _roll_shape(shapes, attrs, cx):
    x, shifts, dims = shapes[0], attrs["shifts"], attrs["dims"]
    if dims:
        _dims("aten.roll", dims, len(x))
    if (len(shifts) != len(dims)) if dims else len(shifts) != 1:
        fail(f"aten.roll: {len(shifts)} shift(s) for dims {list(dims)}")
    return tuple(x)


def _roll_ref(xs, a):
    x, dims = xs[0], a["dims"]
    shifts = [int(s) for s in a["shifts"]]
    if not dims:
        return np.roll(x, shifts[0])
    return np.roll(x, shifts, axis=tuple(dims))


OPS = [
    OpDef("aten.expand", 1, _expand_shape, _expand_ref,
          (AttrSpec("size", "scalars"), AttrSpec("implicit", "bool", False)),
          doc="Broadcast self to size (-1 keeps a dim; new dims lead).", broadcast=True, data_movement=True,
          broadcast_to="size"),
    OpDef("aten.repeat", 1, _repeat_shape, lambda xs, a: np.tile(xs[0], _conc(a["repeats"])),
          (AttrSpec("repeats", "scalars"),), doc="Tile self repeats[i] times along each dim (new dims lead).",
          data_movement=True, tiles="repeats"),
    OpDef("aten.flip", 1, _flip_shape, lambda xs, a: np.flip(xs[0], tuple(a["dims"])).copy() if a["dims"] else xs[0],
          (AttrSpec("dims", "ints", dim_of=0),), doc="Reverse the order of entries along dims.",
          data_movement=True, linear=(0,), rowwise=RowWise("dims")),
    OpDef("aten.roll", 1, _roll_shape, _roll_ref,
          (AttrSpec("shifts", "scalars"), AttrSpec("dims", "ints", (), dim_of=0)),
          doc="Shift entries cyclically by shifts along dims (no dims: along the flattened tensor).",
          data_movement=True, linear=(0,), rowwise=RowWise("dims")),
]
