"""Preconditions G_s already states (issue 41): an operator declaring ``OpDef.index_domain`` (embedding, gather,
index_select, scatter, index_add) is undefined unless its index lies in its table, so G_s's integer inputs that
reach such an index through entry-keeping ops (reshape, permute, concat) get that range as a fact -- carried like a
relation's ``ranges:`` and printed among the certificate's assumptions. Where a lemma's condition failed on a range
alone, the hint names ``ranges:``."""
from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import graphguard
import graphguard.torch as ggt
from graphguard.ir import scalar as S
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.values import implied_ranges
from graphguard.plugins import load_plugins

V, H, W = 8, 4, 2
IDS = (torch.tensor([0, 3, 4, 7, 5, 1]),)


def _rep(name, world=W):
    return [f"{name}@{r}" for r in range(world)]


def _cat(name, dim, world=W):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


class Lookup(torch.nn.Module):
    """The sequential lookup, spelt ``F.embedding`` (undefined outside [0, V)) or ``weight[ids]`` (defined
    for [-V, V): -1 is the last row)."""
    def __init__(self, rows, spelling="embedding"):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.randn(rows, H))
        self.spelling = spelling

    def forward(self, ids):
        if self.spelling == "embedding":
            return torch.nn.functional.embedding(ids, self.weight)
        if self.spelling == "index_select":
            return self.weight.index_select(0, ids)
        return self.weight[ids]


class MaskedLookup(Lookup):
    """Megatron's vocab-parallel lookup: ids outside the rank's rows masked, the rows looked up (``spelling``),
    masked rows zeroed, all-reduced. ``slip`` moves rank 1's lower bound (a bug)."""
    def __init__(self, rank, spelling, slip=0):
        super().__init__(V // W, spelling)
        self.start, self.end, self.slip = rank * (V // W), (rank + 1) * (V // W), slip * rank

    def forward(self, ids):
        mask = (ids < self.start + self.slip) | (ids >= self.end)
        masked = ids.clone() - self.start
        masked[mask] = 0
        out = super().forward(masked)
        out[mask, :] = 0.0
        return funcol.all_reduce(out, "sum", dist.group.WORLD)


def _verify(spec_spelling, impl_spelling, slip=0, ranges=None, ids=IDS):
    s = ggt.capture(lambda r: Lookup(V, spec_spelling), lambda r: ids)
    d = ggt.capture(lambda rank: MaskedLookup(rank, impl_spelling, slip), lambda rank: ids, world_size=W)
    doc = {"inputs": {"weight": _cat("weight", 0), "ids": _rep("ids")}, "expect": {"out0": "out0@0"},
           **({"ranges": ranges} if ranges else {})}
    return graphguard.verify(s.graph(), d.graph(), doc)


@pytest.mark.parametrize("impl", ["embedding", "index"])
def test_lookup_needs_no_stated_range(impl, spec="embedding"):
    """G_s's own lookup is undefined outside [0, V): the ranks' masked lookups equal it with no ``ranges:``,
    and the certificate names the range it rests on and the operator that implies it."""
    r = _verify(spec, impl)
    assert r.verdict == "refines", r.render()
    assert any("ids in [0, 8)" in a and f"aten.{spec}" in a for a in r.assumed), r.assumed
    assert "ids in [0, 8)" in r.render()


def test_stated_range_narrowed():
    """A stated range wider than the lookup allows is narrowed to the table (and the narrowing noted)."""
    r = _verify("embedding", "index", ranges={"ids": "[-1, 8)"})
    assert r.verdict == "refines", r.render()
    assert any("ids in [0, 8)" in a for a in r.assumed)


def test_stated_range_within_needs_no_note():
    r = _verify("embedding", "index", ranges={"ids": "[0, 8)"})
    assert r.verdict == "refines", r.render()
    assert not any("implied" in a for a in r.assumed)


def test_slipped_shard_still_fails():
    """Must not prove: rank 1's lower bound one too high leaves id 4 a zero row -- the implied range does not
    hide a wrong shard."""
    r = _verify("embedding", "index", slip=1)
    assert r.verdict == "does-not-refine", r.render()


def test_negative_index_spelling_implies_nothing():
    """Must not prove: ``weight[ids]`` is defined for -1 (the last row), where every rank's mask gives a zero row:
    no range is implied, and the hint names ``ranges:`` (a lemma wanted the ids in a range)."""
    r = _verify("index", "index")
    assert r.verdict == "does-not-refine"
    assert not r.assumed
    assert "ranges:" in r.failure.hint and "'ids'" in r.failure.hint, r.failure.hint


# -- implied_ranges on its own: through entry-keeping ops only ---------------------------------------------

def _graph(build):
    reg = load_plugins().registry
    b = GraphBuilder("g")
    build(b)
    return b.build(reg, S.Constraints()), reg


def test_implied_through_reshape_and_permute():
    def build(b):
        b.input("w", [8, 4])
        b.input("t", [2, 3], dtype="int64")
        b.op("core.permute", ["t"], ["tp"], dims=[1, 0])
        b.op("core.reshape", ["tp"], ["tf"], shape=[6])
        b.op("aten.embedding", ["w", "tf"], ["y"])
        b.output("y")
    g, reg = _graph(build)
    got = implied_ranges(g, reg)
    assert {k: v[:2] for k, v in got.items()} == {"t": (0, 8)}


def test_not_through_a_slice():
    """Must not derive: a slice keeps only some entries -- the others may hold anything."""
    def build(b):
        b.input("w", [8, 4])
        b.input("t", [6], dtype="int64")
        b.op("core.slice", ["t"], ["ts"], dim=0, start=0, end=3)
        b.op("aten.embedding", ["w", "ts"], ["y"])
        b.output("y")
    g, reg = _graph(build)
    assert implied_ranges(g, reg) == {}


def test_gather_dim_attribute():
    def build(b):
        b.input("x", [3, 5])
        b.input("t", [3, 1], dtype="int64")
        b.op("aten.gather", ["x", "t"], ["y"], dim=1)
        b.output("y")
    g, reg = _graph(build)
    assert {k: v[:2] for k, v in implied_ranges(g, reg).items()} == {"t": (0, 5)}
