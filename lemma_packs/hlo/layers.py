"""More lemmas of the HLO pack, met in NeuronX-style layers. References: 880-885.

Tensor-parallel HLO broadcasts replicated tensors (a causal mask, RoPE tables) to a per-rank shape that is
narrower than the sequential one along a dim the broadcast repeats (the heads). The sequential broadcast is
then the concatenation of such narrower copies -- but the lemmas that split an operation need a
concatenation to start from. Constrained (paper §4.3) like aten 421: a broadcast splits, along the one dim
where a narrower broadcast of the same tensor exists, into that copy and the rest (880).

With one head per rank the rank's broadcast only inserts a size-1 dim, which the frontend reads as a reshape
(a NeuronX mask ``[B, S, T]`` broadcast to the scores ``[B, 1, S, T]`` at 8 ranks): the sequential broadcast
splits where such a reshape of the same tensor exists (884), and a broadcast inserting a single size-1 dim is
that reshape (885).

A fused projection (NeuronX's QKV weight: each rank's q, k and v columns side by side) is sliced after the
dot. The sequential weight is a concatenation of column slices of the ranks' weights, so the sequential dot
splits (850-857) into dots of those slices; each is the same slice of the rank's whole dot (881, 882: a slice
along a free dim commutes with the dot) -- a clean expression whether or not the rank itself slices there.
"""
from graphguard.ir.lemma import L

NUMBERS = range(880, 886)  # this file's lemma numbers (the plugin loader refuses others)

_K = "narrower_dim(?s, ?t)"  # the one dim where shape ?t is narrower than ?s
_NARROWER = "hlo.broadcast(?x, shape=?t, dimensions=?m)"


def _copy_seeds(n: int) -> tuple:  # a broadcast of x to s, and a narrower copy to t (n of them make s)
    return ({"x": [2, 3], "s": [n, 2, 3], "t": [1, 2, 3], "m": [1, 2]},
            {"x": [3, 2], "s": [2, 2 * n, 3, 2], "t": [2, 2, 3, 2], "m": [2, 3]},
            {"x": [], "s": [2, 3 * n], "t": [2, 3], "m": []})


_DOT = "lhs_batch=?lb, rhs_batch=?rb, lhs_contracting=?lc, rhs_contracting=?rc"
_SL = "start=?i, end=?j"
_DOT_SEEDS = ({"x": [4, 3], "w": [3, 6], "d": 1, "i": 2, "j": 5, "lb": [], "rb": [], "lc": [1], "rc": [0]},
              {"x": [3, 4], "w": [3, 6], "d": 1, "i": 0, "j": 4, "lb": [], "rb": [], "lc": [0], "rc": [0]},
              {"x": [2, 3, 4], "w": [5, 2, 4], "d": 0, "i": 1, "j": 3, "lb": [0], "rb": [1], "lc": [2], "rc": [2]},
              {"x": [2, 2, 3], "w": [3, 2, 5], "d": 2, "i": 1, "j": 4, "lb": [1], "rb": [1], "lc": [2], "rc": [0]})
_DOT_SEEDS_L = tuple({"w": e["w"], "y": e["x"], "d": e["d"], "i": e["i"], "j": e["j"], "lb": e["rb"], "rb": e["lb"],
                      "lc": e["rc"], "rc": e["lc"]} for e in _DOT_SEEDS)

