"""Fuzz the verifier (not just the lemmas): random G_s / G_d pairs with numerical ground truth.

    python3 bench/verifier_fuzz.py --pairs N --seed S --workers 2 [--part own|held-out|both]
                                   [--out bench/out/verifier_fuzz.jsonl] [--timeout 60] [--mem-gib 5]

Each pair is drawn from a seeded *family* of hand-built programs (GraphBuilder calls, as in tests/test_relayout.py):
a sequential G_s in PyTorch's dialect, a distributed G_d (all ranks, joined at collectives) in PyTorch's or XLA's
dialect, the input relation R_i, and -- for a correct variant -- the intended R_o (each G_s output as data
movement over G_d tensors). Every family has correct variants and subtly wrong ones (a constant changed in one
layer only, a repeated operand, a rank's slice off by one, a factor x2 / x0.5, swapped operands or rank order, an
index constant's value changed, a missing collective).

Ground truth never comes from graphguard's verdict: both graphs are evaluated in float64 with the NumPy references
(graphguard.engine.replay's ``_inputs`` / ``run_node``) at random inputs consistent with R_i. A correct variant must
satisfy its intended R_o numerically (else: generator bug, the pair is dropped); a wrong variant must have a G_s
output entry whose value occurs nowhere among the G_d outputs' entries (then no data-movement R_o can exist); a
"wrong" variant whose every entry does occur somewhere is dropped as ambiguous (counted, never judged).

Judging each verification (R_o evaluated by this script at 2 fresh random float64 points, every line):
  UNSOUND      verdict "refines" with an R_o line numerically false (or an output without R_o line);
  FALSE ALARM  an equivalent pair with verdict "does-not-refine";
  inconclusive verdict "inconclusive", or the per-run timeout (listed);
  CRASH        any exception other than graphguard's InputError (exit 4), or a worker that died;
  input-error  graphguard rejected the pair as bad input (listed separately: a generator or a frontend bug);
  gen-bug      a wrong pair refining with a numerically true R_o (cannot happen: flagged).
Each pair is verified twice -- with the engine's caps as they are, and with a seeded subset of the ``MAX_*`` caps
of graphguard/engine/{relayout.py or labels/*,infer,memo}.py monkeypatched low (forcing the fast paths, as
tests/test_relayout.py's ``test_products_on_positions_decide_as_the_pairs_do`` does) -- and, where
``graphguard.verify`` takes ``check=`` (the independent checker), each of those with ``check="off"`` (engine alone)
and ``check="all"`` (with checker). A false alarm with caps forced low is reported apart (a cap may give up).
Which caps a pair's sizes reach naturally is recorded from its graphs (``size >= cap``; see ``CAP_METRICS``).

Coverage: every run counts the calls (and the calls that returned something) of the engine's entry points,
wrapped in the worker process only (setattr on graphguard.engine.infer / relayout, never in the package):
movement_first, products_first, elementwise_outputs, sum_outputs, relayouts, moved_outputs, rows_through,
summed_outputs, _products_by_positions, _products_of_whole_shards, _partial_products, index_constant; plus
VerifyResult.stats (lemma_hits, labels_first, partial, narrowed, reused_results = memo hits, held_searches).

HELD-OUT SPLIT (fixed before any result was looked at):
  * families: OWN_FAMILIES = tp_mlp, dp_grad, gqa_repeat, stacked, index_mask, elementwise, relayout, scores;
    HELD_OUT_FAMILIES = seq_parallel, expert_parallel -- never drawn in the own part (do not use them while fixing);
  * seeds: the own part's pair k of ``--seed S`` has seed S * 1_000_000 + k (S < 1000: seeds below 10^9); the
    held-out part's has 1_000_000_000 + S * 1_000_000 + k (a disjoint range). The held-out part draws all ten
    families (the two held-out ones with probability 0.4 together), the own part only the own families.
  Every summary line is given per part.

Bad cases (unsound, false alarm, crash, timeout, input-error, gen-bug) are written as self-contained reproducers
(the graphs as JSON, the relation's text, the caps forced, a numerical check of R_o) to
bench/out/verifier_fuzz_cases/<class>-<family>-<seed>-<run>.py. ``--pair PART:SEED`` re-runs one pair in-process.

The known classes of issue 39 stay in the generator until fixed: ``stacked`` with block ``mask`` (a layer's scatter
value changed: /tmp/gg/repro1.py, memo reuse ignoring an index constant's value) and ``gqa_repeat`` subtype
``contraction`` wrong ``mixed_repeat`` (concat(x, y) @ concat(y, x) against X = concat(x, x), Y = concat(y, y):
/tmp/gg/repro2.py, products on positions accepting repeated labels).
"""
from __future__ import annotations

import argparse
import collections
import copy
import inspect
import json
import os
import resource
import selectors
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CASES = ROOT / "bench" / "out" / "verifier_fuzz_cases"

OWN_FAMILIES = ["tp_mlp", "dp_grad", "gqa_repeat", "stacked", "index_mask", "elementwise", "relayout", "scores"]
HELD_OUT_FAMILIES = ["seq_parallel", "expert_parallel"]
HELD_OUT_BASE = 1_000_000_000
MAX_CASES = 3  # reproducers written per (class, family, wrong variant, subtype)

# caps forced low in the second run of a pair: (group, name, low value). The group is where the engine defines
# the cap: "labels" = graphguard/engine/relayout.py or, since its split, graphguard/engine/labels/*.py; a cap is
# patched in every module of its group that holds that name (a module importing it by name included); "infer" is
# graphguard/engine/infer.py and the modules split off it (frontier.py, deferral.py, ...).
LOW_CAPS = [
    ("labels", "MAX_PRODUCT_TERMS", 0), ("labels", "MAX_PRODUCT_LABELS", 30), ("labels", "MAX_PRODUCT_CHUNK", 1),
    ("labels", "MAX_MOVED", 8), ("labels", "MAX_MOVED_FORMS", 1), ("labels", "MAX_ALIAS_STEPS", 0),
    ("labels", "MAX_ELEMENTWISE", 8), ("labels", "MAX_SUMMED", 8), ("labels", "MAX_POLY_ENTRIES", 8),
    ("labels", "MAX_MONOMIALS", 8), ("labels", "MAX_COUNTERPARTS", 1), ("labels", "MAX_PROPAGATED", 2),
    ("labels", "MAX_CHUNKS", 2), ("labels", "MAX_PERMUTED_RANK", 1),
    ("infer", "MAX_INDEX_ANCESTRY", 1), ("infer", "MAX_CONSTANT_TERM", 2), ("infer", "MAX_HOPS", 0),
    ("infer", "MAX_DEFERRED", 0), ("memo", "MAX_ENTRIES", 1),
]
# (labels' MAX_ENTRIES is not forced: it is bound as the default of labelled(..., limit=MAX_ENTRIES) at import,
# so patching the module constant changes nothing)

# which size of a pair a cap bounds (approximately: the engine applies each to one problem, we take the largest)
CAP_METRICS = {
    "labels.MAX_PRODUCT_TERMS": "product_terms", "labels.MAX_PRODUCT_CHUNK": "product_terms",
    "labels.MAX_MONOMIALS": "product_terms", "labels.MAX_PRODUCT_LABELS": "d_input_entries",
    "labels.MAX_MOVED": "max_entries", "labels.MAX_ELEMENTWISE": "max_entries",
    "labels.MAX_SUMMED": "max_entries", "labels.MAX_POLY_ENTRIES": "max_entries",
    "labels.MAX_ENTRIES": "d_input_entries", "labels.MAX_COUNTERPARTS": "same_op_d",
    "labels.MAX_PROPAGATED": "n_d_nodes", "labels.MAX_PERMUTED_RANK": "max_rank",
    "infer.MAX_INDEX_ANCESTRY": "index_chain", "infer.MAX_CONSTANT_TERM": "index_chain",
    "memo.MAX_ENTRIES": "layers",
}

ENTRY_POINTS = ["movement_first", "products_first", "elementwise_outputs", "sum_outputs", "relayouts",
                "moved_outputs", "rows_through", "summed_outputs", "_products_by_positions",
                "_products_of_whole_shards", "_partial_products", "index_constant"]
STAT_KEYS = ["labels_first", "partial", "narrowed", "reused_results", "held_searches", "held_budget"]


# ======================================================================================================
# building pairs
# ======================================================================================================

def aux(name: str, tag: str) -> str:
    """Another tensor name of the same rank: ``h@1`` -> ``h_tag@1``."""
    if "@" in name:
        base, r = name.split("@")
        return f"{base}_{tag}@{r}"
    return f"{name}_{tag}"


def cat(names, dim: int) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else f"concat({', '.join(names)}, dim={dim})"


def rep(names) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else "[" + ", ".join(names) + "]"


class Pair:
    """One pair under construction: G_s (``s``), G_d (``d``), the relation's lines, the intended R_o."""

    def __init__(self, family: str, seed: int, part: str, W: int, rng: np.random.Generator):
        from graphguard.ir.builder import GraphBuilder
        self.family, self.seed, self.part, self.W, self.rng = family, seed, part, W, rng
        self.s = GraphBuilder("spec")
        self.d = GraphBuilder("impl", world_size=W)
        self.rel: dict[str, str] = {}
        self.intended: dict[str, str] = {}
        self.wrong: str | None = None  # the wrong variant's kind (None: correct)
        self.meta: dict = {"index_chain": 0, "layers": 1}
        self.dialect = "aten"

    def relation_text(self) -> str:
        return "inputs:\n" + "".join(f"  {k}: {v}\n" for k, v in self.rel.items())

    def choose_wrong(self, kinds: list[str], p_wrong: float):
        """Pick a wrong variant among ``kinds`` (those this pair can have) with probability ``p_wrong``."""
        if kinds and self.rng.random() < p_wrong:
            self.wrong = str(self.rng.choice(kinds))
        return self.wrong


# -- op spellings in the two dialects ---------------------------------------------------------------------------

UNARY_ATEN = {"exp": "aten.exp", "tanh": "aten.tanh", "sigmoid": "aten.sigmoid", "neg": "aten.neg",
              "relu": "aten.relu", "silu": "aten.silu", "gelu": "aten.gelu"}
UNARY_HLO = {"exp": "hlo.exponential", "tanh": "hlo.tanh", "sigmoid": "hlo.logistic", "neg": "hlo.negate"}
BINARY = {"add": ("aten.add.Tensor", "hlo.add"), "sub": ("aten.sub.Tensor", "hlo.subtract"),
          "mul": ("aten.mul.Tensor", "hlo.multiply"), "max": ("aten.maximum", "hlo.maximum")}


def const(b, name, shape, value, dialect):
    if dialect == "hlo":
        b.op("hlo.constant", [], name, shape=list(shape), value=float(value), dtype="float32")
    else:
        b.op("aten.full", [], name, size=list(shape), fill_value=float(value), dtype="float32")
    return name


def unary(b, kind, x, out, dialect, shape):
    if dialect == "aten" or kind == "gelu":
        b.op(UNARY_ATEN[kind], [x], out)
    elif kind == "relu":
        b.op("hlo.maximum", [x, const(b, aux(out, "zero"), shape, 0.0, "hlo")], out)
    elif kind == "silu":
        b.op("hlo.logistic", [x], aux(out, "lg"))
        b.op("hlo.multiply", [x, aux(out, "lg")], out)
    else:
        b.op(UNARY_HLO[kind], [x], out)
    return out


def binary(b, kind, x, y, out, dialect):
    b.op(BINARY[kind][dialect == "hlo"], [x, y], out)
    return out


def scale(b, x, out, c, dialect, shape):
    if dialect == "hlo":
        b.op("hlo.multiply", [x, const(b, aux(out, "c"), shape, c, "hlo")], out)
    else:
        b.op("aten.mul.Scalar", [x], out, other=float(c))
    return out


def matmul(b, x, w, out, dialect, transposed=False):
    """out = x @ w ([N, K] x [K, H]); ``transposed`` (XLA): dot(w, x) contracting w's dim 0 -> [H, N], permuted."""
    if dialect == "aten":
        b.op("aten.mm", [x, w], out)
    elif not transposed:
        b.op("hlo.dot", [x, w], out, lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0])
    else:
        b.op("hlo.dot", [w, x], aux(out, "t"), lhs_batch=[], rhs_batch=[], lhs_contracting=[0], rhs_contracting=[1])
        b.op("core.permute", [aux(out, "t")], out, dims=[1, 0])
    return out


def pick_unary(rng, dialect, linear_ok=True):
    kinds = ["exp", "tanh", "sigmoid", "relu", "silu"] + (["neg"] if linear_ok else [])
    if dialect == "aten":
        kinds.append("gelu")
    return str(rng.choice(kinds))


def size_class(rng) -> str:
    return str(rng.choice(["small", "medium", "large"], p=[0.62, 0.3, 0.08]))


def dim(rng, cls, small=(1, 5), medium=(6, 16), large=(40, 64)) -> int:
    lo, hi = {"small": small, "medium": medium, "large": large}[cls]
    return int(rng.integers(lo, hi + 1))


def R(name, r):
    return f"{name}@{r}"


# -- families -----------------------------------------------------------------------------------------------------

