"""Masked lookups over row shards: ``core.masked_lookup(w, ids, start=s, end=e)`` is rank r's lookup of the
rows [s, e) of a table it holds as ``w`` -- ``w[ids - s]`` where ``s <= ids < e``, zero rows elsewhere -- and
the ranks' masked lookups of their shards add up to the lookup of the whole table (a vocabulary-parallel
embedding). The op is the one canonical form; each framework's way of writing it is data (``SPELLINGS``,
the op's ``fuses``: Megatron's ``index_put`` of shifted ids, its ``masked_fill`` form, vLLM's
``get_masked_input_and_mask``, torchtitan's multiplication by the mask), each a lemma of family 1218 that
``graphguard lemmas check`` fuzzes, collapsed into the op where a graph spells it out
(``graphguard/passes/fusion.py``), and equal to it in the e-graph everywhere else. The same for the target's
logit (``core.masked_pick``), its one-hot update (``core.masked_one_hot_update``), the lookup's backward
(``core.masked_embedding_backward``) and nll_loss's one-hot written into zeros (``core.masked_neg_one_hot``). Each
op's split over ranks is written once below (core:300-304); the ATen pack's lemmas relate the sequential ops
(``aten.embedding``, its backward, ``gather``, ``scatter_add``, ``scatter``) to them
(``lemma_packs/aten/vocab_lookups.py``).
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.lemma import L
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, numel

NUMBERS = range(300, 320)  # this file's lemma numbers (the plugin loader refuses others)

MASKED_LOOKUP = "core.masked_lookup"
MASKED_PICK = "core.masked_pick"
MASKED_ONE_HOT_UPDATE = "core.masked_one_hot_update"
MASKED_EMBEDDING_BACKWARD = "core.masked_embedding_backward"
MASKED_NEG_ONE_HOT = "core.masked_neg_one_hot"

# -- the spellings, over ?x0 (the table's rows a rank holds), ?x1 (the ids), ?p_start, ?p_end ----------------
_W, _I, _S, _E = "?x0", "?x1", "?p_start", "?p_end"
# Megatron: the ids outside [s, e), the shifted ids with the masked ones set to row 0 (index_put), the rows
# looked up with the masked ones zeroed
MASK = f"aten.bitwise_or.Tensor(aten.lt.Scalar({_I}, other={_S}), aten.ge.Scalar({_I}, other={_E}))"
LOCAL = (f"aten.index_put(aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64)), {MASK},"
         " aten.full(size=[], fill_value=0, dtype=int64))")
_EMBED = f"aten.embedding({_W}, {{ids}}, padding_idx=?p, scale_grad_by_freq=?f, sparse=?q)"
MEGATRON = f"aten.index_put({_EMBED.format(ids=LOCAL)}, {MASK}, aten.full(size=[], fill_value=0, dtype=float32))"
# ... the rows picked by indexing (``weight[masked]``: aten.index.Tensor) rather than F.embedding: the shifted,
# masked ids lie in [0, e - s), where indexing is the embedding (older Megatron-LM captures)
MEGATRON_INDEXED = (f"aten.index_put(aten.index.Tensor({_W}, {LOCAL}, absent=[]), {MASK},"
                    " aten.full(size=[], fill_value=0, dtype=float32))")
# ... its masked_fill form: (ids - s).masked_fill(mask, 0), then output_parallel.masked_fill(mask.unsqueeze(-1), 0)
_SHIFTED = f"aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64))"
LOCAL_MF = f"aten.masked_fill.Scalar({_SHIFTED}, {MASK}, value=0)"
MASKED_FILL = f"aten.masked_fill.Scalar({_EMBED.format(ids=LOCAL_MF)}, reshape({MASK}, shape=?u), value=0)"
# ... and its torch.where form: torch.where(mask, 0, ids - s), then torch.where(mask.unsqueeze(-1), 0.0, out)
LOCAL_WHERE = f"aten.where.self({MASK}, aten.scalar_tensor(s=0, dtype=int64), {_SHIFTED})"
WHERE = (f"aten.where.self(reshape({MASK}, shape=?u), aten.scalar_tensor(s=0, dtype=?t),"
         f" {_EMBED.format(ids=LOCAL_WHERE)})")
# vLLM's get_masked_input_and_mask: the ids in the shard [s, e) or in the added-vocabulary range [a, a) (empty),
# shifted by s (or the added offset o), times the mask; the rows of ~mask.unsqueeze(-1) zeroed
_ORG = f"aten.bitwise_and.Tensor(aten.ge.Scalar({_I}, other={_S}), aten.lt.Scalar({_I}, other={_E}))"
_ADDED = f"aten.bitwise_and.Tensor(aten.ge.Scalar({_I}, other=?n), aten.lt.Scalar({_I}, other=?n))"
_VMASK = f"aten.bitwise_or.Tensor({_ORG}, {_ADDED})"
_OFFSET = (f"aten.add.Tensor(aten.mul.Tensor({_ORG}, aten.scalar_tensor(s={_S}, dtype=int64)),"
           f" aten.mul.Tensor({_ADDED}, aten.scalar_tensor(s=?o, dtype=int64)), alpha=1)")
VLLM = (f"aten.masked_fill.Scalar({_EMBED.format(ids=f'aten.mul.Tensor({_VMASK}, aten.sub.Tensor({_I}, {_OFFSET}, alpha=1))')},"
        f" reshape(aten.bitwise_not({_VMASK}), shape=?u), value=0)")
# torchtitan: the shifted ids clamped into the shard, the rows looked up times mask.unsqueeze(-1).to(dtype)
_TT_LOCAL = f"aten.clamp(aten.sub.Tensor({_I}, aten.scalar_tensor(s={_S}, dtype=int64)), min=0, max=?c)"
MASK_MULTIPLIED = (f"aten.mul.Tensor({_EMBED.format(ids=_TT_LOCAL)},"
                   f" aten._to_copy(reshape({_ORG}, shape=?u), dtype=?t))")

_RANGE = (f"rank({_W}) == 2 and size({_W}, 0) >= 1 and {_S} // 1 == {_S} and {_E} // 1 == {_E}"
          f" and {_S} < {_E} and {_E} - {_S} <= size({_W}, 0)")
# ?u is the ids' shape with a trailing 1 (mask.unsqueeze(-1)): ids of rank 1 to 3
_UNSQ = (f"((rank({_I}) == 1 and ?u == [size({_I}, 0), 1]) or (rank({_I}) == 2 and ?u == [size({_I}, 0), size({_I}, 1), 1])"
         f" or (rank({_I}) == 3 and ?u == [size({_I}, 0), size({_I}, 1), size({_I}, 2), 1]))")


def _examples(extra=lambda ids, s, e: {}):
    return tuple({"x0": [r, h], "x1": ids, "p_start": s, "p_end": e, "x1:dtype": "int64", **extra(ids, s, e)}
                 for r, h, ids, s, e in ((3, 4, [2, 3], 0, 3), (5, 2, [4], 2, 6), (4, 3, [1, 2, 2], 4, 8),
                                         (2, 5, [3], 1, 2), (6, 1, [2, 2], 3, 9)))


_U = lambda ids, s, e: {"u": list(ids) + [1]}  # noqa: E731
_IDX = {"x1": f"{_E} + 2"}

SPELLINGS = (
    (MEGATRON, _RANGE, _examples(), _IDX),
    (MEGATRON_INDEXED, _RANGE, _examples(), _IDX),
    (MASKED_FILL, f"{_RANGE} and {_UNSQ}", _examples(_U), _IDX),
    # (a float fill of 0 whatever the rows' dtype: the same value after promotion)
    (WHERE, f"{_RANGE} and {_UNSQ} and floating(?t) and floating(dtype({_W}))",
     _examples(lambda ids, s, e: {"u": list(ids) + [1], "t": "float32"}), _IDX),
    (VLLM, f"{_RANGE} and rank({_I}) == 1 and ?u == [size({_I}, 0), 1] and ?n // 1 == ?n and ?o // 1 == ?o",
     tuple(x for x in _examples(lambda ids, s, e: {"u": list(ids) + [1], "n": e + 3, "o": 1}) if len(x["x1"]) == 1),
     _IDX),
    # times the mask: the rows' values finite (0 * inf is nan); torchtitan has no padding row
    (MASK_MULTIPLIED, f"{_RANGE} and {_UNSQ} and ?c == {_E} - {_S} - 1 and floating(?t) and ?t == dtype({_W})"
     " and ?p == -1", _examples(lambda ids, s, e: {"u": list(ids) + [1], "c": e - s - 1, "t": "float32", "p": -1}),
     _IDX),
)


# -- the embedding's backward: core.masked_embedding_backward(g, ids, start=s, end=e) -----------------------------
# the gradient rows g[k] of the ids in [s, e) summed into row ids_k - s of an [e - s, D] table, the others dropped:
# the backward of each spelling of core.masked_lookup above (its masked rows' gradient zeroed the way the forward
# zeroed the rows, then embedding_dense_backward at the forward's shifted, masked ids). Over ?x0 (the gradient of
# the lookup's output, ids' shape + [D]), ?x1 (the ids), ?p_start, ?p_end; ?n the rows e - s
_DENSE_BW = "aten.embedding_dense_backward({g}, {ids}, num_weights=?n, padding_idx=-1, scale_grad_by_freq=false)"
# Megatron: grad[mask] = 0 (index_put's backward), at the index_put-masked ids
BACKWARD = _DENSE_BW.format(g=f"aten.index_put({_W}, {MASK}, aten.zeros(size=[], dtype=float32))", ids=LOCAL)
# ... its masked_fill form (grad.masked_fill(mask.unsqueeze(-1), 0)) and torch.where form
BACKWARD_MASKED_FILL = _DENSE_BW.format(g=f"aten.masked_fill.Scalar({_W}, reshape({MASK}, shape=?u), value=0)",
                                        ids=LOCAL_MF)
BACKWARD_WHERE = _DENSE_BW.format(
    g=f"aten.where.self(reshape({MASK}, shape=?u), aten.scalar_tensor(s=0, dtype=?t), {_W})", ids=LOCAL_WHERE)
# torchtitan: the gradient times the cast mask, at the clamped ids
BACKWARD_MASK_MULTIPLIED = _DENSE_BW.format(g=f"aten.mul.Tensor({_W}, aten._to_copy(reshape({_ORG}, shape=?u), dtype=?t))",
                                            ids=_TT_LOCAL)

_BW_RANGE = (f"rank({_W}) == rank({_I}) + 1 and floating(dtype({_W})) and {_S} // 1 == {_S} and {_E} // 1 == {_E}"
             f" and {_S} < {_E} and ?n == {_E} - {_S}")


def _bw_examples(extra=lambda ids, s, e: {}):
    return tuple({"x0": list(ids) + [d], "x1": ids, "p_start": s, "p_end": e, "n": e - s, "x1:dtype": "int64",
                  **extra(ids, s, e)}
                 for d, ids, s, e in ((4, [2, 3], 0, 3), (2, [4], 2, 6), (3, [1, 2, 2], 4, 8), (5, [3], 1, 2),
                                      (1, [2, 2], 3, 9), (3, [6], 0, 1)))


BACKWARD_SPELLINGS = (
    (BACKWARD, _BW_RANGE, _bw_examples(), _IDX),
    (BACKWARD_MASKED_FILL, f"{_BW_RANGE} and {_UNSQ}", _bw_examples(_U), _IDX),
    (BACKWARD_WHERE, f"{_BW_RANGE} and {_UNSQ} and floating(?t)",
     _bw_examples(lambda ids, s, e: {"u": list(ids) + [1], "t": "float32"}), _IDX),
    # times the mask: the gradient's values finite (0 * inf is nan)
    (BACKWARD_MASK_MULTIPLIED, f"{_BW_RANGE} and {_UNSQ} and ?c == {_E} - {_S} - 1 and ?t == dtype({_W})",
     _bw_examples(lambda ids, s, e: {"u": list(ids) + [1], "c": e - s - 1, "t": "float32"}), _IDX),
)



# -- the target's logit: core.masked_pick(x, t, start=s, end=e) -------------------------------------------------
# rank r's pick of the target's logit from its columns [s, e) of logits x [m, cols] for m targets t (any shape):
# x[k, t_k - s] where s <= t_k < e, zero elsewhere, in t's shape (Megatron's _VocabParallelCrossEntropy). The
# spellings over ?x0 (the logits), ?x1 (the targets), ?p_start, ?p_end: the masked targets and the mask above
_ZERO = "aten.full(size=[], fill_value=0, dtype=float32)"
_ROWS = "aten.arange.start(start=0, end=?m)"
# Megatron-core: logits_2d[arange_1d, masked_target.view(-1)] viewed as the target, [target_mask] = 0.0
PICK = (f"aten.index_put(reshape(aten.index.Tensor({_W}, {_ROWS}, reshape({LOCAL}, shape=?u)), shape=?w), {MASK},"
        f" {_ZERO})")
# ... on targets already flat (no views)
PICK_FLAT = f"aten.index_put(aten.index.Tensor({_W}, {_ROWS}, {LOCAL}), {MASK}, {_ZERO})"
# ... with masked_fill: (t - s).masked_fill(mask, 0), then predicted.masked_fill(mask, 0.0)
PICK_MASKED_FILL = f"aten.masked_fill.Scalar(aten.index.Tensor({_W}, {_ROWS}, {LOCAL_MF}), {MASK}, value=0)"
# ... with torch.where: torch.where(mask, 0, t - s), then torch.where(mask, 0.0, predicted)
PICK_WHERE = f"aten.where.self({MASK}, aten.scalar_tensor(s=0, dtype=?t), aten.index.Tensor({_W}, {_ROWS}, {LOCAL_WHERE}))"

_COLS_RANGE = (f"rank({_W}) == 2 and size({_W}, 1) >= 1 and {_S} // 1 == {_S} and {_S} < {_E}"
               f" and {_E} - {_S} <= size({_W}, 1) and ?m == size({_W}, 0)")
_FLAT = f"rank({_I}) == 1 and size({_I}, 0) == ?m"


def _pick_examples(extra=lambda t: {}):
    return tuple({"x0": [m, c], "x1": t, "p_start": s, "p_end": e, "m": m, "x1:dtype": "int64", **extra(t)}
                 for m, c, t, s, e in ((6, 3, [3, 2], 0, 3), (4, 2, [4], 2, 4), (6, 4, [2, 3], 4, 8),
                                       (2, 5, [2], 1, 2), (4, 6, [2, 2], 3, 9)))


_FLAT_EXAMPLES = tuple(x for x in _pick_examples() if len(x["x1"]) == 1)
_PICK_IDX = {"x1": f"{_E} + 2"}

PICK_SPELLINGS = (
    (PICK, f"{_COLS_RANGE} and ?u == [?m] and ?m == numel({_I}) and ?w == shape({_I})",
     _pick_examples(lambda t: {"u": [int(np.prod(t))], "w": list(t)}), _PICK_IDX),
    (PICK_FLAT, f"{_COLS_RANGE} and {_FLAT}", _FLAT_EXAMPLES, _PICK_IDX),
    (PICK_MASKED_FILL, f"{_COLS_RANGE} and {_FLAT}", _FLAT_EXAMPLES, _PICK_IDX),
    # (a float fill of 0 whatever the logits' dtype: the same value after promotion)
    (PICK_WHERE, f"{_COLS_RANGE} and {_FLAT} and floating(?t) and floating(dtype({_W}))",
     tuple({**x, "t": "float32"} for x in _FLAT_EXAMPLES), _PICK_IDX),
)

# -- its backward: core.masked_one_hot_update(x, t, start=s, end=e) ------------------------------------------------
# x [m, cols] less the one-hot of the targets it owns: x[k, t_k - s] -= 1 where s <= t_k < e (Megatron:
# grad_2d[arange_1d, masked_target_1d] -= 1.0 - target_mask.view(-1).float(), softmax minus the one-hot)
_UPD_LOCAL = f"reshape({LOCAL}, shape=?u)"
UPDATE = (f"aten.index_put({_W}, {_ROWS}, {_UPD_LOCAL}, aten.sub.Tensor(aten.index.Tensor({_W}, {_ROWS}, {_UPD_LOCAL}),"
          f" aten.rsub.Scalar(aten._to_copy(reshape({MASK}, shape=?u), dtype=float32), other=1)))")
# ... on targets already flat
UPDATE_FLAT = (f"aten.index_put({_W}, {_ROWS}, {LOCAL}, aten.sub.Tensor(aten.index.Tensor({_W}, {_ROWS}, {LOCAL}),"
               f" aten.rsub.Scalar(aten._to_copy({MASK}, dtype=float32), other=1)))")
# ... with the targets masked by masked_fill or torch.where (the forward's spelling, saved for the backward)
UPDATE_MASKED_FILL = UPDATE_FLAT.replace(LOCAL, LOCAL_MF)
UPDATE_WHERE = UPDATE_FLAT.replace(LOCAL, LOCAL_WHERE)
UPDATE_SPELLINGS = (
    (UPDATE, f"{_COLS_RANGE} and ?u == [?m] and ?m == numel({_I}) and floating(dtype({_W}))",
     _pick_examples(lambda t: {"u": [int(np.prod(t))]}), _PICK_IDX),
    *((form, f"{_COLS_RANGE} and {_FLAT} and floating(dtype({_W}))", _FLAT_EXAMPLES, _PICK_IDX)
      for form in (UPDATE_FLAT, UPDATE_MASKED_FILL, UPDATE_WHERE)),
)


# -- nll_loss's one-hot of the targets: core.masked_neg_one_hot(t, start=s, end=e, dtype=y) ----------------------
# -1 at (k, t_k - s) where s <= t_k < e, zero elsewhere: [n, e - s] of dtype y for n targets t -- rank r's columns
# of the gradient nll_loss scatters into zeros (the one-hot update above of a zero table). torchtitan's loss
# parallel writes (mask - 1) into zeros at (row, masked local target): the zeros are named in the spelling (an
# aten.full, as a zeros_like is captured), not an input. Over ?x0 (the targets), ?p_start, ?p_end, ?p_dtype
_T, _Y = "?x0", "?p_dtype"
NEG_ONE_HOT = (f"aten.index_put(aten.full(size=?z, fill_value=0, dtype={_Y}), aten.arange(end=?m, dtype=None),"
               f" {LOCAL.replace(_I, _T)}, aten.sub.Tensor(aten._to_copy({MASK.replace(_I, _T)}, dtype={_Y}),"
               f" aten.scalar_tensor(s=1, dtype={_Y}), alpha=1))")
NEG_ONE_HOT_SPELLINGS = (
    (NEG_ONE_HOT, f"rank({_T}) == 1 and ?m == size({_T}, 0) and ?z == [size({_T}, 0), {_E} - {_S}]"
     f" and {_S} // 1 == {_S} and {_E} // 1 == {_E} and {_S} < {_E} and floating({_Y})",
     tuple({"x0": [n], "p_start": s, "p_end": e, "p_dtype": "float32", "m": n, "z": [n, e - s], "x0:dtype": "int64"}
           for n in (1, 2, 3, 4, 6) for s, e in ((0, 3), (2, 6), (4, 8), (1, 2), (3, 9))),  # (?m is no size: seeds)
     {"x0": f"{_E} + 2"}),
)


def _shape(shapes, attrs, cx):
    w, ids = shapes
    s, e = attrs["start"], attrs["end"]
    if len(w) != 2:
        fail(f"{MASKED_LOOKUP}: table must be rank 2, got {fmt_shape(w)}")
    if not cx.prove("<=", S.norm(s), S.norm(e)) or not cx.prove("<=", S.norm(S.sym(e) - S.sym(s)), w[0]):
        fail(f"{MASKED_LOOKUP}: rows [{S.text(s)}, {S.text(e)}) do not fit table {fmt_shape(w)}")
    return tuple(ids) + (w[1],)


def _ref(xs, attrs):
    w, ids = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64)
    s, e = int(attrs["start"]), int(attrs["end"])
    inside = (ids >= s) & (ids < e)
    rows = w[np.where(inside, ids - s, 0)]
    return np.where(inside[..., None], rows, np.zeros((), dtype=w.dtype))


def _picked_shape(name):
    def shape(shapes, attrs, cx):
        x, t = shapes
        s, e = attrs["start"], attrs["end"]
        if len(x) != 2:
            fail(f"{name}: logits must be rank 2, got {fmt_shape(x)}")
        if not cx.prove("==", x[0], numel(t)):
            fail(f"{name}: {fmt_shape(x)} logits for targets {fmt_shape(t)}: one row per target")
        if not cx.prove("<", S.norm(s), S.norm(e)) or not cx.prove("<=", S.norm(S.sym(e) - S.sym(s)), x[1]):
            fail(f"{name}: columns [{S.text(s)}, {S.text(e)}) do not fit logits {fmt_shape(x)}")
        return tuple(t) if name == MASKED_PICK else tuple(x)
    return shape


def _owned(xs, attrs):
    """Logits x, flat targets t, whether rank owns each, the local column (0 where it does not)."""
    x, t = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64).reshape(-1)
    s, e = int(attrs["start"]), int(attrs["end"])
    inside = (t >= s) & (t < e)
    return x, inside, np.where(inside, t - s, 0)


def _pick_ref(xs, attrs):
    x, inside, cols = _owned(xs, attrs)
    picked = x[np.arange(x.shape[0]), cols]
    return np.where(inside, picked, np.zeros((), dtype=x.dtype)).reshape(np.shape(xs[1]))


def _update_ref(xs, attrs):
    x, inside, cols = _owned(xs, attrs)
    out = x.copy()
    rows = np.arange(x.shape[0])
    out[rows, cols] = out[rows, cols] - inside.astype(x.dtype)
    return out


def _backward_shape(shapes, attrs, cx):
    g, ids = shapes
    s, e = attrs["start"], attrs["end"]
    if len(g) != len(ids) + 1 or not all(cx.prove("==", a, b) for a, b in zip(g, ids)):
        fail(f"{MASKED_EMBEDDING_BACKWARD}: gradient {fmt_shape(g)} is not ids {fmt_shape(ids)} plus an embedding dim")
    if not cx.prove("<", S.norm(s), S.norm(e)):
        fail(f"{MASKED_EMBEDDING_BACKWARD}: rows [{S.text(s)}, {S.text(e)}) are empty")
    return (S.norm(S.sym(e) - S.sym(s)), g[-1])


def _backward_ref(xs, attrs):
    g, ids = np.asarray(xs[0]), np.asarray(xs[1]).astype(np.int64)
    s, e = int(attrs["start"]), int(attrs["end"])
    inside = (ids >= s) & (ids < e)
    out = np.zeros((e - s, g.shape[-1]), dtype=g.dtype)
    np.add.at(out, ids[inside] - s, g[inside])
    return out


def _neg_one_hot_shape(shapes, attrs, cx):
    (t,) = shapes
    s, e = attrs["start"], attrs["end"]
    if len(t) != 1:
        fail(f"{MASKED_NEG_ONE_HOT}: targets must be rank 1, got {fmt_shape(t)}")
    if not cx.prove("<", S.norm(s), S.norm(e)):
        fail(f"{MASKED_NEG_ONE_HOT}: columns [{S.text(s)}, {S.text(e)}) are empty")
    return (t[0], S.norm(S.sym(e) - S.sym(s)))


def _neg_one_hot_ref(xs, attrs):
    t = np.asarray(xs[0]).astype(np.int64)
    s, e = int(attrs["start"]), int(attrs["end"])
    inside = (t >= s) & (t < e)
    out = np.zeros((t.shape[0], e - s), dtype=np.float64)  # (floats: references compute in float64)
    out[np.arange(t.shape[0])[inside], t[inside] - s] = -1
    return out


OPS = [
    OpDef(MASKED_LOOKUP, 2, _shape, _ref, (AttrSpec("start", "scalar"), AttrSpec("end", "scalar")),
          doc="Rank r's lookup of rows [start, end) of a table it holds: table[ids - start] where "
              "start <= ids < end, zero rows elsewhere.", fuses=SPELLINGS),
    OpDef(MASKED_PICK, 2, _picked_shape(MASKED_PICK), _pick_ref, (AttrSpec("start", "scalar"), AttrSpec("end", "scalar")),
          doc="Rank r's pick of each target's logit from its columns [start, end) of logits [m, cols]: "
              "x[k, t_k - start] where start <= t_k < end, zero elsewhere; in the targets' shape.",
          fuses=PICK_SPELLINGS),
    OpDef(MASKED_ONE_HOT_UPDATE, 2, _picked_shape(MASKED_ONE_HOT_UPDATE), _update_ref,
          (AttrSpec("start", "scalar"), AttrSpec("end", "scalar")),
          doc="x [m, cols] less the one-hot of the targets in [start, end): x[k, t_k - start] -= 1 where "
              "start <= t_k < end.", fuses=UPDATE_SPELLINGS),
    OpDef(MASKED_EMBEDDING_BACKWARD, 2, _backward_shape, _backward_ref,
          (AttrSpec("start", "scalar"), AttrSpec("end", "scalar")),
          doc="The gradient of core.masked_lookup's table: rows g[k] of the ids in [start, end) summed into row "
              "ids_k - start of an [end - start, D] table, the others dropped.", fuses=BACKWARD_SPELLINGS),
    OpDef(MASKED_NEG_ONE_HOT, 1, _neg_one_hot_shape, _neg_one_hot_ref,
          (AttrSpec("start", "scalar"), AttrSpec("end", "scalar"), AttrSpec("dtype", "str")),
          doc="-1 at (k, t_k - start) where start <= t_k < end, zero elsewhere: [n, end - start] of dtype for "
              "n targets (nll_loss's gradient, the columns [start, end)).",
          dtype=lambda ds, a: a["dtype"], fuses=NEG_ONE_HOT_SPELLINGS),
]

_A, _AB = "size(?a, 0)", "size(?a, 0) + size(?b, 0)"
_C = "size(?a, 1)"  # the first part's columns
_SPLIT_COND = (f"rank(?a) == 2 and {_C} >= 1 and size(?b, 1) >= 1 and ?s // 1 == ?s and ?s + {_C} < ?e"
               f" and ?e - ?s <= {_C} + size(?b, 1)")
_SPLIT_EXAMPLES = [{"a": [m, a], "b": [m, b], "t": t, "s": s, "e": e}
                   for m, a, b, t, s, e in ((6, 2, 3, [3, 2], 1, 6), (4, 2, 2, [4], 0, 4), (2, 1, 3, [2], 4, 8),
                                            (6, 3, 1, [2, 3], 2, 6), (3, 2, 2, [3], 0, 3), (4, 4, 4, [2, 2], 0, 8))]
LEMMAS = [
    # a masked lookup of a concatenation (more ranks, or a shard past the real rows: vLLM's padding) is the sum
    # of its parts' masked lookups, the range split where the first part ends
    L(300, "masked-lookup-of-row-shards",
      f"{MASKED_LOOKUP}(concat(?a, ?b, dim=0), ?i, start=?s, end=?e)"
      f" => sum({MASKED_LOOKUP}(?a, ?i, start=?s, end=?s + {_A}), {MASKED_LOOKUP}(?b, ?i, start=?s + {_A}, end=?e))",
      f"rank(?a) == 2 and {_A} >= 1 and size(?b, 0) >= 1 and ?s // 1 == ?s and ?s + {_A} < ?e and ?e - ?s <= {_AB}",
      index={"i": "?e + 2"},
      examples=[{"a": [a, 3], "b": [b, 3], "i": i, "s": s, "e": e}
                for a, b, i, s, e in ((2, 3, [7], 1, 6), (1, 2, [2, 3], 0, 3), (4, 4, [3, 4], 4, 12), (3, 1, [6], 2, 6),
                                      (2, 2, [1, 2, 4], 0, 4), (2, 4, [3], 0, 5), (3, 3, [2, 2], 1, 5))]),
    # the same for the target's logit and the one-hot update over column shards (more ranks, or logits of a
    # whole vocabulary [0, V) at TP=1 masking labels outside it: any labels)
    L(301, "masked-pick-of-column-shards",
      f"{MASKED_PICK}(concat(?a, ?b, dim=1), ?t, start=?s, end=?e)"
      f" => sum({MASKED_PICK}(?a, ?t, start=?s, end=?s + {_C}), {MASKED_PICK}(?b, ?t, start=?s + {_C}, end=?e))",
      _SPLIT_COND, index={"t": "?e + 2"}, examples=_SPLIT_EXAMPLES),
    L(302, "masked-one-hot-update-of-column-shards",
      f"{MASKED_ONE_HOT_UPDATE}(concat(?a, ?b, dim=1), ?t, start=?s, end=?e)"
      f" => concat({MASKED_ONE_HOT_UPDATE}(?a, ?t, start=?s, end=?s + {_C}),"
      f" {MASKED_ONE_HOT_UPDATE}(?b, ?t, start=?s + {_C}, end=?e), dim=1)",
      f"{_SPLIT_COND} and floating(dtype(?a)) and floating(dtype(?b))", index={"t": "?e + 2"},
      examples=_SPLIT_EXAMPLES),
    # the backward of a masked lookup of rows [s, e) splits where a rank's masked backward of the same gradient
    # and ids ends (more ranks; the whole table's backward over [0, V): aten:472): constrained (§4.3) to such a
    # rank's, ?m its end
    L(303, "masked-embedding-backward-of-row-shards",
      f"{MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=?s, end=?e)"
      f" => concat({MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=?s, end=?m), {MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=?m,"
      " end=?e), dim=0)",
      "rank(?g) == rank(?i) + 1 and ?s // 1 == ?s and ?m // 1 == ?m and ?s < ?m and ?m < ?e",
      when=f"{MASKED_EMBEDDING_BACKWARD}(?g, ?i, start=?s, end=?m)", index={"i": "?e + 2"},
      examples=[{"g": list(i) + [3], "i": i, "s": s, "m": m, "e": e}
                for i, s, m, e in (([2, 3], 1, 3, 6), ([4], 0, 2, 4), ([3, 4], 4, 8, 16), ([5], 2, 3, 4),
                                   ([2, 2, 2], 0, 1, 5))]),
    # ... and nll_loss's one-hot of columns [s, e), where a rank's one-hot of the same targets ends
    L(304, "masked-neg-one-hot-of-column-shards",
      f"{MASKED_NEG_ONE_HOT}(?t, start=?s, end=?e, dtype=?y)"
      f" => concat({MASKED_NEG_ONE_HOT}(?t, start=?s, end=?m, dtype=?y), {MASKED_NEG_ONE_HOT}(?t, start=?m, end=?e,"
      " dtype=?y), dim=1)",
      "rank(?t) == 1 and ?s // 1 == ?s and ?m // 1 == ?m and ?s < ?m and ?m < ?e",
      when=f"{MASKED_NEG_ONE_HOT}(?t, start=?s, end=?m, dtype=?y)", index={"t": "?e + 2"},
      examples=[{"t": [n], "s": s, "m": m, "e": e, "y": "float32"}
                for n, s, m, e in ((3, 1, 3, 6), (2, 0, 2, 4), (4, 4, 8, 16), (1, 2, 3, 4), (5, 0, 1, 5))]),
]
