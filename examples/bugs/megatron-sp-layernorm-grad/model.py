"""Bug (paper §6 bug 5, here in megatron-core itself): under sequence parallelism, the all-reduce of the
LayerNorm gradients in Megatron's gradient step is skipped.

The model is ``examples/megatron-gpt`` (megatron-core's GPTModel, TP=2) with sequence parallelism on, and
Megatron's ``finalize_model_grads`` step (``_allreduce_non_tensor_model_parallel_grads``, captured after
backward through ``after_backward = gm.finalize_grads``) patched to return early when
``config.sequence_parallel`` is set -- as a user's edit of the library would. Every rank's gradient of a
parameter marked ``sequence_parallel`` (the LayerNorms, and the biases of the row-parallel linears, added
after their reduce-scatter) then covers only its sequence shard: a partial result left on the ranks.
"""
import importlib.util
import sys
from pathlib import Path


_spec = importlib.util.spec_from_file_location("megatron_gpt", Path(__file__).resolve().parents[2] / "megatron-gpt" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.SP = True

import megatron.core.distributed  # noqa: E402,F401  (after the example's warning filter; loads the module below)

fmg = sys.modules["megatron.core.distributed.finalize_model_grads"]
_allreduce_non_tensor_model_parallel_grads = fmg._allreduce_non_tensor_model_parallel_grads


def _skipped_under_sp(model, config, tp_group=None):
    if config.sequence_parallel:
        return  # the bug: the sequence-parallel gradients are never summed across the tensor-parallel group
    return _allreduce_non_tensor_model_parallel_grads(model, config, tp_group)


fmg._allreduce_non_tensor_model_parallel_grads = _skipped_under_sp

spec, impl, inputs, relation, after_backward = base.spec, base.impl, base.inputs, base.relation, base.after_backward