def fam_tp_mlp(p: Pair):
    """Megatron MLP: Y = act(X @ A [+/- bias]) (@ B). Column-parallel A, row-parallel B, then all-reduce or
    reduce-scatter; or column-parallel only, all-gathered or left as the ranks' columns."""
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    cls = size_class(rng)
    N, K, c, K2 = dim(rng, cls), dim(rng, cls), max(1, dim(rng, cls) // W), dim(rng, cls)
    mode = str(rng.choice(["allreduce", "reduce_scatter", "col_gather", "col_only"]))
    if mode == "reduce_scatter":
        N = W * max(1, N // W)
    H = W * c
    sliced = rng.random() < 0.3
    bias = rng.random() < 0.35
    cs = float(rng.choice([0.5, 2.0, 0.25])) if rng.random() < 0.3 else None  # a scale constant on h
    act = pick_unary(rng, dial)
    transposed = dial == "hlo" and rng.random() < 0.5
    order = list(range(W))
    if rng.random() < 0.3:
        rng.shuffle(order)
    row = mode in ("allreduce", "reduce_scatter")
    kinds = ["factor"]
    if row and W > 1:
        kinds += ["missing_collective", "swapped_rank_order", "avg_reduce"]
    if W > 1 and c > 1:
        kinds.append("off_by_one")
    if bias:
        kinds.append("swapped_operands")
    if cs is not None:
        kinds.append("constant_changed")
    wrong = p.choose_wrong(kinds, 0.5)
    if wrong == "off_by_one":
        sliced = True
    pos = {r: order.index(r) for r in range(W)}
    s, d = p.s, p.d
    s.input("X", [N, K]); s.input("A", [K, H])
    ins = ["X", "A"]
    h = s.op("aten.mm", ["X", "A"], "h")
    if cs is not None:
        h = s.op("aten.mul.Scalar", [h], "hs", other=cs)
    if bias:
        s.input("Bb", [N, H])
        h = s.op("aten.sub.Tensor", [h, "Bb"], "hb")
    g = s.op(UNARY_ATEN[act], [h], "g")
    if row:
        s.input("B", [H, K2])
        s.op("aten.mm", [g, "B"], "Y")
    else:
        s.op("core.identity", [g], "Y")
    s.output("Y")
    b_order = list(order)
    if wrong == "swapped_rank_order":
        i, j = rng.choice(W, size=2, replace=False)
        b_order[i], b_order[j] = b_order[j], b_order[i]
    off_rank = int(rng.integers(W)) if wrong == "off_by_one" else -1
    factor = float(rng.choice([2.0, 0.5]))
    for r in range(W):
        d.input(R("X", r), [N, K])
        if sliced:
            d.input(R("A", r), [K, H])
            st = pos[r] * c + (0 if r != off_rank else (1 if pos[r] < W - 1 else -1))
            a = d.op("core.slice", [R("A", r)], R("As", r), dim=1, start=st, end=st + c)
        else:
            a = d.input(R("A", r), [K, c])
        hd = matmul(d, R("X", r), a, R("h", r), dial, transposed)
        if cs is not None:
            hd = scale(d, hd, R("hs", r), cs if wrong != "constant_changed" else cs * 2, dial, [N, c])
        if bias:
            d.input(R("Bb", r), [N, c])
            xs = [hd, R("Bb", r)] if wrong != "swapped_operands" else [R("Bb", r), hd]
            hd = binary(d, "sub", xs[0], xs[1], R("hb", r), dial)
        gd = unary(d, act, hd, R("g", r), dial, [N, c])
        if wrong == "factor":
            gd = scale(d, gd, R("gf", r), factor, dial, [N, c])
        if row:
            if sliced:
                d.input(R("B", r), [H, K2])
                bb = d.op("core.slice", [R("B", r)], R("Bs", r), dim=0, start=pos[r] * c, end=pos[r] * c + c)
            else:
                bb = d.input(R("B", r), [c, K2])
            matmul(d, gd, bb, R("P", r), dial, transposed and rng.random() < 0.5)
    ranks = list(range(W))
    p.rel["X"] = rep(R("X", r) for r in ranks)
    if sliced:
        p.rel["A"] = rep(R("A", r) for r in ranks)
    else:
        p.rel["A"] = cat((R("A", r) for r in order), 1)
    if bias:
        p.rel["Bb"] = cat((R("Bb", r) for r in order), 1)
    if row:
        p.rel["B"] = rep(R("B", r) for r in ranks) if sliced else cat((R("B", r) for r in b_order), 0)
        if wrong == "missing_collective":
            d.output(*[R("P", r) for r in ranks])
        elif mode == "allreduce":
            d.op("core.all_reduce", [R("P", r) for r in ranks], [R("Y", r) for r in ranks],
                 op="avg" if wrong == "avg_reduce" else "sum", group=ranks)
            d.output(*[R("Y", r) for r in ranks])
            p.intended["Y"] = "Y@0"
        else:
            d.op("core.reduce_scatter", [R("P", r) for r in ranks], [R("Y", r) for r in ranks],
                 op="avg" if wrong == "avg_reduce" else "sum", dim=0, group=ranks)
            d.output(*[R("Y", r) for r in ranks])
            p.intended["Y"] = cat((R("Y", r) for r in ranks), 0)
        if W == 1 and mode == "allreduce":
            p.intended["Y"] = "Y@0"
    elif mode == "col_gather" and W > 1:
        d.op("core.all_gather", [R("g", r) for r in ranks] if wrong != "factor" else [R("gf", r) for r in ranks],
             [R("G", r) for r in ranks], dim=1, group=ranks)
        d.output(*[R("G", r) for r in ranks])
        p.intended["Y"] = cat((f"slice(G@0, dim=1, start={o * c}, end={o * c + c})" for o in order), 1)
    else:
        outs = [R("gf" if wrong == "factor" else "g", r) for r in ranks]
        d.output(*outs)
        p.intended["Y"] = cat((outs[o] for o in order), 1)
    p.meta.update(mode=mode, sliced=sliced, bias=bias, act=act, transposed=transposed, order=order, size=cls)
    del ins


def fam_dp_grad(p: Pair):
    """Data parallel: the weight gradient X^T dY (and the bias gradient, the batch sum of dY) over the batch,
    each rank's share all-reduced (sum, or avg with the local mean), optionally averaged."""
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    cls = size_class(rng)
    b, K, M = dim(rng, cls), dim(rng, cls), dim(rng, cls)
    B = W * b
    mean = rng.random() < 0.6
    strategy = str(rng.choice(["sum_then_scale", "scale_then_sum", "avg"])) if mean else "sum"
    with_bias = rng.random() < 0.5
    order = list(range(W))
    if rng.random() < 0.3:
        rng.shuffle(order)
    kinds = ["factor"]
    if W > 1:
        kinds += ["missing_collective", "swapped_rank_order"]
        if mean:
            kinds.append("wrong_mean")
    wrong = p.choose_wrong(kinds, 0.5)
    s, d = p.s, p.d
    s.input("X", [B, K]); s.input("dY", [B, M])
    s.op("core.permute", ["X"], "Xt", dims=[1, 0])
    s.op("aten.mm", ["Xt", "dY"], "gW0")
    if mean:
        s.op("aten.mul.Scalar", ["gW0"], "gW", other=1.0 / B)
    else:
        s.op("core.identity", ["gW0"], "gW")
    outs_s = ["gW"]
    if with_bias:
        s.op("aten.sum.dim_IntList", ["dY"], "gb0", dim=[0], keepdim=False)
        if mean:
            s.op("aten.mul.Scalar", ["gb0"], "gb", other=1.0 / B)
        else:
            s.op("core.identity", ["gb0"], "gb")
        outs_s.append("gb")
    s.output(*outs_s)
    ranks = list(range(W))
    dy_order = list(order)
    if wrong == "swapped_rank_order":
        i, j = rng.choice(W, size=2, replace=False)
        dy_order[i], dy_order[j] = dy_order[j], dy_order[i]
    p.rel["X"] = cat((R("X", r) for r in order), 0)
    p.rel["dY"] = cat((R("dY", r) for r in dy_order), 0)
    local = {"sum_then_scale": 1.0, "scale_then_sum": 1.0 / B, "avg": 1.0 / b, "sum": 1.0}[strategy]
    after = 1.0 / B if strategy == "sum_then_scale" else 1.0
    if wrong == "wrong_mean":
        local, after = (1.0 / b, 1.0) if strategy != "avg" else (1.0 / B, 1.0)
    if wrong == "factor":
        local *= 2.0
    op = "avg" if strategy == "avg" else "sum"
    for r in ranks:
        d.input(R("X", r), [b, K]); d.input(R("dY", r), [b, M])
        if dial == "hlo":
            d.op("hlo.dot", [R("X", r), R("dY", r)], R("g", r), lhs_batch=[], rhs_batch=[], lhs_contracting=[0],
                 rhs_contracting=[0])
        else:
            d.op("core.permute", [R("X", r)], R("Xt", r), dims=[1, 0])
            d.op("aten.mm", [R("Xt", r), R("dY", r)], R("g", r))
        gl = scale(d, R("g", r), R("gl", r), local, dial, [K, M]) if local != 1.0 else R("g", r)
        if with_bias:
            d.op("aten.sum.dim_IntList", [R("dY", r)], R("b", r), dim=[0], keepdim=False)
            bl = scale(d, R("b", r), R("bl", r), local, "aten", [M]) if local != 1.0 else R("b", r)
    outs = []
    for name, src, shape in [("G", "gl" if local != 1.0 else "g", [K, M])] + \
            ([("Gb", "bl" if local != 1.0 else "b", [M])] if with_bias else []):
        if wrong == "missing_collective":
            fin = [R(src, r) for r in ranks]
        else:
            d.op("core.all_reduce", [R(src, r) for r in ranks], [R(name + "r", r) for r in ranks], op=op, group=ranks)
            fin = [R(name + "r", r) for r in ranks]
        if after != 1.0:
            fin = [scale(d, f, R(name, r), after, dial if name == "G" else "aten", shape) for r, f in zip(ranks, fin)]
        outs.append(fin)
    d.output(*[t for fin in outs for t in fin])
    p.intended["gW"] = outs[0][0]
    if with_bias:
        p.intended["gb"] = outs[1][0]
    p.meta.update(strategy=strategy, bias=with_bias, order=order, size=cls)


def fam_gqa_repeat(p: Pair):
    """Grouped-query attention: the same label repeated along a contraction (X = concat(x@0, x@0, dim=1) against
    a product of the repeated operands) and HF's repeat_kv (expand of the KV heads) against each rank's
    broadcast of its own heads."""
    rng = p.rng
    if rng.random() < 0.45:
        return _gqa_contraction(p)
    return _gqa_repeat_kv(p)


def _gqa_contraction(p: Pair):
    rng = p.rng
    p.W = 1
    p.d.doc["world_size"] = 1
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    cls = str(rng.choice(["small", "large"], p=[0.8, 0.2]))
    g = int(rng.choice([2, 3]))
    if cls == "large" and rng.random() < 0.6:  # repro2's shape: XLA's dot of two repeats (products_first)
        p.dialect, dial, g = "hlo", "hlo", 2
    square = rng.random() < 0.6
    if square:
        N = K = M = dim(rng, cls, small=(2, 6), large=(33, 40))
    else:
        N, K, M = dim(rng, cls, (1, 6), large=(30, 40)), dim(rng, cls, (1, 6), large=(30, 40)), \
            dim(rng, cls, (1, 6), large=(30, 40))
    act = str(rng.choice(["exp", "tanh", "none"])) if rng.random() < 0.5 else "none"
    kinds = ["missing_factor"] + (["mixed_repeat", "transposed_copy"] if square else [])
    if square and cls == "large":  # repro2's class: products on positions, above MAX_PRODUCT_TERMS (2 N^3)
        kinds = ["mixed_repeat"] * 4 + kinds
    wrong = p.choose_wrong(kinds, 0.5)
    spelling = str(rng.choice(["concat", "scaled"])) if wrong is None else "concat"
    s, d = p.s, p.d
    s.input("X", [N, g * K]); s.input("Y", [g * K, M])
    s.op("aten.mm", ["X", "Y"], "Z")
    if act != "none":
        s.op(UNARY_ATEN[act], ["Z"], "O")
    else:
        s.op("core.identity", ["Z"], "O")
    s.output("O")
    d.input("x@0", [N, K]); d.input("y@0", [K, M])
    if spelling == "scaled" or wrong == "missing_factor":
        matmul(d, "x@0", "y@0", "m@0", dial)
        z = scale(d, "m@0", "Z@0", float(g), dial, [N, M]) if wrong != "missing_factor" else "m@0"
    else:
        xs = ["x@0"] * g
        ys = ["y@0"] * g
        if wrong == "mixed_repeat":  # repro2: concat(x, y) @ concat(y, x)
            xs = ["x@0" if i % 2 == 0 else "y@0" for i in range(g)]
            ys = ["y@0" if i % 2 == 0 else "x@0" for i in range(g)]
        elif wrong == "transposed_copy":
            d.op("core.permute", ["y@0"], "yt@0", dims=[1, 0])
            ys = ["y@0"] * (g - 1) + ["yt@0"]
        d.op("core.concat", xs, "A@0", dim=1)
        d.op("core.concat", ys, "B@0", dim=0)
        z = matmul(d, "A@0", "B@0", "Z@0", dial)
    if act != "none":
        unary(d, act, z, "O@0", dial, [N, M])
    else:
        d.op("core.identity", [z], "O@0")
    d.output("O@0")
    p.rel["X"] = cat(["x@0"] * g, 1)
    p.rel["Y"] = cat(["y@0"] * g, 0)
    p.intended["O"] = "O@0"
    p.meta.update(subtype="contraction", g=g, square=square, spelling=spelling, size=cls)


def _gqa_repeat_kv(p: Pair):
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    D, S, T = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(1, 5))
    g = int(rng.choice([1, 2, 3]))
    if rng.random() < 0.3 and W > 1:  # fewer KV heads than ranks: replicas
        Hkv = int(rng.choice([h for h in (1, 2) if W % h == 0 and W > h]))
        g = (W // Hkv) * int(rng.integers(1, 3))
        replicated = True
    else:
        Hkv = W * int(rng.integers(1, 3))
        replicated = False
    Hq = Hkv * g
    hq = Hq // W
    hkv = 1 if replicated else Hkv // W
    kinds = []
    if hkv > 1 and g > 1:
        kinds += ["repeat_not_interleave", "first_head_only"]
    if W > 1 and (not replicated or Hkv > 1):
        kinds.append("swapped_rank_order")
    kinds.append("factor")
    wrong = p.choose_wrong(kinds, 0.5)
    softmax = rng.random() < 0.4
    s, d = p.s, p.d
    s.input("Q", [S, Hq, D]); s.input("K", [T, Hkv, D])
    s.op("core.reshape", ["K"], "K1", shape=[T, Hkv, 1, D])
    s.op("aten.expand", ["K1"], "K2", size=[T, Hkv, g, D])
    s.op("core.reshape", ["K2"], "Kr", shape=[T, Hq, D])
    s.op("core.permute", ["Q"], "qp", dims=[1, 0, 2])
    s.op("core.permute", ["Kr"], "kp", dims=[1, 2, 0])
    s.op("aten.bmm", ["qp", "kp"], "sc")
    if softmax:
        s.op("aten._softmax", ["sc"], "Z", dim=2, half_to_float=False)
    else:
        s.op("aten.exp", ["sc"], "Z")
    s.output("Z")
    ranks = list(range(W))
    for r in ranks:
        d.input(R("Q", r), [S, hq, D]); d.input(R("K", r), [T, hkv, D])
        k = R("K", r)
        hk = hkv
        if wrong == "first_head_only":
            d.op("core.slice", [k], R("K0", r), dim=1, start=0, end=1)
            d.op("core.concat", [R("K0", r)] * hkv, R("Kf", r), dim=1)
            k = R("Kf", r)
        if replicated:  # one KV head for all the rank's query heads
            shape4, dims_b = [T, 1, hq, D], [0, 1, 3]
        elif wrong == "repeat_not_interleave":  # torch's repeat (heads h, h + hk, ...) for repeat_interleave
            shape4, dims_b = [T, g, hk, D], [0, 2, 3]
        else:
            shape4, dims_b = [T, hk, g, D], [0, 1, 3]
        if dial == "hlo":
            d.op("hlo.broadcast", [k], R("Kb", r), shape=shape4, dimensions=dims_b)
        else:
            if wrong == "repeat_not_interleave":
                d.op("core.reshape", [k], R("K1", r), shape=[T, 1, hk, D])
            else:
                d.op("core.reshape", [k], R("K1", r), shape=[T, hk, 1, D])
            d.op("aten.expand", [R("K1", r)], R("Kb", r), size=shape4)
        d.op("core.reshape", [R("Kb", r)], R("Kr", r), shape=[T, hq, D])
        if dial == "hlo":
            d.op("hlo.dot", [R("Q", r), R("Kr", r)], R("sc", r), lhs_batch=[1], rhs_batch=[1], lhs_contracting=[2],
                 rhs_contracting=[2])
        else:
            d.op("core.permute", [R("Q", r)], R("qp", r), dims=[1, 0, 2])
            d.op("core.permute", [R("Kr", r)], R("kp", r), dims=[1, 2, 0])
            d.op("aten.bmm", [R("qp", r), R("kp", r)], R("sc", r))
        scd = R("sc", r)
        if wrong == "factor":
            scd = scale(d, scd, R("scf", r), 2.0, dial, [hq, S, T])
        if softmax:
            d.op("aten._softmax", [scd], R("Z", r), dim=2, half_to_float=False)
        else:
            unary(d, "exp", scd, R("Z", r), dial, [hq, S, T])
    d.output(*[R("Z", r) for r in ranks])
    p.rel["Q"] = cat((R("Q", r) for r in ranks), 1)
    if replicated:
        reps = W // Hkv  # ranks per KV head: rank r holds head r // reps
        forms = []
        for i in range(reps):
            holders = [h * reps + i for h in range(Hkv)]
            if wrong == "swapped_rank_order" and i == reps - 1:
                holders = holders[::-1]
            forms.append(cat((R("K", x) for x in holders), 1))
        p.rel["K"] = "[" + ", ".join(f'"{f}"' for f in forms) + "]" if len(forms) > 1 else forms[0]
    else:
        kord = ranks[::-1] if wrong == "swapped_rank_order" else ranks
        p.rel["K"] = cat((R("K", r) for r in kord), 1)
    p.intended["Z"] = cat((R("Z", r) for r in ranks), 0)
    p.meta.update(subtype="repeat_kv", Hq=Hq, Hkv=Hkv, g=g, replicated=replicated, softmax=softmax)


def _mask_recipe(b, rng_choice, C, c, out, dialect, value=1.0, chain=0):
    """A [1, C] bool mask "column < c" (``c == C``: all true) built by one of several recipes, through ``chain``
    pairs of reshapes (an index constant's ancestry). Returns the recipe's name."""
    name = aux(out, "m")
    kind = rng_choice
    if kind == "full" and c == C and value != 0.0:
        b.op("aten.full", [], aux(name, "f"), size=[C], fill_value=1, dtype="bool")
        src = aux(name, "f")
    elif kind == "iota" and dialect == "hlo":
        b.op("hlo.iota", [], aux(name, "io"), shape=[C], dimension=0, dtype="int64")
        b.op("hlo.constant", [], aux(name, "cc"), shape=[C], value=float(c), dtype="int64")
        b.op("hlo.compare", [aux(name, "io"), aux(name, "cc")], aux(name, "f"), direction="LT")
        src = aux(name, "f")
    elif kind == "topk":
        b.op("aten.arange", [], aux(name, "ar"), end=C, dtype=None)
        b.op("aten.neg", [aux(name, "ar")], aux(name, "ng"))
        b.op("aten.topk", [aux(name, "ng")], [aux(name, "tv"), aux(name, "ti")], k=max(c, 1), dim=-1, largest=True,
             sorted=True)
        b.op("aten.full", [], aux(name, "z"), size=[C], fill_value=0.0, dtype="float32")
        b.op("aten.scatter.value", [aux(name, "z"), aux(name, "ti")], aux(name, "sc"), dim=0,
             value=float(value if c > 0 else 0.0))
        b.op("aten._to_copy", [aux(name, "sc")], aux(name, "f"), dtype="bool")
        src = aux(name, "f")
        kind = "topk"
    elif kind == "ge_not":
        b.op("aten.arange", [], aux(name, "ar"), end=C, dtype=None)
        b.op("aten.ge.Scalar", [aux(name, "ar")], aux(name, "ge"), other=c)
        b.op("aten.logical_not", [aux(name, "ge")], aux(name, "f"))
        src = aux(name, "f")
    else:
        kind = "lt"
        b.op("aten.arange", [], aux(name, "ar"), end=C, dtype=None)
        b.op("aten.lt.Scalar", [aux(name, "ar")], aux(name, "f"), other=c)
        src = aux(name, "f")
    for i in range(chain):
        b.op("core.reshape", [src], aux(name, f"ch{i}a"), shape=[C, 1])
        b.op("core.reshape", [aux(name, f"ch{i}a")], aux(name, f"ch{i}b"), shape=[C])
        src = aux(name, f"ch{i}b")
    b.op("core.reshape", [src], out, shape=[1, C])
    return kind


def fam_stacked(p: Pair):
    """2-4 copies of one block (sometimes 9-10), to exercise layer reuse (memo): a TP MLP with a residual, a
    masked select on an index constant (the repro1 shape), or a scaled elementwise step. Wrong: one layer's
    constant (or collective, or shard order) differs."""
    rng, W = p.rng, p.W
    L = int(rng.choice([2, 3, 4])) if rng.random() < 0.9 else int(rng.choice([9, 10]))
    block = str(rng.choice(["mlp", "mask", "scale"], p=[0.35, 0.4, 0.25]))
    p.dialect = dial = str(rng.choice(["aten", "hlo"])) if block != "mask" else "aten"
    per_layer_out = rng.random() < 0.5
    kinds = ["constant_changed"]
    if block == "mlp" and W > 1:
        kinds += ["missing_collective", "swapped_rank_order"]
    wrong = p.choose_wrong(kinds, 0.5)
    bad = int(rng.integers(1, L)) if rng.random() < 0.85 else 0  # the layer that differs
    s, d = p.s, p.d
    ranks = list(range(W))
    p.meta.update(block=block, layers=L, bad_layer=bad if wrong else None)
    if block == "mlp":
        N, K, c = int(rng.integers(1, 5)), int(rng.integers(1, 5)), int(rng.integers(1, 3))
        H = W * c
        act = pick_unary(rng, dial, linear_ok=False)
        cs = float(rng.choice([0.5, 2.0]))
        s.input("h0", [N, K])
        for r in ranks:
            d.input(R("h0", r), [N, K])
        p.rel["h0"] = rep(R("h0", r) for r in ranks)
        hs, hd = "h0", [R("h0", r) for r in ranks]
        outs_s, outs_d = [], []
        for l in range(L):
            s.input(f"A{l}", [K, H]); s.input(f"B{l}", [H, K])
            s.op("aten.mm", [hs, f"A{l}"], f"u{l}")
            s.op(UNARY_ATEN[act], [f"u{l}"], f"v{l}")
            s.op("aten.mm", [f"v{l}", f"B{l}"], f"w{l}")
            s.op("aten.mul.Scalar", [f"w{l}"], f"ws{l}", other=cs)
            s.op("aten.add.Tensor", [hs, f"ws{l}"], f"h{l + 1}")
            hs = f"h{l + 1}"
            border = ranks[::-1] if (wrong == "swapped_rank_order" and l == bad) else ranks
            p.rel[f"A{l}"] = cat((R(f"A{l}", r) for r in ranks), 1)
            p.rel[f"B{l}"] = cat((R(f"B{l}", r) for r in border), 0)
            ws = []
            for r in ranks:
                d.input(R(f"A{l}", r), [K, c]); d.input(R(f"B{l}", r), [c, K])
                matmul(d, hd[r], R(f"A{l}", r), R(f"u{l}", r), dial)
                unary(d, act, R(f"u{l}", r), R(f"v{l}", r), dial, [N, c])
                matmul(d, R(f"v{l}", r), R(f"B{l}", r), R(f"w{l}", r), dial)
                cl = cs * 2 if (wrong == "constant_changed" and l == bad) else cs
                ws.append(scale(d, R(f"w{l}", r), R(f"ws{l}", r), cl, dial, [N, K]))
            if wrong == "missing_collective" and l == bad:
                red = ws
            else:
                d.op("core.all_reduce", ws, [R(f"wr{l}", r) for r in ranks], op="sum", group=ranks)
                red = [R(f"wr{l}", r) for r in ranks]
            hd = [binary(d, "add", hd[r], red[r], R(f"h{l + 1}", r), dial) for r in ranks]
            if per_layer_out or l == L - 1:
                outs_s.append(hs)
                outs_d += hd
                p.intended[hs] = hd[0]
        s.output(*outs_s)
        d.output(*outs_d)
        return
    if block == "mask":
        n, C = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        recipe = str(rng.choice(["topk_input", "topk", "lt", "ge_not", "full"]))
        c = C if (recipe in ("topk_input", "full") or rng.random() < 0.4) else int(rng.integers(1, C))
        chained = rng.random() < 0.4
        outs_s, outs_d = [], []
        full_s = c == C and rng.random() < 0.7  # G_s's mask a bool fill per layer (repro1), or arange < c once
        if not full_s:
            s.op("aten.arange", [], "mar", end=C, dtype=None)
            s.op("aten.lt.Scalar", ["mar"], "mlt", other=c)
            s.op("core.reshape", ["mlt"], "M", shape=[1, C])
        prev_s, prev_d = None, [None] * W
        for l in range(L):
            if full_s:
                s.op("aten.full", [], f"M{l}", size=[1, C], fill_value=1, dtype="bool")
            s.input(f"A{l}", [W * n, C]); s.input(f"B{l}", [W * n, C])
            a = f"A{l}"
            if chained and prev_s is not None:
                s.op("aten.add.Tensor", [a, prev_s], f"Ac{l}")
                a = f"Ac{l}"
            s.op("aten.where.self", [f"M{l}" if full_s else "M", a, f"B{l}"], f"O{l}")
            prev_s = f"O{l}"
            p.rel[f"A{l}"] = cat((R(f"A{l}", r) for r in ranks), 0)
            p.rel[f"B{l}"] = cat((R(f"B{l}", r) for r in ranks), 0)
            if recipe == "topk_input":
                s.input(f"X{l}", [1, C])
                p.rel[f"X{l}"] = rep(R(f"X{l}", r) for r in ranks)
            value = 0.0 if (wrong == "constant_changed" and l == bad) else 1.0
            cl = c
            for r in ranks:
                d.input(R(f"A{l}", r), [n, C]); d.input(R(f"B{l}", r), [n, C])
                if recipe == "topk_input":  # repro1: topk of an input with k = C, scattered: a constant mask
                    d.input(R(f"X{l}", r), [1, C])
                    d.op("aten.topk", [R(f"X{l}", r)], [R(f"tv{l}", r), R(f"ti{l}", r)], k=C, dim=-1, largest=True,
                         sorted=True)
                    d.op("aten.full", [], R(f"z{l}", r), size=[1, C], fill_value=0.0, dtype="float32")
                    d.op("aten.scatter.value", [R(f"z{l}", r), R(f"ti{l}", r)], R(f"sc{l}", r), dim=1, value=value)
                    d.op("aten._to_copy", [R(f"sc{l}", r)], R(f"M{l}", r), dtype="bool")
                else:
                    if wrong == "constant_changed" and l == bad and recipe != "topk":
                        cl = c - 1 if c > 1 else c + 1
                        if recipe == "full":
                            cl = C - 1
                    _mask_recipe(d, recipe, C, cl, R(f"M{l}", r), "aten", value=value)
                a = R(f"A{l}", r)
                if chained and prev_d[r] is not None:
                    d.op("aten.add.Tensor", [a, prev_d[r]], R(f"Ac{l}", r))
                    a = R(f"Ac{l}", r)
                d.op("aten.where.self", [R(f"M{l}", r), a, R(f"B{l}", r)], R(f"O{l}", r))
                prev_d[r] = R(f"O{l}", r)
            if per_layer_out or l == L - 1 or not chained:
                outs_s.append(f"O{l}")
                outs_d += [R(f"O{l}", r) for r in ranks]
                p.intended[f"O{l}"] = cat((R(f"O{l}", r) for r in ranks), 0)
        s.output(*outs_s)
        d.output(*outs_d)
        p.meta.update(recipe=recipe, c=c, C=C, chained=chained, full_s=full_s)
        return
    # scale: h_{l+1} = act(h_l * c) + b_l over row-sharded tensors
    n, C = int(rng.integers(1, 5)), int(rng.integers(1, 6))
    act = pick_unary(rng, dial)
    cs = float(rng.choice([0.5, 2.0, 3.0]))
    s.input("h0", [W * n, C])
    p.rel["h0"] = cat((R("h0", r) for r in ranks), 0)
    hs, hd = "h0", []
    for r in ranks:
        hd.append(d.input(R("h0", r), [n, C]))
    outs_s, outs_d = [], []
    for l in range(L):
        s.input(f"b{l}", [W * n, C])
        p.rel[f"b{l}"] = cat((R(f"b{l}", r) for r in ranks), 0)
        s.op("aten.mul.Scalar", [hs], f"m{l}", other=cs)
        s.op(UNARY_ATEN[act], [f"m{l}"], f"a{l}")
        s.op("aten.add.Tensor", [f"a{l}", f"b{l}"], f"h{l + 1}")
        hs = f"h{l + 1}"
        for r in ranks:
            d.input(R(f"b{l}", r), [n, C])
            cl = cs + 1.0 if (wrong == "constant_changed" and l == bad) else cs
            scale(d, hd[r], R(f"m{l}", r), cl, dial, [n, C])
            unary(d, act, R(f"m{l}", r), R(f"a{l}", r), dial, [n, C])
            hd[r] = binary(d, "add", R(f"a{l}", r), R(f"b{l}", r), R(f"h{l + 1}", r), dial)
        if per_layer_out or l == L - 1:
            outs_s.append(hs)
            outs_d += list(hd)
            p.intended[hs] = cat(hd, 0)
    s.output(*outs_s)
    d.output(*outs_d)


def fam_index_mask(p: Pair):
    """Index constants: a where/select on a constant column mask built by different recipes (arange < c, not >=,
    topk + scatter, hlo iota/compare, full), through chains of reshapes either side of MAX_INDEX_ANCESTRY; or rows
    gathered at a constant permutation after an all-gather. Wrong: the constant's value changed."""
    rng, W = p.rng, p.W
    if rng.random() < 0.35:
        return _gather_const(p)
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    n, C = int(rng.integers(1, 5)), int(rng.integers(2, 8))
    c = int(rng.integers(1, C + 1))
    layout = str(rng.choice(["row", "rep"]))
    fill_const = rng.random() < 0.5
    fill = float(rng.choice([-1.0, 0.0, -30000.0, 2.5]))
    chain = int(rng.choice([0, 0, 1, 2, 15, 16, 17]))
    p.meta["index_chain"] = 2 * chain + 3
    recipe_d = str(rng.choice(["lt", "ge_not", "topk", "iota" if dial == "hlo" else "lt", "full" if c == C else "lt"]))
    recipe_s = str(rng.choice(["lt", "ge_not"]))
    act = pick_unary(rng, dial)
    kinds = ["index_value_changed"]
    if recipe_d == "topk":
        kinds.append("scatter_value_zero")
    if fill_const:
        kinds.append("fill_changed")
    else:
        kinds.append("swapped_operands")
    wrong = p.choose_wrong(kinds, 0.5)
    rows = W * n if layout == "row" else n
    s, d = p.s, p.d
    ranks = list(range(W))
    s.input("X", [rows, C])
    _mask_recipe(s, recipe_s, C, c, "M", "aten", chain=0)
    unary(s, act, "X", "ax", "aten", [rows, C])
    if fill_const:
        s.op("aten.full", [], "F", size=[rows, C], fill_value=fill, dtype="float32")
    else:
        s.input("F", [rows, C])
    s.op("aten.where.self", ["M", "ax", "F"], "O")
    s.op("core.identity", ["O"], "Out")
    s.output("Out")
    cd = c
    if wrong == "index_value_changed":
        cd = c - 1 if c > 1 else c + 1
        if recipe_d == "full":
            recipe_d = "lt"
    for r in ranks:
        d.input(R("X", r), [n, C])
        _mask_recipe(d, recipe_d, C, cd, R("M", r), dial, value=0.0 if wrong == "scatter_value_zero" else 1.0,
                     chain=chain)
        unary(d, act, R("X", r), R("ax", r), dial, [n, C])
        if fill_const:
            const(d, R("F", r), [n, C], fill if wrong != "fill_changed" else fill + 1.0, dial)
        else:
            d.input(R("F", r), [n, C])
        xs = [R("ax", r), R("F", r)] if wrong != "swapped_operands" else [R("F", r), R("ax", r)]
        if dial == "hlo":
            d.op("hlo.broadcast", [R("M", r)], R("Mb", r), shape=[n, C], dimensions=[0, 1])
            d.op("hlo.select", [R("Mb", r)] + xs, R("O", r))
        else:
            d.op("aten.where.self", [R("M", r)] + xs, R("O", r))
    d.output(*[R("O", r) for r in ranks])
    if layout == "row":
        p.rel["X"] = cat((R("X", r) for r in ranks), 0)
        if not fill_const:
            p.rel["F"] = cat((R("F", r) for r in ranks), 0)
        p.intended["Out"] = cat((R("O", r) for r in ranks), 0)
    else:
        p.rel["X"] = rep(R("X", r) for r in ranks)
        if not fill_const:
            p.rel["F"] = rep(R("F", r) for r in ranks)
        p.intended["Out"] = "O@0"
    p.meta.update(subtype="where", recipe_s=recipe_s, recipe_d=recipe_d, c=c, C=C, chain=chain, layout=layout)


def _gather_const(p: Pair):
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    a, b = int(rng.integers(1, 4)), int(rng.integers(1, 4))
    N = a * b
    if N % W:
        a = W * a
        N = a * b
    n = N // W
    Dm, c = int(rng.integers(1, 5)), int(rng.integers(1, 4))
    H = W * c
    kinds = ["index_value_changed"] + (["other_permutation"] if a != b and a > 1 and b > 1 else [])
    wrong = p.choose_wrong(kinds, 0.5)
    act = pick_unary(rng, dial, linear_ok=False)
    s, d = p.s, p.d
    ranks = list(range(W))
    s.input("X", [N, Dm]); s.input("Wt", [Dm, H])
    # G_s: the permutation as arange -> [a, b] -> transposed -> flat
    s.op("aten.arange", [], "ar", end=N, dtype=None)
    s.op("core.reshape", ["ar"], "ar2", shape=[a, b])
    s.op("core.permute", ["ar2"], "ar3", dims=[1, 0])
    s.op("core.reshape", ["ar3"], "I", shape=[N])
    s.op("aten.index_select", ["X", "I"], "G", dim=0)
    s.op("aten.mm", ["G", "Wt"], "Y")
    s.op(UNARY_ATEN[act], ["Y"], "Z")
    s.output("Z")
    for r in ranks:
        d.input(R("X", r), [n, Dm]); d.input(R("Wt", r), [Dm, c])
    d.op("core.all_gather", [R("X", r) for r in ranks], [R("G", r) for r in ranks], dim=0, group=ranks)
    for r in ranks:
        if wrong == "index_value_changed":
            d.op("aten.full", [], R("I", r), size=[N], fill_value=0, dtype="int64")
        else:
            d.op("aten.arange", [], R("ar", r), end=N, dtype=None)
            shp = [b, a] if wrong == "other_permutation" else [a, b]
            d.op("core.reshape", [R("ar", r)], R("ar2", r), shape=shp)
            d.op("core.permute", [R("ar2", r)], R("ar3", r), dims=[1, 0])
            d.op("core.reshape", [R("ar3", r)], R("I", r), shape=[N])
        d.op("aten.index_select", [R("G", r), R("I", r)], R("P", r), dim=0)
        matmul(d, R("P", r), R("Wt", r), R("Y", r), dial)
        unary(d, act, R("Y", r), R("Z", r), dial, [N, c])
    d.output(*[R("Z", r) for r in ranks])
    p.rel["X"] = cat((R("X", r) for r in ranks), 0)
    p.rel["Wt"] = cat((R("Wt", r) for r in ranks), 1)
    p.intended["Z"] = cat((R("Z", r) for r in ranks), 1)
    p.meta.update(subtype="gather", a=a, b=b)


def fam_elementwise(p: Pair):
    """Elementwise chains over sharded (rows, columns, transposed rows) or replicated tensors, in either dialect,
    ending sometimes in a row softmax or a row sum; sizes up to past MAX_ELEMENTWISE."""
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    cls = size_class(rng)
    layout = str(rng.choice(["row", "col", "rep", "trow"]))
    if cls == "large":
        Rr, C = W * int(rng.integers(16, 129)), int(rng.integers(500, 1100))
        if rng.random() < 0.5:
            Rr, C = W * (540_000 // (W * 1024) + 1), 1024  # past MAX_ELEMENTWISE (524288 entries)
    else:
        Rr, C = W * dim(rng, cls, (1, 4), (4, 12)), dim(rng, cls, (1, 6), (6, 24))
        if layout == "col":
            C = W * max(1, C // W)
    if layout == "col" and C % W:
        C = W * max(1, C // W)
    n_in = int(rng.integers(1, 4))
    names = ["X", "Y", "Z"][:n_in]
    steps = []
    for _ in range(int(rng.integers(1, 6))):
        k = str(rng.choice(["unary", "binary", "scale"])) if n_in > 1 else str(rng.choice(["unary", "scale"]))
        if k == "unary":
            steps.append(("unary", pick_unary(rng, dial)))
        elif k == "scale":
            steps.append(("scale", float(rng.choice([0.5, 2.0, -1.5, 3.0]))))
        else:
            steps.append(("binary", str(rng.choice(["add", "sub", "mul", "max"])), str(rng.choice(names[1:]))))
    tail = str(rng.choice(["none", "softmax", "sum"])) if layout in ("row", "rep") else "none"
    kinds = ["constant_changed", "op_changed"]
    if any(st[0] == "binary" and st[1] == "sub" for st in steps):
        kinds.append("swapped_operands")
    if W > 1 and layout != "rep" and n_in > 1:
        kinds.append("swapped_rank_order")
    wrong = p.choose_wrong(kinds, 0.5)
    if wrong == "constant_changed" and not any(st[0] == "scale" for st in steps):
        steps.append(("scale", 2.0))
    bad_step = [i for i, st in enumerate(steps) if
                (wrong == "constant_changed" and st[0] == "scale") or (wrong == "swapped_operands" and st[0] == "binary"
                                                                      and st[1] == "sub")
                or (wrong == "op_changed" and st[0] == "unary")]
    bad_step = int(rng.choice(bad_step)) if bad_step else -1
    if wrong == "op_changed" and bad_step < 0:
        steps.append(("unary", "exp"))
        bad_step = len(steps) - 1
    s, d = p.s, p.d
    ranks = list(range(W))
    local = {"row": [Rr // W, C], "col": [Rr, C // W], "rep": [Rr, C], "trow": [C, Rr // W]}[layout]
    order = list(range(W))
    if rng.random() < 0.3:
        rng.shuffle(order)
    for nm in names:
        s.input(nm, [Rr, C])
        o = list(order)
        if wrong == "swapped_rank_order" and nm == names[-1]:
            i, j = rng.choice(W, size=2, replace=False)
            o[i], o[j] = o[j], o[i]
        if layout == "row":
            p.rel[nm] = cat((R(nm, r) for r in o), 0)
        elif layout == "col":
            p.rel[nm] = cat((R(nm, r) for r in o), 1)
        elif layout == "trow":
            p.rel[nm] = cat((f"permute({R(nm, r)}, dims=[1, 0])" for r in o), 0)
        else:
            p.rel[nm] = rep(R(nm, r) for r in ranks)
        for r in ranks:
            d.input(R(nm, r), local)
    cur_s = "X"
    cur_d = [R("X", r) for r in ranks]
    for i, st in enumerate(steps):
        out = f"e{i}"
        if st[0] == "unary":
            s.op(UNARY_ATEN[st[1]], [cur_s], out)
        elif st[0] == "scale":
            s.op("aten.mul.Scalar", [cur_s], out, other=st[1])
        else:
            s.op(BINARY[st[1]][0], [cur_s, st[2]], out)
        cur_s = out
        for r in ranks:
            o = R(out, r)
            if st[0] == "unary":
                kind = st[1]
                if wrong == "op_changed" and i == bad_step:
                    kind = {"exp": "tanh", "tanh": "sigmoid", "sigmoid": "exp", "neg": "exp", "relu": "silu",
                            "silu": "relu", "gelu": "silu"}[kind]
                unary(d, kind, cur_d[r], o, dial, local)
            elif st[0] == "scale":
                scale(d, cur_d[r], o, st[1] * (2.0 if (wrong == "constant_changed" and i == bad_step) else 1.0),
                      dial, local)
            else:
                xs = [cur_d[r], R(st[2], r)]
                if wrong == "swapped_operands" and i == bad_step:
                    xs = xs[::-1]
                binary(d, st[1], xs[0], xs[1], o, dial)
            cur_d[r] = o
    if tail == "softmax":
        s.op("aten._softmax", [cur_s], "T", dim=1, half_to_float=False)
        for r in ranks:
            d.op("aten._softmax", [cur_d[r]], R("T", r), dim=1, half_to_float=False)
            cur_d[r] = R("T", r)
        cur_s = "T"
    elif tail == "sum":
        s.op("aten.sum.dim_IntList", [cur_s], "T", dim=[1], keepdim=False)
        for r in ranks:
            d.op("aten.sum.dim_IntList", [cur_d[r]], R("T", r), dim=[1], keepdim=False)
            cur_d[r] = R("T", r)
        cur_s = "T"
    s.op("core.identity", [cur_s], "Out")
    s.output("Out")
    d.output(*cur_d)
    if layout == "row":
        p.intended["Out"] = cat((cur_d[r] for r in order), 0)
    elif layout == "col":
        p.intended["Out"] = cat((cur_d[r] for r in order), 1)
    elif layout == "trow":
        p.intended["Out"] = cat((f"permute({cur_d[r]}, dims=[1, 0])" for r in order), 0)
    else:
        p.intended["Out"] = cur_d[0]
    p.meta.update(layout=layout, steps=[list(st) for st in steps], tail=tail, size=cls, shape=[Rr, C])


def fam_relayout(p: Pair):
    """Permutes / reshapes of shards: a column-parallel output viewed as heads and transposed (softmax over the
    head dim), and an all-to-all from sequence to head sharding (softmax over the sequence)."""
    rng, W = p.rng, p.W
    s, d = p.s, p.d
    ranks = list(range(W))
    if rng.random() < 0.6:
        B_, S_, D_ = int(rng.integers(1, 4)), int(rng.integers(1, 4)), int(rng.integers(2, 5))
        hr = int(rng.integers(1, 4))
        H = W * hr
        order = list(range(W))
        if rng.random() < 0.3:
            rng.shuffle(order)
        kinds = ["factor"]
        if hr > 1 and S_ > 1:
            kinds.append("reshape_instead_of_permute")
        if hr > 1 and D_ > 1 and hr != D_:
            kinds.append("heads_dims_swapped")
        wrong = p.choose_wrong(kinds, 0.5)
        tail = str(rng.choice(["softmax", "exp"]))
        s.input("X", [B_, S_, H * D_])
        s.op("core.reshape", ["X"], "V", shape=[B_, S_, H, D_])
        s.op("core.permute", ["V"], "P", dims=[0, 2, 1, 3])
        if tail == "softmax":
            s.op("aten._softmax", ["P"], "Z", dim=3, half_to_float=False)
        else:
            s.op("aten.exp", ["P"], "Z")
        s.output("Z")
        for r in ranks:
            d.input(R("X", r), [B_, S_, hr * D_])
            if wrong == "heads_dims_swapped":
                d.op("core.reshape", [R("X", r)], R("V", r), shape=[B_, S_, D_, hr])
                d.op("core.permute", [R("V", r)], R("P", r), dims=[0, 3, 1, 2])
            elif wrong == "reshape_instead_of_permute":
                d.op("core.reshape", [R("X", r)], R("P", r), shape=[B_, hr, S_, D_])
            else:
                d.op("core.reshape", [R("X", r)], R("V", r), shape=[B_, S_, hr, D_])
                d.op("core.permute", [R("V", r)], R("P", r), dims=[0, 2, 1, 3])
            src = R("P", r)
            if wrong == "factor":
                src = d.op("aten.mul.Scalar", [src], R("Pf", r), other=2.0)
            if tail == "softmax":
                d.op("aten._softmax", [src], R("Z", r), dim=3, half_to_float=False)
            else:
                d.op("aten.exp", [src], R("Z", r))
        d.output(*[R("Z", r) for r in ranks])
        p.rel["X"] = cat((R("X", r) for r in order), 2)
        p.intended["Z"] = cat((R("Z", r) for r in order), 1)
        p.meta.update(subtype="heads", order=order, tail=tail)
        return
    # all-to-all: X [S, H, D] sharded on S -> each rank all heads of its ... -> [S, H/W, D] per rank
    s_, h_, D_ = int(rng.integers(1, 4)), int(rng.integers(1, 3)), int(rng.integers(1, 4))
    S_, H = W * s_, W * h_
    kinds = ["factor"] + (["softmax_before_collective"] if W > 1 else [])
    wrong = p.choose_wrong(kinds, 0.5)
    s.input("X", [S_, H, D_])
    s.op("aten._softmax", ["X"], "Z", dim=0, half_to_float=False)
    s.output("Z")
    for r in ranks:
        d.input(R("X", r), [s_, H, D_])
    src = [R("X", r) for r in ranks]
    if wrong == "softmax_before_collective":
        for r in ranks:
            d.op("aten._softmax", [src[r]], R("Xs", r), dim=0, half_to_float=False)
        src = [R("Xs", r) for r in ranks]
    if W > 1:
        d.op("core.all_to_all", src, [R("A", r) for r in ranks], split_dim=1, concat_dim=0, group=ranks)
        a = [R("A", r) for r in ranks]
    else:
        a = src
    for r in ranks:
        x = a[r]
        if wrong == "factor":
            x = d.op("aten.mul.Scalar", [x], R("Af", r), other=0.5)
        if wrong == "softmax_before_collective":
            d.op("core.identity", [x], R("Z", r))
        else:
            d.op("aten._softmax", [x], R("Z", r), dim=0, half_to_float=False)
    d.output(*[R("Z", r) for r in ranks])
    p.rel["X"] = cat((R("X", r) for r in ranks), 0)
    p.intended["Z"] = cat((R("Z", r) for r in ranks), 1)
    p.meta.update(subtype="all_to_all")


def fam_scores(p: Pair):
    """Attention scores: HF's bmm of views [B * h, S, D] x [B * h, D, T] against each rank's XLA dot with batch
    dims (B, h) over its heads. Wrong: the keys read with B and h swapped (same shapes, other pairs summed)."""
    rng, W = p.rng, p.W
    cls = str(rng.choice(["small", "large"], p=[0.85, 0.15]))
    S_, B_, D_, T_ = dim(rng, cls, (1, 3), large=(20, 32)), int(rng.integers(1, 4)), dim(rng, cls, (1, 4), large=(24, 40)), \
        dim(rng, cls, (1, 4), large=(20, 32))
    hr = int(rng.integers(1, 3))
    H = W * hr
    kinds = ["factor"] + (["batch_heads_swapped"] if B_ > 1 and H > 1 else [])
    wrong = p.choose_wrong(kinds, 0.5)
    key_perm = [2, 1, 3, 0] if wrong == "batch_heads_swapped" else [1, 2, 3, 0]
    p.dialect = dial = str(rng.choice(["aten", "hlo"], p=[0.3, 0.7]))
    s, d = p.s, p.d
    ranks = list(range(W))
    s.input("Q", [S_, B_, H, D_]); s.input("K", [T_, B_, H, D_])
    s.op("core.permute", ["Q"], "qp", dims=[1, 2, 0, 3])
    s.op("core.reshape", ["qp"], "qv", shape=[B_ * H, S_, D_])
    if wrong == "batch_heads_swapped":
        s.op("core.permute", ["K"], "kp", dims=key_perm)  # [H, B, D, T]
    else:
        s.op("core.permute", ["K"], "kp", dims=key_perm)
    s.op("core.reshape", ["kp"], "kv", shape=[B_ * H, D_, T_])
    s.op("aten.bmm", ["qv", "kv"], "sc")
    s.op("aten.exp", ["sc"], "Z")
    s.output("Z")
    for r in ranks:
        d.input(R("Q", r), [S_, B_, hr, D_]); d.input(R("K", r), [T_, B_, hr, D_])
        if dial == "hlo":
            d.op("hlo.dot", [R("Q", r), R("K", r)], R("sc", r), lhs_batch=[1, 2], rhs_batch=[1, 2],
                 lhs_contracting=[3], rhs_contracting=[3])
        else:
            d.op("core.permute", [R("Q", r)], R("qp", r), dims=[1, 2, 0, 3])
            d.op("core.reshape", [R("qp", r)], R("qv", r), shape=[B_ * hr, S_, D_])
            d.op("core.permute", [R("K", r)], R("kp", r), dims=[1, 2, 3, 0])
            d.op("core.reshape", [R("kp", r)], R("kv", r), shape=[B_ * hr, D_, T_])
            d.op("aten.bmm", [R("qv", r), R("kv", r)], R("sc2", r))
            d.op("core.reshape", [R("sc2", r)], R("sc", r), shape=[B_, hr, S_, T_])
        x = R("sc", r)
        if wrong == "factor":
            x = scale(d, x, R("scf", r), 2.0, dial, [B_, hr, S_, T_])
        unary(d, "exp", x, R("Z", r), dial, [B_, hr, S_, T_])
    d.output(*[R("Z", r) for r in ranks])
    p.rel["Q"] = cat((R("Q", r) for r in ranks), 2)
    p.rel["K"] = cat((R("K", r) for r in ranks), 2)
    p.intended["Z"] = f"reshape({cat((R('Z', r) for r in ranks), 1)}, shape=[{B_ * H}, {S_}, {T_}])"
    p.meta.update(size=cls, shape=[S_, B_, H, D_, T_])


def fam_seq_parallel(p: Pair):
    """(held-out) Sequence parallel: rows sharded, all-gathered before a column-parallel matmul, a row-parallel
    matmul reduce-scattered back to rows, plus a residual on the local rows."""
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    cls = size_class(rng)
    n, K, c = dim(rng, cls, (1, 3), (4, 8), (16, 24)), dim(rng, cls, (1, 5), (6, 12), (32, 48)), \
        dim(rng, cls, (1, 3), (4, 8), (16, 32))
    N, H = W * n, W * c
    act = pick_unary(rng, dial)
    residual = rng.random() < 0.6
    pre = pick_unary(rng, dial) if rng.random() < 0.4 else None
    kinds = ["factor"]
    if W > 1:
        kinds += ["missing_collective", "avg_reduce"]
        if residual:
            kinds.append("residual_other_rank")
    wrong = p.choose_wrong(kinds, 0.5)
    s, d = p.s, p.d
    ranks = list(range(W))
    s.input("X", [N, K]); s.input("A", [K, H]); s.input("B", [H, K])
    x = "X"
    if pre:
        x = unary(s, pre, x, "Xp", "aten", [N, K])
    s.op("aten.mm", [x, "A"], "h")
    s.op(UNARY_ATEN[act], ["h"], "g")
    s.op("aten.mm", ["g", "B"], "y")
    if residual:
        s.op("aten.add.Tensor", ["y", x], "Y")
    else:
        s.op("core.identity", ["y"], "Y")
    s.output("Y")
    xs = []
    for r in ranks:
        d.input(R("X", r), [n, K]); d.input(R("A", r), [K, c]); d.input(R("B", r), [c, K])
        xs.append(unary(d, pre, R("X", r), R("Xp", r), dial, [n, K]) if pre else R("X", r))
    if W > 1:
        d.op("core.all_gather", xs, [R("G", r) for r in ranks], dim=0, group=ranks)
        gs = [R("G", r) for r in ranks]
    else:
        gs = xs
    for r in ranks:
        matmul(d, gs[r], R("A", r), R("h", r), dial, dial == "hlo" and rng.random() < 0.5)
        unary(d, act, R("h", r), R("g", r), dial, [N, c])
        y = matmul(d, R("g", r), R("B", r), R("P", r), dial)
        if wrong == "factor":
            scale(d, y, R("Pf", r), 2.0, dial, [N, K])
    src = [R("Pf" if wrong == "factor" else "P", r) for r in ranks]
    if wrong == "missing_collective":
        ys = [d.op("core.slice", [src[r]], R("y", r), dim=0, start=r * n, end=r * n + n) for r in ranks]
    elif W > 1:
        d.op("core.reduce_scatter", src, [R("y", r) for r in ranks], op="avg" if wrong == "avg_reduce" else "sum",
             dim=0, group=ranks)
        ys = [R("y", r) for r in ranks]
    else:
        ys = src
    outs = []
    for r in ranks:
        if residual:  # the local rows, or the rank's rows of the gathered copy (another rank's: a bug)
            other = xs[r]
            if wrong == "residual_other_rank" or (W > 1 and rng.random() < 0.3):
                o = (r + 1) % W if wrong == "residual_other_rank" else r
                other = d.op("core.slice", [gs[r]], R("Xr", r), dim=0, start=o * n, end=o * n + n)
            outs.append(binary(d, "add", ys[r], other, R("Y", r), dial))
        else:
            outs.append(ys[r])
    d.output(*outs)
    p.rel["X"] = cat((R("X", r) for r in ranks), 0)
    p.rel["A"] = cat((R("A", r) for r in ranks), 1)
    p.rel["B"] = cat((R("B", r) for r in ranks), 0)
    p.intended["Y"] = cat(outs, 0)
    p.meta.update(size=cls, residual=residual, pre=pre, act=act)


def fam_expert_parallel(p: Pair):
    """(held-out) Expert parallel: E experts, rank r holds experts r * e .. (r + 1) * e - 1; expert j takes the
    tokens j, j + E, j + 2E, ... (a constant index: arange viewed [T/E, E], transposed, row j) of the replicated
    tokens, through its own weights. G_s: the experts' outputs concatenated expert-major."""
    rng, W = p.rng, p.W
    p.dialect = dial = str(rng.choice(["aten", "hlo"]))
    e = int(rng.integers(1, 3))
    E = W * e
    t = int(rng.integers(1, 4))
    T, Dm, Hh = E * t, int(rng.integers(1, 5)), int(rng.integers(1, 4))
    act = pick_unary(rng, dial, linear_ok=False)
    spelling = str(rng.choice(["index", "view"]))
    gather = W > 1 and rng.random() < 0.4
    kinds = ["index_value_changed", "factor"] + (["swapped_rank_order"] if W > 1 else []) + \
        (["expert_weights_swapped"] if e > 1 else [])
    wrong = p.choose_wrong(kinds, 0.5)
    if wrong == "index_value_changed":
        spelling = "index"
    s, d = p.s, p.d
    ranks = list(range(W))
    s.input("X", [T, Dm])
    s.op("aten.arange", [], "ar", end=T, dtype=None)
    s.op("core.reshape", ["ar"], "ar2", shape=[t, E])
    s.op("core.permute", ["ar2"], "ar3", dims=[1, 0])
    ys = []
    for j in range(E):
        s.input(f"W{j}", [Dm, Hh])
        s.op("core.slice", ["ar3"], f"i{j}a", dim=0, start=j, end=j + 1)
        s.op("core.reshape", [f"i{j}a"], f"i{j}", shape=[t])
        s.op("aten.index_select", ["X", f"i{j}"], f"x{j}", dim=0)
        s.op("aten.mm", [f"x{j}", f"W{j}"], f"h{j}")
        s.op(UNARY_ATEN[act], [f"h{j}"], f"y{j}")
        ys.append(f"y{j}")
    s.op("core.concat", ys, "Y", dim=0)
    s.output("Y")
    worder = ranks[::-1] if wrong == "swapped_rank_order" else ranks
    bad_rank = int(rng.integers(W))
    outs = []
    for r in ranks:
        d.input(R("X", r), [T, Dm])
        locs = []
        for k in range(e):
            j = r * e + k
            d.input(R(f"W{k}", r), [Dm, Hh])
            jj = j
            if wrong == "index_value_changed" and r == bad_rank and k == 0:
                jj = (j + 1) % E
            if spelling == "index":
                d.op("aten.arange", [], R(f"ar{k}", r), end=T, dtype=None)
                d.op("core.reshape", [R(f"ar{k}", r)], R(f"ar2{k}", r), shape=[t, E])
                d.op("core.slice", [R(f"ar2{k}", r)], R(f"ia{k}", r), dim=1, start=jj, end=jj + 1)
                d.op("core.reshape", [R(f"ia{k}", r)], R(f"i{k}", r), shape=[t])
                d.op("aten.index_select", [R("X", r), R(f"i{k}", r)], R(f"x{k}", r), dim=0)
            else:
                d.op("core.reshape", [R("X", r)], R(f"xv{k}", r), shape=[t, E, Dm])
                d.op("core.slice", [R(f"xv{k}", r)], R(f"xs{k}", r), dim=1, start=jj, end=jj + 1)
                d.op("core.reshape", [R(f"xs{k}", r)], R(f"x{k}", r), shape=[t, Dm])
            wk = (e - 1 - k) if wrong == "expert_weights_swapped" else k
            matmul(d, R(f"x{k}", r), R(f"W{wk}", r), R(f"h{k}", r), dial)
            hk = R(f"h{k}", r)
            if wrong == "factor":
                hk = scale(d, hk, R(f"hf{k}", r), 2.0, dial, [t, Hh])
            locs.append(unary(d, act, hk, R(f"y{k}", r), dial, [t, Hh]))
        outs.append(d.op("core.concat", locs, R("Yl", r), dim=0) if e > 1 else locs[0])
    p.rel["X"] = rep(R("X", r) for r in ranks)
    for j in range(E):
        p.rel[f"W{j}"] = R(f"W{j % e}", worder[j // e])
    if gather:
        d.op("core.all_gather", outs, [R("Ya", r) for r in ranks], dim=0, group=ranks)
        d.output(*[R("Ya", r) for r in ranks])
        p.intended["Y"] = "Ya@0"
    else:
        d.output(*outs)
        p.intended["Y"] = cat(outs, 0)
    p.meta.update(E=E, e=e, spelling=spelling, gather=gather)


FAMILIES = {"tp_mlp": fam_tp_mlp, "dp_grad": fam_dp_grad, "gqa_repeat": fam_gqa_repeat, "stacked": fam_stacked,
            "index_mask": fam_index_mask, "elementwise": fam_elementwise, "relayout": fam_relayout,
            "scores": fam_scores, "seq_parallel": fam_seq_parallel, "expert_parallel": fam_expert_parallel}


def pair_seed(part: str, seed: int, k: int) -> int:
    assert 0 <= seed < 1000 and 0 <= k < 1_000_000
    return (HELD_OUT_BASE if part == "held-out" else 0) + seed * 1_000_000 + k


def make_pair(part: str, pseed: int, family: str | None = None) -> Pair:
    """The pair of seed ``pseed`` in ``part`` (own: the own families only; held-out: all, the held-out families
    with probability 0.4)."""
    assert (pseed >= HELD_OUT_BASE) == (part == "held-out")
    rng = np.random.default_rng(pseed)
    if family is None:
        if part == "own":
            family = str(rng.choice(OWN_FAMILIES))
        elif rng.random() < 0.4:
            family = str(rng.choice(HELD_OUT_FAMILIES))
        else:
            family = str(rng.choice(OWN_FAMILIES))
    if part == "own":
        assert family in OWN_FAMILIES
    W = int(rng.choice([1, 2, 4], p=[0.2, 0.5, 0.3]))
    p = Pair(family, pseed, part, W, rng)
    FAMILIES[family](p)
    return p


# ======================================================================================================
# numerical ground truth
# ======================================================================================================

_PLUGINS = None


def plugins():
    global _PLUGINS
    if _PLUGINS is None:
        from graphguard.plugins import load_plugins
        _PLUGINS = load_plugins()
    return _PLUGINS


def build(p: Pair):
    """Fresh graphs and relation (verify normalises graphs in place: one build per use)."""
    from graphguard.ir.relation import parse_relation_text
    from graphguard.ir.serde import graph_from_dict
    reg = plugins().registry
    rel = parse_relation_text(p.relation_text(), "rel", reg)
    cx = rel.constraints()
    return (graph_from_dict(copy.deepcopy(p.s.doc), "spec", reg, cx),
            graph_from_dict(copy.deepcopy(p.d.doc), "impl", reg, cx), rel)


def evaluate(p: Pair, point: int):
    """Both graphs at random float64 inputs consistent with R_i: (s_env, d_env), every tensor kept."""
    from graphguard.engine.replay import _inputs, _store, run_node
    from graphguard.ir.semantics import term_eval
    reg = plugins().registry
    g_s, g_d, rel = build(p)
    d_env, first = _inputs(g_s, g_d, rel, reg, {}, point, "float64")
    s_env = {k: _store(term_eval(first[k], d_env.__getitem__, reg), g_s.tensors[k].dtype, "float64")
             for k in g_s.inputs}
    for n in g_d.topo_order():
        run_node(g_d, n, d_env, reg, {}, "float64")
    for n in g_s.topo_order():
        run_node(g_s, n, s_env, reg, {}, "float64")
    return g_s, g_d, s_env, d_env


def _rms(w: np.ndarray) -> float:
    """The root mean square, without overflow (exp chains reach 1e200)."""
    top = float(np.max(np.abs(w))) if w.size else 0.0
    return top * float(np.sqrt(np.mean((w / top) ** 2))) if top > 0 and np.isfinite(top) else top


def close(got, want) -> bool:
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape:
        return False
    if want.dtype.kind not in "fc":
        return bool(np.array_equal(got, want))
    g, w = got.astype(np.float64), want.astype(np.float64)
    if not (np.isfinite(g) == np.isfinite(w)).all():
        return False
    fin = np.isfinite(w)
    if not np.array_equal(g[~fin], w[~fin], equal_nan=True):
        return False
    g, w = g[fin], w[fin]
    if w.size == 0:
        return True
    rms = _rms(w)
    return bool((np.abs(g - w) <= 1e-9 * (1.0 + rms) + 1e-7 * np.abs(w)).all())


def check_r_o(p: Pair, r_o: dict, envs) -> tuple[bool, str]:
    """Whether every R_o line (G_s output -> expressions over G_d tensors) holds at every point in ``envs``."""
    from graphguard.ir.expr import to_text
    from graphguard.ir.semantics import term_eval
    reg = plugins().registry
    for out in p.s.doc["outputs"]:
        if not r_o.get(out):
            return False, f"no R_o line for output {out}"
    for out, exprs in r_o.items():
        for e in exprs:
            for s_env, d_env in envs:
                try:
                    got = term_eval(e, d_env.__getitem__, reg)
                except Exception as err:  # a certificate that does not evaluate
                    return False, f"{out} = {to_text(e)}: does not evaluate ({type(err).__name__}: {err})"
                if out not in s_env:
                    return False, f"R_o names {out}, not a G_s tensor"
                if not close(got, s_env[out]):
                    diff = "shape" if np.shape(got) != np.shape(s_env[out]) else \
                        f"max |diff| {float(np.max(np.abs(np.asarray(got, float) - np.asarray(s_env[out], float)))):.3g}"
                    return False, f"{out} = {to_text(e)} is false ({diff})"
    return True, ""


def unmatched_entries(p: Pair, s_env, d_env) -> int:
    """G_s output entries whose value occurs in no G_d output (float64): > 0 proves no data-movement R_o."""
    pool = np.concatenate([np.asarray(d_env[t], np.float64).reshape(-1) for t in p.d.doc["outputs"]] or [np.zeros(0)])
    pool = np.sort(pool[np.isfinite(pool)])
    bad = 0
    for out in p.s.doc["outputs"]:
        v = np.asarray(s_env[out], np.float64).reshape(-1)
        v = v[np.isfinite(v)]
        if pool.size == 0:
            bad += v.size
            continue
        i = np.clip(np.searchsorted(pool, v), 1, pool.size - 1) if pool.size > 1 else np.zeros(v.size, int)
        near = np.minimum(np.abs(pool[i] - v), np.abs(pool[np.maximum(i - 1, 0)] - v))
        rms = _rms(v) if v.size else 0.0
        bad += int((near > 1e-9 * (1.0 + rms) + 1e-7 * np.abs(v)).sum())
    return bad


def ground_truth(p: Pair) -> dict:
    """``equivalent`` (the intended R_o holds at 2 points), ``wrong`` (an entry nowhere in G_d), or a reason to
    drop the pair (``gen-bug: ...``, ``ambiguous``)."""
    from graphguard.ir.relation import parse_term
    reg = plugins().registry
    envs = []
    for point in (11, 12):
        g_s, g_d, s_env, d_env = evaluate(p, point)
        envs.append((s_env, d_env))
    if p.wrong is None:
        try:
            r_o = {k: [parse_term(v, reg)] for k, v in p.intended.items()}
        except Exception as err:
            return {"truth": "gen-bug", "why": f"intended R_o does not parse: {err}"}
        ok, why = check_r_o(p, r_o, envs)
        return {"truth": "equivalent"} if ok else {"truth": "gen-bug", "why": "intended R_o fails: " + why}
    bad = unmatched_entries(p, *envs[0])
    if bad == 0:
        return {"truth": "ambiguous"}
    return {"truth": "wrong", "unmatched": bad}


def pair_metrics(p: Pair) -> dict:
    """Sizes the caps bound (``CAP_METRICS``), from the builders' documents."""
    shapes = {}
    for doc in (p.s.doc, p.d.doc):
        for i in doc["inputs"]:
            shapes[i["name"]] = i["shape"]
    g_s, g_d, _ = build(p)
    ent, rank, terms = 0, 0, 0
    for g in (g_s, g_d):
        for name, t in g.tensors.items():
            shp = [int(x) for x in t.shape]
            ent = max(ent, int(np.prod(shp, dtype=np.int64)))
            rank = max(rank, len(shp))
        for n in g.nodes:
            if n.op in ("aten.mm", "aten.bmm", "hlo.dot"):
                out = [int(x) for x in g.tensors[n.outputs[0]].shape]
                a = [int(x) for x in g.tensors[n.inputs[0]].shape]
                if n.op == "hlo.dot":
                    k = int(np.prod([a[i] for i in n.attrs.get("lhs_contracting", ())], dtype=np.int64))
                else:
                    k = a[-1]
                terms = max(terms, int(np.prod(out, dtype=np.int64)) * k)
    counts = collections.Counter(n.op for n in g_d.nodes)
    return {"max_entries": ent, "max_rank": rank, "product_terms": terms,
            "d_input_entries": int(sum(np.prod([int(x) for x in g_d.tensors[t].shape], dtype=np.int64)
                                       for t in g_d.inputs)),
            "n_d_nodes": len(g_d.nodes), "same_op_d": max(counts.values()) if counts else 0,
            "index_chain": p.meta.get("index_chain", 0), "layers": p.meta.get("layers", 1)}


_GROUPS = None
NOT_ENGINE = {"explain", "replay", "fuzz", "result", "families", "lemma", "layers", "prove"}  # (explain's MAX_HOPS
# is another cap: G_d operators walked for a failure's hint)


def engine_modules() -> dict[str, list]:
    """The engine's modules by cap group: "labels" (graphguard/engine/relayout.py, or the labels package after its
    split), "memo", and "infer" (infer.py and every other engine module -- the modules split off it as well)."""
    global _GROUPS
    if _GROUPS is not None:
        return _GROUPS
    import importlib
    import pkgutil
    import graphguard.engine as eng
    groups: dict[str, list] = {"labels": [], "infer": [], "memo": []}
    for info in pkgutil.walk_packages(eng.__path__, "graphguard.engine."):
        short = info.name.split(".")[2]
        if short in NOT_ENGINE:
            continue
        try:
            mod = importlib.import_module(info.name)
        except Exception:
            continue
        group = "labels" if short in ("relayout", "labels") else "memo" if short == "memo" else "infer"
        groups[group].append(mod)
    _GROUPS = groups
    return groups


def cap_value(group: str, name: str):
    for mod in engine_modules()[group]:
        v = getattr(mod, name, None)
        if isinstance(v, int):
            return v
    return None


def caps_crossed(metrics: dict) -> list[str]:
    out = []
    for cap, metric in CAP_METRICS.items():
        group, name = cap.split(".")
        v = cap_value(group, name)
        if v is not None and metrics.get(metric, 0) >= v:
            out.append(cap)
    return out


# ======================================================================================================
# the worker: verify, judge, count
# ======================================================================================================

COUNTS: dict[str, list[int]] = {}


def _nonempty(x) -> bool:
    if x is None:
        return False
    if isinstance(x, tuple) and len(x) == 2 and isinstance(x[0], list):
        return bool(x[0])
    if isinstance(x, (list, tuple, dict, set, frozenset)):
        return len(x) > 0
    return True


def install_counters() -> list[str]:
    """Wrap the engine's entry points (in this process only) with call / result counters: every module reference
    to one (its own module's, and each importer's) is wrapped once, so a call counts once whichever module calls
    it. Returns the names found nowhere."""
    mods = [m for ms in engine_modules().values() for m in ms]
    missing = []
    for name in ENTRY_POINTS:
        COUNTS.setdefault(name, [0, 0])
        found = False
        for mod in mods:
            f = mod.__dict__.get(name)
            if f is None or not callable(f):
                continue
            found = True
            if getattr(f, "_gg_fuzz", False):
                continue

            def wrapped(*a, _real=f, _name=name, **k):
                COUNTS[_name][0] += 1
                out = _real(*a, **k)
                if _nonempty(out):
                    COUNTS[_name][1] += 1
                return out
            wrapped._gg_fuzz = True
            wrapped.__wrapped__ = f
            setattr(mod, name, wrapped)
        if not found:
            missing.append(name)
    # each prover of the engine's list (graphguard/engine/infer.py PROVERS), counted where it applies: the list's
    # entries bind their functions at import, which the module-attribute wrapping above cannot see
    import dataclasses
    from graphguard.engine import infer
    for i, pr in enumerate(infer.PROVERS):
        key = "prover " + pr.name
        COUNTS.setdefault(key, [0, 0])
        if getattr(pr.prove, "_gg_fuzz", False):
            continue

        def proved(q, _real=pr.prove, _key=key):
            COUNTS[_key][0] += 1
            out = list(_real(q))
            if out:
                COUNTS[_key][1] += 1
            return out
        proved._gg_fuzz = True
        infer.PROVERS[i] = dataclasses.replace(pr, prove=proved)
    return missing


def forced_caps(p: Pair) -> list[tuple[str, str, int]]:
    """The caps forced low in the pair's second run: a seeded subset (each with probability 0.3, the product
    caps 0.6 where the pair multiplies)."""
    rng = np.random.default_rng(p.seed ^ 0x5EED)
    has_product = any(n["op"] in ("aten.mm", "aten.bmm", "hlo.dot") for n in p.d.doc["nodes"])
    out = []
    for group, name, low in LOW_CAPS:
        prob = 0.6 if (has_product and name in ("MAX_PRODUCT_TERMS", "MAX_PRODUCT_LABELS")) else 0.3
        if rng.random() < prob and cap_value(group, name) is not None:
            out.append((group, name, low))
    if not out:
        out.append(LOW_CAPS[int(rng.integers(len(LOW_CAPS)))])
    return out


def patch_caps(caps) -> list:
    """Set each (group, name, value) in every module of its group holding the name; returns what to restore."""
    saved = []
    groups = engine_modules()
    for group, name, v in caps:
        for mod in groups[group]:
            if name in mod.__dict__:
                saved.append((mod, name, mod.__dict__[name]))
                setattr(mod, name, v)
    return saved


def checker_modes() -> list[tuple[str, dict]]:
    import graphguard
    try:
        params = inspect.signature(graphguard.verify).parameters
    except (TypeError, ValueError):
        params = {}
    if "check" in params:
        return [("engine", {"check": "off"}), ("checker", {"check": "all"})]
    return [("engine", {})]


def verify_once(p: Pair, kw: dict, caps: list[tuple[str, str, int]]) -> dict:
    import graphguard
    from graphguard.errors import InputError
    from graphguard.ir.expr import to_text
    saved = []
    before = {k: list(v) for k, v in COUNTS.items()}
    t0, c0 = time.monotonic(), time.process_time()
    rec: dict = {}
    try:
        saved = patch_caps(caps)
        g_s, g_d, rel = build(p)
        r = graphguard.verify(g_s, g_d, rel, plugins=plugins(), **kw)
        rec["verdict"] = r.verdict
        rec["r_o"] = {k: [to_text(e) for e in v] for k, v in r.r_o.items()}
        rec["_r_o_terms"] = r.r_o
        rec["stats"] = {k: r.stats.get(k, 0) for k in STAT_KEYS}
        rec["lemma_hits"] = sum(r.stats.get("lemma_hits", {}).values())
        if r.failure is not None:
            rec["failure"] = f"{r.failure.op}: {r.failure.reason}"[:300]
        if getattr(r, "checked", None):
            rec["checked"] = str(r.checked)[:300]
    except InputError as err:
        rec["verdict"] = "input-error"
        rec["error"] = f"{type(err).__name__}: {err}"[:500]
    except MemoryError:
        rec["verdict"] = "memory"
        rec["error"] = "MemoryError (the worker's memory cap)"
    except Exception as err:  # graphguard's own bug: exit 4
        rec["verdict"] = "crash"
        rec["error"] = f"{type(err).__name__}: {err}"[:500]
        rec["traceback"] = traceback.format_exc()[-3000:]
    finally:
        for mod, n, v in saved:
            setattr(mod, n, v)
    rec["seconds"] = round(time.monotonic() - t0, 4)
    rec["cpu"] = round(time.process_time() - c0, 4)
    rec["fired"] = {k: [COUNTS[k][0] - before.get(k, [0, 0])[0], COUNTS[k][1] - before.get(k, [0, 0])[1]]
                    for k in COUNTS if COUNTS[k] != before.get(k, [0, 0])}
    return rec


def judge(truth: str, rec: dict, p: Pair, envs) -> str:
    v = rec["verdict"]
    if v == "crash":
        return "crash"
    if v == "input-error":
        return "input-error"
    if v in ("memory", "timeout", "inconclusive"):
        return "inconclusive"
    if v == "refines":
        ok, why = check_r_o(p, rec["_r_o_terms"], envs)
        if not ok:
            rec["why"] = why
            return "unsound"
        return "gen-bug" if truth == "wrong" else "ok"
    return "false-alarm" if truth == "equivalent" else "ok"


def run_pair(p: Pair, emit) -> None:
    """Ground truth, then every (checker mode x caps) verification of ``p``; ``emit`` gets one record per run
    and a last one with ``done``."""
    head = {"part": p.part, "seed": p.seed, "family": p.family, "wrong": p.wrong, "W": p.W, "meta": p.meta}
    t0 = time.process_time()
    try:
        gt = ground_truth(p)
    except Exception as err:
        emit({**head, "done": True, "truth": "gen-bug", "why": f"evaluation failed: {type(err).__name__}: {err}",
              "traceback": traceback.format_exc()[-2000:], "docs": docs(p)})
        return
    head["truth"] = gt["truth"]
    if gt["truth"] not in ("equivalent", "wrong"):
        emit({**head, "done": True, **gt, **({"docs": docs(p)} if gt["truth"] == "gen-bug" else {})})
        return
    t1 = time.process_time()
    metrics = pair_metrics(p)
    crossed = caps_crossed(metrics)
    envs = [evaluate(p, point)[2:] for point in (101, 202)]  # fresh points for R_o
    caps = forced_caps(p)
    emit({**head, "start": True, "metrics": metrics, "crossed": crossed,
          "cpu_truth": round(t1 - t0, 3), "cpu_prep": round(time.process_time() - t1, 3)})
    for mode, kw in checker_modes():
        for capmode, cp in (("natural", []), ("forced", caps)):
            rec = verify_once(p, kw, cp)
            rec["class"] = judge(gt["truth"], rec, p, envs)
            rec.pop("_r_o_terms", None)
            rec.update(head, mode=mode, caps=capmode, forced=[f"{m}.{n}={v}" for m, n, v in cp], crossed=crossed)
            if rec["class"] not in ("ok",):
                rec["docs"] = docs(p)
            emit(rec)
    emit({**head, "done": True})


def docs(p: Pair) -> dict:
    return {"spec": p.s.doc, "impl": p.d.doc, "relation": p.relation_text(), "intended": p.intended}


def worker_main(mem_gib: float) -> None:
    if mem_gib > 0:
        lim = int(mem_gib * (1 << 30))
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    import warnings
    warnings.filterwarnings("ignore")
    plugins()
    missing = install_counters()
    out = sys.stdout

    def emit(rec):
        if rec.get("done"):
            rec["cpu_total"] = time.process_time()
        out.write(json.dumps(rec, default=str) + "\n")
        out.flush()
    emit({"ready": True, "missing_entry_points": missing, "modes": [m for m, _ in checker_modes()],
          "cpu": time.process_time()})
    for line in sys.stdin:
        job = json.loads(line)
        p = make_pair(job["part"], job["seed"], job.get("family"))
        run_pair(p, emit)


# ======================================================================================================
# the parent: workers with per-run timeouts, results, summary
# ======================================================================================================

_SNAPSHOT = None


def snapshot() -> str:
    """A copy of this file for the workers: a worker restarted mid-run runs the generator the run began with
    (and the parent, which writes the reproducers from the seeds, holds)."""
    global _SNAPSHOT
    if _SNAPSHOT is None:
        import atexit
        import tempfile
        fd, _SNAPSHOT = tempfile.mkstemp(prefix="verifier_fuzz_run_", suffix=".py")
        os.write(fd, Path(__file__).read_bytes())
        os.close(fd)
        atexit.register(lambda: os.path.exists(_SNAPSHOT) and os.unlink(_SNAPSHOT))
    return _SNAPSHOT


class Worker:
    def __init__(self, mem_gib: float, nice: int):
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                   PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen([sys.executable, snapshot(), "--worker",
                                      "--mem-gib", str(mem_gib)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, bufsize=1, env=env,
                                     preexec_fn=(lambda: os.nice(nice)) if nice else None)
        self.job, self.since, self.cpu = None, time.monotonic(), 0.0
        self.runs_done, self.ready, self.started = 0, False, False
        self.buf = b""

    def send(self, job: dict) -> None:
        self.job, self.since, self.runs_done = job, time.monotonic(), 0
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()

    def stop(self, kill=False):
        if kill:
            self.proc.kill()
        else:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self.proc.wait()


def write_case(rec: dict, cls: str, n_runs: dict) -> str:
    CASES.mkdir(parents=True, exist_ok=True)
    key = f"{cls}-{rec['family']}-{rec['seed']}-{rec.get('mode', 'x')}-{rec.get('caps', 'x')}"
    path = CASES / f"{key}.py"
    d = rec.get("docs") or docs(make_pair(rec["part"], rec["seed"]))  # (pairs are deterministic in their seed)
    forced = [f.split("=") for f in rec.get("forced", [])]
    forced = [(f[0].split(".")[0], f[0].split(".")[1], int(f[1])) for f in forced]
    kw = {"check": "all"} if rec.get("mode") == "checker" else ({"check": "off"} if rec.get("mode") == "engine"
                                                               and "check" in _verify_params() else {})
    text = f'''"""verifier_fuzz reproducer: {cls} ({rec.get('family')}, part {rec.get('part')}, seed {rec.get('seed')}, """ \\
    """wrong variant {rec.get('wrong')!r}, checker mode {rec.get('mode')!r}, caps {rec.get('caps')!r}).

Found: verdict {rec.get('verdict')!r}; {(rec.get('why') or rec.get('error') or rec.get('failure') or '').replace(chr(34), "'")[:600]}
Ground truth (float64, bench/verifier_fuzz.py): {rec.get('truth')!r}.
Regenerate: python3 bench/verifier_fuzz.py --pair {rec.get('part')}:{rec.get('seed')}
"""
import json
import numpy as np
import graphguard
from graphguard.ir.relation import parse_relation_text, parse_term
from graphguard.ir.serde import graph_from_dict
from graphguard.plugins import load_plugins

SPEC = json.loads({json.dumps(json.dumps(d.get("spec")))})
IMPL = json.loads({json.dumps(json.dumps(d.get("impl")))})
RELATION = {d.get("relation")!r}
INTENDED = {json.dumps(d.get("intended"))}  # the intended R_o (for a correct variant)
TRUTH = {rec.get("truth")!r}
FORCED_CAPS = {forced!r}  # (module, name, value) monkeypatched while verifying
VERIFY_KW = {kw!r}


def engine_modules():
    """Cap groups: labels (graphguard/engine/relayout.py, or the labels package after its split), infer, memo."""
    import importlib, pkgutil
    groups = {{"labels": [], "infer": [], "memo": []}}
    for name in ("graphguard.engine.relayout", "graphguard.engine.labels"):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        groups["labels"].append(mod)
        for info in pkgutil.iter_modules(getattr(mod, "__path__", []) or []):
            groups["labels"].append(importlib.import_module(name + "." + info.name))
    for g in ("infer", "memo"):
        groups[g].append(importlib.import_module("graphguard.engine." + g))
    return groups


def run():
    plugins = load_plugins()
    reg = plugins.registry
    groups = engine_modules()
    saved = []
    for g, n, v in FORCED_CAPS:  # in every module of the group that holds the name
        for mod in groups[g]:
            if n in mod.__dict__:
                saved.append((mod, n, mod.__dict__[n]))
                setattr(mod, n, v)
    try:
        rel = parse_relation_text(RELATION, "rel", reg)
        cx = rel.constraints()
        r = graphguard.verify(graph_from_dict(SPEC, "spec", reg, cx), graph_from_dict(IMPL, "impl", reg, cx), rel,
                              plugins=plugins, **VERIFY_KW)
    finally:
        for mod, n, v in reversed(saved):
            setattr(mod, n, v)
    return r, reg


def numerically_true(r_o, reg, seed=101):
    """Evaluate both graphs in float64 at inputs consistent with the relation; every R_o line against G_s."""
    from graphguard.engine.replay import _inputs, run_node
    from graphguard.ir.semantics import term_eval
    rel = parse_relation_text(RELATION, "rel", reg)
    cx = rel.constraints()
    g_s, g_d = graph_from_dict(SPEC, "spec", reg, cx), graph_from_dict(IMPL, "impl", reg, cx)
    d_env, first = _inputs(g_s, g_d, rel, reg, {{}}, seed, "float64")
    s_env = {{k: np.asarray(term_eval(first[k], d_env.__getitem__, reg)) for k in g_s.inputs}}
    for n in g_d.topo_order():
        run_node(g_d, n, d_env, reg, {{}}, "float64")
    for n in g_s.topo_order():
        run_node(g_s, n, s_env, reg, {{}}, "float64")
    bad = []
    for out, exprs in r_o.items():
        for e in exprs:
            got = np.asarray(term_eval(e, d_env.__getitem__, reg), np.float64)
            want = np.asarray(s_env[out], np.float64)
            if got.shape != want.shape or not np.allclose(got, want, rtol=1e-7, atol=1e-9):
                bad.append(out)
    return not bad, bad


if __name__ == "__main__":
    r, reg = run()
    print("verdict:", r.verdict)
    print("R_o:", r.r_o_lines())
    if r.failure is not None:
        print("failure:", r.failure.op, r.failure.reason)
    if r.verdict == "refines":
        ok, bad = numerically_true(r.r_o, reg)
        print("R_o numerically true:", ok, bad)
    if INTENDED and TRUTH == "equivalent":
        ok, bad = numerically_true({{k: [parse_term(v, reg)] for k, v in INTENDED.items()}}, reg)
        print("intended R_o numerically true:", ok, bad)
'''
    path.write_text(text)
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


_VP = None


def _verify_params():
    global _VP
    if _VP is None:
        import graphguard
        try:
            _VP = set(inspect.signature(graphguard.verify).parameters)
        except (TypeError, ValueError):
            _VP = set()
    return _VP


def jobs_for(n: int, seed: int, part: str) -> list[dict]:
    if part == "both":  # interleaved: a run cut short holds both parts
        return [{"part": ("own", "held-out")[i % 2], "seed": pair_seed(("own", "held-out")[i % 2], seed, i // 2)}
                for i in range(n)]
    return [{"part": part, "seed": pair_seed(part, seed, k)} for k in range(n)]


def run_all(jobs: list[dict], workers: int, timeout: float, mem_gib: float, nice: int, out_path: Path | None,
            progress: bool = True) -> tuple[list[dict], float, dict]:
    import collections as C
    todo = C.deque(jobs)
    sel = selectors.DefaultSelector()
    pool: list[Worker] = []
    records: list[dict] = []
    info = {"modes": None, "missing": None, "worker_cpu": 0.0, "died": 0}
    fout = out_path.open("a") if out_path else None
    done_pairs = 0
    t0 = time.monotonic()

    def start():
        info["started"] = info.get("started", 0) + 1
        w = Worker(mem_gib, nice)
        sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        pool.append(w)
        return w

    def retire(w, kill=False):
        sel.unregister(w.proc.stdout)
        pool.remove(w)
        w.stop(kill)
        info["worker_cpu"] += w.cpu

    def feed(w):
        if todo:
            w.send(todo.popleft())
        else:
            retire(w)

    def lost(w, why):
        """The worker hung or died on its pair: the runs it did not report are timeouts / crashes."""
        nonlocal done_pairs
        job = w.job
        retire(w, kill=True)
        modes = info["modes"] or ["engine"]
        want = len(modes) * 2
        base = {"part": job["part"], "seed": job["seed"], "family": w.family if hasattr(w, "family") else "?",
                "wrong": getattr(w, "wrong", None), "truth": getattr(w, "truth", None), "meta": {}}
        if getattr(w, "started", False):
            seen = w.runs_done
            for i in range(seen, want):
                mode, capmode = modes[i // 2], ("natural", "forced")[i % 2]
                rec = {**base, "mode": mode, "caps": capmode, "verdict": why, "class":
                       "inconclusive" if why == "timeout" else "crash", "error": why,
                       "docs": docs(make_pair(job["part"], job["seed"]))}
                if why == "timeout":
                    rec["timeout"] = True
                record(rec)
        else:
            record({**base, "done": True, "truth": "gen-bug", "why": f"worker {why} before verifying"})
        done_pairs += 1
        if todo:
            feed(start())

    def record(rec):
        rec["t"] = round(time.monotonic() - t0, 2)
        records.append(rec)
        if fout:
            r2 = {k: v for k, v in rec.items() if k != "docs"}
            fout.write(json.dumps(r2, default=str) + "\n")
            fout.flush()

    def handle(w, line):
        nonlocal done_pairs
        msg = json.loads(line)
        if msg.get("ready"):
            w.ready = True
            info["modes"], info["missing"] = msg["modes"], msg["missing_entry_points"]
            return
        if "cpu_total" in msg:
            w.cpu = msg.pop("cpu_total")
        w.since = time.monotonic()
        if msg.get("start"):
            w.started, w.family, w.wrong, w.truth = True, msg["family"], msg["wrong"], msg["truth"]
            w.runs_done = 0
            record(msg)
        elif "mode" in msg:
            w.runs_done += 1
            record(msg)
        elif msg.get("done"):
            if "truth" in msg and msg["truth"] not in ("equivalent", "wrong"):
                record(msg)
            w.started = False
            done_pairs += 1
            if progress and done_pairs % 100 == 0:
                print(f"[{done_pairs}/{len(jobs)} pairs, {time.monotonic() - t0:.0f} s]", flush=True)
            feed(w)

    for _ in range(min(workers, len(todo))):
        feed(start())
    while pool:
        for key, _ in sel.select(timeout=1.0):
            w = key.data
            data = os.read(w.proc.stdout.fileno(), 1 << 20)  # (not readline: lines left in a reader's buffer
            if data:  # would wait for the next select)
                w.buf += data
                *lines, w.buf = w.buf.split(b"\n")
                for line in lines:
                    if w in pool:
                        handle(w, line.decode())
                continue
            if not w.ready:  # could not start (graphguard mid-edit in this shared checkout?): retry
                info["start_failures"] = info.get("start_failures", 0) + 1
                if info["start_failures"] > 30:
                    raise SystemExit("workers fail to start (import graphguard / load_plugins): giving up")
                if w.job is not None:
                    todo.appendleft(w.job)
                retire(w, kill=True)
                time.sleep(10)
                feed(start())
                continue
            info["died"] += 1
            lost(w, "worker died")
        for w in list(pool):
            if w.job is not None and time.monotonic() - w.since > timeout:
                info["timeouts"] = info.get("timeouts", 0) + 1
                lost(w, "timeout")
    if fout:
        fout.close()
    return records, time.monotonic() - t0, info


def summarize(records: list[dict], wall: float, info: dict, parent_cpu: float) -> list[str]:
    import collections as C
    lines = []
    runs = [r for r in records if "mode" in r]
    starts = [r for r in records if r.get("start")]
    dropped = [r for r in records if r.get("done") and r.get("truth") not in (None, "equivalent", "wrong")]
    modes = info.get("modes") or ["engine"]
    # bad cases -> reproducers
    cases = C.defaultdict(list)
    written = C.Counter()  # at most MAX_CASES reproducers per (class, family, variant, subtype)

    def case(r, cls):
        key = (cls, r.get("family"), r.get("wrong"), (r.get("meta") or {}).get("subtype") or
               (r.get("meta") or {}).get("block"))
        written[key] += 1
        path = write_case(r, cls, {}) if written[key] <= MAX_CASES else "(not written)"
        cases[cls].append((r, path))
    for r in runs:
        if r["class"] in ("unsound", "false-alarm", "crash", "input-error", "gen-bug") or r.get("timeout"):
            cls = "timeout" if r.get("timeout") else r["class"]
            if cls == "false-alarm" and r["caps"] == "forced":
                cls = "false-alarm-forced-caps"
            case(r, cls)
    for r in dropped:
        if r.get("truth") == "gen-bug":
            case({**r, "mode": None, "caps": None}, "gen-bug")
    lines.append("")
    lines.append("families (pairs judged / wrong variants / dropped as ambiguous / generator bugs):")
    by_fam = C.defaultdict(C.Counter)
    for r in starts:
        by_fam[(r["part"], r["family"])]["judged"] += 1
        by_fam[(r["part"], r["family"])]["wrong"] += r["truth"] == "wrong"
    for r in dropped:
        by_fam[(r["part"], r["family"])][r["truth"]] += 1
    for (part, fam), c in sorted(by_fam.items()):
        lines.append(f"  {part:9s} {fam:16s} judged {c['judged']:5d}  wrong {c['wrong']:5d}  "
                     f"ambiguous {c['ambiguous']:4d}  gen-bug {c['gen-bug']:3d}")
    lines.append("")
    lines.append("bad cases (class: family seed mode/caps -> reproducer):")
    for cls in sorted(cases):
        groups = C.defaultdict(list)
        for r, path in cases[cls]:
            groups[(r.get("family"), r.get("wrong"), (r.get("meta") or {}).get("subtype") or
                    (r.get("meta") or {}).get("block"))].append((r, path))
        lines.append(f"  {cls}: {len(cases[cls])} runs")
        for (fam, wrong, sub), items in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            r, path = next((it for it in items if it[1] != "(not written)"), items[0])
            why = (r.get("why") or r.get("error") or r.get("failure") or "")[:160]
            lines.append(f"    {fam}/{sub or '-'} wrong={wrong}: {len(items)} runs, e.g. seed {r.get('seed')} "
                         f"{r.get('mode')}/{r.get('caps')} -> {path}  [{why}]")
    # coverage
    lines.append("")
    lines.append("coverage (runs in which an engine path fired; calls / calls with a result, summed):")
    cov = C.defaultdict(lambda: [0, 0, 0])
    for r in runs:
        for k, (calls, hits) in (r.get("fired") or {}).items():
            cov[k][0] += calls
            cov[k][1] += hits
            cov[k][2] += hits > 0
        for k, v in (r.get("stats") or {}).items():
            if v:
                cov["stats." + k][0] += v
                cov["stats." + k][2] += 1
        if r.get("lemma_hits"):
            cov["stats.lemma_hits"][0] += r["lemma_hits"]
            cov["stats.lemma_hits"][2] += 1
    for k in ENTRY_POINTS:
        c = cov.get(k, [0, 0, 0])
        tag = " (absent in engine)" if k in (info.get("missing") or []) else ""
        lines.append(f"  {k:28s} runs {c[2]:6d}   calls {c[0]:8d}  with result {c[1]:8d}{tag}")
    for k in sorted(k for k in cov if k.startswith("prover ")) or []:
        c = cov[k]
        lines.append(f"  {k:28s} runs {c[2]:6d}   calls {c[0]:8d}  with result {c[1]:8d}")
    for k in ["stats." + s for s in STAT_KEYS] + ["stats.lemma_hits"]:
        c = cov.get(k, [0, 0, 0])
        lines.append(f"  {k:28s} runs {c[2]:6d}   total {c[0]:8d}")
    forced = C.Counter(f.split("=")[0] for r in runs if r["caps"] == "forced" for f in r.get("forced", []))
    crossed = C.Counter(c for r in starts for c in r.get("crossed", []))
    lines.append("caps: pairs whose sizes reach the cap naturally / forced-low runs")
    for mod, name, _ in LOW_CAPS + [("labels", "MAX_ENTRIES", 0)]:
        k = f"{mod}.{name}"
        lines.append(f"  {k:28s} natural {crossed.get(k, 0):6d}   forced {forced.get(k, 0):6d}")
    timeouts = [r for r in runs if r.get("timeout")]
    if timeouts:
        lines.append("timeouts: " + ", ".join(f"{r['family']}:{r['seed']}({r['mode']}/{r['caps']})" for r in timeouts[:30]))
    # summary lines
    lines.append("")
    for part in ("own", "held-out"):
        for mode in modes:
            for capmode in ("natural", "forced", "all"):
                rs = [r for r in runs if r["part"] == part and r["mode"] == mode and
                      (capmode == "all" or r["caps"] == capmode)]
                if not rs and capmode != "all":
                    continue
                c = C.Counter(r["class"] for r in rs)
                pairs = len({r["seed"] for r in rs})
                label = {"engine": "engine alone", "checker": "with checker"}.get(mode, mode)
                lines.append(f"{part:8s} | {label:12s} | caps {capmode:7s} | pairs {pairs:5d} runs {len(rs):5d} | "
                             f"unsound {c['unsound']:3d} | false alarms {c['false-alarm']:4d} | "
                             f"inconclusive {c['inconclusive']:3d} | crashes {c['crash']:3d} | "
                             f"input-errors {c['input-error']} gen-bugs {c['gen-bug']}")
    n_pairs = len({(r["part"], r["seed"]) for r in starts})
    tot = C.Counter(r["class"] for r in runs)
    lines.append(f"pairs run: {n_pairs} (+{len(dropped)} dropped: "
                 f"{sum(r['truth'] == 'ambiguous' for r in dropped)} ambiguous, "
                 f"{sum(r['truth'] == 'gen-bug' for r in dropped)} generator bugs); runs {len(runs)}; "
                 f"unsound {tot['unsound']}, false alarms {tot['false-alarm']}, inconclusive {tot['inconclusive']}, "
                 f"crashes {tot['crash']}")
    lines.append(f"modes: {', '.join(modes)}{' (graphguard.verify has no check= yet: engine alone only)' if modes == ['engine'] else ''}")
    lines.append(f"workers: {info.get('started', 0)} started, {info.get('start_failures', 0)} failed to start, "
                 f"{info.get('died', 0)} died, {info.get('timeouts', 0)} killed on the per-run timeout")
    lines.append(f"CPU time: workers {info['worker_cpu']:.1f} s + parent {parent_cpu:.1f} s; wall {wall:.1f} s")
    return lines


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--part", choices=["own", "held-out", "both"], default="both")
    ap.add_argument("--out", default=None, help="JSON lines, one per record (appended)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per verification run")
    ap.add_argument("--mem-gib", type=float, default=5.0, help="RLIMIT_AS of each worker")
    ap.add_argument("--nice", type=int, default=0)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--pair", default=None, help="PART:SEED -- run one pair in this process and print it")
    ap.add_argument("--summarize", default=None, help="print the summary of a results file (--out) written before")
    a = ap.parse_args(argv)
    if a.summarize:
        import gzip
        opener = gzip.open if a.summarize.endswith(".gz") else open
        with opener(a.summarize, "rt") as f:
            records = []
            for line in f:
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError:  # (the last line of a file still being written)
                    pass
        info = {"modes": sorted({r["mode"] for r in records if "mode" in r}, key=["engine", "checker"].index),
                "worker_cpu": sum(r.get("cpu", 0) for r in records if "mode" in r) +
                sum(r.get("cpu_truth", 0) + r.get("cpu_prep", 0) for r in records if r.get("start"))}
        for line in summarize(records, max((r.get("t", 0) for r in records), default=0), info, time.process_time()):
            print(line)
        return 0
    if a.worker:
        worker_main(a.mem_gib)
        return 0
    if a.pair:
        part, seed = a.pair.split(":")
        p = make_pair(part, int(seed))
        print(f"family {p.family} W={p.W} wrong={p.wrong} meta={p.meta}")
        print(p.relation_text())
        print("intended:", p.intended)
        plugins()
        install_counters()
        run_pair(p, lambda rec: print(json.dumps({k: v for k, v in rec.items() if k != "docs"}, default=str)))
        return 0
    out = Path(a.out) if a.out else None
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
    jobs = jobs_for(a.pairs, a.seed, a.part)
    records, wall, info = run_all(jobs, a.workers, a.timeout, a.mem_gib, a.nice, out)
    for line in summarize(records, wall, info, time.process_time()):
        print(line)
    runs = [r for r in records if "mode" in r]
    return 1 if any(r["class"] in ("unsound", "crash") for r in runs) else 0


if __name__ == "__main__":
    sys.exit(main())
