"""Shapes and NumPy values of terms, given shapes/values of their leaves."""
from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ShapeError
from .expr import App, Leaf, Term
from .ops import Registry, Shape
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
