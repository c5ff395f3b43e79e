"""Bug (in megatron-core's MoE layer as the ranks run it): on the expert-parallel ranks the router's logits are
rotated by one expert before its top-k, so every token goes to the wrong experts.

The model is ``examples/megatron-moe`` (megatron-core's ``MoELayer``, all-to-all dispatcher, EP=2 against EP=1)
with its ``GG_BUG=routing`` variant: the rank's ``TopKRouter.gating`` is wrapped -- as an edit of the router
would -- to return ``cat(logits[..., 1:], logits[..., :1])``. Everything after it (the capacity mask, the
permutation, the all-to-all, the experts, the unpermute) runs Megatron's own code on the wrong choice.
"""
import importlib.util
import sys
from pathlib import Path

_spec = importlib.util.spec_from_file_location("megatron_moe", Path(__file__).resolve().parents[2] / "megatron-moe" / "model.py")
base = importlib.util.module_from_spec(_spec)
sys.modules["megatron_moe"] = base  # (TorchDynamo looks the wrapped router up by its module's name)
_spec.loader.exec_module(base)
base.BUG = "routing"

spec, impl, inputs, relation = base.spec, base.impl, base.inputs, base.relation
