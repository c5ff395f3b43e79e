"""A GPT block (pre-LayerNorm attention + MLP) with Megatron-style tensor parallelism.

Attention: q/k/v projections column-parallel (each rank holds HEADS/world heads), per-head attention,
output projection row-parallel followed by Megatron's g (all-reduce) and the replicated bias. MLP: fc1
column-parallel, GeLU, fc2 row-parallel + g. LayerNorms and residuals are replicated. ``LAYERS`` blocks.
"""
import math
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, HEADS, SEQ, BATCH = 32, 8, 6, 2
LAYERS = int(os.environ.get("GG_LAYERS", "1"))


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


class Block(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        h = HIDDEN // world
        self.heads = HEADS // world
        self.ln1 = torch.nn.LayerNorm(HIDDEN)
        self.q = torch.nn.Linear(HIDDEN, h)
        self.k = torch.nn.Linear(HIDDEN, h)
        self.v = torch.nn.Linear(HIDDEN, h)
        self.proj = torch.nn.Linear(h, HIDDEN, bias=False)
        self.proj_bias = torch.nn.Parameter(torch.zeros(HIDDEN))
        self.ln2 = torch.nn.LayerNorm(HIDDEN)
        self.fc1 = torch.nn.Linear(HIDDEN, 4 * h)
        self.fc2 = torch.nn.Linear(4 * h, HIDDEN, bias=False)
        self.fc2_bias = torch.nn.Parameter(torch.zeros(HIDDEN))

    def _f(self, x):
        return _F.apply(x) if self.world > 1 else x

    def _g(self, x):
        return _G.apply(x) if self.world > 1 else x

    def forward(self, x):
        b, s, _ = x.shape
        hd = HIDDEN // HEADS
        a = self._f(self.ln1(x))
        q = self.q(a).view(b, s, self.heads, hd).transpose(1, 2)
        k = self.k(a).view(b, s, self.heads, hd).transpose(1, 2)
        v = self.v(a).view(b, s, self.heads, hd).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd)
        probs = torch.softmax(scores, dim=-1)
        ctx = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, self.heads * hd)
        x = x + self._g(self.proj(ctx)) + self.proj_bias
        m = self._f(self.ln2(x))
        m = self.fc2(torch.nn.functional.gelu(self.fc1(m)))
        return x + self._g(m) + self.fc2_bias


class GPT(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block(world) for _ in range(LAYERS))

    def forward(self, x):
        for blk in self.blocks:
            x = blk(x)
        return x


def spec():
    return GPT(1)


def impl(rank, world):
    return GPT(world)


def inputs(rank, world):
    return (torch.randn(BATCH, SEQ, HIDDEN),)


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": rep("x")}
    for i in range(LAYERS):
        p = f"blocks.{i}."
        for ln in ("ln1", "ln2"):
            rel[p + ln + ".weight"] = rep(p + ln + ".weight")
            rel[p + ln + ".bias"] = rep(p + ln + ".bias")
        for lin in ("q", "k", "v", "fc1"):
            rel[p + lin + ".weight"] = _cat(p + lin + ".weight", world, 0)
            rel[p + lin + ".bias"] = _cat(p + lin + ".bias", world, 0)
        for lin in ("proj", "fc2"):
            rel[p + lin + ".weight"] = _cat(p + lin + ".weight", world, 1)
            rel[p + lin + "_bias"] = rep(p + lin + "_bias")
    if backward:
        rel["tangent.out0"] = rep("tangent.out0")
    return {"inputs": rel}


def expect(world, backward):
    return {"out0": "out0@0"}
