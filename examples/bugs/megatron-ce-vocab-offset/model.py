"""Bug (in megatron-core itself): the vocab-parallel cross-entropy computes each rank's vocabulary range from
its partition size as if that were the global vocabulary size.

The model is ``examples/megatron-gpt`` (megatron-core's GPTModel with labels, TP=2). Megatron's
``_VocabParallelCrossEntropy.forward`` (``tensor_parallel/cross_entropy.py``) takes the rank's vocabulary
range [start, end) from ``VocabUtility.vocab_range_from_per_partition_vocab_size(partition_vocab_size, rank,
world_size)``; here the module's ``VocabUtility`` is patched -- as an edit of the library would -- so that the
call goes to ``vocab_range_from_global_vocab_size`` (which divides its first argument by the world size once
more). At TP=1 both give [0, V); at TP=2 rank 1 takes [V/4, V/2) instead of [V/2, V): the labels it owns are
masked on both ranks and others are looked up twice.

``GG_CE_BUG=allreduce`` plants another bug instead: the all-reduce of the predicted logits is dropped (a copy of
Megatron's forward without that one call), so each rank's loss uses only the target logits of its own shard.
"""
import importlib.util
import os
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("megatron_gpt", Path(__file__).resolve().parents[2] / "megatron-gpt" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.LABELS = True

from megatron.core.parallel_state import (  # noqa: E402
    get_tensor_model_parallel_group, get_tensor_model_parallel_rank, get_tensor_model_parallel_world_size)
from megatron.core.tensor_parallel import cross_entropy as ce  # noqa: E402
from megatron.core.tensor_parallel.utils import VocabUtility  # noqa: E402

BUG = os.environ.get("GG_CE_BUG", "offset")


class _RangeFromGlobalSize(VocabUtility):
    """VocabUtility whose per-partition range is computed as from the global vocabulary size (the bug)."""

    @staticmethod
    def vocab_range_from_per_partition_vocab_size(per_partition_vocab_size, rank, world_size):
        return VocabUtility.vocab_range_from_global_vocab_size(per_partition_vocab_size, rank, world_size)


def _forward_without_predicted_allreduce(ctx, vocab_parallel_logits, target, label_smoothing=0.0):
    """Megatron's ``_VocabParallelCrossEntropy.forward`` (no label smoothing), the all-reduce of the
    predicted logits left out."""
    VPCE = ce.VocabParallelCrossEntropy
    vocab_parallel_logits, logits_max = VPCE.calculate_logits_max(vocab_parallel_logits)
    torch.distributed.all_reduce(logits_max, op=torch.distributed.ReduceOp.MAX, group=get_tensor_model_parallel_group())
    partition_vocab_size = vocab_parallel_logits.size()[-1]
    vocab_start_index, vocab_end_index = VocabUtility.vocab_range_from_per_partition_vocab_size(
        partition_vocab_size, get_tensor_model_parallel_rank(), get_tensor_model_parallel_world_size())
    target_mask, masked_target_1d, predicted_logits, sum_exp_logits, exp_logits = VPCE.calculate_predicted_logits(
        vocab_parallel_logits, target, logits_max, vocab_start_index, vocab_end_index)
    # (the bug: torch.distributed.all_reduce(predicted_logits, ...) is missing here)
    torch.distributed.all_reduce(sum_exp_logits, op=torch.distributed.ReduceOp.SUM, group=get_tensor_model_parallel_group())
    exp_logits, loss = VPCE.calculate_cross_entropy_loss(exp_logits, predicted_logits, sum_exp_logits)
    ctx.label_smoothing, ctx.vocab_size = label_smoothing, exp_logits.size(-1)
    ctx.save_for_backward(exp_logits, target_mask, masked_target_1d)
    return loss


if BUG == "allreduce":
    ce._VocabParallelCrossEntropy.forward = staticmethod(_forward_without_predicted_allreduce)
else:
    ce.VocabUtility = _RangeFromGlobalSize

spec, impl, inputs, relation, after_backward = base.spec, base.impl, base.inputs, base.relation, base.after_backward
