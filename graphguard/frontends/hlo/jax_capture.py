"""Capture JAX programs as HLO: the specification, every rank's program and the input relation.

``capture(fn, args, mesh=..., in_shardings=...)`` lowers ``fn`` with ``jax.jit`` and the shardings:

* **GSPMD** (``impl=None``): the specification is the *pre-partition* module (one device; GSPMD / Shardy
  sharding annotations are identities to the frontend), the implementation the *post-partition* SPMD module:
  one module for every rank (``partition-id`` = rank), as XLA's SPMD partitioner leaves it -- dumped by the
  compilation (``xla_dump_hlo_pass_re=spmd-partitioning``), before the optimisation passes that follow
  rewrite it (they reassociate constant factors, move reshapes across elementwise ops, flatten dots to 2-D:
  semantics-preserving, but not partitioning, and not what the specification says).
* **shard_map** (``impl=g``, the shard_map program computing what ``fn`` computes): the specification is
  ``fn`` lowered for one device, the implementation ``g`` compiled with ``in_shardings`` on ``mesh``, read
  after partitioning as above.

``backward=True`` captures forward and backward: ``fn(*args)`` becomes ``(fn(*args), vjp(cotangent))``
with the cotangent an extra, replicated input named ``tangent.out``; the outputs are then ``out0`` (the
result, or its leaves ``out0``, ``out1``...) followed by the gradients of every input leaf in order.

Inputs are named after the arguments (``inspect.signature`` for positional arguments, then pytree keys:
``params.wq``): the capture renames the entry parameters of both modules, so relation files read like the
program. The relation comes from the shardings: a ``PartitionSpec`` axis on dim d -> the shards concatenated
along d in device order (``w1: concat(w1@0, w1@1, dim=1)``), no axis -> the same tensor on every rank
(``x: [x@0, x@1]``); a tensor sharded over some mesh axes and replicated over others gets one concat per
replica, as a list. The output shardings, read the same way, are the relation's ``expect:`` (a result of
``jit`` is a whole array: a replicated output must be the same on every rank, never its ranks' partial sums);
a model file's ``expect()`` overrides them output by output.

JAX must see enough host devices: ``--xla_force_host_platform_device_count`` is read when JAX initialises its
CPU backend. :mod:`graphguard.jax` adds ``--xla_force_host_platform_device_count=8`` to ``XLA_FLAGS`` when
it is imported before JAX; otherwise set it yourself before ``import jax``.
"""
from __future__ import annotations

import inspect
import json
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from graphguard.errors import InputError
from graphguard.frontends import run_model_file
from graphguard.ir.relation import relation_yaml

# the implementation is the module right after XLA's SPMD partitioner: what partitioning made of the
# specification, before the optimisation passes rewrite both alike (reassociated constants, reshapes moved
# across elementwise ops, dots canonicalised to 2-D)
PARTITIONED = "after_spmd-partitioning"


