"""Bug (in megatron-core's MoE layer as the ranks run it, tensor x expert parallel): the token dispatcher's
all-gather over the expert-tensor-parallel pair is declared as feeding replicated work
(``gather_from_sequence_parallel_region(..., tensor_parallel_output_grad=False)``), so its backward *splits*
the gradient where it must reduce-scatter the pair's partial products: every token's gradient misses the other
rank's half of the expert's fc1 columns.

The model is ``examples/megatron-moe`` (megatron-core's ``MoELayer``, all-to-all dispatcher; EP 2 x TP 2 with
sequence parallel, two experts, top-1) with its ``GG_BUG=tp-grad-split`` variant: the dispatcher module's
``gather_from_sequence_parallel_region`` is wrapped to pass that flag -- as an edit of the call would.
"""
import importlib.util
import os
import sys
from pathlib import Path

for k, v in {"GG_TP": "2", "GG_EXPERTS": "2", "GG_TOPK": "1"}.items():
    os.environ.setdefault(k, v)
_spec = importlib.util.spec_from_file_location("megatron_moe", Path(__file__).resolve().parents[2] / "megatron-moe" / "model.py")
base = importlib.util.module_from_spec(_spec)
sys.modules["megatron_moe"] = base  # (TorchDynamo looks wrapped functions up by their module's name)
_spec.loader.exec_module(base)
base.BUG = "tp-grad-split"

spec, impl, inputs, relation = base.spec, base.impl, base.inputs, base.relation
