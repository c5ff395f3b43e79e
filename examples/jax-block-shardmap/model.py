"""A transformer block (RMSNorm, causal multi-head attention, GeLU MLP) with tensor parallelism by shard_map.

Each rank owns H/W attention heads -- the q/k/v columns of those heads and the matching rows of wo -- and
all-reduces the attention output (``psum``). The MLP is column-parallel and gathers its hidden activations
(``all_gather``) before a replicated down projection. The specification is the same function on the full
weights, on one device. ``skip_psum=True`` builds the bug: the attention output is not all-reduced.
"""
from functools import partial

import jax
import jax.numpy as jnp
from jax._src.lax.parallel import all_gather_invariant  # the gathered value is the same on every rank
from jax.sharding import PartitionSpec as P

BATCH, SEQ, DIM, HEADS, FFN = 2, 4, 16, 8, 32
HEAD_DIM = DIM // HEADS


def rms_norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def block(x, p, axis=None, skip_psum=False):
    b, s, _ = x.shape
    h = rms_norm(x, p["ln1"])
    q = (h @ p["wq"]).reshape(b, s, -1, HEAD_DIM)  # the rank's heads
    k = (h @ p["wk"]).reshape(b, s, -1, HEAD_DIM)
    v = (h @ p["wv"]).reshape(b, s, -1, HEAD_DIM)
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(HEAD_DIM).astype(x.dtype)
    causal = jnp.tril(jnp.ones((s, s), dtype=bool))
    scores = jnp.where(causal, scores, jnp.finfo(x.dtype).min)
    att = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, axis=-1), v).reshape(b, s, -1)
    o = att @ p["wo"]
    if axis is not None and not skip_psum:
        o = jax.lax.psum(o, axis)
    x = x + o
    h = jax.nn.gelu(rms_norm(x, p["ln2"]) @ p["w1"])
    if axis is not None:
        h = all_gather_invariant(h, axis, axis=2, tiled=True)
    return x + h @ p["w2"]


PARAM_SPECS = {"ln1": P(), "wq": P(None, "tp"), "wk": P(None, "tp"), "wv": P(None, "tp"), "wo": P("tp", None),
               "ln2": P(), "w1": P(None, "tp"), "w2": P()}


def spec():
    return block


def impl(mesh, skip_psum=False):
    # (JAX's replication check would reject the missing psum; with the check off, as programs using
    # collectives it cannot type often have it, nothing does)
    return jax.shard_map(partial(block, axis="tp", skip_psum=skip_psum), mesh=mesh,
                         in_specs=(P(), PARAM_SPECS), out_specs=P(), check_vma=not skip_psum)


def inputs():
    keys = iter(jax.random.split(jax.random.key(0), 16))
    shapes = {"ln1": (DIM,), "wq": (DIM, DIM), "wk": (DIM, DIM), "wv": (DIM, DIM), "wo": (DIM, DIM), "ln2": (DIM,),
              "w1": (DIM, FFN), "w2": (FFN, DIM)}
    params = {n: jax.random.normal(next(keys), s) / (s[0] ** 0.5) for n, s in shapes.items()}
    return jax.random.normal(next(keys), (BATCH, SEQ, DIM)), params


def in_specs(world):
    return P(), PARAM_SPECS


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


# outputs: out0 = the block's output; with --backward the gradients follow in input order
GRADS = ["x", "p.ln1", "p.ln2", "p.w1", "p.w2", "p.wk", "p.wo", "p.wq", "p.wv"]


def expect(world, backward):
    rel = {"out0": "out0@0"}
    if backward:
        sharded = {"p.w1": 1, "p.wk": 1, "p.wq": 1, "p.wv": 1, "p.wo": 0}  # laid out like their weights
        for k, name in enumerate(GRADS, start=1):
            rel[f"out{k}"] = _cat(f"out{k}", world, sharded[name]) if name in sharded else f"out{k}@0"
    return rel
