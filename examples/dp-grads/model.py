"""Data parallelism: every rank holds the whole model and a shard of the batch; gradients are all-reduced.

The training step of ``torch.nn.parallel.DistributedDataParallel``, written out so the captured graph holds
its collectives: each parameter passes through ``_AllReduceGrad`` (identity forward, all-reduce of the
gradient in backward -- what DDP's reducer does to every gradient), and the loss every rank logs is
all-reduced. As DDP does, each rank's loss is the mean over its own shard and the all-reduces average
(``avg``). ``GG_DP_REDUCE=presum`` divides each rank's loss by the world size and sums instead (the same
average, taken before the backward); bugs/dp-grads-sum sums without dividing: the loss and every gradient
come out ``world`` times too large.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 8


class _AllReduceGrad(torch.autograd.Function):  # DDP's reducer: identity forward, all-reduce the gradient
    @staticmethod
    def forward(ctx, p, op):
        ctx.op = op
        return p

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, ctx.op, dist.group.WORLD), None


class _AllReduceLoss(torch.autograd.Function):  # the logged loss: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, loss, op):
        return funcol.all_reduce(loss, op, dist.group.WORLD)

    @staticmethod
    def backward(ctx, g):
        return g, None


class Regression(torch.nn.Module):
    def __init__(self, world=1, reduce="avg"):
        super().__init__()
        self.world, self.reduce = world, reduce
        self.op = "avg" if reduce == "avg" else "sum"
        self.fc1 = torch.nn.Linear(IN, HIDDEN)
        self.ln = torch.nn.LayerNorm(HIDDEN)
        self.fc2 = torch.nn.Linear(HIDDEN, OUT)

    def forward(self, x, y):  # x, y: this rank's shard of the batch
        p = {n: _AllReduceGrad.apply(t, self.op) if self.world > 1 else t for n, t in self.named_parameters()}
        h = F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))
        h = F.layer_norm(h, (HIDDEN,), p["ln.weight"], p["ln.bias"])
        loss = F.mse_loss(F.linear(h, p["fc2.weight"], p["fc2.bias"]), y)
        if self.world == 1:
            return loss
        return _AllReduceLoss.apply(loss / self.world if self.reduce == "presum" else loss, self.op)


def spec():
    return Regression(1)


def impl(rank, world):
    return Regression(world, os.environ.get("GG_DP_REDUCE", "avg"))


def inputs(rank, world):
    b = BATCH if rank is None else BATCH // world
    return torch.randn(b, IN), torch.randn(b, OUT)


PARAMS = ("fc1.weight", "fc1.bias", "ln.weight", "ln.bias", "fc2.weight", "fc2.bias")


def relation(world, backward):
    shards = lambda name: f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim=0)"  # noqa: E731
    rel = {"x": shards("x"), "y": shards("y")}
    rel.update({p: [f"{p}@{r}" for r in range(world)] for p in PARAMS})  # replicated
    if backward:
        rel["tangent.out0"] = [f"tangent.out0@{r}" for r in range(world)]
    return {"inputs": rel}


def expect(world, backward):  # every rank logs the global loss and holds the full gradients
    exp = {"out0": "out0@0"}
    if backward:
        exp.update({f"grad.{p}": f"grad.{p}@0" for p in PARAMS})
    return exp
