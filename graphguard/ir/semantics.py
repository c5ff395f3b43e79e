"""Shapes and NumPy values of terms, given shapes/values of their leaves."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ShapeError
from .expr import App, Leaf, Term
from .ops import Registry, Shape, normalize_dims
from .scalar import Constraints


def term_shape(t: Term, leaf_shape: Callable[[str], Shape], reg: Registry, cx: Constraints,
               memo: dict | None = None) -> Shape:
    """Infer the shape of a term; raises ShapeError naming the op on a mismatch."""
    memo = {} if memo is None else memo
    hit = memo.get(t)
    if hit is not None:
        return hit
    if isinstance(t, Leaf):
        out = tuple(leaf_shape(t.name))
    elif isinstance(t, App):
        op = reg.get(t.op)
        if op is None:
            raise ShapeError(f"unknown operator {t.op}")
        if op.shape is None:
            raise ShapeError(f"{t.op} cannot appear inside an expression")
        shapes = [term_shape(a, leaf_shape, reg, cx, memo) for a in t.args]
        out = tuple(op.shape(shapes, t.attrd, cx))
    else:
        raise ShapeError(f"pattern variable {t} has no shape")
    memo[t] = out
    return out


def term_dtype(t: Term, leaf_dtype: Callable[[str], str], reg: Registry, memo: dict | None = None) -> str | None:
    """The dtype of a term by its ops' dtype rules (None where a rule leaves it to the call site); raises
    ShapeError where a clean op (concat, sum, slice...) would mix dtypes: clean ops keep their operands' one
    dtype."""
    memo = {} if memo is None else memo
    hit = memo.get(t)
    if hit is not None:
        return hit
    if isinstance(t, Leaf):
        out = leaf_dtype(t.name)
    elif isinstance(t, App):
        op = reg.get(t.op)
        if op is None:
            raise ShapeError(f"unknown operator {t.op}")
        ds = [term_dtype(a, leaf_dtype, reg, memo) for a in t.args]
        known = list(dict.fromkeys(d for d in ds if d is not None))
        if op.clean and op.dtype is None and len(known) > 1:  # data movement; sum/max promote like add
            raise ShapeError(f"{t.op} of {' and '.join(known)} tensors (it keeps its operands' dtype: convert "
                             f"them first)")
        if op.dtype is not None:
            out = None if None in ds else op.dtype(ds, t.attrd)
        else:
            out = known[0] if op.clean and known else ds[0] if ds else "float32"
    else:
        raise ShapeError(f"pattern variable {t} has no dtype")
    memo[t] = out
    return out


def term_eval(t: Term, env: Callable[[str], np.ndarray], reg: Registry, memo: dict | None = None) -> np.ndarray:
    """Evaluate a term with the NumPy references."""
    memo = {} if memo is None else memo
    hit = memo.get(t)
    if hit is not None:
        return hit
    if isinstance(t, Leaf):
        out = env(t.name)
    else:
        assert isinstance(t, App)
        op = reg.get(t.op)
        out = op.ref([term_eval(a, env, reg, memo) for a in t.args], t.attrd)
    memo[t] = out
    return out


def normalize_term(t: Term, leaf_shape: Callable[[str], Shape], reg: Registry, cx: Constraints,
                   memo: dict | None = None) -> Term:
    """``t`` with every dim attribute made non-negative against its operand's rank (as graphs are when
    loaded): relation terms and test expressions meet the e-graph's terms in one spelling."""
    if not isinstance(t, App):
        return t
    memo = {} if memo is None else memo
    args = tuple(normalize_term(a, leaf_shape, reg, cx, memo) for a in t.args)
    op = reg.get(t.op)
    attrs = t.attrs
    if op is not None and any(s.dim_of is not None for s in op.attrs):
        ranks = [len(term_shape(a, leaf_shape, reg, cx, memo)) for a in args]
        attrs = tuple(normalize_dims(op, dict(t.attrs), ranks).items())
    return t if args == t.args and attrs == t.attrs else App(t.op, args, attrs)


