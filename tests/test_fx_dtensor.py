"""DTensor programs: input relations derived from placements, tangents, overrides; SymInt (dynamic) capture."""
from __future__ import annotations

import importlib.util

import pytest
import torch
import yaml
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.placement_types import _StridedShard

import graphguard
import graphguard.torch as ggt
from graphguard.testing import proves
from graphguard.errors import ForwardVerdict, InputError
from graphguard.frontends.fx.dtensor import Layout
from graphguard.frontends.fx.model_file import capture_model_file

from conftest import EXAMPLES, run_cli


def _model_file(path):
    spec = importlib.util.spec_from_file_location(f"m_{path.parent.name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


MLP = _model_file(EXAMPLES / "mlp-dtensor" / "model.py")


def _cat(name, world, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(world))}, dim={dim})"


def _capture(mod, world, backward, impl=None, dynamic=None, user=None):
    s = ggt.capture(lambda r: mod.spec(), lambda r: mod.inputs(None, world), backward=backward,
                    dynamic=dynamic and (lambda r: dynamic(None, world)))
    d = ggt.capture(impl or (lambda r: mod.impl(r, world)), lambda r: mod.inputs(r, world), world_size=world,
                    backward=backward, dynamic=dynamic and (lambda r: dynamic(r, world)))
    return s, d, ggt.input_relation(s, d, user)


# -- placements -> relation text ------------------------------------------------------------------

@pytest.mark.parametrize("placements,mesh,expected", [
    ((Shard(1),), [0, 1], "concat(w@0, w@1, dim=1)"),
    ((Shard(-1),), [0, 1, 2], "concat(w@0, w@1, w@2, dim=1)"),
    ((Replicate(),), [0, 1], ["w@0", "w@1"]),
    ((Partial(),), [0, 1], "sum(w@0, w@1)"),
    ((Shard(0), Replicate()), [[0, 1], [2, 3]], ["concat(w@0, w@2, dim=0)", "concat(w@1, w@3, dim=0)"]),
    ((Shard(0), Shard(1)), [[0, 1], [2, 3]], "concat(concat(w@0, w@1, dim=1), concat(w@2, w@3, dim=1), dim=0)"),
    ((Shard(0), Shard(0)), [[0, 1], [2, 3]], "concat(concat(w@0, w@1, dim=0), concat(w@2, w@3, dim=0), dim=0)"),
    ((Partial(), Shard(0)), [[0, 1], [2, 3]], "sum(concat(w@0, w@1, dim=0), concat(w@2, w@3, dim=0))"),
])
def test_placements_give_relations(placements, mesh, expected):
    assert Layout(placements, mesh, 2).relation("w") == expected


@pytest.mark.parametrize("placement", [_StridedShard(0, split_factor=2), Partial("avg"), Partial("max")])
def test_unsupported_placements_are_refused(placement):
    with pytest.raises(InputError, match="unsupported DTensor placement"):
        Layout((placement,), [0, 1], 2).relation("w")


def test_gradient_of_a_partial_output_is_replicated():
    assert Layout((Partial(),), [0, 1], 2).gradient().relation("t") == ["t@0", "t@1"]


_SHAPES = {"M0": [4, 8], "M1": [4, 8], "B": [8], "C": [8]}


def _partials(b0, f0, b1, f1):
    return (f"sum(aten.add.Tensor(M0, aten.mul.Scalar({b0}, other={f0})), "
            f"aten.add.Tensor(M1, aten.mul.Scalar({b1}, other={f1})))")


@pytest.mark.parametrize("lhs,ok", [
    (_partials("B", 0.5, "B", 0.5), True),  # RowwiseParallel's bias / W on each rank adds back up
    (_partials("B", 0.5, "C", 0.5), False),  # different biases
    (_partials("B", 0.5, "B", 0.25), False),  # shares that do not add up to 1
])
def test_bias_shares_of_partial_sums(lhs, ok):
    assert proves(lhs, "aten.add.Tensor(sum(M0, M1), B)", _SHAPES) == ok


# -- captured DTensor programs ----------------------------------------------------------------------

