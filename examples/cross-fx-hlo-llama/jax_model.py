"""The implementation: the same layer in JAX, tensor-parallel with shard_map over a 1-D mesh ('tp',).

Each rank holds HEADS/W query heads and KV_HEADS/W key/value heads (q/k/v rows and o columns of PyTorch's
[out, in] weights; W must divide KV_HEADS = 8) and FFN/W columns of the gate/up projections (rows of down);
attention and MLP outputs are all-reduced with psum. The RoPE tables and the causal mask are replicated."""
from functools import partial

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

HIDDEN, HEADS, KV_HEADS, SEQ, BATCH, FFN = 64, 16, 8, 4, 2, 64  # >= 1 KV head per rank up to 8 ranks
REP = HEADS // KV_HEADS  # grouped-query attention: each KV head serves REP query heads
EPS = 2 ** -20  # exact in float32: PyTorch records the Python scalar, XLA the float32 value
HD = HIDDEN // HEADS
NAMES = ["input_norm.weight", "q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight",
         "post_norm.weight", "gate_proj.weight", "up_proj.weight", "down_proj.weight"]


def rms_norm(x, w, eps=EPS):
    return w * (x * jax.lax.rsqrt(jnp.mean(x ** 2, axis=-1, keepdims=True) + eps))


def linear(x, w):  # PyTorch's Linear: x @ w.T over the flattened leading dims
    return (x.reshape(-1, x.shape[-1]) @ w.T).reshape(*x.shape[:-1], w.shape[0])


def rotate_half(x):
    return jnp.concatenate((-x[..., HD // 2:], x[..., : HD // 2]), axis=-1)


def apply_rope(x, cos, sin):  # x: [batch, heads, seq, hd]; cos/sin: [seq, hd]
    return x * cos + rotate_half(x) * sin


def repeat_kv(x):  # [b, kv_heads, s, hd] -> [b, kv_heads * REP, s, hd], each head REP times (as HF's)
    b, h, s, d = x.shape
    return jnp.broadcast_to(x[:, :, None], (b, h, REP, s, d)).reshape(b, h * REP, s, d)


def layer(x, cos, sin, mask, p, axis=None, skip_psum=False, rope_bug=False):
    """cos/sin: [seq, hd] RoPE tables, mask: [seq, seq] additive causal mask, all replicated. ``rope_bug``: k
    rotated with sin and cos swapped (a bug, the must-not-prove twin)."""
    b, s, _ = x.shape
    a = rms_norm(x, p["input_norm.weight"])
    q = linear(a, p["q_proj.weight"]).reshape(b, s, -1, HD).transpose(0, 2, 1, 3)
    k = linear(a, p["k_proj.weight"]).reshape(b, s, -1, HD).transpose(0, 2, 1, 3)
    v = linear(a, p["v_proj.weight"]).reshape(b, s, -1, HD).transpose(0, 2, 1, 3)
    q, k = apply_rope(q, cos, sin), (apply_rope(k, sin, cos) if rope_bug else apply_rope(k, cos, sin))
    k, v = repeat_kv(k), repeat_kv(v)
    probs = jax.nn.softmax(jnp.matmul(q, k.swapaxes(-1, -2)) * HD ** -0.5 + mask, axis=-1)
    ctx = jnp.matmul(probs, v).transpose(0, 2, 1, 3).reshape(b, s, -1)
    o = linear(ctx, p["o_proj.weight"])
    x = x + (jax.lax.psum(o, axis) if axis and not skip_psum else o)
    m = rms_norm(x, p["post_norm.weight"])
    d = linear(jax.nn.silu(linear(m, p["gate_proj.weight"])) * linear(m, p["up_proj.weight"]), p["down_proj.weight"])
    return x + (jax.lax.psum(d, axis) if axis else d)


SPECS = {"input_norm.weight": P(), "q_proj.weight": P("tp", None), "k_proj.weight": P("tp", None),
         "v_proj.weight": P("tp", None), "o_proj.weight": P(None, "tp"), "post_norm.weight": P(),
         "gate_proj.weight": P("tp", None), "up_proj.weight": P("tp", None), "down_proj.weight": P(None, "tp")}


def impl(mesh, skip_psum=False, rope_bug=False):
    return jax.shard_map(partial(layer, axis="tp", skip_psum=skip_psum, rope_bug=rope_bug), mesh=mesh,
                         in_specs=(P(), P(), P(), P(), SPECS),
                         out_specs=P(), check_vma=not skip_psum)
