"""Capture PyTorch programs rank by rank on a fake process group (no GPU, one process).

``capture(build, example_inputs, world_size=W, backward=True)`` calls ``build(rank)`` for every rank with
a ``fake`` process group of size W initialised as that rank, compiles the module with TorchDynamo +
aot_autograd (which honours custom ``autograd.Function.backward``, e.g. Megatron's f/g operators), and
turns the forward (and backward) graphs into IR. Process-group names are resolved to rank sets while the
group is alive. ``world_size=1`` captures the sequential specification (no process group).

Names: parameters and buffers keep their module paths (``fc1.weight``), inputs their argument names,
outputs are ``out0, out1, ...``; with ``backward=True`` the incoming gradients are inputs
``tangent.out0`` and the gradients are outputs ``grad.<input name>``. In G_d every name gets ``@rank``.
aot_autograd's descriptors say which graph input or output is which (a DTensor is flattened into its local
tensor and its mesh; only the local tensor is kept).

DTensor programs (``parallelize_module``): the placements of parameters and inputs become the input
relation, ``Captured.relation`` (see :mod:`.dtensor`); those of DTensor outputs and of the gradients left on
DTensor parameters its ``expect``. Dynamic shapes: ``dynamic={"x": {0: "S"}}`` (or a
function of the rank) marks input dims dynamic and names their sizes; the ShapeEnv's ranges become the
relation's ``symbols:`` (see :mod:`.symints`).
"""
from __future__ import annotations

import contextlib
import operator
import re
from dataclasses import dataclass, field
from typing import Any, Callable

from graphguard.errors import InputError
from graphguard.gcpause import collector_paused

from .convert import (DATA_DEPENDENT, Ref, TGraph, TNode, data_dependent, dtype_name, frame_from_stack, ir_op_name,
                      loc_from_stack, module_path, ref_names, to_rank_graph)
from .dtensor import grad_layouts, graph_layouts
from .failure import capture_failure, missing_group, quiet_torch_logs
from .hooks import refuse_tensor_hooks, translate_backward_hooks
from .repeat import (copy_layouts, expand as expand_repeat, expand_joint as expand_repeat_joint,
                     install as install_repeat)
from ..stitch import stitch
from .symints import Symbols, merge_symbols


@dataclass
class Captured:
    """The result of a capture: a gg.json document (sequential or distributed) and what was derived: the
    input relation stated by DTensor placements, the constraints of dynamic dims and the output relations
    DTensor placements state (expectations), in the shape of a relation file (``{"inputs": {...},
    "symbols": {...}, "expect": {...}}``)."""
    doc: dict
    relation: dict = field(default_factory=lambda: {"inputs": {}})
    outputs: list[str] = field(default_factory=list)

    def graph(self, plugins=None):
        from graphguard.ir.scalar import Constraints, SymbolInfo
        from graphguard.ir.serde import graph_from_dict
        from graphguard.plugins import load_plugins
        pl = plugins or load_plugins()
        cx = Constraints()
        for name, spec in self.relation.get("symbols", {}).items():
            cx.declare(SymbolInfo(name, spec.get("min", 1), spec.get("max"), spec.get("multiple_of")))
        return graph_from_dict(self.doc, f"<capture {self.doc['name']}>", pl.registry, cx)

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


