"""Bug (a gradient-accumulation scale, in megatron-core itself): Megatron's pipeline schedule does not divide a
micro-batch's loss by the number of micro-batches.

The model is ``examples/megatron-gpt``'s GPTModel with labels at TP=2, trained with gradient accumulation over
``MICRO`` micro-batches: each micro-batch's mean loss goes through Megatron's own ``forward_step_calc_loss``
(``pipeline_parallel/schedules.py``: ``output_tensor /= num_microbatches``, the scale of gradient accumulation)
and the losses are summed -- backward of the sum accumulates the micro-batches' gradients, as Megatron's
schedule does. The specification is the same model at TP=1 on the same micro-batches, its losses scaled as an
accumulated mean is defined (``mean / MICRO``). ``GG_BUG=0`` runs Megatron's function unchanged (it verifies);
by default ``schedules.forward_step_calc_loss`` is replaced by a copy of it (the path a two-value ``loss_func``
takes) that leaves the division out -- as an edit of the library would -- so the loss and every gradient come
out ``MICRO`` times too large.
"""
import importlib.util
import os
from pathlib import Path

import torch

_spec = importlib.util.spec_from_file_location("megatron_gpt", Path(__file__).resolve().parents[2] / "megatron-gpt" / "model.py")
base = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(base)
base.LABELS = True

from megatron.core.pipeline_parallel import schedules  # noqa: E402

from graphguard.patches import megatron as gm  # noqa: E402

MICRO = 2
BUG = os.environ.get("GG_BUG", "1") == "1"


def loss_func(output_tensor):
    """A two-value loss function (Megatron's legacy form): the mean loss per token, nothing to report."""
    return output_tensor.float().mean(), {}


def _calc_loss_unscaled(model, output_tensor, loss_func, config, vp_stage, collect_non_loss_data, num_microbatches,
                        forward_data_store, cp_group_size=None, is_last_stage=None):
    """Megatron's ``forward_step_calc_loss`` for a two-value ``loss_func`` on the last stage (no MoE, no MTP),
    the division by ``num_microbatches`` left out (the bug)."""
    output_tensor, loss_reduced = loss_func(output_tensor)
    output_tensor *= cp_group_size
    forward_data_store.append(loss_reduced)
    return output_tensor, torch.tensor(0, dtype=torch.int)


if BUG:
    schedules.forward_step_calc_loss = _calc_loss_unscaled


class Accumulate(torch.nn.Module):
    """``MICRO`` micro-batches through the model, their losses summed (backward of the sum accumulates the
    micro-batches' gradients). ``schedule=True``: each loss scaled by Megatron's ``forward_step_calc_loss``;
    otherwise by the definition of an accumulated mean, ``mean / MICRO``."""

    def __init__(self, world: int, schedule: bool):
        super().__init__()
        self.schedule = schedule
        self.gpt = base._model(world)

    def _loss(self, ids, positions, mask, labels):
        out = self.gpt(ids, positions, mask, labels)
        if not self.schedule:
            return out.float().mean() / MICRO
        loss, _ = schedules.forward_step_calc_loss(self.gpt, out, loss_func, self.gpt.config, None, False, MICRO, [],
                                                   cp_group_size=1, is_last_stage=True)
        return loss

    def forward(self, ids_0, ids_1, positions, attention_mask, labels_0, labels_1):
        return (self._loss(ids_0, positions, attention_mask, labels_0)
                + self._loss(ids_1, positions, attention_mask, labels_1))


def spec():
    return Accumulate(1, schedule=False)


def impl(rank, world):
    return Accumulate(world, schedule=True)


def inputs(rank, world):
    ids, positions, causal, labels = base.inputs(None, 1)
    torch.manual_seed(2)
    return (ids, torch.randint(0, base.VOCAB, ids.shape), positions, causal, labels,
            torch.randint(0, base.VOCAB, labels.shape))


def relation(world, backward):
    names = ["ids_0", "ids_1", "positions", "attention_mask", "labels_0", "labels_1"]
    rel = {"inputs": gm.input_relation(lambda: Accumulate(world, True), world, names),
           "ranges": {"labels_0": f"[0, {base.VOCAB})", "labels_1": f"[0, {base.VOCAB})"}}
    if backward:  # the loss's gradient, the same on every rank (stated: with the bug the forward does not refine)
        rel["inputs"]["tangent.out0"] = [f"tangent.out0@{r}" for r in range(world)]
    return rel



