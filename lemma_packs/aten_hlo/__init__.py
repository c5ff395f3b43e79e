"""Bridges between the ATen and HLO dialects (a plugin): ATen operators equal the HLO ops XLA computes them
with, so that a PyTorch specification and an XLA implementation meet in the e-graph. See ``lemmas.py``; needs
the ``aten`` and ``hlo-ops`` packs (disable this one with them: ``-p no:aten-hlo``). Its graph passes
(``passes.py``: fold_constants, masked_softmax, scale_into_product) join the pipeline while it is loaded."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .passes import PASSES


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_passes():
    return PASSES
