"""Lemmas of the vllm pack. References: 701-749 (720-725: rotary embedding and attention).

RMSNorm normalises each row over the last dim, so rows split along any other dim are normalised
independently (701-703). SiluAndMul pairs column j of the first half with column j of the second half:
rows split along another dim stay independent (704), and -- vLLM's merged gate_up layout -- when the
first half is itself concat(a, b) and the second concat(c, e) with a, c (and b, e) of one width, the
result is concat(silu_and_mul([a | c]), silu_and_mul([b | e])) (705): the sequential merged weight
concat(all ranks' gate rows, all ranks' up rows) against each rank's [gate_r; up_r].

Rotary embedding and attention act per token and per head (720-725): ``_C.rotary_embedding`` does to
query what it does to key, each on its own (720, 721: ``vllm.rope`` of one tensor), and ``vllm.rope``
of heads split at a head boundary -- the flat [tokens, heads * head_size] layout or [tokens, heads,
head_size] -- is the concatenation of the parts' (722), as is that of tokens split with their positions
(723). Attention of heads split so that each part keeps whole query groups with their KV heads is the
concatenation of the parts' attentions (724, grouped-query attention under TP); when every query head
shares one KV head (a KV head replicated on several ranks) any split of the query heads will do (725).
"""
from graphguard.ir.lemma import L

NUMBERS = range(700, 750)  # this file's lemma numbers (the plugin loader refuses others)

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
ROTARY, ROPE, ATTN = "_C.rotary_embedding", "vllm.rope", "vllm.unified_attention_with_output"
_E = "epsilon=?e"
_R = "head_size=?h, is_neox=?n"
_ABS = "layer_name=?l, absent=[3, 4]"  # output written-only (not an input), no quantised output


def _rows(a, b, d):  # shards a, b on dim d (not the last), weight over the last dim
    return {"a": a, "b": b, "d": d, "w": [a[-1]], "e": "1/1000000"}


_RMS_SEEDS = [_rows([2, 4], [3, 4], 0), _rows([2, 3, 4], [2, 1, 4], 1), _rows([1, 2, 5], [3, 2, 5], 0)]
_FUSED_SEEDS = [dict(s, c=s["a"], f=s["b"]) for s in _RMS_SEEDS]
_SILU_ROW_SEEDS = [{"a": [2, 4], "b": [1, 4], "d": 0}, {"a": [2, 3, 6], "b": [2, 2, 6], "d": 1}]
_SILU_GU_SEEDS = [{"a": [3, 2], "b": [3, 1], "c": [3, 2], "e": [3, 1], "d": 1},
                  {"a": [2, 1, 3], "b": [2, 1, 3], "c": [2, 1, 3], "e": [2, 1, 3], "d": 2},
                  {"a": [4], "b": [2], "c": [4], "e": [2], "d": 0}]

_ROTARY_SEEDS = [{"p": [3], "q": [3, 8], "k": [3, 4], "c": [16, 4], "h": 4, "n": True},
                 {"p": [2], "q": [2, 3, 6], "k": [2, 1, 6], "c": [16, 2], "h": 6, "n": False},
                 {"p": [4], "q": [4, 12], "k": [4, 6], "c": [16, 6], "h": 6, "n": True}]
# positions [T], a cos_sin_cache [16, rot], heads of size h, split along d
_HEAD_SEEDS = [{"p": [t], "c": [16, rot], "h": h, "n": n, "a": a, "b": b, "d": d}
               for t, rot, h, a, b, d in ((3, 4, 4, [3, 8], [3, 4], 1), (2, 2, 6, [2, 1, 6], [2, 2, 6], 1),
                                          (4, 2, 2, [4, 2], [4, 6], 1), (3, 4, 4, [3, 2, 4], [3, 2, 8], 2),
                                          (3, 4, 4, [3, 2, 4], [3, 2, 2], 2))  # the last: heads straddle a and b
               for n in (True, False)]
