"""A GPT language model with Megatron-style tensor parallelism, vocabulary-parallel at both ends.

Token ids -> vocab-parallel embedding -> the gpt-tp blocks (``GG_LAYERS``) -> final LayerNorm -> a
vocab-parallel (column-parallel) LM head -> Megatron's vocab-parallel cross-entropy -> the mean loss.

Rank r owns the vocabulary rows [r*V/W, (r+1)*V/W) of the embedding and of the LM head, as Megatron's
``VocabParallelEmbedding`` and ``_VocabParallelCrossEntropy`` write it: out-of-shard ids are masked
(``lt | ge``), shifted and zeroed, the partial lookups and the predicted logits are summed across ranks,
the logits' max is all-reduced with ``max`` and the softmax denominator with ``sum``; the backward is the
hand-written one (softmax minus the one-hot of the target on the rank that owns it).

``GG_VOCAB_BUG`` plants a bug (graphguard must not certify it): ``offset`` -- the embedding takes its
vocabulary range from the wrong rank (r + 1); ``mask`` -- the embedding does not zero the rows of
out-of-shard ids; ``target-mask`` -- the cross-entropy does not zero the predicted logit of targets other
ranks own; ``backward-mask`` -- its backward subtracts the one-hot on every rank, owner or not.

``GG_VOCAB_MASK=masked_fill`` applies the masks with ``masked_fill`` (ids shifted and zeroed, embedding rows
zeroed through ``mask.unsqueeze(-1)``, predicted logits zeroed) instead of Megatron's ``x[mask] = 0``.

The sequential model is plain torch: ``nn.Embedding``, the same blocks, and the same cross-entropy maths
on the full logits (a max-shifted log-sum-exp minus the target's logit, gathered) with the same
softmax-minus-one-hot backward -- what Megatron computes with one rank. (``F.cross_entropy`` computes
``log_softmax`` and ``nll_loss``, tensors no rank of the parallel program ever holds, so it cannot be
related to it operator by operator.)
"""
import importlib.util
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

_here = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("gpt_tp_model", _here.parent / "gpt-tp" / "model.py")
base = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = base  # TorchDynamo inlines the blocks' code by module name
_spec.loader.exec_module(base)

HIDDEN, SEQ, BATCH, LAYERS = base.HIDDEN, base.SEQ, base.BATCH, base.LAYERS
VOCAB = 64
BUG = os.environ.get("GG_VOCAB_BUG", "")
# how out-of-shard entries are masked: "index_put" (Megatron: x[mask] = 0), "masked_fill" (x.masked_fill(mask, 0),
# as other versions and vLLM's VocabParallelEmbedding write it) or "where" (torch.where(mask, 0, x))
MASK_FORM = os.environ.get("GG_VOCAB_MASK", "index_put")
_F, _G = base._F, base._G


