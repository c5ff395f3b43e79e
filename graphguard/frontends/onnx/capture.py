"""``graphguard capture --frontend onnx MODEL.py --world-size N -o DIR``: export a PyTorch model file to ONNX.

The model file is the fx route's (``spec()``, ``impl(rank, world)``, ``inputs(rank, world)``,
``relation(world, backward)``, optional ``expect(world, backward)`` and ``onnx_opset``, the opset to export with;
see ``examples/onnx-mlp-tp/model.py``).
Each program is exported with ``torch.onnx.export(..., dynamo=True, optimize=False)`` -- unoptimised, so
parameters stay initializers under their own names (the optimiser folds ``Transpose(weight)`` into a new
constant ``val_N``) -- the sequential one on a one-rank fake process group, rank r's on a fake process group of
N ranks initialised as r (one process, no GPU). PyTorch's functional collectives are exported as ONNX Runtime's
``com.microsoft`` contrib ops through the exporter's ``custom_translation_table``:

    _c10d_functional.all_reduce(x, "sum", group)                 -> com.microsoft AllReduce(x)
    _c10d_functional.all_gather_into_tensor(x, group_size, group) -> com.microsoft AllGather(x, axis=0, group_size)
    _c10d_functional.reduce_scatter_tensor(x, op, group_size, g) -> ai.graphguard ReduceScatter(x, axis=0, ...)
    _c10d_functional.all_to_all_single(x, out, in, group)        -> com.microsoft AllToAll(x, group_size) (even)
    _c10d_functional.broadcast(x, src, group)                    -> ai.graphguard Broadcast(x, src, group_size)
    _c10d_functional.wait_tensor(x)                              -> Identity(x)

The ``com.microsoft`` schemas ship only in ONNX Runtime's distributed build (the ``ai.graphguard`` ones are the
project's), so they are registered here (``onnx.defs``,
as ONNX Runtime declares them) before exporting. Collectives over every rank only: the group of a collective is
not recorded in the ONNX ops (ONNX Runtime runs them on its one world communicator). Written: ``spec.onnx``,
``impl.rank<r>.onnx`` for every rank and ``relation.yaml`` (the model file's relation and expectations).
"""
from __future__ import annotations

import contextlib
import io
import warnings
from pathlib import Path

from graphguard.errors import InputError
from graphguard.frontends import run_model_file
from graphguard.ir.relation import relation_yaml

MS = "com.microsoft"
GG = "ai.graphguard"  # the project's own collective ops (graphguard/frontends/onnx/README.md)


def _register_schemas() -> None:
    from onnx import defs
    from onnx.defs import OpSchema
    var = OpSchema.FormalParameterOption.Variadic
    types = ["tensor(float16)", "tensor(float)", "tensor(double)", "tensor(bfloat16)"]
    INT, STR, INTS = OpSchema.AttrType.INT, OpSchema.AttrType.STRING, OpSchema.AttrType.INTS
    size = OpSchema.Attribute("group_size", INT, "ranks taking part")
    for domain, name, attrs in (
            (MS, "AllReduce", []),
            (MS, "AllGather", [OpSchema.Attribute("axis", INT, "the axis to gather on"), size]),
            (MS, "AllToAll", [size]),
            (GG, "ReduceScatter", [OpSchema.Attribute("axis", INT, "the axis to scatter on"), size,
                                   OpSchema.Attribute("reduction", STR, "sum, max or avg")]),
            (GG, "Broadcast", [OpSchema.Attribute("src", INT, "the rank whose tensor every rank gets"), size]),
            (GG, "CollectivePermute", [OpSchema.Attribute("source_target_pairs", INTS,
                                                          "source, target, source, target...")])):
        if defs.has(name, domain):
            continue
        defs.register_schema(OpSchema(
            name, domain, 1, inputs=[OpSchema.FormalParameter("input", "T", param_option=var)],
            outputs=[OpSchema.FormalParameter("output", "T", param_option=var)],
            type_constraints=[("T", types, "float tensors")], attributes=attrs))


