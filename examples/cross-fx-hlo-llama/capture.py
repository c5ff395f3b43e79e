#!/usr/bin/env python3
"""Capture the pair: the PyTorch layer (torch_model.py) as the specification, through the fx frontend, and
the JAX tensor-parallel layer (jax_model.py) as the implementation, as HLO; write the relation between them.

    python capture.py --world-size N --out DIR   # DIR/spec.gg.json, impl.hlo.pb, relation.yaml

The relation is the one the JAX shardings state (graphguard.jax), renamed to the PyTorch tensors: JAX's
``p.q_proj.weight`` is PyTorch's ``q_proj.weight`` (same [out, in] layout), ``x`` is ``x``.
"""
import argparse
import json
import sys
from pathlib import Path

import graphguard.jax  # noqa: F401  (host devices, before jax)
import graphguard.torch
from graphguard.ir.relation import relation_yaml

import jax
import numpy as np
import torch
from jax.sharding import AxisType, PartitionSpec as P

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import jax_model  # noqa: E402
import torch_model  # noqa: E402


def jnp(t):
    return jax.numpy.asarray(t.numpy())


def capture(world: int, out, skip_psum: bool = False, rope_bug: bool = False) -> dict:
    """Write the pair for ``world`` ranks into ``out``; return the paths. Bugs for the must-not-prove twins:
    ``skip_psum``: the implementation leaves out the attention output's all-reduce; ``rope_bug``: it rotates k with
    sin and cos swapped."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    layer = torch_model.Layer()
    x = torch.randn(torch_model.BATCH, torch_model.SEQ, torch_model.HIDDEN)
    cos, sin = torch_model.rope_tables()
    mask = torch_model.causal_mask()
    spec = graphguard.torch.capture(lambda r: layer, (x, cos, sin, mask), world_size=1, name="llama-layer-torch")
    spec.save(out / "spec.gg.json")
    params = {n: jax.numpy.asarray(p.detach().numpy()) for n, p in layer.named_parameters()}
    mesh = jax.make_mesh((world,), ("tp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:world])
    cap = graphguard.jax.capture(jax_model.layer, (jnp(x), jnp(cos), jnp(sin), jnp(mask), params), mesh=mesh,
                                 in_shardings=(P(), P(), P(), P(), jax_model.SPECS), impl=jax_model.impl(mesh, skip_psum, rope_bug))
    (out / "impl.hlo.pb").write_bytes(cap.impl)
    # keys: the specification's (PyTorch) inputs; values: the implementation's (JAX) tensors, p.q_proj.weight@r
    rel = {(name[2:] if name.startswith("p.") else name): expr for name, expr in cap.relation["inputs"].items()}
    (out / "relation.yaml").write_text(relation_yaml({"inputs": rel, "expect": {"out0": "out0@0"}}))
    if not (skip_psum or rope_bug):  # the two programs compute the same numbers on the same weights (the example's own check)
        want = layer(x, cos, sin, mask).detach().numpy()
        got = np.asarray(jax.jit(jax_model.impl(mesh))(jnp(x), jnp(cos), jnp(sin), jnp(mask), params))
        assert np.allclose(want, got, atol=1e-4), np.abs(want - got).max()
    return {k: out / v for k, v in (("spec", "spec.gg.json"), ("impl", "impl.hlo.pb"), ("relation", "relation.yaml"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    print(json.dumps({k: str(v) for k, v in capture(a.world_size, a.out).items()}))


if __name__ == "__main__":
    main()
