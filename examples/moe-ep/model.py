"""A mixture-of-experts block with expert parallelism (all-to-all dispatch and combine) and an auxiliary
load-balancing loss; ``MOE_PARALLEL=tp`` runs the same block with tensor-parallel experts instead.

Router: linear -> softmax -> top-k; the top-k choices become a 0/1 mask [tokens, E] and the combine weights
are ``probs * mask``. Dispatch is dense (no capacity, no dropped tokens): expert e sees every token, masked,
``dispatched[e] = mask[:, e] * x``; the output is ``sum_e gates[:, e] * expert_e(dispatched[e])``.

Auxiliary loss (Switch / GShard, as Megatron computes it): ``aux = E / (T^2 k) * sum_e P_e * N_e`` with P_e
the summed router probability and N_e the number of tokens routed to expert e (T tokens, top-k).

``ep`` (default; DeepSpeed / torchtitan layout): tokens are data-sharded, experts are sharded (EXPERTS /
world per rank). An all-to-all sends each rank's slice for expert group r to rank r, the local experts run
on the tokens of every rank, a second all-to-all brings the outputs back. Each rank sums the probabilities
of its own tokens and uses the all-reduced token counts, so the ranks' aux losses add up to the global one.

``tp`` (Megatron's all-gather dispatcher with sequence parallelism): tokens are sequence-sharded and
all-gathered, every rank routes all of them and runs every expert with a 1/world slice of its FFN (w1 by
columns, w2 by rows); a reduce-scatter sums the partial outputs back onto the sequence shards. The router
and the aux loss are replicated, and the all-gather's backward (a reduce-scatter) sums the ranks'
gradients -- so each rank's aux loss must be divided by world (paper §6 bug 2); ``AUX_SCALE=0`` drops it.

``ag`` (Megatron's all-gather dispatcher with expert parallelism): tokens are sequence-sharded and
all-gathered, every rank routes all of them and runs its EXPERTS / world whole experts; a reduce-scatter
sums the ranks' partial outputs back onto the sequence shards. The aux loss is replicated, as with ``tp``.

``MOE_DISPATCH=sparse`` (dropless, as HF Mixtral and Megatron's gather dispatch do; ``ag``/``tp`` and the
sequential model): each expert runs on the tokens routed to it only -- ``torch.where(idx == e)`` (a
``nonzero``, whose row count the data decides), ``x[tok]``, the expert, times the token's top-k weight,
``index_add`` back into the output.

The sequential model is the same block on one rank: no collective, every expert local.
"""
import os

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

HIDDEN, FFN, EXPERTS, TOKENS, TOPK = 8, 16, 4, 8, 2
PARALLEL = os.environ.get("MOE_PARALLEL", "ep")
DISPATCH = os.environ.get("MOE_DISPATCH", "dense")


class Expert(torch.nn.Module):
    def __init__(self, ffn=FFN):
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(HIDDEN, ffn) / HIDDEN ** 0.5)
        self.w2 = torch.nn.Parameter(torch.randn(ffn, HIDDEN) / FFN ** 0.5)

    def forward(self, x):
        return torch.relu(x @ self.w1) @ self.w2


