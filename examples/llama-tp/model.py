"""A Llama block (RMSNorm, RoPE, SwiGLU MLP, grouped-query attention) with Megatron-style tensor parallelism.

q/k/v and the gate/up projections are column-parallel, o_proj and down_proj row-parallel followed by
Megatron's g (all-reduce); RMSNorm weights, the RoPE tables and the residual stream are replicated.
HEADS query heads share KV_HEADS key/value heads. With world <= KV_HEADS every rank owns KV_HEADS/world KV
heads; with world > KV_HEADS (vLLM's layout) each KV head is *replicated* on world/KV_HEADS ranks, which
hold equal k/v weights -- the relation says so by listing both concatenations.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, HEADS, KV_HEADS, SEQ, BATCH, FFN = 32, 8, 2, 6, 2, 48
# GG_SHAPE=405b: Llama-3.1-405B's layer (hidden 16384, 128 heads over 8 KV heads, MLP 53248; a short sequence),
# built on the meta device: captured without allocating a weight (a layer's would be 3.2 GB in float32)
SHAPES = {"405b": (16384, 128, 8, 16, 1, 53248), "8b": (4096, 32, 8, 16, 1, 14336)}
SHAPE = os.environ.get("GG_SHAPE", "")
if SHAPE:
    HIDDEN, HEADS, KV_HEADS, SEQ, BATCH, FFN = SHAPES[SHAPE]
DEVICE = "meta" if SHAPE else "cpu"
HD = HIDDEN // HEADS
LAYERS = int(os.environ.get("GG_LAYERS", "1"))
# GG_REPEAT=1: layer 0 is traced and each later layer is layer 0's graph over its own weights (the
# layers are checked to be copies of each other: graphguard.frontends.fx.repeat; with backward, layer 0 is
# traced and layer 1's forward and backward are copied)
repeat = "layers" if os.environ.get("GG_REPEAT") == "1" else None


class _F(torch.autograd.Function):  # Megatron's f: identity forward, all-reduce backward
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, "sum", dist.group.WORLD)


class _G(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x):
        return funcol.all_reduce(x, "sum", dist.group.WORLD)

    @staticmethod
    def backward(ctx, g):
        return g


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rope_tables():
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ang = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()


def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat((-x2, x1), dim=-1)


def apply_rope(x, cos, sin):  # x: [batch, heads, seq, hd]; cos/sin: [seq, hd]
    return x * cos + rotate_half(x) * sin


class Block(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.heads = HEADS // world
        self.kv_heads = max(KV_HEADS // world, 1)
        self.input_norm = RMSNorm(HIDDEN)
        self.q_proj = torch.nn.Linear(HIDDEN, self.heads * HD, bias=False)
        self.k_proj = torch.nn.Linear(HIDDEN, self.kv_heads * HD, bias=False)
        self.v_proj = torch.nn.Linear(HIDDEN, self.kv_heads * HD, bias=False)
        self.o_proj = torch.nn.Linear(self.heads * HD, HIDDEN, bias=False)
        self.post_norm = RMSNorm(HIDDEN)
        self.gate_proj = torch.nn.Linear(HIDDEN, FFN // world, bias=False)
        self.up_proj = torch.nn.Linear(HIDDEN, FFN // world, bias=False)
        self.down_proj = torch.nn.Linear(FFN // world, HIDDEN, bias=False)

    def _f(self, x):
        return _F.apply(x) if self.world > 1 else x

    def _g(self, x):
        return _G.apply(x) if self.world > 1 else x

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        a = self._f(self.input_norm(x))
        q = self.q_proj(a).view(b, s, self.heads, HD).transpose(1, 2)
        k = self.k_proj(a).view(b, s, self.kv_heads, HD).transpose(1, 2)
        v = self.v_proj(a).view(b, s, self.kv_heads, HD).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = self.heads // self.kv_heads  # grouped-query attention: each KV head serves `rep` query heads
        k = k[:, :, None].expand(b, self.kv_heads, rep, s, HD).reshape(b, self.heads, s, HD)
        v = v[:, :, None].expand(b, self.kv_heads, rep, s, HD).reshape(b, self.heads, s, HD)
        probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * HD ** -0.5, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * HD)
        x = x + self._g(self.o_proj(ctx))
        m = self._f(self.post_norm(x))
        m = self.down_proj(torch.nn.functional.silu(self.gate_proj(m)) * self.up_proj(m))
        return x + self._g(m)


class Llama(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.layers = torch.nn.ModuleList(Block(world) for _ in range(LAYERS))

    def forward(self, x, cos, sin):
        for blk in self.layers:
            x = blk(x, cos, sin)
        return x


def spec():
    with torch.device(DEVICE):
        return Llama(1)


def impl(rank, world):
    with torch.device(DEVICE):
        return Llama(world)


def inputs(rank, world):
    cos, sin = rope_tables()
    if SHAPE:  # (shapes alone: nothing is computed on the meta device)
        return torch.empty(BATCH, SEQ, HIDDEN, device="meta"), cos.to("meta"), sin.to("meta")
    return torch.randn(BATCH, SEQ, HIDDEN), cos, sin


def _cat(name, ranks, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in ranks)}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": rep("x"), "cos": rep("cos"), "sin": rep("sin")}
    per_kv = max(world // KV_HEADS, 1)  # ranks sharing one KV head
    for i in range(LAYERS):
        p = f"layers.{i}."
        for n in ("input_norm", "post_norm"):
            rel[p + n + ".weight"] = rep(p + n + ".weight")
        for lin in ("q_proj", "gate_proj", "up_proj"):
            rel[p + lin + ".weight"] = _cat(p + lin + ".weight", range(world), 0)
        for lin in ("k_proj", "v_proj"):  # one concatenation per choice of replica
            rel[p + lin + ".weight"] = [_cat(p + lin + ".weight", range(j, world, per_kv), 0) for j in range(per_kv)]
        for lin in ("o_proj", "down_proj"):
            rel[p + lin + ".weight"] = _cat(p + lin + ".weight", range(world), 1)
    if backward:
        rel["tangent.out0"] = rep("tangent.out0")
    return {"inputs": rel}


def expect(world, backward):
    exp = {"out0": "out0@0"}
    if not backward:
        return exp
    per_kv = max(world // KV_HEADS, 1)
    for i in range(LAYERS):
        p = f"grad.layers.{i}."
        exp[p + "input_norm.weight"] = p + "input_norm.weight@0"  # f all-reduced the input gradient
        exp[p + "q_proj.weight"] = _cat(p + "q_proj.weight", range(world), 0)
        exp[p + "down_proj.weight"] = _cat(p + "down_proj.weight", range(world), 1)
        # a replicated KV head's gradient is split over its replicas (each holds its query heads' part):
        # training code must all-reduce it within the KV group
        for lin in ("k_proj", "v_proj"):
            groups = [f"sum({', '.join(f'{p}{lin}.weight@{r}' for r in range(g * per_kv, (g + 1) * per_kv))})"
                      if per_kv > 1 else f"{p}{lin}.weight@{g}" for g in range(world // per_kv)]
            exp[p + lin + ".weight"] = f"concat({', '.join(groups)}, dim=0)" if len(groups) > 1 else groups[0]
    return exp
