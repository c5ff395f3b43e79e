"""A Qwen2 decoder layer as vLLM writes it, with vLLM's custom ops and tensor parallelism (inference).

vLLM's ``Qwen2DecoderLayer`` (the first layer: the residual is the input): ``input_layernorm`` is
``_C::rms_norm``; ``self_attn`` is ``qkv_proj`` (a ``QKVParallelLinear`` with bias: rank r's rows are
``[q_r; k_r; v_r]``), the split of its output into q, k, v, ``rotary_emb`` (``_C::rotary_embedding``, which
rotates q and k *in place* -- column slices of the qkv output -- with vLLM's ``cos_sin_cache``), ``attn``
(``vllm::unified_attention_with_output``, writing a per-head view of a fresh buffer) and ``o_proj`` (a
``RowParallelLinear`` followed by ``vllm::all_reduce``); ``post_attention_layernorm`` is
``_C::fused_add_rms_norm`` (residual add + RMSNorm, in place), ``gate_up_proj`` a ``MergedColumnParallelLinear``
whose weight on rank r is ``[gate_r; up_r]`` (rows), ``act_fn`` ``_C::silu_and_mul``, ``down_proj`` a
``RowParallelLinear`` and ``vllm::all_reduce``. The ops are ``examples/.lib/vllm_ops.py`` (stand-ins with
vLLM's names and schemas); graphguard knows them through the ``vllm`` lemma pack.

Qwen2-1.5B's attention shape: 12 query heads sharing 2 KV heads. Rank r holds 12/W query heads and
max(2/W, 1) KV heads: with W = 4 each KV head is *replicated* on two ranks (vLLM's layout), whose k/v rows
of ``qkv_proj`` are equal. ``GG_ROPE_STYLE=gptj`` uses GPT-J's interleaved rotary pairs instead of neox's.

The relation is stated as vLLM's weight loader shards the checkpoint: the sequential merged weights are
concat(all ranks' q rows, one k block per KV head, one v block per KV head) and concat(all ranks' gate rows,
all ranks' up rows). ``GG_BAD_GATE_UP=1`` (``GG_BAD_QKV=1``) states gate_up (qkv) as a plain concat of the
ranks' blocks instead, which must not verify.
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / ".lib"))
import vllm_ops  # noqa: E402

HEADS, KV_HEADS, HD = 12, 2, 4
HIDDEN, FFN, TOKENS, EPS, MAX_POS, ROPE_BASE = HEADS * HD, 24, 5, 1e-6, 16, 10000.0


def _neox():
    return os.environ.get("GG_ROPE_STYLE", "neox") != "gptj"


def cos_sin_cache(rot=HD):
    """vLLM's ``RotaryEmbedding._compute_cos_sin_cache``: [max_position, rot] = [cos | sin]."""
    inv_freq = 1.0 / (ROPE_BASE ** (torch.arange(0, rot, 2, dtype=torch.float) / rot))
    freqs = torch.outer(torch.arange(MAX_POS, dtype=torch.float), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1)


