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
name -> gradient, in place; e.g. :func:`graphguard.patches.megatron.finalize_grads`), and ``repeat = "layers"``:
the dotted path of an ``nn.ModuleList`` of identical layers, layer 0 traced and the others copied from its trace
(checked copies; with backward layer 0 is traced and layer 1 is the template: :mod:`.repeat`). The file is the
user's own code and is executed like a test file (its folder first on ``sys.path`` while it loads: it imports
the modules beside it). The relation written next to the graphs is the one verification uses, checked against
the captured programs first (names, shapes, dtypes: a relation that does not fit is the capture's error, naming
``relation(world, backward)`` and the entry). With ``--backward``, a forward that does not refine is reported as
such (:class:`graphguard.errors.ForwardVerdict`: its report, exit 1), the backward not derived.
"""
from __future__ import annotations

import json
from pathlib import Path

import yaml

from graphguard.errors import InputError
from graphguard.frontends import run_model_file
from graphguard.ir.relation import relation_yaml

from .capture import assemble, capture, capture_one_rank
from .relations import check_names, input_relation


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


def _relation_where(mod, path: Path, world: int, backward: bool) -> str:
    """Where the relation a capture checks was written, in the user's terms."""
    rel = getattr(mod, "relation", None)
    if isinstance(rel, (str, Path)):
        return f"{path.parent / rel} (the relation of {path.name})"
    what = f"relation(world={world}, backward={backward})" if callable(rel) else "the relation derived from DTensor placements"
    return f"{path}: {what}"


def capture_model_file(path, out_dir, world_size: int, backward: bool = False, plugins=None, workers: int = 1,
                       ray_address: str | None = None) -> dict:
    """Capture the model file's two programs into ``out_dir``. ``workers`` > 1 (or a ``ray_address``):
    the sequential program and the ranks are captured as Ray tasks, this process taking its share
    (:func:`capture_programs`); the files are the same as one by one."""
    path = Path(path)
    mod = load_model_file(path)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    user, where = _user_relation(mod, path, world_size, backward), _relation_where(mod, path, world_size, backward)
    if workers > 1 or ray_address:
        s, d = _capture_on_ray(mod, path, world_size, backward, workers, ray_address, plugins)
    else:  # (the relation's names checked on the sequential program, before the ranks are captured)
        s = capture_programs(mod, path, world_size, backward, [None], plugins)[None]
        check_names(s, user, where)
        progs = capture_programs(mod, path, world_size, backward, list(range(world_size)), plugins)
        d = _impl(mod, path, backward, [progs[r] for r in range(world_size)])
    rel = input_relation(s, d, user, plugins, str(path), check=where)
    (out / "spec.gg.json").write_text(_dumps(s.doc))
    (out / "impl.gg.json").write_text(_dumps(d.doc))
    (out / "relation.yaml").write_text(relation_yaml(rel))
    return {"spec": out / "spec.gg.json", "impl": out / "impl.gg.json", "relation": out / "relation.yaml"}


def _settings(mod, path: Path, backward: bool) -> dict:
    step = getattr(mod, "after_backward", None) if backward else None
    if step is not None and not callable(step):
        raise InputError(f"{path}: after_backward must be a function (model, grads) -> None")
    repeat = getattr(mod, "repeat", None)
    if repeat is not None and (not isinstance(repeat, str) or not repeat):
        raise InputError(f"{path}: repeat must name the list of layers, e.g. repeat = \"layers\"")
    return {"name": path.parent.name or path.stem, "dyn": getattr(mod, "dynamic_dims", None), "step": step,
            "repeat": repeat}


def capture_programs(mod, path: Path, world_size: int, backward: bool, which: list, plugins=None) -> dict:
    """The programs ``which`` names of a loaded model file: None the sequential one (a :class:`Captured`),
    rank r the distributed one's rank r (:func:`capture_one_rank`'s plain data)."""
    from graphguard.plugins import load_plugins
    pl = plugins or load_plugins()
    o = _settings(mod, path, backward)
    dyn, step, repeat, name = o["dyn"], o["step"], o["repeat"], o["name"]
    out = {}
    for r in which:
        if r is None:
            out[None] = capture(lambda _: mod.spec(), lambda _: mod.inputs(None, world_size), world_size=1,
                                backward=backward, name=f"{name}-spec", plugins=pl,
                                dynamic=dyn and (lambda _: dyn(None, world_size)), after_backward=step, repeat=repeat)
        else:
            out[r] = capture_one_rank(lambda k: mod.impl(k, world_size), lambda k: mod.inputs(k, world_size), r,
                                      world_size, backward, pl.registry, dyn and (lambda k: dyn(k, world_size)),
                                      None, step, repeat, f"<capture {name}-impl>")
    return out


def _impl(mod, path: Path, backward: bool, parts: list):
    name = f"{_settings(mod, path, backward)['name']}-impl"
    return assemble(parts, name, f"<capture {name}>", backward)


def _captured_in_worker(path: str, world_size: int, backward: bool, which: list, env: dict) -> dict:
    """A Ray task: the programs ``which`` of the model file at ``path`` (with the model file's ``GG_*``
    settings of the process that asked)."""
    import os
    os.environ.update(env)
    return capture_programs(load_model_file(path), Path(path), world_size, backward, which)


def _capture_on_ray(mod, path: Path, world_size: int, backward: bool, workers: int, ray_address, plugins):
    """The sequential program and the ranks spread over ``workers`` (this process one of them): Ray tasks,
    on a local Ray cluster started here or the one at ``ray_address``."""
    import os

    from graphguard.raysession import ray_session
    units = [None, *range(world_size)]
    # each other worker takes about 1/(w + 1) of the programs, this process the rest (about two shares: it
    # starts at once, a Ray worker after Ray's start and its own imports, ~6 s on a 2-core machine)
    w = max(workers, 2)
    n = max(len(units) // (w + 1), 1)
    own = len(units) - n * (w - 1)
    shares = [units[:own]] + [units[own + k * n:own + (k + 1) * n] for k in range(w - 1)]
    env = {k: v for k, v in os.environ.items() if k.startswith("GG_")}
    missing = InputError("graphguard capture --workers runs on Ray, which is not installed: "
                         "pip install 'graphguard[ray]'")
    with ray_session(workers, ray_address, missing) as ray:
        task = ray.remote(num_cpus=1, max_retries=0)(_captured_in_worker)
        refs = [task.remote(str(path.resolve()), world_size, backward, share, env) for share in shares[1:] if share]
        progs = capture_programs(mod, path, world_size, backward, shares[0], plugins)
        for got in ray.get(refs):
            progs.update(got)
    return progs[None], _impl(mod, path, backward, [progs[r] for r in range(world_size)])


def _dumps(doc: dict) -> str:
    """A graph as JSON: indented to be read, compact where it is large (a whole model's ranks)."""
    if len(doc.get("nodes", ())) > 20000:
        return json.dumps(doc, separators=(",", ":")) + "\n"
    return json.dumps(doc, indent=1) + "\n"
