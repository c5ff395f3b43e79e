"""What the ATen pack's normal forms prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES`` (``DTYPES``; a case of four, its own shapes and dtypes), proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the loaded lemmas (the normal
forms 1500-1507 and 1850-1860, the constants 400-408, products written transposed). tests/test_pack_proofs.py
collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

F = "float32"
SHAPES = {"a": [2, 3], "b": [3], "c": [2, 3], "g": [2, 3], "x": [2, 3], "y": [2, 1, 3], "u": [1, 3], "w": [3, 4],
          "m": [3, 2], "e": [], "i": [12], "n": [2, 6], "q": [2, 4, 5, 3], "k": [2, 4, 3, 5], "v": [2, 4, 5, 5]}
T = "dims=[1, 0]"
B = "dims=[0, 1, 3, 2]"  # the last two dims of a batch of matrices swapped
DTYPES = {"i": "int64"}
Z0, Z1 = ('aten.full(size=[2, 3], fill_value=%d, dtype="float32")' % v for v in (0, 1))  # a pad of zeros (ones)


def st(v):
    return f'aten.scalar_tensor(s={v}, dtype="{F}")'


PROVES = [
    # 1500, 1501: operand order of commutative ops (with broadcasting)
    ("aten.add.Tensor(a, b)", "aten.add.Tensor(b, a)"),
    ("aten.gelu(aten.add.Tensor(a, c), approximate=\"none\")", "aten.gelu(aten.add.Tensor(c, a), approximate=\"none\")"),
    ("aten.mul.Tensor(a, b)", "aten.mul.Tensor(b, a)"),
    # constants folded: x + 0, x * 1, x / 1 (400-408 with the commuted forms)
    (f"aten.add.Tensor({st(0)}, a)", "a"),
    (f"aten.mul.Tensor({st(1)}, a)", "a"),
    (f"aten.div.Tensor(a, {st(1)})", "a"),
    # 1502, 1503: mean = sum / n
    ("aten.mean.dim(x, dim=[1], keepdim=false)", f"aten.div.Tensor(aten.sum.dim_IntList(x, dim=[1], keepdim=false), {st(3)})"),
    ("aten.mean.dim(x, dim=[0, 1], keepdim=true)", f"aten.div.Tensor(aten.sum.dim_IntList(x, dim=[0, 1], keepdim=true), {st(6)})"),
    ("aten.mean(x)", f"aten.div.Tensor(aten.sum(x), {st(6)})"),
    # 1504: repeat of size-1 dims is expand (grouped-query attention's KV heads)
    ("aten.repeat(y, repeats=[1, 4, 1])", "aten.expand(y, size=[2, 4, 3])"),
    ("reshape(aten.repeat(y, repeats=[1, 2, 1]), shape=[4, 3])",
     "reshape(aten.expand(y, size=[2, 2, 3]), shape=[4, 3])"),
    # 1505: -(-x)
    ("aten.neg(aten.neg(g))", "g"),
    ("aten.gelu_backward(aten.neg(aten.neg(g)), x, approximate=\"none\")", "aten.gelu_backward(g, x, approximate=\"none\")"),
    # 1506 (with 391): all-gather of unsqueezed shards summed over the gathered dim is the all-reduce
    ("aten.sum.dim_IntList(concat(reshape(a, shape=[1, 2, 3]), reshape(c, shape=[1, 2, 3]), dim=0), dim=[0], keepdim=false)",
     "sum(a, c)"),
    ("aten.sum.dim_IntList(reshape(a, shape=[2, 1, 3]), dim=[1], keepdim=false)", "a"),
    # 1210 (a family: sum, amax, amin...) with 1206: an all-gather of unsqueezed shards reduced by max is the
    # all-reduce max
    ("aten.amax(concat(reshape(a, shape=[1, 2, 3]), reshape(c, shape=[1, 2, 3]), dim=0), dim=[0], keepdim=false)",
     "max(a, c)"),
    ("aten.amin(reshape(a, shape=[2, 1, 3]), dim=[1], keepdim=false)", "a"),
    # 1860: x + (-c) is x - c (a vocabulary shard's ids made local as target + -start)
    (f"aten.add.Tensor(x, {st(-3)})", f"aten.sub.Tensor(x, {st(3)})"),
    ('aten.add.Tensor(i, aten.scalar_tensor(s=-24, dtype="int64"))', 'aten.sub.Tensor(i, aten.scalar_tensor(s=24, dtype="int64"))'),
    # 430, 431: two complementary zero pads accumulated one at a time into a third gradient
    ("sum(sum(n, concat(%s, c, dim=1)), concat(x, %s, dim=1))" % (Z0, Z0), "sum(n, concat(x, c, dim=1))"),
    ("sum(sum(n, concat(x, %s, dim=1)), concat(%s, c, dim=1))" % (Z0, Z0), "sum(n, concat(x, c, dim=1))"),
    # 1507: mse written out
    ("aten.mse_loss(a, c, reduction=1)", "aten.mean(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=2))"),
    # 1850: x / c for a number c is x * (1 / c)
    ("aten.div.Scalar(a, other=4)", "aten.mul.Scalar(a, other=0.25)"),
    ("aten.div.Scalar(a, other=4)", f"aten.div.Tensor(a, {st(4)})"),
    # 1851: x ** 1 (the backward of x ** 2 is 2 * x ** 1 * g)
    ("aten.pow.Tensor_Scalar(a, exponent=1)", "a"),
    ("aten.mul.Scalar(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=1), other=2)",
     "aten.mul.Scalar(aten.sub.Tensor(a, c), other=2)"),
    # 1852: a + (-b) is a - b (with broadcasting)
    ("aten.add.Tensor(a, aten.neg(c))", "aten.sub.Tensor(a, c)"),
    ("aten.add.Tensor(a, aten.neg(b))", "aten.sub.Tensor(a, b)"),
    # 1854: (b^T a^T)^T is a @ b
    ("aten.mm(x, w)", f"permute(aten.mm(permute(w, {T}), permute(x, {T})), {T})"),
    # 1856: (k^T q^T)^T is q @ k for batches of matrices (attention's scores)
    ("batched_matmul(q, k)", f"permute(batched_matmul(permute(k, {B}), permute(q, {B})), {B})"),
    ("aten.bmm(reshape(q, shape=[8, 5, 3]), reshape(k, shape=[8, 3, 5]))",
     f"reshape(permute(reshape(aten.bmm(reshape(permute(k, {B}), shape=[8, 5, 3]), reshape(permute(q, {B}), shape=[8, 3, 5])),"
     f" shape=[2, 4, 5, 5]), {B}), shape=[8, 5, 5])"),
    # 1857, 1858: one operand transposed ((w g^T)^T is g w^T: a weight gradient transposed back)
    ("aten.mm(x, permute(c, dims=[1, 0]))", f"permute(aten.mm(c, permute(x, {T})), {T})"),
    ("aten.mm(permute(m, dims=[1, 0]), w)", f"permute(aten.mm(permute(w, {T}), m), {T})"),
    # 1855: a slice of an expand along a broadcast dim (the share of torch.stack(losses).sum()'s gradient)
    ("reshape(slice(aten.expand(reshape(e, shape=[1]), size=[2], implicit=false), dim=0, start=1, end=2), shape=[])",
     "e"),
    ("slice(aten.expand(u, size=[4, 3], implicit=false), dim=0, start=1, end=3)", "aten.expand(u, size=[2, 3], implicit=false)"),
    ("slice(aten.expand(b, size=[2, 3], implicit=false), dim=0, start=0, end=1)", "aten.expand(b, size=[1, 3], implicit=false)"),
    # 1853: the backward of ((a - y) ** 2).mean() as autograd writes it: (expand(g) / n) * (2 * (a - y) ** 1)
    ("aten.mse_loss_backward(aten.mul.Scalar(e, other=0.5), a, c, reduction=1)",
     "aten.mul.Tensor(aten.div.Scalar(aten.expand(aten.mul.Scalar(e, other=0.5), size=[2, 3]), other=6),"
     " aten.mul.Scalar(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=1), other=2))"),
    # a factor taken back: (x / 2) * (2 y) is x * y (553 folds a number into a scale, never pushes it inside)
    ("aten.mul.Tensor(aten.mul.Scalar(x, other=0.5), aten.mul.Scalar(a, other=2))", "aten.mul.Tensor(x, a)"),
    ("aten.gelu(aten.mm(x, w), approximate=\"none\")",
     f"aten.gelu(permute(aten.mm(permute(w, {T}), permute(x, {T})), {T}), approximate=\"none\")"),
]

MUST_NOT_PROVE = [
    ("aten.sub.Tensor(a, b)", "aten.sub.Tensor(b, a)"),  # not commutative
    ("aten.add.Tensor(a, c, alpha=2)", "aten.add.Tensor(c, a, alpha=2)"),  # a + 2c is not c + 2a
    ("aten.div.Tensor(a, c)", "aten.div.Tensor(c, a)"),
    (f"aten.add.Tensor(a, {st(1)})", "a"),
    (f"aten.mul.Tensor(a, {st(2)})", "a"),
    ("aten.mean.dim(x, dim=[1], keepdim=false)", f"aten.div.Tensor(aten.sum.dim_IntList(x, dim=[1], keepdim=false), {st(2)})"),
    ("aten.mean(x)", f"aten.div.Tensor(aten.sum(x), {st(3)})"),
    ("aten.mean.dim(x, dim=[1], keepdim=false)", "aten.sum.dim_IntList(x, dim=[1], keepdim=false)"),
    # tiling rows (repeat of a dim of size 2) is not repeating each row (expand + reshape)
    ("aten.repeat(x, repeats=[2, 1])", "reshape(aten.expand(reshape(x, shape=[2, 1, 3]), size=[2, 2, 3]), shape=[4, 3])"),
    ("aten.repeat(u, repeats=[2, 1])", "aten.expand(u, size=[3, 3])"),
    ("aten.neg(g)", "g"),
    ("aten.neg(aten.neg(aten.neg(g)))", "g"),
    ("aten.sum.dim_IntList(concat(reshape(a, shape=[1, 2, 3]), reshape(c, shape=[1, 2, 3]), dim=0), dim=[0], keepdim=false)",
     "a"),
    ("aten.sum.dim_IntList(x, dim=[0], keepdim=false)", "reshape(slice(x, dim=0, start=0, end=1), shape=[3])"),
    # 430: only zero pads, each on its own side
    ("sum(sum(n, concat(%s, c, dim=1)), concat(x, %s, dim=1))" % (Z1, Z0), "sum(n, concat(x, c, dim=1))"),
    ("sum(sum(n, concat(%s, c, dim=1)), concat(%s, x, dim=1))" % (Z0, Z0), "sum(n, concat(x, c, dim=1))"),
    # 1210 only over a unit dim, and max is not a sum
    ("aten.amax(concat(reshape(a, shape=[1, 2, 3]), reshape(c, shape=[1, 2, 3]), dim=0), dim=[0], keepdim=false)",
     "sum(a, c)"),
    ("aten.amax(x, dim=[0], keepdim=false)", "reshape(slice(x, dim=0, start=0, end=1), shape=[3])"),
    # 1860: the sign of the constant kept, and not in an unsigned dtype (-2 wraps around in uint8)
    (f"aten.add.Tensor(x, {st(-3)})", f"aten.sub.Tensor(x, {st(-3)})"),
    (f"aten.add.Tensor(x, {st(3)})", f"aten.sub.Tensor(x, {st(3)})"),
    ('aten.add.Tensor(i, aten.scalar_tensor(s=2, dtype="uint8"))', 'aten.sub.Tensor(i, aten.scalar_tensor(s=-2, dtype="uint8"))'),
    ("aten.mse_loss(a, c, reduction=1)", "aten.sum(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=2))"),
    ("aten.mse_loss(a, c, reduction=1)", "aten.mean(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=3))"),
    ("aten.div.Scalar(a, other=4)", "aten.mul.Scalar(a, other=4)"),
    ("aten.div.Scalar(a, other=4)", "aten.mul.Scalar(a, other=0.5)"),
    ("aten.pow.Tensor_Scalar(a, exponent=2)", "a"),
    ("aten.pow.Tensor_Scalar(a, exponent=-1)", "a"),
    ("aten.add.Tensor(a, aten.neg(c))", "aten.add.Tensor(a, c)"),
    ("aten.add.Tensor(a, aten.neg(c))", "aten.sub.Tensor(c, a)"),
    ("aten.add.Tensor(a, aten.neg(c), alpha=2)", "aten.sub.Tensor(a, c)"),
    ("aten.mse_loss_backward(e, a, c, reduction=1)",  # 1 / n, not 2 / n
     "aten.mul.Tensor(aten.div.Scalar(aten.expand(e, size=[2, 3]), other=6), aten.sub.Tensor(a, c))"),
    ("aten.mse_loss_backward(e, a, c, reduction=1)",  # y - a
     "aten.mul.Tensor(aten.div.Scalar(aten.expand(e, size=[2, 3]), other=6),"
     " aten.mul.Scalar(aten.pow.Tensor_Scalar(aten.sub.Tensor(c, a), exponent=1), other=2))"),
    ("aten.mse_loss_backward(e, a, c, reduction=2)",  # a sum, not a mean
     "aten.mul.Tensor(aten.div.Scalar(aten.expand(e, size=[2, 3]), other=6),"
     " aten.mul.Scalar(aten.pow.Tensor_Scalar(aten.sub.Tensor(a, c), exponent=1), other=2))"),
    ("aten.mul.Tensor(aten.mul.Scalar(x, other=0.5), aten.mul.Scalar(a, other=3))", "aten.mul.Tensor(x, a)"),
    # 1855 only along a dim the input is broadcast in
    ("slice(aten.expand(u, size=[4, 3], implicit=false), dim=1, start=0, end=2)",
     "aten.expand(slice(u, dim=1, start=1, end=3), size=[4, 2], implicit=false)"),
    ("slice(aten.expand(y, size=[2, 4, 3], implicit=false), dim=0, start=0, end=1)",
     "aten.expand(slice(y, dim=0, start=1, end=2), size=[1, 4, 3], implicit=false)"),
    ("slice(aten.expand(u, size=[4, 3], implicit=false), dim=0, start=1, end=3)", "aten.expand(u, size=[3, 3], implicit=false)"),
    ("aten.mm(x, w)", f"aten.mm(permute(w, {T}), permute(x, {T}))"),  # not transposed back
    ("batched_matmul(q, k)", f"batched_matmul(permute(k, {B}), permute(q, {B}))"),  # not transposed back
    ("batched_matmul(q, permute(q, dims=[0, 1, 3, 2]))",  # operands not swapped (q q^T is not q^T q)
     f"permute(batched_matmul(permute(q, {B}), q), {B})"),
    # the batch dims moved, not the last two swapped
    ("batched_matmul(v, v)", "permute(batched_matmul(permute(v, dims=[1, 0, 3, 2]), permute(v, dims=[1, 0, 3, 2])), dims=[1, 0, 3, 2])"),
    ("aten.mm(x, permute(c, dims=[1, 0]))", f"aten.mm(c, permute(x, {T}))"),  # not transposed back
    ("aten.mm(m, permute(m, dims=[1, 0]))", f"permute(aten.mm(permute(m, {T}), m), {T})"),  # m m^T is not m^T m
    ("aten.mm(x, m)", f"permute(aten.mm(permute(x, {T}), permute(m, {T})), {T})"),  # operands not swapped
]


# -- mixture of experts (moe.py's lemmas, now views_movement.py and partial_sums.py; 1207's top-k): each case with
# its own shapes -------------------------------------------------------------------------------------------------
MOE_SHAPES = {"X": [6, 4], "Y": [3, 2, 4], "P": [4, 2], "Q": [4, 3], "A": [2, 3], "B": [2, 3], "C": [2, 3], "D": [2, 3],
              "Z": [2, 4, 3]}

MOE_PROVES = [
    # the [world * E/world, t, H] -> [world, E/world, t, H] view of an all-to-all output, sliced per sender
    ("slice(reshape(X, shape=[2, 3, 4]), dim=0, start=1, end=2)", "reshape(slice(X, dim=0, start=3, end=6), shape=[1, 3, 4])"),
    # and back: a slice of a merged dim aligned with the outer one
    ("slice(reshape(Y, shape=[6, 4]), dim=0, start=2, end=6)", "reshape(slice(Y, dim=0, start=1, end=3), shape=[4, 4])"),
    ("slice(reshape(Z, shape=[1, 2, 4, 3]), dim=1, start=1, end=2)", "reshape(slice(Z, dim=0, start=1, end=2), shape=[1, 1, 4, 3])"),
    # routing is row-wise: top-k over the experts of each token
    ("aten.topk#1(concat(P, Q, dim=1), k=2, dim=0, largest=true, sorted=true)",
     "concat(aten.topk#1(P, k=2, dim=0, largest=true, sorted=true), aten.topk#1(Q, k=2, dim=0, largest=true, sorted=true), dim=1)"),
    ("concat(sum(A, B), sum(C, D), dim=0)", "sum(concat(A, C, dim=0), concat(B, D, dim=0))"),
]

MOE_MUST_NOT_PROVE = [
    # a slice inside a merged block is not a slice of the source
    ("slice(reshape(Y, shape=[6, 4]), dim=0, start=1, end=3)", "reshape(slice(Y, dim=0, start=0, end=1), shape=[2, 4])"),
    # top-k along the sharded dim needs every shard
    ("aten.topk#1(concat(P, Q, dim=1), k=2, dim=1, largest=true, sorted=true)",
     "concat(aten.topk#1(P, k=1, dim=1, largest=true, sorted=true), aten.topk#1(Q, k=1, dim=1, largest=true, sorted=true), dim=1)"),
    # partial sums pair up by rank, not crosswise
    ("concat(sum(A, B), sum(C, D), dim=0)", "sum(concat(A, D, dim=0), concat(C, B, dim=0))"),
]

PROVES += [(lhs, rhs, MOE_SHAPES, None) for lhs, rhs in MOE_PROVES]
MUST_NOT_PROVE += [(lhs, rhs, MOE_SHAPES, None) for lhs, rhs in MOE_MUST_NOT_PROVE]


# -- grouped matrix products (aten._grouped_mm: products.py 1900-1903) ------------------------------------------
_G = "absent=[3]"
GROUPED_SHAPES = {"X": [6, 4], "X1": [6, 2], "X2": [6, 2], "W": [3, 4, 8], "A": [3, 4, 3], "B": [3, 4, 5],
                  "K1": [3, 2, 8], "K2": [3, 2, 8], "O": [3], "R1": [4, 2], "R2": [4, 4], "V1": [2, 5], "V2": [4, 5], "T1": [2, 6], "T2": [3, 6],
                  "Y": [6, 5], "Y1": [6, 2], "Y2": [6, 3], "XT": [4, 6], "S1": [3, 4], "S2": [3, 4]}
GROUPED_DTYPES = {"O": "int32"}
GROUPED_PROVES = [
    # column-parallel experts: each rank's output columns
    (f"aten._grouped_mm(X, concat(A, B, dim=2), O, {_G})",
     f"concat(aten._grouped_mm(X, A, O, {_G}), aten._grouped_mm(X, B, O, {_G}), dim=1)"),
    # row-parallel experts: the sum of the ranks' partial products
    (f"aten._grouped_mm(concat(X1, X2, dim=1), concat(K1, K2, dim=1), O, {_G})",
     f"sum(aten._grouped_mm(X1, K1, O, {_G}), aten._grouped_mm(X2, K2, O, {_G}))"),
    # the weight gradient's two dims
    (f"aten._grouped_mm(concat(T1, T2, dim=0), Y, O, {_G})",
     f"concat(aten._grouped_mm(T1, Y, O, {_G}), aten._grouped_mm(T2, Y, O, {_G}), dim=1)"),
    (f"aten._grouped_mm(XT, concat(Y1, Y2, dim=1), O, {_G})",
     f"concat(aten._grouped_mm(XT, Y1, O, {_G}), aten._grouped_mm(XT, Y2, O, {_G}), dim=2)"),
]
GROUPED_MUST_NOT_PROVE = [
    # a row split of the tokens: rows 0..2 of the second part would be group 0's again
    (f"aten._grouped_mm(concat(S1, S2, dim=0), W, O, {_G})",
     f"concat(aten._grouped_mm(S1, W, O, {_G}), aten._grouped_mm(S2, W, O, {_G}), dim=0)"),
    # the ranks' columns in the other order
    (f"aten._grouped_mm(X, concat(A, B, dim=2), O, {_G})",
     f"concat(aten._grouped_mm(X, B, O, {_G}), aten._grouped_mm(X, A, O, {_G}), dim=1)"),
    # one rank's partial product is not the sum
    (f"aten._grouped_mm(concat(X1, X2, dim=1), concat(K1, K2, dim=1), O, {_G})",
     f"aten._grouped_mm(X1, K1, O, {_G})"),
    # the weight gradient does not split along the grouped (token) dim
    (f"aten._grouped_mm(concat(R1, R2, dim=1), concat(V1, V2, dim=0), O, {_G})",
     f"sum(aten._grouped_mm(R1, V1, O, {_G}), aten._grouped_mm(R2, V2, O, {_G}))"),
]

PROVES += [(lhs, rhs, GROUPED_SHAPES, GROUPED_DTYPES) for lhs, rhs in GROUPED_PROVES]
MUST_NOT_PROVE += [(lhs, rhs, GROUPED_SHAPES, GROUPED_DTYPES) for lhs, rhs in GROUPED_MUST_NOT_PROVE]
