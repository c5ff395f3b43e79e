"""Read ``torch.export.save`` archives (``.pt2``) without unpickling anything.

Only the JSON graph (``*/models/*.json``) is read: node targets, arguments, tensor sizes and dtypes.
Weights, constants and sample inputs (pickled) are never opened. One archive per rank
(``--impl r0.pt2 r1.pt2``), or one archive and ``--world-size N`` when every rank runs the same graph.
Also reads gg.json documents written by ``graphguard capture``.
"""
from __future__ import annotations

import zipfile
import zlib
from pathlib import Path

from graphguard.errors import InputError
from graphguard.frontends import LoadRequest
from graphguard.inputfile import load_json, malformed, regular_file
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
# torch/_export/serde/schema.py: the kinds of InputSpec and OutputSpec
INPUT_KINDS = {"user_input", "parameter", "buffer", "tensor_constant", "custom_obj", "token", "constant_input"}
OUTPUT_KINDS = {"user_output", "loss_output", "buffer_mutation", "gradient_to_parameter", "gradient_to_user_input",
                "user_input_mutation", "token", "parameter_mutation"}


def _is(v, kind, what: str, where: str):
    """``v`` if it is a ``kind`` (bool is not an int), else one InputError."""
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, (int, float)))
    if not ok:
        raise InputError(f"{where}: {what} is {type(v).__name__} {str(v)[:40]!r}, not "
                         f"{getattr(kind, '__name__', 'a number')}")
    return v


def _list(v, kind, what: str, where: str) -> list:
    return [_is(x, kind, what, where) for x in _is(v, list, what, where)]


def _one(d, what: str, where: str) -> tuple[str, object]:
    """The single (kind, value) of a tagged union (an Argument, a size, an input or output spec)."""
    if not isinstance(d, dict) or len(d) != 1:
        raise InputError(f"{where}: {what} must be an object with one field, got {str(d)[:60]}")
    return next(iter(d.items()))


def _name(v, where: str) -> str:
    return _is(_is(v, dict, "a tensor argument", where).get("name"), str, "a tensor name", where)


def _size(v, where: str):
    kind, x = _one(v, "a size", where)
    if kind == "as_int":
        if _is(x, int, "a size", where) < 0:
            raise InputError(f"{where}: negative size {x}")
        return x
    if kind == "as_expr":  # sizes the archive leaves symbolic: which symbol is which rank's is not recorded
        raise InputError(f"{where}: symbolic size {str(x)[:60]} in an archive; capture the model with "
                         f"'graphguard capture' or graphguard.torch.capture to verify symbolic shapes")
    raise InputError(f"{where}: unsupported size {str(v)[:60]}")


def _dtype(v, where: str) -> str:
    if _is(v, int, "a dtype code", where) not in SCALAR_TYPES:
        raise InputError(f"{where}: unknown dtype code {v}")
    return SCALAR_TYPES[v]


def _arg(a: dict, where: str):
    kind, v = _one(a, "an argument", where)
    if kind == "as_tensor":
        return Ref(_name(v, where))
    if kind == "as_tensors":
        return [Ref(_name(x, where)) for x in _is(v, list, kind, where)]
    if kind == "as_optional_tensors":
        return [Ref(_name(x["as_tensor"], where)) if "as_tensor" in _is(x, dict, kind, where) else None
                for x in _is(v, list, kind, where)]
    scalar = {"as_int": int, "as_float": (int, float), "as_bool": bool, "as_string": str}
    if kind in scalar:
        return _is(v, scalar[kind], kind, where)
    if kind[:-1] in scalar and kind.endswith("s"):  # as_ints, as_floats, ...
        return _list(v, scalar[kind[:-1]], kind, where)
    if kind == "as_none":
        return None
    if kind == "as_sym_int":
        return _sym_int(v, where)
    if kind == "as_sym_ints":
        return [_sym_int(x, where) for x in _is(v, list, kind, where)]
    if kind == "as_scalar_type":
        return f"torch.{_dtype(v, where)}"
    if kind in ("as_device", "as_layout", "as_memory_format"):
        return None
    raise InputError(f"{where}: unsupported argument kind {kind}")


def _sym_int(v, where: str):
    kind, x = _one(v, "a symbolic int", where)
    if kind == "as_int":
        return _is(x, int, kind, where)
    if kind == "as_name":  # the node computing it (a size symbol): an identifier, read as data
        if not S.valid_name(_is(x, str, kind, where)):
            raise InputError(f"{where}: bad symbolic int argument {str(x)[:60]!r}")
        return x
    raise InputError(f"{where}: unsupported symbolic int {str(v)[:60]}")


