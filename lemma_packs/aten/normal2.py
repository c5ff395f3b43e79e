"""More normal forms of the ATen pack (references 1850-1899): what autograd and users write out by hand.

``x / c`` for a number c is ``x * (1 / c)`` (``div.Scalar``, as 400 does for a 0-dim constant), ``x ** 1`` is
``x`` (the backward of ``x ** 2``), ``a + (-b)`` is ``a - b``, a transposed product ``(b^T a^T)^T`` is ``a @ b`` (of matrices and of batches), and
the backward of a mean squared error written out (``2 / n * g * (a - y)``, as autograd differentiates
``((a - y) ** 2).mean()``), a slice of an expanded tensor along a broadcast dim (a narrower expand), and the backward of a repeat of
size-1 dims (a sum over the repeats split off by a view: expand's keepdim sum).
"""
from graphguard.ir.lemma import L

NUMBERS = range(1850, 1900)  # this file's lemma numbers (the plugin loader refuses others)

LEMMAS = [
    L(1850, "div-by-number-is-mul",
      "aten.div.Scalar(?x, other=?c) => aten.mul.Scalar(?x, other=1 / ?c)",
      "?c != 0 and finite(?c) and floating(dtype(?x))"),
    # a slice of an expanded tensor along a dim it is broadcast in: a narrower expand (the per-micro-batch
    # gradients of torch.stack(losses).sum() are slices of expand(g))
    L(1855, "slice-of-expand-along-broadcast",
      "slice(aten.expand(?x, size=?s, implicit=?i), dim=?d, start=?a, end=?b)"
      " => aten.expand(?x, size=set_at(?s, ?d, ?b - ?a), implicit=?i)",
      "const_along(?x, len(?s), ?d)",
      examples=[{"x": [1], "s": [3], "d": 0, "a": 1, "b": 2}, {"x": [2, 1], "s": [2, 4], "d": 1, "a": 0, "b": 3},
                {"x": [3], "s": [2, 3], "d": 0, "a": 1, "b": 2}]),
    # the backward of repeat (of a size-1 dim, 1504's expand): the gradient viewed with the repeats split off
    # before a unit dim and summed over them -- the keepdim sum of expand's backward
    L(1859, "sum-before-an-inserted-unit-dim",
      "aten.sum.dim_IntList(reshape(?x, shape=?s), dim=?k, keepdim=false, dtype=?t)"
      " => aten.sum.dim_IntList(?x, dim=?k, keepdim=true, dtype=?t)",
      "len(?k) == 1 and at(?k, 0) + 1 < len(?s) and at(?s, at(?k, 0) + 1) == 1"
      " and drop_at(?s, at(?k, 0) + 1) == shape(?x)",
      examples=[{"x": [2, 4, 3], "s": [2, 4, 1, 3], "k": [1]}, {"x": [2, 1, 4, 6, 4], "s": [2, 1, 4, 1, 6, 4], "k": [2]},
                {"x": [3, 2], "s": [3, 1, 2], "k": [0]}, {"x": [3, 2], "s": [3, 2, 1], "k": [1]}]),
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
    # (b^T a^T)^T is a @ b (matrices)
    L(1854, "transposed-product",
      "permute(matmul(permute(?b, dims=[1, 0]), permute(?a, dims=[1, 0])), dims=[1, 0]) => matmul(?a, ?b)"),
    # ... and where one operand is transposed ((b^T a)^T is a^T b, (b a^T)^T is a b^T: autograd's weight
    # gradients transposed back), building no transpose of a transpose
    L(1857, "transposed-product-left",
      "permute(matmul(permute(?b, dims=[1, 0]), ?a), dims=[1, 0]) => matmul(permute(?a, dims=[1, 0]), ?b)"),
    L(1858, "transposed-product-right",
      "permute(matmul(?b, permute(?a, dims=[1, 0])), dims=[1, 0]) => matmul(?a, permute(?b, dims=[1, 0]))"),
    # ... and of batches of matrices (attention's q @ k^T as (k q^T)^T; ?p swaps the last two dims)
    L(1856, "batched-transposed-product",
      "permute(batched_matmul(permute(?b, dims=?p), permute(?a, dims=?p)), dims=?p) => batched_matmul(?a, ?b)",
      "rank(?a) >= 3 and rank(?b) == rank(?a) and ?p == batch_perm(?a, [0, 2, 1])",
      examples=[{"a": [2, 3, 4], "b": [2, 4, 5], "p": [0, 2, 1]}, {"a": [2, 3, 4, 5], "b": [2, 3, 5, 2], "p": [0, 1, 3, 2]},
                {"a": [1, 3, 4, 5], "b": [1, 3, 5, 2], "p": [0, 1, 3, 2]}, {"a": [2, 1, 4], "b": [2, 4, 1], "p": [0, 2, 1]}]),
    # mse_loss_backward(g, a, y) (a mean: g a 0-dim gradient) is 2 / n * g * (a - y), which autograd writes
    # as (expand(g) / n) * (2 * (a - y) ** 1)
    L(1853, "mse-backward-written-out",
      "aten.mse_loss_backward(?g, ?a, ?b, reduction=1)"
      " => aten.mul.Scalar(aten.mul.Tensor(aten.expand(?g, size=shape(?a), implicit=false), aten.sub.Tensor(?a, ?b, alpha=1)),"
      " other=2.0 / numel(?a))",
      "rank(?g) == 0 and shape(?a) == shape(?b) and numel(?a) > 0 and finite(2.0 / numel(?a)) and floating(dtype(?a))"
      " and dtype(?g) == dtype(?a) and dtype(?b) == dtype(?a)",
      examples=[{"g": [], "a": [2, 3], "b": [2, 3]}, {"g": [], "a": [4, 1], "b": [4, 1]}]),
]
