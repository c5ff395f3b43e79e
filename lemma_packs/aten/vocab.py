"""Lemmas for vocabulary-parallel embeddings and cross-entropy (Megatron-LM). References: 470-489.

Rank r owns rows [s, e) of the vocabulary. Megatron masks out-of-shard ids, ``(i < s) | (i >= e)``,
shifts the others by s, sets the masked ones to 0, looks them up (the embedding rows, or the target's
logit) and zeroes the masked results; the sum over ranks is the full lookup. These are the lemmas, stated
for the exact pattern Megatron writes (``lt``/``ge``/``bitwise_or``, ``index_put`` with the mask) over a
two-way split of the vocabulary -- nested for more ranks: a masked lookup of a concatenation is the sum of
the masked lookups of its parts with the shift moved along. Indices are fuzzed as integers in the left
side's domain (torch raises outside it: ``embedding``, ``gather`` and ``scatter_add`` check bounds).

The same patterns written with ``masked_fill`` (480-486; other Megatron versions and vLLM): the shifted ids
``(i - s).masked_fill(mask, 0)`` are Megatron's ``index_put`` ids (480, a bridge), the embedding rows are
zeroed with ``out.masked_fill(mask.unsqueeze(-1), 0)`` -- a reshape of the mask to the ids' shape plus a
trailing 1 -- and so is their gradient; the predicted logits with ``masked_fill(mask, 0)``. These carry no
dtype (``masked_fill`` takes its value as a number), so they hold for any float dtype of the model.
"""
from graphguard.ir.lemma import L

NUMBERS = range(470, 490)  # this file's lemma numbers (the plugin loader refuses others)

# the mask of ids i outside [s, e) and the shifted, masked ids (masked ones point at row 0); s is an integer
_MASK = "aten.bitwise_or.Tensor(aten.lt.Scalar({i}, other={s}), aten.ge.Scalar({i}, other={e}))"
_LOCAL = (f"aten.index_put(aten.sub.Tensor({{i}}, aten.scalar_tensor(s={{s}}, dtype=int64)), {_MASK},"
          " aten.full(size=[], fill_value=0, dtype=int64))")
_ZERO = "aten.full(size=[], fill_value=0, dtype=float32)"
# VocabParallelEmbedding: weight[local], masked rows zeroed
_LOOKUP = (f"aten.index_put(aten.embedding({{w}}, {_LOCAL}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
           f" {_MASK}, {_ZERO})")
# its backward: the gradient of masked rows zeroed, summed into the shard's rows
_EMB_BW = (f"aten.embedding_dense_backward(aten.index_put({{g}}, {_MASK}, aten.zeros(size=[], dtype=float32)),"
           f" {_LOCAL}, num_weights={{n}}, padding_idx=?pi, scale_grad_by_freq=false)")
# _VocabParallelCrossEntropy: the target's logit x[arange, local] of rows [0, m), zero where masked ...
_ROWS = "aten.arange.start(start=0, end={m})"
_PREDICTED = f"aten.index_put(aten.index.Tensor({{x}}, {_ROWS}, {_LOCAL}), {_MASK}, {_ZERO})"
# ... and its backward: x[arange, local] -= 1 - mask (softmax minus the one-hot of the target it owns)
_ONE_HOT_UPDATE = (f"aten.index_put({{x}}, {_ROWS}, {_LOCAL},"
                   f" aten.sub.Tensor(aten.index.Tensor({{x}}, {_ROWS}, {_LOCAL}),"
                   f" aten.rsub.Scalar(aten._to_copy({_MASK}, dtype=float32), other=1)))")