def _fx_to_tnodes(gm, sym: Symbols, prefix: str = "") -> list[TNode]:
    import torch
    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)

    def conv(a, lenient=False):
        if isinstance(a, torch.fx.Node):
            val = a.meta.get("val", a.meta.get("example_value"))
            src = sym.item_source(val)
            if src is not None and bounds_of is not None:  # a slice bound read with .item(): its 0-d tensor
                return Ref(src)
            try:
                return sym.scalar(val) if isinstance(val, symbolic) else Ref(prefix + a.name)  # sizes: values
            except InputError as e:
                if lenient and getattr(e, "data_size", False):  # (a saved size the backward reads as a value)
                    return None
                raise
        if isinstance(a, symbolic):
            return sym.scalar(a)
        if isinstance(a, (list, tuple)):
            return type(a)(conv(x, lenient) for x in a)
        if isinstance(a, dict):
            return {k: conv(v, lenient) for k, v in a.items()}
        return a

    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten._local_scalar_dense.default:
            sym.read_item(n.meta.get("val"), prefix + n.args[0].name)
        bounds_of = _item_bounds(n, sym)
        if n.op == "get_attr":
            out.append(_constant(gm, n, prefix))
            continue
        if n.op == "call_function" and str(n.target) in DATA_DEPENDENT:  # before its unbacked sizes are read
            raise data_dependent(str(n.target), sym.where, loc_from_stack(n.meta.get("stack_trace")))
        val = n.meta.get("val", n.meta.get("example_value"))
        sizes = sym.data_ops.get(ir_op_name(str(n.target))) if n.op == "call_function" else None
        if sizes and isinstance(val, torch.Tensor):  # sizes the data decides: named before they are read
            x = n.args[0].meta.get("val") if n.args and isinstance(n.args[0], torch.fx.Node) else None
            bound = x.numel() if isinstance(x, torch.Tensor) else None
            for _, d in sizes:
                sym.data_size(val.shape[d], prefix + n.name, bound)
        if bounds_of is not None and n.target is torch.ops.aten.slice.Tensor and isinstance(val, torch.Tensor):
            x, dim = n.args[0].meta["val"], bounds_of[0]
            key = (bounds_of[1:], str(x.shape[dim]), dim)
            sym.lengths[key] = sym.data_size(val.shape[dim], prefix + n.name,
                                             None if isinstance(x.shape[dim], torch.SymInt) else int(x.shape[dim]),
                                             prefix="len_", same=sym.lengths.get(key))
        shape = dtype = None
        if isinstance(val, torch.Tensor):
            try:
                shape, dtype = tuple(sym.scalar(d) for d in val.shape), dtype_name(val.dtype)
            except InputError as e:
                if not getattr(e, "data_size", False):
                    raise
                loc = loc_from_stack(n.meta.get("stack_trace"))
                raise InputError(f"{sym.where}: {ir_op_name(str(n.target))}{f' at {loc}' if loc else ''} has a "
                                 f"data-dependent output shape, which graphguard relates only for nonzero "
                                 f"(torch.where(mask), mask.nonzero()) and slices at bounds read from tensors "
                                 f"(x[t[0]:t[1]]); select tokens with those, or dispatch with "
                                 f"a fixed capacity (see examples/moe-ep)") from None
        if n.target is operator.getitem:
            target = "getitem"
        elif n.op == "call_function":
            target = str(n.target)
        else:
            target = n.op
        loc, func = frame_from_stack(n.meta.get("stack_trace"))
        try:
            args, kwargs = conv(tuple(n.args), n.op == "output"), conv(dict(n.kwargs))
        except InputError as e:
            if not getattr(e, "data_size", False):
                raise
            if n.op == "call_function" and not isinstance(val, torch.Tensor):  # TorchDynamo's checks of sizes
                # the data decides, not the program
                continue
            raise InputError(f"{sym.where}: {ir_op_name(str(n.target))}{f' at {loc}' if loc else ''} reads a value "
                             f"the data decides (.item(), a data-dependent size) other than as the bound of a slice, "
                             f"which graphguard does not relate") from None
        out.append(TNode(prefix + n.name, n.op, target, args, kwargs, shape, dtype, loc, func, module_path(n.meta)))
    return out


def _item_bounds(n, sym) -> tuple | None:
    """For ``x[a:b]`` / ``slice_scatter(base, src, d, a, b)`` with a bound read from a tensor (``.item()``):
    (dim, start, end), each bound the name of the 0-d tensor it was read from or the int it is; else None."""
    import torch
    sl, sc = torch.ops.aten.slice.Tensor, torch.ops.aten.slice_scatter.default
    if n.op != "call_function" or n.target not in (sl, sc):
        return None
    first = 1 if n.target is sl else 2
    a = list(n.args) + [None] * 4
    dim = a[first] if a[first] is not None else n.kwargs.get("dim", 0)
    start = a[first + 1] if a[first + 1] is not None else n.kwargs.get("start")
    end = a[first + 2] if a[first + 2] is not None else n.kwargs.get("end")
    read = [sym.item_source(b.meta.get("val")) if isinstance(b, torch.fx.Node) else None for b in (start, end)]
    if read == [None, None]:
        return None
    rank = len(n.args[0].meta["val"].shape)
    return (int(dim) % max(rank, 1),) + tuple(("t", r) if r is not None else ("i", str(b))
                                             for r, b in zip(read, (start, end)))


def _constant(gm, n, prefix: str):
    """A tensor constant the graph reads (``torch.tensor(0.0)`` lifted by TorchDynamo) as ``aten.full``:
    only a real tensor holding one value throughout; any other is refused, never guessed."""
    import torch
    from torch._subclasses.fake_tensor import FakeTensor
    from torch.fx.graph_module import _get_attr
    v, loc = _get_attr(gm, n.target), loc_from_stack(n.meta.get("stack_trace"))
    if (not isinstance(v, torch.Tensor) or isinstance(v, FakeTensor) or v.numel() == 0
            or not bool((v == v.flatten()[0]).all())):
        what = f"tensor{list(v.shape)}" if isinstance(v, torch.Tensor) else type(v).__name__
        raise InputError(f"constant '{n.target}' ({what})" + (f" at {loc}" if loc else "") + " does not hold one "
                         "known value; only such constants are supported (graphguard does not guess the others)")
    return TNode(prefix + n.name, "call_function", "aten.full.default", (list(v.shape), v.flatten()[0].item()),
                 {"dtype": v.dtype}, tuple(v.shape), dtype_name(v.dtype), loc)


