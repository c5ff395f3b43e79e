"""Build graphs from Python (examples, tests, frontends) and write them as ``*.gg.json``."""
from __future__ import annotations

from .graph import Graph
from .serde import graph_from_dict


class GraphBuilder:
    """``b = GraphBuilder("impl", world_size=2); b.input("A@0", [4, 2]); b.op("core.matmul", ...)``."""

    def __init__(self, name: str, world_size: int | None = None):
        self.doc = {"graphguard": 1, "name": name, "inputs": [], "nodes": [], "outputs": []}
        if world_size is not None:
            self.doc["world_size"] = world_size

    def input(self, name: str, shape, dtype: str = "float32") -> str:
        self.doc["inputs"].append({"name": name, "shape": list(shape), "dtype": dtype})
        return name

    def op(self, op_name: str, inputs, outputs, loc: str | None = None, name: str | None = None, **attrs):
        outs = [outputs] if isinstance(outputs, str) else list(outputs)
        node = {"name": name or f"n{len(self.doc['nodes'])}", "op": op_name, "inputs": list(inputs), "outputs": outs}
        if attrs:
            node["attrs"] = attrs
        if loc:
            node["loc"] = loc
        self.doc["nodes"].append(node)
        return outs[0] if len(outs) == 1 else outs

    def output(self, *names: str) -> None:
        self.doc["outputs"].extend(names)

    def to_dict(self) -> dict:
        return self.doc

    def build(self, reg, cx, source: str = "<builder>") -> Graph:
        return graph_from_dict(self.doc, source, reg, cx)