class VocabParallelEmbedding(torch.nn.Module):
    """Megatron's ``VocabParallelEmbedding``: rank r holds rows [start, end) of the table."""

    def __init__(self, rank, world):
        super().__init__()
        self.world = world
        r = (rank + 1) % world if BUG == "offset" else rank
        self.start, self.end = r * VOCAB // world, (r + 1) * VOCAB // world
        self.weight = torch.nn.Parameter(torch.randn(self.end - self.start, HIDDEN))

    def forward(self, ids):
        mask = (ids < self.start) | (ids >= self.end)
        if MASK_FORM == "masked_fill":
            out = torch.nn.functional.embedding((ids - self.start).masked_fill(mask, 0), self.weight)
            if BUG != "mask":
                out = out.masked_fill(mask.unsqueeze(-1), 0.0)
            return _G.apply(out)
        if MASK_FORM == "where":
            out = torch.nn.functional.embedding(torch.where(mask, 0, ids - self.start), self.weight)
            if BUG != "mask":
                out = torch.where(mask.unsqueeze(-1), 0.0, out)
            return _G.apply(out)
        local = ids.clone() - self.start
        local[mask] = 0
        out = torch.nn.functional.embedding(local, self.weight)
        if BUG != "mask":
            out[mask, :] = 0.0
        return _G.apply(out)


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Megatron's ``_VocabParallelCrossEntropy`` on [tokens, V/W] logits and [tokens] targets."""

    @staticmethod
    def forward(ctx, logits, target, start, end):
        logits_max = funcol.all_reduce(torch.max(logits, dim=-1)[0], "max", dist.group.WORLD)
        logits = logits - logits_max.unsqueeze(dim=-1)
        target_mask = (target < start) | (target >= end)
        if MASK_FORM == "masked_fill":
            masked_target = (target - start).masked_fill(target_mask, 0)
        elif MASK_FORM == "where":
            masked_target = torch.where(target_mask, 0, target - start)
        else:
            masked_target = target.clone() - start
            masked_target[target_mask] = 0
        arange_1d = torch.arange(start=0, end=logits.size()[0], device=logits.device)
        predicted_logits = logits[arange_1d, masked_target]
        if BUG != "target-mask":
            if MASK_FORM == "masked_fill":
                predicted_logits = predicted_logits.masked_fill(target_mask, 0.0)
            elif MASK_FORM == "where":
                predicted_logits = torch.where(target_mask, 0.0, predicted_logits)
            else:
                predicted_logits[target_mask] = 0.0
        predicted_logits = funcol.all_reduce(predicted_logits, "sum", dist.group.WORLD)
        exp_logits = torch.exp(logits)
        sum_exp_logits = funcol.all_reduce(exp_logits.sum(dim=-1), "sum", dist.group.WORLD)
        loss = torch.log(sum_exp_logits) - predicted_logits
        softmax = exp_logits / sum_exp_logits.unsqueeze(dim=-1)
        ctx.save_for_backward(softmax, target_mask, masked_target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target_mask, masked_target = ctx.saved_tensors
        grad_input = softmax.clone()
        arange_1d = torch.arange(start=0, end=grad_input.size()[0], device=grad_input.device)
        softmax_update = 1.0 - target_mask.float() if BUG != "backward-mask" else 1.0
        grad_input[arange_1d, masked_target] -= softmax_update
        grad_input = grad_input * grad_output.unsqueeze(dim=-1)
        return grad_input, None, None, None


class _CrossEntropy(torch.autograd.Function):
    """The same maths on the full logits (one rank): the sequential specification."""

    @staticmethod
    def forward(ctx, logits, target):
        logits = logits - torch.amax(logits, dim=-1).unsqueeze(dim=-1)
        predicted_logits = torch.gather(logits, -1, target.unsqueeze(-1)).squeeze(-1)
        exp_logits = torch.exp(logits)
        sum_exp_logits = exp_logits.sum(dim=-1)
        loss = torch.log(sum_exp_logits) - predicted_logits
        softmax = exp_logits / sum_exp_logits.unsqueeze(dim=-1)
        ctx.save_for_backward(softmax, target)
        return loss

    @staticmethod
    def backward(ctx, grad_output):
        softmax, target = ctx.saved_tensors
        minus_one = torch.full((target.numel(), 1), -1.0, dtype=softmax.dtype)
        grad_input = torch.scatter_add(softmax, -1, target.unsqueeze(-1), minus_one)  # softmax - one_hot(target)
        return grad_input * grad_output.unsqueeze(dim=-1), None


class GPTLM(torch.nn.Module):
    def __init__(self, rank=0, world=1):
        super().__init__()
        self.world = world
        self.embed = VocabParallelEmbedding(rank, world) if world > 1 else torch.nn.Embedding(VOCAB, HIDDEN)
        self.blocks = torch.nn.ModuleList(base.Block(world) for _ in range(LAYERS))
        self.ln_f = torch.nn.LayerNorm(HIDDEN)
        self.head = torch.nn.Linear(HIDDEN, VOCAB // world, bias=False)  # column-parallel: a vocab shard
        self.start, self.end = rank * VOCAB // world, (rank + 1) * VOCAB // world

    def forward(self, ids, targets):
        x = self.embed(ids)
        for blk in self.blocks:
            x = blk(x)
        h = self.ln_f(x)
        if self.world > 1:
            h = _F.apply(h)
        logits = self.head(h).view(-1, VOCAB // self.world)
        if self.world > 1:
            loss = _VocabParallelCrossEntropy.apply(logits, targets.view(-1), self.start, self.end)
        else:
            loss = _CrossEntropy.apply(logits, targets.view(-1))
        return loss.mean()


def spec():
    return GPTLM()


def impl(rank, world):
    return GPTLM(rank, world)


def inputs(rank, world):
    g = torch.Generator().manual_seed(0)
    return (torch.randint(0, VOCAB, (BATCH, SEQ), generator=g), torch.randint(0, VOCAB, (BATCH, SEQ), generator=g))


def relation(world, backward):
    rel = base.relation(world, backward)
    rep = lambda name: [f"{name}@{r}" for r in range(world)]  # noqa: E731
    inp = rel["inputs"]
    del inp["x"]
    inp["ids"], inp["targets"] = rep("ids"), rep("targets")
    for p in ("ln_f.weight", "ln_f.bias"):
        inp[p] = rep(p)
    inp["embed.weight"] = base._cat("embed.weight", world, 0)
    inp["head.weight"] = base._cat("head.weight", world, 0)
    return rel


def expect(world, backward):
    exp = {"out0": "out0@0"}
    if backward:
        exp["grad.embed.weight"] = base._cat("grad.embed.weight", world, 0)
        exp["grad.head.weight"] = base._cat("grad.head.weight", world, 0)
    return exp