def test_mlp_relation_is_derived_from_placements():
    s, d, rel = _capture(MLP, 2, True)
    assert rel["inputs"] == {
        "x": ["x@0", "x@1"],  # ColwiseParallel's input hook: from_local(x, Replicate)
        "fc1.weight": _cat("fc1.weight", 2, 0), "fc1.bias": _cat("fc1.bias", 2, 0),
        "fc2.weight": _cat("fc2.weight", 2, 1), "fc2.bias": ["fc2.bias@0", "fc2.bias@1"],
        "tangent.out0": ["tangent.out0@0", "tangent.out0@1"],  # the output is replicated: so is its gradient
    }
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "refines", r.render()
    assert {"out0 = out0@0", f"grad.fc2.weight = {_cat('grad.fc2.weight', 2, 1)}", "grad.fc2.bias = grad.fc2.bias@1",
            f"grad.fc1.bias = {_cat('grad.fc1.bias', 2, 0)}"} <= set(r.r_o_lines())
    assert r.replay["ok"]


def test_mlp_world_size_4_forward():
    s, d, rel = _capture(MLP, 4, False)
    assert rel["inputs"]["fc2.weight"] == _cat("fc2.weight", 4, 1)
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines" and "out0 = out0@3" in r.r_o_lines()


class _Up(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)

    def forward(self, x):
        return torch.nn.functional.gelu(self.fc1(x))


def test_dtensor_output_states_its_tangent():
    """A DTensor output (use_local_output=False) is a column shard: so is its gradient, no forward run needed."""
    plan = {"fc1": ColwiseParallel(use_local_output=False)}
    s = ggt.capture(lambda r: _Up(), (torch.randn(4, 8),), backward=True)
    d = ggt.capture(lambda r: parallelize_module(_Up(), init_device_mesh("cpu", (2,)), plan),
                    lambda r: (torch.randn(4, 8),), world_size=2, backward=True)
    assert d.relation["inputs"]["tangent.out0"] == _cat("tangent.out0", 2, 1)
    r = graphguard.verify(s.graph(), d.graph(), ggt.input_relation(s, d), replay=True)
    assert r.verdict == "refines" and f"out0 = {_cat('out0', 2, 1)}" in r.r_o_lines() and r.replay["ok"]


class _Linear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.lin(x)


def _partial_input(r):
    plan = {"lin": PrepareModuleInput(input_layouts=(Partial(),), desired_input_layouts=(Replicate(),),
                                      use_local_output=True)}
    return parallelize_module(_Linear(), init_device_mesh("cpu", (2,)), plan)


def test_partial_input_is_a_sum_and_plain_parameters_need_the_users_relation():
    s = ggt.capture(lambda r: _Linear(), (torch.randn(3, 8),))
    d = ggt.capture(_partial_input, lambda r: (torch.randn(3, 8),), world_size=2)
    assert d.relation["inputs"] == {"x": "sum(x@0, x@1)"}
    with pytest.raises(InputError, match="no relation for input.*lin.weight, lin.bias"):
        ggt.input_relation(s, d)
    user = {"inputs": {"lin.weight": ["lin.weight@0", "lin.weight@1"], "lin.bias": ["lin.bias@0", "lin.bias@1"]}}
    r = graphguard.verify(s.graph(), d.graph(), ggt.input_relation(s, d, user), replay=True)
    assert r.verdict == "refines" and "out0 = out0@0" in r.r_o_lines() and r.replay["ok"]


def test_uneven_shard_is_refused():
    def uneven(r):  # 5 output features over 2 ranks: chunks of 3 and 2
        return parallelize_module(torch.nn.Linear(8, 5), init_device_mesh("cpu", (2,)), ColwiseParallel())
    with pytest.raises(InputError, match="weight: dim 0 of size 5 is sharded unevenly over 2 ranks"):
        ggt.capture(uneven, (torch.randn(3, 8),), world_size=2)


