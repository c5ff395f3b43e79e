"""The memo's key holds every fact that can decide a value the result depends on (graphguard/engine/memo.py's
invariant), tested by construction: two stacked layers computed alike except for one fact of a kind the search
reads -- an index tensor's proven constant value, a structural constant's value, an attribute on the chain
that computes a tensor the result names, a constant index chain -- must get the verdict and R_o of a run
without memo lookups; where the layers are alike the second reuses the first's results.

The first kind is the case that once certified a wrong program: layer 2's mask written with ``value=0``
(each rank computes B, not A) took layer 1's ``where`` result, because the mask was recorded by shape alone.
"""
from __future__ import annotations

import pytest

import graphguard
from graphguard.engine.memo import Memo
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.relation import parse_relation_text


def _mask_where(s, d, rel, l, wrong):
    """O = where(full(True), A, B); each rank's mask: cast(scatter(zeros, topk(X).indices, value=w)) -- all
    True for w = 1 (a constant only the lemmas see), all False for w = 0 (wrong)."""
    s.input(f"A{l}", [4, 4]), s.input(f"B{l}", [4, 4]), s.input(f"X{l}", [1, 4])
    s.op("aten.full", [], f"M{l}", size=[1, 4], fill_value=1, dtype="bool")
    s.op("aten.where.self", [f"M{l}", f"A{l}", f"B{l}"], f"O{l}")
    rel.append(f"A{l}: concat(A{l}@0, A{l}@1, dim=0)\n  B{l}: concat(B{l}@0, B{l}@1, dim=0)\n  X{l}: [X{l}@0, X{l}@1]")
    for r in range(2):
        d.input(f"A{l}@{r}", [2, 4]), d.input(f"B{l}@{r}", [2, 4]), d.input(f"X{l}@{r}", [1, 4])
        d.op("aten.topk", [f"X{l}@{r}"], [f"tv{l}@{r}", f"ti{l}@{r}"], k=4, dim=-1, largest=True, sorted=True)
        d.op("aten.full", [], f"z{l}@{r}", size=[1, 4], fill_value=0.0, dtype="float32")
        d.op("aten.scatter.value", [f"z{l}@{r}", f"ti{l}@{r}"], f"sc{l}@{r}", dim=1, value=0.0 if wrong else 1.0)
        d.op("aten._to_copy", [f"sc{l}@{r}"], f"m{l}@{r}", dtype="bool")
        d.op("aten.where.self", [f"m{l}@{r}", f"A{l}@{r}", f"B{l}@{r}"], f"O{l}@{r}")


def _scaled(s, d, rel, l, wrong):
    """O = relu(A * full(2)); the ranks multiply by a full of 3 (wrong) or 2."""
    s.input(f"A{l}", [4, 4])
    s.op("aten.full", [], f"c{l}", size=[4, 4], fill_value=2.0, dtype="float32")
    s.op("aten.mul.Tensor", [f"A{l}", f"c{l}"], f"P{l}")
    s.op("aten.relu", [f"P{l}"], f"O{l}")
    rel.append(f"A{l}: concat(A{l}@0, A{l}@1, dim=0)")
    for r in range(2):
        d.input(f"A{l}@{r}", [2, 4])
        d.op("aten.full", [], f"c{l}@{r}", size=[2, 4], fill_value=3.0 if wrong else 2.0, dtype="float32")
        d.op("aten.mul.Tensor", [f"A{l}@{r}", f"c{l}@{r}"], f"P{l}@{r}")
        d.op("aten.relu", [f"P{l}@{r}"], f"O{l}@{r}")


def _transposed(s, d, rel, l, wrong):
    """O = relu(permute(A)) of row-sharded A [4, 4]: each rank transposes its [2, 4] rows, multiplies them by a
    number (1, or 2: wrong) and takes relu; O = concat(O@0, O@1, dim=1)."""
    s.input(f"A{l}", [4, 4])
    s.op("core.permute", [f"A{l}"], f"P{l}", dims=[1, 0])
    s.op("aten.relu", [f"P{l}"], f"O{l}")
    rel.append(f"A{l}: concat(A{l}@0, A{l}@1, dim=0)")
    for r in range(2):
        d.input(f"A{l}@{r}", [2, 4])
        d.op("core.permute", [f"A{l}@{r}"], f"P{l}@{r}", dims=[1, 0])
        d.op("aten.mul.Scalar", [f"P{l}@{r}"], f"Q{l}@{r}", other=2.0 if wrong else 1.0)
        d.op("aten.relu", [f"Q{l}@{r}"], f"O{l}@{r}")


def _selected(s, d, rel, l, wrong):
    """O = relu(index_select(A, 1, arange(4))) of row-sharded A; the ranks select at flip(arange(4)) (wrong) or at
    arange(4) through an identity of it."""
    s.input(f"A{l}", [4, 4])
    s.op("aten.arange.start", [], f"i{l}", start=0, end=4)
    s.op("aten.index_select", [f"A{l}", f"i{l}"], f"P{l}", dim=1)
    s.op("aten.relu", [f"P{l}"], f"O{l}")
    rel.append(f"A{l}: concat(A{l}@0, A{l}@1, dim=0)")
    for r in range(2):
        d.input(f"A{l}@{r}", [2, 4])
        d.op("aten.arange.start", [], f"a{l}@{r}", start=0, end=4)
        if wrong:
            d.op("aten.flip", [f"a{l}@{r}"], f"i{l}@{r}", dims=[0])
        else:
            d.op("core.identity", [f"a{l}@{r}"], f"i{l}@{r}")
        d.op("aten.index_select", [f"A{l}@{r}", f"i{l}@{r}"], f"P{l}@{r}", dim=1)
        d.op("aten.relu", [f"P{l}@{r}"], f"O{l}@{r}")


KINDS = {"index-constant value": _mask_where, "structural constant value": _scaled,
         "attribute on the chain": _transposed, "constant index chain": _selected}


def _layers(plugins, kind, wrong: tuple[bool, ...], memo: bool, monkeypatch, check: str = "off"):
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    rel = []
    for l, w in enumerate(wrong):
        KINDS[kind](s, d, rel, l, w)
        s.output(f"O{l}")
        d.output(f"O{l}@0", f"O{l}@1")
    r = parse_relation_text("inputs:\n  " + "\n  ".join(rel) + "\n", "rel", plugins.registry)
    cx = r.constraints()
    with monkeypatch.context() as m:
        if not memo:
            m.setattr(Memo, "lookup", lambda self, problem, outputs: None)
        return graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), r, plugins=plugins,
                                 check=check) if _has_check() else \
            graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), r, plugins=plugins)


def _has_check() -> bool:
    import inspect
    return "check" in inspect.signature(graphguard.verify).parameters


@pytest.mark.parametrize("kind", sorted(KINDS))
@pytest.mark.parametrize("wrong", [(False, True), (True, False), (False, False)], ids=["2nd-wrong", "1st-wrong",
                                                                                   "alike"])
def test_memo_decides_as_a_fresh_search(plugins, monkeypatch, kind, wrong):
    """The engine alone (no independent checker): memo on and off agree on verdict and R_o."""
    on = _layers(plugins, kind, wrong, True, monkeypatch)
    off = _layers(plugins, kind, wrong, False, monkeypatch)
    assert on.verdict == off.verdict, (on.render(), off.render())
    assert on.r_o_lines() == off.r_o_lines()
    assert on.verdict == ("refines" if not any(wrong) else "does-not-refine"), on.render()
    if not any(wrong):  # (alike: the second layer's operators took the first's results)
        assert on.stats["reused_results"] > 0, on.render()