@dataclass
class Captured:
    """A captured pair: serialized ``HloModuleProto`` bytes of the specification and of the SPMD implementation
    (one module, ``world`` ranks), the input relation (a relation-file dict) and what the outputs are."""
    spec: bytes
    impl: bytes
    world: int
    relation: dict
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)  # "out0 = fn(...)", "out1 = grad of w1"...

    def save(self, out_dir) -> dict:
        """Write ``spec.hlo.pb``, ``impl.hlo.pb`` and ``relation.yaml`` into ``out_dir``; return their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        files = {"spec": out / "spec.hlo.pb", "impl": out / "impl.hlo.pb", "relation": out / "relation.yaml"}
        files["spec"].write_bytes(self.spec)
        files["impl"].write_bytes(self.impl)
        files["relation"].write_text(relation_yaml(self.relation))
        (out / "outputs.json").write_text(json.dumps(self.outputs, indent=1) + "\n")
        return files

    def verify(self, **kw):
        """``graphguard.verify`` of the pair (files written to a temporary folder)."""
        import tempfile

        import graphguard
        with tempfile.TemporaryDirectory() as d:
            f = self.save(d)
            return graphguard.verify(str(f["spec"]), str(f["impl"]), str(f["relation"]), frontend="hlo", **kw)


# -- names ------------------------------------------------------------------------------------------

def _ident(s: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.]+", "_", s).strip("._") or "arg"
    return s if re.match(r"[A-Za-z_]", s) else "a" + s


def _leaf_names(fn: Callable, args: tuple) -> list[str]:
    """One name per flattened leaf of ``args``: the parameter name, then the pytree keys (``params.wq``)."""
    import jax
    try:
        params = [p.name for p in inspect.signature(fn).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = []
    for k, a in enumerate(args):
        top = params[k] if k < len(params) else f"arg{k}"
        for path, _ in jax.tree_util.tree_flatten_with_path(a)[0]:
            keys = []
            for p in path:
                for attr in ("key", "name", "idx"):
                    if hasattr(p, attr):
                        keys.append(str(getattr(p, attr)))
                        break
            names.append(_ident(".".join([top] + keys)))
    seen: dict[str, int] = {}
    out = []
    for n in names:  # unique
        seen[n] = seen.get(n, 0) + 1
        out.append(n if seen[n] == 1 else f"{n}.{seen[n]}")
    return out


def _module_bytes(dumped: bytes, world: int) -> bytes:
    """The ``HloModuleProto`` inside a dumped ``HloProto``, declaring ``world`` partitions (the dump has no device
    assignment: the frontend reads the rank count from it)."""
    from .proto import HloProto
    m = HloProto.FromString(dumped).hlo_module
    m.device_assignment.replica_count, m.device_assignment.computation_count = 1, world
    return m.SerializeToString()


def _rename_parameters(proto: bytes, names: list[str]) -> bytes:
    """The module with its entry parameters named ``names`` (by parameter number); everything else kept."""
    from .proto import HloModuleProto
    m = HloModuleProto.FromString(proto)
    entry = next((c for c in m.computations if c.name == m.entry_computation_name or c.id == m.entry_computation_id),
                 m.computations[-1])
    params = [i for i in entry.instructions if i.opcode == "parameter"]
    if len(params) != len(names):
        raise InputError(f"the lowered module has {len(params)} parameters for {len(names)} input leaves")
    taken = {i.name for c in m.computations for i in c.instructions} - {i.name for i in params}
    for i in params:
        n = names[i.parameter_number]
        if n in taken:
            raise InputError(f"input name '{n}' clashes with an instruction of the module; rename the argument")
        i.name = n
    return m.SerializeToString()


# -- relations --------------------------------------------------------------------------------------

def _relation_of(name: str, shape: tuple, indices: list[tuple]) -> str | list[str]:
    """The relation of a global tensor from the index (a tuple of slices) each rank holds."""
    full = [tuple(s.indices(n)[:2]) for s, n in zip(indices[0], shape)] if indices else []

    def box(ix):
        return tuple(tuple(s.indices(n)[:2]) for s, n in zip(ix, shape))
    boxes = [box(ix) for ix in indices]
    if all(b == tuple(full) and all(lo == 0 and hi == n for (lo, hi), n in zip(b, shape)) for b in boxes):
        return [f"{name}@{r}" for r in range(len(boxes))]
    by_box: dict[tuple, list[int]] = {}
    for r, b in enumerate(boxes):
        by_box.setdefault(b, []).append(r)
    copies = {len(v) for v in by_box.values()}
    if len(copies) != 1:
        raise InputError(f"input {name}: its shards are not replicated evenly; write its relation by hand")
    n_copies = copies.pop()

    def build(region: tuple, pieces: list[tuple], k: int) -> str:
        if len(pieces) == 1:
            if pieces[0] != region:
                raise InputError(f"input {name}: the shards do not tile the tensor")
            return f"{name}@{by_box[pieces[0]][k]}"
        for d in range(len(shape)):
            starts = sorted({p[d][0] for p in pieces})
            if len(starts) > 1:
                parts = [build(tuple((s, next(p[d][1] for p in pieces if p[d][0] == s)) if j == d else region[j]
                                     for j in range(len(shape))),
                               [p for p in pieces if p[d][0] == s], k) for s in starts]
                return f"concat({', '.join(parts)}, dim={d})"
        raise InputError(f"input {name}: overlapping shards")

    region = tuple((0, n) for n in shape)
    exprs = [build(region, list(by_box), k) for k in range(n_copies)]
    return exprs[0] if n_copies == 1 else exprs


def _partition_devices(compiled, world: int) -> list:
    """The device each partition (rank) runs on, in partition order."""
    devs = list(compiled.runtime_executable().local_devices())
    if len(devs) != world:
        raise InputError(f"cannot tell which device runs each of the {world} partitions")
    return devs


def _shardings(mesh, in_shardings, args) -> tuple[tuple, list]:
    """``in_shardings`` as jit takes them (one NamedSharding pytree per argument) and one NamedSharding per
    flattened leaf. Per argument: a PartitionSpec / NamedSharding / None (replicated) for all its leaves, or a
    pytree of those shaped like the argument."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    def named(s):
        return NamedSharding(mesh, PartitionSpec() if s is None else s) if not isinstance(s, NamedSharding) else s

    def is_spec(x):
        return x is None or isinstance(x, (PartitionSpec, NamedSharding))
    if in_shardings is None:
        in_shardings = (None,) * len(args)
    in_shardings = tuple(in_shardings)
    if len(in_shardings) != len(args):
        raise InputError(f"in_shardings has {len(in_shardings)} entries for {len(args)} arguments")
    per_arg, leaves = [], []
    for s, a in zip(in_shardings, args):
        if is_spec(s):
            tree = jax.tree_util.tree_map(lambda _, s=s: named(s), a)
        else:
            tree = jax.tree_util.tree_map(named, s, is_leaf=is_spec)
        per_arg.append(tree)
        leaves += jax.tree_util.tree_leaves(tree, is_leaf=lambda x: isinstance(x, NamedSharding))
    return tuple(per_arg), leaves