def test_uneven_shard_on_the_command_line(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(
        "import torch\nfrom torch.distributed.device_mesh import init_device_mesh\n"
        "from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module\n"
        "def spec():\n    return torch.nn.Linear(8, 5)\n"
        "def impl(rank, world):\n"
        "    return parallelize_module(torch.nn.Linear(8, 5), init_device_mesh('cpu', (world,)), ColwiseParallel())\n"
        "def inputs(rank, world):\n    return (torch.randn(3, 8),)\n")
    p = run_cli("capture", model, "--world-size", "2", "-o", tmp_path / "out")
    assert p.returncode == 2, p.stderr
    err = p.stderr.strip().splitlines()
    assert len(err) == 1 and "sharded unevenly" in err[0], p.stderr


class _Gather(torch.nn.Module):
    def forward(self, x):
        import torch.distributed as dist
        import torch.distributed._functional_collectives as funcol
        if dist.is_initialized():
            x = funcol.all_gather_tensor(x, 1, dist.group.WORLD)  # all_gather on dim 0 + split + cat on dim 1
        return torch.relu(x)


def test_gather_on_a_dim_is_folded_into_one_collective():
    s = ggt.capture(lambda r: _Gather(), (torch.randn(3, 8),))
    d = ggt.capture(lambda r: _Gather(), lambda r: (torch.randn(3, 4),), world_size=2)
    ops = [(n["op"], n["attrs"].get("dim")) for n in d.doc["nodes"] if n["op"].startswith("core.")]
    assert ("core.all_gather", 1) in ops and not any(op in ("core.split", "core.concat") for op, _ in ops)
    r = graphguard.verify(s.graph(), d.graph(), {"inputs": {"x": _cat("x", 2, 1)}}, replay=True)
    assert r.verdict == "refines" and "out0 = out0@1" in r.r_o_lines() and r.replay["ok"]


# -- model files: optional relation(), overrides, the relation written -------------------------------

def _with(tmp_path, extra: str):
    path = tmp_path / "model.py"
    path.write_text((EXAMPLES / "mlp-dtensor" / "model.py").read_text() + "\n\n" + extra + "\n")
    return path


def test_model_file_without_relation_writes_the_derived_one(tmp_path):
    files = capture_model_file(EXAMPLES / "mlp-dtensor" / "model.py", tmp_path, 2)
    rel = yaml.safe_load(files["relation"].read_text())
    assert rel == {"inputs": {"x": ["x@0", "x@1"], "fc1.weight": _cat("fc1.weight", 2, 0),
                              "fc1.bias": _cat("fc1.bias", 2, 0), "fc2.weight": _cat("fc2.weight", 2, 1),
                              "fc2.bias": ["fc2.bias@0", "fc2.bias@1"]},
                   "symbols": {"B": {"min": 2}}}
    r = graphguard.verify(files["spec"], files["impl"], files["relation"])
    assert r.verdict == "refines"


def test_hand_written_relation_overrides_per_tensor(tmp_path):
    path = _with(tmp_path, "def relation(world, backward):\n"
                           "    return {'inputs': {'fc2.bias': ['fc2.bias@1', 'fc2.bias@0']}, 'symbols': {'B': {'max': 64}}}")
    files = capture_model_file(path, tmp_path / "out", 2)
    rel = yaml.safe_load(files["relation"].read_text())
    assert rel["inputs"]["fc2.bias"] == ["fc2.bias@1", "fc2.bias@0"]  # overridden
    assert rel["inputs"]["fc2.weight"] == _cat("fc2.weight", 2, 1)  # still derived
    assert rel["symbols"] == {"B": {"min": 2, "max": 64}}  # narrowed, never widened
    assert graphguard.verify(files["spec"], files["impl"], files["relation"]).verdict == "refines"


def test_relation_file_named_by_the_model_file(tmp_path):
    (tmp_path / "rel.yaml").write_text("inputs:\n  fc1.bias: concat(fc1.bias@1, fc1.bias@0, dim=0)\n")
    files = capture_model_file(_with(tmp_path, "relation = 'rel.yaml'"), tmp_path / "out", 2)
    assert yaml.safe_load(files["relation"].read_text())["inputs"]["fc1.bias"] == "concat(fc1.bias@1, fc1.bias@0, dim=0)"
    r = graphguard.verify(files["spec"], files["impl"], files["relation"])
    assert r.verdict == "does-not-refine"  # the override is trusted: shards swapped, fc1 no longer maps


_PLAIN = ("import torch\n"
          "def spec():\n    return torch.nn.Linear(8, 4)\n"
          "def impl(rank, world):\n    return torch.nn.Linear(8, 4)\n"
          "def inputs(rank, world):\n    return (torch.randn(3, 8),)\n")


@pytest.mark.parametrize("extra,msg", [
    ("", r"no relation for input\(s\) weight, bias, args.0: no DTensor placement states them"),
    ("relation = 'missing.yaml'", r"missing.yaml: cannot read the relation file named in model.py"),
    ("relation = 42", r"relation must give a mapping"),
])
def test_model_file_relation_errors(tmp_path, extra, msg):
    (tmp_path / "model.py").write_text(_PLAIN + extra + "\n")
    with pytest.raises(InputError, match=msg):
        capture_model_file(tmp_path / "model.py", tmp_path / "out", 2)


def test_model_file_that_cannot_build_its_model(tmp_path):
    (tmp_path / "model.py").write_text(_PLAIN + "def impl(rank, world):\n    raise ValueError('bad plan\\nmore')\n")
    with pytest.raises(InputError, match="^capture of rank 0: building the model or its inputs failed: "
                                         "ValueError: bad plan$"):
        capture_model_file(tmp_path / "model.py", tmp_path / "out", 2)


# -- the GPT block with sequence parallelism ----------------------------------------------------------

def test_gpt_block_sequence_parallel_backward():
    """SequenceParallel norms, all-gathered attention/MLP inputs, reduce-scattered outputs: the tangent of the
    sequence-sharded output is derived from the forward certificate; LayerNorm weight grads stay Partial."""
    gpt = _model_file(EXAMPLES / "gpt-tp-dtensor" / "model.py")
    s, d, rel = _capture(gpt, 2, True)
    assert rel["inputs"]["x"] == _cat("x", 2, 1) and rel["inputs"]["tangent.out0"] == _cat("tangent.out0", 2, 1)
    assert rel["inputs"]["ln1.weight"] == ["ln1.weight@0", "ln1.weight@1"]
    # DTensor gathers and scatters on the sequence dim around dim-0 collectives: folded into dim-1 ones
    colls = {(n["op"], n["attrs"]["dim"]) for n in d.doc["nodes"] if n["op"] in ("core.all_gather", "core.reduce_scatter")}
    assert colls == {("core.all_gather", 1), ("core.reduce_scatter", 1)}
    assert not any(n["op"] == "core.split" for n in d.doc["nodes"])
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert "grad.ln1.weight = sum(grad.ln1.weight@0, grad.ln1.weight@1)" in lines
    assert f"grad.attn.q.weight = {_cat('grad.attn.q.weight', 2, 0)}" in lines


def test_each_rank_backward_slices_its_own_chunk():
    """The backward of a gathered output slices the rank's chunk. DTensor caches sharding propagation per
    op schema with the mesh that made it (rank 0's): capture must not let rank 1 reuse it."""
    def lin():
        torch.manual_seed(0)
        return torch.nn.Linear(4, 6, bias=False)
    s = ggt.capture(lambda r: lin(), (torch.randn(3, 4),), backward=True)
    d = ggt.capture(lambda r: parallelize_module(lin(), init_device_mesh("cpu", (2,)),
                                                 ColwiseParallel(output_layouts=Replicate())),
                    (torch.randn(3, 4),), world_size=2, backward=True)
    rel = ggt.input_relation(s, d, {"inputs": {"args.0": ["args.0@0", "args.0@1"]}})
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines", r.render()
    assert f"grad.weight = {_cat('grad.weight', 2, 0)}" in r.r_o_lines()


# -- SymInt capture -----------------------------------------------------------------------------------

class _Softmax(torch.nn.Module):  # softmax over the hidden features: wrong on column shards
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.softmax(self.fc1(x), dim=-1))


