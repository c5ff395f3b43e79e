"""The onnx lemma pack: ONNX operators (shapes; references from onnx.reference.ReferenceEvaluator) and their
lemmas (a plugin; entry point ``onnx-ops``: ``onnx`` is the frontend)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
