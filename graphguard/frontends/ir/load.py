from __future__ import annotations

from graphguard.errors import InputError
from graphguard.frontends import LoadRequest
from graphguard.ir.graph import Graph
from graphguard.ir.serde import load_graph


def load(req: LoadRequest) -> Graph:
    if len(req.paths) != 1:
        raise InputError(f"the ir frontend reads one .gg.json file per graph (got {len(req.paths)}); a "
                         f"distributed graph holds all ranks in one file")
    g = load_graph(req.paths[0], req.registry, req.constraints)
    if req.role == "impl" and not g.distributed:
        raise InputError(f"{req.paths[0]}: the implementation must be a distributed graph (set \"world_size\")")
    if req.role == "spec" and g.distributed:
        raise InputError(f"{req.paths[0]}: the specification must be a sequential graph (no \"world_size\")")
    if req.world_size is not None and g.distributed and g.world_size != req.world_size:
        raise InputError(f"{req.paths[0]}: world size {g.world_size} differs from --world-size {req.world_size}")
    return g
