"""Lemmas of the HLO pack. References: 800-879, 886-899 (880-885: ``layers.py``).

Bridges into the core dialect (800-806), so that HLO programs meet the core algebra (and any other dialect
bridged the same way, e.g. ATen through 301/303): a plain 2-D ``dot`` is ``matmul``, a batched one
``batched_matmul``, ``add``/``subtract``/``negate``/``exponential`` their core twins. (``multiply`` is not
bridged: core ``mul`` distributes over every grouping of a partial sum, which explodes at 8 ranks; HLO
products have their own, constrained lemmas below.)

Then HLO's own algebra over the clean ops (810-879), what tensor-parallel XLA programs need:

* elementwise ops over concatenations cut at the same place, ``op(concat(a, b), concat(c, e)) =
  concat(op(a, c), op(b, e))``, come from the ops' declared properties (ops.py: ``elementwise``, and
  ``commutative``, ``linear``: the engine's lemma families 12xx, engine/families.py; HLO has no implicit
  broadcasting: every operand has the full shape). Operands constant along the cut dim, a splat ``constant`` or
  a ``broadcast`` that repeats its operand there, are cut where a concatenation of their shape is cut (845, 846;
  constrained, §4.3: only at cut points that exist), a broadcast of a concatenation along the dims it maps (810);
* ``dot`` with general dimension numbers (850-857): both operands cut at a contracted pair of dims -> the sum of
  the parts' dots; at a pair of batch dims -> a concatenation along the result's batch dim; one operand cut at a
  free dim -> a concatenation along the result dim it lands on; dots of partial sums;
* ``reduce`` (860-863): along other dims -> a concatenation; along the cut dim -> a ``sum`` (``add`` reducer,
  init 0) or a ``max`` of the parts' reductions; of a partial sum;
* partial sums (one per rank, summed by a later all-reduce) through ``broadcast`` (864) and the elementwise ops
  a backward pass applies to them (870-874; for integers too, where the derived family 1203 states floating point
  only); products commute where both orders exist (family 1208).

Softmax, layer and RMS normalisation need no lemma of their own: XLA spells them as reduce + broadcast +
elementwise ops, and along an uncut dim each of those goes through the concatenation (proofs.py
proves a softmax over row-cut inputs from these lemmas alone, and that one along the cut dim is not proved).
"""
from graphguard.ir.lemma import KEPT_UNGUARDED, L, keeps_order

NUMBERS = (range(800, 880), range(886, 900))  # (880-885: layers.py)



BRIDGES = [
    L(800, "dot-is-matmul",
      "hlo.dot(?a, ?b, lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0]) => matmul(?a, ?b)",
      "rank(?a) == 2 and rank(?b) == 2", examples=({"a": [2, 3], "b": [3, 4]},)),
    L(801, "batched-dot-is-batched-matmul",
      "hlo.dot(?a, ?b, lhs_batch=[0], rhs_batch=[0], lhs_contracting=[2], rhs_contracting=[1])"
      " => batched_matmul(?a, ?b)",
      "rank(?a) == 3 and rank(?b) == 3", examples=({"a": [2, 3, 4], "b": [2, 4, 1]},)),
    L(807, "batched-dot-is-batched-matmul-4d",
      "hlo.dot(?a, ?b, lhs_batch=[0, 1], rhs_batch=[0, 1], lhs_contracting=[3], rhs_contracting=[2])"
      " => batched_matmul(?a, ?b)",
      "rank(?a) == 4 and rank(?b) == 4", examples=({"a": [2, 3, 4, 5], "b": [2, 3, 5, 2]},)),
    L(802, "add-is-core-add", "hlo.add(?a, ?b) => add(?a, ?b)"),
    L(803, "subtract-is-core-sub", "hlo.subtract(?a, ?b) => sub(?a, ?b)"),
    L(805, "negate-is-core-neg", "hlo.negate(?a) => neg(?a)"),
    L(806, "exponential-is-core-exp", "hlo.exponential(?a) => exp(?a)", "floating(dtype(?a))"),
]

