"""Which conversions between dtypes are exact: every value of the source dtype is a value of the target dtype.

A relation may state that a tensor of the implementation is the exact conversion of a specification input
(``convert(p@0, dtype=float16)``: :mod:`graphguard.ir.relation`), and a lemma may drop a round trip through a
wider dtype (``convert(convert(x, float32), float16)`` is ``x`` for a float16 ``x``); both hold only where the
conversion from the narrower dtype to the wider one loses nothing -- :func:`exact_conversion`, the one table.

Exact (``src -> dst``): the same dtype; ``bool`` to any integer or float dtype (0 and 1); an integer to a wider
integer of the same signedness, or unsigned to a wider signed one; an integer to a float whose significand holds
all its bits (``int8`` / ``uint8`` to ``float16``, ``bfloat16``; ``int16`` to ``float32``; ``int32`` to
``float64``); ``float16`` / ``bfloat16`` to ``float32`` / ``float64``, ``float32`` to ``float64``; the float8
formats to ``float32`` / ``float64``. Not exact: anything narrowing (``float32 -> float16``, ``float32 ->
bfloat16``, ``int64 -> int32``), ``float16 <-> bfloat16`` (each holds values the other does not: bfloat16's
range, float16's precision), a float to an integer, signed to unsigned, anything to ``bool``, complex dtypes.
"""
from __future__ import annotations

_INT_BITS = {"int4": 4, "int8": 8, "int16": 16, "int32": 32, "int64": 64}
_UINT_BITS = {"uint4": 4, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
# significand precision (bits, the implicit one included) of the floats an integer or another float widens to
_PRECISION = {"float16": 11, "bfloat16": 8, "float32": 24, "float64": 53}
_FLOAT_WIDENS = {"float16": ("float32", "float64"), "bfloat16": ("float32", "float64"), "float32": ("float64",)}
_FLOAT8 = ("float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e4m3", "float8_e8m0fnu")


def exact_conversion(src: str, dst: str) -> bool:
    """Is converting a ``src`` tensor to ``dst`` exact (every ``src`` value is a ``dst`` value)?"""
    if not isinstance(src, str) or not isinstance(dst, str):
        return False
    if src == dst:
        return True
    if src in ("bool", "pred"):
        return dst in _INT_BITS or dst in _UINT_BITS or dst in _PRECISION
    if src in _INT_BITS or src in _UINT_BITS:
        bits = _INT_BITS.get(src, 0) - 1 if src in _INT_BITS else _UINT_BITS[src]  # magnitude bits
        if dst in _INT_BITS:
            return _INT_BITS[dst] - 1 >= bits
        if dst in _UINT_BITS:
            return src in _UINT_BITS and _UINT_BITS[dst] >= bits
        return dst in _PRECISION and _PRECISION[dst] >= bits
    if src in _FLOAT8:
        return dst in ("float32", "float64")
    return dst in _FLOAT_WIDENS.get(src, ())


ROUNDED = ("float32", "float16", "float64")  # the float dtypes NumPy holds (bfloat16: none)


def rounded(v, dtype: str):
    """Number ``v`` (an int or Fraction) as a ``dtype`` tensor holds it -- rounded to nearest, as an exact
    Fraction; None for another dtype, another value (inf, nan) or a result that is not finite."""
    import numpy as np
    from fractions import Fraction
    if dtype not in ROUNDED or not isinstance(v, (int, Fraction)) or isinstance(v, bool):
        return None
    try:
        with np.errstate(over="ignore"):
            r = np.asarray(float(v), dtype=dtype)
    except OverflowError:  # (beyond float64)
        return None
    return Fraction(float(r)) if np.isfinite(r) else None
