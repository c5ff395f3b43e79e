"""Input relations from DTensor placements.

A DTensor holds a local tensor ``name@r`` on every rank r of its device mesh, and one placement per mesh dim
says how the local tensors make the global one (mesh dims nest outer to inner, DTensor's default shard
order; rank r at mesh coordinate i along a dim holds chunk i):

* ``Shard(d)``  -> ``concat(name@.., ..., dim=d)`` over that mesh dim;
* ``Replicate()`` -> every rank along that mesh dim holds the whole tensor: one relation per replica (the
  list form ``[name@0, name@1]``);
* ``Partial()`` (sum) -> ``sum(name@.., ...)`` over that mesh dim;
* ``_StridedShard(d, split_factor=k)`` (HF's ``packed_colwise``: a fused gate/up weight whose k packed
  parts are each sharded) on a one-dim mesh -> every rank's local tensor is k equal pieces along d, piece
  j of rank r being part j's r-th shard: ``concat(slice(name@0, piece 0), slice(name@1, piece 0), ...,
  slice(name@0, piece 1), ..., dim=d)``.

Where placements come from, in the TorchDynamo graph of one rank: a DTensor argument or parameter carries
them; a plain tensor argument gets the placements of the ``DTensor.from_local(x, mesh, placements)`` that
reads it (what ``parallelize_module``'s input hooks do). A DTensor *output* gives the relation of its
incoming gradient (the tangent): a gradient is laid out like the tensor it is the gradient of, except that
the gradient of a partial sum is the same on every rank (``d sum(y@r) / d y@r = 1``), so Partial becomes
Replicate. The layouts of DTensor outputs, and of the gradients DTensor leaves on parameters (a replicated
parameter's may be Partial: DTensor defers that sum), are the expectations of a capture. ``_StridedShard(d, k)``
is read two ways: on a one-dim mesh as HF's packed expert layout (rank r holds piece r of each of the k
blocks of d), on a mesh of several dims as FSDP over TP lays it out (a shard inside the later mesh dims'
shards of d, when those make k pieces). Anything else (another ``_StridedShard``, ``_MaskPartial``,
``Partial("avg")``, a non-default shard
order, a shard that does not divide its dim evenly) is refused with an :class:`InputError`: graphguard
does not guess a relation.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from graphguard.errors import InputError


@dataclass(frozen=True)
class Layout:
    """How one tensor is laid out over a device mesh: ``mesh`` is a nested list of global ranks with one
    level per placement."""
    placements: tuple
    mesh: list
    ndim: int
    shape: tuple = ()  # the global shape (where a placement's relation needs sizes)

    def relation(self, name: str, where: str = "") -> str | list[str]:
        """The relation of G_s tensor ``name`` to the local tensors ``name@r`` (a list when replicated)."""
        import numpy as np
        from torch.distributed.tensor import Partial, Replicate, Shard
        for p in self.placements:
            if _strided(p) and len(self.placements) == 1 and not self.shape:
                raise InputError(f"{where}{name}: unsupported DTensor placement {p!r} (a _StridedShard on a one-dim "
                                 f"mesh needs the tensor's global shape)")
            if type(p) not in (Shard, Replicate, Partial) and not _strided(p):
                raise InputError(f"{where}{name}: unsupported DTensor placement {p!r} (only Shard, Replicate, "
                                 f"Partial('sum') and _StridedShard map to a relation)")
            if type(p) is Partial and p.reduce_op != "sum":
                raise InputError(f"{where}{name}: unsupported DTensor placement {p!r} (only Partial('sum'))")
        placements, mesh = self.placements, np.array(self.mesh, dtype=object)
        if len(placements) > 1:  # FSDP over TP: _StridedShard as a nested plain shard
            placements, mesh = _unstride(placements, mesh, f"{where}{name}")
        rep = [i for i, p in enumerate(placements) if type(p) is Replicate]
        keep = [i for i in range(len(placements)) if i not in rep]
        out = []
        for pick in itertools.product(*(range(mesh.shape[i]) for i in rep)):
            index = [slice(None)] * mesh.ndim
            for i, j in zip(rep, pick):
                index[i] = j
            out.append(self._expr(name, [placements[i] for i in keep], mesh[tuple(index)]))
        return out[0] if len(out) == 1 else out

    def _expr(self, name: str, placements: list, mesh) -> str:
        from torch.distributed.tensor import Shard
        if not placements:
            return f"{name}@{int(mesh)}"
        parts = [self._expr(name, placements[1:], sub) for sub in mesh]
        if len(parts) == 1:
            return parts[0]
        p = placements[0]
        if _strided(p):
            d, k = p.dim % self.ndim, p.split_factor
            n = self.shape[d] // (len(parts) * k)  # one piece of one rank
            return "concat(" + ", ".join(f"slice({x}, dim={d}, start={j * n}, end={(j + 1) * n})"
                                         for j in range(k) for x in parts) + f", dim={d})"
        if type(p) is Shard:
            return f"concat({', '.join(parts)}, dim={p.dim % self.ndim})"
        return f"sum({', '.join(parts)})"

    def gradient(self) -> Layout:
        """The layout of this tensor's gradient: Partial becomes Replicate, the rest stays."""
        from torch.distributed.tensor import Partial, Replicate
        return Layout(tuple(Replicate() if type(p) is Partial else p for p in self.placements), self.mesh, self.ndim,
                      self.shape)


def _strided(p) -> bool:
    from torch.distributed.tensor.placement_types import _StridedShard
    return isinstance(p, _StridedShard)


