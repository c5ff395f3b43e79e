"""Bug (in megatron-core itself): the vocab-parallel cross-entropy's backward scales its gradient by the
tensor-parallel size.

The model is ``examples/megatron-gpt`` (megatron-core's GPTModel with labels, TP=2, ``ranges: labels``).
``_VocabParallelCrossEntropy.backward`` (``tensor_parallel/cross_entropy.py``) is patched -- as an edit of the
library would -- to multiply the gradient of the logits by ``get_tensor_model_parallel_world_size()``, as a
loss averaged over the TP group and then summed again would. The forward is Megatron's own and refines; the
backward's logit gradient is twice G_s's on each rank.
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("megatron_gpt", Path(__file__).resolve().parents[2] / "megatron-gpt" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.LABELS = True

from megatron.core.parallel_state import get_tensor_model_parallel_world_size  # noqa: E402
from megatron.core.tensor_parallel import cross_entropy as ce  # noqa: E402

_backward = ce._VocabParallelCrossEntropy.backward


def _scaled_backward(ctx, grad_output):
    """Megatron's backward, its logit gradient multiplied by the TP size (the bug)."""
    grad_input, *rest = _backward(ctx, grad_output)
    return (grad_input * get_tensor_model_parallel_world_size(), *rest)


ce._VocabParallelCrossEntropy.backward = staticmethod(_scaled_backward)

spec, impl, inputs, relation, after_backward = base.spec, base.impl, base.inputs, base.relation, base.after_backward
