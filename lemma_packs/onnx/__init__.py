"""The onnx lemma pack: ONNX operators (shapes; references from onnx.reference.ReferenceEvaluator) and their
lemmas (a plugin; entry point ``onnx-ops``: ``onnx`` is the frontend)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .masks_and_lookups import MASK_AND_LOOKUP_OPS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS + MASK_AND_LOOKUP_OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
