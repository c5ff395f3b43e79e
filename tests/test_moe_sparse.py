"""Dropless (sparse) MoE dispatch: ``torch.where(idx == e)`` is an ``aten.nonzero`` whose row count the data
decides. Capture names that count (a symbol per node, range 0..numel); the engine proves two counts equal
only where the e-graph holds both nonzeros of one e-class of data, and says so in the certificate. The
all-gather expert-parallel and tensor-parallel layouts of examples/moe-ep verify forward and backward; a
rank that selects tokens by its local expert index is flagged; unequal data never gets one size."""
from __future__ import annotations

import importlib.util

import pytest

import graphguard
import graphguard.torch as ggt
from graphguard.testing import proves
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.relation import parse_relation_text

from conftest import EXAMPLES, verify_model_file

_spec = importlib.util.spec_from_file_location("moe_ep_sparse", EXAMPLES / "moe-ep" / "model.py")
MOE = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(MOE)


def _verify(parallel: str, world: int = 2):
    s = ggt.capture(lambda r: MOE.MoE(1, dispatch="sparse"), lambda r: MOE.inputs(None, world), backward=True)
    d = ggt.capture(lambda r: MOE.MoE(world, parallel, dispatch="sparse", rank=r), lambda r: MOE.inputs(r, world),
                    world_size=world, backward=True)
    rel = dict(MOE.relation(world, True, parallel), expect=MOE.expect(world, True))  # (partial: see moe-ep)
    return s, d, graphguard.verify(s.graph(), d.graph(), rel, replay=True)


def test_nonzero_is_captured_with_a_data_size_symbol():
    import torch
    s = ggt.capture(lambda r: MOE.MoE(1, dispatch="sparse"), (torch.randn(MOE.TOKENS, MOE.HIDDEN),))
    g = s.graph()
    nz = [n for n in g.nodes if n.op == "aten.nonzero"]
    assert len(nz) == MOE.EXPERTS  # one token selection per expert
    count = str(nz[0].attrs["count"])
    assert count.startswith("nnz_") and g.shape(nz[0].outputs[0]) == (nz[0].attrs["count"], 2)
    # a count is at least 0 and at most the number of entries tested (tokens x top-k)
    assert s.relation["symbols"][count] == {"min": 0, "max": MOE.TOKENS * MOE.TOPK}


def test_all_gather_expert_parallel_sparse_dispatch_forward_and_backward():
    _, _, r = _verify("ag")
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert "out0 = concat(out0@0, out0@1, dim=0)" in lines
    assert "out1 = sum(out1@0, out1@1)" in lines
    assert "grad.x = concat(grad.x@0, grad.x@1, dim=0)" in lines
    assert "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1)" in lines
    assert "grad.experts.3.w1 = grad.experts.1.w1@1" in lines  # expert 3 lives on rank 1
    # the certificate names each rank's token count of an expert as the specification's
    assert ("nnz_nonzero_r1", "nnz_nonzero_2") in r.sizes and len(r.sizes) == MOE.EXPERTS
    assert "nnz_nonzero_r1 = nnz_nonzero_2" in r.render() and r.to_dict()["sizes"]
    assert r.replay["ok"]


def test_tensor_parallel_experts_sparse_dispatch_forward_and_backward():
    _, _, r = _verify("tp")
    assert r.verdict == "refines", r.render()
    assert "grad.experts.3.w1 = concat(grad.experts.3.w1@0, grad.experts.3.w1@1, dim=1)" in r.r_o_lines()
    assert r.replay["ok"]


def test_all_gather_expert_parallel_sparse_dispatch_at_world_size_4():
    # the router's gradient reaches the softmax backward as eight per-rank terms summed in the
    # specification's order; it is regrouped into the ranks' own sums
    _, _, r = _verify("ag", world=4)
    assert r.verdict == "refines", r.render()
    assert "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1, grad.router.weight@2, " \
           "grad.router.weight@3)" in r.r_o_lines()
    assert r.replay["ok"]


def test_sparse_dispatch_needs_a_replicated_routing_layout():
    with pytest.raises(ValueError, match="MOE_PARALLEL=ag or tp"):
        MOE.MoE(2, "ep", dispatch="sparse")


def test_local_expert_index_bug_is_flagged_at_the_token_selection():
    r = verify_model_file(EXAMPLES / "bugs" / "moe-local-expert-id" / "model.py", 2)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    f = r.failure
    # expert 2 (rank 1's first) is the first no rank selects tokens for
    assert (f.op, f.loc) == ("aten.eq.Scalar", "model.py:95")
    assert f.input_relations["topk#1"] == ["topk#1@0", "topk#1@1"]
    assert f.replay["max_abs_diff"] > 0
    assert r.replay["ok"]


