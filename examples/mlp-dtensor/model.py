"""A tensor-parallel MLP written with DTensor: ``parallelize_module`` with ColwiseParallel fc1 and
RowwiseParallel fc2 on a 1-D device mesh. No relation is written by hand: the parameters' placements
(fc1 Shard(0), fc2.weight Shard(1), fc2.bias Replicate) and the input's (Replicate, from ColwiseParallel's
input hook) are the input relation; the output is replicated, so its gradient is too. The batch size is
dynamic: a symbol B in the captured graphs.
"""
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

HIDDEN, FFN, BATCH = 8, 32, 4


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(HIDDEN, FFN)
        self.fc2 = torch.nn.Linear(FFN, HIDDEN)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc2(torch.nn.functional.gelu(self.fc1(x))))


def spec():
    return MLP()


def impl(rank, world):
    mesh = init_device_mesh("cpu", (world,))
    return parallelize_module(MLP(), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})


def inputs(rank, world):
    return (torch.randn(BATCH, HIDDEN),)


def dynamic_dims(rank, world):
    return {"x": {0: "B"}}  # the batch size is a symbol: the certificate holds for every batch size
