"""The ONNX examples end to end: torch.onnx.export capture (spec and every rank on a fake process group, the
functional all-reduce as com.microsoft AllReduce), then verification: onnx-mlp-tp refines (with replay);
bugs/onnx-mlp-missing-allreduce is flagged at the Add where the partial sums meet the replicated bias."""
from __future__ import annotations

import pytest
from conftest import EXAMPLES, run_cli

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")


def capture(model, out, world=2, **kw):
    from graphguard.frontends.onnx.capture import capture_model_file
    return capture_model_file(model, out, world, **kw)


def verify(files, *extra):
    return run_cli("verify", "--frontend", "onnx", "--spec", files["spec"], "--impl", *files["impl"].split(),
                   "--relation", files["relation"], *extra)


def verify_here(plugins, files, **kw):
    import graphguard
    return graphguard.verify(str(files["spec"]), files["impl"].split(), str(files["relation"]), frontend="onnx",
                             plugins=plugins, **kw)


def test_onnx_mlp_tp_refines(tmp_path):
    files = capture(EXAMPLES / "onnx-mlp-tp" / "model.py", tmp_path)
    import onnx
    ops = [n.op_type for n in onnx.load(files["impl"].split()[0]).graph.node]
    assert "AllReduce" in ops and "MatMul" in ops
    r = verify(files, "--replay")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "out0 = out0@0" in r.stdout and "replay: ok" in r.stdout and "expected relations: all 2 found" in r.stdout


def test_onnx_block_tp_refines(tmp_path, plugins):
    """A transformer block (attention + MLP) at TP 2: heads split across ranks, two all-reduces."""
    files = capture(EXAMPLES / "onnx-block-tp" / "model.py", tmp_path)
    r = verify_here(plugins, files, replay=True)
    assert r.exit_code == 0, r.render()
    assert "out0 = out0@1" in r.render() and "replay: ok" in r.render()


def test_onnx_block_tp_at_opset_17_refines(tmp_path, plugins):
    """Opset 17: no Gelu operator; the exporter writes it with Erf, Mul, Div and Add of constants."""
    import onnx
    files = capture(EXAMPLES / "onnx-block-tp" / "model.py", tmp_path, opset=17)
    m = onnx.load(files["spec"])
    assert [o.version for o in m.opset_import if o.domain == ""] == [17]
    assert "Erf" in {n.op_type for n in m.graph.node}
    r = verify_here(plugins, files)
    assert r.exit_code == 0, r.render()


def test_onnx_missing_allreduce_is_flagged(tmp_path, plugins):
    files = capture(EXAMPLES / "bugs" / "onnx-mlp-missing-allreduce" / "model.py", tmp_path)
    r = verify_here(plugins, files)
    assert r.exit_code == 1, r.render()
    assert r.failure.op == "onnx.Add" and r.failure.node == "add", r.render()
    assert "linear_1 = sum(linear_1@0, linear_1@1)" in r.render()
    # the exporter's metadata gives the user's line and the module (text, never evaluated)
    line = next(i for i, x in enumerate((EXAMPLES / "onnx-mlp-tp" / "model.py").read_text()
                                        .splitlines(), 1) if "self.fc2(" in x)
    assert r.failure.sources["linear_1@0"] == f"model.py:{line} in forward, module fc2"
    assert "no all-reduce or reduce-scatter of G_d follows `fc2`" in r.failure.hint


# -- onnx-llama-tp: examples/llama-tp/model.py exported to ONNX, at TP 4 (each KV head on two ranks) -------------

@pytest.fixture(scope="module")
def llama4(tmp_path_factory):
    return capture(EXAMPLES / "llama-tp" / "model.py", tmp_path_factory.mktemp("onnx-llama"), world=4)


def test_onnx_llama_tp4_refines(llama4, plugins):
    """RMSNorm, RoPE, grouped-query attention whose 2 KV heads are each replicated on two of the 4 ranks: the
    specification's Expand of the KV heads splits at the ranks' narrower copies (families 1215/1216)."""
    import onnx
    ops = {n.op_type for n in onnx.load(llama4["spec"]).graph.node}
    assert {"Expand", "Slice", "Neg", "ReduceMean", "Reciprocal", "Sigmoid", "Softmax"} <= ops
    r = verify_here(plugins, llama4, replay=True)
    assert r.exit_code == 0, r.render()
    assert all(f"out0 = out0@{k}" in r.render() for k in range(4)) and "replay: ok" in r.render()


def _without_first(path, op_type, out):
    """The ONNX file with its first ``op_type`` node replaced by an Identity (the collective forgotten)."""
    import onnx
    m = onnx.load(path)
    n = next(n for n in m.graph.node if n.op_type == op_type)
    n.op_type, n.domain = "Identity", ""
    del n.attribute[:]
    onnx.save(m, out)
    return out