# -- capture ----------------------------------------------------------------------------------------

def _with_backward(fn: Callable) -> Callable:
    import jax

    def fwd_bwd(*args_and_ct):
        *args, ct = args_and_ct
        out, vjp = jax.vjp(fn, *args)
        return out, vjp(ct)
    return fwd_bwd


def capture(fn: Callable, args: tuple, *, mesh=None, in_shardings=None, impl: Callable | None = None,
            backward: bool = False, out_dir=None) -> Captured:
    """Capture ``fn`` (the specification) and its partitioned implementation on ``mesh``; see the module doc."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec

    if mesh is None:
        raise InputError("capture needs a mesh (jax.make_mesh((W,), ('tp',), axis_types=(AxisType.Auto,)))")
    args = tuple(args)
    world = int(mesh.devices.size)
    if len(jax.devices()) < world:
        raise InputError(f"JAX sees {len(jax.devices())} device(s), the mesh needs {world}: set XLA_FLAGS="
                         f"--xla_force_host_platform_device_count={max(world, 8)} before importing jax "
                         f"(importing graphguard.jax first does it)")
    names = _leaf_names(fn, args)
    per_arg, leaf_sh = _shardings(mesh, in_shardings, args)
    spec_fn, impl_fn = fn, impl if impl is not None else fn
    leaves = jax.tree_util.tree_leaves(args)
    if backward:
        out_shape = jax.eval_shape(fn, *args)
        ct = jax.tree_util.tree_map(lambda s: jnp.ones(s.shape, s.dtype), out_shape)
        ct_leaves = jax.tree_util.tree_leaves(ct)
        ct_names = ["tangent.out"] if len(ct_leaves) == 1 else [f"tangent.out{k}" for k in range(len(ct_leaves))]
        spec_fn, impl_fn = _with_backward(spec_fn), _with_backward(impl_fn)
        rep = NamedSharding(mesh, PartitionSpec())
        args = args + (ct,)
        per_arg = per_arg + (jax.tree_util.tree_map(lambda _: rep, ct),)
        leaf_sh = leaf_sh + [rep] * len(ct_leaves)
        names = names + ct_names
        leaves = leaves + ct_leaves
    lowered = jax.jit(impl_fn, in_shardings=per_arg, keep_unused=True).lower(*args)
    with tempfile.TemporaryDirectory(prefix="graphguard-xla-") as dump:
        compiled = lowered.compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_pass_re": "spmd-partitioning",
                                                     "xla_dump_hlo_as_proto": True})
        found = sorted(Path(dump).glob(f"*.{PARTITIONED}.*.hlo.pb"))
        if len(found) != 1:
            raise InputError(f"expected one module dumped after SPMD partitioning, found {len(found)} (is the "
                             f"program partitioned, on a mesh of more than one device? was the compilation served "
                             f"from JAX's persistent compilation cache? capture needs it to compile)")
        impl_proto = _module_bytes(found[0].read_bytes(), world)
    if impl is None:
        spec_proto = lowered.compiler_ir("hlo").as_serialized_hlo_module_proto()
    else:
        spec_proto = jax.jit(spec_fn, keep_unused=True).lower(*args).compiler_ir("hlo").as_serialized_hlo_module_proto()
    spec_proto, impl_proto = _rename_parameters(spec_proto, names), _rename_parameters(impl_proto, names)
    devices = _partition_devices(compiled, world)
    inputs = {}
    for n, leaf, sh in zip(names, leaves, leaf_sh):
        imap = sh.devices_indices_map(tuple(leaf.shape))
        inputs[n] = _relation_of(n, tuple(leaf.shape), [imap[d] for d in devices])
    outs = jax.eval_shape(spec_fn, *args)
    n_out = len(jax.tree_util.tree_leaves(outs))
    described = []
    if backward:
        n_fwd = len(jax.tree_util.tree_leaves(outs[0]))
        described = [f"out{k}: forward output {k}" for k in range(n_fwd)]
        described += [f"out{n_fwd + k}: gradient of {n}" for k, n in enumerate(names[:len(names) - len(ct_leaves)])]
    else:
        described = [f"out{k}: output {k}" for k in range(n_out)]
    expect = {}  # the outputs as the shardings state them: a jit result is a whole array, laid out as they say
    out_sh = jax.tree_util.tree_leaves(compiled.output_shardings,
                                       is_leaf=lambda x: isinstance(x, jax.sharding.Sharding))
    for k, (leaf, sh) in enumerate(zip(jax.tree_util.tree_leaves(outs), out_sh)):
        imap = sh.devices_indices_map(tuple(leaf.shape))
        try:
            expect[f"out{k}"] = _relation_of(f"out{k}", tuple(leaf.shape), [imap[d] for d in devices])
        except InputError:
            pass  # (a layout with no relation states nothing)
    cap = Captured(spec_proto, impl_proto, world, {"inputs": inputs, "expect": expect}, names, described)
    if out_dir is not None:
        cap.save(out_dir)
    return cap


# -- model files (graphguard capture --frontend hlo MODEL.py) ----------------------------------------

MODEL_FILE_DOC = """A JAX model file defines:

    def spec():                  -> fn               # the sequential function
    def inputs():                -> tuple of arrays  # fn's (global) arguments
    def in_specs(world):         -> tuple            # a PartitionSpec (or None: replicated) per argument
    def impl(mesh):              -> fn or None       # optional: the shard_map program (None / absent: GSPMD)
    def mesh(world):             -> jax.sharding.Mesh  # optional: default a 1-D mesh ('tp',) of world devices
    def expect(world, backward): -> dict             # optional: relations expected in R_o
