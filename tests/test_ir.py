"""The IR: round trips, text dump, scalars, the relation language, op references vs meanings."""
from __future__ import annotations

import json

import numpy as np
import pytest

from graphguard.ir import scalar as S
from graphguard.ir.expr import Leaf, app, to_text
from graphguard.ir.relation import parse_cond, parse_term, parse_relation_text
from graphguard.ir.serde import graph_to_dict, load_graph

from conftest import EXAMPLES


def test_graph_round_trip_and_dump(plugins, cx, tmp_path):
    g = load_graph(EXAMPLES / "paper-fig1" / "impl.gg.json", plugins.registry, cx)
    out = tmp_path / "again.gg.json"
    out.write_text(json.dumps(graph_to_dict(g)))
    g2 = load_graph(out, plugins.registry, cx)
    assert graph_to_dict(g2) == graph_to_dict(g)
    text = g.dump()
    assert "graph paper-fig1-impl (world size 2)" in text
    assert "D@0: [4, 4], D@1: [4, 4] = core.reduce_scatter(C@0, C@1, op=sum, dim=0, group=[0, 1])" in text
    assert [n.name for n in g.topo_order()][-1].startswith("sub@")


def test_dump_command():
    from conftest import run_cli
    p = run_cli("dump", EXAMPLES / "paper-fig1" / "spec.gg.json")
    assert p.returncode == 0 and "C: [8, 4] = core.matmul(A, B)" in p.stdout


def test_expressions_print_flat_and_nest_left(plugins):
    e = parse_term("concat(A@0, A@1, A@2, dim=1)", plugins.registry)
    assert e == app("core.concat", Leaf("A@0"), Leaf("A@1"), Leaf("A@2"), dim=1)
    assert e.args[0].op == "core.concat"  # left-nested
    assert to_text(e) == "concat(A@0, A@1, A@2, dim=1)"
    s = parse_term("slice(X@1, dim=0, start=K/2, end=K)", plugins.registry)
    assert to_text(s) == "slice(X@1, dim=0, start=K/2, end=K)"
    assert to_text(parse_term("transpose(X, dims=[1, 0])", plugins.registry)) == "permute(X, dims=[1, 0])"


def test_relation_file_positions(plugins):
    rel = parse_relation_text("inputs:\n  A: concat(A@0, A@1, dim=1)\n  E: [E@0, E@1]\n"
                              "symbols:\n  K: {min: 2, multiple_of: 2}\n", "r.yaml", plugins.registry)
    assert [to_text(e) for e in rel.inputs["E"]] == ["E@0", "E@1"]
    assert rel.symbols["K"].multiple_of == 2
    with pytest.raises(Exception, match=r"r.yaml:3:27: unexpected '\)'"):
        parse_relation_text("inputs:\n  A: A@0\n  B: concat(B@0, B@1, dim=)\n", "r.yaml", plugins.registry)


def test_conditions_parse():
    c = parse_cond("?e <= size(?p, ?d) and not ?k == ?d")
    assert c.op == "and"


def test_scalars(cx):
    k = S.parse("K")
    assert S.text(S.parse("2*K/4 + K/2")) == "K"
    assert cx.prove("<=", S.parse("K/4"), S.parse("K/2"))  # K >= 1 by default
    assert not cx.prove("<=", S.parse("K/2"), S.parse("K/4"))
    assert not cx.prove("==", k, S.parse("K+1"))
    assert not cx.integral(S.parse("K/2"))
    cx.declare(S.SymbolInfo("K", 2, None, 2))
    assert cx.integral(S.parse("K/2")) and cx.integral(S.parse("3*K/2 + 1"))
    assert cx.model() == {"K": 2}
    for bad in ("K +", "import os", "K(1)", ""):
        with pytest.raises(ValueError):
            S.parse(bad)


def test_collective_references_follow_their_meaning(plugins, cx):
    """Collectives have no reference of their own: replay evaluates their clean meaning."""
    from graphguard.ir.builder import GraphBuilder
    from graphguard.engine.replay import run_graph
    d = GraphBuilder("rs", world_size=2)
    d.input("X@0", [4, 2]); d.input("X@1", [4, 2])
    d.op("core.reduce_scatter", ["X@0", "X@1"], ["Y@0", "Y@1"], op="sum", dim=0, group=[0, 1])
    d.op("core.all_to_all", ["X@0", "X@1"], ["Z@0", "Z@1"], split_dim=0, concat_dim=1, group=[0, 1])
    d.output("Y@0", "Y@1", "Z@0", "Z@1")
    g = d.build(plugins.registry, cx)
    x0, x1 = np.arange(8.0).reshape(4, 2), 10 + np.arange(8.0).reshape(4, 2)
    env = run_graph(g, {"X@0": x0, "X@1": x1}, plugins.registry, {})
    np.testing.assert_allclose(np.concatenate([env["Y@0"], env["Y@1"]]), x0 + x1)
    np.testing.assert_allclose(env["Z@1"], np.concatenate([x0[2:], x1[2:]], axis=1))


