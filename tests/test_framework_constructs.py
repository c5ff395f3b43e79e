"""Constructs found in captures of real framework code (Megatron-LM, vLLM, HF), each captured from a small
PyTorch module on the fake process group and verified end to end: one correct form that must prove and one
broken form that must not.

- the embedding written ``W[ids]`` (``aten.index.Tensor``) against Megatron's vocabulary-parallel masked
  lookups, all-reduced (the same for ids in [0, V): a relation's ``ranges:``);
- a half-precision (fp16 / bf16) model whose partial sums start from a zero buffer of the model's dtype;
- a ``mean`` loss per micro-batch, the two averaged;
- an output written through a view of an ``empty_like`` buffer passed as ``out=``;
- functionalization chains: in-place writes into slices of a clone (``slice_scatter``) and ``split`` halves
  processed apart.
"""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import graphguard
import graphguard.torch as ggt

V, H, N, W = 8, 4, 6, 2  # vocabulary, hidden, tokens, ranks


def _rep(name, world=W):
    return [f"{name}@{r}" for r in range(world)]


def _cat(name, dim, world=W):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def _verify(spec, impl, spec_inputs, rank_inputs, relation, expect, world=W, backward=False, replay=True):
    s = ggt.capture(lambda r: spec, lambda r: spec_inputs, world_size=1, backward=backward)
    d = ggt.capture(impl, rank_inputs, world_size=world, backward=backward, distributed=True)
    return graphguard.verify(s.graph(), d.graph(), {"inputs": relation, "expect": expect}, replay=replay)


# -- the vocabulary-parallel embedding as Megatron-LM and vLLM write it --------------------------------------

class Embedding(torch.nn.Module):
    def __init__(self, rows):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(rows, H))

    def forward(self, ids):
        return self.weight[ids]


