"""Masked lookups over vocabulary shards: rank r owns rows [s, e) of an embedding table or the logits' columns;
ids outside are masked (Megatron: ``index_put`` of shifted ids, or ``masked_fill``; vLLM: ``get_masked_input_and_mask``;
torchtitan: multiplied by the mask) and the ranks' lookups, target logits and one-hot updates are summed. Each is
one canonical op with the frameworks' spellings as data (``lemma_packs/core/lookups.py``: ``core.masked_lookup``,
``core.masked_pick``, ``core.masked_one_hot_update``, each split over a concatenation there, once); the lemmas here
relate the sequential ATen ops (``embedding``, ``gather``, ``scatter_add``, an unmasked pick of targets in range)
to them.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

from lemma_packs.core.lookups import (LOCAL, LOCAL_MF, MASK, MASKED_FILL, MASKED_LOOKUP, MASKED_ONE_HOT_UPDATE,
                                      MASKED_PICK, MEGATRON, PICK_FLAT, PICK_MASKED_FILL)

# the canonical ops' spellings as format templates ({w}/{x} the table or logits, {i} the ids, {s}, {e}, {m} the
# rows), for the tests that spell a rank's program out
_NAMES = {"?x0": "{x}", "?x1": "{i}", "?p_start": "{s}", "?p_end": "{e}", "?m": "{m}"}


def _template(spelling: str, table: str = "{x}") -> str:
    for k, v in {**_NAMES, "?x0": table}.items():
        spelling = spelling.replace(k, v)
    return spelling

# the numbers its lemmas have, then 2450-2499 for new ones
NUMBERS = (range(470, 474), range(476, 488), range(1315, 1317), range(1318, 1320), range(1620, 1623),
           range(1710, 1714), range(1734, 1736), range(2450, 2500))


# the mask of ids i outside [s, e) and the shifted, masked ids (masked ones point at row 0); s is an integer
_MASK = _template(MASK)
_LOCAL = _template(LOCAL)
_LOCAL_MF = _template(LOCAL_MF)
# VocabParallelEmbedding: weight[local], masked rows zeroed (index_put; masked_fill)
_LOOKUP = _template(MEGATRON, "{w}")
_LOOKUP_MF = _template(MASKED_FILL, "{w}")
# _VocabParallelCrossEntropy: the target's logit x[arange, local] of rows [0, m), zero where masked
_PREDICTED = _template(PICK_FLAT)
_PREDICTED_MF = _template(PICK_MASKED_FILL)
# its backward: the gradient of masked rows zeroed, summed into the shard's rows
_EMB_BW = (f"aten.embedding_dense_backward(aten.index_put({{g}}, {_MASK}, aten.zeros(size=[], dtype=float32)),"
           f" {_LOCAL}, num_weights={{n}}, padding_idx=?pi, scale_grad_by_freq=false)")
_A, _B, _AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"  # vocabulary rows of the parts
_AC, _ABC = "size(?a, 1)", "size(?a, 1) + size(?b, 1)"  # vocabulary columns of the parts
_T1 = "reshape(?t, shape=[size(?t, 0)])"  # [tokens, 1] targets as [tokens]
_COLS = f"rank(?a) == 2 and {_AC} >= 1 and size(?b, 1) >= 1"

# -- the masked_fill form (480-484) ------------------------------------------------------------------
_ZERO_ROWS_MF = f"aten.masked_fill.Scalar({{x}}, reshape({_MASK}, shape=?u), value=0)"  # x[mask, :] = 0
_EMB_BW_MF = (f"aten.embedding_dense_backward({_ZERO_ROWS_MF.replace('{x}', '{g}')}, {_LOCAL}, num_weights={{n}},"
              " padding_idx=?pi, scale_grad_by_freq=false)")
# ?u is the ids' shape with a trailing 1 (mask.unsqueeze(-1)): ids of rank 1 to 3
_UNSQ = ("(rank(?i) == 1 and ?u == [size(?i, 0), 1]) or (rank(?i) == 2 and ?u == [size(?i, 0), size(?i, 1), 1])"
         " or (rank(?i) == 3 and ?u == [size(?i, 0), size(?i, 1), size(?i, 2), 1])")
# rank 0's unsqueezed mask: binds ?u where ids are compared with 0
_RANK0_UNSQ = "reshape(aten.bitwise_or.Tensor(aten.lt.Scalar(?i, other=0), ?g), shape=?u)"


def _unsq(shape):
    return list(shape) + [1]

_CE_LOCAL = _LOCAL
_CE_MASK = _MASK


def lookup(w, i, s, e, a, o, u):
    """Rank r's masked lookup as vLLM writes it: shard [s, e), empty added range [a, a), added offset o; u the
    shape of the unsqueezed mask."""
    org = f"aten.bitwise_and.Tensor(aten.ge.Scalar({i}, other={s}), aten.lt.Scalar({i}, other={e}))"
    added = f"aten.bitwise_and.Tensor(aten.ge.Scalar({i}, other={a}), aten.lt.Scalar({i}, other={a}))"
    offset = (f"aten.add.Tensor(aten.mul.Tensor({org}, aten.scalar_tensor(s={s}, dtype=int64)),"
              f" aten.mul.Tensor({added}, aten.scalar_tensor(s={o}, dtype=int64)), alpha=1)")
    mask = f"aten.bitwise_or.Tensor({org}, {added})"
    ids = f"aten.mul.Tensor({mask}, aten.sub.Tensor({i}, {offset}, alpha=1))"
    return (f"aten.masked_fill.Scalar(aten.embedding({w}, {ids}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
            f" reshape(aten.bitwise_not({mask}), shape={u}), value=0)")


_VLLM_A, _VLLM_B, _VLLM_AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"
_U = "[size(?i, 0), 1]"
_IDS = "rank(?i) == 1 and dtype(?i) == \"int64\""


_FALSE = 'aten.full(size={z}, fill_value=0, dtype="bool")'


# -- torchtitan's vocabulary-parallel embedding ----------------------------------------------------------------
# rank r owns rows [s, e): ids in range, (i >= s) & (i < e); shifted ids clamped into the shard
_TT_MASK = "aten.bitwise_and.Tensor(aten.ge.Scalar({i}, other={s}), aten.lt.Scalar({i}, other={e}))"
_TT_LOCAL = "aten.clamp(aten.sub.Tensor({i}, aten.scalar_tensor(s={s}, dtype=int64)), min=0, max={x})"  # x: e - s - 1
# mask.unsqueeze(-1).to(out.dtype); on a right side u, t are unit_dim_after(?i) and the table's dtype
_CAST = "aten._to_copy(reshape(" + _TT_MASK + ", shape={u}), dtype={t})"
# the rows looked up, times the mask
_TT_LOOKUP = (f"aten.mul.Tensor(aten.embedding({{w}}, {_TT_LOCAL}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
           f" {_CAST})")
# its backward: the gradient times the mask, summed into the shard's rows
_TT_EMB_BW = (f"aten.embedding_dense_backward(aten.mul.Tensor({{g}}, {_CAST}), {_TT_LOCAL}, num_weights={{n}},"
           " padding_idx=?pi, scale_grad_by_freq=false)")
_TT_A, _TT_B, _TT_AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"


def _lookup(w, i, s, e, x=None, u="?u", t="?t"):
    """The masked lookup of rows [s, e); ``x`` the clamp's bound, ``u``/``t`` the cast mask's shape and dtype
    (variables on a left side)."""
    return _TT_LOOKUP.format(w=w, i=i, s=s, e=e, x=x or f"({e}) - ({s}) - 1", u=u, t=t)


def _emb_bw(g, i, s, e, n, x=None, u="?u", t="?t"):
    return _TT_EMB_BW.format(g=g, i=i, s=s, e=e, n=n, x=x or f"({e}) - ({s}) - 1", u=u, t=t)


_FLOAT_MASK = "floating(?t) and ?t == dtype(?a) and ?p == -1"  # torchtitan has no padding row
_TT_U, _T = "unit_dim_after(?i)", "dtype(?a)"

# torchtitan's one-hot of a rank's targets in [s, e) (Megatron's masks and masked local ids, above): zeros [n, e - s] with (mask - 1) at (row, masked local id)
_OH = ("aten.index_put(aten.full(size={z}, fill_value=0, dtype=?y), aten.arange(end={n}, dtype=None),"
       f" {_CE_LOCAL.format(i='?i', s='{s}', e='{e}')},"
       f" aten.sub.Tensor(aten._to_copy({_CE_MASK.format(i='?i', s='{s}', e='{e}')}, dtype=?y),"
       " aten.scalar_tensor(s=1, dtype=?y), alpha=1))")


LEMMAS = [
    # a lookup of the whole table is the sum of the ranks' masked lookups of their row shards (core.masked_lookup,
    # whichever framework's spelling the ranks use: lemma_packs/core/lookups.py); constrained (§4.3) to ids a
    # rank-0 masked lookup reads (shard [0, ?z)), never the lookups nested inside one
    L(470, "embedding-of-vocab-shards",
      f"aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({MASKED_LOOKUP}(?a, ?i, start=0, end={_A}), {MASKED_LOOKUP}(?b, ?i, start={_A}, end={_AB}))",
      f"rank(?a) == 2 and {_A} >= 1 and {_B} >= 1", when=f"{MASKED_LOOKUP}(?c, ?i, start=0, end=?z)",
      index={"i": _AB},
      examples=[{"a": [3, 4], "b": [2, 4], "i": [2, 3]}, {"a": [2, 3], "b": [2, 3], "i": [5]},
                {"a": [1, 2], "b": [3, 2], "i": [1, 2, 2]}]),
    # backward, constrained (§4.3): the full gradient splits where the ids are compared with a shard's end
    # (a rank's mask), then where a rank's masked gradient exists
    L(472, "embedding-backward-splits-at-vocab-shard",
      "aten.embedding_dense_backward(?g, ?i, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"
      f" => concat({_EMB_BW.format(g='?g', i='?i', s=0, e='?n', n='?n')},"
      f" {_EMB_BW.format(g='?g', i='?i', s='?n', e='?v', n='?v - ?n')}, dim=0)",
      "?pi == -1 and ?n // 1 == ?n and 0 < ?n and ?n < ?v", when="aten.ge.Scalar(?i, other=?n)", index={"i": "?v"},
      examples=[{"g": g, "i": g[:-1], "v": v, "n": n, "pi": -1}
                for g, v, n in (([2, 3, 4], 5, 2), ([5, 2], 3, 1), ([4, 3], 8, 4), ([1, 2], 2, 1), ([3, 2, 2], 6, 5))]),
    L(473, "masked-embedding-backward-splits",
      f"{_EMB_BW.format(g='?g', i='?i', s='?s', e='?e', n='?w')}"
      f" => concat({_EMB_BW.format(g='?g', i='?i', s='?s', e='?m', n='?k')},"
      f" {_EMB_BW.format(g='?g', i='?i', s='?m', e='?e', n='?e - ?m')}, dim=0)",
      "?pi == -1 and ?s // 1 == ?s and ?w == ?e - ?s and ?k == ?m - ?s and ?s < ?m and ?m < ?e",
      when=_EMB_BW.format(g="?g", i="?i", s="?s", e="?m", n="?k"), index={"i": "?e + 2"},
      examples=[{"g": [2, 3, 4], "i": [2, 3], "s": s, "e": e, "w": e - s, "m": m, "k": m - s, "pi": -1}
                for s, m, e in ((1, 3, 6), (0, 2, 4), (4, 8, 16), (2, 3, 4), (0, 1, 5))]),
    # the target's logit of vocabulary-sharded logits [tokens, V]: the sum of the ranks' masked picks
    # (core.masked_pick, which its spellings' lemmas make of this one in the e-graph: any framework's spelling);
    # torch.gather is undefined for a target outside [0, V). The right side spells the picks out (Megatron's flat
    # form, lemma_packs/core/lookups.py PICK_FLAT) rather than naming the op: a rank that gathers its masked
    # targets' column and zeroes the masked rows (torchtitan's loss parallel, not a spelling the fusion collapses)
    # computes them over masks the search reaches only through these terms (engine/infer.py explore_frontier)
    L(476, "gather-of-vocab-shards",
      "aten.gather(concat(?a, ?b, dim=1), ?t, dim=1, sparse_grad=?g)"
      f" => reshape(sum({_PREDICTED.format(x='?a', m='size(?a, 0)', i=_T1, s=0, e=_AC)},"
      f" {_PREDICTED.format(x='?b', m='size(?a, 0)', i=_T1, s=_AC, e=_ABC)}), shape=shape(?t))",
      f"shape(?t) == [size(?a, 0), 1] and {_COLS}",
      index={"t": _ABC}, examples=[{"a": [3, 2], "b": [3, 4], "t": [3, 1]}, {"a": [1, 1], "b": [1, 2], "t": [1, 1]}]),
    # the backward: softmax minus the one-hot of the target (scatter_add of -1) of sharded softmax rows, the
    # ranks' masked one-hot updates of their columns (core.masked_one_hot_update)
    L(478, "one-hot-update-of-vocab-shards",
      "aten.scatter_add(concat(?a, ?b, dim=1), ?t, aten.full(size=?z, fill_value=?o, dtype=?y), dim=1)"
      f" => concat({MASKED_ONE_HOT_UPDATE}(?a, {_T1}, start=0, end={_AC}),"
      f" {MASKED_ONE_HOT_UPDATE}(?b, {_T1}, start={_AC}, end={_ABC}), dim=1)",
      f"?o == -1 and shape(?t) == [size(?a, 0), 1] and ?z == shape(?t) and {_COLS} and floating(?y)"
      " and floating(dtype(?a)) and floating(dtype(?b))",
      index={"t": _ABC}, examples=[{"a": [n, a], "b": [n, b], "t": [n, 1], "z": [n, 1], "o": -1}
                                   for n, a, b in ((3, 2, 4), (4, 2, 2), (2, 1, 3), (5, 3, 1), (1, 2, 2))]),
    # (i - s).masked_fill(mask, 0) is Megatron's i - s with [mask] = 0
    L(480, "masked-fill-ids-are-index-put-ids",
      f"{_LOCAL_MF.format(i='?i', s='?s', e='?e')} => {_LOCAL.format(i='?i', s='?s', e='?e')}",
      "?s // 1 == ?s and rank(?i) >= 1", index={"i": "?e + 2"},
      examples=[{"i": i, "s": s, "e": e} for i, s, e in (([2, 3], 1, 3), ([5], 0, 2), ([1, 4], 2, 6))]),
    # backward: the gradient of masked_fill is the gradient masked_fill'ed; as 472 (split where a rank's unsqueezed
    # mask compares the ids with its shard's end, which gives ?u) and 473
    L(483, "embedding-backward-splits-at-vocab-shard-masked-fill",
      "aten.embedding_dense_backward(?g, ?i, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"
      f" => concat({_EMB_BW_MF.format(g='?g', i='?i', s=0, e='?n', n='?n')},"
      f" {_EMB_BW_MF.format(g='?g', i='?i', s='?n', e='?v', n='?v - ?n')}, dim=0)",
      f"?pi == -1 and ?n // 1 == ?n and 0 < ?n and ?n < ?v and rank(?g) == rank(?i) + 1 and ({_UNSQ})",
      when="reshape(aten.bitwise_or.Tensor(?l, aten.ge.Scalar(?i, other=?n)), shape=?u)", index={"i": "?v"},
      examples=[{"g": g, "i": g[:-1], "l": g[:-1], "u": _unsq(g[:-1]), "v": v, "n": n, "pi": -1}
                for g, v, n in (([2, 3, 4], 5, 2), ([5, 2], 3, 1), ([4, 3], 8, 4), ([1, 2], 2, 1), ([3, 2, 2], 6, 5))]),
    L(484, "masked-fill-embedding-backward-splits",
      f"{_EMB_BW_MF.format(g='?g', i='?i', s='?s', e='?e', n='?w')}"
      f" => concat({_EMB_BW_MF.format(g='?g', i='?i', s='?s', e='?m', n='?k')},"
      f" {_EMB_BW_MF.format(g='?g', i='?i', s='?m', e='?e', n='?e - ?m')}, dim=0)",
      f"?pi == -1 and ?s // 1 == ?s and ?w == ?e - ?s and ?k == ?m - ?s and ?s < ?m and ?m < ?e and ({_UNSQ})",
      when=_EMB_BW_MF.format(g="?g", i="?i", s="?s", e="?m", n="?k"), index={"i": "?e + 2"},
      examples=[{"g": [2, 3, 4], "i": [2, 3], "u": [2, 3, 1], "s": s, "e": e, "w": e - s, "m": m, "k": m - s, "pi": -1}
                for s, m, e in ((1, 3, 6), (0, 2, 4), (4, 8, 16), (2, 3, 4), (0, 1, 5))]),
    # torch.where(mask, 0, x) is x.masked_fill(mask, 0) (a whole-number fill: the same value whatever the
    # dtypes promote to), so the masked_fill lemmas above cover the torch.where form too
    L(487, "where-of-a-scalar-is-masked-fill",
      "aten.where.self(?m, aten.scalar_tensor(s=?v, dtype=?t), ?x) => aten.masked_fill.Scalar(?x, ?m, value=?v)",
      "?v // 1 == ?v and (floating(?t) or ?t == \"int64\") and (dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t)))"),
    # a padded vocabulary: vLLM pads the table to a multiple of 64 rows per rank, so the last shard ends in
    # A + B - n padding rows past the n real ones, and that rank's shard is [A, n). The padding rows are read for
    # ids in [n, A + B) alone -- by the whole table, not by the ranks, which mask them -- so the lemma needs the
    # ids in [0, n): a relation file's ranges: (the token ids of a vocabulary of n). ?n is where a rank's masked
    # lookup ends
    L(1622, "embedding-of-padded-vocab-shards",
      "aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({MASKED_LOOKUP}(?a, ?i, start=0, end={_A}), {MASKED_LOOKUP}(?b, ?i, start={_A}, end=?n))",
      f"rank(?a) == 2 and {_A} >= 1 and ?n // 1 == ?n and {_A} < ?n and ?n < {_AB} and vmin(?i) >= 0"
      " and vend(?i) <= ?n", when=f"{MASKED_LOOKUP}(?c, ?i, start=?m, end=?n)", index={"i": _AB},
      examples=[{"a": [a, 4], "b": [b, 4], "i": [t], "n": n}
                for a, b, t, n in ((3, 3, 5, 5), (2, 4, 4, 3), (4, 4, 6, 7), (1, 3, 3, 2))]),
    # targets all in [0, cols): a plain pick of the target's logit is the masked pick over all the columns (its
    # split over the ranks' columns: core:301)
    L(1316, "lookup-of-ids-in-range-is-megatron-masked-lookup",
      "aten.index.Tensor(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u))"
      f" => reshape({MASKED_PICK}(?x, ?t, start=0, end=size(?x, 1)), shape=[?m])",
      "?u == [?m] and ?m == numel(?t) and rank(?x) == 2 and size(?x, 0) == ?m and vmin(?t) >= 0"
      " and vend(?t) <= size(?x, 1)",
      examples=[{"x": [n, c], "t": t, "m": n, "u": [n], "t:range": r}
                for n, c, t, r in ((6, 4, [3, 2], (0, 4)), (4, 3, [2, 2], (1, 3)), (2, 5, [2], (0, 5)),
                                   (6, 2, [2, 3], (0, 2)))]),
    # ... and x[arange, ids] -= 1 - 0 (the TP=1 program, its mask all false) the masked one-hot update (core:302)
    L(1319, "one-hot-update-of-ids-in-range-is-megatron-masked-update",
      "aten.index_put(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u),"
      " aten.sub.Tensor(aten.index.Tensor(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u)),"
      f" aten.rsub.Scalar(aten._to_copy(reshape({_FALSE.format(z='?z')}, shape=?u), dtype=float32), other=1)))"
      f" => {MASKED_ONE_HOT_UPDATE}(?x, ?t, start=0, end=size(?x, 1))",
      "?u == [?m] and ?m == numel(?t) and ?z == shape(?t) and rank(?x) == 2 and size(?x, 0) == ?m"
      " and floating(dtype(?x)) and vmin(?t) >= 0 and vend(?t) <= size(?x, 1)",
      examples=[{"x": [n, c], "t": t, "m": n, "u": [n], "z": t, "t:range": r}
                for n, c, t, r in ((6, 4, [3, 2], (0, 4)), (4, 3, [2, 2], (1, 3)), (2, 5, [2], (0, 5)),
                                   (6, 2, [2, 3], (0, 2)))]),
    # backward, constrained to a rank's cast mask comparing the ids with its shard's end ?n
    L(1712, "embedding-backward-splits-at-vocab-shard-mask-multiplied",
      "aten.embedding_dense_backward(?g, ?i, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"
      f" => concat({_emb_bw('?g', '?i', 0, '?n', '?n', u=_TT_U, t='dtype(?g)')},"
      f" {_emb_bw('?g', '?i', '?n', '?v', '?v - ?n', u=_TT_U, t='dtype(?g)')}, dim=0)",
      "?pi == -1 and ?n // 1 == ?n and 0 < ?n and ?n < ?v and rank(?g) == rank(?i) + 1 and floating(dtype(?g))",
      when="aten.lt.Scalar(?i, other=?n)",
      index={"i": "?v"},
      examples=[{"g": g, "i": g[:-1], "v": v, "n": n, "pi": -1}
                for g, v, n in (([2, 3, 4], 5, 2), ([5, 2], 3, 1), ([4, 3], 8, 4), ([1, 2], 2, 1), ([3, 2, 2], 6, 5))]),
    L(1713, "mask-multiplied-embedding-backward-splits",
      f"{_emb_bw('?g', '?i', '?s', '?e', '?w', '?x')}"
      f" => concat({_emb_bw('?g', '?i', '?s', '?m', '?k')}, {_emb_bw('?g', '?i', '?m', '?e', '?e - ?m')}, dim=0)",
      f"?pi == -1 and ?s // 1 == ?s and ?w == ?e - ?s and ?k == ?m - ?s and ?s < ?m and ?m < ?e and ({_UNSQ})"
      " and ?x == ?e - ?s - 1 and ?y == ?m - ?s - 1 and floating(?t) and ?t == dtype(?g)",
      when=_emb_bw("?g", "?i", "?s", "?m", "?k", "?y"), index={"i": "?e + 2"},
      examples=[{"g": [2, 3, 4], "i": [2, 3], "u": [2, 3, 1], "s": s, "e": e, "w": e - s, "m": m, "k": m - s,
                 "pi": -1, "t": "float32", "x": e - s - 1, "y": m - s - 1}
                for s, m, e in ((1, 3, 6), (0, 2, 4), (4, 8, 16), (2, 3, 4), (0, 1, 5))]),
    # that one-hot over a vocabulary split at m (the first rank's shard end, where its mask compares the ids):
    # each rank's one-hot of its own targets, -1 where it owns the target and 0 elsewhere (mask - 1), written
    # at the masked local ids
    L(1734, "one-hot-of-vocab-shards",
      "aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y), reshape(?i, shape=?u), dim=1, value=-1)"
      f" => concat({_OH.format(n='size(?i, 0)', z='[size(?i, 0), ?m]', s=0, e='?m')},"
      f" {_OH.format(n='size(?i, 0)', z='[size(?i, 0), at(?z, 1) - ?m]', s='?m', e='at(?z, 1)')}, dim=1)",
      "rank(?i) == 1 and ?u == [size(?i, 0), 1] and len(?z) == 2 and at(?z, 0) == size(?i, 0) and ?m // 1 == ?m"
      " and 0 < ?m and ?m < at(?z, 1) and floating(?y)", when="aten.ge.Scalar(?i, other=?m)",
      index={"i": "at(?z, 1)"},
      examples=[{"i": [n], "u": [n, 1], "z": [n, v], "m": m} for n, v, m in ((3, 4, 2), (1, 5, 1), (4, 6, 5), (2, 3, 1))]),
    # ... and a rank's one-hot of [s, e) split again at m (more ranks)
    L(1735, "masked-one-hot-of-vocab-shards",
      f"{_OH.format(n='?n', z='?z', s='?s', e='?e')}"
      f" => concat({_OH.format(n='?n', z='[?n, ?m - ?s]', s='?s', e='?m')},"
      f" {_OH.format(n='?n', z='[?n, ?e - ?m]', s='?m', e='?e')}, dim=1)",
      "rank(?i) == 1 and size(?i, 0) == ?n and ?z == [?n, ?e - ?s] and ?s // 1 == ?s and ?m // 1 == ?m and ?s < ?m"
      " and ?m < ?e and floating(?y)", when="aten.ge.Scalar(?i, other=?m)", index={"i": "?e + 2"},
      examples=[{"i": [n], "n": n, "z": [n, e - s], "s": s, "e": e, "m": m}
                for n, s, m, e in ((3, 1, 3, 6), (2, 0, 2, 4), (4, 4, 8, 16), (1, 2, 3, 4), (5, 0, 1, 5))]),
]
