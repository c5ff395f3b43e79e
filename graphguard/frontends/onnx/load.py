"""Read ONNX models (``ModelProto`` files, ``.onnx``) into IR graphs with the ``onnx`` package.

* ``--spec``: one model, run as a single device; it may hold no collective.
* ``--impl``: one model per rank (``--impl r0.onnx r1.onnx``), or one model for every rank with
  ``--world-size N``; the ranks are stitched at their ``com.microsoft`` collectives.

The file is parsed as a protobuf message and nothing in it is run: initializers are read as data (only the
small ones a shape input needs, by value); an initializer stored outside the file (external data) is an input
whose shape the model states, and only a small integer one (a shape input's) is read, from a file beside the
model that its ``location`` names (never a path leaving the model's folder). See :mod:`.convert`.
"""
from __future__ import annotations

from pathlib import Path

from graphguard.errors import InputError
from graphguard.frontends import LoadRequest, check_world_size
from graphguard.inputfile import read_bytes
from graphguard.ir.graph import Graph
from graphguard.ir.serde import graph_from_dict

from ..stitch import RankGraph, stitch
from .convert import Converter

MIN_OPSET, MAX_OPSET = 13, 23  # default-domain opsets whose operator versions this frontend reads


def read_model(path: str | Path):
    """The ``ModelProto`` in ``path``, checked for what the frontend relies on (one line naming the file if not)."""
    try:
        import onnx
    except ImportError:
        raise InputError(f"{path}: reading ONNX models needs the onnx package (pip install 'graphguard[onnx]')") \
            from None
    from google.protobuf.message import DecodeError
    data = read_bytes(path)
    m = onnx.ModelProto()
    try:
        m.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise InputError(f"{path}: not an ONNX model (protobuf: {str(e).splitlines()[0] if str(e) else 'malformed'})") \
            from None
    if not m.HasField("graph") or not m.opset_import:
        raise InputError(f"{path}: not an ONNX model (no graph or no opset_import)")
    opsets = {o.domain: o.version for o in m.opset_import}
    v = opsets.get("", opsets.get("ai.onnx"))
    if v is None or not MIN_OPSET <= v <= MAX_OPSET:
        raise InputError(f"{path}: default-domain opset {v} is not supported (opsets {MIN_OPSET}-{MAX_OPSET})")
    if not m.graph.output:
        raise InputError(f"{path}: the graph has no outputs (nothing to verify)")
    return m


def to_rank_graph(model, source: str, req: LoadRequest, rank: int | None, world: int) -> RankGraph:
    return Converter(model, source, req.registry, rank, world).run(req.constraints)


def load(req: LoadRequest) -> Graph:
    paths = [Path(p) for p in req.paths]
    models = [read_model(p) for p in paths]
    source, name = str(paths[0]), paths[0].name.split(".")[0]
    if req.role == "spec":
        if len(models) != 1:
            raise InputError(f"the specification is one ONNX model (got {len(models)} files)")
        rg = to_rank_graph(models[0], source, req, None, 1)
        doc = {"graphguard": 1, "name": name, "inputs": rg.inputs, "nodes": rg.nodes, "outputs": rg.outputs}
        return graph_from_dict(doc, source, req.registry, req.constraints)
    if len(models) > 1:
        world = len(models)
        if req.world_size is not None and req.world_size != world:
            raise InputError(f"got {world} ONNX files but --world-size {req.world_size} (one file per rank, or one "
                             f"model for every rank)")
    else:
        if req.world_size is None:
            raise InputError(f"{source}: one ONNX model for every rank needs --world-size")
        world = check_world_size(req.world_size, source)
        paths, models = paths * world, models * world
    ranks = [to_rank_graph(m, str(p), req, r, world) for r, (p, m) in enumerate(zip(paths, models))]
    return graph_from_dict(stitch(ranks, name, source), source, req.registry, req.constraints)