MAX_GRAPH_BYTES = 256 << 20  # the JSON graph of an archive; weights are never read


def _model_json(path: Path) -> tuple[bytes, str]:
    """The bytes of the archive's ``models/*.json`` member and its name; never more than MAX_GRAPH_BYTES."""
    regular_file(path)
    try:
        with zipfile.ZipFile(path) as z:
            models = [i for i in z.infolist() if "/models/" in i.filename and i.filename.endswith(".json")]
            if not models:
                raise InputError(f"{path}: no models/*.json graph inside (not a torch.export.save archive?)")
            info = models[0]
            if info.file_size > MAX_GRAPH_BYTES:
                raise InputError(f"{path}: {info.filename} would inflate to {info.file_size} bytes (more than "
                                 f"{MAX_GRAPH_BYTES >> 20} MiB: not an exported program's graph)")
            try:
                with z.open(info) as f:
                    return f.read(MAX_GRAPH_BYTES + 1), info.filename
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError,
                    ValueError) as e:
                raise InputError(f"{path}: cannot read {info.filename} ({e})") from None
    except InputError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, RuntimeError,
            NotImplementedError, ValueError) as e:  # RuntimeError: encrypted; NotImplementedError: compression
        raise InputError(f"{path}: not a torch.export archive, or a damaged one ({e})") from None


def read_pt2(path: Path, reg=None) -> TGraph:
    """The archive's graph; with a registry, ATen ops outside the core opset that no loaded pack defines (a
    plain ``torch.export.export``'s ``aten.linear``, ``aten.matmul``) decomposed into core ATen first."""
    data, member = _model_json(path)
    doc = load_json(data, f"{path}: {member}")
    with malformed(str(path), f"exported program ({member})"):
        g = _tgraph(doc, str(path))
    todo = _non_core(g, reg) if reg is not None else set()
    if todo:
        doc = _decomposed(doc, str(path), todo, reg)
        with malformed(str(path), f"exported program ({member}, decomposed)"):
            g = _tgraph(doc, str(path))
    return g


def _known(target: str, reg) -> bool:
    from .convert import _DATA_MOVEMENT, FILLS, IDENTITY, ir_op_name
    return target in IDENTITY or target in FILLS or target in _DATA_MOVEMENT or ir_op_name(target) in reg


def _non_core(g: TGraph, reg) -> set[str]:
    """The graph's ATen ops outside the core ATen opset that graphguard does not know."""
    out = set()
    for n in g.nodes:
        if n.op != "call_function" or not n.target.startswith("aten.") or _known(n.target, reg):
            continue
        try:
            import torch
            _, name, overload = n.target.split(".")
            op = getattr(getattr(torch.ops.aten, name), overload)
        except (ValueError, AttributeError, RuntimeError):
            continue  # (not an ATen op torch knows: the converter names it)
        if torch.Tag.core not in op.tags:
            out.add(n.target)
    return out


def _data_only(doc, where: str, refuse) -> None:
    """What torch's deserializer would evaluate rather than read: symbolic expressions (``sympy.sympify``, which
    evaluates its string), guard code, custom objects, extension operators. Refused: the graph is read as data."""
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, dict):
            for k, v in x.items():
                if k in ("as_expr", "expr_str"):
                    raise refuse("it holds symbolic expressions")
                if k in ("custom_obj_values", "range_constraints", "guards_code") and v:
                    raise refuse(f"it holds {k}")
                if k == "target" and isinstance(v, str) and not v.startswith(("torch.ops.", "_operator.")):
                    raise refuse(f"it calls {v[:60]!r}")
                stack.append(v)
        elif isinstance(x, list):
            stack.extend(x)


def _on_meta(x):
    """The document with every device the meta device (no tensor of the archive is ever made)."""
    if isinstance(x, dict):
        return {k: ({"type": "meta", "index": None} if k in ("device", "as_device") else _on_meta(v))
                for k, v in x.items()}
    if isinstance(x, list):
        return [_on_meta(v) for v in x]
    return x


