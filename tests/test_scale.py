"""Whole models: per-layer reuse in the certificate, the same R_o with and without reuse, a bug in one layer
found at that layer, the sweep on Ray equal to the serial one, the progress bar."""
from __future__ import annotations

import copy
import io
import sys

import pytest

import graphguard
import graphguard.torch as ggt
from conftest import EXAMPLES, load_module, run_cli
from graphguard.engine.layers import layer_of_name, node_layers


def _llama(layers: int, shape: str = ""):
    return load_module(EXAMPLES / "llama-tp" / "model.py", GG_LAYERS=str(layers), GG_SHAPE=shape)


def _without_reuse(monkeypatch, s, d, rel):
    """The verification with every memo lookup a miss (each operator searched afresh)."""
    from graphguard.engine.memo import Memo
    monkeypatch.setattr(Memo, "lookup", lambda self, problem, outputs: None)
    return graphguard.verify(s.graph(), d.graph(), rel)


@pytest.fixture(scope="module")
def llama4():
    """Four llama-tp layers at TP 2, forward: the captured graphs and the relation (with expectations)."""
    mod = _llama(4)
    s = ggt.capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 2))
    d = ggt.capture(lambda r: mod.impl(r, 2), lambda r: mod.inputs(r, 2), world_size=2)
    return s, d, dict(mod.relation(2, False), expect=mod.expect(2, False))


def test_layer_names():
    assert layer_of_name("grad.model.layers.3.mlp.up_proj.weight") == ("model.layers", 3)
    assert layer_of_name("transformer.h.11.attn.c_attn.weight") == ("transformer.h", 11)
    assert layer_of_name("decoder.layers.0.self_attention.linear_qkv.weight@1") == ("decoder.layers", 0)
    assert layer_of_name("layers.2") == ("layers", 2)
    assert layer_of_name("hidden_states") is None and layer_of_name("lm_head.weight") is None
    assert layer_of_name("model.layers_norm.weight") is None  # (a name merely starting like one)


def test_certificate_lists_reused_layers(llama4):
    s, d, rel = llama4
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines" and not r.expect["missing"]
    assert [x["layer"] for x in r.layers] == ["layers.0", "layers.1", "layers.2", "layers.3"]
    first, *rest = r.layers
    assert first["reused"] < first["ops"]  # the first layer is searched
    assert all(x["reused"] == x["ops"] for x in rest[:-1])  # the middle ones take its results
    line = r.layers_line()
    assert line.startswith("layers: 4; operators that reused an earlier operator's result: ") and "layers.1 " in line
    assert line in r.render() and r.to_dict()["layers"] == r.layers


def test_replicated_kv_heads_reused_too(monkeypatch):
    """At TP 4 each of the two KV heads is replicated on two ranks: a search proves the replicas' views equal
    through aliases of tensors the first read of the problem does not reach; the memo entry reads those too,
    so the layers after the first still take its results (a regression once left 0 of 32 layers reused) --
    and give the R_o a run without reuse gives."""
    mod = _llama(4)
    s = ggt.capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 4))
    d = ggt.capture(lambda r: mod.impl(r, 4), lambda r: mod.inputs(r, 4), world_size=4)
    rel = dict(mod.relation(4, False), expect=mod.expect(4, False))
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines" and not r.expect["missing"]
    first, second, third, last = r.layers
    assert first["reused"] < first["ops"]
    # (the residual add meets the first layer's output here; its result, one of equally good expressions
    # chosen by tensor names, may read differently from layer 0's, and the norm after it then searches again)
    assert second["reused"] >= 0.9 * second["ops"]
    assert third["reused"] == third["ops"] and last["reused"] >= last["ops"] - 2
    r0 = _without_reuse(monkeypatch, s, d, rel)
    assert r0.verdict == "refines" and r0.r_o_lines() == r.r_o_lines()


def test_reuse_gives_the_same_certificate(llama4, monkeypatch):
    """Every reuse is a lookup of the same local problem: without it, the same R_o."""
    s, d, rel = llama4
    r = graphguard.verify(s.graph(), d.graph(), rel)
    r0 = _without_reuse(monkeypatch, s, d, rel)
    assert r0.verdict == r.verdict == "refines"
    assert r0.stats["reused_results"] == 0 < r.stats["reused_results"]
    assert r0.r_o_lines() == r.r_o_lines()