class VocabParallelEmbedding(Embedding):
    """Megatron's ``VocabParallelEmbedding.forward`` with the lookup written ``weight[ids]``."""
    def __init__(self, rank, lower_slip=0):
        super().__init__(V // W)
        self.start, self.end, self.slip = rank * (V // W), (rank + 1) * (V // W), lower_slip

    def forward(self, ids):
        mask = (ids < self.start + self.slip) | (ids >= self.end)
        masked = ids.clone() - self.start
        masked[mask] = 0
        out = self.weight[masked]
        out[mask, :] = 0.0
        return funcol.all_reduce(out, "sum", dist.group.WORLD)


def _ids():
    return (torch.tensor([0, 3, 4, 7, 5, 1]),)


@pytest.mark.parametrize("ranges,slip,ok", [
    ({"ids": "[0, 8)"}, 0, True),    # token ids of a vocabulary of 8
    (None, 0, False),                # W[-1] is row 7, where every rank's mask gives a zero row
    ({"ids": "[-1, 8)"}, 0, False),  # a range that allows -1 says the same
    ({"ids": "[0, 8)"}, 1, False),   # rank 1's lower bound one too high: the token of id 4 gets a zero row
])
def test_vocab_parallel_embedding_written_as_index(ranges, slip, ok):
    """``W[ids]`` against Megatron's masked per-rank lookups, all-reduced: the same only for ids in [0, V),
    which the relation's ``ranges:`` states (lemma 1630 makes the index an embedding there)."""
    rel = {"weight": _cat("weight", 0), "ids": _rep("ids")}
    s = ggt.capture(lambda r: Embedding(V), lambda r: _ids())
    d = ggt.capture(lambda rank: VocabParallelEmbedding(rank, slip * rank), lambda rank: _ids(), world_size=W)
    doc = {"inputs": rel, "expect": {"out0": "out0@0"}, **({"ranges": ranges} if ranges else {})}
    r = graphguard.verify(s.graph(), d.graph(), doc, replay=ok)
    assert r.verdict == ("refines" if ok else "does-not-refine"), r.render()
    if not ok:
        assert r.failure.op == "aten.index.Tensor"


# -- half precision: partial sums from a zero buffer of the model's dtype ------------------------------------

class HalfMLP(torch.nn.Module):
    def __init__(self, world, dtype, skip=False):
        super().__init__()
        self.world, self.skip = world, skip
        self.fc1 = torch.nn.Linear(H, 8 // world, dtype=dtype)
        self.fc2 = torch.nn.Linear(8 // world, H, bias=False, dtype=dtype)

    def forward(self, x):
        acc = x.new_zeros(x.shape)  # a zero buffer of the model's dtype
        acc = acc + self.fc2(torch.relu(self.fc1(x)))
        if self.world > 1 and not self.skip:
            acc = funcol.all_reduce(acc, "sum", dist.group.WORLD)
        return acc


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("skip", [False, True])
def test_half_precision_model_with_zero_buffer(dtype, skip):
    """Proving: a tensor-parallel MLP in fp16 / bf16 accumulating into ``new_zeros``. Must not prove: the
    all-reduce skipped."""
    x = (torch.randn(3, H, dtype=dtype),)
    rel = {"x": _rep("x"), "fc1.weight": _cat("fc1.weight", 0), "fc1.bias": _cat("fc1.bias", 0),
           "fc2.weight": _cat("fc2.weight", 1)}
    r = _verify(HalfMLP(1, dtype), lambda rank: HalfMLP(W, dtype, skip), x, lambda rank: x, rel, {"out0": "out0@0"})
    assert r.verdict == ("does-not-refine" if skip else "refines"), r.render()


# -- a mean loss per micro-batch ------------------------------------------------------------------------------

class Loss(torch.nn.Module):
    def __init__(self, micro=1, scale=True):
        super().__init__()
        self.micro, self.scale = micro, scale
        self.fc = torch.nn.Linear(H, 2)

    def forward(self, x, y):
        if self.micro == 1:
            return torch.nn.functional.mse_loss(self.fc(x), y)
        losses = [torch.nn.functional.mse_loss(self.fc(a), b) for a, b in zip(x.chunk(self.micro), y.chunk(self.micro))]
        total = sum(losses[1:], losses[0])
        return total / self.micro if self.scale else total


@pytest.mark.parametrize("scale", [True, False])
def test_mean_loss_per_micro_batch(scale):
    """Proving: the mean loss of a batch as the average of two micro-batches' mean losses, gradients included.
    Must not prove: the micro-batch losses summed, not averaged."""
    xy = (torch.randn(4, H), torch.randn(4, 2))
    rel = {"x": "x@0", "y": "y@0", "fc.weight": "fc.weight@0", "fc.bias": "fc.bias@0",
           "tangent.out0": "tangent.out0@0"}
    exp = {"out0": "out0@0", "grad.fc.weight": "grad.fc.weight@0", "grad.fc.bias": "grad.fc.bias@0"}
    r = _verify(Loss(), lambda rank: Loss(2, scale), xy, lambda rank: xy, rel, exp, world=1, backward=True)
    assert r.verdict == ("refines" if scale else "does-not-refine"), r.render()


# -- an output written through a view of an empty_like buffer, passed as out= -------------------------------

class Heads(torch.nn.Module):
    def __init__(self, write_all=True):
        super().__init__()
        self.write_all = write_all

    def forward(self, q, k):
        out = torch.empty_like(q)
        torch.matmul(q[:1], k[:1].transpose(-1, -2) @ q[:1], out=out[:1])
        if self.write_all:
            torch.matmul(q[1:], k[1:].transpose(-1, -2) @ q[1:], out=out[1:])
        return out


@pytest.mark.parametrize("write_all", [True, False])
def test_output_written_into_views_of_an_empty_buffer(write_all):
    """Proving: per-head results written with ``out=`` into views of one ``empty_like`` buffer. Must not
    prove: the second head's view never written (its values are whatever the buffer held)."""
    qk = (torch.randn(2, 3, 3), torch.randn(2, 3, 3))
    spec = type("Spec", (torch.nn.Module,), {"forward": lambda self, q, k: q @ (k.transpose(-1, -2) @ q)})()
    r = _verify(spec, lambda rank: Heads(write_all), qk, lambda rank: qk, {"q": "q@0", "k": "k@0"},
                {"out0": "out0@0"}, world=1, replay=write_all)
    assert r.verdict == ("refines" if write_all else "does-not-refine"), r.render()


# -- functionalization chains: writes into slices of a clone, split halves -----------------------------------

class Halves(torch.nn.Module):
    def __init__(self, swapped=False):
        super().__init__()
        self.swapped = swapped

    def forward(self, x):
        y = x.clone()
        a, b = torch.split(x, [2, 2], dim=-1)
        y[..., :2] = torch.tanh(b if self.swapped else a)  # slice_scatter of the clone
        y[..., 2:] = torch.relu(b)
        return y * 2


@pytest.mark.parametrize("swapped", [False, True])
def test_slice_scatter_and_split_chains(swapped):
    """Proving: tanh and relu of the two halves written into a clone's slices, the sequential program written
    with ``cat``. Must not prove: the first slice written from the wrong half."""
    x = (torch.randn(3, 4),)
    spec = type("Spec", (torch.nn.Module,), {
        "forward": lambda self, x: torch.cat([torch.tanh(x[..., :2]), torch.relu(x[..., 2:])], -1) * 2})()
    r = _verify(spec, lambda rank: Halves(swapped), x, lambda rank: x, {"x": "x@0"}, {"out0": "out0@0"},
                world=1, backward=False)
    assert r.verdict == ("does-not-refine" if swapped else "refines"), r.render()


class HalfWritten(torch.nn.Module):
    def forward(self, x):
        b, c = torch.empty_like(x), torch.empty_like(x)
        b[:, :2] = torch.tanh(x[:, :2])
        c[:, 2:] = torch.tanh(x[:, 2:])
        return b + c  # reads the unwritten half of each buffer: whatever memory held


def test_reading_unwritten_parts_of_empty_buffers_is_not_certified():
    """Must not prove: two half-written ``empty_like`` buffers added. (An empty buffer once read as zeros made
    this tanh(x); the PyTorch frontend now fills it with NaN, which poisons what reads it.)"""
    x = (torch.randn(3, 4),)
    spec = type("Spec", (torch.nn.Module,), {"forward": lambda self, x: torch.tanh(x)})()
    r = _verify(spec, lambda rank: HalfWritten(), x, lambda rank: x, {"x": "x@0"}, {"out0": "out0@0"}, world=1,
                replay=False)
    assert r.verdict == "does-not-refine", r.render()


@pytest.mark.parametrize("cond,ok", [
    ('rank(?w) == 2 and vmin(?i) >= 0 and vend(?i) <= size(?w, 0)', True),
    ('rank(?w) == 2 and vend(?i) <= size(?w, 0)', False),  # negative ids: index reads from the end
])
def test_index_as_embedding_needs_the_ids_range(plugins, cond, ok):
    """Lemma 1630's condition and a weaker one through the fuzzer (values drawn in the stated range)."""
    from graphguard.engine.fuzz import fuzz_rule
    from graphguard.engine.lemma import build_rules
    from graphguard.ir.lemma import L
    rule = ("aten.index.Tensor(?w, ?i, absent=[])"
            " => aten.embedding(?w, ?i, padding_idx=-1, scale_grad_by_freq=false, sparse=false)")
    (r,) = build_rules(L(9001, "index-as-embedding", rule, cond + ' and dtype(?i) == "int64"'), plugins.registry)
    assert fuzz_rule(r, plugins.registry).ok == ok


class KeyStates(torch.nn.Module):
    """DeepSeek-V3's key states: a ``new_empty`` buffer written through two slices (``copy_``), heads split
    over the ranks; its intermediate (one slice written, the rest the buffer's) is related by its NaN fill."""
    def __init__(self, heads, write_all=True):
        super().__init__()
        self.proj = torch.nn.Linear(4, heads * 3, bias=False)
        self.heads, self.write_all = heads, write_all

    def forward(self, x, rot):
        kv = self.proj(x).view(x.shape[0], self.heads, 3)
        k = kv.new_empty(x.shape[0], self.heads, 5)
        k[..., :3].copy_(kv)
        if self.write_all:
            k[..., 3:].copy_(rot.expand(-1, self.heads, -1))
        else:  # the last column never written
            k[..., 3:4].copy_(rot[..., :1].expand(-1, self.heads, -1))
        return k * 2


@pytest.mark.parametrize("write_all", [True, False])
def test_buffer_of_sharded_heads_written_through_slices(write_all):
    xr = (torch.randn(3, 4), torch.randn(3, 1, 2))
    s = ggt.capture(lambda r: KeyStates(4), lambda r: xr, backward=True)
    d = ggt.capture(lambda r: KeyStates(2, write_all), lambda r: xr, world_size=W, backward=True)
    rel = {"inputs": {"x": _rep("x"), "rot": _rep("rot"), "proj.weight": _cat("proj.weight", 0),
                      "tangent.out0": _cat("tangent.out0", 1)},
           "expect": {"out0": _cat("out0", 1)}}
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == ("refines" if write_all else "does-not-refine"), r.render()
