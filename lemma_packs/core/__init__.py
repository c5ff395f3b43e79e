"""The core lemma pack: compute ops of the core dialect and the algebra of clean ops (a plugin)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .lookups import LEMMAS as LOOKUPS, OPS as LOOKUP_OPS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS + LOOKUP_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS + LOOKUPS
