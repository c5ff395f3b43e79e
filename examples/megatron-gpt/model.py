"""megatron-core's own GPTModel (0.16, the local layer spec: torch LayerNorm, Megatron's column/row-parallel
linears, its attention and MLP), tensor-parallel on graphguard's fake process group, against the same model at
tensor-parallel size 1.

``GG_SP=1`` turns on sequence parallelism; ``GG_LAYERS`` sets the number of layers (1). The model is called
with ``labels``: its output is the loss per token [b, s] from Megatron's own vocab-parallel cross-entropy
(``GG_LABELS=0``: no labels, the output is the vocabulary-parallel logits [s, b, V/W], ``parallel_output=True``).
The word embedding is Megatron's ``VocabParallelEmbedding`` and the output layer its column-parallel linear.
The relation states ``ranges: labels: "[0, V)"`` -- every label is a token of the vocabulary -- which the TP=1
program's masking of out-of-vocabulary labels needs to equal the ranks' sum of masked lookups. Megatron's CUDA assumptions are
patched by :mod:`graphguard.patches.megatron` (:func:`~graphguard.patches.megatron.initialize`), which changes
no value the model computes. Weights are initialised on the CPU from one seed: every rank's shard is a slice of
the TP=1 model's tensor, as the input relation (read off Megatron's own parameter attributes) states.
"""
import os
import warnings

import torch

warnings.filterwarnings("ignore", category=UserWarning, module=r"megatron\.")  # its import-time notices about Apex
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.models.gpt.gpt_model import GPTModel
from megatron.core.transformer.transformer_config import TransformerConfig

from graphguard.patches import megatron as gm

BATCH, SEQ, HIDDEN, HEADS, VOCAB = 2, 8, 16, 4, 32
LAYERS = int(os.environ.get("GG_LAYERS", "1"))
SP = os.environ.get("GG_SP", "0") == "1"
LABELS = os.environ.get("GG_LABELS", "1") == "1"


class GPTWithLabels(GPTModel):
    """GPTModel called with ``labels=``: its loss per token [b, s], from Megatron's own vocab-parallel
    cross-entropy (``compute_language_model_loss``); the labels are the model's fourth input."""

    def forward(self, input_ids, position_ids, attention_mask, labels):
        return super().forward(input_ids, position_ids, attention_mask, labels=labels)


def _model(world: int) -> GPTModel:
    gm.initialize(tensor_parallel=world)
    config = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                               tensor_model_parallel_size=world, sequence_parallel=SP and world > 1,
                               use_cpu_initialization=True, hidden_dropout=0.0, attention_dropout=0.0,
                               bias_dropout_fusion=False, gradient_accumulation_fusion=False,
                               masked_softmax_fusion=False, persist_layer_norm=False)
    return (GPTWithLabels if LABELS else GPTModel)(config, get_gpt_layer_local_spec(), vocab_size=VOCAB,
                                                   max_sequence_length=SEQ)


def spec():
    return _model(1)


def impl(rank, world):
    return _model(world)


def inputs(rank, world):
    torch.manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ))
    positions = torch.arange(SEQ).unsqueeze(0).expand(BATCH, SEQ).contiguous()
    causal = torch.triu(torch.ones(1, 1, SEQ, SEQ, dtype=torch.bool), diagonal=1)
    if LABELS:
        return ids, positions, causal, torch.randint(0, VOCAB, (BATCH, SEQ))
    return ids, positions, causal


def relation(world, backward):
    names = ["input_ids", "position_ids", "attention_mask"] + (["labels"] if LABELS else [])
    rel = {"inputs": gm.input_relation(lambda: _model(world), world, names)}
    if LABELS:  # every label is a token of the vocabulary: what the TP=1 program's masking relies on
        rel["ranges"] = {"labels": f"[0, {VOCAB})"}
    return rel


after_backward = gm.finalize_grads  # Megatron's gradient step: sums sequence-parallel LayerNorm gradients
