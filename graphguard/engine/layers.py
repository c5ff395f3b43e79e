"""Which layer of the model each G_s operator belongs to, for the certificate's account of reuse.

Inference reuses a result wherever an operator's local problem repeats one solved before (memo.py): the
operators of a model's second to last layer meet the first layer's problems again, up to tensor names, and
take those results -- each a lookup of the same problem, re-derived at that layer's boundary, never assumed.
This module only *names* the layers for the report: a tensor named ``...layers.N.`` (``model.layers.3.mlp``,
``decoder.layers.0``, GPT-2's ``h.5``, ``blocks.2``) belongs to layer N; a forward operator to the deepest
layer among its inputs, a backward operator (``bw.``) to the deepest layer among the gradients it feeds.
"""
from __future__ import annotations

import re

from ..ir.graph import Graph

LAYER = re.compile(r"(?:^|\.)((?:[A-Za-z_]\w*\.)*?(?:layers|layer|blocks|block|h))\.(\d+)(?=\.|$)")
PREFIXES = ("grad.", "tangent.", "tangents.")


def layer_of_name(name: str) -> tuple[str, int] | None:
    """``("model.layers", 3)`` for ``grad.model.layers.3.mlp.up_proj.weight``, else None."""
    for p in PREFIXES:
        if name.startswith(p):
            name = name[len(p):]
    m = LAYER.search(name)
    return (m.group(1), int(m.group(2))) if m else None


def node_layers(g: Graph) -> dict[str, tuple[str, int] | None]:
    """Node name -> its layer (see the module docstring), None where no layer is named above or below it."""
    tensor: dict[str, tuple[str, int] | None] = {t: layer_of_name(t) for t in g.inputs}
    out: dict[str, tuple[str, int] | None] = {}
    order = g.topo_order()
    for n in order:  # forward: the deepest layer an operator reads from
        known = [tensor.get(i) for i in n.inputs if tensor.get(i) is not None]
        lay = max(known, default=None)
        out[n.name] = lay
        for o in n.outputs:
            tensor[o] = lay
    below: dict[str, tuple[str, int] | None] = {t: layer_of_name(t) for t in g.outputs}
    for n in reversed(order):  # backward operators: the deepest layer whose gradients they feed
        known = [below.get(o) for o in n.outputs if below.get(o) is not None]
        lay = max(known, default=None)
        for i in n.inputs:
            if lay is not None and (below.get(i) is None or below[i] < lay):
                below[i] = lay
        if n.name.startswith("bw.") and lay is not None:
            out[n.name] = lay
    return out


def layer_table(g: Graph, node_stats) -> list[dict]:
    """Per layer, in model order: its G_s operators, how many took an earlier result, and their seconds.
    Empty when the graph names fewer than two layers."""
    lay = node_layers(g)
    rows: dict[tuple[str, int], dict] = {}
    for s in node_stats:
        key = lay.get(s.node)
        if key is None:
            continue
        r = rows.setdefault(key, {"layer": f"{key[0]}.{key[1]}", "ops": 0, "reused": 0, "seconds": 0.0})
        r["ops"] += 1
        r["reused"] += bool(s.reused)
        r["seconds"] += s.seconds
    if len(rows) < 2:
        return []
    return [dict(r, seconds=round(r["seconds"], 3)) for _, r in sorted(rows.items())]