class MoE(torch.nn.Module):
    def __init__(self, world=1, parallel="ep", aux_scale=True, dispatch="dense", rank=0):
        super().__init__()
        self.world, self.parallel, self.aux_scale, self.dispatch, self.rank = world, parallel, aux_scale, dispatch, rank
        if dispatch == "sparse" and world > 1 and parallel == "ep":
            raise ValueError("MOE_DISPATCH=sparse runs with MOE_PARALLEL=ag or tp (ep's all-to-all needs dense)")
        self.router = torch.nn.Linear(HIDDEN, EXPERTS, bias=False)
        if parallel in ("ep", "ag"):
            self.experts = torch.nn.ModuleList(Expert() for _ in range(EXPERTS // world))
        else:
            self.experts = torch.nn.ModuleList(Expert(FFN // world) for _ in range(EXPERTS))

    def forward(self, x):  # x: [tokens of this rank, hidden]
        ep = self.world > 1 and self.parallel == "ep"
        tp = self.world > 1 and self.parallel in ("tp", "ag")  # all-gathered tokens, replicated routing
        if tp:
            x = funcol.all_gather_tensor_autograd(x, 0, dist.group.WORLD)     # [all tokens, H]
        t = x.shape[0]
        probs = torch.softmax(self.router(x), dim=-1)                          # [t, E]
        weights, idx = torch.topk(probs, TOPK, dim=-1)                         # [t, k]
        mask = torch.nn.functional.one_hot(idx, EXPERTS).sum(1).to(x.dtype)   # [t, E], 0/1
        if self.dispatch == "sparse":
            out = self._sparse(x, weights, idx)
        else:
            out = self._dense(x, probs * mask, mask, ep, t)
        if tp:
            out = funcol.reduce_scatter_tensor_autograd(out, "sum", 0, dist.group.WORLD)
        tokens_per_expert = mask.sum(0)
        if ep:
            tokens_per_expert = funcol.all_reduce(tokens_per_expert, "sum", dist.group.WORLD)
        total = t * self.world if ep else t
        aux = (probs.sum(0) * tokens_per_expert).sum() * (EXPERTS / (total * total * TOPK))
        if tp and self.aux_scale:
            aux = aux / self.world
        return out, aux

    def _sparse(self, x, weights, idx):
        """Dropless: each local expert on the tokens routed to it, added back at their rows."""
        first = self.rank * len(self.experts) if self.world > 1 and self.parallel == "ag" else 0
        out = torch.zeros_like(x)
        for j, expert in enumerate(self.experts):
            tok, slot = torch.where(idx == first + j)                         # nonzero: [n_e] each
            out = out.index_add(0, tok, expert(x[tok]) * weights[tok, slot, None])
        return out

    def _dense(self, x, gates, mask, ep, t):
        dispatched = mask.t().unsqueeze(-1) * x                                # [E, t, H]
        if ep:  # to the experts' owners, then [sender, local expert, t, H]: a local expert's chunk holds its tokens
            recv = funcol.all_to_all_single_autograd(dispatched, None, None, dist.group.WORLD)
            chunks = recv.reshape(self.world, len(self.experts), t, HIDDEN).chunk(len(self.experts), dim=1)
        else:
            chunks = dispatched.chunk(EXPERTS, dim=0)                          # [1, t, H] each
        outs = [e(c.reshape(-1, HIDDEN)).reshape(c.shape) for e, c in zip(self.experts, chunks)]
        if ep:  # and back: [owner, local expert, t, H] -> [E, t, H]
            expert_out = funcol.all_to_all_single_autograd(torch.cat(outs, dim=1), None, None, dist.group.WORLD)
            expert_out = expert_out.reshape(EXPERTS, t, HIDDEN)
        else:
            expert_out = torch.cat(outs, dim=0)                                # [E, t, H]
        return (gates.t().unsqueeze(-1) * expert_out).sum(0)                   # [t, H]


def spec():
    return MoE(1, dispatch=DISPATCH)


def impl(rank, world):
    return MoE(world, PARALLEL, aux_scale=os.environ.get("AUX_SCALE", "1") != "0", dispatch=DISPATCH, rank=rank)


def inputs(rank, world):
    return (torch.randn(TOKENS if rank is None else TOKENS // world, HIDDEN, requires_grad=True),)


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def _sum(name, world):
    return f"sum({', '.join(f'{name}@{r}' for r in range(world))})"


def relation(world, backward, parallel=PARALLEL):
    rel = {"x": _cat("x", world, 0), "router.weight": [f"router.weight@{r}" for r in range(world)]}
    local = EXPERTS // world
    for e in range(EXPERTS):
        if parallel in ("ep", "ag"):  # expert e lives on rank e // local
            rel.update({f"experts.{e}.{w}": f"experts.{e % local}.{w}@{e // local}" for w in ("w1", "w2")})
        else:  # every rank holds a slice of every expert
            rel.update({f"experts.{e}.w1": _cat(f"experts.{e}.w1", world, 1),
                        f"experts.{e}.w2": _cat(f"experts.{e}.w2", world, 0)})
    if backward:
        rel["tangent.out0"] = _cat("tangent.out0", world, 0)
        rel["tangent.out1"] = [f"tangent.out1@{r}" for r in range(world)]
    return {"inputs": rel}


def expect(world, backward):
    # Partial by design, so expected (and thereby allowed) as sums: each rank's aux loss is its share of the
    # global one (the training loop sums the ranks' losses through the backward), and the replicated router's
    # gradient is each rank's part from its tokens -- reduced outside the block: by data parallelism (ep),
    # by Megatron's finalize_model_grads for sequence-parallel parameters (ag, tp).
    exp = {"out0": _cat("out0", world, 0), "out1": _sum("out1", world)}
    if backward:
        exp.update({"grad.x": _cat("grad.x", world, 0), "grad.router.weight": _sum("grad.router.weight", world)})
    return exp
