"""What a graph's constants hold: a number attribute as a value, the value a fill op writes, whether a dtype
holds a number exactly, the identity elements an op declares, the value ranges stated inputs carry forward.
Read by the graph passes (:mod:`graphguard.passes`), the fuzzer and the labels' propagation."""
from __future__ import annotations

from fractions import Fraction

from .graph import Graph
from .ops import Registry


def number(v) -> float | Fraction | None:
    """A number attribute as a value (exact where rational), None where it is symbolic or not a number."""
    if isinstance(v, bool):
        return Fraction(int(v))
    if isinstance(v, (int, float, Fraction)):
        return v
    try:
        return Fraction(str(v))
    except (ValueError, ZeroDivisionError):
        try:
            return float(str(v))
        except ValueError:
            return None


def filled_with(g: Graph, reg: Registry, t: str):
    """The value every entry of ``t`` holds, where ``t`` comes from a fill op (a constant); else None."""
    node = g.producer.get(t)
    op = reg.get(node.op) if node is not None else None
    if op is None or not op.fill or node.inputs:
        return None
    return number(node.attrs.get(op.fill))


def identities(op, attrs: dict) -> list[tuple[int, object]]:
    """(input, value) of each identity declaration of ``op`` that holds under ``attrs``: that input filled with
    that value makes the op return its other input."""
    return [(pos, value) for pos, value, fixed in op.identity
            if all(number(attrs.get(k)) == v for k, v in fixed.items())]


# the integer dtypes a constant may hold a factor in (their exclusive bound)
EXACT_INTS = {"int64": 1 << 63, "int32": 1 << 31}
MANTISSA = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
MIN_EXP = {"float64": -1022, "float32": -126, "float16": -14, "bfloat16": -126}  # smallest normal exponent
MAX_EXP = {"float64": 1023, "float32": 127, "float16": 15, "bfloat16": 127}


def holds(dtype: str | None, value) -> bool:
    """A constant of ``dtype`` filled with ``value`` holds exactly that number (a normal float of the dtype's
    precision, or an integer in range); None: torch's default dtype, float32."""
    if not isinstance(value, Fraction):
        return False  # inf, nan
    dtype = dtype or "float32"
    if dtype in EXACT_INTS:
        return value.denominator == 1 and abs(value) < EXACT_INTS[dtype]
    if dtype not in MANTISSA:
        return False
    if value == 0:
        return True
    n, d = abs(value.numerator), value.denominator
    if d & (d - 1):
        return False  # not a dyadic rational
    e = n.bit_length() - d.bit_length()  # 2**e <= |value| < 2**(e + 1)
    if e < MIN_EXP[dtype] or e > MAX_EXP[dtype]:
        return False
    return (value * Fraction(2) ** (MANTISSA[dtype] - 1 - e)).denominator == 1


def value_ranges(g: Graph, ranges: dict[str, tuple[int, int]], reg) -> dict[str, tuple[int, int]]:
    """The stated value ranges of ``g``'s inputs carried forward through data movement (every output entry a
    copy of an entry of input 0) and concat/identity: the tensors holding only values of ranged inputs."""
    if not ranges:
        return {}
    out = dict(ranges)
    for n in g.topo_order():
        op = reg.get(n.op)
        if op is None or len(n.outputs) != 1:
            continue
        if op.data_movement:
            ins = [out.get(n.inputs[0])] if n.inputs else [None]
        elif n.op in ("core.concat", "core.identity"):
            ins = [out.get(i) for i in n.inputs]
        else:
            continue
        if ins and None not in ins:
            out[n.outputs[0]] = (min(r[0] for r in ins), max(r[1] for r in ins))
    return out
