"""ATen operators HF transformers' models emit beyond the examples' (the TP-plan zoo, bench/hf_zoo.py).

The comparison ops HF's masks use (sliding windows, padding): ``kv_idx > q_idx - window`` and the like.
Elementwise with broadcasting, bool results; a mask computed the same way on every rank needs no lemma
(equal inputs give equal outputs). And the elementwise maths of activations HF defines itself (xIELU:
``log1p``).
"""
from __future__ import annotations

import numpy as np

from .ops import _bin, _bool, _float_ref, _floating, _un

HF_OPS = [
    _bin("gt.Tensor", lambda x, y, a: np.greater(x, y), "self > other (broadcasting), bool.", dtype=_bool),
    _bin("ge.Tensor", lambda x, y, a: np.greater_equal(x, y), "self >= other (broadcasting), bool.", dtype=_bool),
    _bin("ne.Tensor", lambda x, y, a: np.not_equal(x, y), "self != other (broadcasting), bool.", dtype=_bool),
    _un("log1p", _float_ref(np.log1p), "Elementwise log(1 + self).", _floating),
    _un("expm1", _float_ref(np.expm1), "Elementwise exp(self) - 1.", _floating),
]