def _decompositions(reg) -> dict:
    """The core-ATen decompositions of the ops no loaded pack defines. Computed once per registry and set of
    registered torch operators (torch's table walks every CompositeImplicitAutograd op of every namespace, 0.1 s a
    capture): an op registered since (a custom op a model file defines) gives a new table."""
    import torch
    from torch._decomp import core_aten_decompositions

    from .convert import IDENTITY, RESHAPE, _DATA_MOVEMENT, ir_op_name
    key = (len(reg.ops), hash(frozenset(torch._C._dispatch_get_all_op_names())))
    cached = getattr(reg, "_fx_decompositions", None)
    if cached is not None and cached[0] == key:
        return dict(cached[1])
    handled = set(_DATA_MOVEMENT) | IDENTITY | RESHAPE
    out = {}
    for op, fn in core_aten_decompositions().items():
        target = str(op)
        if target not in handled and ir_op_name(target) not in reg:
            out[op] = fn
    reg._fx_decompositions = (key, out)
    return dict(out)


def _named_args(module, args) -> dict:
    """The example inputs by argument name (``args.0`` for varargs), as TorchDynamo's sources name them."""
    import inspect
    try:
        bound = inspect.signature(module.forward).bind(*args)
    except (TypeError, ValueError) as e:
        raise InputError(f"the example inputs do not fit {type(module).__name__}.forward: {e}") from None
    out = {}
    for k, v in bound.arguments.items():
        if isinstance(v, tuple):
            out.update({f"{k}.{i}": x for i, x in enumerate(v)})
        else:
            out[k] = v
    return out


