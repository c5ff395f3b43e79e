"""Lemmas of the HLO pack. References: 800-849.

Bridges into the core dialect, so that HLO programs meet the core algebra (and any other dialect bridged
the same way, e.g. ATen through 301/303): a plain 2-D ``dot`` is ``matmul``, a batched one ``batched_matmul``,
and the elementwise ops with an exact core twin become it. Then one lemma of HLO's own: a broadcast of a
concatenation is a concatenation of broadcasts along the dim the concatenated dim maps to.
"""
from graphguard.engine.lemma import L

BRIDGES = [
    L(800, "dot-is-matmul",
      "hlo.dot(?a, ?b, lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0]) => matmul(?a, ?b)",
      "rank(?a) == 2 and rank(?b) == 2", examples=({"a": [2, 3], "b": [3, 4]},)),
    L(801, "batched-dot-is-batched-matmul",
      "hlo.dot(?a, ?b, lhs_batch=[0], rhs_batch=[0], lhs_contracting=[2], rhs_contracting=[1])"
      " => batched_matmul(?a, ?b)",
      "rank(?a) == 3 and rank(?b) == 3", examples=({"a": [2, 3, 4], "b": [2, 4, 1]},)),
    L(802, "add-is-core-add", "hlo.add(?a, ?b) => add(?a, ?b)"),
    L(803, "subtract-is-core-sub", "hlo.subtract(?a, ?b) => sub(?a, ?b)"),
    L(804, "multiply-is-core-mul", "hlo.multiply(?a, ?b) => mul(?a, ?b)"),
    L(805, "negate-is-core-neg", "hlo.negate(?a) => neg(?a)"),
    L(806, "exponential-is-core-exp", "hlo.exponential(?a) => exp(?a)"),
]

MOVEMENT = [
    L(810, "broadcast-of-concat",
      "hlo.broadcast(concat(?a, ?b, dim=?d), shape=?s, dimensions=?m)"
      " => concat(hlo.broadcast(?a, shape=set_at(?s, at(?m, ?d), size(?a, ?d)), dimensions=?m),"
      " hlo.broadcast(?b, shape=set_at(?s, at(?m, ?d), size(?b, ?d)), dimensions=?m), dim=at(?m, ?d))",
      "size(?a, ?d) + size(?b, ?d) == at(?s, at(?m, ?d))",
      examples=({"a": [2, 3], "b": [1, 3], "d": 0, "s": [3, 4, 3], "m": [0, 2]},
                {"a": [3], "b": [2], "d": 0, "s": [4, 5], "m": [1]})),
]

LEMMAS = BRIDGES + MOVEMENT