def translation_table(world: int) -> dict:
    """The exporter's translations of PyTorch's functional collectives into ``com.microsoft`` ops."""
    import onnxscript
    import torch
    from onnxscript import opset18 as op
    _register_schemas()
    ms, gg = onnxscript.values.Opset(MS, 1), onnxscript.values.Opset(GG, 1)

    def all_reduce(x, reduce_op: str, group_name: str):
        if reduce_op != "sum":
            raise ValueError(f"all_reduce with reduce_op={reduce_op!r}: com.microsoft AllReduce only sums")
        return ms.AllReduce(x)

    def all_gather(x, group_size: int, group_name: str):
        return ms.AllGather(x, axis=0, group_size=group_size)

    def reduce_scatter(x, reduce_op: str, group_size: int, group_name: str):
        if reduce_op not in ("sum", "max", "avg"):
            raise ValueError(f"reduce_scatter with reduce_op={reduce_op!r}: ai.graphguard ReduceScatter takes "
                             f"sum, max or avg")
        return gg.ReduceScatter(x, axis=0, group_size=group_size, reduction=reduce_op)

    def all_to_all(x, output_split_sizes, input_split_sizes, group_name: str):
        if output_split_sizes or input_split_sizes:
            if len(set(output_split_sizes or []) | set(input_split_sizes or [])) > 1:
                raise ValueError("all_to_all_single with uneven splits: com.microsoft AllToAll splits evenly")
        return ms.AllToAll(x, group_size=world)

    def broadcast(x, src: int, group_name: str):
        return gg.Broadcast(x, src=src, group_size=world)

    def wait(x):
        return op.Identity(x)

    f = torch.ops._c10d_functional
    return {f.all_reduce.default: all_reduce, f.all_gather_into_tensor.default: all_gather,
            f.reduce_scatter_tensor.default: reduce_scatter, f.all_to_all_single.default: all_to_all,
            f.broadcast.default: broadcast, f.wait_tensor.default: wait}


def _load(path: Path):
    mod = run_model_file(path, "graphguard_onnx_model_")
    for fn in ("spec", "impl", "inputs", "relation"):
        if not callable(getattr(mod, fn, None)):
            raise InputError(f"{path}: an ONNX capture's model file defines spec(), impl(rank, world), "
                             f"inputs(rank, world) and relation(world, backward); {fn}() is missing")
    return mod


def export(build, args, rank: int, world: int, table: dict, out: Path, where: str, opset: int | None = None) -> None:
    """Export ``build()`` on ``args`` as rank ``rank`` of a fake process group of ``world`` ranks to ``out``."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore  # noqa: F401  (registers "fake")
    dist.init_process_group("fake", rank=rank, world_size=world, store=FakeStore())
    try:
        model = build().eval()  # an inference program (ONNX Runtime's use); no dropout
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()), torch.no_grad(), \
                warnings.catch_warnings():  # the exporter's progress notes
            warnings.simplefilter("ignore")
            prog = torch.onnx.export(model, tuple(args), dynamo=True, optimize=False, verbose=False,
                                     custom_translation_table=table, opset_version=opset)
        prog.save(str(out))
    except InputError:
        raise
    except Exception as e:
        msg = str(e).strip().splitlines()
        raise InputError(f"{where}: torch.onnx.export failed: {type(e).__name__}: {msg[0] if msg else ''}") from None
    finally:
        dist.destroy_process_group()


def capture_model_file(path, out_dir, world_size: int, backward: bool = False, plugins=None,
                       opset: int | None = None) -> dict:
    """Export and write the files; ``opset`` (or the model file's ``onnx_opset``, an int) is the default-domain
    opset to export with (the exporter's default, 20 for torch 2.13, when None)."""
    path = Path(path)
    if backward:
        raise InputError(f"{path}: the onnx frontend captures forward programs only (--backward is fx's)")
    mod = _load(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    import logging
    for name in ("torch.onnx", "onnxscript"):  # notes on skipped torchvision ops, opset conversion fallbacks
        logging.getLogger(name).setLevel(logging.ERROR)
    table = translation_table(world_size)
    opset = opset or getattr(mod, "onnx_opset", None)
    if opset is not None and (isinstance(opset, bool) or not isinstance(opset, int)):
        raise InputError(f"{path}: onnx_opset must be an integer, got {opset!r}")
    export(mod.spec, mod.inputs(None, world_size), 0, 1, table, out / "spec.onnx", f"{path}: spec()", opset)
    impl = []
    for r in range(world_size):
        f = out / f"impl.rank{r}.onnx"
        export(lambda: mod.impl(r, world_size), mod.inputs(r, world_size), r, world_size, table, f,
               f"{path}: impl({r}, {world_size})", opset)
        impl.append(f)
    rel = mod.relation(world_size, False)
    if not isinstance(rel, dict) or not isinstance(rel.get("inputs"), dict):
        raise InputError(f"{path}: relation must give a mapping like {{'inputs': {{name: expression}}}}")
    if callable(getattr(mod, "expect", None)):
        rel = dict(rel, expect=mod.expect(world_size, False))
    (out / "relation.yaml").write_text(relation_yaml(rel))
    return {"spec": out / "spec.onnx", "impl": " ".join(map(str, impl)), "relation": out / "relation.yaml"}
