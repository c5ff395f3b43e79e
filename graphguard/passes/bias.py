"""A fused product-plus-bias (:attr:`OpDef.biased`: ``addmm(c, a, b)`` = ``add(mm(a, b), c)``) whose output only a
reshape reads, keeping its last dim, with a row bias -- ``nn.Linear`` on rows flattened to 2-D and viewed back,
as fx captures it -- becomes the product, the reshape, then the add: the pieces an ONNX export or a hand-written
``x @ w.T + b`` has, where the frontier can relate the product before the bias. Done where the two programs
differ in the fused ops they call (where both call ``addmm`` the fused form is kept: fewer operators, the same
lemmas)."""
from __future__ import annotations

from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry
from ..ir.values import number
from .names import fresh_tensor, suffixed


def bias_after_rows(g: Graph, reg: Registry, cx: S.Constraints) -> int:
    """``reshape(fused(c, a, b))`` -> ``add(reshape(product(a, b)), c)`` for every op declaring ``biased``, under
    its attribute values, where the reshape is the fused output's only reader (the fused output is no graph
    output; the reshape's may be: the add writes it), keeps the
    last dim and the bias is ``[n]`` or ``[1, n]``; the number of nodes rewritten. Exact: the add of a row bias
    commutes with a reshape of the rows."""
    changed = 0
    outputs = set(g.outputs)
    for n in g.nodes:
        op = reg.get(n.op)
        if op is None or not op.biased or len(n.inputs) != 3 or len(n.outputs) != 1 or n.outputs[0] in outputs:
            continue
        prod, add, fixed = op.biased
        if any(number(n.attrs.get(k)) != v for k, v in fixed.items()):
            continue
        readers = g.consumers.get(n.outputs[0], [])
        if len(readers) != 1 or readers[0].op != "core.reshape":
            continue
        view, out, bias = readers[0], g.tensors[n.outputs[0]], g.tensors[n.inputs[0]]
        if len(out.shape) != 2:
            continue
        width = out.shape[1]
        if g.shape(view.outputs[0])[-1:] != (width,) or bias.shape not in ((width,), (1, width)) or \
                bias.dtype != out.dtype:
            continue
        final = view.outputs[0]
        rows = fresh_tensor(g, final, ".rows")
        g.rewrite(n, op=prod, inputs=n.inputs[1:], attrs={})
        g.rewrite(view, outputs=[rows])
        g.insert_node(view, add, [rows, bias.name], [final], {}, suffixed(n.name, ".bias"), n.loc, n.func, n.module)
        changed += 1
    g.revalidate(reg, cx)
    return changed


def when_fused_ops_differ(g: Graph, ctx) -> int:
    """:func:`bias_after_rows` where one program calls a fused product + bias the other does not (as loaded)."""
    fused = [{o for o in ctx.loaded_ops.get(r, ()) if getattr(ctx.reg.get(o), "biased", ())} for r in ("spec", "impl")]
    return bias_after_rows(g, ctx.reg, ctx.cx) if fused[0] != fused[1] else 0
