"""Masked lookups over vocabulary shards: rank r owns rows [s, e) of an embedding table or the logits' columns;
ids outside are masked (Megatron: ``index_put`` of shifted ids, or ``masked_fill``; vLLM: ``get_masked_input_and_mask``;
torchtitan: multiplied by the mask) and the ranks' lookups, target logits and one-hot updates are summed. Each is
one canonical op with the frameworks' spellings as data (``lemma_packs/core/lookups.py``: ``core.masked_lookup``,
``core.masked_pick``, ``core.masked_one_hot_update``, ``core.masked_embedding_backward``, ``core.masked_neg_one_hot``,
each split there, once); the lemmas here relate the sequential ATen ops (``embedding`` and its backward, ``gather``,
``scatter_add``, nll_loss's one-hot ``scatter``, an unmasked pick of targets in range) to them.

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

from lemma_packs.core.lookups import (LOCAL, LOCAL_MF, MASKED_EMBEDDING_BACKWARD, MASKED_FILL, MASKED_LOOKUP,
                                      MASKED_NEG_ONE_HOT, MASKED_ONE_HOT_UPDATE, MASKED_PICK, MEGATRON, NEG_ONE_HOT,
                                      PICK_FLAT, PICK_MASKED_FILL, VLLM)

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


# the shifted, masked ids (masked ones point at row 0); s is an integer
_LOCAL = _template(LOCAL)
_LOCAL_MF = _template(LOCAL_MF)
# VocabParallelEmbedding: weight[local], masked rows zeroed (index_put; masked_fill)
_LOOKUP = _template(MEGATRON, "{w}")
_LOOKUP_MF = _template(MASKED_FILL, "{w}")
# _VocabParallelCrossEntropy: the target's logit x[arange, local] of rows [0, m), zero where masked
_PREDICTED = _template(PICK_FLAT)
_PREDICTED_MF = _template(PICK_MASKED_FILL)
# torchtitan's one-hot of a rank's targets ?i in [s, e) ({n} of them, zeros {z} of dtype ?y)
_OH = _template(NEG_ONE_HOT.replace("?x0", "?i").replace("?z", "{z}").replace("?p_dtype", "?y")).replace("{m}", "{n}")
_A, _B, _AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"  # vocabulary rows of the parts
_AC, _ABC = "size(?a, 1)", "size(?a, 1) + size(?b, 1)"  # vocabulary columns of the parts
_T1 = "reshape(?t, shape=[size(?t, 0)])"  # [tokens, 1] targets as [tokens]
_COLS = f"rank(?a) == 2 and {_AC} >= 1 and size(?b, 1) >= 1"
_FALSE = 'aten.full(size={z}, fill_value=0, dtype="bool")'


def lookup(w, i, s, e, a, o, u):
    """Rank r's masked lookup as vLLM writes it: shard [s, e), empty added range [a, a), added offset o; u the
    shape of the unsqueezed mask -- core's spelling (lemma_packs/core/lookups.py VLLM) with these filled in."""
    out = VLLM
    for var, val in (("?x0", w), ("?x1", i), ("?p_start", s), ("?p_end", e), ("?n", a), ("?o", o), ("?u", u)):
        out = out.replace(var, str(val))
    return out

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
    # its backward: the whole table's gradient is the masked backward over all of [0, V) (ids outside it are no
    # row of the table: embedding_dense_backward is undefined there), which core:303 splits at the ranks' shard
    # ends (core.masked_embedding_backward, whichever spelling the ranks use: lemma_packs/core/lookups.py);
    # constrained (§4.3) to a gradient and ids a rank-0 masked backward reads
    L(472, "embedding-backward-is-masked-backward-of-whole-table",
      "aten.embedding_dense_backward(?g, ?i, num_weights=?v, padding_idx=-1, scale_grad_by_freq=false)"
      f" => {MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=0, end=?v)",
      "?v // 1 == ?v and ?v >= 1 and rank(?g) == rank(?i) + 1",
      when=f"{MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=0, end=?z)", index={"i": "?v"},
      examples=[{"g": g, "i": g[:-1], "v": v, "z": z}
                for g, v, z in (([2, 3, 4], 5, 2), ([5, 2], 3, 1), ([4, 3], 8, 4), ([1, 2], 2, 1), ([3, 2, 2], 6, 5))]),
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
    # nll_loss's one-hot of targets in [0, V) (-1 scattered into zeros) is the masked one over all of [0, V) (scatter
    # is undefined for a target outside it), which core:304 splits at the ranks' shard ends (torchtitan's loss
    # parallel: core.masked_neg_one_hot's spelling); constrained to targets a rank-0 one-hot reads
    L(1734, "one-hot-is-masked-one-hot-of-whole-vocab",
      "aten.scatter.value(aten.full(size=?z, fill_value=0, dtype=?y), reshape(?i, shape=?u), dim=1, value=-1)"
      f" => {MASKED_NEG_ONE_HOT}(?i, start=0, end=at(?z, 1), dtype=?y)",
      "rank(?i) == 1 and ?u == [size(?i, 0), 1] and len(?z) == 2 and at(?z, 0) == size(?i, 0) and at(?z, 1) >= 1"
      " and floating(?y)", when=f"{MASKED_NEG_ONE_HOT}(?i, start=0, end=?m, dtype=?y)", index={"i": "at(?z, 1)"},
      examples=[{"i": [n], "u": [n, 1], "z": [n, v], "m": m, "y": "float32"}
                for n in (1, 2, 3, 4, 6) for v, m in ((4, 2), (5, 1), (6, 5), (3, 1), (8, 4))]),
]
