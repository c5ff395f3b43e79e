"""The tensor-parallel MLP of ``examples/jax-mlp-gspmd`` written with shard_map: the collective is in the program.

Each rank holds a column shard of fc1 (``w1``, ``b1``: FFN/W hidden features) and the matching row shard of fc2
(``w2``), computes its partial fc2 product and all-reduces it (``jax.lax.psum``) before the replicated bias and
the GeLU. The specification is ``mlp`` of jax-mlp-gspmd on the full weights, on one device.
"""
import importlib.util
from pathlib import Path

import jax
from jax.sharding import PartitionSpec as P

_spec = importlib.util.spec_from_file_location("jax_mlp_gspmd_model",
                                               Path(__file__).resolve().parent.parent / "jax-mlp-gspmd" / "model.py")
_mlp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_mlp)
mlp, inputs, expect = _mlp.mlp, _mlp.inputs, _mlp.expect


def mlp_rank(x, w1, b1, w2, b2):
    """One rank's program: column-parallel fc1, row-parallel fc2, psum of the partial products."""
    h = jax.nn.gelu(x @ w1 + b1)
    return jax.nn.gelu(jax.lax.psum(h @ w2, "tp") + b2)


def spec():
    return mlp


def in_specs(world):
    return (P(), P(None, "tp"), P("tp"), P("tp", None), P())


def impl(mesh):
    return jax.shard_map(mlp_rank, mesh=mesh, in_specs=in_specs(mesh.devices.size), out_specs=P())
