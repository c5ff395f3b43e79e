"""RoPE under sequence parallelism with a hand-written backward (paper §6, bug 1).

Each rank holds a contiguous shard of the sequence ([seq/world, batch, heads, head_dim], Megatron's SP
layout), so it must rotate its tokens with the cos/sin rows of *its* positions: rows
[rank * s, (rank + 1) * s). The rotary embedding is a custom autograd Function (as fused RoPE kernels
are); its forward slices the tables at the rank's offset, but its backward -- written separately --
slices them at offset 0, as if every rank held the first tokens. The forward is correct, so a loss
curve looks plausible; the gradients of every rank but the first are wrong.
``ROPE_BACKWARD_OFFSET=1`` uses the right offset in the backward too (the fix): that version verifies.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

SEQ, BATCH, HEADS, HD, HIDDEN = 8, 2, 2, 4, 8
FIXED = os.environ.get("ROPE_BACKWARD_OFFSET", "0") == "1"


def rotate_half(x):
    x1, x2 = x[..., : HD // 2], x[..., HD // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_half_t(g):  # the transpose of rotate_half (its backward)
    g1, g2 = g[..., : HD // 2], g[..., HD // 2:]
    return torch.cat((g2, -g1), dim=-1)


class Rope(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, cos, sin, start, bw_start):
        s = x.shape[0]
        c, sn = cos[start:start + s, None, None, :], sin[start:start + s, None, None, :]
        ctx.save_for_backward(cos, sin)
        ctx.bw_start = bw_start
        return x * c + rotate_half(x) * sn

    @staticmethod
    def backward(ctx, g):
        cos, sin = ctx.saved_tensors
        s, start = g.shape[0], ctx.bw_start
        c, sn = cos[start:start + s, None, None, :], sin[start:start + s, None, None, :]
        return g * c + rotate_half_t(g * sn), None, None, None, None


def rope_tables():
    inv = 1.0 / (10000 ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
    ang = torch.outer(torch.arange(SEQ, dtype=torch.float32), inv)
    ang = torch.cat((ang, ang), dim=-1)
    return ang.cos(), ang.sin()


class _SyncGrad(torch.autograd.Function):  # identity forward; all-reduce the gradient
    @staticmethod
    def forward(ctx, w):
        return w

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, "sum", dist.group.WORLD)


class QRope(torch.nn.Module):
    """q = x W^T per token, reshaped into heads and rotated; x: [seq (shard), batch, hidden]. W is replicated
    and sees only the rank's tokens, so its gradient is all-reduced (as for LayerNorm weights under SP)."""

    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.q = torch.nn.Linear(HIDDEN, HEADS * HD, bias=False)

    def forward(self, x, cos, sin):
        s, b, _ = x.shape
        rank = dist.get_rank() if self.world > 1 else 0
        w = _SyncGrad.apply(self.q.weight) if self.world > 1 else self.q.weight
        q = torch.nn.functional.linear(x, w).view(s, b, HEADS, HD)
        return Rope.apply(q, cos, sin, rank * s, rank * s if FIXED else 0)


def spec():
    return QRope(1)


def impl(rank, world):
    return QRope(world)


def inputs(rank, world):
    cos, sin = rope_tables()
    seq = SEQ if rank is None else SEQ // world
    return torch.randn(seq, BATCH, HIDDEN, requires_grad=True), cos, sin


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": _cat("x", world, 0), "cos": rep("cos"), "sin": rep("sin"), "q.weight": rep("q.weight")}
    if backward:
        rel["tangent.out0"] = _cat("tangent.out0", world, 0)
    return {"inputs": rel}


def expect(world, backward):
    exp = {"out0": _cat("out0", world, 0)}
    if backward:
        exp["grad.x"] = _cat("grad.x", world, 0)
    return exp