def test_repeated_nodes_inferred_once_with_their_own_terms(plugins, cx):
    """Validation infers a node once per (operator, attributes, input shapes/dtypes, input pattern): a node
    like an earlier one takes its shapes, and its terms over its own inputs -- ``mul(x, x)`` and ``mul(y, z)``
    share shapes but not terms."""
    from graphguard.ir.serde import graph_from_dict
    doc = {"graphguard": 1, "inputs": [{"name": n, "shape": [2, 3]} for n in "xyz"], "outputs": ["d", "e", "f"],
           "nodes": [{"op": "aten.mul.Tensor", "inputs": ["x", "x"], "outputs": ["d"]},
                     {"op": "aten.mul.Tensor", "inputs": ["y", "z"], "outputs": ["e"]},
                     {"op": "aten.mul.Tensor", "inputs": ["z", "z"], "outputs": ["f"]}]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    terms = {n.outputs[0]: to_text(g.node_terms(n)[0]) for n in g.nodes}
    assert terms == {"d": "aten.mul.Tensor(x, x)", "e": "aten.mul.Tensor(y, z)", "f": "aten.mul.Tensor(z, z)"}
    assert {g.tensors[t].shape for t in "def"} == {(2, 3)}


def test_reinfer_after_a_rewrite(plugins, cx):
    """``x * 1`` becomes ``identity(x)``: checked again in place, the constant no longer read."""
    from graphguard.passes import drop_identities
    from graphguard.ir.serde import graph_from_dict
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2, 3]}], "outputs": ["y"],
           "nodes": [{"op": "aten.full", "inputs": [], "outputs": ["one"],
                      "attrs": {"size": [2, 3], "fill_value": 1, "dtype": "float32"}},
                     {"op": "aten.mul.Tensor", "inputs": ["x", "one"], "outputs": ["y"]}]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    assert drop_identities(g, plugins.registry, cx) == 1
    (mul,) = [n for n in g.nodes if n.outputs == ["y"]]
    assert mul.op == "core.identity" and to_text(g.node_terms(mul)[0]) == "identity(x)"
    assert not g.consumers.get("one")


@pytest.mark.parametrize("rep", ["layers", {"path": "layers"}, {"path": 3, "layers": 4}, {"path": "l", "layers": 1},
                                 {"path": "l", "layers": True}])
def test_a_bad_repeat_record_is_one_clear_error(plugins, cx, rep):
    from graphguard.errors import InputError
    from graphguard.ir.serde import graph_from_dict
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2]}], "outputs": ["x"], "nodes": [], "repeat": rep}
    with pytest.raises(InputError, match="'repeat' must be"):
        graph_from_dict(doc, "<t>", plugins.registry, cx)


def test_source_keys_round_trip_and_are_strings(plugins, cx):
    """A node's source: ``loc``, ``func``, ``module`` (the user's line, its function, the module path) are kept,
    printed by ``dump`` and ``describe``, and a non-string one is one clear error."""
    from graphguard.errors import InputError
    from graphguard.ir.serde import graph_from_dict
    node = {"op": "aten.relu", "inputs": ["x"], "outputs": ["y"], "loc": "modeling_x.py:7", "func": "forward",
            "module": "model.layers.0.mlp"}
    doc = {"graphguard": 1, "inputs": [{"name": "x", "shape": [2]}], "outputs": ["y"], "nodes": [node]}
    g = graph_from_dict(doc, "<t>", plugins.registry, cx)
    assert {k: v for k, v in graph_to_dict(g)["nodes"][0].items() if k in node} == node
    assert "# modeling_x.py:7 in forward, module model.layers.0.mlp" in g.dump()
    assert g.nodes[0].describe().endswith("[modeling_x.py:7 in forward, module model.layers.0.mlp]")
    for key in ("func", "module"):
        with pytest.raises(InputError, match=f"'{key}' must be a string"):
            graph_from_dict(dict(doc, nodes=[dict(node, **{key: 3})]), "<t>", plugins.registry, cx)
