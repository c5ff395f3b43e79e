"""vLLM's vocabulary-parallel embedding (``VocabParallelEmbedding``). References: 1620-1629.

vLLM's ``get_masked_input_and_mask`` (``vocab_parallel_embedding.py``) masks the ids i of rank r's vocabulary
shard [s, e) and of its share [A, A') of added (LoRA) tokens, then looks the rows up, zeroes the rows of
masked ids and all-reduces::

    org = (i >= s) & (i < e);  added = (i >= A) & (i < A')
    ids = (org | added) * (i - (s * org + o * added))        # o = A - (e - s) - padding
    out = embedding(w, ids).masked_fill_(~(org | added).unsqueeze(-1), 0)

Without LoRA the added range is empty (A' = A = the vocabulary size), so ``added`` is all false and the
rank's result is the rows of the ids in [s, e), zero elsewhere: a lookup in the full table is the sum of
the ranks' (1620), and the masked lookup of a concatenation is the sum of the masked lookups of its parts with
the bounds moved along (1621, for more than two ranks). The right sides are written as vLLM computes them --
the same comparisons, constants and order -- so that they are the very G_d operators: o is A - (e - s), the
offset vLLM computes for an unpadded vocabulary (a padded one has other constants and does not match: the
embedding is then not verified, never wrongly). 1620 is constrained (§4.3) to ids compared with 0 (rank 0's
lower bound); ids are one token dim (vLLM flattens them), of an integer dtype.
"""
from graphguard.ir.lemma import L

NUMBERS = range(1620, 1630)  # this file's lemma numbers (the plugin loader refuses others)


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


_A, _B, _AB = "size(?a, 0)", "size(?b, 0)", "size(?a, 0) + size(?b, 0)"
_U = "[size(?i, 0), 1]"
_IDS = "rank(?i) == 1 and dtype(?i) == \"int64\""

LEMMAS = [
    L(1620, "embedding-of-vocab-shards-vllm",
      "aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({lookup('?a', '?i', 0, _A, _AB, f'{_AB} - {_A}', _U)},"
      f" {lookup('?b', '?i', _A, _AB, _AB, f'{_AB} - {_B}', _U)})",
      f"rank(?a) == 2 and {_A} >= 1 and {_B} >= 1 and {_IDS}", when="aten.ge.Scalar(?i, other=0)",
      index={"i": _AB},
      examples=[{"a": [3, 4], "b": [2, 4], "i": [5]}, {"a": [2, 3], "b": [2, 3], "i": [4]},
                {"a": [1, 2], "b": [3, 2], "i": [6]}]),
    L(1621, "masked-lookup-of-vocab-shards-vllm",
      f"{lookup('concat(?a, ?b, dim=0)', '?i', '?s', '?e', '?n', '?o', '?u')}"
      f" => sum({lookup('?a', '?i', '?s', f'?s + {_A}', '?n', f'?n - {_A}', '?u')},"
      f" {lookup('?b', '?i', f'?s + {_A}', '?e', '?n', f'?n - {_B}', '?u')})",
      f"?s // 1 == ?s and ?n // 1 == ?n and ?o // 1 == ?o and ?e - ?s == {_AB} and {_A} >= 1 and {_B} >= 1"
      f" and {_IDS} and ?u == {_U}", index={"i": "?n + 3"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": [t], "u": [t, 1], "s": s, "e": s + a + b, "n": n, "o": n - a - b}
                for a, b, t, s, n in ((2, 3, 7, 1, 8), (1, 2, 3, 0, 3), (4, 4, 5, 4, 16), (3, 1, 6, 2, 6),
                                      (2, 2, 4, 0, 9))]),
    # a padded vocabulary: vLLM pads the table to a multiple of 64 rows per rank, so the last shard ends in
    # A + B - n padding rows past the n real ones, and that rank's shard is [A, n) with the added offset
    # A - (A + B - n) = n - B. The padding rows are read for ids in [n, A + B) alone -- by the whole table, not
    # by the ranks, which mask them -- so the lemma needs the ids in [0, n): a relation file's ranges: (the
    # token ids of a vocabulary of n). ?n is what rank 0 compares ids with for its (empty) added range.
    L(1622, "embedding-of-padded-vocab-shards-vllm",
      "aten.embedding(concat(?a, ?b, dim=0), ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      f" => sum({lookup('?a', '?i', 0, _A, '?n', f'?n - {_A}', _U)},"
      f" {lookup('?b', '?i', _A, '?n', '?n', f'?n - {_B}', _U)})",
      f"rank(?a) == 2 and {_A} >= 1 and ?n // 1 == ?n and {_A} < ?n and ?n < {_AB} and {_IDS}"
      " and vmin(?i) >= 0 and vend(?i) <= ?n", when="aten.lt.Scalar(?i, other=?n)", index={"i": _AB},
      examples=[{"a": [a, 4], "b": [b, 4], "i": [t], "n": n}
                for a, b, t, n in ((3, 3, 5, 5), (2, 4, 4, 3), (4, 4, 6, 7), (1, 3, 3, 2))]),
]
