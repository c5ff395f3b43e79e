"""Data parallel x tensor parallel on a 2-D mesh: a Megatron TP MLP inside DDP, forward and backward.

Ranks form a ``dp x tp`` mesh, rank ``r = d * tp + t`` (torchtitan's and Megatron's order: TP innermost).
With 4 ranks and ``tp = 2``: TP groups {0,1} and {2,3}, DP groups {0,2} and {1,3}. Rank r holds batch shard
``d = r // tp`` (replicated across its TP group) and TP slice ``t = r % tp`` of the weights (replicated
across its DP group): fc1 column-parallel, fc2 row-parallel, with Megatron's f/g over the TP group; every
parameter passes through DDP's reducer (identity forward, ``avg`` all-reduce of the gradient over the DP
group), and the logged loss is averaged over the DP group. ``GG_TP`` sets the TP degree (default 2; the DP
degree is ``world // tp``). ``bugs/dp-tp-wrong-group`` averages the gradients over the TP group instead.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
import torch.nn.functional as F

IN, HIDDEN, OUT, BATCH = 8, 16, 4, 8


def tp_degree(world):
    return min(int(os.environ.get("GG_TP", "2")), world)


def mesh_groups(world, tp):
    """The TP and DP groups of this rank; every rank creates every group, in the same order."""
    dp = world // tp
    tp_groups = [dist.new_group([d * tp + t for t in range(tp)]) for d in range(dp)]
    dp_groups = [dist.new_group([d * tp + t for d in range(dp)]) for t in range(tp)]
    rank = dist.get_rank()
    return tp_groups[rank // tp], dp_groups[rank % tp]


class _ReduceGradient(torch.autograd.Function):
    """Identity forward, all-reduce of the gradient backward: Megatron's f (``sum`` over the TP group) and
    DDP's reducer (``avg`` over the DP group)."""
    @staticmethod
    def forward(ctx, x, op, group):
        ctx.op, ctx.group = op, group
        return x

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, ctx.op, ctx.group), None, None


class _ReduceFromParallel(torch.autograd.Function):  # Megatron's g: all-reduce forward, identity backward
    @staticmethod
    def forward(ctx, x, op, group):
        return funcol.all_reduce(x, op, group)

    @staticmethod
    def backward(ctx, g):
        return g, None, None


class Regression(torch.nn.Module):
    def __init__(self, world=1, tp=1, grad_group="dp"):
        super().__init__()
        self.world, self.tp, self.grad_group = world, tp, grad_group
        self.fc1 = torch.nn.Linear(IN, HIDDEN // tp)
        self.fc2 = torch.nn.Linear(HIDDEN // tp, OUT)
        if world > 1:  # created outside forward: dynamo does not trace new_group
            self.tp_group, self.dp_group = mesh_groups(world, tp)

    def forward(self, x, y):  # x, y: this rank's DP shard of the batch
        if self.world == 1:
            return F.mse_loss(self.fc2(F.gelu(self.fc1(x))), y)
        tp_group, dp_group = self.tp_group, self.dp_group
        reduce_group = dp_group if self.grad_group == "dp" else tp_group
        p = {n: _ReduceGradient.apply(t, "avg", reduce_group) for n, t in self.named_parameters()}
        x = _ReduceGradient.apply(x, "sum", tp_group)
        h = F.gelu(F.linear(x, p["fc1.weight"], p["fc1.bias"]))               # column-parallel
        out = _ReduceFromParallel.apply(F.linear(h, p["fc2.weight"]), "sum", tp_group) + p["fc2.bias"]
        loss = F.mse_loss(out, y)                                              # mean over the local shard
        return _ReduceFromParallel.apply(loss, "avg", dp_group)               # the logged loss


def spec():
    return Regression()


def impl(rank, world):
    return Regression(world, tp_degree(world))


def inputs(rank, world):
    if rank is None:
        return torch.randn(BATCH, IN), torch.randn(BATCH, OUT)
    dp = world // tp_degree(world)
    return torch.randn(BATCH // dp, IN), torch.randn(BATCH // dp, OUT)


def _cat(name, ranks, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in ranks)}, dim={dim})"


def _along(world, axis):
    """The rank lists along one mesh axis: each DP group ("dp") or each TP group ("tp")."""
    tp = tp_degree(world)
    dp = world // tp
    if axis == "dp":
        return [[d * tp + t for d in range(dp)] for t in range(tp)]
    return [[d * tp + t for t in range(tp)] for d in range(dp)]


def relation(world, backward):
    shards = lambda n: [_cat(n, rs, 0) for rs in _along(world, "dp")]       # noqa: E731  batch over DP
    tp_cat = lambda n, dim: [_cat(n, rs, dim) for rs in _along(world, "tp")]  # noqa: E731  weights over TP
    rel = {"x": shards("x"), "y": shards("y"),
           "fc1.weight": tp_cat("fc1.weight", 0), "fc1.bias": tp_cat("fc1.bias", 0),
           "fc2.weight": tp_cat("fc2.weight", 1), "fc2.bias": [f"fc2.bias@{r}" for r in range(world)]}
    if backward:
        rel["tangent.out0"] = [f"tangent.out0@{r}" for r in range(world)]
    return {"inputs": rel}


def expect(world, backward):  # every rank logs the sequential loss and holds its TP slice of every gradient
    every = lambda n: [f"{n}@{r}" for r in range(world)]  # noqa: E731
    tp0 = _along(world, "tp")[0]  # R_o states a sharded gradient once, over the first TP group
    exp = {"out0": every("out0")}
    if backward:
        exp.update({"grad.fc1.weight": _cat("grad.fc1.weight", tp0, 0), "grad.fc1.bias": _cat("grad.fc1.bias", tp0, 0),
                    "grad.fc2.weight": _cat("grad.fc2.weight", tp0, 1), "grad.fc2.bias": every("grad.fc2.bias")})
    return exp