_TOKEN_SEEDS = [{"p": [2], "r": [3], "a": [2, 8], "b": [3, 8], "c": [16, 4], "h": 4, "n": n} for n in (True, False)] + \
    [{"p": [1], "r": [2], "a": [1, 2, 6], "b": [2, 2, 6], "c": [16, 6], "h": 6, "n": True}]


def _attn(t, hq, hk, d=2, dv=3):
    return [t, hq, d], [t, hk, d], [t, hk, dv]


def _gqa_seed(t, a, b, c, e):  # query heads a | b over KV heads c | e
    (qa, ka, va), (qb, kb, vb) = _attn(t, a, c), _attn(t, b, e)
    return {"a": qa, "b": qb, "c": ka, "e": kb, "f": va, "g": vb, "l": "attn"}


_GQA_SEEDS = [_gqa_seed(3, 2, 2, 1, 1), _gqa_seed(4, 6, 6, 1, 1), _gqa_seed(2, 4, 2, 2, 1), _gqa_seed(3, 1, 1, 1, 1),
              _gqa_seed(1, 3, 6, 1, 2)]
_SHARED_SEEDS = [{"a": [3, a, 2], "b": [3, b, 2], "k": [3, 1, 2], "v": [3, 1, 3], "l": "attn"}
                 for a, b in ((1, 1), (2, 1), (3, 3), (1, 4))]