_A, _B, _AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"  # vocabulary rows of the parts
_AC, _ABC = "size(?a, 1)", "size(?a, 1) + size(?b, 1)"  # vocabulary columns of the parts
_T1 = "reshape(?t, shape=[size(?t, 0)])"  # [tokens, 1] targets as [tokens]
_COLS = f"rank(?a) == 2 and {_AC} >= 1 and size(?b, 1) >= 1"
_NESTED = f"?n == size(?a, 0) and ?s // 1 == ?s and ?e - ?s == {_ABC} and {_COLS}"  # [s, e) split into ?a, ?b
_NESTED_EXAMPLES = [{"a": [n, a], "b": [n, b], "t": [n], "n": n, "s": s, "e": s + a + b}
                    for n, a, b, s in ((3, 2, 3, 1), (4, 2, 2, 0), (2, 1, 3, 4), (5, 3, 1, 2), (1, 2, 2, 0))]

# -- the masked_fill form (480-486) ------------------------------------------------------------------
_LOCAL_MF = (f"aten.masked_fill.Scalar(aten.sub.Tensor({{i}}, aten.scalar_tensor(s={{s}}, dtype=int64)), {_MASK},"
             " value=0)")
_ZERO_ROWS_MF = f"aten.masked_fill.Scalar({{x}}, reshape({_MASK}, shape=?u), value=0)"  # x[mask, :] = 0
_LOOKUP_MF = _ZERO_ROWS_MF.replace(
    "{x}", f"aten.embedding({{w}}, {_LOCAL}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)")
_EMB_BW_MF = (f"aten.embedding_dense_backward({_ZERO_ROWS_MF.replace('{x}', '{g}')}, {_LOCAL}, num_weights={{n}},"
              " padding_idx=?pi, scale_grad_by_freq=false)")
_PREDICTED_MF = f"aten.masked_fill.Scalar(aten.index.Tensor({{x}}, {_ROWS}, {_LOCAL}), {_MASK}, value=0)"
# ?u is the ids' shape with a trailing 1 (mask.unsqueeze(-1)): ids of rank 1 to 3
_UNSQ = ("(rank(?i) == 1 and ?u == [size(?i, 0), 1]) or (rank(?i) == 2 and ?u == [size(?i, 0), size(?i, 1), 1])"
         " or (rank(?i) == 3 and ?u == [size(?i, 0), size(?i, 1), size(?i, 2), 1])")
# rank 0's unsqueezed mask: binds ?u where ids are compared with 0
_RANK0_UNSQ = "reshape(aten.bitwise_or.Tensor(aten.lt.Scalar(?i, other=0), ?g), shape=?u)"


def _unsq(shape):
    return list(shape) + [1]


EMBEDDING = [
    # constrained (§4.3) to ids compared with 0 (rank 0's mask): never the masked ids inside a masked lookup,
    # where it would nest lookups of lookups for every grouping of the shards
    L(470, "embedding-of-vocab-shards",
      f"aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({_LOOKUP.format(w='?a', i='?i', s=0, e=_A)}, {_LOOKUP.format(w='?b', i='?i', s=_A, e=_AB)})",
      f"rank(?a) == 2 and {_A} >= 1 and {_B} >= 1", when="aten.lt.Scalar(?i, other=0)", index={"i": _AB},
      examples=[{"a": [3, 4], "b": [2, 4], "i": [2, 3]}, {"a": [2, 3], "b": [2, 3], "i": [5]}]),
    L(471, "masked-lookup-of-vocab-shards",
      f"{_LOOKUP.format(w='concat(?a, ?b, dim=0)', i='?i', s='?s', e='?e')}"
      f" => sum({_LOOKUP.format(w='?a', i='?i', s='?s', e='?s + ' + _A)},"
      f" {_LOOKUP.format(w='?b', i='?i', s='?s + ' + _A, e='?e')})",
      f"?s // 1 == ?s and ?e - ?s == {_AB} and {_A} >= 1 and {_B} >= 1", index={"i": "?e + 2"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": i, "s": s, "e": s + a + b}
                for a, b, i, s in ((2, 3, [7], 1), (1, 2, [2, 3], 0), (4, 4, [3, 4], 4), (3, 1, [6], 2),
                                   (2, 2, [1, 2, 4], 0))]),
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
]

