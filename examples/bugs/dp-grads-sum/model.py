"""Bug: data-parallel gradients summed instead of averaged.

The dp-grads training step without the division by the world size: every rank's loss is its local mean,
and the all-reduces sum them, so the logged loss and every gradient are ``world`` times too large (the
bug class of forgetting DDP's averaging when all-reducing by hand). graphguard stops at the sequential
``mse_loss``: its mean over the whole batch is no clean expression of the ranks' tensors.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("dp_grads", Path(__file__).resolve().parents[2] / "dp-grads" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs, relation, expect = base.spec, base.inputs, base.relation, base.expect


def impl(rank, world):
    return base.Regression(world, average=False)
