"""Megatron-style tensor-parallel MLP exported to ONNX: column-parallel fc1, GeLU, row-parallel fc2, an
all-reduce (ONNX Runtime's com.microsoft AllReduce), the replicated fc2 bias, GeLU.

``graphguard capture --frontend onnx`` exports ``spec()`` and every rank's ``impl(rank, world)`` with
torch.onnx.export (the functional all-reduce becomes com.microsoft AllReduce) and writes ``relation()``.
``SKIP_ALLREDUCE`` (examples/bugs/onnx-mlp-missing-allreduce) drops the all-reduce: each rank adds the bias
to its partial sum.
"""
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, FFN, BATCH, SEQ = 8, 32, 2, 4
SKIP_ALLREDUCE = False


class MLP(torch.nn.Module):
    def __init__(self, world: int = 1, skip_allreduce: bool = False):
        super().__init__()
        self.world, self.skip = world, skip_allreduce
        self.fc1 = torch.nn.Linear(HIDDEN, FFN // world)
        self.fc2 = torch.nn.Linear(FFN // world, HIDDEN, bias=False)
        self.fc2_bias = torch.nn.Parameter(torch.zeros(HIDDEN))

    def forward(self, x):
        y = self.fc2(torch.nn.functional.gelu(self.fc1(x)))
        if self.world > 1 and not self.skip:
            y = funcol.all_reduce(y, "sum", dist.group.WORLD)
        return torch.nn.functional.gelu(y + self.fc2_bias)


def spec():
    return MLP(1)


def impl(rank, world):
    return MLP(world, SKIP_ALLREDUCE)


def inputs(rank, world):
    return (torch.randn(BATCH, SEQ, HIDDEN),)


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    return {"inputs": {"x": rep("x"), "fc1.weight": _cat("fc1.weight", world, 0),
                       "fc1.bias": _cat("fc1.bias", world, 0), "fc2.weight": _cat("fc2.weight", world, 1),
                       "fc2_bias": rep("fc2_bias")}}


def expect(world, backward):
    return {"out0": [f"out0@{r}" for r in range(world)]}