LEMMAS = [
    # (n equal copies at once -- n = 2, 4, 8 -- is faster at TP=2, but where q's and k's tables are copies of one
    # broadcast of different widths, R then keeps only the q-width forms and TP=4 loses k's: measured, reverted)
    L(880, "broadcast-splits-at-narrower-copy",
      f"hlo.broadcast(?x, shape=?s, dimensions=?m) => concat({_NARROWER},"
      f" hlo.broadcast(?x, shape=set_at(?s, {_K}, at(?s, {_K}) - at(?t, {_K})), dimensions=?m), dim={_K})",
      f"not contains(?m, {_K})", when=_NARROWER, examples=_copy_seeds(3)),
    # a unit-width copy that the frontend holds as a reshape (the broadcast inserts dim k only): split there too
    L(884, "broadcast-splits-at-unit-reshape",
      "hlo.broadcast(?x, shape=?s, dimensions=?m) => concat(reshape(?x, shape=?t),"
      " hlo.broadcast(?x, shape=set_at(?s, narrower_dim(?s, ?t), at(?s, narrower_dim(?s, ?t)) - 1), dimensions=?m),"
      " dim=narrower_dim(?s, ?t))",
      "at(?t, narrower_dim(?s, ?t)) == 1 and inserted_dim(?m) == narrower_dim(?s, ?t)", when="reshape(?x, shape=?t)",
      examples=({"x": [2, 3], "s": [2, 4, 3], "t": [2, 1, 3], "m": [0, 2]},
                {"x": [2, 3, 2], "s": [3, 2, 3, 2], "t": [1, 2, 3, 2], "m": [1, 2, 3]},
                {"x": [3], "s": [3, 2], "t": [3, 1], "m": [0]})),
    L(885, "broadcast-inserting-a-unit-dim-is-reshape",
      "hlo.broadcast(?x, shape=?s, dimensions=?m) => reshape(?x, shape=?s)",
      # (and no unit dim of ?x broadcast wider: [2, 1] to [2, 2, 1] by dimensions (0, 1) copies its column)
      "len(?m) + 1 == len(?s) and at(?s, inserted_dim(?m)) == 1 and shape(?x) == drop_at(?s, inserted_dim(?m))",
      examples=({"x": [2, 3], "s": [2, 1, 3], "m": [0, 2]}, {"x": [3], "s": [1, 3], "m": [1]})),
    # the output dims of a dot: batch, lhs free, rhs free (each in order), as in 854 / 855
    L(881, "dot-of-slice-along-rhs-free-dim",
      f"hlo.dot(?x, slice(?w, dim=?d, {_SL}), {_DOT}) => slice(hlo.dot(?x, ?w, {_DOT}),"
      f" dim=rank(?x) - len(?lc) + reduced_dim(?d, ?rb, 0) + reduced_dim(?d, ?rc, 0) - ?d, {_SL})",
      "not contains(?rb, ?d) and not contains(?rc, ?d)", examples=_DOT_SEEDS),
    L(882, "dot-of-slice-along-lhs-free-dim",
      f"hlo.dot(slice(?w, dim=?d, {_SL}), ?y, {_DOT}) => slice(hlo.dot(?w, ?y, {_DOT}),"
      f" dim=len(?lb) + reduced_dim(?d, ?lb, 0) + reduced_dim(?d, ?lc, 0) - ?d, {_SL})",
      "not contains(?lb, ?d) and not contains(?lc, ?d)", examples=_DOT_SEEDS_L),
    # a broadcast of a [1, m, n] reshape of a matrix (the unit dim landing on a unit dim of the result) is the
    # broadcast of the matrix: XLA writes a replicated [s, d] table broadcast over one head per rank that way
    # (jnp's [2, 1, s, d] = broadcast(reshape(t, [1, s, d]), dims [1, 2, 3]), wider ranks as broadcast(t, dims [2, 3]))
    L(883, "broadcast-of-unit-reshape-of-matrix",
      "hlo.broadcast(reshape(?x, shape=?u), shape=?s, dimensions=?m)"
      " => hlo.broadcast(?x, shape=?s, dimensions=[at(?m, 1), at(?m, 2)])",
      "rank(?x) == 2 and ?u == [1, size(?x, 0), size(?x, 1)] and len(?m) == 3 and at(?s, at(?m, 0)) == 1",
      examples=({"x": [3, 4], "u": [1, 3, 4], "s": [2, 1, 3, 4], "m": [1, 2, 3]},
                {"x": [3, 4], "u": [1, 3, 4], "s": [1, 2, 3, 4], "m": [0, 2, 3]})),
]
