"""Any HF transformers causal LM with a tensor-parallel plan, from a tiny random config, with HF's own plan.

``GG_HF_MODEL`` names the model type (``qwen3``, ``phi3``, ``mixtral``...; default ``qwen3``). ``build(mt)``
makes ``<Model>ForCausalLM`` from the type's config class with every size shrunk (``tiny_config``: hidden 128,
8 query heads over 4 KV heads of 16, vocabulary 128, 4 experts of which 2 per token, 2 layers; nothing is
downloaded, the weights are random with a fixed seed) and ``impl`` distributes it the way
``from_pretrained(..., distributed_config=DistributedConfig(tp_size=W))`` does (``prepare_distribute_model`` +
``maybe_distribute_model``): the config's ``base_model_tp_plan`` and the causal-LM class's own ``_tp_plan``
(lm_head ``colwise_gather_output``). ``GG_TP_PLAN`` (JSON) overrides entries of that plan, as
``DistributedConfig(tp_plan=...)`` does. The output is the logits.

Word embeddings are untied (``tie_word_embeddings=False``: HF's plan shards lm_head but not the embedding, so
a tied pair would stop being one tensor), attention is ``eager`` and MoE experts are ``batched_mm`` (every
token through its experts by one batched matmul: HF's static-shape implementation; ``eager`` loops over the
experts hit, a data-dependent Python loop TorchDynamo cannot capture whole); whatever else the type's config
defaults to (RoPE variant, sliding windows, MoE routing, MLA, linear attention layers) is kept.
``GG_HF_EXPERTS=grouped_mm GG_HF_DTYPE=bfloat16`` runs HF's default experts instead, as HF ships them: tokens
sorted by expert, one ``torch._grouped_mm`` per projection over offsets the routing decides (under TorchDynamo
HF calls the kernel in bfloat16 only; in float32 it calls its own opaque fallback op, whose backward loops on
the offsets' values).
"""
from __future__ import annotations

import functools
import json
import os

import torch
import transformers
from transformers.distributed import DistributedConfig
from transformers.distributed.tensor_parallel import ALL_PARALLEL_STYLES, TensorParallelLayer, _get_parameter_tp_plan

BATCH, SEQ = 2, 8
MODEL = os.environ.get("GG_HF_MODEL", "qwen3")
EXPERTS = os.environ.get("GG_HF_EXPERTS", "batched_mm")  # HF's experts implementation (MoE models)
DTYPE = getattr(torch, os.environ.get("GG_HF_DTYPE", "float32"))  # the weights' (and so the compute's) dtype
OVERRIDE = json.loads(os.environ.get("GG_TP_PLAN") or "{}")  # entries replacing HF's plan's

# Sizes every config field of that name gets (where the type's config has it). Heads: 8 query heads sharing
# 4 KV heads of 16, so TP 2 and 4 shard whole heads; widths are multiples of 8 (packed gate/up at TP 4).
TINY = dict(
    vocab_size=128, hidden_size=128, intermediate_size=96, num_hidden_layers=2, num_attention_heads=8,
    num_key_value_heads=4, head_dim=16, max_position_embeddings=64, sliding_window=4, attention_chunk_size=4,
    # MoE
    moe_intermediate_size=32, num_experts=4, num_local_experts=4, n_routed_experts=4, moe_num_experts=4,
    num_experts_per_tok=2, moe_topk=2, num_experts_per_token=2, n_shared_experts=1,
    shared_expert_intermediate_size=32, expert_ffn_hidden_size=32, first_k_dense_replace=1, n_group=2,
    topk_group=1, moe_layer_freq=1, decoder_sparse_step=1, zero_expert_num=1, ffn_hidden_size=96,
    dense_intermediate_size=96, shared_intermediate_size=32, intermediate_size_mlp=96,
    # MLA (DeepSeek-V2/V3 attention)
    q_lora_rank=32, kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16, qk_head_dim=24,
    index_n_heads=4, index_head_dim=16, index_topk=4,
    # linear attention layers (Qwen3-Next, Kimi, OLMo-hybrid...)
    linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=16, linear_value_head_dim=16,
    linear_num_heads=8, linear_head_dim=16,
    # per-layer inputs (Gemma-3n), SWA heads, misc
    vocab_size_per_layer_input=128, hidden_size_per_layer_input=16, swa_num_attention_heads=8,
    swa_num_key_value_heads=4, swa_head_dim=16, max_window_layers=1, num_kv_shared_layers=0, laurel_rank=8,
    original_max_position_embeddings=32, query_pre_attn_scalar=16, rotary_dim=8,
    moe_k=2, moe_num_shared_experts=1,
    pad_token_id=0, bos_token_id=1, eos_token_id=2,
    tie_word_embeddings=False, use_cache=False,
)
# Sizes that equal another in the type's own defaults stay equal to it (MLA's head_dim is its RoPE width,
# multi-head attention has as many KV heads as query heads).
TIED = {"head_dim": ("qk_rope_head_dim", "qk_head_dim", "v_head_dim"), "num_key_value_heads": ("num_attention_heads",)}
# Types whose default config does not build a model at all (HF's own defaults incomplete), or whose
# sizes have other names.
EXTRA = {"cohere_compass_text": dict(rope_parameters={"full_attention": {
    "rope_type": "default", "rope_theta": 10000.0, "mrope_section": [3, 3, 2]}}),
         "gpt2": dict(n_embd=128, n_layer=2, n_head=8, n_positions=64)}
