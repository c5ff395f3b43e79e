"""Capture PyTorch programs rank by rank on a fake process group (no GPU, one process).

``capture(build, example_inputs, world_size=W, backward=True)`` calls ``build(rank)`` for every rank with
a ``fake`` process group of size W initialised as that rank, compiles the module with TorchDynamo +
aot_autograd (which honours custom ``autograd.Function.backward``, e.g. Megatron's f/g operators), and
turns the forward (and backward) graphs into IR. Process-group names are resolved to rank sets while the
group is alive. ``world_size=1`` captures the sequential specification (no process group).

Names: parameters and buffers keep their module paths (``fc1.weight``), inputs their argument names,
outputs are ``out0, out1, ...``; with ``backward=True`` the incoming gradients are inputs
``tangent.out0`` and the gradients are outputs ``grad.<input name>``. In G_d every name gets ``@rank``.
"""
from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from graphguard.errors import InputError

from .convert import Ref, TGraph, TNode, dtype_name, loc_from_stack, to_rank_graph
from .stitch import stitch


@dataclass
class Captured:
    """The result of a capture: a gg.json document (sequential or distributed) and what was derived."""
    doc: dict
    relation: dict[str, list[str]] = field(default_factory=dict)  # derived input relations (DTensor)
    outputs: list[str] = field(default_factory=list)

    def graph(self, plugins=None):
        from graphguard.ir.serde import graph_from_dict
        from graphguard.ir.scalar import Constraints
        from graphguard.plugins import load_plugins
        pl = plugins or load_plugins()
        return graph_from_dict(self.doc, f"<capture {self.doc['name']}>", pl.registry, Constraints())

    def save(self, path) -> None:
        import json
        from pathlib import Path
        Path(path).write_text(json.dumps(self.doc, indent=1) + "\n")


def _public_name(source_name: str) -> str:
    """``L['self']._modules['fc1']._parameters['weight']`` -> ``fc1.weight``; ``L['x']`` -> ``x``."""
    keys = [a or b for a, b in re.findall(r"\[(?:['\"]([^'\"]+)['\"]|(\d+))\]", source_name)]
    if not keys:
        keys = re.findall(r"\.(\w+)", source_name) or [source_name]
    if any(tag in source_name for tag in ("_parameters", "_buffers", "_modules")) and len(keys) > 1:
        keys = keys[1:]
    return ".".join(keys)


def _fx_to_tnodes(gm, prefix: str = "") -> list[TNode]:
    import torch

    def conv(a):
        if isinstance(a, torch.fx.Node):
            return Ref(prefix + a.name)
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x) for x in a)
        if isinstance(a, dict):
            return {k: conv(v) for k, v in a.items()}
        return a

    out = []
    for n in gm.graph.nodes:
        val = n.meta.get("val", n.meta.get("example_value"))
        shape = dtype = None
        if isinstance(val, torch.Tensor):
            shape, dtype = tuple(val.shape), dtype_name(val.dtype)
        if n.target is operator.getitem:
            target = "getitem"
        elif n.op == "call_function":
            target = str(n.target)
        else:
            target = n.op
        out.append(TNode(prefix + n.name, n.op, target, conv(tuple(n.args)), conv(dict(n.kwargs)), shape, dtype,
                         loc_from_stack(n.meta.get("stack_trace"))))
    return out


def _decompositions(reg) -> dict:
    from torch._decomp import core_aten_decompositions

    from .convert import IDENTITY, RESHAPE, _DATA_MOVEMENT, ir_op_name
    handled = set(_DATA_MOVEMENT) | IDENTITY | RESHAPE
    out = {}
    for op, fn in core_aten_decompositions().items():
        target = str(op)
        if target not in handled and ir_op_name(target) not in reg:
            out[op] = fn
    return out


def _capture_rank(build: Callable, inputs, rank: int | None, backward: bool, groups: dict, reg=None):
    import torch
    import torch.distributed as dist
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    module = build(rank if rank is not None else 0)
    args = inputs(rank if rank is not None else 0) if callable(inputs) else inputs
    args = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    seen: dict[str, Any] = {}

    def backend(gm, example_inputs):
        seen["sources"] = [n.meta["grapharg"].source.name for n in gm.graph.nodes if n.op == "placeholder"]

        def fw(g, ex):
            seen["fw"] = g
            return make_boxed_func(g.forward)

        def bw(g, ex):
            seen["bw"] = g
            return make_boxed_func(g.forward)
        # decompose (into core ATen) exactly the ops no loaded pack defines: mse_loss, ...
        return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=_decompositions(reg))(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=False)
    try:
        out = compiled(*args)
    except Exception as e:  # capture failures are the user's program: say where, briefly
        raise InputError(f"capture of rank {rank} failed: {type(e).__name__}: {str(e).splitlines()[0]}") from None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    if backward:
        tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        if not tensors:
            raise InputError(f"backward=True but no output of rank {rank} requires grad")
        torch.autograd.backward(tensors, [torch.ones_like(o) for o in tensors])
    if "fw" not in seen:
        raise InputError(f"rank {rank}: nothing was captured (was the module called?)")
    names = [_public_name(src) for src in seen["sources"]]  # the forward's inputs, from dynamo's graph args
    if dist.is_initialized():
        from torch.distributed.distributed_c10d import _resolve_process_group
        for n in list(seen["fw"].graph.nodes) + (list(seen["bw"].graph.nodes) if "bw" in seen else []):
            if n.op == "call_function" and str(n.target).startswith("_c10d_functional."):
                for a in n.args:
                    if isinstance(a, str) and a not in groups and not a.isalpha():
                        try:
                            groups[a] = tuple(dist.get_process_group_ranks(_resolve_process_group(a)))
                        except Exception:
                            pass
    return seen, names, len(outs)


