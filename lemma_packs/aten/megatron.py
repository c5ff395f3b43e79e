"""Lemmas for megatron-core's own layers (``examples/megatron-gpt``). References: 1300-1309
(1310-1349: ``megatron_ce.py``, 1350-1359: ``megatron_moe.py``).

Megatron's attention works on [s, b, heads, hn] tensors: it views q and k as [s, b*heads, hn] (batch and heads
merged into one dim, in which the head shards of the ranks interleave: rank r holds heads [r*h/W, (r+1)*h/W)
of *every* batch row), transposes them to [b*heads, s, hn] and multiplies with
``baddbmm(empty, q, kᵀ, beta=0, alpha=1/√hn)``. A transpose of a view that only merges neighbouring dims is a
view of the transposed tensor (1301), so the merged dim becomes an ordinary batch dim of a batched matmul
(lemmas 364, 219); the scaled product ignores its first operand when ``beta`` is 0 (1300).
"""
from graphguard.ir import scalar as S
from graphguard.ir.lemma import L

NUMBERS = range(1300, 1310)  # this file's lemma numbers (the plugin loader refuses others)


def _groups(ctx, x: tuple, s: tuple) -> list[tuple[int, int]]:
    """The runs [i, j) of x's dims that reshape(x, s) merges into each dim of s (s only merges neighbouring
    dims of x, each run's product proved equal to its dim of s); raises ValueError otherwise. Size-1 dims of x
    join the run before them where the dims left can still cover the rest of s (any contiguous grouping
    describes the same view; this one keeps a unit dim with the dims it was merged with)."""
    runs, i = [], 0
    for k, d in enumerate(s):
        j = i
        while True:
            if j >= len(x):
                raise ValueError("not a merge of neighbouring dims")
            j += 1
            prod = S.norm(S.sp.Mul(*[S.sym(v) for v in x[i:j]]))
            if ctx.cx.prove("==", prod, d):
                break
        while j < len(x) and len(x) - j - 1 >= len(s) - k - 1 and ctx.cx.prove("==", x[j], 1):
            j += 1
        while k == len(s) - 1 and j < len(x):  # the last run takes what is left: size-1 dims only
            if not ctx.cx.prove("==", x[j], 1):
                raise ValueError("not a merge of neighbouring dims")
            j += 1
        runs.append((i, j))
        i = j
    if i != len(x):
        raise ValueError("not a merge of neighbouring dims")
    return runs


def _merge_perm(ctx, x: tuple, s: tuple, p: tuple) -> tuple:
    """permute(reshape(x, s), p) == reshape(permute(x, q), s permuted by p): q moves each merged run whole."""
    runs = _groups(ctx, x, s)
    return tuple(d for k in p for d in range(*runs[int(k)]))


def _split_perm(ctx, x: tuple, s: tuple, p: tuple) -> tuple:
    """permute(reshape(x, s), p) == reshape(permute(x, q), s permuted by p) when s splits each dim of x into a run
    of its dims and p keeps every run together and in order; q orders x's dims as p orders their runs."""
    runs = _groups(ctx, s, x)  # the runs of s's dims that merge back into each dim of x
    owner = {d: k for k, (i, j) in enumerate(runs) for d in range(i, j)}
    q, at = [], 0
    while at < len(p):
        k = owner[int(p[at])]
        i, j = runs[k]
        if tuple(int(v) for v in p[at:at + j - i]) != tuple(range(i, j)):
            raise ValueError("the permutation breaks a split dim apart")
        q.append(k)
        at += j - i
    return tuple(q)


FUNCTIONS = {
    # permute(reshape(x, s), p) is reshape(permute(x, merge_perm(x, s, p)), permuted(s, p)) when s merges
    # neighbouring dims of x (merge_perm raises, and the condition fails, otherwise)
    "merge_perm": lambda ctx, x, s, p: _merge_perm(ctx, ctx.shape_of(x), tuple(s), tuple(int(v) for v in p)),
    # ... and split_perm(x, s, p) when s splits dims of x
    "split_perm": lambda ctx, x, s, p: _split_perm(ctx, ctx.shape_of(x), tuple(s), tuple(int(v) for v in p)),
    "permuted": lambda ctx, s, p: tuple(tuple(s)[int(k)] for k in p),
    # [prod(batch dims), rows, cols] of a batched operand: its batch dims merged into one
    "batch_merged": lambda ctx, x: (S.norm(S.sp.Mul(*[S.sym(v) for v in ctx.shape_of(x)[:-2]])),)
    + tuple(ctx.shape_of(x)[-2:]),
    # the shape of batched_matmul(x, y)
    "batched_mm_shape": lambda ctx, x, y: tuple(ctx.shape_of(x)[:-1]) + (ctx.shape_of(y)[-1],),
}

