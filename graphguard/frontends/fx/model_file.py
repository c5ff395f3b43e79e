"""``graphguard capture MODEL.py --world-size N [--backward] -o DIR``: capture a model file's two programs.

A model file is plain Python defining::

    def spec():                 -> torch.nn.Module     # the sequential model
    def impl(rank, world):      -> torch.nn.Module     # rank's part of the distributed model
    def inputs(rank, world):    -> tuple of tensors    # rank is None for the sequential model
    def relation(world, backward): -> dict             # {"inputs": {name: expr or [exprs]}, "symbols": ..., "ranges": ...}

``relation`` is optional where the program states its sharding (DTensor placements, see
:mod:`.relations`); it may also be the path of a relation file (``relation = "relation.yaml"``, next to the
model file). What it gives overrides the derived relation tensor by tensor. Optional too:
``expect(world, backward) -> dict`` (relations expected in R_o, over the expectations capture writes: each
gradient laid out like its input, DTensor output placements; see :mod:`.relations`) and ``dynamic_dims(rank, world) -> dict``
naming dynamic input dims by their size on that rank (``{"x": {0: "S"}}``, ``{"x": {0: f"S/{world}"}}`` for a
sequence shard; see :mod:`.symints`), and ``after_backward(model, grads)``: with ``--backward``, the
gradient step a framework runs after backward, captured into both programs (it updates ``grads``, parameter
name -> gradient, in place; e.g. :func:`graphguard.patches.megatron.finalize_grads`). The file is the
user's own code and is executed like a test file. The relation written next to the graphs is the one
verification uses.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from graphguard.errors import InputError
from graphguard.frontends import run_model_file
from graphguard.ir.relation import relation_yaml

from .capture import capture
from .relations import input_relation


def load_model_file(path: str | Path):
    path = Path(path)
    mod = run_model_file(path, "graphguard_model_")
    for fn in ("spec", "impl", "inputs"):
        if not callable(getattr(mod, fn, None)):
            raise InputError(f"{path}: a model file defines spec(), impl(rank, world), inputs(rank, world) and "
                             f"optionally relation(world, backward); {fn}() is missing")
    return mod


def _user_relation(mod, path: Path, world: int, backward: bool) -> dict:
    rel = getattr(mod, "relation", None)
    if rel is None:
        rel = {}
    elif isinstance(rel, (str, Path)):
        file = path.parent / rel
        try:
            rel = yaml.safe_load(file.read_text(encoding="utf-8")) or {}
        except (OSError, UnicodeDecodeError, yaml.YAMLError) as e:
            why = (str(e).strip().splitlines() or [type(e).__name__])[0]
            raise InputError(f"{file}: cannot read the relation file named in {path.name} ({why})") from None
    elif callable(rel):
        rel = rel(world, backward)
    if not isinstance(rel, dict) or not isinstance(rel.get("inputs", {}), dict):
        raise InputError(f"{path}: relation must give a mapping like {{'inputs': {{name: expression}}}}")
    if hasattr(mod, "expect"):
        rel = dict(rel, expect=mod.expect(world, backward))
    return rel


def capture_model_file(path, out_dir, world_size: int, backward: bool = False, plugins=None) -> dict:
    path = Path(path)
    mod = load_model_file(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = path.parent.name or path.stem
    dyn = getattr(mod, "dynamic_dims", None)
    step = getattr(mod, "after_backward", None) if backward else None
    if step is not None and not callable(step):
        raise InputError(f"{path}: after_backward must be a function (model, grads) -> None")
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, world_size), world_size=1, backward=backward,
                name=f"{name}-spec", plugins=plugins, dynamic=dyn and (lambda r: dyn(None, world_size)),
                after_backward=step)
    d = capture(lambda r: mod.impl(r, world_size), lambda r: mod.inputs(r, world_size), world_size=world_size,
                backward=backward, name=f"{name}-impl", plugins=plugins, distributed=True,
                dynamic=dyn and (lambda r: dyn(r, world_size)), after_backward=step)
    rel = input_relation(s, d, _user_relation(mod, path, world_size, backward), plugins, str(path))
    (out / "spec.gg.json").write_text(json.dumps(s.doc, indent=1) + "\n")
    (out / "impl.gg.json").write_text(json.dumps(d.doc, indent=1) + "\n")
    (out / "relation.yaml").write_text(relation_yaml(rel))
    return {"spec": out / "spec.gg.json", "impl": out / "impl.gg.json", "relation": out / "relation.yaml"}
