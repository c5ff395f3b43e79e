"""Bug (paper §6 bug 2): the MoE auxiliary loss is not divided by the tensor-parallel size.

The ``tp`` layout of ``examples/moe-ep``: tokens are sequence-sharded and all-gathered, so every rank routes
all of them and computes the whole (replicated) auxiliary load-balancing loss. The all-gather's backward is
a reduce-scatter that sums the ranks' gradients -- right for the experts' partial gradients, but it adds
the replicated aux-loss gradient world times. Dividing each rank's aux loss by world fixes it
(``MOE_PARALLEL=tp examples/moe-ep/run --backward`` verifies); this variant does not divide. Expected:
flagged at the router's softmax backward, the first operator where the aux-loss gradient (one copy per
rank) is mixed with the experts' partial gradients -- no clean expression would need a division by world.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("moe_ep", Path(__file__).resolve().parents[2] / "moe-ep" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs = base.spec, base.inputs


def impl(rank, world):
    return base.MoE(world, "tp", aux_scale=False)


def relation(world, backward):
    return base.relation(world, backward, "tp")
