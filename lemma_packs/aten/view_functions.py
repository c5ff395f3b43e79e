"""Lemma functions of views (the ``graphguard_lemma_functions`` hook): which dims a reshape merges or splits, and
the permutation of the merged or split view; whether a slice of a permute keeps the data's order (1355), and the
shape of a view with a trailing unit dim (the masked vocabulary lookups, ``vocab_lookups.py``).

The reshapes' are the conditions of 1301 and 1306 (``views_movement.py``), met in
megatron-core's own layers (``examples/megatron-gpt``; its lemmas 1300-1306: ``products.py``,
``views_movement.py``, ``attention.py``).

Megatron's attention works on [s, b, heads, hn] tensors: it views q and k as [s, b*heads, hn] (batch and heads
merged into one dim, in which the head shards of the ranks interleave: rank r holds heads [r*h/W, (r+1)*h/W)
of *every* batch row), transposes them to [b*heads, s, hn] and multiplies with
``baddbmm(empty, q, kᵀ, beta=0, alpha=1/√hn)``. A transpose of a view that only merges neighbouring dims is a
view of the transposed tensor (1301), so the merged dim becomes an ordinary batch dim of a batched matmul
(lemmas 364, 219); the scaled product ignores its first operand when ``beta`` is 0 (1300).
"""
from graphguard.ir import scalar as S
from graphguard.ir.lemma import keeps_order


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


def _slice_keeps_order(ctx, x, p, d, a, b) -> bool:
    """Is ``slice(permute(x, p), dim=d, start=a, end=b)`` a permute that moves only size-1 dims (of the
    slice of x it permutes), i.e. the same data in the same order?"""
    shape = list(ctx.shape_of(x))
    if not 0 <= int(d) < len(p) or int(p[int(d)]) >= len(shape):
        raise ValueError("not a permutation of the operand's dims")
    shape[int(p[int(d)])] = S.sym(b) - S.sym(a)
    return keeps_order(ctx.cx, shape, p)


def unit_dim_after(ctx, t):
    """A lemma function: tensor t's shape with a trailing 1 (``t.unsqueeze(-1)``)."""
    return tuple(ctx.shape_of(t)) + (1,)


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
    # slice(permute(x, p), dim=d, start=a, end=b) where the permute moves only size-1 dims of the slice
    "slice_keeps_order": _slice_keeps_order,
    "sliced_permuted_shape": lambda ctx, x, p, d, a, b: tuple(
        b - a if k == int(d) else ctx.shape_of(x)[int(i)] for k, i in enumerate(p)),
    # t.unsqueeze(-1)'s shape (the masked vocabulary lookups: the mask times the rows looked up)
    "unit_dim_after": unit_dim_after,
}
