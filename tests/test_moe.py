"""Mixture of experts (examples/moe-ep): expert parallelism and the tensor-parallel layout verify, forward and
backward; without dividing the aux loss by the world size the latter is flagged at the right operator; shares
of a replicated value; the MoE lemmas ("this proves that" and "this must not")."""
from __future__ import annotations

import importlib.util

import pytest

import graphguard
import graphguard.torch as ggt
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.relation import parse_relation_text

from conftest import EXAMPLES

_spec = importlib.util.spec_from_file_location("moe_ep", EXAMPLES / "moe-ep" / "model.py")
MOE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(MOE)


def _verify(parallel: str, aux_scale: bool = True, world: int = 2):
    s = ggt.capture(lambda r: MOE.spec(), lambda r: MOE.inputs(None, world), world_size=1, backward=True)
    d = ggt.capture(lambda r: MOE.MoE(world, parallel, aux_scale), lambda r: MOE.inputs(r, world),
                    world_size=world, backward=True)
    # (the expectations allow the aux loss and the router's gradient to stay the ranks' partial sums)
    rel = dict(MOE.relation(world, True, parallel), expect=MOE.expect(world, True))
    return graphguard.verify(s.graph(), d.graph(), rel, replay=True)


def test_expert_parallel_forward_and_backward():
    r = _verify("ep")
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert "out0 = concat(out0@0, out0@1, dim=0)" in lines
    assert "out1 = sum(out1@0, out1@1)" in lines  # the ranks' partial aux losses
    assert "grad.x = concat(grad.x@0, grad.x@1, dim=0)" in lines
    assert "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1)" in lines
    assert "grad.experts.3.w1 = grad.experts.1.w1@1" in lines  # expert 3 lives on rank 1
    assert r.replay["ok"]


def test_tp_aux_loss_divided_by_world_size_verifies():
    r = _verify("tp")
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert "out1 = sum(out1@0, out1@1)" in lines  # the ranks' shares aux / 2 add up to the aux loss
    assert "grad.x = concat(grad.x@0, grad.x@1, dim=0)" in lines
    assert "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1)" in lines
    assert "grad.experts.3.w1 = concat(grad.experts.3.w1@0, grad.experts.3.w1@1, dim=1)" in lines
    assert r.replay["ok"]


def test_aux_loss_not_divided_is_flagged_at_the_router_softmax_backward():
    r = _verify("tp", aux_scale=False)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    f = r.failure
    assert (f.op, f.node, f.loc) == ("aten._softmax_backward_data", "bw._softmax_backward_data", "model.py:72")
    # the gradient reaching it still maps (rank 0's both parts plus rank 1's experts' part) ...
    assert "sum(bw.add@0, bw.mul_10@1)" in f.input_relations["bw.add"]
    # ... but each rank's own input holds a whole copy of the aux-loss gradient
    assert "bw.add@1" in f.explored and f.replay["max_abs_diff"] > 1e-3
    assert r.replay["ok"]  # every relation found before the failure holds numerically


def _shares_graphs(plugins, factor):
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [4, 6])
    s.op("core.identity", ["X"], "Y", name="loss")
    s.output("Y")
    for r in range(2):
        d.input(f"X@{r}", [4, 6])
        d.op("core.scale", [f"X@{r}"], f"Y@{r}", factor=factor)
    d.output("Y@0", "Y@1")
    rel = parse_relation_text("inputs:\n  X: [X@0, X@1]\n", "rel", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def test_a_replicated_value_is_the_sum_of_its_shares(plugins):
    r = graphguard.verify(*_shares_graphs(plugins, "1/2"), allow_partial=["Y"], replay=True)
    assert r.verdict == "refines" and r.r_o_lines() == ["Y = sum(Y@0, Y@1)"]
    assert r.replay["ok"]


def test_copies_that_are_not_shares_do_not_add_up(plugins):
    r = graphguard.verify(*_shares_graphs(plugins, "1/4"), replay=True)
    assert r.verdict == "does-not-refine" and r.failure.node == "loss"
    assert r.failure.reason == "output Y maps only to tensors that are not outputs of G_d (X@0, X@1)"


def test_a_copy_times_one_is_a_copy_not_a_share(plugins):
    r = graphguard.verify(*_shares_graphs(plugins, "1"))
    assert r.verdict == "refines" and sorted(r.r_o_lines()) == ["Y = Y@0", "Y = Y@1"]


# what the MoE lemmas prove, and must not: lemma_packs/aten/proofs.py (tests/test_pack_proofs.py)