def _moves_only_unit_dims(ctx, x, p) -> bool:
    """Does ``permute(x, p)`` keep the order of x's dims that are not (provably) of size 1?"""
    return keeps_order(ctx.cx, ctx.shape_of(x), p)


# functions of this pack's conditions and right-hand sides (the graphguard_lemma_functions hook)
FUNCTIONS = {
    "moves_only_unit_dims": _moves_only_unit_dims,
    "permuted_shape": lambda ctx, x, p: tuple(ctx.shape_of(x)[int(i)] for i in p),
    # the one dim a broadcast inserts whose dimensions map its operand's dims in order onto all others
    "inserted_dim": lambda ctx, m: _inserted_dim(m),
}


def _inserted_dim(m) -> int:
    m = tuple(int(i) for i in m)
    rest = [k for k in range(len(m) + 1) if k not in m]
    if len(rest) != 1 or m != tuple(k for k in range(len(m) + 1) if k != rest[0]):
        raise ValueError("not the in-order insertion of one dim")
    return rest[0]


MOVEMENT = [
    L(810, "broadcast-of-concat",
      "hlo.broadcast(concat(?a, ?b, dim=?d), shape=?s, dimensions=?m)"
      " => concat(hlo.broadcast(?a, shape=set_at(?s, at(?m, ?d), size(?a, ?d)), dimensions=?m),"
      " hlo.broadcast(?b, shape=set_at(?s, at(?m, ?d), size(?b, ?d)), dimensions=?m), dim=at(?m, ?d))",
      "size(?a, ?d) + size(?b, ?d) == at(?s, at(?m, ?d))",
      examples=({"a": [2, 3], "b": [1, 3], "d": 0, "s": [3, 4, 3], "m": [0, 2]},
                {"a": [3], "b": [2], "d": 0, "s": [4, 5], "m": [1]})),
    # a transpose that moves only size-1 dims moves no data: XLA writes it as a reshape (one head per rank:
    # [b, 1, s, d] -> [b, s, 1, d]), so the pieces of a permuted concatenation must meet that reshape
    L(865, "unit-dims-permute-is-reshape",
      "permute(?x, dims=?p) => reshape(?x, shape=permuted_shape(?x, ?p))", "moves_only_unit_dims(?x, ?p)",
      examples=({"x": [2, 1, 3], "p": [1, 0, 2]}, {"x": [1, 2, 1], "p": [2, 1, 0]},
                {"x": [2, 1, 4, 2], "p": [0, 2, 1, 3]}, {"x": [1, 3, 1, 2], "p": [1, 2, 3, 0]})),
]


# Operands constant along the cut dim -- a splat constant, a broadcast that repeats its operand along it --
# are cut where a concatenation of their shape is cut (constrained, §4.3: only at the cut points that exist),
# so that the lemmas above apply to them.
_CUT = ("size(?a, ?d) + size(?b, ?d) == at(?s, ?d) and set_at(?s, ?d, size(?a, ?d)) == shape(?a)"
        " and set_at(?s, ?d, size(?b, ?d)) == shape(?b)")  # shaped like the concatenation
SPLITS = [
    L(845, "constant-cut-like-a-concat",
      "hlo.constant(shape=?s, value=?v, dtype=?t) => concat(hlo.constant(shape=set_at(?s, ?d, size(?a, ?d)), value=?v,"
      " dtype=?t), hlo.constant(shape=set_at(?s, ?d, size(?b, ?d)), value=?v, dtype=?t), dim=?d)",
      _CUT, when="concat(?a, ?b, dim=?d)",
      examples=({"s": [3, 4], "v": 2, "t": "float32", "a": [3, 1], "b": [3, 3], "d": 1},)),
    L(846, "broadcast-cut-like-a-concat",
      "hlo.broadcast(?x, shape=?s, dimensions=?m) => concat(hlo.broadcast(?x, shape=set_at(?s, ?d, size(?a, ?d)),"
      " dimensions=?m), hlo.broadcast(?x, shape=set_at(?s, ?d, size(?b, ?d)), dimensions=?m), dim=?d)",
      f"(not contains(?m, ?d) or size(?x, index(?m, ?d)) == 1) and {_CUT}",
      when="concat(?a, ?b, dim=?d)",
      examples=({"x": [3], "s": [4, 3], "m": [1], "a": [1, 3], "b": [3, 3], "d": 0},
                {"x": [1, 3], "s": [4, 3], "m": [0, 1], "a": [2, 3], "b": [2, 3], "d": 0})),
]

