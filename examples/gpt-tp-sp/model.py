"""A GPT block with Megatron tensor + sequence parallelism ([seq, batch, hidden] layout).

Between blocks, activations are sharded on the sequence dim. LayerNorms and residuals run on the local
sequence shard; before the column-parallel q/k/v and fc1 the shard is all-gathered along the sequence,
after the row-parallel projections the partial sums are reduce-scattered back to sequence shards
(Megatron's gather/scatter operators, as custom autograd Functions). The LayerNorm parameters are
replicated but see only the local tokens, so their gradients must be all-reduced across the group
(as must the row-parallel biases added after the reduce-scatter): ``ALL_REDUCE_LN_GRADS=0`` reproduces the bug class of Megatron-LM #1446.
"""
import math
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, HEADS, SEQ, BATCH = 16, 8, 8, 2


def _world():
    return dist.get_world_size() if dist.is_initialized() else 1


class _GatherSeq(torch.autograd.Function):  # all-gather on the sequence dim; backward: reduce-scatter
    @staticmethod
    def forward(ctx, x):
        return funcol.all_gather_tensor(x, 0, dist.group.WORLD)

    @staticmethod
    def backward(ctx, g):
        return funcol.reduce_scatter_tensor(g, "sum", 0, dist.group.WORLD)


class _ScatterSeq(torch.autograd.Function):  # reduce-scatter on the sequence dim; backward: all-gather
    @staticmethod
    def forward(ctx, x):
        return funcol.reduce_scatter_tensor(x, "sum", 0, dist.group.WORLD)

    @staticmethod
    def backward(ctx, g):
        return funcol.all_gather_tensor(g, 0, dist.group.WORLD)


class _SyncGrad(torch.autograd.Function):  # identity forward; all-reduce the gradient (LayerNorm params)
    @staticmethod
    def forward(ctx, w):
        return w

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, "sum", dist.group.WORLD)


class Block(torch.nn.Module):
    def __init__(self, world=1, sync_ln=True):
        super().__init__()
        self.world, self.sync_ln = world, sync_ln
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

    def _ln(self, ln, x):
        if self.world > 1 and self.sync_ln:
            return torch.nn.functional.layer_norm(x, (HIDDEN,), _SyncGrad.apply(ln.weight), _SyncGrad.apply(ln.bias))
        return ln(x)

    def _sync(self, p):  # replicated parameters applied to sequence shards: all-reduce their gradients
        return _SyncGrad.apply(p) if self.world > 1 else p

    def _gather(self, x):
        return _GatherSeq.apply(x) if self.world > 1 else x

    def _scatter(self, x):
        return _ScatterSeq.apply(x) if self.world > 1 else x

    def forward(self, x):  # x: [seq (local shard), batch, hidden]
        hd = HIDDEN // HEADS
        a = self._gather(self._ln(self.ln1, x))
        s, b, _ = a.shape
        q = self.q(a).view(s, b, self.heads, hd).permute(1, 2, 0, 3)
        k = self.k(a).view(s, b, self.heads, hd).permute(1, 2, 0, 3)
        v = self.v(a).view(s, b, self.heads, hd).permute(1, 2, 0, 3)
        probs = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(hd), dim=-1)
        ctx = torch.matmul(probs, v).permute(2, 0, 1, 3).reshape(s, b, self.heads * hd)
        x = x + self._scatter(self.proj(ctx)) + self._sync(self.proj_bias)
        m = self._gather(self._ln(self.ln2, x))
        m = self.fc2(torch.nn.functional.gelu(self.fc1(m)))
        return x + self._scatter(m) + self._sync(self.fc2_bias)


def spec():
    return Block(1)


def impl(rank, world):
    return Block(world, sync_ln=os.environ.get("ALL_REDUCE_LN_GRADS", "1") != "0")


def inputs(rank, world):
    seq = SEQ if rank is None else SEQ // world
    return (torch.randn(seq, BATCH, HIDDEN),)


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": _cat("x", world, 0)}
    for ln in ("ln1", "ln2"):
        rel[ln + ".weight"], rel[ln + ".bias"] = rep(ln + ".weight"), rep(ln + ".bias")
    for lin in ("q", "k", "v", "fc1"):
        rel[lin + ".weight"], rel[lin + ".bias"] = _cat(lin + ".weight", world, 0), _cat(lin + ".bias", world, 0)
    for lin in ("proj", "fc2"):
        rel[lin + ".weight"] = _cat(lin + ".weight", world, 1)
        rel[lin + "_bias"] = rep(lin + "_bias")
    if backward:
        rel["tangent.out0"] = _cat("tangent.out0", world, 0)
    return {"inputs": rel}


def expect(world, backward):
    exp = {"out0": _cat("out0", world, 0)}
    if backward:  # replicated parameters: every rank holds the full gradient
        exp.update({f"grad.{p}": f"grad.{p}@0" for p in ("ln1.weight", "ln1.bias", "ln2.weight", "ln2.bias",
                                                           "proj_bias", "fc2_bias")})
    return exp
