"""Bug (paper §6 bug 5; Megatron-LM #1446): LayerNorm gradients not all-reduced under sequence parallelism.

The gpt-tp-sp block without the all-reduce of the LayerNorm parameters' gradients. Every rank's gradient
covers only its sequence shard. graphguard finds a mapping -- grad.ln1.weight = sum(grad.ln1.weight@0,
grad.ln1.weight@1) -- but no rank holds that sum: the gradients are left as partial results on the ranks, so
the verdict is "does not refine". No expectation is written here: an output must be held by G_d, and capture
expects a replicated parameter's gradient to be replicated too ([grad.ln1.weight@0, grad.ln1.weight@1]).
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("gpt_tp_sp", Path(__file__).resolve().parents[2] / "gpt-tp-sp" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs = base.spec, base.inputs


def impl(rank, world):
    return base.Block(world, sync_ln=False)


def relation(world, backward):
    return base.relation(world, True)
