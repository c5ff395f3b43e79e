"""The HLO lemma pack: XLA HLO operators (shapes, NumPy references) and bridges to the core dialect (a plugin)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
