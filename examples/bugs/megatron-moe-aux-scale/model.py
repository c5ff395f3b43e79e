"""Bug (in megatron-core's MoE layer as the ranks run it): the router's auxiliary load-balancing loss coefficient
multiplied by the expert-parallel size on the ranks -- a coefficient meant for a loss averaged over the ranks,
applied to each rank's loss -- so the router's gradient gets twice the load-balancing term at EP 2.

The model is ``examples/megatron-moe`` (megatron-core's ``MoELayer``, all-to-all dispatcher, EP=2 against EP=1)
with Megatron's ``global_aux_loss`` (``GG_AUX``) and its ``GG_BUG=aux-scale`` variant. Forward and backward:
the loss only changes gradients (``MoEAuxLossAutoScaler`` adds its gradient in backward).
"""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("megatron_moe", Path(__file__).resolve().parents[2] / "megatron-moe" / "model.py")
base = importlib.util.module_from_spec(_spec)
sys.modules["megatron_moe"] = base
_spec.loader.exec_module(base)
base.BUG, base.AUX = "aux-scale", "global_aux_loss"

spec, impl, inputs, relation, expect = base.spec, base.impl, base.inputs, base.relation, base.expect
