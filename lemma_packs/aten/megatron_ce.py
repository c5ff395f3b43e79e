"""Lemmas for megatron-core's own vocab-parallel cross-entropy with labels (``examples/megatron-gpt``,
``GG_LABELS=1``). References: 1310-1349 (``NUMBERS``; 1310-1327 taken).

``VocabParallelCrossEntropy.calculate_predicted_logits`` (megatron/core/tensor_parallel/cross_entropy.py) on rank
r, owning vocabulary columns [s, e) of the logits: ``mask = (target < s) | (target >= e)``, ``local = target - s``
with ``local[mask] = 0``, the target's logit ``logits_2d[arange, local.view(-1)]`` viewed back as the target's
[s, b] and zeroed where masked; the ranks' results are all-reduced. Unlike ``vocab.py`` (476-479, for 1-D
targets) the mask lives on the [s, b] targets and the lookup on their flattened view.

The program at tensor-parallel size 1 masks too, with [0, V): its mask is nothing, and its lookup before the
zeroing the target's logit itself, *when every label lies in [0, V)*. That is a fact about the input, which a
relation file states in ``ranges:`` (``labels: "[0, 32)"``); conditions read it with ``vmin`` / ``vend``
(every value in [vmin, vend)). A comparison that no value in range satisfies is all false (1310, 1311);
or-ing and index_put-ing an all-false mask change nothing (1312-1314), nor does subtracting 0 (1317); a lookup
of the target's logit whose ids lie in [0, V) is its masked form (1316), which splits over the vocabulary
columns like 477 (1315, for any ids); its backward likewise (1318, 1319).

Also here, for the other megatron-core examples: a mean's backward over micro-batches and a factor through
Megatron's attention-mask backward (1320-1322, ``examples/bugs/megatron-grad-accum-scale``), and Megatron's MoE
capacity mask when the capacity covers every token and the token permutation it gives (1323-1327,
``examples/megatron-moe``).
"""
from graphguard.ir.lemma import L

NUMBERS = range(1310, 1350)  # this file's lemma numbers (the plugin loader refuses others)

_FALSE = 'aten.full(size={z}, fill_value=0, dtype="bool")'
_MASK = "aten.bitwise_or.Tensor(aten.lt.Scalar({t}, other={s}), aten.ge.Scalar({t}, other={e}))"
_LOCAL = (f"aten.index_put(aten.sub.Tensor({{t}}, aten.scalar_tensor(s={{s}}, dtype=int64)), {_MASK},"
          " aten.full(size=[], fill_value=0, dtype=int64))")
_ZERO = "aten.full(size=[], fill_value=0, dtype=float32)"
# Megatron's predicted logits of logits x [m, cols] for targets t (any shape of m entries), ids in [s, e)
_LOOKUP = f"aten.index.Tensor({{x}}, aten.arange.start(start=0, end={{m}}), reshape({_LOCAL}, shape={{u}}))"
_PREDICTED = f"aten.index_put(reshape({_LOOKUP}, shape={{w}}), {_MASK}, {_ZERO})"

# its backward: grad_2d[arange, local.view(-1)] -= 1 - mask.view(-1).float() (softmax minus the one-hot of the
# target on the rank owning it)
_ROWS = "aten.arange.start(start=0, end={m})"
_IDS = f"reshape({_LOCAL}, shape={{u}})"
_ONE_HOT = (f"aten.index_put({{x}}, {_ROWS}, {_IDS}, aten.sub.Tensor(aten.index.Tensor({{x}}, {_ROWS}, {_IDS}),"
            f" aten.rsub.Scalar(aten._to_copy(reshape({_MASK}, shape={{u}}), dtype=float32), other=1)))")


def _one_hot(x, t, s, e, m, u="[?m]"):
    return _ONE_HOT.format(x=x, t=t, s=s, e=e, m=m, u=u)


def _pred(x, t, s, e, m, u, w):
    return _PREDICTED.format(x=x, t=t, s=s, e=e, m=m, u=u, w=w)


