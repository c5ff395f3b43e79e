"""The transformer block of ``examples/jax-block-shardmap`` partitioned by GSPMD: Megatron-style input shardings only.

The function is the same ``block`` (RMSNorm, causal multi-head attention, GeLU MLP), unchanged and with no
collective in it. The weights are given as ``in_shardings``: ``wq``/``wk``/``wv`` and ``w1`` column-sharded (on
the head / hidden-feature dim), ``wo`` and ``w2`` row-sharded (on their input dim), ``x`` and the norm weights
replicated. XLA's SPMD partitioner propagates the shardings through the attention (heads stay split) and the MLP
and inserts the all-reduces after the two row-parallel projections.
"""
import importlib.util
from pathlib import Path

import jax
from jax.sharding import PartitionSpec as P

_spec = importlib.util.spec_from_file_location("jax_block_shardmap_model",
                                               Path(__file__).resolve().parent.parent / "jax-block-shardmap" / "model.py")
_block = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_block)
block, inputs, GRADS = _block.block, _block.inputs, _block.GRADS

PARAM_SPECS = {"ln1": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp", None),
               "ln2": P(), "w1": P(None, "tp"), "w2": P("tp", None)}


def spec():
    return block  # no impl(): GSPMD partitions this function


def in_specs(world):
    return P(), PARAM_SPECS


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def expect(world, backward):
    rel = {"out0": "out0@0"}
    if backward:  # gradients in input order (x, ln1, ln2, w1, w2, wk, wo, wq, wv), laid out like their inputs
        sharded = {"p.w1": 1, "p.wk": 1, "p.wq": 1, "p.wv": 1, "p.wo": 0, "p.w2": 0}
        for k, name in enumerate(GRADS, start=1):
            rel[f"out{k}"] = _cat(f"out{k}", world, sharded[name]) if name in sharded else f"out{k}@0"
    return rel
