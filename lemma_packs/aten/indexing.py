"""Indexing: gathers, ``index``/``index_put``/``index_add``/``scatter`` and ``slice_scatter`` at data-dependent
offsets, of concatenated or partial-sum operands (MoE dispatch and combine, Megatron's capacity-padded
all-to-all, HF's expert weights gathered by expert id, ids in a stated range as an embedding).

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2400-2449 for new ones
NUMBERS = (range(503, 504), range(560, 563), range(564, 567), range(1314, 1315), range(1326, 1328),
           range(1350, 1355), range(1356, 1368), range(1403, 1407), range(1630, 1632), range(1714, 1716),
           range(1731, 1733), range(1904, 1905), range(2400, 2450), range(2850, 2860))


# Dropless (sparse) dispatch: each expert's rows are added into the output (index_add); with experts spread
# over ranks, each rank adds its experts' rows into zeros and a reduction sums the ranks' partial outputs.
_IA = "dim=?d, alpha=?al"


_FALSE = 'aten.full(size={z}, fill_value=0, dtype="bool")'


_FULL = "aten.full(size=?s, fill_value=?v, dtype=?t)"
# the dispatch's token order, [experts, n]: tokens 0..n-1 once per expert (1326); its rows as an index column
# [experts * n, 1] broadcast along the hidden dim (scatter_add / gather), or flat [experts * n] (index_add)
_ORDER = "aten.expand(reshape(aten.arange(end=?n, dtype=?p), shape=?u), size=?s, implicit=?i)"
_ORDER_OK = "?u == [1, ?n] and len(?s) == 2 and at(?s, 1) == ?n and (?p == None or ?p == \"int64\")"
_COLUMN = f"aten.expand(reshape({_ORDER}, shape=?v), size=?w, implicit=?j)"
_COLUMN_OK = (f"{_ORDER_OK} and ?v == [at(?s, 0) * ?n, 1] and (?w == [-1, size({{y}}, 1)]"
              " or ?w == [at(?s, 0) * ?n, size({y}, 1)])")


# the batch of a data-parallel job: the ids split along a dim, the table whole
_EDB = "aten.embedding_dense_backward({g}, {i}, num_weights=?v, padding_idx=?pi, scale_grad_by_freq=false)"


_EMB = "aten.embedding(?w, ?i, padding_idx=-1, scale_grad_by_freq=false, sparse=false)"
_INT = '(dtype(?i) == "int64" or dtype(?i) == "int32")'


_D = "?k - rank(?i) + 1"  # the dim of the indexed tensor that dim ?k of the gathered rows is
_FILL = "aten.full(size=?s, fill_value=?f, dtype=?t)"


def _fill(size: str) -> str:
    return f"aten.full(size=set_at(?s, {_D}, {size}), fill_value=?f, dtype=?t)"

# rows gathered by integer indices (a boolean mask selects entries instead: another op)
_INT_INDEX = '(dtype(?i) == "int64" or dtype(?i) == "int32")'


# -- lemmas: the ranks' pieces of a tensor sliced at bounds the data decides ------------------------------------
# A grouped GEMM over experts sharded across ranks (columns of fc1, rows of fc2) slices each rank's piece at the
# same bounds: slicing and writing back along the token dim commute with a concatenation along another dim, and
# writing back is linear in (base, source) jointly -- into zeros, a sum of sources is the sum of the writes. The
# fuzzer draws the bounds as indices into the sliced dim; a slice length or source that does not match the drawn
# bounds leaves the left side undefined (no instance), so the seeds slice short dims.
_SS = "aten.slice_scatter_at({b}, {s}, ?lo, ?hi, dim=?k)"
_ZEROS = "aten.zeros(size={z}, dtype=?t)"
_DATA_FULL = "aten.full(size={z}, fill_value=?v, dtype=?t)"  # (new_zeros, zeros_like: the backward's buffers)
_FULL0 = "aten.full(size={z}, fill_value=0, dtype=?t)"
_BOUNDS = {"lo": "size(?a, ?k)", "hi": "size(?a, ?k) + 1"}


def _seeds(pairs):
    return [{"lo": [], "hi": [], "lo:dtype": "int64", "hi:dtype": "int64", **p} for p in pairs]


_AT_Z = {"lo": "at(?z, ?k)", "hi": "at(?z, ?k) + 1"}  # (bounds into a fill of size ?z)


def _into_fill_of_concat(ref: int, name: str, fill: str, seeds: list):
    """``base[lo:hi] = concat(a, b)`` with the base a fill: the fill cut where the source is."""
    part = lambda x: _SS.format(b=fill.format(z=f"set_at(?z, ?d, size({x}, ?d))"), s=x)  # noqa: E731
    return L(ref, name, _SS.format(b=fill.format(z="?z"), s="concat(?a, ?b, dim=?d)")
             + f" => concat({part('?a')}, {part('?b')}, dim=?d)", "?d != ?k", index=_AT_Z, examples=_seeds(seeds))


# sources of the fill's dtype (a sum of two rounded to another dtype is not the sum of the two rounded)
_SUM_SEEDS = _seeds([{"z": z, "a": a, "b": a, "k": k, "t": t, "a:dtype": t, "b:dtype": t}
                     for z, a, k, dts in (([3, 2], [1, 2], 0, ("float32", "float64", "float16", "int64")),
                                          ([2, 3], [2, 2], 1, ("float32", "float64", "float16", "int64")),
                                          ([2], [1], 0, ("float32", "int64")),
                                          ([4, 3], [2, 3], 0, ("float32", "float64", "int64")),
                                          ([2, 4, 2], [2, 2, 2], 1, ("float32", "int64")))
                     for t in dts])


def _into_zeros_of_sum(ref: int, name: str, zeros: str):
    """``zeros[lo:hi] = a + b`` (the ranks' partial sums) is the sum of the two writes into zeros."""
    one = lambda x: _SS.format(b=zeros.format(z="?z"), s=x)  # noqa: E731
    return L(ref, name, f"{one('sum(?a, ?b)')} => sum({one('?a')}, {one('?b')})",
             "dtype(?a) == ?t and dtype(?b) == ?t", index=_AT_Z, examples=_SUM_SEEDS)


# fill[..., arange(s, e)] = v (index_put of a contiguous arange on dim 0, or dim 1 after a full slice, into a
# constant fill) is v between fills of the columns before and after [s, e) -- a slice write, as z[:, s:e] = v is (a
# rank's shard written into zeros and all-reduced: an all-gather). The four cases of an empty before / after part.
# (Into a fill only: over any z, the slices of z the right side names grew the e-graph without end)
def _slice_write(ref: int, d: int, before: bool, after: bool):
    n = "at(?sz, %d)" % d
    fill = "aten.full(size=set_at(?sz, %d, {w}), fill_value=?f, dtype=?t)" % d
    parts = ([fill.format(w="?s")] if before else []) + ["?v"] + ([fill.format(w=f"{n} - ?e")] if after else [])
    rhs = parts[0]
    for p in parts[1:]:
        rhs = f"concat({rhs}, {p}, dim={d})"
    cond = (f"len(?sz) >= {d + 1} and shape(?v) == set_at(?sz, {d}, ?e - ?s) and dtype(?v) == ?t"
            f" and (?i == None or ?i == \"int64\") and ?s // 1 == ?s and ?e // 1 == ?e"
            f" and {'0 < ?s' if before else '?s == 0'} and ?s < ?e and {f'?e < {n}' if after else f'?e == {n}'}")
    absent = "[1]" if d == 1 else "[]"
    name = f"index-put-of-an-arange-on-dim-{d}-is-a-slice-write" + ("" if before and after else
                                                                     "-at-the-start" if after else
                                                                     "-at-the-end" if before else "-whole")
    ex = [{"sz": z, "v": z[:d] + [e - s] + z[d + 1:], "s": s, "e": e, "i": None, "t": "float32", "f": f}
          for z in ([3, 6], [2, 5, 2], [4, 4], [2, 3], [3, 2, 2], [1, 4], [2, 2], [3, 1], [1, 3], [2, 4, 1], [5, 3],
                    [2, 6], [4, 1, 2], [1, 1])
          for e in range(1, z[d] + 1) for s in range(e) for f in (0, 1.5, -2)]
    return L(ref, name, f"aten.index_put(aten.full(size=?sz, fill_value=?f, dtype=?t), aten.arange.start(start=?s,"
             f" end=?e, dtype=?i), ?v, accumulate=false, absent={absent}) => {rhs}", cond, examples=ex)


SLICE_WRITES = [_slice_write(2400 + 4 * (d == 1) + k, d, before, after)
                for d in (0, 1) for k, (before, after) in enumerate(((True, True), (False, True), (True, False),
                                                                     (False, False)))]

LEMMAS = SLICE_WRITES + [
    # one_hot as captured: eq(indices[..., None], arange(E))
    L(503, "eq-of-concat-and-broadcast",
      "aten.eq.Tensor(concat(?a, ?b, dim=?d), ?c) => concat(aten.eq.Tensor(?a, ?c), aten.eq.Tensor(?b, ?c), dim=?d)",
      "rank(?a) >= rank(?c) and const_along(?c, rank(?a), ?d)"),
    L(560, "index-add-into-partial-sum",
      f"aten.index_add(sum(?a, ?b), ?i, ?y, {_IA}) => sum(?a, aten.index_add(?b, ?i, ?y, {_IA}))",
      "shape(?a) == shape(?b) and floating(dtype(?b)) and finite(?al)", index={"i": "size(?a, ?d)"}),
    # the rows added to x are a partial sum of their own where they are also added to zeros (constrained: a
    # rank's first expert, index_add into zeros, must exist -- else every index_add would grow a zero term)
    L(561, "index-add-splits-off-zeros",
      f"aten.index_add(?x, ?i, ?y, {_IA}) => sum(?x, aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?y, {_IA}))",
      "?s == shape(?x) and floating(dtype(?x)) and floating(dtype(?y)) and finite(?al)", when=f"aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?y, {_IA})",
      index={"i": "size(?x, ?d)"}),
    # tensor-parallel experts: each rank adds its partial rows (index_add is linear in self and source)
    L(564, "index-add-into-zeros-of-partial-sum",
      f"aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), {_IA})"
      f" => sum(aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, {_IA}),"
      f" aten.index_add(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, {_IA}))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b)) and finite(?al)",
      index={"i": "at(?s, ?d)"}),
    # ... and their backward: the gradient rows accumulated back (index_put into zeros, linear in the values)
    L(565, "index-put-into-zeros-of-partial-sum",
      "aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), accumulate=true, absent=[])"
      " => sum(aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, accumulate=true, absent=[]),"
      " aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, accumulate=true, absent=[]))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, 0)"}),
    L(566, "index-put-2-into-zeros-of-partial-sum",
      "aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, sum(?a, ?b), accumulate=true, absent=[])"
      " => sum(aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, ?a, accumulate=true, absent=[]),"
      " aten.index_put(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?j, ?b, accumulate=true, absent=[]))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, 0)", "j": "at(?s, 1)"}),
    # the top-k weights' backward writes the incoming gradient into zeros at the chosen experts: linear in it
    L(562, "scatter-into-zeros-of-partial-sum",
      "aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, sum(?a, ?b), dim=?d)"
      " => sum(aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?a, dim=?d),"
      " aten.scatter.src(aten.full(size=?s, fill_value=0, dtype=?t), ?i, ?b, dim=?d))",
      "shape(?a) == shape(?b) and floating(?t) and floating(dtype(?a)) and floating(dtype(?b))",
      index={"i": "at(?s, ?d)"}),
    # x[mask] = v with a mask of x's shape that selects nothing
    L(1314, "index-put-at-no-entry",
      f"aten.index_put(?x, {_FALSE.format(z='?z')}, ?v, accumulate=?c, absent=[]) => ?x",
      "?z == shape(?x) and rank(?v) == 0",
      examples=[{"x": [2, 3], "z": [2, 3], "v": [], "c": False}, {"x": [4], "z": [4], "v": [], "c": True}]),
    # the stable sort of equal entries keeps their order: the indices are 0..n-1 along the dim
    L(1326, "stable-sort-of-fill-is-arange",
      "aten.sort.stable#1(aten.full(size=?s, fill_value=?v, dtype=?a), stable=true, dim=1, descending=?q)"
      " => aten.expand(reshape(aten.arange(end=at(?s, 1)), shape=[1, at(?s, 1)]), size=?s, implicit=false)",
      "len(?s) == 2 and finite(?v)"),
    # x[i] for i = 0..n-1 repeated e times: x repeated e times
    L(1327, "index-select-of-repeated-arange",
      "aten.index_select(?x, reshape(aten.expand(reshape(aten.arange(end=?n), shape=?u), size=?s, implicit=?i), shape=?w), dim=0)"
      " => reshape(aten.expand(reshape(?x, shape=[1, size(?x, 0), size(?x, 1)]), size=[at(?s, 0), size(?x, 0), size(?x, 1)],"
      " implicit=false), shape=[at(?s, 0) * size(?x, 0), size(?x, 1)])",
      "rank(?x) == 2 and ?n == size(?x, 0) and ?u == [1, ?n] and len(?s) == 2 and at(?s, 1) == ?n"
      " and ?w == [at(?s, 0) * ?n]",
      examples=[{"x": [4, 3], "n": 4, "u": [1, 4], "s": [3, 4], "i": False, "w": [12]},
                {"x": [2, 5], "n": 2, "u": [1, 2], "s": [2, 2], "i": False, "w": [4]}]),
    # the router's combine weights: the top-k probabilities written into a zero [tokens, experts] matrix along
    # the expert dim; tokens (the dim of the concat, not the written one) are independent rows
    L(1350, "scatter-into-full-of-concats",
      f"aten.scatter.src({_FULL}, concat(?i, ?j, dim=?c), concat(?a, ?b, dim=?c), dim=?d)"
      f" => concat(aten.scatter.src(aten.full(size=set_at(?s, ?c, size(?i, ?c)), fill_value=?v, dtype=?t), ?i, ?a, dim=?d),"
      f" aten.scatter.src(aten.full(size=set_at(?s, ?c, size(?j, ?c)), fill_value=?v, dtype=?t), ?j, ?b, dim=?d), dim=?c)",
      "?c != ?d and shape(?i) == shape(?a) and shape(?j) == shape(?b) and at(?s, ?c) == size(?i, ?c) + size(?j, ?c)",
      index={"i": "at(?s, ?d)", "j": "at(?s, ?d)"},
      examples=[{"i": [3, 2], "j": [2, 2], "a": [3, 2], "b": [2, 2], "s": [5, 4], "v": 0, "t": "float32", "c": 0, "d": 1},
                {"i": [2, 2], "j": [1, 2], "a": [2, 2], "b": [1, 2], "s": [3, 5], "v": 1, "t": "float32", "c": 0, "d": 1},
                {"i": [2, 1], "j": [2, 3], "a": [2, 1], "b": [2, 3], "s": [4, 4], "v": 0, "t": "float32", "c": 1, "d": 0},
                {"i": [1, 3, 2], "j": [2, 3, 2], "a": [1, 3, 2], "b": [2, 3, 2], "s": [3, 3, 4], "v": 0,
                 "t": "float32", "c": 0, "d": 2}]),
    # the aux loss's routing map: ones written at each token's top-k experts into a zero [tokens, experts] matrix;
    # tokens (the dim of the concat, not the written one) are independent rows
    L(1359, "scatter-value-into-full-of-concat",
      f"aten.scatter.value({_FULL}, concat(?i, ?j, dim=?c), dim=?d, value=?w)"
      f" => concat(aten.scatter.value(aten.full(size=set_at(?s, ?c, size(?i, ?c)), fill_value=?v, dtype=?t), ?i, dim=?d,"
      f" value=?w), aten.scatter.value(aten.full(size=set_at(?s, ?c, size(?j, ?c)), fill_value=?v, dtype=?t), ?j, dim=?d,"
      f" value=?w), dim=?c)",
      "?c != ?d and at(?s, ?c) == size(?i, ?c) + size(?j, ?c)",
      index={"i": "at(?s, ?d)", "j": "at(?s, ?d)"},
      examples=[{"i": [3, 2], "j": [2, 2], "s": [5, 4], "v": 0, "t": "int32", "w": 1, "c": 0, "d": 1},
                {"i": [2, 2], "j": [1, 2], "s": [3, 5], "v": 1, "t": "float32", "w": 0, "c": 0, "d": 1},
                {"i": [2, 1], "j": [2, 3], "s": [4, 4], "v": 0, "t": "float32", "w": 2, "c": 1, "d": 0},
                {"i": [1, 2, 2], "j": [2, 2, 2], "s": [3, 3, 4], "v": 0, "t": "int64", "w": 1, "c": 0, "d": 2}]),
    # the capacity mask: top-k along a whole dim (k = its size) picks every index once, so writing a value at
    # the picked indices writes it everywhere
    L(1351, "scatter-at-every-topk-index",
      f"aten.scatter.value({_FULL}, aten.topk#1(?y, k=?k, dim=?d, largest=?l, sorted=?o), dim=?d, value=?w)"
      " => aten.full(size=?s, fill_value=?w, dtype=?t)",
      "shape(?y) == ?s and ?k == at(?s, ?d) and floating(?t)",  # a number written into an integer tensor promotes it
      examples=[{"y": [4, 3], "s": [4, 3], "k": 4, "d": 0, "l": True, "o": False, "v": 0, "t": "float32", "w": 1},
                {"y": [2, 5], "s": [2, 5], "k": 5, "d": 1, "l": False, "o": True, "v": 0, "t": "float64", "w": 3}]),
    # the probabilities' permutation: row e of the expert-major order is e * n + (0..n-1), i.e. 0..e*n-1 in order
    L(1352, "row-offsets-plus-column-arange-is-arange",
      "aten.add.Tensor(aten.mul.Tensor(reshape(aten.arange(end=?e, dtype=?p), shape=?u), aten.scalar_tensor(s=?n, dtype=?q)),"
      " aten.expand(reshape(aten.arange(end=?m, dtype=?r), shape=?w), size=?s, implicit=?i), alpha=1)"
      " => reshape(aten.arange(end=?e * ?n, dtype=?p), shape=[?e, ?n])",
      "?n == ?m and ?u == [?e, 1] and ?w == [1, ?n] and ?s == [?e, ?n] and ?q == \"int64\""
      " and (?p == None or ?p == \"int64\") and (?r == None or ?r == \"int64\")",
      examples=[{"e": e, "n": n, "m": n, "p": p, "q": "int64", "r": r, "u": [e, 1], "w": [1, n], "s": [e, n], "i": False}
                for e in (1, 2, 3, 5) for n in (1, 2, 4) for p, r in ((None, None), ("int64", None))]),
    # the unpermute: each expert's rows added back at token 0..n-1 (the stable order of 1326, expert-major) is
    # the sum over experts of the rows viewed [experts, n, hidden]
    L(1354, "scatter-add-at-repeated-arange-is-sum-over-repeats",
      f"aten.scatter_add(aten.zeros(size=?z, dtype=?t), {_COLUMN}, ?y, dim=0)"
      " => aten.sum.dim_IntList(reshape(?y, shape=[at(?s, 0), ?n, size(?y, 1)]), dim=[0], keepdim=false, dtype=None)",
      f"rank(?y) == 2 and ?z == [?n, size(?y, 1)] and {_COLUMN_OK.format(y='?y')}"
      " and size(?y, 0) == at(?s, 0) * ?n and dtype(?y) == ?t",
      examples=[{"n": n, "e": e, "h": h, "y": [e * n, h], "z": [n, h], "t": "float32", "p": None, "u": [1, n], "s": [e, n],
                 "i": False, "v": [e * n, 1], "w": w, "j": False}
                for n in (1, 2, 3) for e in (1, 2, 4) for h in (1, 3) for w in ([-1, h], [e * n, h])][:24]),
    # its backward: the gradient rows gathered at token 0..n-1 for each expert are the gradient repeated per expert
    L(1356, "gather-at-repeated-arange-is-repeat",
      f"aten.gather(?g, {_COLUMN}, dim=0)"
      " => reshape(aten.expand(reshape(?g, shape=[1, ?n, size(?g, 1)]), size=[at(?s, 0), ?n, size(?g, 1)], implicit=false),"
      " shape=[at(?s, 0) * ?n, size(?g, 1)])",
      f"rank(?g) == 2 and size(?g, 0) == ?n and {_COLUMN_OK.format(y='?g')}",
      examples=[{"n": n, "g": [n, h], "p": None, "u": [1, n], "s": [e, n], "i": False, "v": [e * n, 1], "w": w, "j": False}
                for n in (1, 2, 3) for e in (1, 2, 4) for h in (1, 3) for w in ([-1, h], [e * n, h])][:24]),
    # the backward of the permutations (index_select's): added back into zeros at 0..n-1, the rows are themselves;
    # at 0..n-1 once per expert, the sum over the experts
    L(1357, "index-add-at-arange-into-zeros",
      "aten.index_add(aten.full(size=?z, fill_value=0, dtype=?t), aten.arange(end=?n, dtype=?p), ?y, dim=0, alpha=1) => ?y",
      "?z == shape(?y) and at(?z, 0) == ?n and dtype(?y) == ?t and (?p == None or ?p == \"int64\")",
      examples=[{"z": z, "y": z, "n": z[0], "t": t, "p": p} for z in ([1], [4], [6, 2], [3, 1, 2], [5, 3])
                for t in ("float32", "float64") for p in (None, "int64")]),
    L(1358, "index-add-at-repeated-arange-is-sum-over-repeats",
      f"aten.index_add(aten.full(size=?z, fill_value=0, dtype=?t), reshape({_ORDER}, shape=?w), ?y, dim=0, alpha=1)"
      " => aten.sum.dim_IntList(reshape(?y, shape=[at(?s, 0), ?n, size(?y, 1)]), dim=[0], keepdim=false, dtype=None)",
      f"rank(?y) == 2 and ?z == [?n, size(?y, 1)] and {_ORDER_OK} and ?w == [at(?s, 0) * ?n]"
      " and size(?y, 0) == at(?s, 0) * ?n and dtype(?y) == ?t",
      examples=[{"n": n, "y": [e * n, h], "z": [n, h], "t": "float32", "p": None, "u": [1, n], "s": [e, n], "i": False,
                 "w": [e * n]} for n in (1, 2, 3, 5) for e in (1, 2, 4) for h in (1, 3)]),
    # x[0..n-1] along a dim of size n is x
    L(1353, "index-select-of-arange-is-identity",
      "aten.index_select(?x, aten.arange(end=?n, dtype=?p), dim=?d) => ?x",
      "?n == size(?x, ?d) and (?p == None or ?p == \"int64\")"),
    L(1714, "embedding-of-id-shards",
      "aten.embedding(?w, concat(?i, ?j, dim=?d), padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
      " => concat(aten.embedding(?w, ?i, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q),"
      " aten.embedding(?w, ?j, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q), dim=?d)",
      "rank(?w) == 2 and ?p == -1", index={"i": "size(?w, 0)", "j": "size(?w, 0)"},
      examples=[{"w": [5, 3], "i": i, "j": j, "d": d, "p": -1}
                for i, j, d in (([2, 4], [1, 4], 0), ([2, 3], [2, 1], 1), ([3], [2], 0), ([1, 2, 2], [1, 1, 2], 1))]),
    # the table's gradient from a split batch: the parts' gradients summed (what data parallelism all-reduces
    # or reduce-scatters)
    L(1715, "embedding-backward-of-batch-shards",
      _EDB.format(g="concat(?g, ?h, dim=?d)", i="concat(?i, ?j, dim=?d)")
      + f" => sum({_EDB.format(g='?g', i='?i')}, {_EDB.format(g='?h', i='?j')})",
      "?pi == -1 and rank(?g) == rank(?i) + 1 and size(?g, ?d) == size(?i, ?d)", index={"i": "?v", "j": "?v"},
      examples=[{"g": i + [3], "h": j + [3], "i": i, "j": j, "d": d, "v": 5, "pi": -1}
                for i, j, d in (([2, 4], [1, 4], 0), ([2, 3], [2, 1], 1), ([3], [2], 0), ([1, 2, 2], [1, 1, 2], 1))]),
    # gather along dim 1 with a column of indices is advanced indexing by (arange, indices)
    L(1731, "gather-of-an-index-column-is-index",
      "aten.gather(?x, reshape(?i, shape=?s), dim=1, sparse_grad=?g)"
      " => reshape(aten.index.Tensor(?x, aten.arange.start(start=0, end=size(?x, 0)), ?i), shape=?s)",
      "rank(?x) == 2 and ?s == [size(?x, 0), 1] and shape(?i) == [size(?x, 0)]", index={"i": "size(?x, 1)"},
      examples=[{"x": [n, v], "i": [n], "s": [n, 1]} for n, v in ((3, 4), (1, 2), (5, 1), (2, 6))]),
    # a boolean mask of the tensor's own shape and a single value: index_put is elementwise, so it commutes
    # with a reshape of both
    L(1732, "masked-index-put-of-reshapes",
      "aten.index_put(reshape(?y, shape=?s), reshape(?m, shape=?s), ?z)"
      " => reshape(aten.index_put(?y, ?m, ?z), shape=?s)",
      "shape(?m) == shape(?y) and dtype(?m) == \"bool\" and shape(?z) == [] and dtype(?z) == dtype(?y)",
      examples=[{"y": y, "m": y, "z": [], "s": s, "m:dtype": "bool", "y:dtype": t, "z:dtype": t}
                for y, s, t in (([4], [4, 1], "float32"), ([2, 3], [6], "float64"), ([3, 2], [2, 1, 3], "int64"),
                                ([1], [1, 1], "float16"), ([2, 2], [4], "bfloat16"), ([0, 3], [3, 0], "float32"),
                                ([5, 1], [5], "int32"), ([2, 2, 2], [4, 2], "float64"), ([6], [2, 3], "bool"),
                                ([3], [1, 3, 1], "float32"))]),
    L(1630, "index-of-ranged-ids-is-embedding", f"aten.index.Tensor(?w, ?i, absent=[]) => {_EMB}",
      f"rank(?w) == 2 and {_INT} and vmin(?i) >= 0 and vend(?i) <= size(?w, 0)"),
    L(1631, "embedding-is-index", f"aten.embedding(?w, ?i, padding_idx=?p, scale_grad_by_freq=false, sparse=?s)"
      " => aten.index.Tensor(?w, ?i, absent=[])", f"rank(?w) == 2 and {_INT}",
      index={"i": "size(?w, 0)"}),
    L(1403, "index-rows-of-concat-other-dim",
      "aten.index.Tensor(concat(?a, ?b, dim=?d), ?i, absent=?n)"
      " => concat(aten.index.Tensor(?a, ?i, absent=?n), aten.index.Tensor(?b, ?i, absent=?n), dim=?d + rank(?i) - 1)",
      f"len(?n) == 0 and ?d >= 1 and {_INT_INDEX}",
      index={"i": "size(?a, 0)"},
      examples=[{"a": [4, 2, 3], "b": [4, 1, 3], "i": [5], "d": 1, "n": []},
                {"a": [3, 2, 2], "b": [3, 2, 1], "i": [2, 2], "d": 2, "n": []}]),
    L(1404, "index-rows-of-slice-other-dim",
      "aten.index.Tensor(slice(?x, dim=?d, start=?s, end=?e), ?i, absent=?n)"
      " => slice(aten.index.Tensor(?x, ?i, absent=?n), dim=?d + rank(?i) - 1, start=?s, end=?e)",
      f"len(?n) == 0 and ?d >= 1 and {_INT_INDEX}", index={"i": "size(?x, 0)"},
      examples=[{"x": [4, 6, 3], "i": [5], "d": 1, "s": 2, "e": 5, "n": []}]),
    # ... and their backward: the gathered rows' gradients accumulated back (index_put into a fill)
    L(1405, "index-put-rows-of-concat-other-dim",
      f"aten.index_put({_FILL}, ?i, concat(?a, ?b, dim=?k), accumulate=?acc, absent=?n)"
      f" => concat(aten.index_put({_fill('size(?a, ?k)')}, ?i, ?a, accumulate=?acc, absent=?n),"
      f" aten.index_put({_fill('size(?b, ?k)')}, ?i, ?b, accumulate=?acc, absent=?n), dim={_D})",
      f"len(?n) == 0 and {_D} >= 1 and rank(?a) == len(?s) + rank(?i) - 1"
      f" and size(?a, ?k) + size(?b, ?k) == at(?s, {_D}) and {_INT_INDEX}",
      index={"i": "at(?s, 0)"},
      examples=[{"s": s, "f": f, "t": "float64", "i": i, "a": a, "b": b, "k": k, "acc": acc, "n": []}
                for s, f, i, a, b, k, acc in (
                    ([4, 6, 3], 0, [5], [5, 2, 3], [5, 4, 3], 1, True), ([4, 6], 0, [2, 3], [2, 3, 1], [2, 3, 5], 2, False),
                    ([3, 4, 2, 2], 1.5, [6], [6, 4, 2, 1], [6, 4, 2, 1], 3, True), ([2, 3], 0, [4], [4, 1], [4, 2], 1, True),
                    ([5, 2, 4], 0, [3], [3, 2, 1], [3, 2, 3], 2, True), ([2, 4, 2], -1, [7], [7, 3, 2], [7, 1, 2], 1, False),
                    ([6, 5], 0, [1], [1, 2], [1, 3], 1, True), ([3, 2, 6], 0, [4, 2], [4, 2, 2, 4], [4, 2, 2, 2], 3, True))]),
    L(1406, "index-put-rows-of-slice-other-dim",
      f"aten.index_put({_FILL}, ?i, slice(?v, dim=?k, start=?x, end=?y), accumulate=?acc, absent=?n)"
      f" => slice(aten.index_put({_fill('size(?v, ?k)')}, ?i, ?v, accumulate=?acc, absent=?n), dim={_D}, start=?x, end=?y)",
      f"len(?n) == 0 and {_D} >= 1 and rank(?v) == len(?s) + rank(?i) - 1 and {_INT_INDEX}",
      index={"i": "at(?s, 0)"},
      examples=[{"s": [4, 2, 3], "f": 0, "t": "float64", "i": [5], "v": [5, 6, 3], "k": 1, "x": 1, "y": 3,
                 "acc": True, "n": []}]),
    L(1360, "slice-at-of-concat",
      "aten.slice_at(concat(?a, ?b, dim=?d), ?lo, ?hi, dim=?k, length=?n, count=?c)"
      " => concat(aten.slice_at(?a, ?lo, ?hi, dim=?k, length=?n, count=?c),"
      " aten.slice_at(?b, ?lo, ?hi, dim=?k, length=?n, count=?c), dim=?d)",
      "?d != ?k", index=_BOUNDS,
      examples=_seeds([{"a": [3, 2], "b": [3, 1], "d": 1, "k": 0, "n": 3, "c": 1},
                       {"a": [2, 2], "b": [2, 3], "d": 1, "k": 0, "n": 2, "c": 1},
                       {"a": [2, 3], "b": [1, 3], "d": 0, "k": 1, "n": 3, "c": 2},
                       {"a": [2, 2, 2], "b": [2, 2, 1], "d": 2, "k": 1, "n": 2, "c": 0}])),
    L(1361, "slice-scatter-at-of-concats",
      _SS.format(b="concat(?p, ?q, dim=?d)", s="concat(?a, ?b, dim=?d)")
      + " => concat(" + _SS.format(b="?p", s="?a") + ", " + _SS.format(b="?q", s="?b") + ", dim=?d)",
      "?d != ?k and size(?p, ?d) == size(?a, ?d)", index={"lo": "size(?p, ?k)", "hi": "size(?p, ?k) + 1"},
      examples=_seeds([{"p": [3, 2], "q": [3, 1], "a": [1, 2], "b": [1, 1], "d": 1, "k": 0},
                       {"p": [2, 2], "q": [2, 3], "a": [1, 2], "b": [1, 3], "d": 1, "k": 0},
                       {"p": [2, 3], "q": [1, 3], "a": [2, 2], "b": [1, 2], "d": 0, "k": 1}])),
    _into_fill_of_concat(1362, "slice-scatter-at-into-zeros-of-concat", _ZEROS,
                         [{"z": [3, 3], "a": [1, 2], "b": [1, 1], "d": 1, "k": 0, "t": "float32"},
                          {"z": [2, 5], "a": [1, 2], "b": [1, 3], "d": 1, "k": 0, "t": "float16"},
                          {"z": [3, 3], "a": [2, 2], "b": [1, 2], "d": 0, "k": 1, "t": "float64"}]),
    _into_fill_of_concat(1365, "slice-scatter-at-into-full-of-concat", _DATA_FULL,
                         [{"z": [3, 3], "a": [1, 2], "b": [1, 1], "d": 1, "k": 0, "t": "float32", "v": 0},
                          {"z": [2, 5], "a": [1, 2], "b": [1, 3], "d": 1, "k": 0, "t": "float16", "v": 1},
                          {"z": [3, 3], "a": [2, 2], "b": [1, 2], "d": 0, "k": 1, "t": "float64", "v": -2},
                          {"z": [3, 3], "a": [2, 2], "b": [1, 2], "d": 0, "k": 1, "t": "int64", "v": 0}]),
    L(1363, "slice-scatter-at-of-sums",
      _SS.format(b="sum(?p, ?q)", s="sum(?a, ?b)")
      + " => sum(" + _SS.format(b="?p", s="?a") + ", " + _SS.format(b="?q", s="?b") + ")",
      "dtype(?a) == dtype(?p) and dtype(?b) == dtype(?q)", index={"lo": "size(?p, ?k)", "hi": "size(?p, ?k) + 1"},
      examples=_seeds([{"p": [3, 2], "q": [3, 2], "a": [1, 2], "b": [1, 2], "k": 0},
                       {"p": [2, 3], "q": [2, 3], "a": [2, 2], "b": [2, 2], "k": 1}])),
    _into_zeros_of_sum(1364, "slice-scatter-at-into-zeros-of-sum", _ZEROS),
    _into_zeros_of_sum(1366, "slice-scatter-at-into-full-zeros-of-sum", _FULL0),
    # the backward of ``out[lo:hi] = y`` into a buffer: the buffer's gradient with those rows zeroed
    L(1367, "slice-scatter-at-of-full-into-concat",
      _SS.format(b="concat(?p, ?q, dim=?d)", s=_DATA_FULL.format(z="?z"))
      + " => concat(" + _SS.format(b="?p", s=_DATA_FULL.format(z="set_at(?z, ?d, size(?p, ?d))")) + ", "
      + _SS.format(b="?q", s=_DATA_FULL.format(z="set_at(?z, ?d, size(?q, ?d))")) + ", dim=?d)",
      "?d != ?k and len(?z) == rank(?p)", index={"lo": "size(?p, ?k)", "hi": "size(?p, ?k) + 1"},
      examples=_seeds([{"p": [3, 2], "q": [3, 1], "z": [1, 3], "d": 1, "k": 0, "t": "float32", "v": 0},
                       {"p": [2, 2], "q": [2, 3], "z": [1, 5], "d": 1, "k": 0, "t": "float16", "v": 0},
                       {"p": [2, 3], "q": [1, 3], "z": [3, 2], "d": 0, "k": 1, "t": "float64", "v": 1},
                       {"p": [2, 3], "q": [2, 3], "z": [4, 1], "d": 0, "k": 1, "t": "int64", "v": 0}])),
    # the experts' outputs, each rank's partial sum, put back in token order: a gather of rows is linear
    L(1904, "index-rows-of-partial-sum",
      "aten.index.Tensor(sum(?a, ?b), ?i, absent=[]) => sum(aten.index.Tensor(?a, ?i, absent=[]),"
      " aten.index.Tensor(?b, ?i, absent=[]))",
      "floating(dtype(?a)) and rank(?a) >= 1", index={"i": "size(?a, 0)"},
      examples=[{"a": [6, 4], "b": [6, 4], "i": [6]}, {"a": [3, 2, 2], "b": [3, 2, 2], "i": [2, 2]}]),
]