_CA, _CAB = "size(?a, 1)", "size(?a, 1) + size(?b, 1)"
_SPLIT_EXAMPLES = [{"a": [n, a], "b": [n, b], "t": t, "m": n, "u": [n], "w": t, "s": s, "e": s + a + b}
                   for n, a, b, s, t in ((6, 2, 3, 1, [3, 2]), (4, 2, 2, 0, [2, 2]), (2, 1, 3, 4, [1, 2]),
                                         (6, 3, 1, 2, [2, 3]), (3, 2, 2, 0, [3, 1]), (4, 4, 4, 0, [4]))]

LEMMAS = [
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
    # x[mask] = v with a mask of x's shape that selects nothing
    L(1314, "index-put-at-no-entry",
      f"aten.index_put(?x, {_FALSE.format(z='?z')}, ?v, accumulate=?c, absent=[]) => ?x",
      "?z == shape(?x) and rank(?v) == 0",
      examples=[{"x": [2, 3], "z": [2, 3], "v": [], "c": False}, {"x": [4], "z": [4], "v": [], "c": True}]),
    # the ranks' masked lookups over their column shards add up to the masked lookup of the whole (any ids)
    L(1315, "megatron-predicted-logits-of-vocab-shards",
      f"{_pred('concat(?a, ?b, dim=1)', '?t', '?s', '?e', '?m', '?u', '?w')}"
      f" => sum({_pred('?a', '?t', '?s', '?s + ' + _CA, '?m', '[?m]', 'shape(?t)')},"
      f" {_pred('?b', '?t', '?s + ' + _CA, '?e', '?m', '[?m]', 'shape(?t)')})",
      f"?u == [?m] and ?w == shape(?t) and ?m == numel(?t) and ?m == size(?a, 0) and rank(?a) == 2"
      f" and ?s // 1 == ?s and ?e - ?s == {_CAB} and {_CA} >= 1 and size(?b, 1) >= 1",
      index={"t": "?e + 2"}, examples=_SPLIT_EXAMPLES),
    # ids all in [0, cols): a plain lookup of the target's logit is its masked form over all the columns
    L(1316, "lookup-of-ids-in-range-is-megatron-masked-lookup",
      "aten.index.Tensor(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u))"
      f" => reshape({_pred('?x', '?t', 0, 'size(?x, 1)', '?m', '[?m]', 'shape(?t)')}, shape=[?m])",
      "?u == [?m] and ?m == numel(?t) and rank(?x) == 2 and vmin(?t) >= 0 and vend(?t) <= size(?x, 1)",
      examples=[{"x": [n, c], "t": t, "m": n, "u": [n], "t:range": r}
                for n, c, t, r in ((6, 4, [3, 2], (0, 4)), (4, 3, [2, 2], (1, 3)), (2, 5, [2], (0, 5)),
                                   (6, 2, [2, 3], (0, 2)))]),
    # the backward: the ranks' one-hot updates of their column shards are the columns of the whole one's (any ids)
    L(1318, "megatron-one-hot-update-of-vocab-shards",
      f"{_one_hot('concat(?a, ?b, dim=1)', '?t', '?s', '?e', '?m', '?u')}"
      f" => concat({_one_hot('?a', '?t', '?s', '?s + ' + _CA, '?m')}, {_one_hot('?b', '?t', '?s + ' + _CA, '?e', '?m')},"
      f" dim=1)",
      f"?u == [?m] and ?m == numel(?t) and ?m == size(?a, 0) and rank(?a) == 2 and ?s // 1 == ?s and ?e - ?s == {_CAB}"
      f" and {_CA} >= 1 and size(?b, 1) >= 1 and floating(dtype(?a)) and floating(dtype(?b))",
      index={"t": "?e + 2"}, examples=[{k: v for k, v in x.items() if k != "w"} for x in _SPLIT_EXAMPLES]),
    # ids all in [0, cols): x[arange, ids] -= 1 - 0 (the TP=1 program, its mask all false) is the masked update
    L(1319, "one-hot-update-of-ids-in-range-is-megatron-masked-update",
      "aten.index_put(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u),"
      " aten.sub.Tensor(aten.index.Tensor(?x, aten.arange.start(start=0, end=?m), reshape(?t, shape=?u)),"
      f" aten.rsub.Scalar(aten._to_copy(reshape({_FALSE.format(z='?z')}, shape=?u), dtype=float32), other=1)))"
      f" => {_one_hot('?x', '?t', 0, 'size(?x, 1)', '?m')}",
      "?u == [?m] and ?m == numel(?t) and ?z == shape(?t) and rank(?x) == 2 and floating(dtype(?x))"
      " and vmin(?t) >= 0 and vend(?t) <= size(?x, 1)",
      examples=[{"x": [n, c], "t": t, "m": n, "u": [n], "z": t, "t:range": r}
                for n, c, t, r in ((6, 4, [3, 2], (0, 4)), (4, 3, [2, 2], (1, 3)), (2, 5, [2], (0, 5)),
                                   (6, 2, [2, 3], (0, 2)))]),
    # a mean's backward: a number broadcast, then divided by the tokens -- the number divided, then broadcast, as
    # a product with the inverse (as 400), whose factors fold (403) with Megatron's 1 / micro-batches
    L(1320, "div-of-broadcast-number",
      "aten.div.Scalar(aten.expand(?x, size=?s, implicit=?i), other=?c)"
      " => aten.expand(aten.mul.Scalar(?x, other=1 / ?c), size=?s, implicit=?i)",
      "rank(?x) == 0 and ?c != 0 and finite(?c) and floating(dtype(?x))",
      examples=[{"x": [], "s": [2, 3], "i": False, "c": 8}, {"x": [], "s": [4], "i": False, "c": 3}]),
    # a number broadcast (a mean's backward) splits where a narrower copy of it exists (as 421, whose split dims
    # are size-1 dims of x; a number has none: every dim of its copy is new)
    L(1321, "expand-of-number-splits-at-narrower-copy",
      "aten.expand(?x, size=?s, implicit=?i) => concat(aten.expand(?x, size=?t, implicit=?i),"
      " aten.expand(?x, size=set_at(?s, narrower_dim(?s, ?t), at(?s, narrower_dim(?s, ?t)) - at(?t, narrower_dim(?s, ?t))),"
      " implicit=?i), dim=narrower_dim(?s, ?t))",
      "rank(?x) == 0 and narrower_dim(?s, ?t) >= 0", when="aten.expand(?x, size=?t, implicit=?i)",
      examples=[{"x": [], "s": [4, 3], "t": [1, 3], "i": False}, {"x": [], "s": [2, 8], "t": [2, 3], "i": False},
                {"x": [], "s": [5], "t": [2], "i": False}]),
    # Megatron's MoE capacity mask when the capacity covers every token (1351): all true, a product changes nothing;
    # its stable sort (the token permutation) the tokens in order for each expert (examples/megatron-moe)
    L(1323, "copy-of-zero-or-one-fill",
      "aten._to_copy(aten.full(size=?s, fill_value=?v, dtype=?a), dtype=?b) => aten.full(size=?s, fill_value=?v, dtype=?b)",
      "(?v == 0 or ?v == 1) and ?b != None"),
    L(1325, "permute-of-fill",
      "permute(aten.full(size=?s, fill_value=?v, dtype=?a), dims=?p) => aten.full(size=[at(?s, at(?p, 0)), at(?s, at(?p, 1))], fill_value=?v, dtype=?a)",
      "len(?s) == 2 and len(?p) == 2"),
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
    L(1324, "times-all-true", 'aten.mul.Tensor(?x, aten.full(size=?s, fill_value=1, dtype="bool")) => ?x',
      "?s == shape(?x) and floating(dtype(?x))"),
    # Megatron's ids t - s at s = 0 (rank 0's shard, and the whole vocabulary at TP=1)
    L(1317, "minus-zero", "aten.sub.Tensor(?x, aten.scalar_tensor(s=0, dtype=?t), alpha=?a) => ?x",
      "finite(?a) and (dtype(?x) == ?t or (floating(dtype(?x)) and not floating(?t)))"),
]
