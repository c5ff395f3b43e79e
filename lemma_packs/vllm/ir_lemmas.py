"""Lemmas for vLLM 0.3x's captured graphs (``ir.py``). References: 1600-1609.

The attention kernel ignores the KV-cache write's token (1600: it only orders the write before the read, and
the pack's attention is over this call's keys); the token itself is an empty tensor, the same on every rank
(1606). The vLLM IR norms are the ``_C`` kernels' maths (1601-1605),
which brings them under the ``_C`` lemmas (701-703: rows split along another dim are normalised
independently). Only the returns of ``fused_add_rms_norm.maybe_inplace`` are bridged (#0, #1), never the
arguments it may have overwritten.
"""
from graphguard.ir.lemma import L

from .ir import FUSED_IR, FUSED_IR_INPLACE, KV_UPDATE, RMS_IR
from .ops import ATTN, FUSED, RMS

NUMBERS = range(1600, 1610)  # this file's lemma numbers (the plugin loader refuses others)

_ABS = "layer_name=?l, absent=[3, 4]"
_E = "epsilon=?e"

LEMMAS = [
    L(1600, "attention-ignores-kv-cache-token",
      f"{ATTN}(?q, ?k, ?v, ?z, {_ABS}) => {ATTN}(?q, ?k, ?v, {_ABS})",
      examples=[{"q": [3, 2, 2], "k": [3, 1, 2], "v": [3, 1, 3], "z": [0], "l": "attn"},
                {"q": [2, 4, 3], "k": [2, 2, 3], "v": [2, 2, 3], "z": [0], "l": "attn"}]),
    L(1601, "vllm-ir-rms-norm-is-c-rms-norm", f"{RMS_IR}(?x, ?w, {_E}) => {RMS}(?x, ?w, {_E})",
      examples=[{"x": [3, 4], "w": [4], "e": "1/1000000"}, {"x": [2, 1, 5], "w": [5], "e": "1/100000"}]),
    L(1602, "vllm-ir-fused-add-rms-norm-output",
      f"{FUSED_IR}#0(?x, ?r, ?w, {_E}) => {FUSED}#0(?x, ?r, ?w, {_E})",
      examples=[{"x": [3, 4], "r": [3, 4], "w": [4], "e": "1/1000000"}]),
    L(1603, "vllm-ir-fused-add-rms-norm-residual",
      f"{FUSED_IR}#1(?x, ?r, ?w, {_E}) => {FUSED}#1(?x, ?r, ?w, {_E})",
      examples=[{"x": [3, 4], "r": [3, 4], "w": [4], "e": "1/1000000"}]),
    L(1604, "vllm-ir-fused-add-rms-norm-maybe-inplace-output",
      f"{FUSED_IR_INPLACE}#0(?x, ?r, ?w, {_E}) => {FUSED}#0(?x, ?r, ?w, {_E})",
      examples=[{"x": [3, 4], "r": [3, 4], "w": [4], "e": "1/1000000"}]),
    L(1605, "vllm-ir-fused-add-rms-norm-maybe-inplace-residual",
      f"{FUSED_IR_INPLACE}#1(?x, ?r, ?w, {_E}) => {FUSED}#1(?x, ?r, ?w, {_E})",
      examples=[{"x": [3, 4], "r": [3, 4], "w": [4], "e": "1/1000000"}]),
    L(1606, "kv-cache-token-is-empty",
      f"{KV_UPDATE}(?k, ?v, layer_name=?l) => aten.full(size=[0], fill_value=0, dtype=dtype(?k))",
      examples=[{"k": [3, 1, 2], "v": [3, 1, 2], "l": "attn"}]),
]
