"""What the aten pack's operator modules build their ops with: dims, broadcasting, optional inputs,
attribute values, result dtypes, and the builders of elementwise ops (``_bin``, ``_un``)."""
from __future__ import annotations

from fractions import Fraction

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, float_to_int, fmt_shape, promote
from graphguard.ir.ops import dtype_category as _cat


def _dim(name: str, d: int, rank: int) -> int:
    """Normalise a (possibly negative) dim; a rank-0 tensor accepts dim 0 / -1 as torch does."""
    r = max(rank, 1)
    if not -r <= d < r:
        fail(f"{name}: dim {d} out of range for a rank-{rank} tensor")
    return d % r


def _dims(name: str, dims, rank: int) -> tuple[int, ...]:
    """Normalised reduction dims; None or () mean every dim."""
    if not dims:
        return tuple(range(rank))
    out = tuple(_dim(name, d, rank) for d in dims)
    if len(set(out)) != len(out):
        fail(f"{name}: dim {list(dims)} repeats a dimension")
    return tuple(d for d in out if d < rank)


def _same(cx, a, b) -> bool:
    return cx.prove("==", a, b)


def broadcast(name: str, shapes, cx) -> tuple:
    """NumPy/torch broadcasting of several shapes (dims equal, or one of them provably 1)."""
    r = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(r):
        d = 1
        for s in shapes:
            j = len(s) - r + i
            if j < 0:
                continue
            x = s[j]
            if _same(cx, x, 1) or _same(cx, x, d):
                continue
            if _same(cx, d, 1):
                d = x
                continue
            fail(f"{name}: shapes {', '.join(fmt_shape(t) for t in shapes)} do not broadcast "
                 f"({S.text(d)} vs {S.text(x)} on dim {i})")
        out.append(S.norm(d))
    return tuple(out)


def broadcasts_to(name: str, s, target, cx, what: str = "operand") -> None:
    """``s`` broadcasts to ``target`` without changing it (each trailing dim of s is 1 or equal)."""
    k = len(target) - len(s)
    if k < 0 or not all(_same(cx, d, 1) or _same(cx, d, target[k + i]) for i, d in enumerate(s)):
        fail(f"{name}: {what} {fmt_shape(s)} does not broadcast to {fmt_shape(target)}")


def _check_same(name: str, a, b, cx, what: str = "shapes") -> None:
    if len(a) != len(b) or not all(_same(cx, x, y) for x, y in zip(a, b)):
        fail(f"{name}: {what} differ: {fmt_shape(a)} vs {fmt_shape(b)}")


def _optional(name: str, xs, absent, total: int | None = None) -> list:
    """Re-insert None for absent optional tensors: the full (flattened) tensor-argument list."""
    absent = set(absent or ())
    n = len(xs) + len(absent)
    if total is not None and n != total:
        fail(f"{name}: {len(xs)} input(s) and {len(absent)} absent position(s) do not make {total} "
             f"tensor arguments")
    if any(not 0 <= p < n for p in absent):
        fail(f"{name}: absent positions {sorted(absent)} out of range")
    it = iter(xs)
    return [None if i in absent else next(it) for i in range(n)]


def _n(v):
    """A number attribute as a Python value: integral Fractions become ints (exact integer maths)."""
    if isinstance(v, Fraction):
        return int(v) if v.denominator == 1 else float(v)
    if isinstance(v, (int, float)):
        return v
    return float(v)


def _integral(v) -> bool:
    return v is None or (isinstance(v, Fraction) and v.denominator == 1) or (isinstance(v, int))


def _conc(shape) -> list[int]:
    return [int(d) for d in shape]


def _np_dtype(d: str | None):
    """The NumPy dtype a reference computes in: float64 for every float dtype."""
    if d is None or _cat(d) == 2:
        return np.float64
    if d in ("bool", "pred"):
        return np.bool_
    try:
        return np.dtype(d)
    except TypeError:
        return np.int64


def _first(ds, a):
    return ds[0] if ds else "float32"


def _promoted(ds, a):
    return promote(*ds)


def _floating(ds, a):
    d = promote(*ds)
    return d if _cat(d) == 2 else "float32"


def _with_scalar(*keys):
    """Tensor op scalar: an integral tensor with a non-integral number becomes float32; bool with a number
    becomes int64."""
    def f(ds, a):
        d = ds[0]
        vals = [a.get(k) for k in keys]
        if _cat(d) < 2 and not all(_integral(v) for v in vals):
            return "float32"
        if _cat(d) == 0 and any(v is not None for v in vals):
            return "int64"
        return d
    return f


def _bool(ds, a):
    return "bool"


def _int64(ds, a):
    return "int64"


def _attr_dtype(default):
    """The ``dtype`` attribute when given, else ``default(ds, a)``."""
    def f(ds, a):
        return a.get("dtype") or default(ds, a)
    return f


def _float_only(name):
    """Ops torch defines for floating-point inputs and results only (mean, mse_loss): the result's dtype (the
    ``dtype`` attribute where given, else the input's)."""
    def f(ds, a):
        d = a.get("dtype") or (ds[0] if ds else "float32")
        if _cat(d) != 2:
            fail(f"aten.{name}: needs a floating-point input and result, got {d}")
        return d
    return f


def _acc_dtype(ds, a):
    """sum/cumsum without dtype: integral inputs accumulate in int64."""
    return "int64" if _cat(ds[0]) < 2 else ds[0]


def _cast(x, a, key="dtype"):
    d = a.get(key)
    return np.asarray(x) if d is None else float_to_int(x, _np_dtype(d))


DTYPE = AttrSpec("dtype", "str", optional=True)


ABSENT = AttrSpec("absent", "ints", default=())


def _bcast_shape(name):
    return lambda shapes, attrs, cx: broadcast(name, shapes, cx)


def _id_shape(shapes, attrs, cx):
    return tuple(shapes[0])


def _bin(name, fn, doc, dtype=_promoted, attrs=(), scaling=False, **props):
    """A binary elementwise op (broadcasting); ``props``: its other algebraic properties."""
    return OpDef(f"aten.{name}", 2, _bcast_shape(f"aten.{name}"), lambda xs, a: fn(xs[0], xs[1], a), attrs,
                 doc=doc, dtype=dtype, scaling=scaling, elementwise=(0, 1), broadcasting=True, **props)


def _un(name, fn, doc, dtype=None, attrs=(), **props):
    """A unary elementwise op."""
    return OpDef(f"aten.{name}", 1, _id_shape, lambda xs, a: fn(xs[0], a), attrs, doc=doc, dtype=dtype,
                 elementwise=(0,), **props)
