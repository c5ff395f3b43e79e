"""The jax-block-shardmap transformer block with the attention output's psum left out (a bug)."""
import importlib.util
from pathlib import Path

_path = Path(__file__).resolve().parents[2] / "jax-block-shardmap" / "model.py"
_spec = importlib.util.spec_from_file_location("graphguard_example_jax_block", _path)
block = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(block)

spec, inputs, in_specs = block.spec, block.inputs, block.in_specs


def impl(mesh):
    return block.impl(mesh, skip_psum=True)
