"""The gradient step run after backward (capture's ``after_backward``), and a coalesced all-reduce read as one
all-reduce per gradient (:func:`graphguard.frontends.fx.capture.split_coalesced`)."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors  # noqa: E402

import graphguard  # noqa: E402
import graphguard.torch as ggt  # noqa: E402
from graphguard.errors import InputError  # noqa: E402
from graphguard.frontends.fx.capture import split_coalesced  # noqa: E402
from graphguard.frontends.fx.convert import Ref, TNode  # noqa: E402


class Scale(torch.nn.Module):
    """y = x * w + b on a row shard of x: w and b are replicated, their gradients partial per rank."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4))
        self.b = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return x * self.w + self.b


def _coalesced_step(order):
    """Sum the gradients across ranks as Megatron does: one all-reduce of their concatenation, copied back;
    ``order`` says which slice goes back into which gradient (``(0, 1)`` is right)."""
    def step(model, grads):
        if not dist.is_initialized() or dist.get_world_size() == 1:
            return
        gs = [grads["w"], grads["b"]]
        flat = _flatten_dense_tensors(gs)
        dist.all_reduce(flat)
        synced = _unflatten_dense_tensors(flat, gs)
        for g, i in zip(gs, order):
            g.copy_(synced[i])
    return step


def _verify(step):
    x = torch.randn(6, 4)
    s = ggt.capture(lambda r: Scale(), (x,), backward=True, after_backward=step)
    d = ggt.capture(lambda r: Scale(), lambda r: (x[3 * r:3 * r + 3],), world_size=2, backward=True,
                    after_backward=step)
    rel = ggt.input_relation(s, d, {"inputs": {
        "x": "concat(x@0, x@1, dim=0)", "w": ["w@0", "w@1"], "b": ["b@0", "b@1"],
        "tangent.out0": "concat(tangent.out0@0, tangent.out0@1, dim=0)"}})
    assert rel["expect"]["grad.w"] == ["grad.w@0", "grad.w@1"]  # a replicated parameter's gradient
    return d, graphguard.verify(s.graph(), d.graph(), rel, replay=True)


def test_coalesced_gradient_sum_after_backward_refines():
    d, r = _verify(_coalesced_step((0, 1)))
    assert sum(n["op"] == "core.all_reduce" for n in d.doc["nodes"]) == 2  # one per gradient
    assert r.verdict == "refines", r.failure
    assert {"grad.w = grad.w@0", "grad.w = grad.w@1", "grad.b = grad.b@1"} <= set(r.r_o_lines())
    assert r.replay["ok"]


def test_coalesced_gradients_copied_back_swapped_do_not_refine():
    """Each rank's gradient of w holds the sum of b's: R_o relates them crosswise, never w to w."""
    _, r = _verify(_coalesced_step((1, 0)))
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert "grad.w = grad.w@0" not in r.r_o_lines() and "grad.w = grad.b@0" in r.r_o_lines()
    assert {t for t, _, _ in r.expect["missing"]} == {"grad.w", "grad.b"}


def test_without_the_step_gradients_stay_partial():
    _, r = _verify(None)
    assert r.verdict == "does-not-refine" and "left as partial results" in r.failure.reason


def test_a_step_reading_more_than_gradients_is_refused():
    def step(model, grads):
        grads["w"].add_(model.b)
    with pytest.raises(InputError, match="reads .*b, not a gradient"):
        _verify(step)


def test_a_step_replacing_gradients_is_refused():
    def step(model, grads):
        grads["w"] = grads["w"] * 2  # not what the parameter's gradient becomes
    with pytest.raises(InputError, match="in place"):
        _verify(step)


def _coalesced(bounds):
    a = TNode("a", "placeholder", "a", (), {}, (4,), "float32")
    b = TNode("b", "placeholder", "b", (), {}, (2,), "float32")
    cat = TNode("cat", "call_function", "aten.cat.default", ([Ref("a"), Ref("b")],), {}, (6,), "float32")
    ar = TNode("ar", "call_function", "_c10d_functional.all_reduce.default", (Ref("cat"), "sum", "0"), {}, (6,))
    wait = TNode("wait", "call_function", "_c10d_functional.wait_tensor.default", (Ref("ar"),), {}, (6,))
    slices = [TNode(f"s{i}", "call_function", "aten.slice.Tensor", (Ref("wait"), 0, lo, hi), {}, (hi - lo,))
              for i, (lo, hi) in enumerate(bounds)]
    out = TNode("output", "output", "output", (tuple(Ref(s.name) for s in slices),), {})
    return [a, b, cat, ar, wait, *slices], out


def test_split_coalesced_on_piece_bounds():
    nodes, out = _coalesced([(0, 4), (4, 6)])
    got = {t.name: t for t in split_coalesced(nodes, out)}
    assert "cat" not in got and "ar" not in got
    assert got["ar.0"].args[0] == Ref("a") and got["ar.1"].args[0] == Ref("b")
    assert got["s0"].args == (Ref("ar.0"),) and got["s1"].args == (Ref("ar.1"),)


def test_split_coalesced_leaves_slices_across_pieces_alone():
    nodes, out = _coalesced([(0, 3), (3, 6)])  # not the pieces' bounds
    assert split_coalesced(nodes, out) == nodes