class Qwen2DecoderLayer(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.heads, self.kv_heads = HEADS // world, max(KV_HEADS // world, 1)
        self.q_size, self.kv_size = self.heads * HD, self.kv_heads * HD
        self.input_layernorm = torch.nn.Parameter(torch.randn(HIDDEN))
        self.qkv_proj = torch.nn.Linear(HIDDEN, self.q_size + 2 * self.kv_size, bias=True)  # rank r: [q_r; k_r; v_r]
        self.register_buffer("cos_sin_cache", cos_sin_cache())
        self.o_proj = torch.nn.Linear(self.q_size, HIDDEN, bias=False)
        self.post_attention_layernorm = torch.nn.Parameter(torch.randn(HIDDEN))
        self.gate_up_proj = torch.nn.Linear(HIDDEN, 2 * FFN // world, bias=False)  # rank r: [gate_r; up_r]
        self.down_proj = torch.nn.Linear(FFN // world, HIDDEN, bias=False)
        self.requires_grad_(False)  # vLLM serves: inference only (its kernels have no autograd)

    def _all_reduce(self, x):
        return vllm_ops.tp_all_reduce(x) if self.world > 1 else x

    def forward(self, positions, hidden):  # positions: [tokens]; hidden: [tokens, hidden], replicated
        residual = hidden
        h = vllm_ops.rms_norm_(hidden, self.input_layernorm, EPS)
        # Qwen2Attention.forward
        qkv = self.qkv_proj(h)
        q, k, v = qkv.split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q, k = vllm_ops.rotary_embedding_(positions, q, k, HD, self.cos_sin_cache, _neox())
        a = vllm_ops.attention_(q, k, v, self.heads, self.kv_heads, HD, "model.layers.0.self_attn.attn")
        a = self._all_reduce(self.o_proj(a))
        # post-attention: fused residual add + RMSNorm, then Qwen2MLP
        h, residual = vllm_ops.fused_add_rms_norm_(a, residual, self.post_attention_layernorm, EPS)
        out = self._all_reduce(self.down_proj(vllm_ops.silu_and_mul_(self.gate_up_proj(h))))
        return out, residual


def spec():
    return Qwen2DecoderLayer(1)


def impl(rank, world):
    return Qwen2DecoderLayer(world)


def inputs(rank, world):
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, MAX_POS, (TOKENS,), generator=g), torch.randn(TOKENS, HIDDEN, generator=g)


def _rows(name, r, start, end):
    return f"slice({name}@{r}, dim=0, start={start}, end={end})"


def _qkv(name, world, replica):
    """vLLM's QKVParallelLinear weight loader: rank r holds q heads [r*H/W, (r+1)*H/W) and KV head block
    r // replicas; the sequential rows are all q rows, then each KV block once (from replica ``replica``)."""
    heads, kv = HEADS // world, max(KV_HEADS // world, 1)
    q, k = heads * HD, kv * HD
    per_kv = max(world // KV_HEADS, 1)  # ranks sharing one KV block
    owners = range(replica, world, per_kv)
    parts = [_rows(name, r, 0, q) for r in range(world)]
    parts += [_rows(name, r, q, q + k) for r in owners] + [_rows(name, r, q + k, q + 2 * k) for r in owners]
    return f"concat({', '.join(parts)}, dim=0)"


def relation(world, backward=False):
    rep = lambda n: [f"{n}@{r}" for r in range(world)]  # noqa: E731
    rows = FFN // world  # each half of a rank's merged gate_up block
    gu = "gate_up_proj.weight"
    if os.environ.get("GG_BAD_GATE_UP") == "1":  # wrong: the ranks' [gate_r; up_r] blocks one after another
        merged = f"concat({', '.join(f'{gu}@{r}' for r in range(world))}, dim=0)"
    else:  # vLLM: all ranks' gate rows, then all ranks' up rows
        merged = f"concat({', '.join([_rows(gu, r, 0, rows) for r in range(world)] + [_rows(gu, r, rows, 2 * rows) for r in range(world)])}, dim=0)"
    per_kv = max(world // KV_HEADS, 1)
    qkv = {p: [_qkv(p, world, j) for j in range(per_kv)] for p in ("qkv_proj.weight", "qkv_proj.bias")}
    if os.environ.get("GG_BAD_QKV") == "1":  # wrong: the ranks' [q_r; k_r; v_r] blocks one after another
        qkv = {p: [f"concat({', '.join(f'{p}@{r}' for r in range(world))}, dim=0)"] for p in qkv}
    return {"inputs": {"positions": rep("positions"), "hidden": rep("hidden"),
                       "input_layernorm": rep("input_layernorm"), "cos_sin_cache": rep("cos_sin_cache"),
                       "post_attention_layernorm": rep("post_attention_layernorm"),
                       **{p: v if len(v) > 1 else v[0] for p, v in qkv.items()},
                       "o_proj.weight": f"concat({', '.join(f'o_proj.weight@{r}' for r in range(world))}, dim=1)",
                       gu: merged,
                       "down_proj.weight": f"concat({', '.join(f'down_proj.weight@{r}' for r in range(world))}, dim=1)"}}


def expect(world, backward=False):
    return {"out0": "out0@0", "out1": "out1@0"}
