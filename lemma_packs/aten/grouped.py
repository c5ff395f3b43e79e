"""Grouped matrix products: ``aten._grouped_mm``, the kernel of mixture-of-experts layers that run every
expert's tokens in one call (HF transformers' default ``grouped_mm`` experts in bfloat16, torchtitan's
MoE), and the gather that puts their rows back in token order. Their lemmas:
``products.py`` (1900-1903), ``indexing.py`` (1904).

``_grouped_mm(x, w, offs)`` with ``x [S, K]`` (rows sorted by expert) and ``w [E, K, N]``: group ``g`` is the
rows ``offs[g - 1]:offs[g]`` (``offs[-1]`` read as 0), multiplied by ``w[g]``. The offsets are data (a cumulative
histogram of the routing), the same tensor on every rank where the routing is replicated. Its backward adds
the form ``_grouped_mm(a, b, offs)`` with ``a [K, S]``, ``b [S, N]``: ``out[g] = a[:, s_g:e_g] @ b[s_g:e_g]``
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
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

from .ops import ABSENT, _optional, _same


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


OPS = [
    OpDef(_NAME, None, _shape, _ref, (AttrSpec("out_dtype", "str", optional=True), ABSENT), dtype=_dtype,
          doc="Grouped matrix product: x [S, K] by w [E, K, N], group g the rows offs[g-1]:offs[g] times w[g] "
              "(rows past offs[-1] undefined); x [K, S] by y [S, N]: out[g] = x[:, group] @ y[group].",
          linear=(0, 1)),
]
