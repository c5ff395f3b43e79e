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

from ..ir.graph import Graph
from ..ir.ops import Registry
from ..ir.scalar import Constraints


@dataclass
class LoadRequest:
    paths: list[str]
    role: str  # "spec" (G_s) or "impl" (G_d)
    registry: Registry
    constraints: Constraints
    world_size: int | None = None


@dataclass
class Frontend:
    """``load`` reads files into a graph. ``capture`` (optional) runs a user's model file and writes
    ``spec.gg.json``, ``impl.gg.json`` and ``relation.yaml`` into a folder (``graphguard capture``)."""
    name: str
    description: str
    load: Callable[[LoadRequest], Graph]
    suffixes: tuple[str, ...] = ()
    capture: Callable | None = None