_DOT = "lhs_batch=?lb, rhs_batch=?rb, lhs_contracting=?lc, rhs_contracting=?rc"
_DOT_EXAMPLES = ({"a": [2, 3], "b": [2, 1], "d": 1, "y": [4, 5], "lb": [], "rb": [], "lc": [1], "rc": [0]},
                 {"a": [2, 4, 3], "b": [1, 4, 3], "d": 0, "y": [3, 3, 5], "lb": [0], "rb": [0], "lc": [2], "rc": [1]},
                 {"a": [2, 3, 2, 4], "b": [2, 3, 1, 4], "d": 2, "y": [2, 5, 4, 3], "lb": [0, 2], "rb": [0, 3],
                  "lc": [3], "rc": [2]},
                 {"a": [2, 3], "b": [1, 3], "d": 0, "y": [3, 4], "lb": [], "rb": [], "lc": [1], "rc": [0]},
                 {"a": [2, 2, 3], "b": [2, 1, 3], "d": 1, "y": [2, 3, 4], "lb": [0], "rb": [0], "lc": [2], "rc": [1]},
                 {"a": [3, 2, 4], "b": [3, 1, 4], "d": 1, "y": [4, 2, 3], "lb": [0], "rb": [2], "lc": [2], "rc": [0]})
_DOT_EXAMPLES_R = tuple({"x": e["y"], "a": e["a"], "b": e["b"], "d": e["d"], "lb": e["rb"], "rb": e["lb"],
                         "lc": e["rc"], "rc": e["lc"]} for e in _DOT_EXAMPLES)

_CAT2 = "size(?a, ?d) == size(?c, ?k)"
_DOT2_EXAMPLES = (
    {"a": [2, 3], "b": [2, 1], "c": [3, 4], "e": [1, 4], "d": 1, "k": 0, "lb": [], "rb": [], "lc": [1], "rc": [0]},
    {"a": [2, 4, 3], "b": [2, 4, 1], "c": [2, 3, 5], "e": [2, 1, 5], "d": 2, "k": 1, "lb": [0], "rb": [0], "lc": [2],
     "rc": [1]},
    {"a": [2, 4, 3], "b": [1, 4, 3], "c": [2, 3, 5], "e": [1, 3, 5], "d": 0, "k": 0, "lb": [0], "rb": [0], "lc": [2],
     "rc": [1]},
    {"a": [2, 3, 2, 4], "b": [2, 3, 1, 4], "c": [2, 5, 4, 2], "e": [2, 5, 4, 1], "d": 2, "k": 3, "lb": [0, 2],
     "rb": [0, 3], "lc": [3], "rc": [2]})

