"""What a graph's constants hold: a number attribute as a value, the value a fill op writes, whether a dtype
holds a number exactly, the identity elements an op declares, the value ranges stated inputs carry forward.
Read by the graph passes (:mod:`graphguard.passes`), the fuzzer and the labels' propagation."""
from __future__ import annotations

from fractions import Fraction

from .graph import Graph
from .ops import Registry
from .relation import RANGE_KEEPING


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


def implied_ranges(g: Graph, reg: Registry) -> dict[str, tuple[int, int, str]]:
    """The value ranges ``g``'s own operators imply for its integer inputs: an op declaring ``index_domain`` is
    undefined unless its index lies in [0, n) ([-n, n) where negative indices count from the end), so a
    program that computes anything at all reads only such inputs -- every entry of an input reached from the
    index through ops that keep every entry of their inputs (:data:`graphguard.ir.relation.RANGE_KEEPING`, the
    ops a stated range is carried through) lies there. Returns input ->
    (lo, hi, why); an input several ops index gets the intersection. Sizes must be known integers."""
    out: dict[str, tuple[int, int, str]] = {}
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.index_domain:
            continue
        for index, table, dim, negative in op.index_domain:
            if index >= len(n.inputs) or table >= len(n.inputs):
                continue
            shape = g.shape(n.inputs[table])
            d = dict(n.attrs).get(dim) if isinstance(dim, str) else dim
            if not isinstance(d, int) or isinstance(d, bool) or not -len(shape) <= d < max(len(shape), 1):
                continue
            size = shape[d % max(len(shape), 1)] if shape else 1
            try:
                size = int(size)
            except (TypeError, ValueError):
                continue  # a symbolic size: no integer range to state
            lo, hi = (-size if negative else 0), size
            where = f" at {n.source_text()}" if n.source_text() else ""
            why = (f"{n.op} ('{n.name}'{where}) indexes dim {d % max(len(shape), 1)} of '{n.inputs[table]}' "
                   f"(size {size}) with it: undefined outside [{lo}, {hi})")
            stack, seen = [n.inputs[index]], set()
            while stack:
                t = stack.pop()
                if t in seen:
                    continue
                seen.add(t)
                if t in g.inputs:
                    if not str(g.tensors[t].dtype).startswith(("int", "uint")):
                        continue
                    old = out.get(t)
                    if old is None:
                        out[t] = (lo, hi, why)
                    elif max(old[0], lo) < min(old[1], hi):
                        out[t] = (max(old[0], lo), min(old[1], hi), old[2] if (old[0], old[1]) ==
                                  (max(old[0], lo), min(old[1], hi)) else why)
                    continue
                p = g.producer.get(t)
                if p is not None and p.op in RANGE_KEEPING:
                    stack.extend(p.inputs)
    return out
