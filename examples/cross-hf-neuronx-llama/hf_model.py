"""The specification: HF transformers' own Llama modules -- ``LlamaDecoderLayer``, the final ``LlamaRMSNorm``,
the LM head -- in float16, at the dimensions of ``examples/neuronx-llama-tp/make.py``; a thin wrapper
(``Glue``) does what a generation loop around them does, in NeuronX's conventions:

* RoPE tables from HF's ``LlamaRotaryEmbedding`` at the positions ``cache_ids`` (int32, one per new token);
* the attention mask from ``cache_ids`` (key position <= query position);
* the KV-cache write: a ``Cache`` whose ``update`` puts the new keys / values at position P of the
  ``[B, kv, T, D]`` caches and returns them whole (what HF's ``StaticCache`` does at ``cache_position``);
* logits in float32 (NeuronX converts them).
"""
from __future__ import annotations

import math

import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRMSNorm, LlamaRotaryEmbedding

# examples/neuronx-llama-tp/make.py's dimensions
B, S, P = 2, 2, 4
T = P + S
NH, NKV, D = 8, 4, 4
H, F, V = NH * D, 64, 64
EPS, THETA = 1e-5, 500000.0
MASK_FILL = -30000.0
LOG_THETA = -2.0 * math.log(THETA) / D  # NeuronX's fill for masked scores (see README)


def set_dims(hidden: int = H, heads: int = NH, kv_heads: int = NKV, mlp: int = F, vocab: int = V) -> None:
    """make.py's ``set_dims``: the model dimensions every function below reads (``capture.py --size``)."""
    global NH, NKV, D, H, F, V, LOG_THETA
    NH, NKV, D, H, F, V = heads, kv_heads, hidden // heads, hidden, mlp, vocab
    LOG_THETA = -2.0 * math.log(THETA) / D


def config() -> LlamaConfig:
    c = LlamaConfig(hidden_size=H, intermediate_size=F, num_attention_heads=NH, num_key_value_heads=NKV,
                    head_dim=D, rms_norm_eps=EPS, vocab_size=V, num_hidden_layers=1, max_position_embeddings=max(64, T),
                    rope_theta=THETA)
    c._attn_implementation = "eager"
    return c


class WriteAt:
    """The KV-cache glue: HF's attention calls ``update(k, v, layer_idx)`` and attends to what it returns."""

    def __init__(self, cache_k, cache_v, at: int):
        self.k, self.v, self.at = cache_k, cache_v, at

    def update(self, k, v, layer_idx, *args, **kwargs):
        n = k.shape[2]
        self.k = torch.cat([self.k[:, :, :self.at], k, self.k[:, :, self.at + n:]], dim=2)
        self.v = torch.cat([self.v[:, :, :self.at], v, self.v[:, :, self.at + n:]], dim=2)
        return self.k, self.v


class Glue(torch.nn.Module):
    """``outputs="cache"``: the same modules returning only the updated KV caches (what the layer writes for later
    steps: the K / V projections, RoPE on the keys, the cache write -- fx drops everything else)."""

    def __init__(self, outputs: str = "all"):
        super().__init__()
        self.outputs = outputs
        c = config()
        self.layer = LlamaDecoderLayer(c, layer_idx=0)
        self.norm = LlamaRMSNorm(H, eps=EPS)
        self.lm_head = torch.nn.Linear(H, V, bias=False)
        self.rotary = LlamaRotaryEmbedding(c)

    def forward(self, hidden, cache_ids, start_ids, cache_k, cache_v):
        # RoPE tables, as a generation loop computes them once for every batch row from the new tokens' positions
        # (HF's LlamaRotaryEmbedding.forward, at position_ids [1, S]): angles = positions x inv_freq, the
        # full-width table cat(angles, angles), its cos / sin in the hidden dtype. inv_freq as NeuronX computes
        # it (exp(i * -2 ln(theta) / D) in float32; HF's 1 / theta ** (2i / D) differs in the last bits)
        inv_freq = torch.exp(torch.arange(D // 2, dtype=torch.float32) * LOG_THETA)
        freqs = cache_ids.float()[:, None] @ inv_freq[None, :]  # [S, D / 2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos()[None].to(hidden.dtype), emb.sin()[None].to(hidden.dtype)  # [1, S, D]
        pos = cache_ids[None, :]
        # mask: causal (key <= query position) and not left padding (key >= the row's start)
        key_pos = torch.arange(T, dtype=cache_ids.dtype)
        allowed = (key_pos[None, None, :] <= cache_ids[None, :, None]) & (key_pos[None, None, :] >= start_ids[:, None, None])
        fill = torch.full((), MASK_FILL, dtype=hidden.dtype), torch.full((), 0.0, dtype=hidden.dtype)
        mask = torch.where(allowed[:, None], fill[1], fill[0])  # [B, 1, S, T], additive, in the hidden dtype
        cache = WriteAt(cache_k, cache_v, P)
        h = self.layer(hidden, attention_mask=mask, position_ids=pos, past_key_values=cache,
                       position_embeddings=(cos, sin))
        if self.outputs == "cache":
            return cache.k, cache.v
        logits = self.lm_head(self.norm(h[:, -1:])).float()  # the last position only, as NeuronX
        return logits, cache.k, cache.v


def build(outputs: str = "all") -> Glue:
    torch.manual_seed(0)
    m = Glue(outputs)
    for p in m.parameters():  # float16 weights (HF's torch_dtype=float16; the rotary's inv_freq stays float32)
        p.data = p.data.half()
    return m


def example_inputs():
    g = torch.Generator().manual_seed(1)
    hidden = (torch.randn(B, S, H, generator=g) * 0.25).half()
    cache_ids = torch.arange(P, P + S, dtype=torch.int32)
    start_ids = torch.tensor([0, 1] * (B // 2) + [0] * (B % 2), dtype=torch.int32)
    cache_k = (torch.randn(B, NKV, T, D, generator=g) * 0.25).half()
    cache_v = (torch.randn(B, NKV, T, D, generator=g) * 0.25).half()
    return hidden, cache_ids, start_ids, cache_k, cache_v