CROSS_ENTROPY = [
    L(474, "max-values-is-amax", "aten.max.dim#0(?x, dim=?d, keepdim=?k) => aten.amax(?x, dim=[?d], keepdim=?k)",
      "rank(?x) >= 1"),
    # the target's logit of vocabulary-sharded logits [tokens, V]: the sum of the ranks' masked lookups
    L(476, "gather-of-vocab-shards",
      "aten.gather(concat(?a, ?b, dim=1), ?t, dim=1, sparse_grad=?g)"
      f" => reshape(sum({_PREDICTED.format(x='?a', m='size(?a, 0)', i=_T1, s=0, e=_AC)},"
      f" {_PREDICTED.format(x='?b', m='size(?a, 0)', i=_T1, s=_AC, e=_ABC)}), shape=shape(?t))",
      f"shape(?t) == [size(?a, 0), 1] and {_COLS}",
      index={"t": _ABC}, examples=[{"a": [3, 2], "b": [3, 4], "t": [3, 1]}]),
    L(477, "masked-target-logit-of-vocab-shards",
      f"{_PREDICTED.format(x='concat(?a, ?b, dim=1)', m='?n', i='?t', s='?s', e='?e')}"
      f" => sum({_PREDICTED.format(x='?a', m='?n', i='?t', s='?s', e='?s + ' + _AC)},"
      f" {_PREDICTED.format(x='?b', m='?n', i='?t', s='?s + ' + _AC, e='?e')})",
      _NESTED, index={"t": "?e + 2"}, examples=_NESTED_EXAMPLES),
    # the backward: softmax minus the one-hot of the target (scatter_add of -1) of sharded softmax rows
    L(478, "one-hot-update-of-vocab-shards",
      "aten.scatter_add(concat(?a, ?b, dim=1), ?t, aten.full(size=?z, fill_value=?o, dtype=?y), dim=1)"
      f" => concat({_ONE_HOT_UPDATE.format(x='?a', m='size(?a, 0)', i=_T1, s=0, e=_AC)},"
      f" {_ONE_HOT_UPDATE.format(x='?b', m='size(?a, 0)', i=_T1, s=_AC, e=_ABC)}, dim=1)",
      f"?o == -1 and shape(?t) == [size(?a, 0), 1] and ?z == shape(?t) and {_COLS} and floating(?y)"
      " and floating(dtype(?a)) and floating(dtype(?b))",
      index={"t": _ABC}, examples=[{"a": [n, a], "b": [n, b], "t": [n, 1], "z": [n, 1], "o": -1}
                                   for n, a, b in ((3, 2, 4), (4, 2, 2), (2, 1, 3), (5, 3, 1), (1, 2, 2))]),
    L(479, "masked-one-hot-update-of-vocab-shards",
      f"{_ONE_HOT_UPDATE.format(x='concat(?a, ?b, dim=1)', m='?n', i='?t', s='?s', e='?e')}"
      f" => concat({_ONE_HOT_UPDATE.format(x='?a', m='?n', i='?t', s='?s', e='?s + ' + _AC)},"
      f" {_ONE_HOT_UPDATE.format(x='?b', m='?n', i='?t', s='?s + ' + _AC, e='?e')}, dim=1)",
      _NESTED, index={"t": "?e + 2"}, examples=_NESTED_EXAMPLES),
]

