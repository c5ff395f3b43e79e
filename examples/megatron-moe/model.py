"""megatron-core's own MoE layer (0.16: ``MoELayer`` with its top-k router, its token dispatcher and
``SequentialMLP`` local experts), expert-parallel on graphguard's fake process group, against the same layer
at expert-parallel size 1.
"""
import os
import warnings

import torch

warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")  # its import-time notices about Apex
from megatron.core.models.gpt.moe_module_specs import get_moe_module_spec
from megatron.core.transformer.moe.moe_layer import MoELayer
from megatron.core.transformer.transformer_config import TransformerConfig

from graphguard.patches import megatron as gm

SEQ, BATCH, HIDDEN, FFN = 4, 2, 8, 16
EXPERTS, TOPK = int(os.environ.get("GG_EXPERTS", "4")), int(os.environ.get("GG_TOPK", "2"))
DISPATCHER = os.environ.get("GG_DISPATCHER", "alltoall")
BUG = os.environ.get("GG_BUG", "")
TOKENS = os.environ.get("GG_TOKENS", "sharded")  # or "replicated": every rank the same tokens
TP = int(os.environ.get("GG_TP", "1"))  # tensor parallel (with sequence parallel) x expert parallel: world = TP x EP
AUX = os.environ.get("GG_AUX", "none")  # the router's load-balancing loss: none, aux_loss, global_aux_loss, seq_aux_loss


def _aux_coeff(world: int) -> float:
    """The aux loss coefficient (0.1); planted bug ``GG_BUG=aux-scale``: the ranks' multiplied by the
    expert-parallel size (a coefficient meant for a loss averaged over the ranks, applied to each rank's)."""
    if AUX == "none":
        return 0.0
    return 0.1 * (world // (TP if world > 1 else 1) if BUG == "aux-scale" and world > 1 else 1)


def _layer(world: int) -> MoELayer:
    tp = TP if world > 1 else 1
    gm.initialize(tensor_parallel=tp, expert_parallel=world // tp)
    config = TransformerConfig(num_layers=1, hidden_size=HIDDEN, num_attention_heads=max(TP, 1), ffn_hidden_size=FFN,
                               moe_ffn_hidden_size=FFN, num_moe_experts=EXPERTS, moe_router_topk=TOPK,
                               moe_token_dispatcher_type=DISPATCHER, moe_router_load_balancing_type=AUX, moe_aux_loss_coeff=_aux_coeff(world), moe_router_pre_softmax=TOPK == 1,
                               expert_model_parallel_size=world // tp, tensor_model_parallel_size=tp,
                               sequence_parallel=tp > 1, use_cpu_initialization=True,
                               hidden_dropout=0.0, attention_dropout=0.0, bias_dropout_fusion=False,
                               gradient_accumulation_fusion=False, add_bias_linear=False,
                               moe_permute_fusion=False, moe_grouped_gemm=False,
                               moe_expert_capacity_factor=EXPERTS / TOPK, moe_pad_expert_input_to_capacity=True)
    spec = get_moe_module_spec(use_te=False, num_experts=EXPERTS, moe_grouped_gemm=False)
    return MoELayer(config, spec.submodules)


def spec():
    return _layer(1)


def impl(rank, world):
    layer = _layer(world)
    if BUG == "routing":  # planted: the ranks' router logits rotated by one expert (tokens go to the wrong experts)
        gating = layer.router.gating

        def rotated(x):
            logits = gating(x)
            return torch.cat([logits[..., 1:], logits[..., :1]], dim=-1)
        layer.router.gating = rotated
    if BUG == "tp-grad-split" and TP > 1:
        # planted: the dispatcher's all-gather of the tokens over the expert-tensor-parallel pair declared as
        # feeding replicated work (tensor_parallel_output_grad=False), so its backward splits the gradient
        # instead of reduce-scattering the pair's partial products -- the input gradient misses the other half
        import megatron.core.transformer.moe.token_dispatcher as td
        gather = td.gather_from_sequence_parallel_region

        def gather_no_reduce(x, *args, **kwargs):
            return gather(x, *args, **{**kwargs, "tensor_parallel_output_grad": False})
        td.gather_from_sequence_parallel_region = gather_no_reduce
    return layer


def inputs(rank, world):
    torch.manual_seed(1)
    if rank is None or TOKENS == "replicated":
        return (torch.randn(SEQ, BATCH, HIDDEN, requires_grad=True),)
    tp = TP if world > 1 else 1
    if tp == 1:
        return (torch.randn(SEQ // world, BATCH, HIDDEN, requires_grad=True),)
    # sequence parallel: a tensor-parallel rank holds a chunk of its data-parallel rank's sequence
    return (torch.randn(SEQ // tp, BATCH // (world // tp), HIDDEN, requires_grad=True),)


def _cat(name, world):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim=0)"


def _tokens(name, world, tp):
    """[seq, batch, hidden] over rank r = dp * tp + t: batch chunk dp, sequence chunk t of it."""
    if tp == 1:
        return _cat(name, world)
    seqs = [f"concat({', '.join(f'{name}@{dp * tp + t}' for t in range(tp))}, dim=0)" for dp in range(world // tp)]
    return f"concat({', '.join(seqs)}, dim=1)"


def _same(name, world):
    return [f"{name}@{r}" for r in range(world)]


def relation(world, backward):
    """Tokens are sharded along the sequence (each expert-parallel rank is a data-parallel rank of the layers
    around the MoE layer; with tensor parallelism, sequence parallel splits a data-parallel rank's tokens
    further, rank r = dp * TP + tp holding chunk r); the router is replicated; expert e lives on the
    expert-parallel rank e // (EXPERTS / EP) as local expert e % (EXPERTS / EP), its fc1 split by rows and its
    fc2 by columns over that rank's expert-tensor-parallel group (Megatron's rank order: rank = etp + TP * ep)."""
    tp = TP if world > 1 else 1
    ep = world // tp
    local = EXPERTS // ep
    cat = TOKENS != "replicated"
    rel = {"hidden_states": _tokens("hidden_states", world, tp) if cat else _same("hidden_states", world),
           "router.weight": _same("router.weight", world)}
    for e in range(EXPERTS):
        for w, dim in (("linear_fc1.weight", 0), ("linear_fc2.weight", 1)):
            shards = [f"experts.local_experts.{e % local}.{w}@{e // local * tp + t}" for t in range(tp)]
            rel[f"experts.local_experts.{e}.{w}"] = shards[0] if tp == 1 else f"concat({', '.join(shards)}, dim={dim})"
    if AUX == "global_aux_loss":  # the router's running counts (over gradient-accumulation steps): zeros at first
        rel.update({b: _same(b, world) for b in ("router.global_tokens_per_expert", "router.ga_steps")})
    if backward:
        rel["tangent.out0"] = _tokens("tangent.out0", world, tp) if cat else _same("tangent.out0", world)
    return {"inputs": rel}


def expect(world, backward):
    """With tokens sharded, each rank's router-weight gradient covers its own tokens: the sum over the ranks is
    the layer's gradient, which Megatron's data-parallel gradient all-reduce (``finalize_model_grads``, outside
    the layer) forms. Every expert's gradient is whole on its rank (the all-to-all brought it every token)."""
    if not backward or TOKENS == "replicated":
        return {}
    return {"grad.router.weight": "sum(" + ", ".join(f"grad.router.weight@{r}" for r in range(world)) + ")"}
