"""Graph passes as data (graphguard/passes): the pipeline is an ordered list whose every requirement an earlier
pass ensures; a pass that leaves its program invalid is named; a bridge pack's passes run only while the pack is
loaded (``-p no:NAME``)."""
from __future__ import annotations

import types

import pytest

import graphguard
from conftest import files, write_example
from graphguard.hookspecs import hookimpl
from graphguard.passes import PIPELINE, Pass, PassContext, PassError, build_pipeline, check_order, run_pass
from graphguard.plugins import load_plugins

# the order of api.load_inputs' hand-ordered block before the passes were data
ORDER = ["bias_after_rows", "round_fills", "slices_of_concats", "fold_constants", "fuse_expressions", "masked_softmax",
         "widen_fills", "drop_identities", "scalar_forms", "scale_into_product"]
BRIDGE = {"fold_constants": "aten-hlo", "masked_softmax": "aten-hlo", "scale_into_product": "aten-hlo"}


def test_the_pipeline_is_declared_in_order_and_each_requirement_ensured_before(plugins):
    passes = plugins.passes
    assert [p.name for p in passes] == ORDER
    check_order(passes)
    ensured: set = set()
    for p in passes:
        assert p.requires <= ensured, p
        ensured |= p.ensures
        assert p.ensures, f"{p.name} ensures nothing"
        assert p.where.endswith(tuple(f":{n}" for n in range(1, 10000))) and ".py:" in p.where


def test_bridge_passes_come_from_their_pack_and_core_ones_from_the_engine(plugins):
    assert {p.name: p.source for p in plugins.passes if p.source != "graphguard"} == BRIDGE
    assert all(p.where.startswith("graphguard/passes/") for p in plugins.passes if p.source == "graphguard")
    assert all(p.where.startswith("lemma_packs/aten_hlo/") for p in plugins.passes if p.name in BRIDGE)


def test_a_bridge_pass_runs_only_while_its_pack_is_loaded():
    without = load_plugins(frozenset({"aten-hlo"}))
    assert [p.name for p in without.passes] == [n for n in ORDER if n not in BRIDGE]


def test_graphguard_plugins_lists_the_passes_in_order():
    from conftest import run_cli
    p = run_cli("plugins")
    assert p.returncode == 0, p.stderr
    assert ("passes: bias_after_rows, round_fills, slices_of_concats, fold_constants (aten-hlo), fuse_expressions, "
            "masked_softmax (aten-hlo), widen_fills, drop_identities, scalar_forms, scale_into_product (aten-hlo)"
            ) in p.stdout.splitlines()
    p = run_cli("-p", "no:aten-hlo", "plugins")
    assert p.returncode == 0, p.stderr
    assert ("passes: bias_after_rows, round_fills, slices_of_concats, fuse_expressions, widen_fills, drop_identities, "
            "scalar_forms") in p.stdout.splitlines()


def _noop(g, ctx):
    return 0


@pytest.mark.parametrize("bad,message", [
    (Pass("needs-more", _noop, requires={"no-such-property"}, after="round_fills"),
     "graph pass 'needs-more' .*test_passes.py:\\d+.* requires no-such-property, which no earlier pass ensures"),
    (Pass("too-early", _noop, requires={"scalar-forms"}, after="round_fills"),
     "'too-early' .* requires scalar-forms, which no earlier pass ensures"),
    (Pass("nowhere", _noop, after="no_such_pass"), "'nowhere' .* runs after 'no_such_pass', which is no pass"),
    (Pass("round_fills", _noop, after="scalar_forms"), "'round_fills' .* is defined twice"),
])
def test_a_pipeline_that_cannot_hold_is_refused_naming_the_pass(bad, message):
    with pytest.raises(PassError, match=message):
        build_pipeline(PIPELINE, [bad])


def test_contributed_passes_at_one_place_keep_their_order():
    a, b = Pass("a", _noop, after="round_fills"), Pass("b", _noop, after="round_fills")
    names = [p.name for p in build_pipeline(PIPELINE, [a, b])]
    assert names[names.index("round_fills") + 1:names.index("round_fills") + 3] == ["a", "b"]
    assert [p.name for p in build_pipeline(PIPELINE, [Pass("last", _noop)])][-1] == "last"


def _dangling(g, ctx):
    """Inserts a node reading a tensor nothing defines."""
    g.insert_node(None, "core.identity", ["nowhere"], ["broken"], name="broken")
    return 1


BREAKS = Pass("breaks-the-graph", _dangling, after="scalar_forms")