# Causal LMs outside the zoo (HF gives them no tensor-parallel plan), with the plan used here: GPT-2 stores
# its projections as Conv1D (weights [in, out]), which HF's colwise/rowwise styles (written for nn.Linear's
# [out, in]) do not fit, so only its nn.Embedding and nn.Linear are sharded: the vocabulary-parallel
# embedding and the gathered lm_head.
OTHERS = {"gpt2": ("GPT2LMHeadModel", {"transformer.wte": "embedding_rowwise", "lm_head": "colwise_gather_output"})}


def causal_lm_classes() -> dict[str, type]:
    """Every ``transformers.*ForCausalLM`` whose config class carries a ``base_model_tp_plan``, by model
    type (the denominator of the zoo)."""
    return dict(_causal_lm_classes())


@functools.lru_cache(maxsize=1)  # (dir(transformers) takes 0.2 s; the classes do not change while it runs)
def _causal_lm_classes() -> dict[str, type]:
    out = {}
    for name in dir(transformers):
        if not name.endswith("ForCausalLM"):
            continue
        try:
            cls = getattr(transformers, name)
        except Exception:  # an optional dependency missing: not importable here, so not a model of this zoo
            continue
        cfg = getattr(cls, "config_class", None)
        if cfg is not None and getattr(cfg, "base_model_tp_plan", None):
            out[cfg.model_type] = cls
    return dict(sorted(out.items()))


def model_class(mt: str) -> type:
    return getattr(transformers, OTHERS[mt][0]) if mt in OTHERS else causal_lm_classes()[mt]


def tiny_config(mt: str):
    cls = model_class(mt)
    defaults = cls.config_class().to_dict()
    kw = {k: v for k, v in TINY.items() if k in defaults}
    for k, others in TIED.items():
        same = [o for o in others if k in kw and o in kw and defaults[o] == defaults[k]]
        if same:
            kw[k] = kw[same[0]]
    kw.update(EXTRA.get(mt, {}))
    cfg = cls.config_class(**kw)
    cfg._attn_implementation = "eager"
    cfg._experts_implementation = EXPERTS
    return cfg


class Logits(torch.nn.Module):
    """A causal LM returning its logits (a tensor, not a ModelOutput dict)."""

    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids):
        return self.lm(input_ids=input_ids).logits


def build(mt: str = MODEL):
    torch.manual_seed(0)
    return model_class(mt)(tiny_config(mt)).to(DTYPE).eval()


def plan(model, override=None) -> dict:
    """HF's plan for the model (``OTHERS``' for a type outside the zoo) with ``override``'s entries (default
    ``GG_TP_PLAN``); an entry overridden with None is dropped."""
    base = OTHERS[model.config.model_type][1] if model.config.model_type in OTHERS else model.tp_plan
    merged = {**base, **(OVERRIDE if override is None else override)}
    return {k: v for k, v in merged.items() if v is not None}


def spec(mt: str = MODEL):
    return Logits(build(mt))


def impl(rank, world, override=None, mt: str = MODEL):
    model = build(mt)
    cls = type(model)
    cfg, _, mesh = cls.prepare_distribute_model(DistributedConfig(tp_size=world, tp_plan=plan(model, override)))
    return Logits(cls.maybe_distribute_model(model, cfg, mesh))


def inputs(rank, world, mt: str = MODEL):
    torch.manual_seed(1)
    return (torch.randint(0, TINY["vocab_size"], (BATCH, SEQ)),)


def _buffers_read(model, args) -> list[str]:
    """The buffers one forward reads (RoPE's inv_freq...; a buffer nothing reads is no graph input)."""
    from torch.overrides import TorchFunctionMode
    by_id = {id(b): n for n, b in model.named_buffers()}
    seen = set()

    class Reads(TorchFunctionMode):
        def __torch_function__(self, func, types, a=(), kw=None):
            for x in list(a) + list((kw or {}).values()):
                if id(x) in by_id:
                    seen.add(by_id[id(x)])
            return func(*a, **(kw or {}))
    with torch.no_grad(), Reads():
        model(*args)
    return [n for n in by_id.values() if n in seen]


def sharded(name: str, p: dict) -> bool:
    """Whether HF's plan ``p`` makes parameter ``name`` a DTensor: its style shards parameters."""
    style = ALL_PARALLEL_STYLES.get(_get_parameter_tp_plan(name, p) or "")
    return style is not None and type(style).shard_param is not TensorParallelLayer.shard_param


def relation(world, backward, override=None, mt: str = MODEL):
    """The parameters the plan shards are DTensors (their placements give their relations); every other
    parameter (also those of styles that only add collectives, as ``replicated_with_grad_allreduce``), the
    buffers forward reads and the token ids are plain tensors, the same on every rank: replicated."""
    m = spec(mt)
    p = plan(m.lm, override)
    plain = [f"lm.{n}" for n, _ in m.lm.named_parameters() if not sharded(n, p)]
    plain += _buffers_read(m, inputs(None, world, mt)) + ["input_ids"]
    return {"inputs": {n: [f"{n}@{r}" for r in range(world)] for n in plain}}
