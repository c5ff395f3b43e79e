"""Bug: on a 2-D (DP x TP) mesh, the data-parallel gradient all-reduce uses the TP group.

The mlp-dp-tp training step with DDP's reducer given the wrong process group -- the tensor-parallel group
where the data-parallel one belongs (a mix-up of mesh dimensions, e.g. ``mesh["tp"]`` for ``mesh["dp"]``):
each rank averages its gradient slice with the *other TP slices* of the same batch shard instead of with
the same slice computed on the other batch shards. The loss is still right; the gradients are not.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("mlp_dp_tp", Path(__file__).resolve().parents[2] / "mlp-dp-tp" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs, relation, expect = base.spec, base.inputs, base.relation, base.expect


def impl(rank, world):
    return base.Regression(world, base.tp_degree(world), grad_group="tp")
