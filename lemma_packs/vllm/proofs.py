"""What the vllm pack's lemmas prove -- and what they must not: each case a pair of terms over the tensors of
``SHAPES`` (``MUST_NOT_SHAPES`` for the must-nots), proved equal (``PROVES``) or not (``MUST_NOT_PROVE``) by the
loaded lemmas. tests/test_pack_proofs.py collects every built-in pack's ``proofs.py``."""
from __future__ import annotations

RMS, SILU = "_C.rms_norm", "_C.silu_and_mul"
ROTARY, ATTN = "_C.rotary_embedding", "vllm.unified_attention_with_output"

SHAPES = {"A": [3, 2], "B": [3, 2], "C": [3, 2], "E": [3, 2], "X0": [2, 8], "X1": [3, 8], "W": [8],
          "P": [3], "Q0": [3, 8], "Q1": [3, 8], "K0": [3, 4], "K1": [3, 4], "CS": [16, 4],
          **{f"H{r}": [3, 3, 4] for r in range(4)}, **{f"KV{r}": [3, 1, 4] for r in range(4)}}
_RA = "head_size=4, is_neox=true"
_AA = "layer_name=attn, absent=[3, 4]"


def rotary(q, k, i):
    return f"{ROTARY}#{i}(P, {q}, {k}, CS, {_RA})"


def attn(q, k, v):
    return f"{ATTN}({q}, {k}, {v}, {_AA})"


def silu(x):
    return f"{SILU}({x})"


def cat(*xs, d=1):
    return f"concat({', '.join(xs)}, dim={d})"


PROVES = [
    # vLLM's merged gate_up: [gate_0 | gate_1 | up_0 | up_1] -> per rank [gate_r | up_r]
    (silu(cat(cat("A", "B"), cat("C", "E"))), cat(silu(cat("A", "C")), silu(cat("B", "E")))),
    (silu(cat("A", "B", "C", "E")), cat(silu(cat("A", "C")), silu(cat("B", "E")))),  # left-nested, via 706
    (f"{RMS}(concat(X0, X1, dim=0), W, epsilon=0.000001)",
     f"concat({RMS}(X0, W, epsilon=0.000001), {RMS}(X1, W, epsilon=0.000001), dim=0)"),
    # TP: each rank rotates its own q and k heads; the sequential rotary of the concatenations is theirs
    (rotary(cat("Q0", "Q1"), cat("K0", "K1"), 0), cat(rotary("Q0", "K0", 0), rotary("Q1", "K1", 0))),
    (rotary(cat("Q0", "Q1"), cat("K0", "K1"), 1), cat(rotary("Q0", "K0", 1), rotary("Q1", "K1", 1))),
    # GQA at TP 2: 6 query heads and 1 KV head per rank
    (attn(cat(cat("H0", "H1"), cat("H2", "H3")), cat("KV0", "KV2"), cat("KV1", "KV3")),
     cat(attn(cat("H0", "H1"), "KV0", "KV1"), attn(cat("H2", "H3"), "KV2", "KV3"))),
    # TP 4 with each KV head replicated on two ranks: 3 query heads and the shared KV head per rank
    (attn(cat(cat("H0", "H1"), cat("H2", "H3")), cat("KV0", "KV2"), cat("KV1", "KV3")),
     cat(attn("H0", "KV0", "KV1"), attn("H1", "KV0", "KV1"), attn("H2", "KV2", "KV3"), attn("H3", "KV2", "KV3"))),
]

MUST_NOT_PROVE = [
    # the ranks' [gate_r | up_r] blocks concatenated are not the sequential [gate | up]
    (silu(cat(cat("A", "C"), cat("B", "E"))), cat(silu(cat("A", "C")), silu(cat("B", "E")))),
    (silu(cat(cat("A", "B"), cat("C", "E"))), cat(silu(cat("A", "B")), silu(cat("C", "E")))),
    # RMSNorm of a hidden-split input is not the concat of the halves' norms
    (f"{RMS}(concat(A, B, dim=1), concat(W, W, dim=0), epsilon=0.000001)",
     f"concat({RMS}(A, W, epsilon=0.000001), {RMS}(B, W, epsilon=0.000001), dim=1)"),
    # rotary splits at head boundaries only: 8 = 2 heads of 4, not 4 heads of 2 split 3 | 1
    (rotary(cat("Q0", "Q1"), cat("K0", "K1"), 0), cat(rotary("Q1", "K0", 0), rotary("Q0", "K1", 0))),
    # the KV heads of the other half of the query heads (a misplaced GQA group)
    (attn(cat(cat("H0", "H1"), cat("H2", "H3")), cat("KV0", "KV2"), cat("KV1", "KV3")),
     cat(attn(cat("H0", "H1"), "KV2", "KV3"), attn(cat("H2", "H3"), "KV0", "KV1"))),
    # attention is causal across tokens: a token split is not per-token
    (attn("concat(H0, H1, dim=0)", "concat(KV0, KV1, dim=0)", "concat(KV2, KV3, dim=0)"),
     "concat(" + attn("H0", "KV0", "KV2") + ", " + attn("H1", "KV1", "KV3") + ", dim=0)"),
]

MUST_NOT_SHAPES = dict(SHAPES, W=[2])
