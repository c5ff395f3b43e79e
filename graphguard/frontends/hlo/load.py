"""Read XLA HLO files into IR graphs: HLO text (``.hlo``/``.txt``, ``HloModule ...``) and serialized
``HloModuleProto`` (bare, or wrapped in ``HloProto`` / ``HloSnapshot`` as XLA dumps write them).

* ``--spec``: one module, run as a single device (``partition-id`` and ``replica-id`` are 0); it may hold
  no collective.
* ``--impl``: one module for every rank -- an SPMD program (``num_partitions=N``) or a manually
  partitioned one (the same module on every rank, e.g. NeuronX) -- with ``--world-size N`` or the module's
  own ``num_partitions`` / ``replica_count``; or one file per rank (``--impl r0.hlo r1.hlo``). Each rank's
  program is instantiated (ids substituted, constants folded) and the ranks are stitched at their
  collectives.

Inputs are the entry computation's parameters, by instruction name (``Arg_0.1``, ``param.1``; characters
other than letters, digits, ``_`` and ``.`` become ``_``), ``NAME@r`` on rank r; outputs are the root's
array leaves, ``out0``, ``out1``...
"""
from __future__ import annotations

from pathlib import Path

from graphguard.errors import InputError
from graphguard.frontends import LoadRequest, check_world_size
from graphguard.inputfile import read_bytes
from graphguard.ir.graph import Graph
from graphguard.ir.serde import graph_from_dict

from ..stitch import RankGraph, stitch
from .convert import to_rank_graph
from .module import Module
from .proto import read_proto
from .text import looks_like_text, read_text

TEXT_SUFFIXES = (".hlo", ".txt")


def read_module(path: str | Path) -> Module:
    path = Path(path)
    data = read_bytes(path)
    if looks_like_text(data) or path.suffix in TEXT_SUFFIXES:
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise InputError(f"{path}: not UTF-8 text (an HLO text file starts with 'HloModule')") from None
        if not looks_like_text(data):
            raise InputError(f"{path}: not HLO text (it should start with 'HloModule')")
        try:
            return read_text(text, str(path))
        except RecursionError:
            raise InputError(f"{path}: HLO text nested too deeply") from None
    return read_proto(data, str(path))


def _ids(m: Module, rank: int, world: int) -> dict:
    """This rank's partition-id and replica-id."""
    p, r = m.num_partitions or 1, m.replica_count or 1
    if p > 1 and r > 1:
        raise InputError(f"{m.source}: modules with both replicas ({r}) and partitions ({p}) are not supported yet")
    if p > 1:
        return {"partition": rank, "replica": 0}
    if r > 1:
        return {"partition": 0, "replica": rank}
    return {"partition": rank, "replica": rank, "ambiguous": world > 1}


def _declared_world(m: Module) -> int | None:
    for n in (m.num_partitions, m.replica_count):
        if n and n > 1:
            return n
    return None


def _with_shapes(doc: dict, shapes: dict) -> dict:
    """Declare every node output's HLO shape and dtype (checked against the IR's shape inference)."""
    for n in doc["nodes"]:
        n["outputs"] = [{"name": o, **shapes[o]} if o in shapes else o for o in n["outputs"]]
    return doc


def load(req: LoadRequest) -> Graph:
    paths = [Path(p) for p in req.paths]
    modules = [read_module(p) for p in paths]
    source, name = str(paths[0]), paths[0].name.split(".")[0]
    if req.role == "spec":
        if len(modules) != 1:
            raise InputError(f"the specification is one HLO module (got {len(modules)} files)")
        rg = to_rank_graph(modules[0], req.registry, None, 1, {"partition": 0, "replica": 0})
        doc = {"graphguard": 1, "name": name, "inputs": rg.inputs, "nodes": rg.nodes, "outputs": rg.outputs}
        return graph_from_dict(_with_shapes(doc, rg.shapes), source, req.registry, req.constraints)
    if len(modules) > 1:
        world = len(modules)
        if req.world_size is not None and req.world_size != world:
            raise InputError(f"got {world} HLO files but --world-size {req.world_size} (one file per rank, or one "
                             f"module for every rank)")
    else:
        declared = _declared_world(modules[0])
        world = req.world_size or declared
        if world is None:
            raise InputError(f"{source}: the module declares no num_partitions or replica_count: pass --world-size")
        if declared is not None and declared != world:
            raise InputError(f"{source}: the module is partitioned for {declared} ranks, not --world-size {world}")
        check_world_size(world, source)
        modules = modules * world
    ranks: list[RankGraph] = [to_rank_graph(m, req.registry, r, world, _ids(m, r, world))
                              for r, m in enumerate(modules)]
    shapes = {k: v for rg in ranks for k, v in rg.shapes.items()}
    doc = _with_shapes(stitch(ranks, name, source), shapes)
    return graph_from_dict(doc, source, req.registry, req.constraints)
