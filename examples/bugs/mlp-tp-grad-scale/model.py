"""Bug: the tensor-parallel MLP uses a plain differentiable all-reduce instead of Megatron's g operator.

Forward is right, but autograd all-reduces the (replicated) output gradient as well, so every weight
gradient is world-size times too large -- the same family as the missing 1/TP scaling of an auxiliary
loss. Run with --backward: flagged at the first backward matmul that consumes the doubled gradient.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("mlp_tp", Path(__file__).resolve().parents[2] / "mlp-tp" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs = base.spec, base.inputs


def impl(rank, world):
    return base.MLP(world, naive_allreduce=True)


def relation(world, backward):
    return base.relation(world, True)  # the bug is in the backward graph: always capture it
