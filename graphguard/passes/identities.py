"""An operator applied to its identity element -- ``x + 0``, ``0 + x``, ``x * 1``, ``x / 1``, as in a partial sum
started from ``x.new_zeros(shape)`` -- returns its other operand. Its op declares which input and value
(:attr:`OpDef.identity`), the constant's op that every entry is its number attribute (:attr:`OpDef.fill`);
the node becomes a ``core.identity`` of the other operand where the operand and the result have one shape (the
constant, not 0-dim, broadcast to it: ``x + zeros(1, n)``) and the operand's dtype is the result's (no type
promotion). Done on the graphs,
not as an e-graph rule: ``x = x + 0`` would put ``x`` inside its own class and every rule about ``+`` would
grow terms around it without end. The fuzzer checks each declaration
(:func:`graphguard.engine.fuzz.check_identity`)."""
from __future__ import annotations

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry
from ..ir.values import filled_with, identities


def binary_nodes(g: Graph, reg: Registry, declaration: str):
    """(node, its op, its output's info) for every two-input, one-output node whose op declares ``declaration``
    (``identity`` or ``scalar_form``)."""
    for n in g.nodes:
        op = reg.get(n.op)
        if op is not None and getattr(op, declaration) and len(n.inputs) == 2 and len(n.outputs) == 1:
            yield n, op, g.tensors[n.outputs[0]]


def drop_identities(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to its identity element into ``core.identity`` of the other operand; the number
    of nodes changed."""
    changed = 0
    for n, op, out in binary_nodes(g, reg, "identity"):
        for pos, value in identities(op, n.attrs):
            other = g.tensors[n.inputs[1 - pos]]
            if not _same_shape(cx, other.shape, out.shape) or other.dtype != out.dtype or not g.shape(n.inputs[pos]):
                continue  # (a 0-dim constant stays: lemmas 407/408 and the vocabulary masks' patterns read it)
            # (a constant of fewer or size-1 dims broadcast to the operand's shape is the identity in every entry)
            if filled_with(g, reg, n.inputs[pos]) != value:
                continue
            g.rewrite(n, op="core.identity", inputs=[other.name], attrs={})
            changed += 1
            break
    g.revalidate(reg, cx)
    return changed


def _same_shape(cx: S.Constraints, a, b) -> bool:
    """Shapes ``a`` and ``b`` provably equal (a broadcast's symbolic size, ``max(B, 1)``, is ``B``)."""
    return len(a) == len(b) and all(x == y or cx.prove("==", x, y) for x, y in zip(a, b))
