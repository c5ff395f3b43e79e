"""``graphguard capture MODEL.py --world-size N [--backward] -o DIR``: capture a model file's two programs.

A model file is plain Python defining::

    def spec():                 -> torch.nn.Module     # the sequential model
    def impl(rank, world):      -> torch.nn.Module     # rank's part of the distributed model
    def inputs(rank, world):    -> tuple of tensors    # rank is None for the sequential model
    def relation(world, backward): -> dict             # {"inputs": {name: expr or [exprs]}, "symbols": ...}

Optional: ``expect(world, backward) -> dict`` (relations expected in R_o). The file is the user's own
code and is executed like a test file.
"""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import yaml

from graphguard.errors import InputError

from .capture import capture


def load_model_file(path: str | Path):
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such model file")
    spec = importlib.util.spec_from_file_location(f"graphguard_model_{path.stem}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    for fn in ("spec", "impl", "inputs", "relation"):
        if not callable(getattr(mod, fn, None)):
            raise InputError(f"{path}: a model file defines spec(), impl(rank, world), inputs(rank, world) and "
                             f"relation(world, backward); {fn}() is missing")
    return mod


def capture_model_file(path, out_dir, world_size: int, backward: bool = False, plugins=None) -> dict:
    mod = load_model_file(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = Path(path).parent.name or Path(path).stem
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, world_size), world_size=1, backward=backward,
                name=f"{name}-spec", plugins=plugins)
    d = capture(lambda r: mod.impl(r, world_size), lambda r: mod.inputs(r, world_size), world_size=world_size,
                backward=backward, name=f"{name}-impl", plugins=plugins, distributed=True)
    rel = mod.relation(world_size, backward)
    if hasattr(mod, "expect"):
        rel = dict(rel, expect=mod.expect(world_size, backward))
    (out / "spec.gg.json").write_text(json.dumps(s.doc, indent=1) + "\n")
    (out / "impl.gg.json").write_text(json.dumps(d.doc, indent=1) + "\n")
    (out / "relation.yaml").write_text(yaml.safe_dump(rel, sort_keys=False, width=1000))
    return {"spec": out / "spec.gg.json", "impl": out / "impl.gg.json", "relation": out / "relation.yaml"}
