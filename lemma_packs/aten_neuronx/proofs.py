"""What the aten-neuronx bridge's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES`` (``DTYPES``), an HF transformers ATen expression and the NeuronX HLO computing it, proved equal
(``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas (1150-1159; without this pack only the two marked
1220 hold, by that family). tests/test_pack_proofs.py collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

from lemma_packs.neuronx.ops import RMS

from .ops import HF_RMS

SHAPES = {"A": [2, 3], "B": [2, 3], "I": [2, 3], "P": [3, 2], "S": [3, 3], "W": [3, 4], "W2": [3, 4],
          "X": [2, 4, 4], "G": [4], "E": [], "Y": [4, 4, 2], "Z": [4, 2, 4], "i": [4], "j": [4]}
DTYPES = {"I": "int32", "G": "float16", "i": "int32", "j": "int32"}

_CONTRACT_0 = "lhs_batch=[], rhs_batch=[], lhs_contracting=[0], rhs_contracting=[0]"
# the attention mask: key position j <= query position i, ATen's unit-dim views against HLO's broadcasts
_LE_ATEN = "aten.le.Tensor(reshape(j, shape=[1, 4]), reshape(i, shape=[4, 1]))"


def _le_hlo(direction, rows="i"):
    return (f"reshape(hlo.compare(hlo.broadcast(j, shape=[4, 4], dimensions=[1]), hlo.broadcast({rows}, shape=[4, 4],"
            f" dimensions=[0]), direction={direction}), shape=[4, 4])")


PROVES = [
    ("aten._to_copy(A, dtype=float16)", "hlo.convert(A, dtype=float16)"),  # 1150
    ("aten._to_copy(I, dtype=float32)", "hlo.convert(I, dtype=float32)"),  # 1150, from int32
    ("aten.scalar_tensor(s=2, dtype=float32)", "hlo.constant(shape=[], value=2, dtype=float32)"),  # 1151
    (f"{HF_RMS}(X, G, E, dtype=float16)", f"{RMS}(X, G, E, backend_config=2)"),  # 1152
    (f"{RMS}(permute(Y, dims=[2, 1, 0]), G, E, backend_config=2)",  # 1153
     f"permute({RMS}(Y, G, E, backend_config=0), dims=[2, 1, 0])"),
    ("aten.cos(A)", "hlo.cosine(A)"),  # 1154 (family 1220 too)
    ("aten.sin(A)", "hlo.sine(A)"),  # 1155 (family 1220 too)
    (f"hlo.dot(P, W, {_CONTRACT_0})", "matmul(permute(P, dims=[1, 0]), W)"),  # 1156
    (_LE_ATEN, _le_hlo("LE")),  # 1157
]

MUST_NOT_PROVE = [
    ("aten._to_copy(A, dtype=float16)", "hlo.convert(B, dtype=float16)"),
    ("aten.scalar_tensor(s=2, dtype=float32)", "hlo.constant(shape=[], value=3, dtype=float32)"),
    # the norm over another dim than the last (X's dims 1 and 2 are equally long)
    (f"{HF_RMS}(X, G, E, dtype=float16)", f"{RMS}(X, G, E, backend_config=1)"),
    # the dim normalised not followed through the permutation
    (f"{RMS}(permute(Z, dims=[2, 1, 0]), G, E, backend_config=2)",
     f"permute({RMS}(Z, G, E, backend_config=2), dims=[2, 1, 0])"),
    ("aten.cos(A)", "hlo.sine(A)"),
    # a dot contracting dim 0 of the lhs is not the matmul of the lhs itself (S is square, so both are typed)
    (f"hlo.dot(S, W, {_CONTRACT_0})", "matmul(S, W)"),
    (f"hlo.dot(P, W, {_CONTRACT_0})", "matmul(permute(P, dims=[1, 0]), W2)"),
    (_LE_ATEN, _le_hlo("GE")),
    (_LE_ATEN, _le_hlo("LE", rows="j")),
]
