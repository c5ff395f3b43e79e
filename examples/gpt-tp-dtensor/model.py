"""A GPT block with tensor + sequence parallelism written with DTensor (the torchtitan plan).

``parallelize_module`` on a 1-D device mesh: the LayerNorms run on sequence shards (SequenceParallel), the
attention and MLP inputs are all-gathered along the sequence (PrepareModuleInput: Shard(1) -> Replicate),
q/k/v and fc1 are column-parallel, proj and fc2 row-parallel with their outputs reduce-scattered back to
sequence shards (RowwiseParallel(output_layouts=Shard(1))). Activations are [batch, seq, hidden]. No
relation is written by hand: the placements give every parameter's and the input's relation, and the
output's layout (a sequence shard) comes from the forward certificate for the backward's tangent.
"""
import math

import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

HIDDEN, HEADS, SEQ, BATCH = 16, 4, 8, 2
HEAD_DIM = HIDDEN // HEADS


class Attention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = (torch.nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.proj = torch.nn.Linear(HIDDEN, HIDDEN)

    def forward(self, h):
        b, s, _ = h.shape
        q, k, v = (lin(h).view(b, s, -1, HEAD_DIM).transpose(1, 2) for lin in (self.q, self.k, self.v))
        probs = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(HEAD_DIM), dim=-1)
        return self.proj((probs @ v).transpose(1, 2).reshape(b, s, -1))


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(HIDDEN, 4 * HIDDEN)
        self.fc2 = torch.nn.Linear(4 * HIDDEN, HIDDEN)

    def forward(self, h):
        return self.fc2(torch.nn.functional.gelu(self.fc1(h)))


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.attn = torch.nn.LayerNorm(HIDDEN), Attention()
        self.ln2, self.mlp = torch.nn.LayerNorm(HIDDEN), MLP()

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


PLAN = {
    "ln1": SequenceParallel(),
    "attn": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "attn.q": ColwiseParallel(), "attn.k": ColwiseParallel(), "attn.v": ColwiseParallel(),
    "attn.proj": RowwiseParallel(output_layouts=Shard(1)),
    "ln2": SequenceParallel(),
    "mlp": PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
    "mlp.fc1": ColwiseParallel(),
    "mlp.fc2": RowwiseParallel(output_layouts=Shard(1)),
}


def spec():
    return Block()


def impl(rank, world):
    return parallelize_module(Block(), init_device_mesh("cpu", (world,)), PLAN)


def inputs(rank, world):
    seq = SEQ if rank is None else SEQ // world
    return (torch.randn(BATCH, seq, HIDDEN),)