LEMMAS = [
    L(701, "rms-norm-of-row-concat",
      f"{RMS}(concat(?a, ?b, dim=?d), ?w, {_E}) => concat({RMS}(?a, ?w, {_E}), {RMS}(?b, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1", examples=_RMS_SEEDS),
    L(702, "fused-add-rms-norm-of-row-concats",
      f"{FUSED}#0(concat(?a, ?b, dim=?d), concat(?c, ?f, dim=?d), ?w, {_E})"
      f" => concat({FUSED}#0(?a, ?c, ?w, {_E}), {FUSED}#0(?b, ?f, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1 and shape(?a) == shape(?c)", examples=_FUSED_SEEDS),
    L(703, "fused-add-rms-norm-residual-of-row-concats",
      f"{FUSED}#1(concat(?a, ?b, dim=?d), concat(?c, ?f, dim=?d), ?w, {_E})"
      f" => concat({FUSED}#1(?a, ?c, ?w, {_E}), {FUSED}#1(?b, ?f, ?w, {_E}), dim=?d)",
      "?d < rank(?a) - 1 and shape(?a) == shape(?c)", examples=_FUSED_SEEDS),
    L(704, "silu-and-mul-of-row-concat",
      f"{SILU}(concat(?a, ?b, dim=?d)) => concat({SILU}(?a), {SILU}(?b), dim=?d)",
      "?d < rank(?a) - 1", examples=_SILU_ROW_SEEDS),
    L(705, "silu-and-mul-of-merged-gate-up",
      f"{SILU}(concat(concat(?a, ?b, dim=?d), concat(?c, ?e, dim=?d), dim=?d))"
      f" => concat({SILU}(concat(?a, ?c, dim=?d)), {SILU}(concat(?b, ?e, dim=?d)), dim=?d)",
      "?d == rank(?a) - 1 and shape(?a) == shape(?c) and shape(?b) == shape(?e)", examples=_SILU_GU_SEEDS),
    # SiluAndMul by its definition, in ATen ops: lets the elementwise and slice lemmas follow any sharding
    # of the two halves (any degree, any concat nesting) -- what makes vLLM's merged gate_up TP verify
    L(706, "silu-and-mul-is-silu-times-up",
      f"{SILU}(?x) => aten.mul.Tensor(aten.silu(slice(?x, dim=rank(?x) - 1, start=0, end=size(?x, rank(?x) - 1) // 2)),"
      " slice(?x, dim=rank(?x) - 1, start=size(?x, rank(?x) - 1) // 2, end=size(?x, rank(?x) - 1)))",
      "2 * (size(?x, rank(?x) - 1) // 2) == size(?x, rank(?x) - 1)",
      examples=[{"x": [3, 4]}, {"x": [2, 1, 6]}, {"x": [2]}]),
    # a column block of a product is the product with that column block (vLLM's per-rank gate/up halves)
    L(707, "matmul-of-column-slice",
      "matmul(?x, slice(?w, dim=1, start=?s, end=?e)) => slice(matmul(?x, ?w), dim=1, start=?s, end=?e)",
      "rank(?w) == 2",
      examples=[{"x": [3, 4], "w": [4, 6], "s": 0, "e": 3}, {"x": [2, 2], "w": [2, 5], "s": 1, "e": 4}]),
    # the rotary kernel rotates query and key independently: each is vllm.rope of itself
    L(720, "rotary-embedding-query-is-rope",
      f"{ROTARY}#0(?p, ?q, ?k, ?c, {_R}) => {ROPE}(?p, ?q, ?c, {_R})", index={"p": "size(?c, 0)"},
      examples=_ROTARY_SEEDS),
    L(721, "rotary-embedding-key-is-rope",
      f"{ROTARY}#1(?p, ?q, ?k, ?c, {_R}) => {ROPE}(?p, ?k, ?c, {_R})", index={"p": "size(?c, 0)"},
      examples=_ROTARY_SEEDS),
    # heads split at head boundaries: the last dim in whole heads on both sides ([T, H*D]: a token's row is
    # ?a's heads then ?b's; of higher rank the rows interleave, so ?b's part must be whole heads too), or
    # [T, H, D] split along H
    L(722, "rope-of-head-concat",
      f"{ROPE}(?p, concat(?a, ?b, dim=?d), ?c, {_R}) => concat({ROPE}(?p, ?a, ?c, {_R}), {ROPE}(?p, ?b, ?c, {_R}), dim=?d)",
      "?d >= 1 and ((?d == rank(?a) - 1 and size(?a, ?d) // ?h * ?h == size(?a, ?d)"
      " and size(?b, ?d) // ?h * ?h == size(?b, ?d)) or (?d == rank(?a) - 2 and size(?a, rank(?a) - 1) == ?h))",
      index={"p": "size(?c, 0)"}, examples=_HEAD_SEEDS),
    # tokens split with their positions (sequence parallelism)
    L(723, "rope-of-token-concat",
      f"{ROPE}(concat(?p, ?r, dim=0), concat(?a, ?b, dim=0), ?c, {_R})"
      f" => concat({ROPE}(?p, ?a, ?c, {_R}), {ROPE}(?r, ?b, ?c, {_R}), dim=0)",
      "rank(?p) == 1 and size(?p, 0) == size(?a, 0)",
      index={"p": "size(?c, 0)", "r": "size(?c, 0)"}, examples=_TOKEN_SEEDS),
    # attention is per head: query heads split with their KV heads, each part keeping the global group size
    L(724, "attention-of-head-concats",
      f"{ATTN}(concat(?a, ?b, dim=1), concat(?c, ?e, dim=1), concat(?f, ?g, dim=1), {_ABS})"
      f" => concat({ATTN}(?a, ?c, ?f, {_ABS}), {ATTN}(?b, ?e, ?g, {_ABS}), dim=1)",
      "rank(?a) == 3 and size(?c, 1) == size(?f, 1) and size(?e, 1) == size(?g, 1)"
      " and size(?a, 1) * (size(?c, 1) + size(?e, 1)) == size(?c, 1) * (size(?a, 1) + size(?b, 1))",
      examples=_GQA_SEEDS),
    # one KV head shared by every query head (a KV head replicated on the ranks of its group)
    L(725, "attention-of-query-concat-over-one-kv-head",
      f"{ATTN}(concat(?a, ?b, dim=1), ?k, ?v, {_ABS}) => concat({ATTN}(?a, ?k, ?v, {_ABS}), {ATTN}(?b, ?k, ?v, {_ABS}), dim=1)",
      "rank(?a) == 3 and size(?k, 1) == 1", examples=_SHARED_SEEDS),
]
