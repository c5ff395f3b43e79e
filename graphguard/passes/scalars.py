"""A tensor op applied to a constant that is a number in disguise -- ``x * c``, ``c * x``, ``x / c`` with c a
``scalar_tensor`` -- becomes its scalar form, ``mul.Scalar(x, other=c)`` / ``mul.Scalar(x, other=1 / c)``
(:attr:`OpDef.scalar_form`), so every factor of a graph is one op whose factors fold (403, 553). Lemmas 400-402
state the same in the e-graph, but keep the tensor form beside it: there a factor moved out of ``x * c``
(1204 on ``scale(y, 1/2) * c``) makes a new class ``y * c`` next to ``y`` and ``2 y``, and an all-reduce of
``2 x`` taken back by ``/ 2`` grows ``4 x``, ``8 x``, ... without end. Checked by the fuzzer
(:func:`graphguard.engine.fuzz.check_scalar_form`)."""
from __future__ import annotations

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry, normalize_attrs
from ..ir.values import filled_with, holds
from .identities import binary_nodes


def scalar_forms(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """Turn every op applied to a constant that its ``scalar_form`` reads as a number into that scalar op of the
    other operand (``x * c`` -> ``mul.Scalar(x, other=c)``); the number of nodes changed."""
    changed = 0
    for n, op, out in binary_nodes(g, reg, "scalar_form"):
        for pos, name, attr, power in op.scalar_form:
            other = g.tensors[n.inputs[1 - pos]]
            sop = reg.get(name)
            c = filled_with(g, reg, n.inputs[pos])
            if sop is None or not holds(g.tensors[n.inputs[pos]].dtype, c) or (power < 0 and c == 0):
                continue
            if other.shape != out.shape or not str(other.dtype).startswith(("float", "bfloat")):
                continue
            attrs = dict(normalize_attrs(sop, {attr: c ** power}, g.where(n)))
            if (sop.dtype([other.dtype], attrs) if sop.dtype else other.dtype) != out.dtype:
                continue
            g.rewrite(n, op=name, inputs=[other.name], attrs=attrs)
            changed += 1
            break
    g.revalidate(reg, cx)
    return changed
