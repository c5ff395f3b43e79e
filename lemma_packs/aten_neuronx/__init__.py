"""Bridges between HF transformers' ATen graphs and NeuronX HLO (a plugin): HF's RMSNorm as one op that the
AwsNeuronRmsNorm custom call computes in another layout, ATen's casts and 0-dim constants as HLO's. See
``lemmas.py``; needs the ``aten``, ``hlo-ops`` and ``neuronx`` packs (disable with them: ``-p no:aten-neuronx``)."""
from graphguard.hookspecs import hookimpl

from .lemmas import FUNCTIONS, LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS


@hookimpl
def graphguard_lemma_functions():
    return FUNCTIONS