def _capture_rank(build: Callable, inputs, rank: int | None, backward: bool, groups: dict, reg=None,
                  dynamic=None, group_ranks=None, after_backward=None, repeat: str | None = None) -> dict:
    import torch
    import torch.distributed as dist
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    where = "capture" + (f" of rank {rank}" if rank is not None else "")
    try:  # the user's code: say what failed, in one line
        module = build(rank if rank is not None else 0)
        args = inputs(rank if rank is not None else 0) if callable(inputs) else inputs
    except InputError:
        raise
    except Exception as e:
        raise InputError(f"{where}: building the model or its inputs failed: {type(e).__name__}: "
                         f"{(str(e).strip().splitlines() or [''])[0]}") from None
    args = tuple(args) if isinstance(args, (list, tuple)) else (args,)
    if isinstance(module, torch.nn.Module):
        translate_backward_hooks(module, where)
    if backward:  # (a forward alone never runs them)
        refuse_tensor_hooks(module, args, where)
    rep = None
    if repeat:
        if not isinstance(module, torch.nn.Module):
            raise InputError(f"{where}: repeat = '{repeat}' needs the program to be an nn.Module")
        rep = install_repeat(module, repeat, where, backward)
    dyn = (dynamic(rank) if callable(dynamic) else dynamic) or {}
    by_name = _named_args(module, args) if dyn else {}
    for name, dims in dyn.items():
        if not isinstance(by_name.get(name), torch.Tensor):
            raise InputError(f"{where}: dynamic dims given for '{name}', which is not a tensor argument "
                             f"(arguments: {', '.join(by_name)})")
        for d in dims:
            torch._dynamo.mark_dynamic(by_name[name], d)
    data_ops = {op.name: op.data_sizes for op in reg.ops.values() if op.data_sizes} if reg is not None else {}
    seen: dict[str, Any] = {"sym": Symbols(where, rank, data_ops), "repeat": rep}

    def backend(gm, example_inputs):
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        seen["names"] = names = [_public_name(n.meta["grapharg"].source.name) for n in phs]
        seen["layouts"] = graph_layouts(gm, example_inputs, names, f"{where}: ")
        for n, name in zip(phs, names):
            for d, text in dyn.get(name, {}).items():
                seen["sym"].bind(name, d, n.meta["example_value"].shape[d], text)

        def fw(g, ex):
            seen["fw"] = g
            return make_boxed_func(g.forward)

        def bw(g, ex):
            seen["bw"] = g
            return make_boxed_func(g.forward)
        # decompose (into core ATen) exactly the ops no loaded pack defines: mse_loss, ...
        return aot_autograd(fw_compiler=fw, bw_compiler=bw, decompositions=_decompositions(reg))(gm, example_inputs)

    made: set = set()  # process groups made for collectives given a rank list (below)
    while True:
        torch._dynamo.reset()
        compiled = torch.compile(module, backend=backend, fullgraph=True, dynamic=None if dyn else False)
        try:
            with quiet_torch_logs():  # (torch logs a failing op's traceback before raising: the one line says it)
                if rep is not None:  # (forward only: no joint graph; with backward the stand-ins have one)
                    try:
                        with torch.no_grad() if not backward else contextlib.nullcontext():
                            out = compiled(*args)
                    finally:
                        rep.restore()
                else:
                    out = compiled(*args)
            break
        except InputError:
            raise
        except Exception as e:  # capture failures are the user's program: say where, briefly
            cause = e.inner_exception if isinstance(getattr(e, "inner_exception", None), InputError) else None
            if cause is not None:
                raise cause from None
            # a collective given a rank list (group=[0, 1]) that no group of the rank's has: torch resolves rank
            # lists to groups made with dist.new_group, as the job's setup would have made it; make it, again
            ranks = missing_group(e)
            if ranks is not None and ranks not in made and rep is None and dist.is_initialized():
                made.add(ranks)
                dist.new_group(list(ranks))
                continue
            if ranks is not None:
                raise InputError(f"{where}: a collective over ranks {list(ranks)}, which is no process group of "
                                 f"rank {rank}'s (torch resolves a rank list to a group made with dist.new_group; "
                                 f"is rank {rank} one of them?)") from None
            root = getattr(e, "inner_exception", None) or e  # (a backend's failure: what it raised says why)
            while (root.__cause__ or root.__context__) is not None:  # (TorchDynamo's wrappers: the error met)
                root = root.__cause__ or root.__context__
            loc = loc_from_stack(str(e))  # (TorchDynamo's message ends with the user's frames)
            hint = ""
            if type(root).__name__ == "GuardOnDataDependentSymNode":
                hint = (" (the program branches or loops on tensor values there -- .item(), int(t), a loop over "
                        "the experts hit --, which no single graph captures; write it with shapes known before it "
                        "runs)")
            # the real cause, the module whose forward ran it and the TP plan entry of that module (failure.py)
            raise InputError(capture_failure(where, e, loc, module if isinstance(module, torch.nn.Module) else None,
                                             args, hint, eager=rep is None)) from None
    outs = out if isinstance(out, (list, tuple)) else (out,)
    if backward:
        tensors = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
        if not tensors:
            raise InputError(f"backward=True but no output of rank {rank} requires grad")
        with quiet_torch_logs():
            torch.autograd.backward(tensors, [torch.ones_like(o) for o in tensors])
        seen["grad_layouts"] = grad_layouts(list(module.named_parameters()) + [
            (k, v) for k, v in _named_args(module, args).items() if isinstance(v, torch.Tensor)])
        if after_backward is not None:
            _capture_after_backward(module, after_backward, seen, where, reg)
    if "fw" not in seen:
        raise InputError(f"rank {rank}: nothing was captured (was the module called?)")
    seen["sym"].finish()
    # the tensors the module returns: TorchDynamo's graph returns them first, then the tensors a forward
    # stores on its modules (Megatron's MoE dispatcher keeps its token order there), which are no output
    seen["n_user"] = sum(isinstance(o, torch.Tensor) for o in torch.utils._pytree.tree_leaves(out))
    if dist.is_initialized():
        from torch.distributed.distributed_c10d import _resolve_process_group
        for n in [n for k in ("fw", "bw", "post") if k in seen for n in seen[k].graph.nodes]:
            if n.op == "call_function" and (str(n.target).startswith("_c10d_functional.")
                                            or str(n.target) in getattr(reg, "collective_ops", {})):
                for a in n.args:
                    if isinstance(a, str) and a not in groups and not a.isalpha():
                        try:
                            groups[a] = tuple(dist.get_process_group_ranks(_resolve_process_group(a)))
                        except Exception:
                            ranks = group_ranks(a) if group_ranks is not None else None
                            if ranks is not None:
                                groups[a] = tuple(int(r) for r in ranks)
    return seen


def _capture_after_backward(module, step: Callable, seen: dict, where: str, reg) -> None:
    """Capture ``step(module, grads)``, the gradient step a framework runs after backward (Megatron's
    ``finalize_model_grads`` all-reduces sequence-parallel parameters' gradients), as a third graph:
    ``grads`` maps parameter names to their gradients and the step updates them in place. Its inputs must
    be gradients; ``seen["post"]`` is the graph and ``seen["post_names"]`` the parameter each of its
    inputs is the gradient of. A step that computes nothing leaves no graph."""
    import torch
    from functorch.compile import make_boxed_func
    from torch._dynamo.backends.common import aot_autograd

    grads = {n: p.grad for n, p in module.named_parameters() if p.grad is not None}
    by_id = {id(g): n for n, g in grads.items()}

    def backend(gm, example_inputs):
        names = []
        for n in gm.graph.nodes:
            if n.op == "placeholder":
                name = by_id.get(id(n.meta["grapharg"].example))
                if name is None:
                    raise InputError(f"{where}: the step after backward reads "
                                     f"{_public_name(n.meta['grapharg'].source.name)}, not a gradient")
                names.append(name)
        seen["post_names"] = names

        def fw(g, ex):
            seen["post"] = g
            return make_boxed_func(g.forward)
        return aot_autograd(fw_compiler=fw, decompositions=_decompositions(reg))(gm, example_inputs)

    torch._dynamo.reset()
    compiled = torch.compile(lambda gs: step(module, gs), backend=backend, fullgraph=True, dynamic=False)
    given = dict(grads)
    try:
        with torch.no_grad():
            compiled(given)
    except InputError:
        raise
    except Exception as e:
        cause = e.inner_exception if isinstance(getattr(e, "inner_exception", None), InputError) else None
        if cause is not None:
            raise cause from None
        raise InputError(f"{where}: the step after backward failed: {type(e).__name__}: "
                         f"{(str(e).strip().splitlines() or [''])[0]}") from None
    if given.keys() != grads.keys() or any(given[n] is not g for n, g in grads.items()):
        raise InputError(f"{where}: the step after backward must update the gradients in place, not replace "
                         f"or remove entries of its dict")


