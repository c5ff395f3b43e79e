"""Bug: data-parallel gradients summed instead of averaged.

The dp-grads training step with ``sum`` all-reduces where DDP averages: every rank's loss is its local mean,
and the all-reduces sum them, so the logged loss and every gradient are ``world`` times too large (the
bug class of forgetting DDP's averaging when all-reducing by hand). graphguard names the sequential
``mse_loss``: its mean over the whole batch is only ``scale(sum of the ranks' means, 1/world)``, a factor
that no G_d operator takes back.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("dp_grads", Path(__file__).resolve().parents[2] / "dp-grads" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs, relation, expect = base.spec, base.inputs, base.relation, base.expect


def impl(rank, world):
    return base.Regression(world, reduce="sum")
