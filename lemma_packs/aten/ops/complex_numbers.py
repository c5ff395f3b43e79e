"""Complex numbers: ``polar``, ``_conj``, ``view_as_complex``, ``view_as_real`` (RoPE as a complex rotation:
DeepSeek-V2, Llama-4)."""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import OpDef, fail, fmt_shape

from .helpers import _bin, _un


_COMPLEX_OF = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


def _to_complex_dtype(name):
    def f(ds, a):
        if ds[0] not in _COMPLEX_OF:
            fail(f"{name}: needs a float16, float32 or float64 input, got {ds[0]}")
        return _COMPLEX_OF[ds[0]]
    return f


def _polar_dtype(ds, a):
    if len(set(ds)) != 1:
        fail(f"aten.polar: abs and angle must have one dtype, got {ds[0]} and {ds[1]}")
    return _to_complex_dtype("aten.polar")(ds, a)


def _view_as_complex_shape(shapes, a, cx):
    x = shapes[0]
    if not x or not cx.prove("==", x[-1], 2):
        fail(f"aten.view_as_complex: the last dim of {fmt_shape(x)} must be 2 (real and imaginary parts)")
    return tuple(x[:-1])


def _view_as_real_dtype(ds, a):
    if ds[0] not in _REAL_OF:
        fail(f"aten.view_as_real: needs a complex input, got {ds[0]}")
    return _REAL_OF[ds[0]]


OPS = [
    _bin("polar", lambda r, t, a: r * np.cos(t) + 1j * (r * np.sin(t)),
         "The complex number abs * (cos(angle) + i sin(angle)) (broadcasting).", dtype=_polar_dtype),
    _un("_conj", lambda x, a: np.conj(x), "Complex conjugate (real tensors unchanged).", linear=(0,)),
    OpDef("aten.view_as_complex", 1, _view_as_complex_shape,
          lambda xs, a: xs[0][..., 0] + 1j * xs[0][..., 1],
          doc="Pairs along the last dim (of size 2) read as complex numbers (real, imaginary).",
          dtype=_to_complex_dtype("aten.view_as_complex")),
    OpDef("aten.view_as_real", 1, lambda shapes, a, cx: tuple(shapes[0]) + (2,),
          lambda xs, a: np.stack([np.real(xs[0]), np.imag(xs[0])], -1),
          doc="Complex entries as (real, imaginary) pairs along a new last dim of size 2.",
          dtype=_view_as_real_dtype),
]
