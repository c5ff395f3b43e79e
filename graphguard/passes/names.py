"""Fresh names for what a pass adds to a program."""
from __future__ import annotations

from ..ir.graph import Graph


def fresh_tensor(g: Graph, name: str, suffix: str) -> str:
    """``name`` + ``suffix``, made unused in ``g``."""
    new = suffixed(name, suffix)
    while new in g.tensors:
        new = suffixed(new, "_")
    return new


def suffixed(name: str, suffix: str) -> str:
    """``name`` with ``suffix`` before its rank (``y@1`` -> ``y.rows@1``): a G_d tensor stays ``NAME@RANK``."""
    base, at, rank = name.rpartition("@")
    return f"{base}{suffix}@{rank}" if at and rank.isdigit() else name + suffix


def fresh_node_name(g: Graph, name: str) -> str:
    """``name``, made unused by ``g``'s nodes."""
    names = {n.name for n in g.nodes}
    while name in names:
        name += "_"
    return name
