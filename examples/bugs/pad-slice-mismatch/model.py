"""Pad/slice mismatch around an all-gather (paper §6 bug class 3).

Sequence parallelism with a sequence length (SEQ=7) that the world size does not divide: each rank
holds ceil(SEQ/world) tokens except the last, which holds the rest and pads its shard with zeros to the
common size for the all-gather; after the all-gather the padding is sliced off again and the MLP runs
on the whole sequence.
The bug: the last rank pads at the *front* of its shard (``F.pad(x, (0, 0, pad, 0))``) while the
un-padding slices the *end* off the gathered sequence, so the last rank's tokens come out shifted by one
and one padding row survives. ``PAD_AT_END=1`` pads at the end, consistently with the slice (the fix):
that version verifies.
"""
import math
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

SEQ, HIDDEN, FFN = 7, 8, 16
FIXED = os.environ.get("PAD_AT_END", "0") == "1"


class MLP(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.fc1 = torch.nn.Linear(HIDDEN, FFN)
        self.fc2 = torch.nn.Linear(FFN, HIDDEN)

    def forward(self, x):  # x: [tokens (this rank's shard), hidden]
        if self.world > 1:
            shard = math.ceil(SEQ / self.world)
            pad = shard - x.shape[0]
            if pad:
                x = torch.nn.functional.pad(x, (0, 0, 0, pad) if FIXED else (0, 0, pad, 0))
            x = funcol.all_gather_tensor(x, 0, dist.group.WORLD)[:SEQ]  # the whole sequence, unpadded
        return self.fc2(torch.nn.functional.gelu(self.fc1(x)))


def spec():
    return MLP(1)


def impl(rank, world):
    return MLP(world)


def _shards(world):
    shard = math.ceil(SEQ / world)
    return [min(shard, SEQ - r * shard) for r in range(world)]


def inputs(rank, world):
    return (torch.randn(SEQ if rank is None else _shards(world)[rank], HIDDEN),)


def relation(world, backward):
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    rel = {"x": f"concat({', '.join(f'x@{r}' for r in range(world))}, dim=0)"}
    for p in ("fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"):
        rel[p] = rep(p)
    return {"inputs": rel}


def expect(world, backward):
    return {"out0": "out0@0"}
