"""The NeuronX lemma pack: AWS Neuron custom-call targets in HLO modules (a plugin).

``ops.py`` says what ``hlo.custom_call.AwsNeuronRmsNorm`` and friends compute (shapes, NumPy references) for
the ``hlo`` frontend; ``lemmas.py`` how they act on sharded tensors. See README.md.
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
