"""ONNX against PyTorch (the onnx-aten bridge pack, lemma_packs/onnx_aten): the same model file captured by
torch.onnx.export and by the fx route meets in the e-graph in both directions (``--spec-frontend`` /
``--impl-frontend``); a bug on one side is flagged; the bridges prove what the two dialects share and nothing
they do not (integer division, operand order, the rows of a matmul).

A Linear with a bias is ``view``, ``addmm``, ``view`` in fx and ``MatMul``, ``Add`` on the 3-D rows in ONNX; fx's
form is normalised before proving to the product, the view, then the add of the bias (``OpDef.biased``), where
the two meet.
A division by a constant is ``mul.Scalar`` by its inverse in fx's normal form and ``Div`` by a constant tensor in
ONNX's: bridge 2143. Not yet: Gelu (the references differ in float32's last bits, which the fuzzer refuses)."""
from __future__ import annotations

import json

import pytest
from conftest import run_cli

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")

import graphguard  # noqa: E402
from graphguard.testing import proves  # noqa: E402
from graphguard.plugins import load_plugins  # noqa: E402
from lemma_packs.onnx_aten.proofs import SHAPES as S  # noqa: E402

MODEL = '''
import torch, torch.distributed as dist, torch.distributed._functional_collectives as funcol
class M(torch.nn.Module):
    def __init__(self, world=1):
        super().__init__()
        self.world = world
        self.up = torch.nn.Linear(8, 16 // world)  # fx: view, addmm, view (graphguard/passes/bias.py)
        self.down = torch.nn.Linear(16 // world, 8, bias=False)
    def forward(self, x):
        y = self.down(torch.sigmoid(self.up(x)) * self.up(x) / 3.0)  # (Div by a constant: fx's mul.Scalar)
        y = funcol.all_reduce(y, "sum", dist.group.WORLD) if self.world > 1 else y
        return torch.softmax(x - torch.relu(y), dim=-1)
def inputs(rank, world):
    return (torch.randn(2, 3, 8),)
def spec():
    return M(1)
def impl(rank, world):
    return M(world)
def relation(world, backward):
    ranks = range(world)
    part = lambda n, d: "concat(" + ", ".join(f"{n}@{k}" for k in ranks) + f", dim={d})"
    return {"inputs": {"x": [f"x@{k}" for k in ranks], "up.weight": part("up.weight", 0), "up.bias": part("up.bias", 0),
                       "down.weight": part("down.weight", 1)}}
'''


@pytest.fixture(scope="module")
def both(tmp_path_factory):
    """The model captured by the fx route and exported to ONNX (spec and both ranks)."""
    from graphguard.frontends.fx.model_file import capture_model_file as fx_capture
    from graphguard.frontends.onnx.capture import capture_model_file as onnx_capture
    d = tmp_path_factory.mktemp("onnx-aten")
    (d / "m.py").write_text(MODEL)
    fx = fx_capture(d / "m.py", d / "fx", 2)
    on = onnx_capture(d / "m.py", d / "onnx", 2)
    return {"fx": {k: str(v) for k, v in fx.items()}, "onnx": {k: str(v) for k, v in on.items()}, "dir": d}


def test_onnx_spec_is_refined_by_the_fx_implementation(both):
    r = graphguard.verify(both["onnx"]["spec"], [both["fx"]["impl"]], both["fx"]["relation"], spec_frontend="onnx",
                          impl_frontend="ir", replay=True)
    assert r.verdict == "refines", r.render()
    assert r.r_o_lines() == ["out0 = out0@0", "out0 = out0@1"] and r.replay["ok"]


def test_fx_spec_is_refined_by_the_onnx_implementation_from_the_cli(both):
    p = run_cli("verify", "--spec-frontend", "ir", "--impl-frontend", "onnx", "--spec", both["fx"]["spec"],
                "--impl", *both["onnx"]["impl"].split(), "--relation", both["fx"]["relation"], "--replay")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "out0 = out0@1" in p.stdout and "replay: ok" in p.stdout


def test_fx_implementation_without_its_all_reduce_is_flagged(both, tmp_path):
    """The PyTorch ranks with the all-reduce dropped (each keeps its partial sum) against the ONNX specification:
    flagged where the partial sums meet the relu."""
    impl = json.loads(open(both["fx"]["impl"]).read())
    i = next(i for i, n in enumerate(impl["nodes"]) if n["op"] == "core.all_reduce")
    n = impl["nodes"][i]
    impl["nodes"][i:i + 1] = [{"name": f"keep.{o}", "op": "core.identity", "inputs": [a], "outputs": [o], "attrs": {}}
                              for a, o in zip(n["inputs"], n["outputs"])]
    (tmp_path / "bad.gg.json").write_text(json.dumps(impl))
    r = graphguard.verify(both["onnx"]["spec"], [str(tmp_path / "bad.gg.json")], both["fx"]["relation"],
                          spec_frontend="onnx", impl_frontend="ir", replay=True)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.op == "onnx.Relu", r.render()
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_without_the_bridge_pack_the_dialects_do_not_meet(both):
    r = graphguard.verify(both["onnx"]["spec"], [both["fx"]["impl"]], both["fx"]["relation"], spec_frontend="onnx",
                          impl_frontend="ir", plugins=load_plugins(frozenset({"onnx-aten"})))
    assert r.verdict != "refines"


# what the bridges prove, and must not: lemma_packs/onnx_aten/proofs.py (tests/test_pack_proofs.py)


def _same_call(op, fixed, args):
    return f"{op}({', '.join(list(args) + [f'{k}={v}' for k, v in fixed.items()])})"


@pytest.mark.parametrize("k", range(10))
def test_every_table_bridge_proves_its_op_and_not_another(k):
    """Each row of the bridge table: the ONNX op is its ATen op, and not the next row's ATen op of the same arity."""
    from lemma_packs.onnx_aten.lemmas import _ARITY, SAME
    onnx_op, aten_op, fixed = SAME[k]
    n = _ARITY.get(onnx_op, 1)
    args = ["A", "B"][:n]
    other = next(r for r in SAME[k + 1:] + SAME[:k] if _ARITY.get(r[0], 1) == n)
    assert proves(_same_call(onnx_op, {}, args), _same_call(aten_op, fixed, args), S)
    assert not proves(_same_call(onnx_op, {}, args), _same_call(other[1], other[2], args), S)