def _decomposed(doc: dict, where: str, ops: set[str], reg) -> dict:
    """The exported program decomposed into core ATen (torch's ``run_decompositions``), ops a loaded pack defines
    kept, as a JSON document again. torch's deserializer reads the checked JSON graph only: parameters and buffers
    are empty meta tensors of the recorded sizes, and nothing of the archive is unpickled (``torch.export.load``
    would unpickle its weights, constants and sample inputs)."""
    what = ", ".join(sorted(o.removesuffix(".default") for o in ops)[:4]) + (", ..." if len(ops) > 4 else "")

    def refuse(why: str) -> InputError:
        return InputError(f"{where}: holds ATen ops outside the core opset that no loaded lemma pack defines "
                          f"({what}), and graphguard cannot decompose them: {why}; save the program after "
                          f"ep.run_decompositions(), or add a lemma pack")
    _data_only(doc, where, refuse)
    import json
    import warnings

    import torch
    from torch._export.serde import schema
    from torch._export.serde.serialize import (EnumEncoder, ExportedProgramDeserializer, ExportedProgramSerializer,
                                               _dataclass_to_dict, _dict_to_dataclass)

    from .failure import quiet_torch_logs
    try:
        with quiet_torch_logs(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            meta = _on_meta(doc)
            gm = meta["graph_module"]
            tv = gm["graph"]["tensor_values"]
            state, constants = {}, {}
            for spec in gm["signature"]["input_specs"]:
                kind, v = next(iter(spec.items()))
                if kind not in ("parameter", "buffer"):
                    continue
                t = tv[v["arg"]["name"]]
                empty = torch.empty([x["as_int"] for x in t["sizes"]], dtype=getattr(torch, SCALAR_TYPES[t["dtype"]]),
                                    device="meta")
                if kind == "parameter":
                    state[v["parameter_name"]] = torch.nn.Parameter(empty, requires_grad=False)
                elif v.get("persistent", True):
                    state[v["buffer_name"]] = empty
                else:
                    constants[v["buffer_name"]] = empty
            ep = ExportedProgramDeserializer().deserialize(_dict_to_dataclass(schema.ExportedProgram, meta), state,
                                                           constants, None)
            table = torch.export.default_decompositions()
            for op in list(table.keys()):
                if _known(str(op), reg):
                    table.pop(op)  # kept: a pack defines it
            ep = ep.run_decompositions(table)
            out = ExportedProgramSerializer().serialize(ep).exported_program
            return json.loads(json.dumps(_dataclass_to_dict(out), cls=EnumEncoder))
    except InputError:
        raise
    except Exception as e:  # noqa: BLE001 -- torch's failure on this graph, in one line
        raise refuse(f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}") from None


def _tgraph(doc, where: str) -> TGraph:
    gm = doc["graph_module"]
    g = gm["graph"]
    tv = _is(g.get("tensor_values", {}), dict, "tensor_values", where)
    nodes: list[TNode] = []
    names: dict[str, str] = {}
    for spec in _is(gm["signature"]["input_specs"], list, "input_specs", where):
        kind, v = _one(spec, "an input spec", where)
        if kind not in INPUT_KINDS:
            raise InputError(f"{where}: unsupported input kind '{kind}'")
        arg = v["arg"]
        tname = _is(arg["name"] if "name" in arg else arg["as_tensor"]["name"], str, "an input name", where)
        public = v.get("parameter_name") or v.get("buffer_name") or v.get("tensor_constant_name") or tname
        if kind in ("tensor_constant", "constant_input") or "lifted_tensor" in tname:
            raise InputError(f"{where}: lifted constant '{public}' of unknown value; graphguard needs constants "
                             f"as inputs or graph ops")
        if kind not in ("user_input", "parameter", "buffer"):
            raise InputError(f"{where}: input '{public}' of kind {kind} is not supported")
        names[tname] = _is(public, str, "an input name", where)

    def meta(name):
        t = tv.get(name)
        if t is None:
            raise InputError(f"{where}: no sizes recorded for tensor '{name}'")
        w = f"{where}: tensor '{name}'"
        return tuple(_size(x, w) for x in _is(t["sizes"], list, "sizes", w)), _dtype(t["dtype"], w)

    defined = set(names)

    def check_refs(x, node: str):
        if isinstance(x, Ref):
            if x.name not in defined:
                raise InputError(f"{where}: node '{node}' uses tensor '{x.name}', which no earlier node or input "
                                 f"defines (dangling, or a cycle)")
        elif isinstance(x, (list, tuple)):
            for y in x:
                check_refs(y, node)

    for name in names:
        shp, dt = meta(name)
        nodes.append(TNode(name, "placeholder", "placeholder", (), {}, shp, dt))
    for n in _is(g["nodes"], list, "nodes", where):
        target = _is(n["target"], str, "a node target", where).removeprefix("torch.ops.")
        stack = n.get("metadata", {}).get("stack_trace")
        loc = loc_from_stack(stack) if isinstance(stack, str) else None
        if target in DATA_DEPENDENT:  # before its data-dependent sizes and guards are read
            raise data_dependent(target, where, loc)
        if target in ARCHIVE_REFUSED:  # one archive serves every rank: its sizes cannot be told apart
            raise InputError(f"{where}: {target.removesuffix('.default')}{f' at {loc}' if loc else ''} has an "
                             f"output size or value the data decides, which a .pt2 archive does not name per rank; "
                             f"capture the model with 'graphguard capture' or graphguard.torch.capture instead")
        args, kwargs = [], {}
        for inp in _is(n["inputs"], list, "node inputs", where):
            val = _arg(inp["arg"], where)
            if inp.get("kind", 1) == 1:
                args.append(val)
            else:
                kwargs[_is(inp["name"], str, "an argument name", where)] = val
        check_refs(args + list(kwargs.values()), target)
        outs = _is(n["outputs"], list, "node outputs", where)
        if len(outs) == 1 and "as_tensor" in outs[0]:
            oname = _name(outs[0]["as_tensor"], where)
            shp, dt = meta(oname)
            new = [TNode(oname, "call_function", target, tuple(args), kwargs, shp, dt, loc)]
        else:
            flat = []
            for o in outs:
                if "as_tensors" in o:
                    flat += [_name(x, where) for x in _is(o["as_tensors"], list, "as_tensors", where)]
                elif "as_tensor" in o:
                    flat.append(_name(o["as_tensor"], where))
                else:
                    flat.append(None)
            base = f"{flat[0]}.multi" if flat and flat[0] else f"node{len(nodes)}"
            new = [TNode(base, "call_function", target, tuple(args), kwargs, None, None, loc)]
            for i, oname in enumerate(flat):
                if oname is not None:
                    shp, dt = meta(oname)
                    new.append(TNode(oname, "call_function", "getitem", (Ref(base), i), {}, shp, dt, loc))
        for t in new:
            if t.name in defined:
                raise InputError(f"{where}: tensor '{t.name}' is defined twice")
            defined.add(t.name)
        nodes += new
    outs = []
    out_names = []
    for spec in _is(gm["signature"]["output_specs"], list, "output_specs", where):
        kind, v = _one(spec, "an output spec", where)
        if kind not in OUTPUT_KINDS:
            raise InputError(f"{where}: unsupported output kind '{kind}'")
        if kind != "user_output":
            continue
        outs.append(Ref(_name(v["arg"]["as_tensor"], where)))
        out_names.append(f"out{len(out_names)}")
    check_refs(outs, "output")
    if not outs:
        raise InputError(f"{where}: the exported program has no user outputs")
    nodes.append(TNode("output", "output", "output", (tuple(outs),), {}))
    return TGraph(nodes, where, names, out_names)


ARCHIVE_REFUSED = {"aten.nonzero.default", "aten._local_scalar_dense.default"}


def load(req: LoadRequest) -> Graph:
    paths = [Path(p) for p in req.paths]
    if len(paths) == 1 and paths[0].suffix == ".json":
        from graphguard.ir.serde import load_graph
        return load_graph(paths[0], req.registry, req.constraints)
    graphs = [read_pt2(p, req.registry) for p in paths]
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
    groups = _default_groups(graphs, world, paths[0])
    ranks = [to_rank_graph(g, req.registry, r, groups) for r, g in enumerate(graphs)]
    return graph_from_dict(stitch(ranks, paths[0].stem, str(paths[0])), str(paths[0]), req.registry,
                           req.constraints)


def _default_groups(graphs: list[TGraph], world: int, source: Path) -> dict:
    """Archives store only group names: with one name in use it is the whole world."""
    names = set()
    for g in graphs:
        for n in g.nodes:
            if n.target.startswith("_c10d_functional.") and n.target.split(".")[1] != "wait_tensor":
                names |= {a for a in n.args if isinstance(a, str) and a not in ("sum", "avg", "max")}
    if len(names) > 1:
        raise InputError(f"{source}: archives use several process groups ({sorted(names)}); capture with "
                         f"graphguard.torch.capture to record their ranks")
    return {n: tuple(range(world)) for n in names}
