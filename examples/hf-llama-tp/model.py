"""HF transformers' LlamaForCausalLM (a tiny config, random weights, no download) with HF's own TP plan.

``impl`` distributes the model the way ``from_pretrained(..., distributed_config=DistributedConfig(tp_size=W))``
does (``prepare_distribute_model`` + ``maybe_distribute_model``): the Llama config's ``base_model_tp_plan``
makes q/k/v, gate and up ``colwise`` and o_proj, down_proj ``rowwise`` (DTensor parameters, whose placements
give their relations), and LlamaForCausalLM's own ``_tp_plan`` makes lm_head ``colwise_gather_output`` (the
logits are all-gathered: every rank holds them all). The embedding, the RMSNorm weights and the RoPE buffer
are not in the plan: plain tensors, the same on every rank. ``GG_TP_PLAN`` (JSON) overrides entries of
HF's plan, as ``DistributedConfig(tp_plan=...)`` does: ``{"lm_head": "colwise"}`` keeps the logits sharded
on the vocabulary, ``{"model.embed_tokens": "embedding_rowwise"}`` makes the embedding vocab-parallel.
8 query heads share 4 KV heads, so world sizes 2 and 4 shard whole heads.
"""
import json
import os

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.distributed import DistributedConfig
from transformers.distributed.tensor_parallel import _get_parameter_tp_plan

BATCH, SEQ = 2, 6
CONFIG = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=8,
              num_key_value_heads=4, max_position_embeddings=16, tie_word_embeddings=False, use_cache=False,
              attn_implementation="eager")
OVERRIDE = json.loads(os.environ.get("GG_TP_PLAN") or "{}")  # entries replacing HF's plan's


class LlamaLogits(LlamaForCausalLM):
    """LlamaForCausalLM returning its logits (a tensor, not a ModelOutput dict)."""

    def forward(self, input_ids):
        return super().forward(input_ids=input_ids).logits


def _model():
    torch.manual_seed(0)
    return LlamaLogits(LlamaConfig(**CONFIG))


def plan(model, override=None):
    return {**model.tp_plan, **(OVERRIDE if override is None else override)}


def spec():
    return _model()


def impl(rank, world, override=None):
    model = _model()
    cfg, _, mesh = LlamaLogits.prepare_distribute_model(DistributedConfig(tp_size=world,
                                                                          tp_plan=plan(model, override)))
    return LlamaLogits.maybe_distribute_model(model, cfg, mesh)


def inputs(rank, world):
    torch.manual_seed(1)
    return (torch.randint(0, CONFIG["vocab_size"], (BATCH, SEQ)),)


def relation(world, backward, override=None):
    """The plan's parameters are DTensors (their placements give their relations); every other parameter,
    the RoPE buffer and the token ids are plain tensors, the same on every rank: replicated."""
    m = spec()
    p = plan(m, override)
    plain = [n for n, _ in m.named_parameters() if _get_parameter_tp_plan(n, p) is None]
    plain += ["model.rotary_emb.inv_freq", "input_ids"]  # the one buffer forward reads, and the tokens
    return {"inputs": {n: [f"{n}@{r}" for r in range(world)] for n in plain}}
