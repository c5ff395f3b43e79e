"""Bug (paper §6 bug 6; transformers #14638 / #34191): gradient accumulation without dividing the loss by the
number of micro-batches. The accumulated loss (and every gradient) is MICRO times too large: no clean
expression maps the sequential loss to it -- it would need a division. Expected: flagged at the loss.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("grad_accum", Path(__file__).resolve().parents[2] / "grad-accum" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)

spec, inputs, relation, expect = base.spec, base.inputs, base.relation, base.expect


def impl(rank, world):
    return base.Regression(base.MICRO, scale=False)