# -- sizes the data decides: proved equal only for equal data -----------------------------------------

def _nonzero_graphs(plugins, impl_op: str | None):
    """G_s: nonzero(X), its rows gathered; G_d: the same of X@0, or of ``impl_op``(X@0) when given."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=1)
    s.input("X", [6, 2])
    s.input("W", [6, 3])
    s.op("aten.nonzero", ["X"], "I", count="n0")
    s.op("core.slice", ["I"], "I0", dim=1, start=0, end=1)
    s.op("core.reshape", ["I0"], "i", shape=["n0"])
    s.op("aten.index.Tensor", ["W", "i"], "Y", absent=[])
    s.output("Y")
    d.input("X@0", [6, 2])
    d.input("W@0", [6, 3])
    src = "X@0"
    if impl_op is not None:
        src = d.op(impl_op, ["X@0"], "Z@0")
    d.op("aten.nonzero", [src], "I@0", count="n1")
    d.op("core.slice", ["I@0"], "I0@0", dim=1, start=0, end=1)
    d.op("core.reshape", ["I0@0"], "i@0", shape=["n1"])
    d.op("aten.index.Tensor", ["W@0", "i@0"], "Y@0", absent=[])
    d.output("Y@0")
    rel = parse_relation_text("inputs:\n  X: X@0\n  W: W@0\nsymbols:\n  n0: {min: 0, max: 12}\n"
                              "  n1: {min: 0, max: 12}\n", "rel", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def test_nonzero_of_equal_data_has_one_size(plugins):
    r = graphguard.verify(*_nonzero_graphs(plugins, None), replay=True)
    assert r.verdict == "refines" and r.r_o_lines() == ["Y = Y@0"]
    assert r.sizes == [("n1", "n0")]
    assert r.replay["ok"]


@pytest.mark.parametrize("op", ["aten.relu", "aten.sigmoid"])
def test_nonzero_of_other_data_keeps_its_own_size(plugins, op):
    # other data (relu zeroes entries, sigmoid none): no size is equated and nothing downstream maps
    r = graphguard.verify(*_nonzero_graphs(plugins, op), replay=True)
    assert r.verdict == "does-not-refine" and r.failure.op == "aten.nonzero"
    assert r.sizes == []


SHAPES = {"A": [6, 3], "B": [6, 3], "X": [6, 3], "Y": [4, 3], "V": [4, 3], "I": [4]}
_IA = "dim=0, alpha=1"
_Z = "aten.full(size=[6, 3], fill_value=0, dtype=float32)"

PROVES = [
    (f"aten.index_add(sum(A, B), I, Y, {_IA})", f"sum(A, aten.index_add(B, I, Y, {_IA}))"),
    (f"aten.index_add(sum(A, B), I, sum(Y, V), {_IA})",
     f"sum(aten.index_add(A, I, Y, {_IA}), aten.index_add(B, I, V, {_IA}))"),
    (f"aten.index_add({_Z}, I, sum(Y, V), {_IA})",
     f"sum(aten.index_add({_Z}, I, Y, {_IA}), aten.index_add({_Z}, I, V, {_IA}))"),
    # rows added into x split off as a partial sum of their own where those rows are added into zeros too
    # (constrained: the zeros term is there, on the right)
    (f"aten.index_add(A, I, V, {_IA})", f"sum(A, aten.index_add({_Z}, I, V, {_IA}))"),
]

MUST_NOT_PROVE = [
    # the accumulated-into tensor counts once, not once per summand
    (f"aten.index_add(sum(A, B), I, Y, {_IA})", f"sum(aten.index_add(A, I, Y, {_IA}), aten.index_add(B, I, Y, {_IA}))"),
    # rows added into x are not rows added into zeros
    (f"aten.index_add(X, I, sum(Y, V), {_IA})", f"sum(aten.index_add(X, I, Y, {_IA}), aten.index_add(X, I, V, {_IA}))"),
    # a write (scatter) into a non-zero tensor is not linear in what it writes
    ("aten.scatter.src(X, aten.full(size=[6, 3], fill_value=0, dtype=int64), sum(A, B), dim=0)",
     "sum(aten.scatter.src(X, aten.full(size=[6, 3], fill_value=0, dtype=int64), A, dim=0), "
     "aten.scatter.src(X, aten.full(size=[6, 3], fill_value=0, dtype=int64), B, dim=0))"),
]


@pytest.mark.parametrize("lhs,rhs", PROVES)
def test_proves(lhs, rhs):
    assert proves(lhs, rhs, SHAPES)


@pytest.mark.parametrize("lhs,rhs", MUST_NOT_PROVE)
def test_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, SHAPES)
