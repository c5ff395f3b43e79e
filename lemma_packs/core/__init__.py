"""The core lemma pack: compute ops of the core dialect and the algebra of clean ops (a plugin)."""
from graphguard.hookspecs import hookimpl
from graphguard.ir.dtypes import exact_conversion

from .lemmas import LEMMAS
from .lookups import LEMMAS as LOOKUPS, OPS as LOOKUP_OPS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS + LOOKUP_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS + LOOKUPS


@hookimpl
def graphguard_lemma_functions():
    # is converting a tensor of the first dtype to the second exact (graphguard/ir/dtypes.py)?
    return {"exact_conversion": lambda ctx, src, dst: exact_conversion(src, dst)}