MASKED_FILL = [
    # (i - s).masked_fill(mask, 0) is Megatron's i - s with [mask] = 0
    L(480, "masked-fill-ids-are-index-put-ids",
      f"{_LOCAL_MF.format(i='?i', s='?s', e='?e')} => {_LOCAL.format(i='?i', s='?s', e='?e')}",
      "?s // 1 == ?s and rank(?i) >= 1", index={"i": "?e + 2"},
      examples=[{"i": i, "s": s, "e": e} for i, s, e in (([2, 3], 1, 3), ([5], 0, 2), ([1, 4], 2, 6))]),
    # as 470, zeroing the rows with masked_fill; constrained to rank 0's unsqueezed mask, which gives ?u
    L(481, "embedding-of-vocab-shards-masked-fill",
      f"aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({_LOOKUP_MF.format(w='?a', i='?i', s=0, e=_A)}, {_LOOKUP_MF.format(w='?b', i='?i', s=_A, e=_AB)})",
      f"rank(?a) == 2 and {_A} >= 1 and {_B} >= 1 and ({_UNSQ})", when=_RANK0_UNSQ,
      index={"i": _AB},
      examples=[{"a": [3, 4], "b": [2, 4], "i": [2, 3], "u": [2, 3, 1], "g": [2, 3]},
                {"a": [2, 3], "b": [2, 3], "i": [5], "u": [5, 1], "g": [5]},
                {"a": [1, 2], "b": [3, 2], "i": [1, 2, 2], "u": [1, 2, 2, 1], "g": [1, 2, 2]}]),
    L(482, "masked-fill-lookup-of-vocab-shards",
      f"{_LOOKUP_MF.format(w='concat(?a, ?b, dim=0)', i='?i', s='?s', e='?e')}"
      f" => sum({_LOOKUP_MF.format(w='?a', i='?i', s='?s', e='?s + ' + _A)},"
      f" {_LOOKUP_MF.format(w='?b', i='?i', s='?s + ' + _A, e='?e')})",
      f"?s // 1 == ?s and ?e - ?s == {_AB} and {_A} >= 1 and {_B} >= 1 and ({_UNSQ})", index={"i": "?e + 2"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": i, "u": _unsq(i), "s": s, "e": s + a + b}
                for a, b, i, s in ((2, 3, [7], 1), (1, 2, [2, 3], 0), (4, 4, [3, 4], 4), (3, 1, [6], 2),
                                   (2, 2, [1, 2, 4], 0))]),
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
    # the target's logit zeroed with masked_fill: as 476 and 477
    L(485, "gather-of-vocab-shards-masked-fill",
      "aten.gather(concat(?a, ?b, dim=1), ?t, dim=1, sparse_grad=?g)"
      f" => reshape(sum({_PREDICTED_MF.format(x='?a', m='size(?a, 0)', i=_T1, s=0, e=_AC)},"
      f" {_PREDICTED_MF.format(x='?b', m='size(?a, 0)', i=_T1, s=_AC, e=_ABC)}), shape=shape(?t))",
      f"shape(?t) == [size(?a, 0), 1] and {_COLS}",
      index={"t": _ABC}, examples=[{"a": [3, 2], "b": [3, 4], "t": [3, 1]}, {"a": [1, 1], "b": [1, 2], "t": [1, 1]}]),
    L(486, "masked-fill-target-logit-of-vocab-shards",
      f"{_PREDICTED_MF.format(x='concat(?a, ?b, dim=1)', m='?n', i='?t', s='?s', e='?e')}"
      f" => sum({_PREDICTED_MF.format(x='?a', m='?n', i='?t', s='?s', e='?s + ' + _AC)},"
      f" {_PREDICTED_MF.format(x='?b', m='?n', i='?t', s='?s + ' + _AC, e='?e')})",
      _NESTED, index={"t": "?e + 2"}, examples=_NESTED_EXAMPLES),
    # torch.where(mask, 0, x) is x.masked_fill(mask, 0) (a whole-number fill: the same value whatever the
    # dtypes promote to), so the masked_fill lemmas above cover the torch.where form too
    L(487, "where-of-a-scalar-is-masked-fill",
      "aten.where.self(?m, aten.scalar_tensor(s=?v, dtype=?t), ?x) => aten.masked_fill.Scalar(?x, ?m, value=?v)",
      "?v // 1 == ?v and (floating(?t) or ?t == \"int64\") and (dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t)))"),
]

LEMMAS = EMBEDDING + CROSS_ENTROPY + MASKED_FILL
