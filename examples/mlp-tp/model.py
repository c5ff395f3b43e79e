"""Megatron-style tensor-parallel MLP: column-parallel fc1, GeLU, row-parallel fc2, GeLU.

The distributed version uses Megatron's f/g operators as custom autograd Functions: f is the identity
forward and an all-reduce of the gradient backward; g all-reduces forward and is the identity backward.
(Using a plain differentiable all-reduce for g would all-reduce the replicated output gradient too and
make every weight gradient W times too large -- see the test of that mistake.)
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, FFN, BATCH = 8, 32, 4


class _CopyToParallel(torch.autograd.Function):  # Megatron's f
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return funcol.all_reduce(grad, "sum", dist.group.WORLD)


class _ReduceFromParallel(torch.autograd.Function):  # Megatron's g
    @staticmethod
    def forward(ctx, x):
        return funcol.all_reduce(x, "sum", dist.group.WORLD)

    @staticmethod
    def backward(ctx, grad):
        return grad


class MLP(torch.nn.Module):
    def __init__(self, world: int = 1, naive_allreduce: bool = False, skip_allreduce: bool = False):
        super().__init__()
        self.world, self.naive, self.skip = world, naive_allreduce, skip_allreduce
        self.fc1 = torch.nn.Linear(HIDDEN, FFN // world)
        self.fc2 = torch.nn.Linear(FFN // world, HIDDEN, bias=world == 1)
        if world > 1:
            self.fc2_bias = torch.nn.Parameter(torch.zeros(HIDDEN))

    def forward(self, x):
        if self.world > 1 and not self.naive:
            x = _CopyToParallel.apply(x)
        h = torch.nn.functional.gelu(self.fc1(x))
        y = self.fc2(h)
        if self.world > 1:
            if not self.skip:
                y = funcol.all_reduce(y, "sum", dist.group.WORLD) if self.naive else _ReduceFromParallel.apply(y)
            y = y + self.fc2_bias
        return torch.nn.functional.gelu(y)


def spec():
    return MLP(1)


def impl(rank, world):
    return MLP(world)


def inputs(rank, world):
    return (torch.randn(BATCH, HIDDEN),)


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": rep("x"), "fc1.weight": _cat("fc1.weight", world, 0), "fc1.bias": _cat("fc1.bias", world, 0),
           "fc2.weight": _cat("fc2.weight", world, 1), "fc2.bias": rep("fc2_bias")}
    if backward:
        rel["tangent.out0"] = rep("tangent.out0")
    return {"inputs": rel}


def expect(world, backward):
    if not backward:
        return {"out0": "out0@0"}
    return {"out0": "out0@0", "grad.fc1.weight": _cat("grad.fc1.weight", world, 0),
            "grad.fc2.weight": _cat("grad.fc2.weight", world, 1), "grad.fc2.bias": "grad.fc2_bias@0"}
