"""The ``ir`` frontend: graphguard's own ``*.gg.json`` files (a plugin like any other)."""
from graphguard.frontends import Frontend
from graphguard.hookspecs import hookimpl

from .load import load


@hookimpl
def graphguard_frontends():
    return [Frontend("ir", "graphguard IR graphs (*.gg.json)", load, (".gg.json",))]
