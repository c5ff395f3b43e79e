"""Elementwise identities: adding zero, multiplying by one or by an all-true mask, double negation, ``x ** 1``,
``a + (-b)`` as ``a - b``, and comparisons and or-s with a range that is all false (Megatron's masks of ids in range).

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import KEPT_UNGUARDED, L

# the numbers its lemmas have, then 2750-2799 for new ones
NUMBERS = (range(406, 409), range(1310, 1314), range(1317, 1318), range(1323, 1325), range(1500, 1502), range(1505, 1506),
           range(1851, 1853), range(1860, 1861), range(2750, 2800))


_FALSE = 'aten.full(size={z}, fill_value=0, dtype="bool")'


LEMMAS = [
    L(406, "times-one", "aten.mul.Scalar(?x, other=1) => ?x", 'dtype(?x) != "bool"'),
    L(407, "plus-zero", "aten.add.Tensor(?x, aten.scalar_tensor(s=0, dtype=?t)) => ?x",
      "dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t))"),
    L(408, "zero-plus", "aten.add.Tensor(aten.scalar_tensor(s=0, dtype=?t), ?x) => ?x",
      "dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t))"),
    L(1310, "less-than-below-range-is-false",
      f"aten.lt.Scalar(?t, other=?s) => {_FALSE.format(z='shape(?t)')}", "finite(?s) and vmin(?t) >= ?s",
      examples=[{"t": [2, 3], "s": 0, "t:range": (0, 4)}, {"t": [3], "s": 2, "t:range": (2, 9)}]),
    L(1311, "at-least-range-end-is-false",
      f"aten.ge.Scalar(?t, other=?e) => {_FALSE.format(z='shape(?t)')}", "finite(?e) and vend(?t) <= ?e",
      examples=[{"t": [2, 3], "e": 4, "t:range": (0, 4)}, {"t": [3], "e": 6, "t:range": (-2, 5)}]),
    L(1312, "or-with-all-false",
      f"aten.bitwise_or.Tensor(?a, {_FALSE.format(z='?z')}) => ?a", "?z == shape(?a) and dtype(?a) == \"bool\"",
      examples=[{"a": [2, 3], "z": [2, 3]}, {"a": [4], "z": [4]}]),
    L(1313, "all-false-or",
      f"aten.bitwise_or.Tensor({_FALSE.format(z='?z')}, ?a) => ?a", "?z == shape(?a) and dtype(?a) == \"bool\"",
      examples=[{"a": [2, 3], "z": [2, 3]}, {"a": [4], "z": [4]}]),
    # Megatron's MoE capacity mask when the capacity covers every token (1351): all true, a product changes nothing;
    # its stable sort (the token permutation) the tokens in order for each expert (examples/megatron-moe)
    L(1323, "copy-of-zero-or-one-fill",
      "aten._to_copy(aten.full(size=?s, fill_value=?v, dtype=?a), dtype=?b) => aten.full(size=?s, fill_value=?v, dtype=?b)",
      "(?v == 0 or ?v == 1) and ?b != None"),
    L(1324, "times-all-true", 'aten.mul.Tensor(?x, aten.full(size=?s, fill_value=1, dtype="bool")) => ?x',
      "?s == shape(?x) and floating(dtype(?x))"),
    # Megatron's ids t - s at s = 0 (rank 0's shard, and the whole vocabulary at TP=1)
    L(1317, "minus-zero", "aten.sub.Tensor(?x, aten.scalar_tensor(s=0, dtype=?t), alpha=?a) => ?x",
      "finite(?a) and (dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t)))"),
    L(1505, "neg-neg", "aten.neg(aten.neg(?x)) => ?x"),
    L(1851, "pow-one", "aten.pow.Tensor_Scalar(?x, exponent=1) => ?x", "floating(dtype(?x))"),
    L(1852, "add-of-neg-is-sub",
      "aten.add.Tensor(?a, aten.neg(?b), alpha=1) => aten.sub.Tensor(?a, ?b, alpha=1)",
      'dtype(?b) != "bool"'),
    # ... and a number written as a negated constant: x + (-c) is x - c (a vocabulary shard's ids made local as
    # target + -start; the patterns that read x - start see it)
    L(1860, "add-of-constant-is-sub",
      "aten.add.Tensor(?x, aten.scalar_tensor(s=?c, dtype=?t), alpha=1)"
      " => aten.sub.Tensor(?x, aten.scalar_tensor(s=0 - ?c, dtype=?t), alpha=1)",
      'dtype(?x) != "bool" and finite(?c) and ?c > -2147483648'  # (-c fits in the constant's dtype)
      ' and (?t == None or floating(?t) or ?t == "int64" or ?t == "int32")'),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    # commutative operands: b + y is y + b (with broadcasting: the output shape and dtype are symmetric)
    # (operands of one shape are a sum (303), whose order the engine's regrouping of sums ignores; commuting
    # them too makes sums of scaled partial losses (409) grow without end)
    L(1500, "add-commutes", "aten.add.Tensor(?a, ?b, alpha=1) => aten.add.Tensor(?b, ?a, alpha=1)",
      "shape(?a) != shape(?b)", duplicates=KEPT_UNGUARDED),
    L(1501, "mul-commutes", "aten.mul.Tensor(?a, ?b) => aten.mul.Tensor(?b, ?a)", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