def _batch(rank, world):
    return {"x": {0: "B"}}


def test_dynamic_batch_gives_symbolic_shapes_and_verifies():
    s, d, rel = _capture(MLP, 2, True, dynamic=_batch)
    assert rel["symbols"] == {"B": {"min": 2}}
    assert {"name": "x@1", "shape": ["B", 8], "dtype": "float32"} in d.doc["inputs"]
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "refines", r.render()
    g = s.graph()
    assert [str(x) for x in g.shape("out0")] == ["B", "8"]  # the certificate holds for every batch size
    assert r.replay["ok"]


def test_dynamic_batch_mismatch_still_fails():
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    s = ggt.capture(lambda r: _Softmax(), lambda r: (torch.randn(4, 8),), dynamic={"x": {0: "B"}})
    d = ggt.capture(lambda r: parallelize_module(_Softmax(), init_device_mesh("cpu", (2,)), plan),
                    lambda r: (torch.randn(4, 8),), world_size=2, dynamic={"x": {0: "B"}})
    r = graphguard.verify(s.graph(), d.graph(), ggt.input_relation(s, d), replay=True)
    assert r.verdict == "does-not-refine"
    assert r.failure.op == "aten._softmax" and r.failure.replay["max_abs_diff"] > 1e-3


def test_tangent_of_a_failing_forward_is_not_guessed():
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    s = ggt.capture(lambda r: _Softmax(), (torch.randn(4, 8),), backward=True)
    d = ggt.capture(lambda r: parallelize_module(_Softmax(), init_device_mesh("cpu", (2,)), plan),
                    lambda r: (torch.randn(4, 8),), world_size=2, backward=True)
    with pytest.raises(ForwardVerdict, match="the forward does not refine, so the backward was not derived") as e:
        ggt.input_relation(s, d)  # (the forward's bug, with its report: not a relation to write)
    assert e.value.result.verdict == "does-not-refine" and e.value.result.failure.op == "aten._softmax"
    # with the output's expected relation stated, the tangent follows from it, and the verification reports
    # the forward where it breaks (the expectation is checked in R_o: never assumed)
    rel = ggt.input_relation(s, d, {"expect": {"out0": ["out0@0", "out0@1"]}})
    assert rel["inputs"]["tangent.out0"] == ["tangent.out0@0", "tangent.out0@1"]
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "does-not-refine" and r.failure.op == "aten._softmax", r.render()