LEMMAS = [
    # torch.baddbmm ignores its first operand when beta is 0 (even NaN or inf in an empty buffer)
    L(1300, "baddbmm-without-input",
      "aten.baddbmm(?c, ?a, ?b, beta=0, alpha=?s) => aten.mul.Scalar(aten.bmm(?a, ?b), other=?s)",
      "finite(?s) and floating(dtype(?a))"),
    # a transpose of a view merging neighbouring dims: transpose first, with each merged run moved whole
    L(1301, "permute-of-merging-reshape",
      "permute(reshape(?x, shape=?s), dims=?p) => reshape(permute(?x, dims=merge_perm(?x, ?s, ?p)), shape=permuted(?s, ?p))",
      "len(merge_perm(?x, ?s, ?p)) == rank(?x) and len(?s) < rank(?x)",
      examples=[{"x": [3, 2, 4, 5], "s": [3, 8, 5], "p": [1, 0, 2]},
                {"x": [3, 2, 4, 5], "s": [6, 4, 5], "p": [2, 0, 1]},
                {"x": [3, 2, 4, 5], "s": [3, 8, 5], "p": [1, 2, 0]},
                {"x": [2, 3, 1, 4], "s": [6, 4], "p": [1, 0]},
                {"x": [8, 2, 1, 4], "s": [8, 2, 4], "p": [1, 0, 2]},
                {"x": [3, 1, 2, 1], "s": [3, 2, 1], "p": [2, 0, 1]},
                {"x": [2, 3, 4], "s": [2, 12], "p": [1, 0]}]),
    # the same for a view that splits dims (the backward of a merging view): transpose first, each split dim whole
    L(1306, "permute-of-splitting-reshape",
      "permute(reshape(?x, shape=?s), dims=?p) => reshape(permute(?x, dims=split_perm(?x, ?s, ?p)), shape=permuted(?s, ?p))",
      "len(split_perm(?x, ?s, ?p)) == rank(?x) and len(?s) > rank(?x)",
      examples=[{"x": [4, 8, 5], "s": [2, 2, 8, 5], "p": [2, 0, 1, 3]},
                {"x": [4, 8, 5], "s": [2, 2, 8, 5], "p": [3, 2, 0, 1]},
                {"x": [6, 4], "s": [2, 3, 4], "p": [2, 0, 1]},
                {"x": [6, 4], "s": [6, 2, 2], "p": [1, 2, 0]},
                {"x": [2, 8, 4], "s": [2, 1, 8, 4], "p": [2, 0, 1, 3]}]),
    # the converse of 364: a batched matmul over several batch dims is a bmm of the views merging them (what a
    # rank computes when its batch rows are a slice of a merged dim)
    L(1302, "batched-matmul-is-bmm-of-merged-views",
      "batched_matmul(?x, ?y) => reshape(aten.bmm(reshape(?x, shape=batch_merged(?x)), reshape(?y, shape=batch_merged(?y))),"
      " shape=batched_mm_shape(?x, ?y))",
      "rank(?x) >= 4 and rank(?y) == rank(?x) and numel(?x) > 0 and numel(?y) > 0",
      examples=[{"x": [2, 3, 4, 5], "y": [2, 3, 5, 2]}, {"x": [2, 1, 3, 4, 5], "y": [2, 1, 3, 5, 3]}]),
    # masked_fill is elementwise in its input and its (broadcast) mask: the attention mask [1, 1, s, s] applied
    # to head-sharded scores, or a mask sharded like the input
    L(1304, "masked-fill-of-concat-and-broadcast-mask",
      "aten.masked_fill.Scalar(concat(?a, ?b, dim=?d), ?m, value=?v)"
      " => concat(aten.masked_fill.Scalar(?a, ?m, value=?v), aten.masked_fill.Scalar(?b, ?m, value=?v), dim=?d)",
      "rank(?a) >= rank(?m) and const_along(?m, rank(?a), ?d)",
      examples=[{"a": [2, 1, 3, 3], "b": [2, 2, 3, 3], "m": [1, 1, 3, 3], "d": 1}, {"a": [2, 3], "b": [1, 3], "m": [3], "d": 0}]),
    L(1305, "masked-fill-of-concats",
      "aten.masked_fill.Scalar(concat(?a, ?b, dim=?d), concat(?m, ?n, dim=?k), value=?v)"
      " => concat(aten.masked_fill.Scalar(?a, ?m, value=?v), aten.masked_fill.Scalar(?b, ?n, value=?v), dim=?d)",
      "rank(?a) >= rank(?m) and ?k == bdim(?m, rank(?a), ?d) and size(?a, ?d) == size(?m, ?k)"
      " and size(?b, ?d) == size(?n, ?k)",
      examples=[{"a": [2, 3], "b": [1, 3], "m": [2, 3], "n": [1, 3], "d": 0, "k": 0},
                {"a": [2, 2, 3], "b": [2, 1, 3], "m": [2, 3], "n": [1, 3], "d": 1, "k": 0}]),
]
