"""torchtitan's own Llama-3 (``torchtitan.models.llama3``) parallelized by torchtitan's own code.

The model is torchtitan 0.3.0's ``Llama3Model`` built from a tiny config made with torchtitan's own
builders (``_build_llama3_layers``: fused QKV, GQA, complex RoPE with Llama-3 scaling, SwiGLU FFN,
RMSNorm), with torchtitan's ``ScaledDotProductAttention`` as the inner attention (its FlexAttention is
compiled with Inductor, which has no CPU path inside a capture). Parallelism is torchtitan's, untouched:
``set_llama3_sharding_config`` declares the placements and ``parallelize_llama`` applies them
(``Module.parallelize`` with the ``partial_dtensor`` backend: DTensor on the TP axis) and then FSDP2
(``apply_fsdp_to_decoder``: ``fully_shard`` on every block and the root).

``GG_TITAN_MESH``: ``tp`` (default; every rank one TP rank, sequence parallel on) or ``fsdp-tp`` (a
``dp_shard x tp`` mesh, TP innermost, ``GG_TITAN_TP`` ranks per TP group). ``GG_TITAN_SP=0`` turns
sequence parallelism off. ``GG_TITAN_LOSS=1`` adds torchtitan's loss (``cross_entropy_loss``: on
vocab-sharded logits its own ``_LossParallelCrossEntropy``).
"""
import os

import torch

import graphguard.torch as gg

from torchtitan.config import ParallelismConfig, TrainingConfig, CompileConfig
from torchtitan.components.loss import cross_entropy_loss
from torchtitan.distributed import ParallelDims
from torchtitan.distributed import utils as dist_utils
from torchtitan.models.common import ComplexRoPE, CosSinRoPE, Embedding, Linear, RMSNorm
from torchtitan.models.common.attention import ScaledDotProductAttention
from torchtitan.models.llama3 import Llama3Model, _build_llama3_layers, parallelize_llama
from torchtitan.models.llama3.sharding import set_llama3_sharding_config
from torchtitan.experiments.graph_trainer.llama3.parallelize import (
    parallelize_llama as simple_fsdp_parallelize_llama)

DIM, HEADS, KV_HEADS, FFN, VOCAB, LAYERS = 32, 8, 4, 64, 64, int(os.environ.get("GG_TITAN_LAYERS", "1"))
BATCH, SEQ = 2, 8
MESH = os.environ.get("GG_TITAN_MESH", "tp")
SP = os.environ.get("GG_TITAN_SP", "1") == "1"
LOSS = os.environ.get("GG_TITAN_LOSS", "0") == "1"
# torchtitan's Llama-3 flavours use ComplexRoPE (complex64 cache, view_as_complex): graphguard has no complex
# dtype; CosSinRoPE is torchtitan's real-valued RoPE (Qwen3's), the same rotation written with cos and sin
ROPE = ComplexRoPE.Config if os.environ.get("GG_TITAN_ROPE") == "complex" else CosSinRoPE.Config


