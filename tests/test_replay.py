"""Replay: tensors freed after their last reader, computed in the graph's dtypes (float64 on request),
tolerances by dtype, bugs and wrong relations still numerically visible."""
from __future__ import annotations

import numpy as np
import pytest

import graphguard
from graphguard.api import load_inputs
from graphguard.engine import replay as R
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.expr import leaves
from graphguard.ir.relation import parse_term, parse_relation_text

from conftest import EXAMPLES, files, run_cli

NEURONX = EXAMPLES / "neuronx-llama-tp"
NEURONX_BUG = EXAMPLES / "bugs" / "neuronx-k-slice"


def _chain(plugins, n: int, dtype: str = "float16"):
    """G_s: n elementwise operators on X; G_d: the same on each rank's rows of X."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [8, 16], dtype)
    for r in range(2):
        d.input(f"X@{r}", [4, 16], dtype)
    prev = "X"
    for i in range(n):
        op = ("core.neg", "core.relu")[i % 2]
        s.op(op, [prev], f"H{i}", name=f"n{i}")
        for r in range(2):
            d.op(op, [f"{prev}@{r}"], f"H{i}@{r}")
        prev = f"H{i}"
    s.output(prev)
    d.output(f"{prev}@0", f"{prev}@1")
    rel = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=0)\n", "rel", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def _neuronx(d=NEURONX):
    return dict(spec=str(d / "spec.hlo"), impl=str(d / "impl.hlo.pb"), relation=str(d / "relation.yaml"),
                frontend="hlo", world_size=2)


@pytest.fixture(scope="module")
def neuronx_graphs(plugins):
    a = _neuronx()
    return load_inputs(a["spec"], a["impl"], a["relation"], frontend="hlo", world_size=2, plugins=plugins)


# -- memory: each tensor freed after its last reader --------------------------------------------------

def test_a_long_chain_holds_a_bounded_number_of_tensors(plugins):
    """Every operator's relation is checked as soon as both sides exist, then both are freed: the tensors held
    at once do not grow with the chain (2 * 81 tensors per graph pair at n=80)."""
    peaks = {}
    for n in (10, 80):
        r = graphguard.verify(*_chain(plugins, n), replay=True, plugins=plugins)
        assert r.verdict == "refines" and r.replay["ok"] and r.replay["checked"] == n + 1
        peaks[n] = r.replay["peak_tensors"]
        assert r.replay["steps"] >= 4 * n  # n G_s operators, 2 n G_d operators, n checks
    assert peaks[10] == peaks[80] <= 4


def test_the_schedule_frees_each_tensor_after_its_last_reader(plugins):
    g_s, g_d, rel = _chain(plugins, 6)
    r = graphguard.verify(g_s, g_d, rel, plugins=plugins)
    checks = [R.Check((t,), tuple(sorted(leaves(e))), lambda s, d: None) for t, es in r.relations.items() for e in es]
    steps = R.schedule(g_s, g_d, {"X": parse_term("concat(X@0, X@1, dim=0)", plugins.registry)}, checks)
    last = R.last_reads(steps)
    for (side, t), i in last.items():  # nothing is read after the step that frees it
        assert all((side, t) not in st.reads for st in steps[i + 1:])
    kinds = [st.kind for st in steps]
    assert kinds.index("in") < kinds.index("s")  # X is built before its first reader
    # G_d runs as the checks need it: before H0's check, only the operators computing H0@0 and H0@1
    h0 = next(i for i, st in enumerate(steps) if st.kind == "check" and st.item.s == ("H0",))
    assert sorted(st.item.outputs[0] for st in steps[:h0] if st.kind == "d") == ["H0@0", "H0@1"]


# -- dtypes --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype, mode, stored", [
    ("float16", "graph", ["float16"]), ("float16", "float32", ["float32"]), ("float16", "float64", ["float64"]),
    ("bfloat16", "graph", ["float32"]), ("float32", "graph", ["float32"]), ("float64", "graph", ["float64"]),
    ("float32", "float64", ["float64"])])
def test_replay_stores_floats_in_the_graphs_dtype_or_the_one_asked_for(plugins, dtype, mode, stored):
    g_s, g_d, rel = _chain(plugins, 4, dtype)
    r = graphguard.verify(g_s, g_d, rel, replay=True, replay_dtype=mode, plugins=plugins)
    assert r.replay["ok"] and r.replay["dtype"] == mode
    assert r.replay["stored_dtypes"] == stored


def test_float16_operators_compute_on_float32_and_round_to_float16(plugins):
    """run_node widens float16 operands (a sum of 4096 float16 ones is 4096, not float16's 2048 plateau)."""
    g = GraphBuilder("g")
    g.input("A", [1, 4096], "float16")
    g.input("B", [4096, 1], "float16")
    g.op("core.matmul", ["A", "B"], "C")
    g.output("C")
    g = g.build(plugins.registry, parse_relation_text("inputs: {}\n", "r", plugins.registry).constraints())
    env = {"A": np.ones((1, 4096), np.float16), "B": np.ones((4096, 1), np.float16)}
    R.run_node(g, g.nodes[0], env, plugins.registry, {}, "graph")
    assert env["C"].dtype == np.float16 and float(env["C"][0, 0]) == 4096.0
    env2 = dict(env)
    R.run_node(g, g.nodes[0], env2, plugins.registry, {}, "float64")
    assert env2["C"].dtype == np.float64


def test_neuronx_float16_layer_replays_in_float16_and_in_float64_on_request(plugins):
    g = graphguard.verify(**_neuronx(), replay=True, plugins=plugins)
    f = graphguard.verify(**_neuronx(), replay=True, replay_dtype="float64", plugins=plugins)
    assert g.replay["ok"] and f.replay["ok"] and g.replay["checked"] == f.replay["checked"] > 100
    assert g.replay["stored_dtypes"] == ["float16", "float32"] and f.replay["stored_dtypes"] == ["float64"]
    assert not g.replay["rechecked"]  # no false mismatch, not even one dismissed by the float64 recheck
    assert g.replay["tol_ratio"] < 0.2  # well within float16's tolerance
    assert f.replay["max_abs_diff"] < 1e-9 < g.replay["max_abs_diff"]  # float16 rounding is visible


# -- bugs and wrong relations stay visible --------------------------------------------------------------

@pytest.mark.parametrize("mode", ["graph", "float64"])
def test_known_bugs_show_a_clear_replay_difference(plugins, mode):
    r = graphguard.verify(**_neuronx(NEURONX_BUG), replay=True, replay_dtype=mode, plugins=plugins)
    assert r.verdict == "does-not-refine" and r.replay["ok"]
    assert r.failure.replay["max_abs_diff"] > 0.1 and r.failure.replay["tol_ratio"] > 10
    r = graphguard.verify(*files(EXAMPLES / "bugs" / "paper-fig1-missing-reduction"), replay=True,
                          replay_dtype=mode, plugins=plugins)
    assert r.failure.replay["tol_ratio"] > 10


@pytest.mark.parametrize("mode", ["graph", "float32", "float64"])
def test_a_wrong_relation_is_a_mismatch_in_every_dtype(plugins, neuronx_graphs, mode):
    """Logits with the ranks' vocabulary halves swapped, KV caches with the heads' halves swapped."""
    g_s, g_d, rel, _ = neuronx_graphs
    r = graphguard.verify(g_s, g_d, rel, plugins=plugins)
    r.relations = {}
    r.r_o = {"out0": [parse_term("concat(out0@1, out0@0, dim=0)", plugins.registry)],
             "out1": [parse_term("concat(out1@1, out1@0, dim=2)", plugins.registry)]}
    rep = R.replay(r, g_s, g_d, rel, plugins.registry, dtype=mode)
    assert not rep["ok"] and len(rep["mismatches"]) == 2 and not rep["rechecked"]
    assert rep["tol_ratio"] > 10


def test_a_miss_in_a_narrow_dtype_is_rechecked_in_float64(plugins, neuronx_graphs, monkeypatch):
    """With no tolerance for float16/float32, every float relation misses; float64 clears the right ones and
    keeps the wrong one."""
    g_s, g_d, rel, _ = neuronx_graphs
    r = graphguard.verify(g_s, g_d, rel, plugins=plugins)
    r.relations = {}
    r.r_o = {"out0": [parse_term("concat(out0@0, out0@1, dim=0)", plugins.registry)],
             "out1": [parse_term("concat(out1@1, out1@0, dim=2)", plugins.registry)]}  # wrong
    real = R.tolerance

    def strict(got, want, eps=0.0):
        tol = real(got, want, eps)
        return tol if tol.rtol <= R.RTOL else R.Tolerance(0.0, 0.0, 0.0)
    monkeypatch.setattr(R, "tolerance", strict)
    rep = R.replay(r, g_s, g_d, rel, plugins.registry)
    assert rep["rechecked"] == ["out0 = concat(out0@0, out0@1, dim=0)"]
    assert len(rep["mismatches"]) == 1 and rep["mismatches"][0].startswith("out1 = ")


def test_compare_by_dtype():
    a = np.array([1.0, -np.inf, np.nan, 3.0], np.float32)
    assert R.compare(a, a.copy())[:2] == (0.0, 0.0)  # equal infinities and nan against nan: no difference
    f16 = np.full(100, 1.0, np.float16)
    assert R.compare(f16 + np.float16(0.01), f16)[1] < 1  # 1 % in float16: rounding
    assert R.compare(f16 + np.float16(0.1), f16)[1] > 1  # 10 %: not
    f32 = np.full(100, 1.0, np.float32)
    assert R.compare(f32 + np.float32(1e-3), f32)[1] > 1  # 0.1 % is not float32 rounding
    assert R.compare(np.array([3]), np.array([4]))[1] == np.inf  # integers: equal or not
    assert R.compare(np.ones(3), np.ones(3) + 1e-7)[1] < 1 < R.compare(np.ones(3), np.ones(3) + 1e-5)[1]


def test_cli_replay_dtype(tmp_path):
    args = sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"), files(EXAMPLES / "paper-fig1"))), [])
    p = run_cli("verify", *args, "--replay", "--replay-dtype", "float64")
    assert p.returncode == 0 and "checked numerically in float64 dtypes" in p.stdout
    p = run_cli("verify", *args, "--replay", "--replay-dtype", "float8")
    assert p.returncode == 2 and "float8" in p.stderr and "Traceback" not in p.stderr
