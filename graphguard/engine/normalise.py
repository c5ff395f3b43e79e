"""Graph normal forms applied before proving.

An operator applied to its identity element -- ``x + 0``, ``0 + x``, ``x * 1``, ``x / 1``, as in a partial sum
started from ``x.new_zeros(shape)`` -- returns its other operand. Its op declares which input and value
(:attr:`OpDef.identity`), the constant's op that every entry is its number attribute (:attr:`OpDef.fill`);
the node becomes a ``core.identity`` of the other operand where the constant, the operand and the result
have one shape and the operand's dtype is the result's (no broadcast, no type promotion). Done on the graphs,
not as an e-graph rule: ``x = x + 0`` would put ``x`` inside its own class and every rule about ``+`` would
grow terms around it without end. The fuzzer checks each declaration
(:func:`graphguard.engine.fuzz.check_identity`).
"""
from __future__ import annotations

from fractions import Fraction

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry


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


def drop_identities(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to its identity element into ``core.identity`` of the other operand; the number
    of nodes changed (the graph is validated again where any was)."""
    changed = 0
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.identity or len(n.inputs) != 2 or len(n.outputs) != 1:
            continue
        out = g.tensors[n.outputs[0]]
        for pos, value, fixed in op.identity:
            other = g.tensors[n.inputs[1 - pos]]
            if any(number(n.attrs.get(k)) != v for k, v in fixed.items()):
                continue
            if other.shape != out.shape or other.dtype != out.dtype or g.shape(n.inputs[pos]) != out.shape:
                continue  # (a 0-dim constant stays: lemmas 407/408 and the vocabulary masks' patterns read it)
            if filled_with(g, reg, n.inputs[pos]) != value:
                continue
            n.op, n.inputs, n.attrs = "core.identity", [other.name], {}
            changed += 1
            break
    if changed:
        g.validate(reg, cx)
    return changed