"""


def _load_model_file(path):
    path = Path(path)
    mod = run_model_file(path, "graphguard_jax_model_")
    missing = [f for f in ("spec", "inputs", "in_specs") if not callable(getattr(mod, f, None))]
    if missing:
        raise InputError(f"{path}: {', '.join(missing)}() missing. {MODEL_FILE_DOC}")
    return mod


def capture_model_file(path, out_dir, world_size: int, backward: bool = False, plugins=None) -> dict:
    """``graphguard capture --frontend hlo MODEL.py --world-size N [--backward] -o DIR``."""
    import jax
    mod = _load_model_file(path)
    if hasattr(mod, "mesh"):
        mesh = mod.mesh(world_size)
    else:
        from jax.sharding import AxisType
        if len(jax.devices()) < world_size:
            raise InputError(f"JAX sees {len(jax.devices())} device(s), --world-size is {world_size}: set XLA_FLAGS="
                             f"--xla_force_host_platform_device_count={world_size}")
        mesh = jax.make_mesh((world_size,), ("tp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:world_size])
    try:
        impl = mod.impl(mesh) if hasattr(mod, "impl") else None
        cap = capture(mod.spec(), mod.inputs(), mesh=mesh, in_shardings=mod.in_specs(world_size), impl=impl,
                      backward=backward)
    except InputError:
        raise
    except Exception as e:  # the user's program (tracing, lowering, partitioning): one line
        why = type(e).__name__ + (f": {str(e).strip().splitlines()[0]}" if str(e).strip() else "")
        raise InputError(f"{path}: cannot capture the program: {why}") from None
    if hasattr(mod, "expect"):
        cap.relation["expect"] = {**cap.relation.get("expect", {}), **mod.expect(world_size, backward)}
    return cap.save(out_dir)
