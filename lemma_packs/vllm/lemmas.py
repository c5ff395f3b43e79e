"""Lemmas of the vllm pack. References: 701-749.

RMSNorm normalises each row over the last dim, so rows split along any other dim are normalised
independently (701-703). SiluAndMul pairs column j of the first half with column j of the second half:
rows split along another dim stay independent (704), and -- vLLM's merged gate_up layout -- when the
first half is itself concat(a, b) and the second concat(c, e) with a, c (and b, e) of one width, the
result is concat(silu_and_mul([a | c]), silu_and_mul([b | e])) (705): the sequential merged weight
concat(all ranks' gate rows, all ranks' up rows) against each rank's [gate_r; up_r].
"""
from graphguard.engine.lemma import L

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
_E = "epsilon=?e"


def _rows(a, b, d):  # shards a, b on dim d (not the last), weight over the last dim
    return {"a": a, "b": b, "d": d, "w": [a[-1]], "e": "1/1000000"}


_RMS_SEEDS = [_rows([2, 4], [3, 4], 0), _rows([2, 3, 4], [2, 1, 4], 1), _rows([1, 2, 5], [3, 2, 5], 0)]
_FUSED_SEEDS = [dict(s, c=s["a"], f=s["b"]) for s in _RMS_SEEDS]
_SILU_ROW_SEEDS = [{"a": [2, 4], "b": [1, 4], "d": 0}, {"a": [2, 3, 6], "b": [2, 2, 6], "d": 1}]
_SILU_GU_SEEDS = [{"a": [3, 2], "b": [3, 1], "c": [3, 2], "e": [3, 1], "d": 1},
                  {"a": [2, 1, 3], "b": [2, 1, 3], "c": [2, 1, 3], "e": [2, 1, 3], "d": 2},
                  {"a": [4], "b": [2], "c": [4], "e": [2], "d": 0}]

LEMMAS = [
    L(701, "rms-norm-of-row-concat",
      f"{RMS}(concat(?a, ?b, dim=?d), ?w, {_E}) => concat({RMS}(?a, ?w, {_E}), {RMS}(?b, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1", examples=_RMS_SEEDS),
    L(702, "fused-add-rms-norm-of-row-concats",
      f"{FUSED}#0(concat(?a, ?b, dim=?d), concat(?c, ?f, dim=?d), ?w, {_E})"
      f" => concat({FUSED}#0(?a, ?c, ?w, {_E}), {FUSED}#0(?b, ?f, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1 and shape(?a) == shape(?c)", examples=_FUSED_SEEDS),
    L(703, "fused-add-rms-norm-residual-of-row-concats",
      f"{FUSED}#1(concat(?a, ?b, dim=?d), concat(?c, ?f, dim=?d), ?w, {_E})"
      f" => concat({FUSED}#1(?a, ?c, ?w, {_E}), {FUSED}#1(?b, ?f, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1 and shape(?a) == shape(?c)", examples=_FUSED_SEEDS),
    L(704, "silu-and-mul-of-row-concat",
      f"{SILU}(concat(?a, ?b, dim=?d)) => concat({SILU}(?a), {SILU}(?b), dim=?d)",
      "?d < rank(?a) - 1", examples=_SILU_ROW_SEEDS),
    L(705, "silu-and-mul-of-merged-gate-up",
      f"{SILU}(concat(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), dim=?d))"
      f" => concat({SILU}(concat(?a, ?c, dim=?d)), {SILU}(concat(?b, ?e, dim=?d)), dim=?d)",
      "?d == rank(?a) - 1 and shape(?a) == shape(?c) and shape(?b) == shape(?e)", examples=_SILU_GU_SEEDS),
    # SiluAndMul by its definition, in ATen ops: lets the elementwise and slice lemmas follow any sharding
    # of the two halves (any degree, any concat nesting) -- what makes vLLM's merged gate_up TP verify
    L(706, "silu-and-mul-is-silu-times-up",
      f"{SILU}(?x) => aten.mul.Tensor(aten.silu(slice(?x, dim=rank(?x) - 1, start=0, end=size(?x, rank(?x) - 1) // 2)),"
      " slice(?x, dim=rank(?x) - 1, start=size(?x, rank(?x) - 1) // 2, end=size(?x, rank(?x) - 1)))",
      "2 * (size(?x, rank(?x) - 1) // 2) == size(?x, rank(?x) - 1)",
      examples=[{"x": [3, 4]}, {"x": [2, 1, 6]}, {"x": [2]}]),
    # a column block of a product is the product with that column block (vLLM's per-rank gate/up halves)
    L(707, "matmul-of-column-slice",
      "matmul(?x, slice(?w, dim=1, start=?s, end=?e)) => slice(matmul(?x, ?w), dim=1, start=?s, end=?e)",
      "rank(?w) == 2",
      examples=[{"x": [3, 4], "w": [4, 6], "s": 0, "e": 3}, {"x": [2, 2], "w": [2, 5], "s": 1, "e": 4}]),
]