def test_tangent_from_an_expectation_the_forward_does_not_meet_is_reported():
    """A correct forward (each rank holds the whole output) whose stated expectation is the ranks' sum: the
    tangent derived from the expectation, and the run fails on the expectation -- never certified."""
    plan = {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
    s = ggt.capture(lambda r: _ReluMLP(), (torch.randn(4, 8),), backward=True)
    d = ggt.capture(lambda r: parallelize_module(_ReluMLP(), init_device_mesh("cpu", (2,)), plan),
                    lambda r: (torch.randn(4, 8),), world_size=2, backward=True)
    rel = ggt.input_relation(s, d, {"expect": {"out0": "sum(out0@0, out0@1)"}})
    assert rel["inputs"]["tangent.out0"] == ["tangent.out0@0", "tangent.out0@1"]
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "does-not-refine", r.render()
    assert "not the expected sum(out0@0, out0@1)" in r.failure.reason
    ok = graphguard.verify(s.graph(), d.graph(), ggt.input_relation(s, d))  # (the forward decides the tangent)
    assert ok.verdict == "refines", ok.render()


class _ReluMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(8, 32), torch.nn.Linear(32, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class _NormMLP(torch.nn.Module):  # [batch, seq, hidden]
    def __init__(self):
        super().__init__()
        self.ln, self.fc1, self.fc2 = torch.nn.LayerNorm(8), torch.nn.Linear(8, 16), torch.nn.Linear(16, 8)

    def forward(self, x):
        return x + self.fc2(torch.relu(self.fc1(self.ln(x))))


def _sequence_parallel(r):
    plan = {"ln": SequenceParallel(), "fc1": ColwiseParallel(input_layouts=Shard(1)),
            "fc2": RowwiseParallel(output_layouts=Shard(1))}
    return parallelize_module(_NormMLP(), init_device_mesh("cpu", (2,)), plan)


def test_dynamic_sequence_shard_is_a_fraction_of_the_symbol():
    """Sequence shards of S/2: dynamo's local symbol (>= 2) becomes S/2, so S >= 4 and even."""
    s = ggt.capture(lambda r: _NormMLP(), (torch.randn(2, 8, 8),), dynamic={"x": {1: "S"}})
    d = ggt.capture(_sequence_parallel, lambda r: (torch.randn(2, 4, 8),), world_size=2, dynamic={"x": {1: "S/2"}})
    rel = ggt.input_relation(s, d)
    assert rel["inputs"]["x"] == _cat("x", 2, 1) and rel["symbols"] == {"S": {"min": 4, "multiple_of": 2}}
    assert {"name": "x@0", "shape": [2, "S/2", 8], "dtype": "float32"} in d.doc["inputs"]
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "refines" and r.r_o_lines() == [f"out0 = {_cat('out0', 2, 1)}"] and r.replay["ok"]


class _Branchy(torch.nn.Module):
    def __init__(self, kind):
        super().__init__()
        self.kind, self.w = kind, torch.nn.Parameter(torch.randn(8, 8))

    def forward(self, x):
        if self.kind == "eq":
            return x @ self.w if x.shape[0] != 4 else x
        if self.kind == "view":
            return (x.view(-1, 2, 8) @ self.w).reshape(-1, 8)
        return torch.cat([x[i:i + 1] for i in range(x.shape[0])]) @ self.w


@pytest.mark.parametrize("kind,symbols", [("eq", {"B": {"min": 5}}), ("view", {"B": {"min": 3, "multiple_of": 2}})])
def test_guards_become_constraints(kind, symbols):
    """TorchDynamo's guards narrow the symbol: B != 4 (example 8) gives B >= 5; a view in pairs needs B even
    and B//2 != 1."""
    c = ggt.capture(lambda r: _Branchy(kind), (torch.randn(8, 8),), dynamic={"x": {0: "B"}})
    assert c.relation["symbols"] == symbols


def test_specialised_dim_is_reported():
    with pytest.raises(InputError, match="specialised dim 0 of input 'x' to 8 although it was marked dynamic"):
        ggt.capture(lambda r: _Branchy("loop"), (torch.randn(8, 8),), dynamic={"x": {0: "B"}})
