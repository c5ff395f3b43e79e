"""The ATen lemma pack: PyTorch ATen operators (shapes, NumPy references) and their lemmas (a plugin)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .ops import OPS
from .titan import FUNCTIONS as TITAN_FUNCTIONS, OPS as TITAN_OPS


@hookimpl
def graphguard_ops():
    return OPS + TITAN_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return TITAN_FUNCTIONS
