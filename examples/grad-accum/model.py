"""HF-style gradient accumulation: a regression model with MSE loss over MICRO micro-batches on one device.

The sequential model sees the whole batch; the implementation splits it into MICRO micro-batches and
accumulates: loss = sum(mse(micro-batch i)) / MICRO. Gradients add up the same way, so one graph with the
summed loss is the accumulated gradient. ``SCALE_LOSS=0`` drops the division -- paper §6 bug 6
(transformers issues #14638 / #34191): loss and gradients come out MICRO times too large.
"""
import os

import torch

FEATURES, BATCH, MICRO = 4, 8, 2


class Regression(torch.nn.Module):
    def __init__(self, micro=1, scale=True):
        super().__init__()
        self.micro, self.scale = micro, scale
        self.fc = torch.nn.Linear(FEATURES, 1)

    def forward(self, *xy):  # micro-batch inputs, then micro-batch targets
        xs, ys = xy[: self.micro], xy[self.micro:]
        loss = sum(torch.nn.functional.mse_loss(self.fc(x), y) for x, y in zip(xs, ys))
        return loss / self.micro if self.scale else loss


def spec():
    return Regression(1)


def impl(rank, world):
    return Regression(MICRO, scale=os.environ.get("SCALE_LOSS", "1") != "0")


def inputs(rank, world):
    if rank is None:
        return torch.randn(BATCH, FEATURES), torch.randn(BATCH, 1)
    m = BATCH // MICRO
    return tuple(torch.randn(m, FEATURES) for _ in range(MICRO)) + tuple(torch.randn(m, 1) for _ in range(MICRO))


def relation(world, backward):
    xs = ", ".join(f"xy.{i}@0" for i in range(MICRO))
    ys = ", ".join(f"xy.{MICRO + i}@0" for i in range(MICRO))
    rel = {"xy.0": f"concat({xs}, dim=0)", "xy.1": f"concat({ys}, dim=0)", "fc.weight": "fc.weight@0",
           "fc.bias": "fc.bias@0"}
    if backward:
        rel["tangent.out0"] = "tangent.out0@0"
    return {"inputs": rel}


def expect(world, backward):
    exp = {"out0": "out0@0"}
    if backward:
        exp.update({"grad.fc.weight": "grad.fc.weight@0", "grad.fc.bias": "grad.fc.bias@0"})
    return exp
