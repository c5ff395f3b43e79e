"""Bridges between the ATen and HLO dialects (a plugin): ATen operators equal the HLO ops XLA computes them
with, so that a PyTorch specification and an XLA implementation meet in the e-graph. See ``lemmas.py``; needs
the ``aten`` and ``hlo-ops`` packs (disable this one with them: ``-p no:aten-hlo``)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