def _join_after_backward(seen: dict, sym, joined: list, outs: list, out_names: list, source: str) -> None:
    """Append the step after backward (:func:`_capture_after_backward`) to a joined graph: its inputs are
    the backward's gradient outputs, and the gradients it updates replace them as outputs."""
    nodes = _fx_to_tnodes(seen["post"], sym, prefix="post.")
    graph = list(seen["post"].graph.nodes)
    where_out = {name: i for i, name in enumerate(out_names)}
    for t, n in zip(nodes, graph):
        if t.op != "placeholder":
            continue
        base, _ = _desc(n.meta.get("desc"))
        grad = f"grad.{seen['post_names'][base.idx]}" if type(base).__name__ == "PlainAOTInput" else None
        if grad not in where_out:
            raise InputError(f"{source}: the step after backward reads {grad or t.name}, which backward "
                             f"does not output")
        joined.append(TNode(t.name, "call_function", "aten.alias.default", (outs[where_out[grad]],), {},
                            t.shape, t.dtype))
    out_node = next(t for t in nodes if t.op == "output")
    joined += split_coalesced([t for t in nodes if t.op not in ("placeholder", "output")], out_node)
    out = next(n for n in graph if n.op == "output")
    for v, d in zip(next(t for t in nodes if t.op == "output").args[0], out.meta["desc"]):
        base, _ = _desc(d)
        if type(base).__name__ == "InputMutationAOTOutput":
            outs[where_out[f"grad.{seen['post_names'][base.mutated_input.idx]}"]] = v


def split_coalesced(nodes: list[TNode], out: TNode) -> list[TNode]:
    """One rank's all-reduce of coalesced tensors written as one all-reduce per tensor.

    A gradient step coalesces (Megatron's ``_flatten_dense_tensors``: a concat of flattened gradients, one
    all-reduce, then ``_unflatten_dense_tensors``: slices of the result, copied back). An all-reduce acts
    element by element, so ``all_reduce(concat(a, b)) = concat(all_reduce(a), all_reduce(b))``, and a slice
    of a concat on one piece's bounds is that piece: each slice becomes the all-reduce of its piece. Done
    only where every read of the result is such a slice and the concat is read by nothing else (an in-place
    ``copy`` into it writes, not reads); every rank rewrites alike, so the collectives still pair up. Other
    nodes are returned unchanged. ``out`` is the graph's output node (its reads count)."""
    by = {t.name: t for t in nodes}
    users: dict[str, list[TNode]] = {}
    for t in nodes + [out]:
        for r in ref_names((t.args, t.kwargs)):
            users.setdefault(r, []).append(t)
    replace: dict[str, list[TNode]] = {}
    drop: set[str] = set()
    for ar in nodes:
        if ar.target != "_c10d_functional.all_reduce.default" or not isinstance(ar.args[0], Ref):
            continue
        cat = by.get(ar.args[0].name)
        if cat is None or cat.target != "aten.cat.default":
            continue
        pieces = [by.get(r.name) for r in cat.args[0]] if all(isinstance(r, Ref) for r in cat.args[0]) else []
        dim = cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)
        if not pieces or any(p is None or p.shape is None or not isinstance(dim, int) or dim < 0
                             or len(p.shape) <= dim or not isinstance(p.shape[dim], int) for p in pieces):
            continue
        bounds, off = {}, 0
        for i, p in enumerate(pieces):
            bounds[(off, off + p.shape[dim])] = i
            off += p.shape[dim]
        same, todo, slices, ok = {ar.name}, [ar.name], [], True
        while todo and ok:  # the values equal to the all-reduce's result, and the slices read of them
            for u in users.get(todo.pop(), []):
                if u.target in ("_c10d_functional.wait_tensor.default", "aten.alias.default") \
                        or (u.target == "aten.copy.default" and isinstance(u.args[1], Ref) and u.args[1].name in same
                            and isinstance(u.args[0], Ref) and u.args[0].name == cat.name):
                    if u.name not in same:
                        same.add(u.name)
                        todo.append(u.name)
                elif u.target == "aten.slice.Tensor" and len(u.args) == 4 and u.args[1] == dim \
                        and (u.args[2], u.args[3]) in bounds and u.kwargs.get("step", 1) == 1:
                    slices.append(u)
                else:
                    ok = False
        readers_of_cat = [u for u in users.get(cat.name, []) if u.name not in same and u is not ar]
        if not ok or not slices or readers_of_cat or cat.name in ref_names(out.args) or same & set(ref_names(out.args)):
            continue
        new = [TNode(f"{ar.name}.{i}", "call_function", ar.target, (Ref(p.name),) + tuple(ar.args[1:]), ar.kwargs,
                     p.shape, p.dtype, ar.loc, ar.func, ar.module) for i, p in enumerate(pieces)]
        replace[ar.name] = new
        for sl in slices:
            piece = new[bounds[(sl.args[2], sl.args[3])]]
            replace[sl.name] = [TNode(sl.name, "call_function", "aten.alias.default", (Ref(piece.name),), {},
                                      sl.shape, sl.dtype, sl.loc, sl.func, sl.module)]
        drop |= (same - {ar.name}) | {cat.name}
    result = []
    for t in nodes:
        if t.name not in drop:
            result.extend(replace.get(t.name, [t]))
    return result


