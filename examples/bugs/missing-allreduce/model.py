"""Bug: the row-parallel fc2 of the tensor-parallel MLP forgets its all-reduce (Megatron's g).

Each rank adds the bias to its partial product and applies GeLU: the partial sums are never combined.
Expected: flagged at fc2 itself (the addmm at mlp-tp/model.py:48): with the bias added on every rank to an
unreduced partial product, not even the cross-rank sum of the results rebuilds fc2's output (the bias is
counted world-size times), and no later operator could repair it.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("mlp_tp", Path(__file__).resolve().parents[2] / "mlp-tp" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs, relation = base.spec, base.inputs, base.relation


def impl(rank, world):
    return base.MLP(world, skip_allreduce=True)
