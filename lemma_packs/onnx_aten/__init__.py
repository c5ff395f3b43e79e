"""Bridges between the ONNX and ATen dialects (a plugin): an ONNX operator equals the ATen operator computing
the same function, so that an ONNX specification and a PyTorch implementation (or the reverse) meet in the
e-graph (``graphguard verify --spec-frontend onnx --impl-frontend fx``). See ``lemmas.py``; needs the
``onnx-ops`` and ``aten`` packs (disable this one with them: ``-p no:onnx-aten``)."""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS


@hookimpl
def graphguard_lemmas():
    return LEMMAS
