"""The HLO lemma pack: XLA HLO operators (shapes, NumPy references) and bridges to the core dialect (a plugin)."""
from graphguard.hookspecs import hookimpl

from .layers import LEMMAS as LAYER_LEMMAS
from .lemmas import FUNCTIONS, LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS + LAYER_LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return FUNCTIONS
