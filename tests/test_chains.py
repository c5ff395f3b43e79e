"""Long chains of operators (bench/verify_chain.py builds them): the frontier stays near each operator, a
problem met before reuses its result, and a bug is reported where it is -- however long the chain."""
from __future__ import annotations

import json
import sys

import pytest

import graphguard
from conftest import ROOT, files

sys.path.insert(0, str(ROOT / "bench"))
from verify_chain import chain  # noqa: E402


def _verify(tmp_path, plugins, variant, n, replay=False, **kw):
    spec, impl, rel = chain(variant, n, **kw)
    (tmp_path / "spec.gg.json").write_text(json.dumps(spec))
    (tmp_path / "impl.gg.json").write_text(json.dumps(impl))
    (tmp_path / "relation.yaml").write_text(rel)
    return graphguard.verify(*files(tmp_path), plugins=plugins, replay=replay)


def test_relu_chain_refines_and_the_frontier_stays_local(tmp_path, plugins):
    r = _verify(tmp_path, plugins, "relu", 1000)
    assert r.verdict == "refines"
    assert r.r_o_lines() == ["t1000 = concat(t1000@0, t1000@1, dim=0)"]
    # each operator looks at its own relus and the next ones, never further down the chain
    assert max(s.explored for s in r.node_stats) <= 4
    assert r.stats["reused_results"] >= 990  # one search per distinct neighbourhood (the ends differ)


def test_mixed_chain_with_a_replicated_bias_and_constants_refines(tmp_path, plugins):
    r = _verify(tmp_path, plugins, "mix", 1000)
    assert r.verdict == "refines"
    assert r.r_o_lines() == ["t1000 = concat(t1000@0, t1000@1, dim=0)"]
    # the add, then what carries its value on within MAX_HOPS (reshape, multiplication by a constant and the
    # constant, reshape), and the relu after -- per rank
    assert max(s.explored for s in r.node_stats) <= 12
    assert r.stats["reused_results"] >= 980


def test_chain_with_collectives_refines(tmp_path, plugins):
    """Every 50 relus G_d all-gathers and each rank slices its rows back: G_s has nothing there."""
    r = _verify(tmp_path, plugins, "collective", 1000, every=50)
    assert r.verdict == "refines"
    assert r.r_o_lines() == ["t1000 = concat(t1000@0, t1000@1, dim=0)"]


def test_short_chains_replay(tmp_path, plugins):
    for variant in ("mix", "collective"):
        (tmp_path / variant).mkdir()
        r = _verify(tmp_path / variant, plugins, variant, 60, replay=True, every=7)
        assert r.verdict == "refines" and r.replay["ok"], variant


def test_bug_deep_in_a_long_chain_is_reported_there(tmp_path, plugins):
    r = _verify(tmp_path, plugins, "relu", 2000, bug_at=1500)
    assert r.verdict == "does-not-refine"
    f = r.failure
    assert (f.node, f.loc) == ("op1500", "chain.py:1500")
    assert f.input_relations == {"t1499": ["concat(t1499@0, t1499@1, dim=0)"]}


# A problem is reused only when it is the same up to tensor names: a different operator, a different
# constant or a different wiring in G_d must be searched anew (and fail).
@pytest.mark.parametrize("bug_at, what", [(501, "neg instead of relu"), (502, "add skips the relu before it")])
def test_mixed_chain_bug_is_reported_there(tmp_path, plugins, bug_at, what):
    r = _verify(tmp_path, plugins, "mix", 1000, bug_at=bug_at)
    assert r.verdict == "does-not-refine", what
    assert r.failure.node == f"op{bug_at}", what


def test_mixed_chain_wrong_constant_is_traced_back_to_it(tmp_path, plugins):
    """Rank 1 multiplies by 0.25 at op504: its part is known only up to a factor of 2 from there, which the
    relu two operators later cannot carry; the report names both."""
    r = _verify(tmp_path, plugins, "mix", 1000, bug_at=504)
    assert r.verdict == "does-not-refine"
    assert r.failure.node == "op506" and "up to a constant factor since op504" in r.failure.reason


def test_chain_with_collectives_bug_after_a_gather(tmp_path, plugins):
    r = _verify(tmp_path, plugins, "collective", 300, every=50, bug_at=151)
    assert r.verdict == "does-not-refine" and r.failure.node == "op151"


def test_a_constant_computed_by_a_long_chain_is_inconclusive_not_a_crash(plugins):
    """G_s constants are inlined as terms (trees): past MAX_CONSTANT_TERM operators the verdict is
    inconclusive at the operator where the term got too large."""
    from graphguard.engine.infer import MAX_CONSTANT_TERM
    from graphguard.ir.builder import GraphBuilder
    from graphguard.ir.relation import parse_relation_text
    n = MAX_CONSTANT_TERM + 50
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 4])
    s.op("core.full", [], "c0", shape=[4, 4], value=1.0)
    for r in range(2):
        d.input(f"X@{r}", [2, 4])
        d.op("core.full", [], f"c0@{r}", shape=[2, 4], value=1.0)
    for i in range(1, n + 1):
        s.op("core.neg", [f"c{i - 1}"], f"c{i}", name=f"neg{i}")
        for r in range(2):
            d.op("core.neg", [f"c{i - 1}@{r}"], f"c{i}@{r}")
    s.op("core.add", ["X", f"c{n}"], "Y")
    for r in range(2):
        d.op("core.add", [f"X@{r}", f"c{n}@{r}"], f"Y@{r}")
    s.output("Y")
    d.output("Y@0", "Y@1")
    rel = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=0)\n", "rel", plugins.registry)
    cx = rel.constraints()
    r = graphguard.verify(s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel, plugins=plugins)
    assert r.verdict == "inconclusive" and r.exit_code == 3
    assert r.failure.node == f"neg{MAX_CONSTANT_TERM}" and "constant computed by more than" in r.failure.reason