def test_a_pass_that_breaks_the_graph_is_caught_naming_it(plugins, cx):
    from graphguard.ir.serde import graph_from_dict
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2, 3]}], "outputs": ["y"],
           "nodes": [{"op": "aten.relu", "inputs": ["x"], "outputs": ["y"]}]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    with pytest.raises(PassError, match=r"graph pass 'breaks-the-graph' \((?:tests/)?test_passes.py:\d+\) left <t> invalid: "
                                        r".*'nowhere' is not defined"):
        run_pass(BREAKS, g, PassContext(plugins.registry, cx))


def test_a_plugin_pass_that_breaks_the_graph_fails_verification_naming_it(tmp_path):
    plugin = types.ModuleType("breaking_plugin")
    plugin.graphguard_passes = hookimpl(lambda: [BREAKS])
    pl = load_plugins(extra=(plugin,))
    assert [p.name for p in pl.passes][-2:] == ["scale_into_product", "breaks-the-graph"]  # (loaded after aten-hlo)
    spec, impl, rel = files(write_example(tmp_path))
    with pytest.raises(PassError, match="graph pass 'breaks-the-graph'"):
        graphguard.verify(spec, impl, rel, plugins=pl)
    assert graphguard.verify(spec, impl, rel).verdict == "refines"


def test_a_rewrite_in_place_is_inferred_again_and_one_out_of_order_validated_whole(plugins, cx):
    from graphguard.errors import InputError
    from graphguard.ir.serde import graph_from_dict
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2, 3]}], "outputs": ["z"],
           "nodes": [{"op": "aten.relu", "inputs": ["x"], "outputs": ["y"]},
                     {"op": "aten.neg", "inputs": ["y"], "outputs": ["z"]}]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    relu, neg = g.nodes
    g.rewrite(neg, inputs=["x"])  # reads a tensor defined before it: in place
    g.revalidate(plugins.registry, cx)
    assert g.consumers["x"] == [relu, neg] and g.consumers["y"] == []
    g.rewrite(relu, inputs=["z"])  # reads a tensor defined after it: the whole graph validated, the order new
    g.revalidate(plugins.registry, cx)
    assert g.topo_order() == [neg, relu] and g.consumers["z"] == [relu]
    g.rewrite(neg, inputs=["y"])  # now a cycle
    with pytest.raises(InputError, match="cycle"):
        g.revalidate(plugins.registry, cx)


# -- what a pass ensures is checked: its normal form reached (run again, it changes nothing) -------------------

SHIPPED = [("paper-fig1", "spec.gg.json", "impl.gg.json", "relation.yaml"),
           ("vllm-qwen2-real/graphs", "spec.gg.json", "impl-tp2.gg.json", "relation-tp2.yaml"),
           ("torchtitan-llama/captured/tp2-loss", "spec.gg.json", "impl.gg.json", "relation.yaml")]


@pytest.mark.parametrize("folder,spec,impl,rel", SHIPPED, ids=[s[0] for s in SHIPPED])
def test_every_pass_ensures_its_normal_form_on_shipped_programs(folder, spec, impl, rel, monkeypatch):
    """Each pass of the pipeline (the bridges' included), checked after it ran on real captured programs: run
    once more on a copy, it changes nothing."""
    from pathlib import Path
    from graphguard.api import load_inputs
    monkeypatch.setenv("GRAPHGUARD_CHECK_PASSES", "1")
    d = Path(__file__).resolve().parents[1] / "examples" / folder
    load_inputs(str(d / spec), str(d / impl), str(d / rel), frontend="ir")


_calls = {"n": 0}


def _one_site_per_call(g, ctx):  # claims a normal form but changes one more site every time it runs
    _calls["n"] += 1
    return 1


def test_a_pass_that_does_not_reach_what_it_ensures_is_named(plugins, cx):
    from graphguard.ir.serde import graph_from_dict
    from graphguard.passes import check_ensures
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2, 3]}], "outputs": ["y"],
           "nodes": [{"op": "aten.relu", "inputs": ["x"], "outputs": ["y"]}]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    p = Pass("never-done", _one_site_per_call, ensures={"never-done"})
    run_pass(p, g, PassContext(plugins.registry, cx))  # (unchecked: runs)
    with pytest.raises(PassError, match=r"graph pass 'never-done' .* does not ensure never-done on <t>: run again, "
                                        r"it changes 1 more site"):
        run_pass(p, g, PassContext(plugins.registry, cx), check=True)
    with pytest.raises(PassError, match="does not ensure"):
        check_ensures(p, g, PassContext(plugins.registry, cx))
