"""Read ``torch.export.save`` archives (``.pt2``) without unpickling anything.

Only the JSON graph (``*/models/*.json``) is read: node targets, arguments, tensor sizes and dtypes.
Weights, constants and sample inputs (pickled) are never opened. One archive per rank
(``--impl r0.pt2 r1.pt2``), or one archive and ``--world-size N`` when every rank runs the same graph.
Also reads gg.json documents written by ``graphguard capture``.
"""
from __future__ import annotations

import json
import zipfile
from pathlib import Path

from graphguard.errors import InputError
from graphguard.frontends import LoadRequest
from graphguard.ir import scalar as S
from graphguard.ir.graph import Graph
from graphguard.ir.serde import graph_from_dict

from .convert import DATA_DEPENDENT, Ref, TGraph, TNode, data_dependent, loc_from_stack, to_rank_graph
from ..stitch import stitch

# torch/_export/serde/schema.py ScalarType
SCALAR_TYPES = {1: "uint8", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "float16", 7: "float32",
                8: "float64", 9: "complex32", 10: "complex64", 11: "complex128", 12: "bool", 13: "bfloat16",
                28: "uint16", 29: "float8_e4m3fn", 30: "float8_e5m2", 31: "float8_e4m3fnuz", 32: "float8_e5m2fnuz",
                33: "float8_e8m0fnu", 34: "uint32", 35: "uint64"}


def _scalar_type(code, where: str) -> str:
    name = SCALAR_TYPES.get(code) if isinstance(code, int) and not isinstance(code, bool) else None
    if name is None:
        raise InputError(f"{where}: unknown dtype code {str(code)[:20]}")
    return name


def _size(v, where: str):
    if "as_int" in v:
        return v["as_int"]
    if "as_expr" in v:  # read by the scalar grammar, as data
        text = v["as_expr"]["expr_str"]
        try:
            return S.parse(text)
        except ValueError as e:
            raise InputError(f"{where}: unsupported symbolic size: {e}") from None
    raise InputError(f"{where}: unsupported size {v}")


def _sym_name(v: dict, where: str):
    """A symbolic int argument: a constant, or the name of the node computing it (a size symbol)."""
    if "as_int" in v:
        return v["as_int"]
    name = v.get("as_name")
    if not S.valid_name(name):
        raise InputError(f"{where}: bad symbolic int argument {str(name)[:60]!r}")
    return name


def _arg(a: dict, where: str):
    (kind, v), = a.items() if len(a) == 1 else (next(iter(a.items())),)
    if kind == "as_tensor":
        return Ref(v["name"])
    if kind == "as_tensors":
        return [Ref(x["name"]) for x in v]
    if kind == "as_optional_tensors":
        return [Ref(x["as_tensor"]["name"]) if "as_tensor" in x else None for x in v]
    if kind in ("as_int", "as_float", "as_bool", "as_string", "as_ints", "as_floats", "as_bools", "as_strings"):
        return v
    if kind == "as_none":
        return None
    if kind == "as_sym_int":
        return _sym_name(v, where)
    if kind == "as_sym_ints":
        return [_sym_name(x, where) for x in v]
    if kind == "as_scalar_type":
        return f"torch.{_scalar_type(v, where)}"
    if kind in ("as_device", "as_layout", "as_memory_format"):
        return None
    raise InputError(f"{where}: unsupported argument kind {kind}")


