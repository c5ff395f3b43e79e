"""A pre-norm transformer block (LayerNorm, multi-head attention, LayerNorm, GeLU MLP, residuals) with
Megatron-style tensor parallelism, exported to ONNX: q/k/v and fc1 column-parallel (whole heads per rank), the
attention output projection and fc2 row-parallel, each followed by an all-reduce (com.microsoft AllReduce)
and its replicated bias. ``torch.onnx.export(dynamo=True)`` writes LayerNormalization, MatMul, Reshape,
Transpose, Div, Softmax, Gelu and Add for it."""
import math

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, HEADS, FFN, BATCH, SEQ = 16, 4, 32, 2, 8


class Block(torch.nn.Module):
    def __init__(self, world: int = 1):
        super().__init__()
        self.world, self.heads, hd = world, HEADS // world, HIDDEN // HEADS
        self.ln1, self.ln2 = torch.nn.LayerNorm(HIDDEN), torch.nn.LayerNorm(HIDDEN)
        self.q, self.k, self.v = (torch.nn.Linear(HIDDEN, self.heads * hd) for _ in range(3))
        self.proj = torch.nn.Linear(self.heads * hd, HIDDEN, bias=False)
        self.proj_bias = torch.nn.Parameter(torch.zeros(HIDDEN))
        self.fc1 = torch.nn.Linear(HIDDEN, FFN // world)
        self.fc2 = torch.nn.Linear(FFN // world, HIDDEN, bias=False)
        self.fc2_bias = torch.nn.Parameter(torch.zeros(HIDDEN))

    def reduce(self, y):
        return funcol.all_reduce(y, "sum", dist.group.WORLD) if self.world > 1 else y

    def forward(self, x):
        b, s, _ = x.shape
        h = self.ln1(x)
        hd = HIDDEN // HEADS
        q, k, v = (t(h).view(b, s, self.heads, hd).transpose(1, 2) for t in (self.q, self.k, self.v))
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(hd), dim=-1) @ v
        x = x + self.reduce(self.proj(a.transpose(1, 2).reshape(b, s, self.heads * hd))) + self.proj_bias
        y = self.fc2(torch.nn.functional.gelu(self.fc1(self.ln2(x))))
        return x + self.reduce(y) + self.fc2_bias


def spec():
    return Block(1)


def impl(rank, world):
    return Block(world)


def inputs(rank, world):
    return (torch.randn(BATCH, SEQ, HIDDEN),)


def relation(world, backward):
    rep = lambda n: [f"{n}@{r}" for r in range(world)]  # noqa: E731
    cat = lambda n, d: f"concat({', '.join(f'{n}@{r}' for r in range(world))}, dim={d})"  # noqa: E731
    rel = {n: rep(n) for n in ("x", "ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias", "proj_bias", "fc2_bias")}
    rel |= {f"{t}.{p}": cat(f"{t}.{p}", 0) for t in ("q", "k", "v", "fc1") for p in ("weight", "bias")}
    rel |= {"proj.weight": cat("proj.weight", 1), "fc2.weight": cat("fc2.weight", 1)}
    return {"inputs": rel}


def expect(world, backward):
    return {"out0": [f"out0@{r}" for r in range(world)]}