def test_onnx_llama_tp4_missing_attention_all_reduce_is_flagged(llama4, plugins, tmp_path):
    """Every rank's file without the all-reduce after o_proj: the residual stream holds each rank's partial sum;
    flagged at the first operator a partial sum cannot pass: the next RMSNorm's square."""
    impl = [str(_without_first(f, "AllReduce", tmp_path / f"bad{r}.onnx")) for r, f in enumerate(llama4["impl"].split())]
    r = verify_here(plugins, dict(llama4, impl=" ".join(impl)), replay=True)
    assert r.exit_code == 1, r.render()
    assert r.failure.op == "onnx.Pow", r.render()
    assert "sum(pow_2@0, pow_2@1, pow_2@2, pow_2@3)" in r.render()  # each rank squares its own partial sum
    assert r.failure.replay["max_abs_diff"] > 1e-3, r.render()


def test_onnx_llama_tp4_missing_all_reduce_on_one_rank_is_a_deadlock(llama4, tmp_path):
    """One rank's file alone without it: the ranks' collectives do not match (exit 2, one line naming it)."""
    impl = llama4["impl"].split()
    impl[3] = str(_without_first(impl[3], "AllReduce", tmp_path / "bad3.onnx"))
    p = verify(dict(llama4, impl=" ".join(impl)))
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "deadlock" in line and "rank(s) [3] never issue" in line, line


@pytest.fixture(scope="module")
def llama4_fx(tmp_path_factory):
    """The same model file captured by the fx route (forward) at TP 4."""
    from graphguard.frontends.fx.model_file import capture_model_file
    f = capture_model_file(EXAMPLES / "llama-tp" / "model.py", tmp_path_factory.mktemp("fx-llama"), 4)
    return {k: str(v) for k, v in f.items()}


def test_llama_across_frameworks_both_ways(llama4, llama4_fx):
    """The ONNX export of the Llama block refined by its fx capture and the other way round, at TP 4 (the
    onnx-aten bridges: RMSNorm's Pow / ReduceMean / Sqrt + Reciprocal and rsqrt, SiLU as x * sigmoid(x), the
    attention's batched MatMul and fx's bmm of merged batch dims, Expand and expand, float32 constants)."""
    import graphguard
    r = graphguard.verify(str(llama4["spec"]), [llama4_fx["impl"]], llama4_fx["relation"], spec_frontend="onnx",
                          impl_frontend="ir", replay=True)
    assert r.verdict == "refines" and r.replay["ok"], r.render()
    assert r.r_o_lines() == [f"out0 = out0@{k}" for k in range(4)]
    r = graphguard.verify(llama4_fx["spec"], llama4["impl"].split(), llama4_fx["relation"], spec_frontend="ir",
                          impl_frontend="onnx", replay=True)
    assert r.verdict == "refines" and r.replay["ok"], r.render()


def test_llama_across_frameworks_without_an_all_reduce_is_flagged(llama4, llama4_fx, tmp_path):
    """The ONNX ranks without o_proj's all-reduce against the fx specification: flagged at RMSNorm's square."""
    import graphguard
    impl = [str(_without_first(f, "AllReduce", tmp_path / f"bad{r}.onnx")) for r, f in enumerate(llama4["impl"].split())]
    r = graphguard.verify(llama4_fx["spec"], impl, llama4_fx["relation"], spec_frontend="ir", impl_frontend="onnx")
    assert r.exit_code == 1 and r.failure.op == "aten.pow.Tensor_Scalar", r.render()


def test_onnx_llama_tp4_with_a_wrong_kv_replica_is_flagged(llama4, plugins, tmp_path):
    """Ranks 1 and 3 swapped in the second replica of the KV weights: rank 1 would hold KV head 1 while its query
    heads (2 and 3) belong to KV head 0. Flagged, at the attention scores."""
    text = llama4["relation"].read_text()
    bad = text.replace("concat(layers.0.k_proj.weight@1, layers.0.k_proj.weight@3, dim=0)",
                       "concat(layers.0.k_proj.weight@3, layers.0.k_proj.weight@1, dim=0)")
    assert bad != text
    (tmp_path / "rel.yaml").write_text(bad)
    r = verify_here(plugins, dict(llama4, relation=tmp_path / "rel.yaml"), replay=True)
    assert r.exit_code == 1, r.render()
    assert r.failure.op == "onnx.MatMul", r.render()


def test_backward_capture_is_refused(tmp_path):
    from graphguard.errors import InputError
    from graphguard.frontends.onnx.capture import capture_model_file
    with pytest.raises(InputError, match="forward programs only"):
        capture_model_file(EXAMPLES / "onnx-mlp-tp" / "model.py", tmp_path, 2, backward=True)