def read_pt2(path: Path) -> TGraph:
    try:
        z = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        raise InputError(f"{path}: not a torch.export archive ({e})") from None
    models = [n for n in z.namelist() if "/models/" in n and n.endswith(".json")]
    if not models:
        raise InputError(f"{path}: no models/*.json graph inside (not a torch.export.save archive?)")
    try:
        doc = json.loads(z.read(models[0]))
        gm = doc["graph_module"]
        g = gm["graph"]
    except (KeyError, ValueError, zipfile.BadZipFile) as e:
        raise InputError(f"{path}: malformed exported program ({e})") from None
    where = str(path)
    tv = g.get("tensor_values", {})
    nodes: list[TNode] = []
    names: dict[str, str] = {}
    for spec in gm["signature"]["input_specs"]:
        (kind, v), = spec.items()
        arg = v["arg"]
        tname = arg["name"] if "name" in arg else arg["as_tensor"]["name"]
        public = v.get("parameter_name") or v.get("buffer_name") or v.get("tensor_constant_name") or tname
        if kind in ("tensor_constant", "constant_input") or "lifted_tensor" in tname:
            raise InputError(f"{where}: lifted constant '{public}' of unknown value; graphguard needs constants "
                             f"as inputs or graph ops")
        names[tname] = public

    def meta(name):
        t = tv.get(name)
        if t is None:
            return None, None
        return tuple(_size(s, where) for s in t["sizes"]), _scalar_type(t["dtype"], f"{where}: tensor '{name}'")

    for name in names:
        shp, dt = meta(name)
        nodes.append(TNode(name, "placeholder", "placeholder", (), {}, shp, dt))
    for n in g["nodes"]:
        target = n["target"].removeprefix("torch.ops.")
        if target in DATA_DEPENDENT:  # before its data-dependent sizes and guards are read
            raise data_dependent(target, where, loc_from_stack(n.get("metadata", {}).get("stack_trace")))
        if target in ARCHIVE_REFUSED:  # one archive serves every rank: its sizes cannot be told apart
            loc = loc_from_stack(n.get("metadata", {}).get("stack_trace"))
            raise InputError(f"{where}: {target.removesuffix('.default')}{f' at {loc}' if loc else ''} has an "
                             f"output size the data decides, which a .pt2 archive does not name per rank; capture "
                             f"the model with 'graphguard capture' or graphguard.torch.capture instead")
        args, kwargs = [], {}
        for inp in n["inputs"]:
            val = _arg(inp["arg"], where)
            if inp.get("kind", 1) == 1:
                args.append(val)
            else:
                kwargs[inp["name"]] = val
        outs = n["outputs"]
        loc = loc_from_stack(n.get("metadata", {}).get("stack_trace"))
        if len(outs) == 1 and "as_tensor" in outs[0]:
            oname = outs[0]["as_tensor"]["name"]
            shp, dt = meta(oname)
            nodes.append(TNode(oname, "call_function", target, tuple(args), kwargs, shp, dt, loc))
        else:
            flat = []
            for o in outs:
                if "as_tensors" in o:
                    flat += [x["name"] for x in o["as_tensors"]]
                elif "as_tensor" in o:
                    flat.append(o["as_tensor"]["name"])
                else:
                    flat.append(None)
            base = f"{flat[0]}.multi" if flat and flat[0] else f"node{len(nodes)}"
            nodes.append(TNode(base, "call_function", target, tuple(args), kwargs, None, None, loc))
            for i, oname in enumerate(flat):
                if oname is not None:
                    shp, dt = meta(oname)
                    nodes.append(TNode(oname, "call_function", "getitem", (Ref(base), i), {}, shp, dt, loc))
    outs = []
    out_names = []
    for i, spec in enumerate(gm["signature"]["output_specs"]):
        (kind, v), = spec.items()
        if kind != "user_output":
            continue
        outs.append(Ref(v["arg"]["as_tensor"]["name"]))
        out_names.append(f"out{len(out_names)}")
    nodes.append(TNode("output", "output", "output", (tuple(outs),), {}))
    return TGraph(nodes, where, names, out_names)


ARCHIVE_REFUSED = {"aten.nonzero.default"}


def load(req: LoadRequest) -> Graph:
    paths = [Path(p) for p in req.paths]
    if len(paths) == 1 and paths[0].suffix == ".json":
        from graphguard.ir.serde import load_graph
        return load_graph(paths[0], req.registry, req.constraints)
    graphs = [read_pt2(p) for p in paths]
    if req.role == "spec":
        if len(graphs) != 1:
            raise InputError("the specification is one .pt2 archive")
        rg = to_rank_graph(graphs[0], req.registry, None, {})
        doc = {"graphguard": 1, "name": paths[0].stem, "inputs": rg.inputs, "nodes": rg.nodes, "outputs": rg.outputs}
        return graph_from_dict(doc, str(paths[0]), req.registry, req.constraints)
    world = req.world_size or len(graphs)
    if len(graphs) == 1 and world > 1:
        graphs = graphs * world
    elif len(graphs) != world:
        raise InputError(f"got {len(graphs)} archives for world size {world} (one per rank, or one with "
                         f"--world-size)")
    groups = _default_groups(graphs, world)
    ranks = [to_rank_graph(g, req.registry, r, groups) for r, g in enumerate(graphs)]
    return graph_from_dict(stitch(ranks, paths[0].stem, str(paths[0])), str(paths[0]), req.registry,
                           req.constraints)


def _default_groups(graphs: list[TGraph], world: int) -> dict:
    """Archives store only group names: with one name in use it is the whole world."""
    names = set()
    for g in graphs:
        for n in g.nodes:
            if n.target.startswith("_c10d_functional.") and n.target.split(".")[1] != "wait_tensor":
                names |= {a for a in n.args if isinstance(a, str) and a not in ("sum", "avg", "max")}
    if len(names) > 1:
        raise InputError(f"archives use several process groups ({sorted(names)}); capture with "
                         f"graphguard.torch.capture to record their ranks")
    return {n: tuple(range(world)) for n in names}