def _unstride(placements: tuple, mesh, where: str):
    """Placements without ``_StridedShard``, and the mesh with its dims reordered to match.

    ``_StridedShard(d, split_factor=k)`` on a mesh dim is a shard along d taken *inside* the shards of the
    later mesh dims that split d, when those make k pieces: FSDP over TP (torchtitan's SimpleFSDP, FSDP2)
    shards a TP-sharded parameter, so rank (f, t) holds piece f of TP shard t. That is the plain ``Shard(d)``
    nesting with the mesh dim moved after those dims. Any other ``_StridedShard`` is refused."""
    from torch.distributed.tensor import Shard
    order, out = list(range(len(placements))), list(placements)
    for i, p in enumerate(placements):
        if not _strided(p):
            continue
        later = [j for j in range(i + 1, len(placements)) if type(placements[j]) is Shard
                 and placements[j].dim == p.dim]
        if not later or math.prod(mesh.shape[j] for j in later) != p.split_factor:
            raise InputError(f"{where}: unsupported DTensor placement {p!r} (only Shard, Replicate, Partial('sum') "
                             f"and _StridedShard map to a relation; on a mesh of several dims a _StridedShard only as "
                             f"a shard inside the later mesh dims' Shard({p.dim}), split_factor their mesh size)")
        order.remove(i)
        order.insert(order.index(later[-1]) + 1, i)
        out[i] = Shard(p.dim)
    return tuple(out[i] for i in order), mesh.transpose(order)


def _check_even(name: str, dt, where: str) -> None:
    """Refuse shards that do not divide their dim evenly, and non-default shard orders."""
    from torch.distributed.tensor import Shard
    spec = dt._spec
    for entry in getattr(spec, "shard_order", None) or ():
        if list(entry.mesh_dims) != sorted(entry.mesh_dims):
            raise InputError(f"{where}{name}: DTensor shard order {tuple(entry.mesh_dims)} on dim "
                             f"{entry.tensor_dim} is not the default (mesh dims in order); not supported")
    local = dt._local_tensor.shape
    for d in range(dt.ndim):
        k = 1
        for i, p in enumerate(dt.placements):
            if (type(p) is Shard or _strided(p)) and p.dim % dt.ndim == d:
                k *= dt.device_mesh.size(i)
                if _strided(p) and local[d] % p.split_factor:
                    k = 0  # (pieces of unequal sizes)
        if k != 1 and dt.shape[d] != local[d] * k:
            raise InputError(f"{where}{name}: dim {d} of size {dt.shape[d]} is sharded unevenly over {k} ranks "
                             f"(local size {local[d]}); only even shards map to a relation")


def _layout_of(dt, name: str, where: str) -> Layout:
    _check_even(name, dt, where)
    return Layout(tuple(dt.placements), dt.device_mesh.mesh.tolist(), dt.ndim, _shape_for(dt))


def _shape_for(dt) -> tuple:
    """The global shape where a placement's relation needs it (_StridedShard), else () (sizes may be symbolic)."""
    return tuple(int(x) for x in dt.shape) if any(_strided(p) for p in dt.placements) else ()


def graph_layouts(gm, example_inputs, names: list[str], where: str = "") -> tuple[dict, dict]:
    """From one rank's TorchDynamo graph: the :class:`Layout` of every input (by public name) that states
    its placements, and of every DTensor output (by output index)."""
    import torch
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.tensor import DTensor

    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    value = {n: v for n, v in zip(phs, example_inputs)}
    inputs: dict[str, Layout] = {}
    for n, name in zip(phs, names):
        v = value[n]
        if isinstance(v, DTensor):
            inputs[name] = _layout_of(v, name, where)
            continue
        if not isinstance(v, torch.Tensor):
            continue
        for user in n.users:
            if getattr(user.target, "__name__", None) != "from_local" or user.args[0] is not n:
                continue
            mesh = user.args[1] if len(user.args) > 1 else user.kwargs.get("device_mesh")
            placements = user.args[2] if len(user.args) > 2 else user.kwargs.get("placements")
            mesh = value.get(mesh, mesh)
            if not isinstance(mesh, DeviceMesh) or placements is None:
                raise InputError(f"{where}{name}: DTensor.from_local without a device mesh and placements")
            lay = Layout(tuple(placements), mesh.mesh.tolist(), v.dim())
            if name in inputs and inputs[name] != lay:
                raise InputError(f"{where}{name}: read by DTensor.from_local with two placements "
                                 f"{inputs[name].placements} and {lay.placements}")
            inputs[name] = lay
    outputs: dict[int, Layout] = {}
    out = next(n for n in gm.graph.nodes if n.op == "output")
    vals = out.args[0] if isinstance(out.args[0], (list, tuple)) else [out.args[0]]
    for i, v in enumerate(vals):
        ev = v.meta.get("example_value") if isinstance(v, torch.fx.Node) else None
        if isinstance(ev, DTensor):
            outputs[i] = Layout(tuple(ev.placements), ev.device_mesh.mesh.tolist(), ev.ndim, _shape_for(ev))
    return inputs, outputs


def grad_layouts(named) -> dict[str, Layout]:
    """The :class:`Layout` of every DTensor gradient that ``named`` (``(name, tensor)`` pairs: parameters and
    arguments after the backward) holds in ``.grad``, by name."""
    from torch.distributed.tensor import DTensor
    out = {}
    for name, t in named:
        g = getattr(t, "grad", None)
        if isinstance(g, DTensor):
            out[name] = Layout(tuple(g.placements), g.device_mesh.mesh.tolist(), g.ndim, _shape_for(g))
    return out
