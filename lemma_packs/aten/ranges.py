"""Lemmas that hold for the values a relation file's ``ranges:`` states. References: 1630-1639.

``W[ids]`` (``aten.index.Tensor``, how some torch versions decompose an embedding) reads row ``V + i`` for a
negative id where ``embedding`` raises, so the two are one only for ids in ``[0, V)`` -- what the token ids of
a vocabulary of V rows are, stated as ``ranges: {ids: "[0, V)"}``. The other way needs nothing: wherever the
embedding is defined, indexing reads the same rows (1631), so a G_d that indexes meets a lemma stated with
``embedding``.
"""
from graphguard.ir.lemma import L

NUMBERS = range(1630, 1640)  # this file's lemma numbers (the plugin loader refuses others)

_EMB = "aten.embedding(?w, ?i, padding_idx=-1, scale_grad_by_freq=false, sparse=false)"
_INT = '(dtype(?i) == "int64" or dtype(?i) == "int32")'

LEMMAS = [
    L(1630, "index-of-ranged-ids-is-embedding", f"aten.index.Tensor(?w, ?i, absent=[]) => {_EMB}",
      f"rank(?w) == 2 and {_INT} and vmin(?i) >= 0 and vend(?i) <= size(?w, 0)"),
    L(1631, "embedding-is-index", f"aten.embedding(?w, ?i, padding_idx=?p, scale_grad_by_freq=false, sparse=?s)"
      " => aten.index.Tensor(?w, ?i, absent=[])", f"rank(?w) == 2 and {_INT}",
      index={"i": "size(?w, 0)"}),
]