RMS_MODEL = '''
import torch, torch.distributed as dist, torch.distributed._functional_collectives as funcol
onnx_opset = 23  # torch.nn.RMSNorm is exported as RMSNormalization from opset 23
class M(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.norm = torch.nn.RMSNorm(8, eps=2 ** -20)
        self.up = torch.nn.Linear(8, 16 // world, bias=False)
        self.down = torch.nn.Linear(16 // world, 8, bias=False)
    def forward(self, x):
        y = self.down(torch.relu(self.up(self.norm(x))))
        y = funcol.all_reduce(y, "sum", dist.group.WORLD) if self.world > 1 else y
        return self.norm(x + y)
def spec():
    return M(1)
def impl(rank, world):
    return M(world)
def inputs(rank, world):
    return (torch.randn(2, 3, 8),)
def relation(world, backward):
    rep = lambda n: [f"{n}@{r}" for r in range(world)]
    cat = lambda n, d: "concat(" + ", ".join(f"{n}@{r}" for r in range(world)) + f", dim={d})"
    return {"inputs": {"x": rep("x"), "norm.weight": rep("norm.weight"), "up.weight": cat("up.weight", 0),
                       "down.weight": cat("down.weight", 1)}}
'''


def test_rms_normalization_of_opset_23(tmp_path, plugins):
    """torch.nn.RMSNorm exported at opset 23 is one RMSNormalization node (onnx.reference's semantics); it is
    row-wise over the normalised dims, so a TP MLP between two of them refines; the partial sums left without the
    all-reduce do not pass it."""
    import onnx
    (tmp_path / "rms.py").write_text(RMS_MODEL)
    files = capture(tmp_path / "rms.py", tmp_path / "ok")
    assert "RMSNormalization" in {n.op_type for n in onnx.load(files["spec"]).graph.node}
    r = verify_here(plugins, files, replay=True)
    assert r.exit_code == 0, r.render()
    assert "out0 = out0@1" in r.render() and "replay: ok" in r.render()
    (tmp_path / "bad.py").write_text(RMS_MODEL.replace('funcol.all_reduce(y, "sum", dist.group.WORLD) if self.world > 1 else y', "y"))
    r = verify_here(plugins, capture(tmp_path / "bad.py", tmp_path / "bad"), replay=True)
    assert r.exit_code == 1 and r.failure.op == "onnx.RMSNormalization", r.render()


COLLECTIVES_MODEL = '''
import torch, torch.distributed as dist, torch.distributed._functional_collectives as funcol
class M(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.w = torch.nn.Parameter(torch.randn(4, 4))
    def forward(self, x):
        if self.world == 1:
            return torch.relu(x @ self.w)
        w = funcol.broadcast(self.w, SRC, dist.group.WORLD)  # rank 0 holds the weight
        h = funcol.all_to_all_single(x, None, None, dist.group.WORLD)  # rows 2r, 2r+1 of each rank's chunk...
        h = funcol.all_to_all_single(h, None, None, dist.group.WORLD)  # ...and back: each rank's rows again
        return torch.relu(h @ w)
SRC = 0
def spec():
    return M(1)
def impl(rank, world):
    return M(world)
def inputs(rank, world):
    return (torch.randn(4 if rank is None else 4 // world, 4),)
def relation(world, backward):
    return {"inputs": {"x": "concat(" + ", ".join(f"x@{r}" for r in range(world)) + ", dim=0)", "w": "w@0"},
            "expect": {"out0": "concat(" + ", ".join(f"out0@{r}" for r in range(world)) + ", dim=0)"}}
'''


def test_all_to_all_and_broadcast_are_captured(tmp_path, plugins):
    """funcol's all_to_all_single exports as com.microsoft AllToAll, broadcast as ai.graphguard Broadcast; two
    all-to-alls at two ranks restore the row shards and the broadcast weight is rank 0's. Broadcast from the rank
    that does not hold the weight is flagged."""
    import onnx
    (tmp_path / "m.py").write_text(COLLECTIVES_MODEL)
    files = capture(tmp_path / "m.py", tmp_path / "ok")
    ops = {(n.domain, n.op_type) for n in onnx.load(files["impl"].split()[0]).graph.node}
    assert {("com.microsoft", "AllToAll"), ("ai.graphguard", "Broadcast")} <= ops, ops
    r = verify_here(plugins, files, replay=True)
    assert r.exit_code == 0 and r.replay["ok"], r.render()
    (tmp_path / "bad.py").write_text(COLLECTIVES_MODEL.replace("SRC = 0", "SRC = 1"))
    r = verify_here(plugins, capture(tmp_path / "bad.py", tmp_path / "bad"))
    assert r.exit_code == 1 and r.failure.op == "onnx.MatMul", r.render()
