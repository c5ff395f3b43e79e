"""A Qwen2-style MLP block as vLLM writes it, with vLLM's custom ops and tensor parallelism.

vLLM's ``Qwen2DecoderLayer`` (MLP half): ``post_attention_layernorm`` is ``_C::fused_add_rms_norm`` (residual
add + RMSNorm, in place), ``gate_up_proj`` a ``MergedColumnParallelLinear`` whose weight on rank r is
``[gate_r; up_r]`` (rows), ``act_fn`` ``_C::silu_and_mul``, ``down_proj`` a ``RowParallelLinear`` followed by
``vllm::all_reduce`` over the TP group. The ops are ``examples/.lib/vllm_ops.py`` (stand-ins with vLLM's names
and schemas); graphguard knows them through the ``vllm`` lemma pack. The hidden state enters through
``input_layernorm`` (``_C::rms_norm``) as for vLLM's first layer.

The relation is stated as vLLM's weight loader shards the checkpoint: the sequential merged weight is
concat(gate, up) = concat(all ranks' first halves, then all ranks' second halves, dim=0).
``GG_BAD_GATE_UP=1`` states it as a plain concat of the ranks' blocks instead, which must not verify.
"""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / ".lib"))
import vllm_ops  # noqa: E402

HIDDEN, FFN, TOKENS, EPS = 16, 24, 5, 1e-6


class Qwen2MLPBlock(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.input_layernorm = torch.nn.Parameter(torch.randn(HIDDEN))
        self.post_attention_layernorm = torch.nn.Parameter(torch.randn(HIDDEN))
        self.gate_up_proj = torch.nn.Linear(HIDDEN, 2 * FFN // world, bias=False)  # rank r: [gate_r; up_r]
        self.down_proj = torch.nn.Linear(FFN // world, HIDDEN, bias=False)
        self.requires_grad_(False)  # vLLM serves: inference only (its kernels have no autograd)

    def forward(self, hidden, residual):  # hidden, residual: [tokens, hidden], replicated
        h = vllm_ops.rms_norm_(hidden, self.input_layernorm, EPS)
        h, residual = vllm_ops.fused_add_rms_norm_(h, residual, self.post_attention_layernorm, EPS)
        out = self.down_proj(vllm_ops.silu_and_mul_(self.gate_up_proj(h)))
        if self.world > 1:
            out = vllm_ops.tp_all_reduce(out)
        return out, residual


def spec():
    return Qwen2MLPBlock(1)


def impl(rank, world):
    return Qwen2MLPBlock(world)


def inputs(rank, world):
    return torch.randn(TOKENS, HIDDEN), torch.randn(TOKENS, HIDDEN)


def _half(name, r, which, rows):
    return f"slice({name}@{r}, dim=0, start={which * rows}, end={(which + 1) * rows})"


def relation(world, backward=False):
    rep = lambda n: [f"{n}@{r}" for r in range(world)]  # noqa: E731
    rows = FFN // world  # each half of a rank's merged block
    gu = "gate_up_proj.weight"
    if os.environ.get("GG_BAD_GATE_UP") == "1":  # wrong: the ranks' [gate_r; up_r] blocks one after another
        merged = f"concat({', '.join(f'{gu}@{r}' for r in range(world))}, dim=0)"
    else:  # vLLM: all ranks' gate rows, then all ranks' up rows
        merged = f"concat({', '.join([_half(gu, r, 0, rows) for r in range(world)] + [_half(gu, r, 1, rows) for r in range(world)])}, dim=0)"
    return {"inputs": {"hidden": rep("hidden"), "residual": rep("residual"),
                       "input_layernorm": rep("input_layernorm"),
                       "post_attention_layernorm": rep("post_attention_layernorm"),
                       gu: merged,
                       "down_proj.weight": f"concat({', '.join(f'down_proj.weight@{r}' for r in range(world))}, dim=1)"}}


def expect(world, backward=False):
    return {"out0": "out0@0", "out1": "out1@0"}
