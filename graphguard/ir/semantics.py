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


def term_dtype(t: Term, leaf_dtype: Callable[[str], str], reg: Registry, memo: dict | None = None) -> str:
    """The dtype of a term by the ops' dtype rules (an op without one: its first input's, else float32)."""
    memo = {} if memo is None else memo
    hit = memo.get(t)
    if hit is not None:
        return hit
    if isinstance(t, Leaf):
        out = leaf_dtype(t.name)
    else:
        assert isinstance(t, App)
        op = reg.get(t.op)
        ins = [term_dtype(a, leaf_dtype, reg, memo) for a in t.args]
        out = op.dtype(ins, t.attrd) if op.dtype is not None else (ins[0] if ins else "float32")
    memo[t] = out
    return out
