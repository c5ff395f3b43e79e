"""A slice of a concatenation that lies within one part reads that part."""
from __future__ import annotations

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry


def slices_of_concats(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """A slice of a concatenation along the same dim that lies within one part reads that part (its bounds
    shifted): ``cat(zeros(1), cumsum(n))[0:1]`` is ``zeros(1)[0:1]``, a constant on every rank, which the
    search would otherwise have to find through the concatenation's other, data-made part. Exact (data
    movement). The number of slices changed."""
    changed = 0
    for n in g.nodes:
        p = g.producer.get(n.inputs[0]) if n.op == "core.slice" else None
        if p is None or p.op != "core.concat" or int(p.attrs["dim"]) != int(n.attrs["dim"]):
            continue
        d, lo, hi, off = int(n.attrs["dim"]), n.attrs["start"], n.attrs["end"], 0
        for part in p.inputs:
            size = g.shape(part)[d]
            if cx.prove(">=", lo, off) and cx.prove("<=", hi, S.norm(S.sym(off) + S.sym(size))):
                g.rewrite(n, inputs=[part],
                          attrs=dict(n.attrs, start=S.norm(S.sym(lo) - S.sym(off)), end=S.norm(S.sym(hi) - S.sym(off))))
                changed += 1
                break
            off = S.norm(S.sym(off) + S.sym(size))
    g.revalidate(reg, cx)
    return changed
