"""Frontends turn a framework's files into IR graphs.

Every frontend is a folder of the same shape::

    graphguard/frontends/<name>/
        __init__.py   # the plugin: a @hookimpl graphguard_frontends() returning [Frontend(...)]
        load.py       # reading files into graphguard.ir.Graph
        README.md     # what it reads and its limits

and registers under the ``graphguard.frontends`` entry-point group, as a third party's would.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..errors import InputError
from ..ir.graph import Graph
from ..ir.ops import Registry
from ..ir.scalar import Constraints


# Frontends instantiate every rank's program: a world larger than this is a mistake in the input (a corrupt
# num_partitions, a mistyped --world-size), not a program anyone can check rank by rank.
MAX_WORLD_SIZE = 4096


def check_world_size(n, where: str) -> int:
    """``n`` as a world size, or one InputError naming ``where`` (a file, or the option)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InputError(f"{where}: the world size must be a positive integer, got {n!r}")
    if n > MAX_WORLD_SIZE:
        raise InputError(f"{where}: world size {n} is more ranks than graphguard instantiates "
                         f"(at most {MAX_WORLD_SIZE})")
    return n


# modules a model file imported from its own folder (name -> that folder): another model file's folder may hold
# a module of the same name (two examples' common.py), which must not be taken from the import cache for it
_NEIGHBOURS: dict[str, str] = {}


def run_model_file(path, prefix: str):
    """Import a user's model file as a module named after its path (TorchDynamo imports a module by name to
    inline its functions); a missing file or an exception while running it is one InputError naming the file.
    While it runs, its folder is first on ``sys.path``: it imports the modules beside it as it would run as a
    script (``from layers import Block``); such a module of another model file's folder is not reused."""
    import importlib.util
    import re
    import sys
    from pathlib import Path
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such model file")
    name = prefix + re.sub(r"\W", "_", str(path.resolve().with_suffix("")))
    folder = str(path.resolve().parent)
    for other in [m for m, f in _NEIGHBOURS.items() if f != folder]:
        sys.modules.pop(other, None)
        del _NEIGHBOURS[other]
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    before = set(sys.modules)
    sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # the user's code: say what failed, in one line
        why = type(e).__name__ + (f": {str(e).splitlines()[0]}" if str(e).strip() else "")
        raise InputError(f"{path}: cannot run the model file: {why}") from None
    finally:
        if sys.path and sys.path[0] == folder:
            del sys.path[0]
        else:  # (the model file moved it: take out the entry put there)
            try:
                sys.path.remove(folder)
            except ValueError:
                pass
        for m in set(sys.modules) - before:
            f = getattr(sys.modules[m], "__file__", None)
            if f and str(Path(f).resolve()).startswith(folder + "/"):
                _NEIGHBOURS[m] = folder
    return mod


@dataclass
class LoadRequest:
    paths: list[str]
    role: str  # "spec" (G_s) or "impl" (G_d)
    registry: Registry
    constraints: Constraints
    world_size: int | None = None

    def __post_init__(self):
        if self.world_size is not None:
            check_world_size(self.world_size, "--world-size")


@dataclass
class Frontend:
    """``load`` reads files into a graph. ``capture`` (optional) runs a user's model file and writes
    ``spec.gg.json``, ``impl.gg.json`` and ``relation.yaml`` into a folder (``graphguard capture``)."""
    name: str
    description: str
    load: Callable[[LoadRequest], Graph]
    suffixes: tuple[str, ...] = ()
    capture: Callable | None = None
