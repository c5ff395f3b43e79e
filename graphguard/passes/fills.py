"""Constant fills (ops declaring :attr:`OpDef.fill`) in one form: their number rounded to their dtype, their
shape that of the broadcasting ops reading them where the other program does not broadcast."""
from __future__ import annotations

from fractions import Fraction

from ..ir import scalar as S
from ..ir.dtypes import rounded
from ..ir.graph import Graph
from ..ir.ops import Registry


def round_fills(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A constant fill (an op declaring ``fill``) of a float dtype holds its number rounded to that dtype: the
    attribute becomes that rounded value (``1e-6`` in float32 is 8796093/8796093022208 whether the program wrote
    the decimal or the float32), so two programs' constants of one value are one term. The number of nodes
    changed."""
    changed = 0
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.fill or n.inputs or len(n.outputs) != 1:
            continue
        v = n.attrs.get(op.fill)
        exact = rounded(v, g.tensors[n.outputs[0]].dtype) if isinstance(v, Fraction) else None
        if exact is not None and exact != v:
            g.rewrite(n, attrs=dict(n.attrs, **{op.fill: exact}))
            changed += 1
    g.revalidate(reg, cx)
    return changed


def widen_fills(g: Graph, reg: Registry, cx: S.Constraints, other: Graph | None = None) -> int:
    """A constant fill read only by broadcasting elementwise ops of one output shape takes that shape (a fill
    broadcast is the same fill, wider): ``where(mask, full([], 0), full([], -30000))`` beside a program whose
    ops do not broadcast (HLO's ``select`` of two constants of the mask's shape), so that the two programs'
    constants are one term. Only beside such a program. The number of fills widened."""
    if other is None or not any((op := reg.get(n.op)) is not None and len(op.elementwise) > 1 and not op.broadcasting
                                and not n.op.startswith("core.") for n in other.nodes):  # (core: every G_d's sums)
        return 0
    changed = 0
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.fill or n.inputs or len(n.outputs) != 1:
            continue
        shape_attrs = [a.name for a in op.attrs if a.kind == "scalars"]
        readers = g.consumers.get(n.outputs[0], [])
        if len(shape_attrs) != 1 or not readers or n.outputs[0] in g.outputs:
            continue
        outs = set()
        for r in readers:
            rop = reg.get(r.op)
            if rop is None or not rop.broadcasting or len(r.outputs) != 1 or \
                    any(r.inputs[i] == n.outputs[0] for i in range(len(r.inputs)) if i not in rop.elementwise):
                outs = None
                break
            outs.add(tuple(g.shape(r.outputs[0])))
        if not outs or len(outs) != 1:
            continue
        (wide,) = outs
        mine = tuple(g.shape(n.outputs[0]))
        if mine == wide or len(mine) > len(wide) or any(
                not (cx.prove("==", d, 1) or cx.prove("==", d, w)) for d, w in zip(mine, wide[len(wide) - len(mine):])):
            continue
        g.rewrite(n, attrs=dict(n.attrs, **{shape_attrs[0]: list(wide)}))
        changed += 1
    g.revalidate(reg, cx)
    return changed
