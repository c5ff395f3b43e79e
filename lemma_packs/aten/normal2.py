"""More normal forms of the ATen pack (references 1850-1899): what autograd and users write out by hand.

``x / c`` for a number c is ``x * (1 / c)`` (``div.Scalar``, as 400 does for a 0-dim constant), ``x ** 1`` is
``x`` (the backward of ``x ** 2``), ``a + (-b)`` is ``a - b`` and a transposed product ``(b^T a^T)^T`` is ``a @ b``.
"""
from graphguard.engine.lemma import L

LEMMAS = [
    L(1850, "div-by-number-is-mul",
      "aten.div.Scalar(?x, other=?c) => aten.mul.Scalar(?x, other=1 / ?c)",
      "?c != 0 and finite(?c) and floating(dtype(?x))"),
    L(1851, "pow-one", "aten.pow.Tensor_Scalar(?x, exponent=1) => ?x", "floating(dtype(?x))"),
    L(1852, "add-of-neg-is-sub",
      "aten.add.Tensor(?a, aten.neg(?b), alpha=1) => aten.sub.Tensor(?a, ?b, alpha=1)",
      'dtype(?b) != "bool"'),
    # (b^T a^T)^T is a @ b (matrices)
    L(1854, "transposed-product",
      "permute(matmul(permute(?b, dims=[1, 0]), permute(?a, dims=[1, 0])), dims=[1, 0]) => matmul(?a, ?b)"),
]
