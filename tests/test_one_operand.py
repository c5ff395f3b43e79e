"""A one-operand concat / sum / max (``torch.cat([x])``, a sum over a one-rank group) is its operand: the graph
lint turns such a node into ``core.identity`` (ir/graph.py), as the relation parser reads ``concat(x@0, dim=0)``
as ``x@0``. Once an e-graph emission error (concat is binary there) and a crash of the verifier fuzzer's
expert-parallel family; proving cases in G_s, G_d or both, and one that must not prove."""
from __future__ import annotations

import pytest

import graphguard
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.expr import to_text
from graphguard.ir.relation import parse_relation_text


def _both(s, d):  # each side: relu(cat([x]))
    s.input("X", [4, 3]), s.op("core.concat", ["X"], "C", dim=0), s.op("aten.relu", ["C"], "O")
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.op("core.concat", [f"X@{r}"], f"C@{r}", dim=0)
        d.op("aten.relu", [f"C@{r}"], f"O@{r}")


def _spec_only(s, d):
    s.input("X", [4, 3]), s.op("core.concat", ["X"], "C", dim=1), s.op("aten.relu", ["C"], "O")
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.op("aten.relu", [f"X@{r}"], f"O@{r}")


def _impl_only(s, d):
    s.input("X", [4, 3]), s.op("aten.relu", ["X"], "O")
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.op("core.concat", [f"X@{r}"], f"C@{r}", dim=0)
        d.op("aten.relu", [f"C@{r}"], f"O@{r}")


def _sum_of_one(s, d):  # a partial sum over a one-member group
    s.input("X", [4, 3]), s.op("aten.relu", ["X"], "O")
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.op("core.sum", [f"X@{r}"], f"C@{r}"), d.op("aten.relu", [f"C@{r}"], f"O@{r}")


def _max_of_one(s, d):
    s.input("X", [4, 3]), s.op("core.max", ["X"], "C"), s.op("aten.relu", ["C"], "O")
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.op("aten.relu", [f"X@{r}"], f"O@{r}")


def _drops_an_operand(s, d):  # must not prove: G_s joins X and Y, each rank joins its X with itself
    s.input("X", [4, 3]), s.input("Y", [4, 3]), s.op("core.concat", ["X", "Y"], "O", dim=1)
    for r in range(2):
        d.input(f"X@{r}", [2, 3]), d.input(f"Y@{r}", [2, 3]), d.op("core.concat", [f"X@{r}"], f"C@{r}", dim=1)
        d.op("core.concat", [f"C@{r}", f"C@{r}"], f"O@{r}", dim=1)


ROWS = "X: concat(X@0, X@1, dim=0)"
CASES = {"both": (_both, ROWS, True), "spec-only": (_spec_only, ROWS, True), "impl-only": (_impl_only, ROWS, True),
         "sum-of-one": (_sum_of_one, ROWS, True), "max-of-one": (_max_of_one, ROWS, True),
         "drops-an-operand": (_drops_an_operand, ROWS + "\n  Y: concat(Y@0, Y@1, dim=0)", False)}


@pytest.mark.parametrize("name", CASES)
def test_one_operand_variadic(plugins, name):
    build, rel, proves = CASES[name]
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    build(s, d)
    s.output("O"), d.output("O@0", "O@1")
    r = parse_relation_text("inputs:\n  " + rel + "\n", "rel", plugins.registry)
    cx = r.constraints()
    res = graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), r, plugins=plugins)
    assert res.verdict == ("refines" if proves else "does-not-refine"), res.failure
    if proves:
        assert [to_text(t) for t in res.r_o["O"]] == ["concat(O@0, O@1, dim=0)"], res.r_o
