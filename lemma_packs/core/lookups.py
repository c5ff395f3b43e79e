"""Masked lookups over row shards: ``core.masked_lookup(w, ids, start=s, end=e)`` is rank r's lookup of the
rows [s, e) of a table it holds as ``w`` -- ``w[ids - s]`` where ``s <= ids < e``, zero rows elsewhere -- and
the ranks' masked lookups of their shards add up to the lookup of the whole table (a vocabulary-parallel
embedding). The op is the one canonical form; each framework's way of writing it is data (``SPELLINGS``,
the op's ``fuses``: Megatron's ``index_put`` of shifted ids, its ``masked_fill`` form, vLLM's
``get_masked_input_and_mask``, torchtitan's multiplication by the mask), each a lemma of family 1218 that
``graphguard lemmas check`` fuzzes, collapsed into the op where a graph spells it out
(``graphguard/passes/fusion.py``), and equal to it in the e-graph everywhere else. The lemma below is written
once, on the op; the ATen pack's lemmas relate ``aten.embedding`` to it (``lemma_packs/aten/vocab_lookups.py``).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.lemma import L
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape

NUMBERS = range(300, 320)  # this file's lemma numbers (the plugin loader refuses others)

MASKED_LOOKUP = "core.masked_lookup"

# -- the spellings, over ?x0 (the table's rows a rank holds), ?x1 (the ids), ?p_start, ?p_end ----------------
_W, _I, _S, _E = "?x0", "?x1", "?p_start", "?p_end"
# Megatron: the ids outside [s, e), the shifted ids with the masked ones set to row 0 (index_put), the rows
# looked up with the masked ones zeroed
MASK = f"aten.bitwise_or.Tensor(aten.lt.Scalar({_I}, other={_S}), aten.ge.Scalar({_I}, other={_E}))"
LOCAL = (f"aten.index_put(aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64)), {MASK},"
         " aten.full(size=[], fill_value=0, dtype=int64))")
_EMBED = f"aten.embedding({_W}, {{ids}}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
MEGATRON = f"aten.index_put({_EMBED.format(ids=LOCAL)}, {MASK}, aten.full(size=[], fill_value=0, dtype=float32))"
# ... its masked_fill form: (ids - s).masked_fill(mask, 0), then output_parallel.masked_fill(mask.unsqueeze(-1), 0)
_SHIFTED = f"aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64))"
LOCAL_MF = f"aten.masked_fill.Scalar({_SHIFTED}, {MASK}, value=0)"
MASKED_FILL = f"aten.masked_fill.Scalar({_EMBED.format(ids=LOCAL_MF)}, reshape({MASK}, shape=?u), value=0)"
# ... and its torch.where form: torch.where(mask, 0, ids - s), then torch.where(mask.unsqueeze(-1), 0.0, out)
LOCAL_WHERE = f"aten.where.self({MASK}, aten.scalar_tensor(s=0, dtype=int64), {_SHIFTED})"
WHERE = (f"aten.where.self(reshape({MASK}, shape=?u), aten.scalar_tensor(s=0, dtype=?t),"
         f" {_EMBED.format(ids=LOCAL_WHERE)})")
# vLLM's get_masked_input_and_mask: the ids in the shard [s, e) or in the added-vocabulary range [a, a) (empty),
# shifted by s (or the added offset o), times the mask; the rows of ~mask.unsqueeze(-1) zeroed
_ORG = f"aten.bitwise_and.Tensor(aten.ge.Scalar({_I}, other={_S}), aten.lt.Scalar({_I}, other={_E}))"
_ADDED = f"aten.bitwise_and.Tensor(aten.ge.Scalar({_I}, other=?n), aten.lt.Scalar({_I}, other=?n))"
_VMASK = f"aten.bitwise_or.Tensor({_ORG}, {_ADDED})"
_OFFSET = (f"aten.add.Tensor(aten.mul.Tensor({_ORG}, aten.scalar_tensor(s={_S}, dtype=int64)),"
           f" aten.mul.Tensor({_ADDED}, aten.scalar_tensor(s=?o, dtype=int64)), alpha=1)")
VLLM = (f"aten.masked_fill.Scalar({_EMBED.format(ids=f'aten.mul.Tensor({_VMASK}, aten.sub.Tensor({_I}, {_OFFSET}, alpha=1))')},"
        f" reshape(aten.bitwise_not({_VMASK}), shape=?u), value=0)")
# torchtitan: the shifted ids clamped into the shard, the rows looked up times mask.unsqueeze(-1).to(dtype)
_TT_LOCAL = f"aten.clamp(aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64)), min=0, max=?c)"
MASK_MULTIPLIED = (f"aten.mul.Tensor({_EMBED.format(ids=_TT_LOCAL)},"
                   f" aten._to_copy(reshape({_ORG}, shape=?u), dtype=?t))")

_RANGE = (f"rank({_W}) == 2 and size({_W}, 0) >= 1 and {_S} // 1 == {_S}"
          f" and {_S} < {_E} and {_E} - {_S} <= size({_W}, 0)")
# ?u is the ids' shape with a trailing 1 (mask.unsqueeze(-1)): ids of rank 1 to 3
_UNSQ = (f"((rank({_I}) == 1 and ?u == [size({_I}, 0), 1]) or (rank({_I}) == 2 and ?u == [size({_I}, 0), size({_I}, 1), 1])"
         f" or (rank({_I}) == 3 and ?u == [size({_I}, 0), size({_I}, 1), size({_I}, 2), 1]))")


def _examples(extra=lambda ids, s, e: {}):
    return tuple({"x0": [r, h], "x1": ids, "p_start": s, "p_end": e, "x1:dtype": "int64", **extra(ids, s, e)}
                 for r, h, ids, s, e in ((3, 4, [2, 3], 0, 3), (5, 2, [4], 2, 6), (4, 3, [1, 2, 2], 4, 8),
                                         (2, 5, [3], 1, 2), (6, 1, [2, 2], 3, 9)))


_U = lambda ids, s, e: {"u": list(ids) + [1]}  # noqa: E731
_IDX = {"x1": f"{_E} + 2"}

SPELLINGS = (
    (MEGATRON, _RANGE, _examples(), _IDX),
    (MASKED_FILL, f"{_RANGE} and {_UNSQ}", _examples(_U), _IDX),
    # (a float fill of 0 whatever the rows' dtype: the same value after promotion)
    (WHERE, f"{_RANGE} and {_UNSQ} and floating(?t) and floating(dtype({_W}))",
     _examples(lambda ids, s, e: {"u": list(ids) + [1], "t": "float32"}), _IDX),
    (VLLM, f"{_RANGE} and rank({_I}) == 1 and ?u == [size({_I}, 0), 1] and ?n // 1 == ?n and ?o // 1 == ?o",
     tuple(x for x in _examples(lambda ids, s, e: {"u": list(ids) + [1], "n": e + 3, "o": 1}) if len(x["x1"]) == 1),
     _IDX),
    # times the mask: the rows' values finite (0 * inf is nan); torchtitan has no padding row
    (MASK_MULTIPLIED, f"{_RANGE} and {_UNSQ} and ?c == {_E} - {_S} - 1 and floating(?t) and ?t == dtype({_W})"
     " and ?p == -1", _examples(lambda ids, s, e: {"u": list(ids) + [1], "c": e - s - 1, "t": "float32", "p": -1}),
     _IDX),
)


def _shape(shapes, attrs, cx):
    w, ids = shapes
    s, e = attrs["start"], attrs["end"]
    if len(w) != 2:
        fail(f"{MASKED_LOOKUP}: table must be rank 2, got {fmt_shape(w)}")
    if not cx.prove("<=", S.norm(s), S.norm(e)) or not cx.prove("<=", S.norm(S.sym(e) - S.sym(s)), w[0]):
        fail(f"{MASKED_LOOKUP}: rows [{S.text(s)}, {S.text(e)}) do not fit table {fmt_shape(w)}")
    return tuple(ids) + (w[1],)


def _ref(xs, attrs):
    w, ids = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64)
    s, e = int(attrs["start"]), int(attrs["end"])
    inside = (ids >= s) & (ids < e)
    rows = w[np.where(inside, ids - s, 0)]
    return np.where(inside[..., None], rows, np.zeros((), dtype=w.dtype))


OPS = [
    OpDef(MASKED_LOOKUP, 2, _shape, _ref, (AttrSpec("start", "scalar"), AttrSpec("end", "scalar")),
          doc="Rank r's lookup of rows [start, end) of a table it holds: table[ids - start] where "
              "start <= ids < end, zero rows elsewhere.", fuses=SPELLINGS),
]

_A, _AB = "size(?a, 0)", "size(?a, 0) + size(?b, 0)"
LEMMAS = [
    # a masked lookup of a concatenation (more ranks, or a shard past the real rows: vLLM's padding) is the sum
    # of its parts' masked lookups, the range split where the first part ends
    L(300, "masked-lookup-of-row-shards",
      f"{MASKED_LOOKUP}(concat(?a, ?b, dim=0), ?i, start=?s, end=?e)"
      f" => sum({MASKED_LOOKUP}(?a, ?i, start=?s, end=?s + {_A}), {MASKED_LOOKUP}(?b, ?i, start=?s + {_A}, end=?e))",
      f"rank(?a) == 2 and {_A} >= 1 and size(?b, 0) >= 1 and ?s // 1 == ?s and ?s + {_A} < ?e and ?e - ?s <= {_AB}",
      index={"i": "?e + 2"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": i, "s": s, "e": e}
                for a, b, i, s, e in ((2, 3, [7], 1, 6), (1, 2, [2, 3], 0, 3), (4, 4, [3, 4], 4, 12), (3, 1, [6], 2, 6),
                                      (2, 2, [1, 2, 4], 0, 4), (2, 4, [3], 0, 5), (3, 3, [2, 2], 1, 5))]),
]