def test_a_bug_in_one_layer_is_found_there(llama4):
    """Layer 2 of 4 (0-based) loses its attention all-reduce: reuse of layers 0-1 must not hide it."""
    s, d, rel = llama4
    doc = copy.deepcopy(d.doc)
    g_d = d.graph()
    lay = node_layers(g_d)
    target = next(n for n in g_d.topo_order() if n.op == "core.all_reduce" and lay[n.name] == ("layers", 2))
    i = next(k for k, n in enumerate(doc["nodes"]) if n["name"] == target.name)
    ar = doc["nodes"].pop(i)
    for r, (x, y) in enumerate(zip(ar["inputs"], ar["outputs"])):  # each rank keeps its partial sum
        doc["nodes"].insert(i + r, {"name": f"{ar['name']}.kept.{r}", "op": "core.identity", "inputs": [x],
                                    "outputs": [y], "attrs": {}, "loc": ar.get("loc")})
    bad = ggt.Captured(doc, d.relation)
    r = graphguard.verify(s.graph(), bad.graph(), rel, replay=True)
    assert r.verdict == "does-not-refine"
    assert node_layers(s.graph())[r.failure.node] == ("layers", 2), r.failure
    assert r.failure.replay and r.failure.replay["max_abs_diff"] > 1e-4


def test_sweep_on_ray_equals_the_serial_sweep():
    pytest.importorskip("ray")
    from graphguard.sweep import grid, sweep
    model = str(EXAMPLES / "mlp-tp" / "model.py")
    cfgs = grid([2], [None], [True])  # (one configuration: a Ray worker's start-up is most of the cost)
    serial = sweep(model, cfgs, workers=1)
    parallel = sweep(model, cfgs, workers=2)
    keys = ("world", "layers", "mode", "verdict", "n_spec", "n_impl", "r_o", "op", "loc", "reused")
    assert [{k: r[k] for k in keys} for r in parallel] == [{k: r[k] for k in keys} for r in serial]
    assert [r["verdict"] for r in serial] == ["refines"]
    assert any(line.startswith("grad.") for line in serial[0]["r_o"])


def test_sweep_cli_table_and_bad_arguments(tmp_path):
    p = run_cli("sweep", EXAMPLES / "mlp-tp" / "model.py", "--world-size", "2", "--workers", "1",
                "--json", tmp_path / "rows.json")
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[0].split()[:4] == ["world", "layers", "mode", "verdict"] and lines[1].split()[:4] == ["2", "-", "fwd", "refines"]
    assert (tmp_path / "rows.json").exists()
    for args, what in ((["--world-size", "two"], "--world-size"), (["--world-size", "0"], "--world-size"),
                       (["--world-size", "2", "--layers", "x"], "--layers")):
        p = run_cli("sweep", EXAMPLES / "mlp-tp" / "model.py", *args)
        assert p.returncode == 2 and what in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = run_cli("sweep", tmp_path / "missing.py", "--world-size", "2")
    assert p.returncode == 2 and "no such model file" in p.stderr


def test_progress_bar_only_on_a_terminal(llama4, monkeypatch):
    from graphguard.cli import Progress
    s, d, rel = llama4
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with Progress(enabled=True) as bar:
        graphguard.verify(s.graph(), d.graph(), rel, progress=bar.update)
    text = err.getvalue()
    assert "verifying" in text and "op/s" in text or "op]" in text
    assert "layers." in text  # the layer at hand
    err.truncate(0)
    with Progress(enabled=False) as bar:
        graphguard.verify(s.graph(), d.graph(), rel, progress=bar.update)
    assert err.getvalue() == ""


def test_production_shape_captured_without_weights():
    """Llama-3-8B's layer shape (hidden 4096, 32 heads over 8 KV heads, MLP 14336) built on the meta device:
    captured without allocating its weights, verified on shapes alone."""
    mod = _llama(1, "8b")
    assert mod.spec().layers[0].gate_proj.weight.is_meta
    s = ggt.capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 2))
    d = ggt.capture(lambda r: mod.impl(r, 2), lambda r: mod.inputs(r, 2), world_size=2)
    shapes = {i["name"]: i["shape"] for i in s.doc["inputs"]}
    assert shapes["layers.0.gate_proj.weight"] == [14336, 4096]
    r = graphguard.verify(s.graph(), d.graph(), dict(mod.relation(2, False), expect=mod.expect(2, False)))
    assert r.verdict == "refines" and not r.expect["missing"]
