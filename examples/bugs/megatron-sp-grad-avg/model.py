"""Bug (a gradient scale, in megatron-core itself): under sequence parallelism, Megatron's gradient step
averages the sequence-parallel gradients across the tensor-parallel group instead of summing them.

The model is ``examples/megatron-gpt`` (megatron-core's GPTModel, TP=2) with sequence parallelism on.
Megatron's ``_allreduce_non_tensor_model_parallel_grads`` (captured after backward through
``after_backward = gm.finalize_grads``) sums the gradients of parameters marked ``sequence_parallel`` and
averages those marked ``average_gradients_across_tp_domain``; here it is patched -- as a user's edit of the
library would -- to put the sequence-parallel ones in the averaged group. Each rank's gradient covers its
sequence shard, so the average is the gradient divided by the tensor-parallel size.
"""
import importlib.util
import sys
from pathlib import Path

import torch
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

_spec = importlib.util.spec_from_file_location("megatron_gpt", Path(__file__).resolve().parents[2] / "megatron-gpt" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.SP = True

from megatron.core.parallel_state import get_tensor_model_parallel_group  # noqa: E402
import megatron.core.distributed  # noqa: E402,F401  (after the example's warning filter; loads the module below)

fmg = sys.modules["megatron.core.distributed.finalize_model_grads"]


def _averaged_under_sp(model, config, tp_group=None):
    """Megatron's function for these models (no Megatron-FSDP, no DTensor gradients), the reduction changed."""
    tp_group = tp_group or get_tensor_model_parallel_group()
    if tp_group.size() <= 1:
        return
    params, grads = [], []
    for chunk in model:
        for name, param in chunk.named_parameters():
            if param.requires_grad and (getattr(param, "average_gradients_across_tp_domain", False)
                                        or (config.sequence_parallel and getattr(param, "sequence_parallel", False))):
                params.append(param)
                grads.append(param.main_grad.data)
    if grads:
        coalesced = _flatten_dense_tensors(grads)
        torch.distributed.all_reduce(coalesced, op=torch.distributed.ReduceOp.AVG, group=tp_group)  # the bug: SUM
        for param, buf, synced in zip(params, grads, _unflatten_dense_tensors(coalesced, grads)):
            buf.copy_(synced)


fmg._allreduce_non_tensor_model_parallel_grads = _averaged_under_sp

spec, impl, inputs, relation, after_backward = base.spec, base.impl, base.inputs, base.relation, base.after_backward