def _join(seen: dict, names: list[str], n_user: int, backward: bool, source: str) -> TGraph:
    fw_nodes = _fx_to_tnodes(seen["fw"])
    placeholders = [n for n in fw_nodes if n.op == "placeholder"]
    input_names = {p.name: names[i] for i, p in enumerate(placeholders)}
    out_node = next(n for n in fw_nodes if n.op == "output")
    fw_outs = list(out_node.args[0])
    body = [n for n in fw_nodes if n.op != "output"]
    user_names = [f"out{i}" for i in range(n_user)]
    if not backward or "bw" not in seen:
        body.append(TNode("output", "output", "output", (tuple(fw_outs[:n_user]),), {}))
        return TGraph(body, source, input_names, user_names)
    bw_nodes = _fx_to_tnodes(seen["bw"], prefix="bw.")
    bw_ph = [n for n in bw_nodes if n.op == "placeholder"]
    saved = fw_outs[n_user:]
    tangents = [p for p in bw_ph if re.match(r"bw\.tangents_\d+", p.name)]
    others = [p for p in bw_ph if p not in tangents]
    if len(others) != len(saved):
        raise InputError(f"{source}: cannot join forward and backward graphs ({len(others)} saved inputs, "
                         f"{len(saved)} saved outputs)")
    joined = list(body)
    for p, s in zip(others, saved):
        joined.append(TNode(p.name, "call_function", "aten.alias.default", (s,), {}, p.shape, p.dtype))
    for i, p in enumerate(tangents):
        input_names[p.name] = f"tangent.{user_names[i] if i < len(user_names) else i}"
        joined.append(p)
    bw_out = next(n for n in bw_nodes if n.op == "output")
    grads = list(bw_out.args[0])
    joined += [n for n in bw_nodes if n.op not in ("placeholder", "output")]
    outs, out_names = list(fw_outs[:n_user]), list(user_names)
    for i, gv in enumerate(grads):
        if gv is not None and i < len(placeholders):
            outs.append(gv)
            out_names.append(f"grad.{names[i]}")
    joined.append(TNode("output", "output", "output", (tuple(outs),), {}))
    return TGraph(joined, source, input_names, out_names)


def capture(build: Callable, example_inputs, world_size: int = 1, backward: bool = False,
            name: str = "model", plugins=None, distributed: bool | None = None) -> Captured:
    """Capture ``build(rank)`` on every rank: a distributed G_d, or with ``world_size=1`` a sequential G_s
    (``distributed=True`` makes a one-rank G_d, e.g. gradient accumulation on one device).

    ``example_inputs`` is a tuple of tensors, or a callable ``rank -> tuple`` when ranks get different
    inputs (e.g. sequence-sharded activations)."""
    if distributed is None:
        distributed = world_size > 1
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401  (registers "fake")

    from graphguard.plugins import load_plugins
    pl = plugins or load_plugins()
    reg = pl.registry
    source = f"<capture {name}>"
    if not distributed:
        if dist.is_initialized():
            dist.destroy_process_group()
        seen, names, n_user = _capture_rank(build, example_inputs, None, backward, {}, reg)
        rg = to_rank_graph(_join(seen, names, n_user, backward, source), reg, None, {})
        doc = {"graphguard": 1, "name": name, "inputs": rg.inputs, "nodes": rg.nodes, "outputs": rg.outputs}
        return Captured(doc, outputs=rg.outputs)
    ranks = []
    groups: dict[str, tuple[int, ...]] = {}
    try:
        for r in range(world_size):
            if dist.is_initialized():
                dist.destroy_process_group()
            dist.init_process_group("fake", rank=r, world_size=world_size, store=FakeStore())
            seen, names, n_user = _capture_rank(build, example_inputs, r, backward, groups, reg)
            ranks.append(to_rank_graph(_join(seen, names, n_user, backward, source), reg, r, groups))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    doc = stitch(ranks, name, source)
    return Captured(doc, outputs=doc["outputs"])
