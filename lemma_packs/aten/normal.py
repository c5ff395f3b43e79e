"""Normal forms of the ATen pack: the same computation written another way meets its usual form. References 15xx.

Operand order of commutative ops, ``mean`` as a scaled ``sum``, ``repeat`` of size-1 dims as ``expand``,
double negation, a summed unit dim, mse written out. (``x + 0``, ``x * 1`` and ``x / 1`` fold through the constant lemmas 400-408: a 0-dim
constant becomes ``mul.Scalar`` and a factor 1 disappears.)
"""
from graphguard.ir.lemma import L

NUMBERS = range(1500, 1600)  # this file's lemma numbers (the plugin loader refuses others)

LEMMAS = [
    # (commuting operands: family 1208, commutes-where-mirrored, aten:1208[aten.add.Tensor / aten.mul.Tensor])
    # mean = sum / n (n: the elements folded into one; exact as a rational factor)
    L(1502, "mean-is-scaled-sum",
      "aten.mean.dim(?x, dim=?d, keepdim=?k, dtype=?t) => aten.mul.Scalar(aten.sum.dim_IntList(?x, dim=?d, keepdim=?k, dtype=?t), other=1.0 / numel_at(?x, ?d))",
      "numel_at(?x, ?d) > 0 and finite(1.0 / numel_at(?x, ?d))"),
    L(1503, "mean-all-is-scaled-sum",
      "aten.mean(?x, dtype=?t) => aten.mul.Scalar(aten.sum(?x, dtype=?t), other=1.0 / numel(?x))",
      "numel(?x) > 0 and finite(1.0 / numel(?x))"),
    # repeat that copies only dims of size 1 is a broadcast (grouped-query attention's KV heads)
    L(1504, "repeat-of-size-one-dims-is-expand",
      "aten.repeat(?x, repeats=?r) => aten.expand(?x, size=repeat_size(?x, ?r), implicit=false)",
      "len(repeat_size(?x, ?r)) > 0",
      examples=[{"x": [2, 1, 3], "r": [1, 4, 1]}, {"x": [1, 3], "r": [2, 1]}, {"x": [2, 1, 1, 3], "r": [1, 2, 3, 1]}]),
    L(1505, "neg-neg", "aten.neg(aten.neg(?x)) => ?x"),
]

# a collective in another form: all_gather(x.unsqueeze(0)).sum(0) is the all-reduce (with 391, sum of a
# concat along the summed dim, the summed unit dims of each rank's slice are dropped)
LEMMAS += [
    L(1506, "sum-over-a-unit-dim-dropped",
      "aten.sum.dim_IntList(?x, dim=?k, keepdim=false, dtype=None) => reshape(?x, shape=drop_at(shape(?x), at(?k, 0)))",
      "len(?k) == 1 and size(?x, at(?k, 0)) == 1 and floating(dtype(?x))",
      examples=[{"x": [1, 2, 3], "k": [0]}, {"x": [2, 1], "k": [1]}]),
]

# mse written out: ((a - y) ** 2).mean() (a mean loss, reduction=1)
LEMMAS += [
    L(1507, "mse-written-out",
      "aten.mse_loss(?a, ?b, reduction=1) => aten.mul.Scalar(aten.sum(aten.pow.Tensor_Scalar(aten.sub.Tensor(?a, ?b, alpha=1), exponent=2), dtype=None), other=1.0 / numel(?a))",
      "shape(?a) == shape(?b) and numel(?a) > 0 and finite(1.0 / numel(?a))",
      examples=[{"a": [2, 3], "b": [2, 3]}, {"a": [4], "b": [4]}]),
]