DOT = [
    # both operands cut at the same place of a contracted pair of dims: a sum of the parts' dots (the
    # contraction over the whole dim is the sum of the contractions over its pieces)
    L(850, "dot-of-concats-along-contracting-dims",
      f"hlo.dot(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k), {_DOT}) => sum(hlo.dot(?a, ?c, {_DOT}),"
      f" hlo.dot(?b, ?e, {_DOT}))", f"contains(?lc, ?d) and ?k == at(?rc, index(?lc, ?d)) and {_CAT2}",
      examples=_DOT2_EXAMPLES),
    # ... of a pair of batch dims: the batch dim of the result is cut there
    L(852, "dot-of-concats-along-batch-dims",
      f"hlo.dot(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?k), {_DOT}) => concat(hlo.dot(?a, ?c, {_DOT}),"
      f" hlo.dot(?b, ?e, {_DOT}), dim=index(?lb, ?d))", f"contains(?lb, ?d) and ?k == at(?rb, index(?lb, ?d)) and {_CAT2}",
      examples=_DOT2_EXAMPLES),
    # a free dim of the lhs lands after the batch dims, among the lhs's free dims in order
    L(854, "dot-of-concat-along-lhs-free-dim",
      f"hlo.dot(concat(?a, ?b, dim=?d), ?y, {_DOT}) => concat(hlo.dot(?a, ?y, {_DOT}), hlo.dot(?b, ?y, {_DOT}),"
      f" dim=len(?lb) + reduced_dim(?d, ?lb, 0) + reduced_dim(?d, ?lc, 0) - ?d)",
      "not contains(?lb, ?d) and not contains(?lc, ?d)", examples=_DOT_EXAMPLES),
    # a free dim of the rhs lands after the batch dims and the lhs's free dims
    L(855, "dot-of-concat-along-rhs-free-dim",
      f"hlo.dot(?x, concat(?a, ?b, dim=?d), {_DOT}) => concat(hlo.dot(?x, ?a, {_DOT}), hlo.dot(?x, ?b, {_DOT}),"
      f" dim=rank(?x) - len(?lc) + reduced_dim(?d, ?rb, 0) + reduced_dim(?d, ?rc, 0) - ?d)",
      "not contains(?rb, ?d) and not contains(?rc, ?d)", examples=_DOT_EXAMPLES_R),
]

REDUCE = [
    L(860, "reduce-of-concat-along-other-dims",
      "hlo.reduce(concat(?a, ?b, dim=?d), dims=?k, reducer=?r, init=?i)"
      " => concat(hlo.reduce(?a, dims=?k, reducer=?r, init=?i), hlo.reduce(?b, dims=?k, reducer=?r, init=?i),"
      " dim=reduced_dim(?d, ?k, 0))", "not contains(?k, ?d)"),
    # the init value is added once per reduction: only 0 keeps the sum of two reductions exact
    L(861, "reduce-add-of-concat-along-it",
      "hlo.reduce(concat(?a, ?b, dim=?d), dims=?k, reducer=sum, init=0)"
      " => sum(hlo.reduce(?a, dims=?k, reducer=sum, init=0), hlo.reduce(?b, dims=?k, reducer=sum, init=0))",
      "contains(?k, ?d)"),
    L(862, "reduce-max-of-concat-along-it",
      "hlo.reduce(concat(?a, ?b, dim=?d), dims=?k, reducer=max, init=?i)"
      " => max(hlo.reduce(?a, dims=?k, reducer=max, init=?i), hlo.reduce(?b, dims=?k, reducer=max, init=?i))",
      "contains(?k, ?d)"),
    L(863, "reduce-add-of-partial-sum",
      "hlo.reduce(sum(?a, ?b), dims=?k, reducer=sum, init=0)"
      " => sum(hlo.reduce(?a, dims=?k, reducer=sum, init=0), hlo.reduce(?b, dims=?k, reducer=sum, init=0))"),
    # a sum over one dim of size 1 adds each entry to the init 0 once: a reshape dropping that dim (JAX's
    # all_gather(h).sum(0), the ranks' shards stacked on a new unit dim each, then summed: a psum)
    L(866, "reduce-add-of-a-unit-dim",
      "hlo.reduce(?y, dims=?k, reducer=sum, init=0) => reshape(?y, shape=drop_at(shape(?y), at(?k, 0)))",
      "len(?k) == 1 and size(?y, at(?k, 0)) == 1",
      examples=({"y": [1, 3], "k": [0]}, {"y": [2, 1, 4], "k": [1]}, {"y": [3, 1], "k": [1]}, {"y": [1], "k": [0]})),
    L(864, "broadcast-of-partial-sum",
      "hlo.broadcast(sum(?a, ?b), shape=?s, dimensions=?m)"
      " => sum(hlo.broadcast(?a, shape=?s, dimensions=?m), hlo.broadcast(?b, shape=?s, dimensions=?m))",
      examples=({"a": [3], "b": [3], "s": [2, 3], "m": [1]},)),
]

# partial sums (one per rank, all-reduced later) through dot, add, multiply and negate: family 1203
# (linear-over-sum), constrained where the op is linear in several inputs (only where the per-rank op exists)

