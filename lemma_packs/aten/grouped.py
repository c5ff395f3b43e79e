"""Grouped matrix products: ``aten._grouped_mm``, the kernel of mixture-of-experts layers that run every
expert's tokens in one call (HF transformers' default ``grouped_mm`` experts in bfloat16, torchtitan's
MoE), and the gather that puts their rows back in token order. References: 1900-1909.

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

from graphguard.ir.lemma import L
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

from .ops import ABSENT, _optional, _same

NUMBERS = range(1900, 1910)  # this file's lemma numbers (the plugin loader refuses others)

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

_G = "absent=[3]"  # offsets given, no bias
_OFFS = {"o": "size(?x, 0) + 1"}
_OFFS_T = {"o": "size(?x, 1) + 1"}

LEMMAS = [
    L(1900, "grouped-mm-cols",
      f"aten._grouped_mm(?x, concat(?a, ?b, dim=2), ?o, {_G})"
      f" => concat(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?x, ?b, ?o, {_G}), dim=1)",
      "rank(?x) == 2 and rank(?a) == 3", index=_OFFS,
      examples=[{"x": [6, 4], "a": [3, 4, 2], "b": [3, 4, 3], "o": [3]},
                {"x": [5, 2], "a": [2, 2, 1], "b": [2, 2, 2], "o": [2]}]),
    L(1901, "grouped-mm-block-k",
      f"aten._grouped_mm(concat(?x, ?y, dim=1), concat(?a, ?b, dim=1), ?o, {_G})"
      f" => sum(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?y, ?b, ?o, {_G}))",
      "rank(?x) == 2 and rank(?a) == 3 and size(?x, 1) == size(?a, 1)", index=_OFFS,
      examples=[{"x": [6, 2], "y": [6, 3], "a": [3, 2, 4], "b": [3, 3, 4], "o": [3]},
                {"x": [4, 1], "y": [4, 1], "a": [2, 1, 2], "b": [2, 1, 2], "o": [2]}]),
    L(1902, "grouped-mm-weight-grad-rows",
      f"aten._grouped_mm(concat(?a, ?b, dim=0), ?y, ?o, {_G})"
      f" => concat(aten._grouped_mm(?a, ?y, ?o, {_G}), aten._grouped_mm(?b, ?y, ?o, {_G}), dim=1)",
      "rank(?a) == 2 and rank(?y) == 2", index={"o": "size(?a, 1) + 1"},
      examples=[{"a": [2, 6], "b": [3, 6], "y": [6, 4], "o": [3]},
                {"a": [1, 4], "b": [2, 4], "y": [4, 2], "o": [2]}]),
    L(1903, "grouped-mm-weight-grad-cols",
      f"aten._grouped_mm(?x, concat(?a, ?b, dim=1), ?o, {_G})"
      f" => concat(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?x, ?b, ?o, {_G}), dim=2)",
      "rank(?x) == 2 and rank(?a) == 2", index=_OFFS_T,
      examples=[{"x": [3, 6], "a": [6, 2], "b": [6, 3], "o": [3]},
                {"x": [2, 4], "a": [4, 1], "b": [4, 2], "o": [2]}]),
    # the experts' outputs, each rank's partial sum, put back in token order: a gather of rows is linear
    L(1904, "index-rows-of-partial-sum",
      "aten.index.Tensor(sum(?a, ?b), ?i, absent=[]) => sum(aten.index.Tensor(?a, ?i, absent=[]),"
      " aten.index.Tensor(?b, ?i, absent=[]))",
      "floating(dtype(?a)) and rank(?a) >= 1", index={"i": "size(?a, 0)"},
      examples=[{"a": [6, 4], "b": [6, 4], "i": [6]}, {"a": [3, 2, 2], "b": [3, 2, 2], "i": [2, 2]}]),
]
