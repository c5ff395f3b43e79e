"""examples/mlp-dp-tp: a Megatron TP MLP inside DDP on a 2-D (dp x tp) mesh, and its bug (the gradient
all-reduce over the TP group instead of the DP group)."""
from __future__ import annotations

import pytest

from conftest import EXAMPLES, verify_model_file
from graphguard.ir.expr import to_text


def _verify(path, world, tp=None, monkeypatch=None):
    if tp is not None:
        monkeypatch.setenv("GG_TP", str(tp))
    return verify_model_file(path, world)


@pytest.mark.parametrize("world,tp", [(4, 2), (8, 4)])
def test_every_rank_logs_the_loss_and_holds_its_gradient_slice(world, tp, monkeypatch):
    """Batch over the DP axis, weights over the TP axis; DDP's avg over the DP group takes back the factor the
    local backward leaves (the gradient of a DP group's pieces is related up to 1/dp in between)."""
    r = _verify(EXAMPLES / "mlp-dp-tp" / "model.py", world, tp, monkeypatch)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    assert r.expect["checked"] == 2 * world + 3
    lines = set(r.r_o_lines())
    assert {f"out0 = out0@{world - 1}", f"grad.fc2.bias = grad.fc2.bias@{world - 1}"} <= lines
    if world == 4:
        assert {"grad.fc1.weight = concat(grad.fc1.weight@0, grad.fc1.weight@1, dim=0)",
                "grad.fc2.weight = concat(grad.fc2.weight@0, grad.fc2.weight@1, dim=1)"} <= lines
        # the batch is concatenated over a DP group {0,2} / {1,3}, replicated across the TP pair
        assert {to_text(e) for e in r.relations["y"]} == {"concat(y@0, y@2, dim=0)", "concat(y@1, y@3, dim=0)"}


def test_gradients_averaged_over_the_tp_group_are_flagged():
    r = _verify(EXAMPLES / "bugs" / "dp-tp-wrong-group" / "model.py", 4)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    # the factor 1/dp the local backward leaves is never taken back: no G_d all-reduce sums over a DP group
    assert (r.failure.op, r.failure.outputs) == ("aten.mse_loss_backward", ["bw.mse_loss_backward"])
    assert "output grad.fc1.weight is known only up to a constant factor" in r.failure.reason
    assert "sum(bw.mm_3@0, bw.mm_3@2)" in r.failure.reason
    assert r.failure.loc.startswith("model.py:")
    # no G_d tensor has the failing (whole-batch) shape: the replay measures the gradient expected instead
    assert r.failure.replay["candidate"] == "concat(grad.fc1.weight@0, grad.fc1.weight@1, dim=0) (expected)"
    assert r.failure.replay["max_abs_diff"] > 1e-3
    assert r.replay["ok"]  # what was related before the failure still holds numerically
    assert {m[0] for m in r.expect["missing"]} == {"grad.fc1.weight", "grad.fc1.bias", "grad.fc2.weight",
                                                   "grad.fc2.bias"}