def config():
    layers = _build_llama3_layers(
        n_layers=LAYERS, dim=DIM, n_heads=HEADS, n_kv_heads=KV_HEADS, hidden_dim=FFN, attn_backend="flex",
        rope=ROPE(dim=DIM // HEADS, max_seq_len=2 * SEQ, theta=500000))
    for layer in layers:
        layer.attention.inner_attention = ScaledDotProductAttention.Config()
    cfg = Llama3Model.Config(
        dim=DIM, vocab_size=VOCAB, layers=layers,
        tok_embeddings=Embedding.Config(num_embeddings=VOCAB, embedding_dim=DIM),
        norm=RMSNorm.Config(normalized_shape=DIM),
        lm_head=Linear.Config(in_features=DIM, out_features=VOCAB))
    set_llama3_sharding_config(cfg, enable_sp=SP)
    return cfg


class Train(torch.nn.Module):
    """The model, and with ``GG_TITAN_LOSS=1`` torchtitan's loss on its logits."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, labels):
        pred = self.model(tokens)
        return cross_entropy_loss(pred, labels, global_vocab_size=VOCAB) if LOSS else pred


def tp_degree(world):
    return world if MESH == "tp" else min(int(os.environ.get("GG_TITAN_TP", "2")), world)


def spec():
    return Train(config().build())


def impl(rank, world):
    tp = tp_degree(world)
    parallelism = ParallelismConfig(tensor_parallel_degree=tp, data_parallel_shard_degree=world // tp,
                                    enable_sequence_parallel=SP, spmd_backend="partial_dtensor")
    dist_utils.set_spmd_backend(parallelism.spmd_backend)  # what torchtitan's Trainer does (trainer.py:319)
    with gg.torchtitan_on_cpu():
        dims = ParallelDims.from_config(parallelism, world)
        model = config().build()
        training = TrainingConfig(mixed_precision_param="float32", seq_len=SEQ)
        if MESH == "tp":  # the TP step of parallelize_llama (its FSDP wrap at dp_shard=1 shards nothing)
            model.parallelize(dims)
        elif MESH == "fsdp2-tp":  # FSDP2 (fully_shard): its hooks are dynamo-disabled, see the README
            parallelize_llama(model, parallel_dims=dims, training=training, parallelism=parallelism,
                              compile_config=CompileConfig(), ac_config=None, dump_folder="")
        else:  # fsdp-tp: torchtitan's compiler-friendly FSDP (graph_trainer's SimpleFSDP) over TP
            simple_fsdp_parallelize_llama(model, parallel_dims=dims, training=training, parallelism=parallelism,
                                          compile_config=CompileConfig(), ac_config=None, dump_folder="")
    return Train(model)


def inputs(rank, world):
    """Token ids and labels; with a data-parallel axis, rank r holds batch shard r // tp."""
    dp = 1 if rank is None else world // tp_degree(world)
    return torch.randint(0, VOCAB, (BATCH // dp, SEQ)), torch.randint(0, VOCAB, (BATCH // dp, SEQ))


def _dp_groups(world):
    tp = tp_degree(world)
    return [[d * tp + t for d in range(world // tp)] for t in range(tp)]


def relation(world, backward):
    """With a data-parallel axis: the batch (each DP group's shards, in order, make the whole batch) and RoPE's
    table; the placements state the rest. (Tokens and the table are DTensors on a TP group only, which says
    nothing about the other TP groups.)"""
    if MESH == "tp":  # labels: a plain tensor, the same on every rank
        return {"inputs": {"labels": [f"labels@{r}" for r in range(world)]} if LOSS else {}}
    cat = lambda n: [f"concat({', '.join(f'{n}@{r}' for r in g)}, dim=0)" for g in _dp_groups(world)]  # noqa: E731
    rel = {"tokens": cat("tokens"), **({"labels": cat("labels")} if LOSS else {})}
    for layer in range(LAYERS):  # RoPE's cos/sin table, a buffer (FSDP shards parameters only): on every rank
        cache = f"model.layers.{layer}.attention.rope.cache"
        rel[cache] = [f"{cache}@{r}" for r in range(world)]
    return {"inputs": rel}


def expect(world, backward):
    """Under FSDP x TP the RMSNorm weights are TP-replicated: their gradients are stated once, over the first TP
    rank's DP group (R_o keeps one of expressions it proves equal; the other TP ranks' copies are the same
    all-reduced values). Everything else: what the placements state."""
    if MESH == "tp" or not backward:
        return {}
    norms = [f"model.layers.{layer}.{n}.weight" for layer in range(LAYERS) for n in ("attention_norm", "ffn_norm")]
    first = _dp_groups(world)[0]
    return {f"grad.{n}": f"concat({', '.join(f'grad.{n}@{r}' for r in first)}, dim=0)"
            for n in norms + ["model.norm.weight"]}