# a multiply by a splat constant is a scale (XLA's and NeuronX's attention scale q before the dot; the factor then
# moves through the products: family 1204, hlo.dot being linear in each operand)
SCALES = [
    L(886, "multiply-by-splat-is-scale",
      "hlo.multiply(?x, hlo.constant(shape=?s, value=?c, dtype=?t)) => scale(?x, factor=?c)",
      "?s == shape(?x) and floating(?t) and dtype(?x) == ?t and finite(?c)",
      examples=({"x": [2, 3], "s": [2, 3], "c": 0.5, "t": "float32"},)),
    L(888, "maximum-with-the-max-reductions-init-is-the-reduction",
      "hlo.maximum(hlo.reduce(?x, dims=?d, reducer=max, init=?i), hlo.constant(shape=?s, value=?i, dtype=?t)) => "
      "hlo.reduce(?x, dims=?d, reducer=max, init=?i)",
      "len(?d) == 1 and ?s == drop_at(shape(?x), at(?d, 0)) and dtype(?x) == ?t",
      examples=({"x": [2, 3], "d": [1], "i": -1000, "s": [2], "t": "float32"},
                {"x": [2, 3, 4], "d": [2], "i": 0, "s": [2, 3], "t": "float32"},
                {"x": [3, 2], "d": [0], "i": -5, "s": [2], "t": "float16"},
                {"x": [2, 2, 3, 4], "d": [3], "i": -1000, "s": [2, 2, 3], "t": "float64"})),
    L(887, "splat-multiply-is-scale",
      "hlo.multiply(hlo.constant(shape=?s, value=?c, dtype=?t), ?x) => scale(?x, factor=?c)",
      "?s == shape(?x) and floating(?t) and dtype(?x) == ?t and finite(?c)",
      examples=({"x": [2, 3], "s": [2, 3], "c": 0.5, "t": "float32"},)),
]

LEMMAS = BRIDGES + MOVEMENT + SPLITS + DOT + REDUCE + SCALES


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    L(856, "dot-of-partial-sum-lhs", f"hlo.dot(sum(?a, ?b), ?y, {_DOT}) => sum(hlo.dot(?a, ?y, {_DOT}), hlo.dot(?b, ?y, {_DOT}))",
      examples=({"a": [2, 3], "b": [2, 3], "y": [3, 4], "lb": [], "rb": [], "lc": [1], "rc": [0]},), duplicates=KEPT_UNGUARDED),
    L(857, "dot-of-partial-sum-rhs", f"hlo.dot(?x, sum(?a, ?b), {_DOT}) => sum(hlo.dot(?x, ?a, {_DOT}), hlo.dot(?x, ?b, {_DOT}))",
      examples=({"x": [2, 3], "a": [3, 4], "b": [3, 4], "lb": [], "rb": [], "lc": [1], "rc": [0]},), duplicates=KEPT_UNGUARDED),
    # constrained like aten 306: only where the per-rank op exists (free pairings of 8-way sums explode, and so
    # does distributing products over every grouping of a sum)
    L(870, "add-of-partial-sums",
      "hlo.add(sum(?a, ?b), sum(?c, ?e)) => sum(hlo.add(?a, ?c), hlo.add(?b, ?e))", when="hlo.add(?b, ?e)", duplicates=KEPT_UNGUARDED),
    L(871, "multiply-by-partial-sum", "hlo.multiply(?c, sum(?a, ?b)) => sum(hlo.multiply(?c, ?a), hlo.multiply(?c, ?b))",
      when="hlo.multiply(?c, ?b)", duplicates=KEPT_UNGUARDED),
    L(872, "multiply-of-partial-sum", "hlo.multiply(sum(?a, ?b), ?c) => sum(hlo.multiply(?a, ?c), hlo.multiply(?b, ?c))",
      when="hlo.multiply(?b, ?c)", duplicates=KEPT_UNGUARDED),
    L(874, "negate-of-partial-sum", "hlo.negate(sum(?a, ?b)) => sum(hlo.negate(?a), hlo.negate(?b))", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
