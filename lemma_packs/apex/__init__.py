"""The apex lemma pack: Apex/Megatron's fused layer norm, a PyTorch custom operator (a plugin).

The worked example of supporting a custom op (docs/lemma-packs.md, "Writing a lemma pack"): ``ops.py`` says what
``apex.fused_layer_norm_affine`` and its backward compute (shapes, NumPy references), ``lemmas.py`` how
they distribute over sharded rows.
"""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
