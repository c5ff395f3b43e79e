"""examples/dp-grads: data-parallel gradients all-reduced across ranks, and its bug (summed, not averaged)."""
from __future__ import annotations

import pytest

from conftest import EXAMPLES, verify_model_file
from graphguard.testing import proves
from graphguard.ir.expr import to_text


def _verify(path, world, reduce=None, monkeypatch=None):
    if reduce is not None:
        monkeypatch.setenv("GG_DP_REDUCE", str(reduce))
    return verify_model_file(path, world)


@pytest.mark.parametrize("world,reduce", [(2, "avg"), (4, "avg"), (2, "presum")])
def test_every_rank_holds_the_sequential_loss_and_gradients(world, reduce, monkeypatch):
    """DDP's average (each rank's gradients are world x its slice until the all-reduce divides them: related up
    to that factor in between), and the loss divided before a summing all-reduce."""
    r = _verify(EXAMPLES / "dp-grads" / "model.py", world, reduce, monkeypatch)
    if (world, reduce) == (2, "avg"):
        assert [to_text(e) for e in r.relations["bw.sum_1"]] == ["scale(sum(bw.sum_1@0, bw.sum_1@1), factor=1/2)"]
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.expect["checked"] == 7 and r.replay["ok"]
    assert {"out0 = out0@0", f"grad.fc1.weight = grad.fc1.weight@{world - 1}", "grad.ln.bias = grad.ln.bias@0"} \
        <= set(r.r_o_lines())


def test_summed_gradients_are_flagged_at_the_mean_loss():
    r = _verify(EXAMPLES / "bugs" / "dp-grads-sum" / "model.py", 2)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert (r.failure.op, r.failure.outputs) == ("aten.mse_loss", ["mse_loss"])
    assert "output out0 is known only up to a constant factor" in r.failure.reason
    assert "scale(sum(mse_loss@0, mse_loss@1), factor=1/2)" in r.failure.reason
    assert r.failure.loc.startswith("model.py:")
    assert r.failure.replay["max_abs_diff"] > 1e-3
    assert r.failure.hint.startswith("the ranks hold 2 times the value G_s computes")
    assert "a sum where an average is meant" in r.failure.hint
    assert r.replay["ok"]  # what was related before the failure still holds numerically


# the ATen side of a factor (lemmas 540-553): only through an argument the operator is linear in
SHAPES = {"G": [4, 3], "X": [4, 3], "Y": [4, 3], "W": [3], "B": [3], "M": [4, 1], "R": [4, 1]}


@pytest.mark.parametrize("lhs,rhs", [
    ("aten.gelu_backward(scale(G, factor=1/2), X)", "scale(aten.gelu_backward(G, X), factor=1/2)"),
    ("aten.mse_loss_backward(scale(G, factor=1/4), X, Y, reduction=0)",
     "scale(aten.mse_loss_backward(G, X, Y, reduction=0), factor=1/4)"),
    ("aten.sum.dim_IntList(scale(G, factor=1/2), dim=[0])", "scale(aten.sum.dim_IntList(G, dim=[0]), factor=1/2)"),
    ("aten.mul.Tensor(X, scale(G, factor=2))", "scale(aten.mul.Tensor(X, G), factor=2)"),
])
def test_a_factor_moves_out_of_a_linear_argument(lhs, rhs):
    assert proves(lhs, rhs, SHAPES)


@pytest.mark.parametrize("lhs,rhs", [
    # gelu's derivative is not linear in the input, nor the squared error in the prediction
    ("aten.gelu_backward(G, scale(X, factor=1/2))", "scale(aten.gelu_backward(G, X), factor=1/2)"),
    ("aten.mse_loss_backward(G, scale(X, factor=1/2), Y, reduction=0)",
     "scale(aten.mse_loss_backward(G, X, Y, reduction=0), factor=1/2)"),
    ("aten.gelu(scale(X, factor=2))", "scale(aten.gelu(X), factor=2)"),
    # a sum of two halves with different factors is no scaled sum
    ("aten.add.Tensor(scale(X, factor=1/2), scale(Y, factor=1/4))", "scale(aten.add.Tensor(X, Y), factor=1/2)"),
])
def test_a_factor_never_moves_out_of_a_nonlinear_one(lhs, rhs):
    assert not proves(lhs, rhs, SHAPES)
