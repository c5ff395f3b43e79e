"""What the neuronx pack's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES``, proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas. tests/test_pack_proofs.py
collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

from .ops import GELU, RING, RMS, SOFTMAX

SHAPES = {"A": [8, 2, 3], "B": [8, 1, 3], "C": [8, 2, 1], "W": [8], "E": [], "A0": [4, 2, 3], "A1": [4, 2, 3],
          "W0": [4], "W1": [4], "X": [2, 3], "Y": [2, 5], "Y2": [4, 3], "Z": [3]}


def rms(x, w="W", k=0):
    return f"{RMS}({x}, {w}, E, backend_config={k})"


PROVES = [
    (rms("concat(A, B, dim=1)"), f"concat({rms('A')}, {rms('B')}, dim=1)"),  # rows of [H, S, B] split on S
    (rms("concat(A, C, dim=2)"), f"concat({rms('A')}, {rms('C')}, dim=2)"),
    # the last dim (-1) normalised: a split of the rows goes through
    (rms("concat(X, Y2, dim=0)", "Z", -1), f"concat({rms('X', 'Z', -1)}, {rms('Y2', 'Z', -1)}, dim=0)"),
    (f"{SOFTMAX}(concat(X, Y, dim=1), backend_config=0)",
     f"concat({SOFTMAX}(X, backend_config=0), {SOFTMAX}(Y, backend_config=0), dim=1)"),
    (f"{GELU}(concat(X, Y, dim=1))", f"concat({GELU}(X), {GELU}(Y), dim=1)"),
    (f"{RING}(concat(X, Y, dim=1))", "concat(X, Y, dim=1)"),
    (rms("slice(A, dim=2, start=1, end=3)"), f"slice({rms('A')}, dim=2, start=1, end=3)"),
]

MUST_NOT_PROVE = [
    # normalising the two halves of the hidden dim separately is not RmsNorm of the whole
    (rms("concat(A0, A1, dim=0)"), f"concat({rms('A0', 'W0')}, {rms('A1', 'W1')}, dim=0)"),
    (f"{SOFTMAX}(concat(X, Y, dim=1), backend_config=1)",
     f"concat({SOFTMAX}(X, backend_config=1), {SOFTMAX}(Y, backend_config=1), dim=1)"),
    (f"{SOFTMAX}(concat(X, Y, dim=1), backend_config=-1)",
     f"concat({SOFTMAX}(X, backend_config=-1), {SOFTMAX}(Y, backend_config=-1), dim=1)"),
    (f"{GELU}(X)", "X"),
]