def _desc(d) -> tuple[Any, bool]:
    """An aot_autograd descriptor without its subclass wrappers, and whether it is a DTensor's local tensor
    (or a plain value) rather than another attribute (its device mesh)."""
    local = True
    while type(d).__name__.startswith("SubclassGetAttrAOT"):
        local = local and d.attr == "_local_tensor"
        d = d.base
    return d, local


def _join(seen: dict, backward: bool, source: str) -> TGraph:
    """One TGraph from the forward (and backward) graph, with public input and output names."""
    names, n_user, sym = seen["names"], seen["n_user"], seen["sym"]
    fw_nodes = _fx_to_tnodes(seen["fw"], sym)
    fw_descs = [n.meta.get("desc") for n in seen["fw"].graph.nodes]
    input_names = {}
    for t, d in zip(fw_nodes, fw_descs):
        base, local = _desc(d)
        if t.op == "placeholder" and local and type(base).__name__ == "PlainAOTInput":
            input_names[t.name] = names[base.idx]
    rep = seen.get("repeat")
    if rep is not None and not (backward and rep.backward):
        fw_nodes = expand_repeat(fw_nodes, input_names, rep, source)
        copy_layouts(rep, seen["layouts"][0])
    out_node = next(n for n in seen["fw"].graph.nodes if n.op == "output")
    fw_out = next(t for t in fw_nodes if t.op == "output")
    user: dict[int, Any] = {}
    saved = []
    for v, d in zip(fw_out.args[0], out_node.meta["desc"]):
        base, local = _desc(d)
        kind = type(base).__name__
        if kind == "PlainAOTOutput" and local:
            user[base.idx] = v
        elif kind.startswith("SavedForBackwards"):
            saved.append(v)
    user_names = [f"out{i}" for i in range(n_user) if i in user]
    outs = [user[i] for i in range(n_user) if i in user]
    body = [n for n in fw_nodes if n.op != "output"]
    if not backward or "bw" not in seen:
        body.append(TNode("output", "output", "output", (tuple(outs),), {}))
        return TGraph(body, source, input_names, user_names)
    bw_nodes = _fx_to_tnodes(seen["bw"], sym, prefix="bw.")
    bw_graph = list(seen["bw"].graph.nodes)
    joined, others = list(body), []
    for t, n in zip(bw_nodes, bw_graph):
        if t.op != "placeholder":
            continue
        base, local = _desc(n.meta.get("desc"))
        if type(base).__name__ == "TangentAOTInput":
            k = base.output.idx
            if local and k >= n_user and k in user:
                # a tensor the forward stored on a module, not returned: no loss reads it, its gradient is 0
                joined.append(TNode(t.name, "call_function", "aten.zeros_like.default", (user[k],), {}, t.shape,
                                    t.dtype))
            elif local:
                input_names[t.name] = f"tangent.out{k}"
                joined.append(t)
        else:
            others.append(t)
    # saved tensors pair up in order; saved sizes and meshes (before the tensors in the backward's inputs,
    # after them in the forward's outputs) are not tensors: their uses were replaced by their values
    shapes = {t.name: t.shape for t in fw_nodes}
    saved = [v for v in saved if isinstance(v, Ref) and shapes.get(v.name) is not None]
    others = [t for t in others if t.shape is not None]
    if len(others) != len(saved):
        raise InputError(f"{source}: cannot join forward and backward graphs ({len(others)} saved inputs, "
                         f"{len(saved)} saved outputs)")
    for p, s in zip(others, saved):
        joined.append(TNode(p.name, "call_function", "aten.alias.default", (s,), {}, p.shape, p.dtype))
    joined += [t for t in bw_nodes if t.op not in ("placeholder", "output")]
    bw_out = next(n for n in bw_graph if n.op == "output")
    out_names = list(user_names)
    for gv, d in zip(next(t for t in bw_nodes if t.op == "output").args[0], bw_out.meta["desc"]):
        base, local = _desc(d)
        if gv is not None and local and type(base).__name__ == "GradAOTOutput":
            outs.append(gv)
            out_names.append(f"grad.{names[base.grad_of.idx]}")
    if rep is not None and rep.backward:  # (layers whose backward is a stand-in's: copies of the template's)
        joined, outs = expand_repeat_joint(joined, len(body), outs, out_names, input_names, rep, source)
        copy_layouts(rep, seen["layouts"][0])
    if "post" in seen:
        _join_after_backward(seen, sym, joined, outs, out_names, source)
    joined.append(TNode("output", "output", "output", (tuple(outs),), {}))
    return TGraph(joined, source, input_names, out_names)


