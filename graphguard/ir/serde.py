"""The ``*.gg.json`` graph file format (read and write).

::

    {
      "graphguard": 1,                       # format version
      "name": "impl",
      "world_size": 2,                       # present => a distributed graph G_d (tensor names NAME@RANK)
      "inputs": [{"name": "A@0", "shape": [4, "K/2"], "dtype": "float32"}, ...],
      "nodes": [
        {"name": "mm0", "op": "core.matmul", "inputs": ["A@0", "B@0"], "outputs": ["C@0"],
         "attrs": {}, "loc": "model.py:12"},
        {"op": "core.reduce_scatter", "inputs": ["C@0", "C@1"], "outputs": ["D@0", "D@1"],
         "attrs": {"op": "sum", "dim": 0, "group": [0, 1]}}
      ],
      "outputs": ["F@0", "F@1"]
    }

Shapes are lists of integers or scalar expressions over symbols (``"K/2"``, read by the grammar of
:func:`graphguard.ir.scalar.parse`, never evaluated); symbols and their constraints are declared in the
relation file. A dtype is one of :data:`graphguard.ir.ops.DTYPES` (default ``float32``). ``outputs`` of a node may also be objects
``{"name": ..., "shape": [...]}``; a declared shape is checked against the inferred one.
Attribute values are JSON numbers, strings or lists; ``loc`` (optional) is shown in bug reports.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..inputfile import load_json, read_text
from . import scalar as S
from .expr import attr_text
from .graph import Graph, source_keys
from .ops import Registry
from .scalar import Constraints

FORMAT_VERSION = 1


def _shape(v: Any, where: str) -> tuple:
    if not isinstance(v, list):
        raise InputError(f"{where}: shape must be a list, got {v!r}")
    out = []
    for d in v:
        if isinstance(d, bool) or not isinstance(d, (int, str)):
            raise InputError(f"{where}: bad dimension {d!r}")
        try:
            out.append(S.parse(d) if isinstance(d, str) else d)
        except ValueError as e:
            raise InputError(f"{where}: {e}") from None
        if isinstance(out[-1], int) and out[-1] < 0:
            raise InputError(f"{where}: negative dimension {d}")
    return tuple(out)


def graph_from_dict(doc: Any, source: str, reg: Registry, cx: Constraints) -> Graph:
    if not isinstance(doc, dict):
        raise InputError(f"{source}: a graph file must hold a JSON object")
    version = doc.get("graphguard")
    if type(version) is not int or version != FORMAT_VERSION:  # true == 1 and 1.0 == 1 in Python
        raise InputError(f"{source}: not a graphguard graph (expected \"graphguard\": {FORMAT_VERSION})")
    name = Path(source).stem if doc.get("name") is None else doc["name"]
    if not isinstance(name, str):
        raise InputError(f"{source}: 'name' must be a string")
    g = Graph(name, source)
    ws = doc.get("world_size")
    if ws is not None:
        if isinstance(ws, bool) or not isinstance(ws, int) or ws < 1:
            raise InputError(f"{source}: world_size must be a positive integer")
        g.world_size = ws
    rep = doc.get("repeat")
    if rep is not None:
        tpl = rep.get("template", 0) if isinstance(rep, dict) else None
        if not (isinstance(rep, dict) and isinstance(rep.get("path"), str) and type(rep.get("layers")) is int
                and type(tpl) is int and 0 <= tpl and rep["layers"] >= tpl + 2):
            raise InputError(f"{source}: 'repeat' must be {{\"path\": the layers' module path, \"layers\": their "
                             f"number, \"template\": the layer traced (optional, 0; layers - 2 at most)}}")
        cmp = rep.get("compared", [])  # the attributes layers differ in, allowed by comparing traced graphs
        if not (isinstance(cmp, list) and all(isinstance(c, str) for c in cmp)):
            raise InputError(f"{source}: 'repeat'.compared must be a list of strings (the attributes that differ)")
        g.repeat = (rep["path"], rep["layers"], tpl) + ((tuple(cmp),) if cmp else ())
    for key in ("inputs", "nodes", "outputs"):
        if not isinstance(doc.get(key), list):
            raise InputError(f"{source}: missing or non-list field '{key}'")
    for i, t in enumerate(doc["inputs"]):
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise InputError(f"{source}: inputs[{i}] must be an object with a name")
        dtype = t.get("dtype", "float32")
        if not isinstance(dtype, str):
            raise InputError(f"{source}: input '{t['name']}': dtype must be a string")
        g.add_input(t["name"], _shape(t.get("shape"), f"{source}: input '{t['name']}'"), dtype)
    for i, n in enumerate(doc["nodes"]):
        where = f"{source}: nodes[{i}]"
        if not isinstance(n, dict) or not isinstance(n.get("op"), str):
            raise InputError(f"{where}: a node must be an object with an 'op'")
        ins, outs = n.get("inputs", []), n.get("outputs")
        if not isinstance(ins, list) or not all(isinstance(x, str) for x in ins):
            raise InputError(f"{where} ({n['op']}): 'inputs' must be a list of tensor names")
        if not isinstance(outs, list) or not outs:
            raise InputError(f"{where} ({n['op']}): 'outputs' must be a non-empty list")
        names, declared = [], {}
        for o in outs:
            if isinstance(o, str):
                names.append(o)
            elif isinstance(o, dict) and isinstance(o.get("name"), str):
                names.append(o["name"])
                if "shape" in o:
                    declared[o["name"]] = {"shape": _shape(o["shape"], f"{where}: output '{o['name']}'"),
                                           **({"dtype": o["dtype"]} if "dtype" in o else {})}
            else:
                raise InputError(f"{where} ({n['op']}): bad output entry {o!r}")
        for key in ("name", "loc", "func", "module"):
            if key in n and n[key] is not None and not isinstance(n[key], str):
                raise InputError(f"{where} ({n['op']}): '{key}' must be a string")
        attrs = n.get("attrs", {})
        if not isinstance(attrs, dict):
            raise InputError(f"{where} ({n['op']}): 'attrs' must be an object")
        g.add_node(n["op"], ins, names, attrs, n.get("name") or f"n{i}", n.get("loc"), declared, n.get("func"),
                   n.get("module"))
    if not all(isinstance(o, str) for o in doc["outputs"]):
        raise InputError(f"{source}: 'outputs' must be a list of tensor names")
    if not doc["outputs"]:
        raise InputError(f"{source}: the graph has no outputs (nothing to verify)")
    g.outputs = list(doc["outputs"])
    return g.validate(reg, cx)


def load_graph(path: str | Path, reg: Registry, cx: Constraints) -> Graph:
    return graph_from_dict(load_json(read_text(path), str(path)), str(path), reg, cx)


def _jsonable(v: Any) -> Any:
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (int, str, float)):
        return v
    return attr_text(v)


def graph_to_dict(g: Graph) -> dict:
    doc: dict[str, Any] = {"graphguard": FORMAT_VERSION, "name": g.name}
    if g.distributed:
        doc["world_size"] = g.world_size
    doc["inputs"] = [{"name": t, "shape": [_jsonable(d) for d in g.tensors[t].shape],
                      "dtype": g.tensors[t].dtype} for t in g.inputs]
    doc["nodes"] = []
    for n in g.nodes:
        d: dict[str, Any] = {"name": n.name, "op": n.op, "inputs": n.inputs, "outputs": n.outputs}
        if n.attrs:
            d["attrs"] = {k: _jsonable(v) for k, v in n.attrs.items()}
        d.update(source_keys(n))
        doc["nodes"].append(d)
    doc["outputs"] = g.outputs
    if g.repeat is not None:
        doc["repeat"] = {"path": g.repeat[0], "layers": g.repeat[1]}
        if g.repeat[2]:
            doc["repeat"]["template"] = g.repeat[2]
        if len(g.repeat) > 3:
            doc["repeat"]["compared"] = list(g.repeat[3])
    return doc


def save_graph(g: Graph, path: str | Path) -> None:
    Path(path).write_text(json.dumps(graph_to_dict(g), indent=1) + "\n")