def _relation(per_rank: list[dict], what: str, source: str, convert) -> dict:
    """One relation per tensor from every rank's layouts; ranks must agree. A tensor whose ranks lay it out
    on different device meshes (sub-meshes: TP groups of a data-parallel job, each holding its own batch
    shard) states no relation to the G_s tensor: it is left out (a model file's ``relation()`` gives it)."""
    rel: dict = {}
    mesh: dict = {}
    for r, layouts in enumerate(per_rank):
        for key, lay in layouts.items():
            name, text = convert(key, lay)
            if mesh.get(name, lay.mesh) != lay.mesh:
                rel.pop(name, None)
                mesh[name] = None
                continue
            if name in rel and rel[name] != text:
                raise InputError(f"{source}: ranks disagree on the placements of {what} '{name}' "
                                 f"(rank {r}: {text})")
            if mesh.get(name, lay.mesh) is not None:
                rel[name] = text
                mesh[name] = lay.mesh
    return rel


def capture(build: Callable, example_inputs, world_size: int = 1, backward: bool = False,
            name: str = "model", plugins=None, distributed: bool | None = None, dynamic=None,
            group_ranks: Callable[[str], Any] | None = None,
            after_backward: Callable | None = None, repeat: str | None = None) -> Captured:
    """Capture ``build(rank)`` on every rank: a distributed G_d, or with ``world_size=1`` a sequential G_s
    (``distributed=True`` makes a one-rank G_d, e.g. gradient accumulation on one device).

    ``example_inputs`` is a tuple of tensors, or a callable ``rank -> tuple`` when ranks get different
    inputs (e.g. sequence-sharded activations). ``dynamic`` (a dict, or a callable ``rank -> dict``; rank is
    None for the sequential program) names dynamic input dims: ``{"x": {0: "S"}}``; on a rank holding a
    sequence shard of x that is ``{"x": {0: "S/2"}}``. ``group_ranks`` (``name -> ranks or None``) resolves the
    process-group names a collective custom op passes that torch.distributed does not know (vLLM's
    ``vllm.all_reduce(x, "tp:0")`` names its own group coordinator); it is called while the rank's groups are
    alive. ``after_backward(module, grads)``, with
    ``backward=True``, is the gradient step run after backward (e.g. Megatron's all-reduce of
    sequence-parallel gradients): it updates ``grads`` (parameter name -> gradient) in place, and the
    gradients it leaves are the program's gradient outputs. The result's ``relation`` holds the input relations
    DTensor placements state (and, for DTensor outputs, their tangents) and the symbols' constraints."""
    if distributed is None:
        distributed = world_size > 1
    import torch.distributed as dist

    from graphguard.plugins import load_plugins
    pl = plugins or load_plugins()
    reg = pl.registry
    source = f"<capture {name}>"
    if not distributed:
        if dist.is_initialized():
            dist.destroy_process_group()
        groups: dict[str, tuple[int, ...]] = {}  # a one-rank group the program made itself (Megatron at TP=1)
        seen = _capture_rank(build, example_inputs, None, backward, groups, reg, dynamic,
                             after_backward=after_backward, repeat=repeat)
        with collector_paused():
            rg = to_rank_graph(_join(seen, backward, source), reg, None, groups)
        doc = {"graphguard": 1, "name": name, "inputs": rg.inputs, "nodes": rg.nodes, "outputs": rg.outputs,
               **_repeat_doc(seen.get("repeat"))}
        return Captured(doc, _relation_doc({}, seen["sym"].constraints), outputs=rg.outputs)
    parts = [capture_one_rank(build, example_inputs, r, world_size, backward, reg, dynamic, group_ranks,
                              after_backward, repeat, source) for r in range(world_size)]
    return assemble(parts, name, source, backward)


_RULES_SET = False  # (whether a process group was made in this process since TorchDynamo's trace rules loaded)


def _init_fake_group(rank: int, world_size: int) -> None:
    """A fake process group for one rank. ``init_process_group`` clears TorchDynamo's trace-rule caches (rules
    evaluated while torch.distributed was half imported may lack its entries) and rebuilds them at the next
    compile, 50 ms a rank; once cleared after torch.distributed loaded they hold its rules, so later groups
    keep them."""
    global _RULES_SET
    import torch._dynamo.trace_rules as rules
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # (registers "fake")
    clear = rules.clear_lru_cache
    if _RULES_SET:
        rules.clear_lru_cache = lambda: None
    try:
        dist.init_process_group("fake", rank=rank, world_size=world_size, store=FakeStore())
    finally:
        rules.clear_lru_cache = clear
    _RULES_SET = True


def capture_one_rank(build: Callable, example_inputs, rank: int, world_size: int, backward: bool, reg,
                     dynamic=None, group_ranks=None, after_backward=None, repeat: str | None = None,
                     source: str = "<capture>") -> tuple:
    """Rank ``rank`` of a distributed capture (a fake process group of ``world_size`` ranks): its graph in IR
    terms and what :func:`assemble` reads of it (layouts, symbol constraints) -- plain data, so that ranks may be
    captured in other processes (``graphguard capture --workers``)."""
    import torch.distributed as dist
    from torch.distributed.tensor.debug import _clear_sharding_prop_cache
    groups: dict[str, tuple[int, ...]] = {}
    try:
        if dist.is_initialized():
            dist.destroy_process_group()
        _init_fake_group(rank, world_size)
        _clear_sharding_prop_cache()  # DTensor caches output specs holding the previous rank's mesh
        seen = _capture_rank(build, example_inputs, rank, backward, groups, reg, dynamic, group_ranks,
                             after_backward, repeat)
        with collector_paused():
            rg = to_rank_graph(_join(seen, backward, source), reg, rank, groups)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return rg, {"layouts": seen["layouts"], "grad_layouts": seen.get("grad_layouts", {}),
                "constraints": seen["sym"].constraints, "repeat": seen.get("repeat")}


def _repeat_doc(rep) -> dict:
    """What a graph file records of a stack traced once (the certificate states it)."""
    if rep is None:
        return {}
    return {"repeat": {"path": rep.path, "layers": rep.layers, **({"template": rep.template} if rep.template else {}),
                       **({"compared": list(rep.compared)} if rep.compared else {})}}


def assemble(parts: list[tuple], name: str, source: str, backward: bool) -> Captured:
    """The distributed program from its ranks' :func:`capture_one_rank` results, in rank order."""
    ranks, seens = [p[0] for p in parts], [p[1] for p in parts]
    with collector_paused():
        doc = stitch(ranks, name, source)
    doc.update(_repeat_doc(seens[0].get("repeat")))
    inputs = {n["name"].rsplit("@", 1)[0] for n in doc["inputs"]}
    rel = _relation([{k: v for k, v in s["layouts"][0].items() if k in inputs} for s in seens], "input", source,
                    lambda k, lay: (k, lay.relation(k, f"{source}: ")))
    if backward:
        rel.update(_relation([s["layouts"][1] for s in seens], "output", source,
                             lambda i, lay: (f"tangent.out{i}", lay.gradient().relation(f"tangent.out{i}"))))
        rel = {k: v for k, v in rel.items() if k in inputs}
    return Captured(doc, _relation_doc(rel, merge_symbols(*(s["constraints"] for s in seens)),
                                       _stated_outputs(seens, doc, source)), outputs=doc["outputs"])


def _stated_outputs(seens: list[dict], doc: dict, source: str) -> dict:
    """The relations DTensor states for outputs: a DTensor output's placements (``Partial`` -> a sum, which
    the certificate may then hold) and those of the gradients DTensor leaves on parameters. A placement with
    no relation (``Partial("avg")``...) states nothing."""
    def stated(name, lay):
        try:
            return name, lay.relation(name)
        except InputError:
            return name, None
    outputs = {o.rsplit("@", 1)[0] for o in doc["outputs"]}
    out = _relation([s["layouts"][1] for s in seens], "output", source, lambda i, lay: stated(f"out{i}", lay))
    out.update(_relation([s.get("grad_layouts", {}) for s in seens], "gradient", source,
                         lambda n, lay: stated(f"grad.{n}", lay)))
    return {k: v for k, v in out.items() if k in outputs and v is not None}


def _relation_doc(inputs: dict, symbols: dict, expect: dict | None = None) -> dict:
    return {"inputs": inputs, **({"symbols": symbols} if symbols else {}), **({"expect": expect} if expect else {})}
