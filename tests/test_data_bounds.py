"""Slices at bounds the data decides: a grouped GEMM written as a loop over experts (HF's Aria,
``sequential_experts_gemm``) slices the permuted tokens at ``cumsum[e]:cumsum[e + 1]``, read with ``.item()``.
Capture keeps the 0-d tensors the bounds come from as operands (``aten.slice_at`` / ``aten.slice_scatter_at``)
and names each slice's length once per pair of bounds and sliced length; the engine equates two lengths only
where the bounds are equal tensors (lemma-free: congruence). HF's own AriaTextMoELayer, replicated on two ranks,
refines forward and backward; a rank that slices at other bounds is flagged, and its lengths stay apart."""
from __future__ import annotations

import functools
import types

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

import graphguard  # noqa: E402
import graphguard.torch as ggt  # noqa: E402
from conftest import EXAMPLES  # noqa: E402
from graphguard.passes import slices_of_concats  # noqa: E402
from graphguard.errors import InputError  # noqa: E402
from graphguard.frontends.fx.model_file import load_model_file  # noqa: E402
from graphguard.frontends.fx.relations import _forward_only  # noqa: E402
from graphguard.ir.builder import GraphBuilder  # noqa: E402
from graphguard.ir.scalar import Constraints  # noqa: E402
from graphguard.plugins import load_plugins  # noqa: E402

W = 2
REG = load_plugins().registry


# -- the operators ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("lo,hi", [(0, 3), (2, 5), (3, 3), (4, 1), (-2, 5), (-9, 2), (1, 99), (6, 7)])
def test_slice_at_reads_its_bounds_as_torch_slices(lo, hi):
    x = np.arange(30.0).reshape(6, 5)
    t = torch.from_numpy(x)
    want = t[lo:hi].numpy()
    op = REG.get("aten.slice_at")
    bounds = [np.array(lo), np.array(hi)]
    got = op.ref([x] + bounds, {"dim": 0, "length": 6, "count": len(want)})
    np.testing.assert_array_equal(got, want)
    with pytest.raises(Exception, match="between the bounds"):  # the graph's count is checked against the data
        op.ref([x] + bounds, {"dim": 0, "length": 6, "count": len(want) + 1})
    src = np.full((len(want), 5), -1.0)
    base = t.clone()
    base[lo:hi] = torch.from_numpy(src)
    scat = REG.get("aten.slice_scatter_at").ref([x, src] + bounds, {"dim": 0})
    np.testing.assert_array_equal(scat, base.numpy())
    if len(want):  # a source that does not fill the place is refused, not broadcast
        with pytest.raises(Exception, match="places between the bounds"):
            REG.get("aten.slice_scatter_at").ref([x, src[:-1]] + bounds, {"dim": 0})


def test_slice_at_along_a_later_dim_and_float_bounds_refused():
    x = np.arange(24.0).reshape(2, 3, 4)
    op = REG.get("aten.slice_at")
    got = op.ref([x, np.array(1), np.array(3)], {"dim": 2, "length": 4, "count": 2})
    np.testing.assert_array_equal(got, x[:, :, 1:3])
    with pytest.raises(Exception, match="not integers"):
        op.ref([x, np.array(1.0), np.array(3)], {"dim": 2, "length": 4, "count": 2})


def test_a_slice_of_a_concatenation_within_one_part_reads_that_part():
    cx = Constraints()
    b = GraphBuilder("g")
    b.input("a", [1], "int64")
    b.input("c", [4], "int64")
    b.op("core.concat", ["a", "c"], "cat", dim=0)
    b.op("core.slice", ["cat"], "first", dim=0, start=0, end=1)
    b.op("core.slice", ["cat"], "inside", dim=0, start=2, end=4)
    b.op("core.slice", ["cat"], "across", dim=0, start=0, end=2)  # must stay: it straddles both parts
    b.output("first", "inside", "across")
    g = b.build(REG, cx)
    first, inside, across, cat = "first", "inside", "across", "cat"
    assert slices_of_concats(g, REG, cx) == 2
    by_out = {n.outputs[0]: n for n in g.nodes}
    assert by_out[first].inputs == ["a"] and by_out[first].attrs["start"] == 0
    assert by_out[inside].inputs == ["c"] and (by_out[inside].attrs["start"], by_out[inside].attrs["end"]) == (1, 3)
    assert by_out[across].inputs == [cat]
    assert all(n in g.consumers["c"] for n in [by_out[inside]])


# -- HF's Aria MoE layer -------------------------------------------------------------------------------------
def _config():
    from transformers import AriaTextConfig
    return AriaTextConfig(hidden_size=16, intermediate_size=8, moe_num_experts=4, moe_topk=2,
                          moe_num_shared_experts=1, num_attention_heads=2, num_key_value_heads=2)


def _layer(rank, wrong_bounds_on=None):
    from transformers.models.aria.modeling_aria import AriaTextMoELayer, sequential_experts_gemm
    torch.manual_seed(0)
    layer = AriaTextMoELayer(_config())
    if rank == wrong_bounds_on:  # this rank reads each expert's tokens one expert late
        fc1 = layer.experts.fc1
        fc1.forward = types.MethodType(
            lambda self, x, tpe: sequential_experts_gemm(x, self.weight, torch.roll(tpe.cpu(), 1)), fc1)
    return layer


X = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(1))


@pytest.fixture(scope="module")
def aria_spec():
    return ggt.capture(_layer, (X,), backward=True)


def _verify(s, wrong_bounds_on=None, backward=True):
    if not backward:  # (the specification's forward part: no second capture)
        s = ggt.Captured(_forward_only(s.doc), s.relation)
    d = ggt.capture(lambda r: _layer(r, wrong_bounds_on), lambda r: (X,), world_size=W, backward=backward)
    names = [i["name"] for i in s.doc["inputs"]]
    rel = {"inputs": {n: [f"{n}@{r}" for r in range(W)] for n in names},
           "symbols": {**s.relation.get("symbols", {}), **d.relation.get("symbols", {})},
           "expect": {"out0": [f"out0@{r}" for r in range(W)]}}  # every rank holds the layer's output
    return d, graphguard.verify(s.graph(), d.graph(), rel, replay=wrong_bounds_on is None)


def test_capture_names_each_slice_length_once_per_bounds(aria_spec):
    g = aria_spec.graph()
    sl = [n for n in g.nodes if n.op == "aten.slice_at"]
    assert sl and all(len(n.inputs) == 3 and g.shape(n.inputs[1]) == () for n in sl)
    counts = {str(n.attrs["count"]) for n in sl}
    assert all(c.startswith("len_") for c in counts)
    # a length is at least 0 and at most the sliced dim (tokens x top-k = 12)
    assert all(aria_spec.relation["symbols"][c] == {"min": 0, "max": 12} for c in counts)
    # forward and backward slice the same bounds: fewer lengths than slices
    assert len(counts) < len(sl)
    assert any(n.op == "aten.slice_scatter_at" for n in g.nodes)


def test_hf_aria_moe_layer_refines_forward_and_backward(aria_spec):
    _, r = _verify(aria_spec)
    assert r.verdict == "refines", r.render()
    assert "out0 = out0@1" in r.r_o_lines() and "grad.experts.fc1.weight = grad.experts.fc1.weight@1" in r.r_o_lines()
    assert r.replay["ok"]
    # every rank's slice lengths are the specification's, and the certificate says so
    assert r.sizes and all(a.startswith("len_") and b.startswith("len_") for a, b in r.sizes)
    assert {a for a, _ in r.sizes if a.endswith("_r1")} and "slice lengths" in r.render()


def test_a_rank_slicing_at_other_bounds_is_flagged(aria_spec):
    d, r = _verify(aria_spec, wrong_bounds_on=1, backward=False)
    assert r.verdict == "does-not-refine", r.render()
    # flagged where the expectation fails (rank 1's output is not the layer's), and rank 1's first expert slices
    # are not the specification's: their lengths stay apart
    assert "not the expected out0@1" in r.render()
    # ... and the hint names where the two ranks' computations part: rank 1's roll of the token counts
    hint = r.failure.hint
    assert "until aten.roll (roll@1 at test_data_bounds.py" in hint and "the ranks part there" in hint
    rank1 = {str(n.attrs["count"]) for n in d.graph().nodes if n.op == "aten.slice_at"
             and n.outputs[0].endswith("@1") and n.module and "fc1" in n.module}
    equated = {a for a, _ in r.sizes} | {b for _, b in r.sizes}
    assert rank1 and not rank1 <= equated


def test_a_value_read_with_item_other_than_as_a_slice_bound_is_one_line():
    class M(torch.nn.Module):
        def forward(self, x):
            n = int((x > 0).sum().item())
            return x.new_zeros(n) + 1

    with pytest.raises(InputError, match=r"(decided by the data|data-dependent|reads a value the data decides)"):
        ggt.capture(lambda r: M(), (torch.randn(5),))


# -- the experts sharded across ranks (HF's sequential_experts_gemm with Megatron's f/g) -------------------------
MLP = load_model_file(EXAMPLES / "mlp-tp" / "model.py")  # (its _ReduceFromParallel: Megatron's g)


class _ShardedExperts(torch.nn.Module):
    """Aria's experts (router, histogram of expert ids, sort, HF's grouped GEMM loop) with fc1's columns and fc2's
    rows split over the ranks; ``skip``: no all-reduce of the rank's partial output."""

    def __init__(self, world=1, rank=0, skip=False):
        super().__init__()
        torch.manual_seed(0)
        self.router = torch.nn.Linear(8, 3, bias=False)
        self.w1 = torch.nn.Parameter(torch.randn(3, 8, 6).chunk(world, dim=2)[rank].clone())
        self.w2 = torch.nn.Parameter(torch.randn(3, 6, 8).chunk(world, dim=1)[rank].clone())
        self.world, self.skip = world, skip

    def forward(self, x):
        from transformers.models.aria.modeling_aria import sequential_experts_gemm
        top = torch.topk(self.router(x), k=1, dim=1).indices
        tpe = torch.histc(top.flatten().float(), bins=3, min=0, max=2).long()
        order = torch.argsort(top.view(-1))
        h = torch.relu(sequential_experts_gemm(x.index_select(0, order), self.w1, tpe))
        y = sequential_experts_gemm(h, self.w2, tpe)
        if self.world > 1 and not self.skip:
            y = MLP._ReduceFromParallel.apply(y)
        out = torch.zeros_like(y)
        return out.index_copy(0, order, y)


XS = torch.randn(6, 8, generator=torch.Generator().manual_seed(2))


@functools.lru_cache(maxsize=1)
def _sharded_spec():
    return ggt.capture(lambda r: _ShardedExperts(), (XS,), backward=True)


def _sharded(skip=False, backward=False):
    s = _sharded_spec()
    if not backward:
        s = ggt.Captured(_forward_only(s.doc), s.relation)
    d = ggt.capture(lambda r: _ShardedExperts(W, r, skip), lambda r: (XS,), world_size=W, backward=backward)
    rep = ["x", "router.weight"] + (["tangent.out0"] if backward else [])
    rel = {"inputs": {**{n: [f"{n}@{r}" for r in range(W)] for n in rep},
                      "w1": "concat(w1@0, w1@1, dim=2)", "w2": "concat(w2@0, w2@1, dim=1)"},
           "symbols": {**s.relation.get("symbols", {}), **d.relation.get("symbols", {})}}
    return graphguard.verify(s.graph(), d.graph(), rel, replay=not skip)


def test_experts_sharded_at_data_bounds_refine_forward_and_backward():
    """Each rank slices its column / row shard at the same bounds: lemmas 1360-1367 carry the concatenations
    and the ranks' partial sums through the slices and the writes back; the per-expert weight read ``w[e]``
    differentiates to ``where(arange == e, grad, zeros)``, cut with its zeros by family 1219."""
    r = _sharded(backward=True)
    assert r.verdict == "refines", r.render()
    lines = r.r_o_lines()
    assert "out0 = out0@0" in lines and r.replay["ok"]
    assert "grad.w1 = concat(grad.w1@0, grad.w1@1, dim=2)" in lines
    assert "grad.w2 = concat(grad.w2@0, grad.w2@1, dim=1)" in lines


def test_experts_sharded_at_data_bounds_without_the_all_reduce_are_flagged():
    r = _sharded(skip=True)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.op in ("aten.slice_scatter_at", "aten.slice_at", "aten.index_copy"), r.render()


# -- the lemmas, one line each: proving and must-not-prove (count: the slice's length, a symbol) ---------------
_B = {"LO": [], "HI": []}
_BD = {"LO": "int64", "HI": "int64"}
_C = {"C": {"min": 0, "max": 3}}


def _sa(x):
    return f"aten.slice_at({x}, LO, HI, dim=0, length=3, count=C)"


def _ss(base, src):
    return f"aten.slice_scatter_at({base}, {src}, LO, HI, dim=0)"


def _fill(n, v=0, op="full"):
    return (f"aten.zeros(size=[3, {n}], dtype=float32)" if op == "zeros"
            else f"aten.full(size=[3, {n}], fill_value={v}, dtype=float32)")


@pytest.mark.parametrize("lhs,rhs,wrong,shapes", [
    # 1360: a slice of the ranks' columns is the ranks' slices (kept in their places)
    (_sa("concat(A, B, dim=1)"), f"concat({_sa('A')}, {_sa('B')}, dim=1)", f"concat({_sa('B')}, {_sa('A')}, dim=1)",
     {"A": [3, 2], "B": [3, 1]}),
    # 1361: writes into the ranks' column pieces, each from its own piece of the source
    (_ss("concat(P, Q, dim=1)", "concat(A, B, dim=1)"), f"concat({_ss('P', 'A')}, {_ss('Q', 'B')}, dim=1)",
     f"concat({_ss('P', 'B')}, {_ss('Q', 'A')}, dim=1)", {"P": [3, 2], "Q": [3, 2], "A": ["C", 2], "B": ["C", 2]}),
    # 1362 / 1365: into a fill, cut where the source is -- with the fill's own value
    (_ss(_fill(3, op="zeros"), "concat(A, B, dim=1)"),
     f"concat({_ss(_fill(2, op='zeros'), 'A')}, {_ss(_fill(1, op='zeros'), 'B')}, dim=1)",
     f"concat({_ss(_fill(2, op='zeros'), 'A')}, {_ss(_fill(1, 1), 'B')}, dim=1)", {"A": ["C", 2], "B": ["C", 1]}),
    (_ss(_fill(3, 1), "concat(A, B, dim=1)"), f"concat({_ss(_fill(2, 1), 'A')}, {_ss(_fill(1, 1), 'B')}, dim=1)",
     f"concat({_ss(_fill(2, 1), 'A')}, {_ss(_fill(1), 'B')}, dim=1)", {"A": ["C", 2], "B": ["C", 1]}),
    # 1363: a write of partial sums over partial sums is the sum of the writes; a source written twice is not
    (_ss("sum(P, Q)", "sum(A, B)"), f"sum({_ss('P', 'A')}, {_ss('Q', 'B')})", f"sum({_ss('P', 'A')}, {_ss('Q', 'A')})",
     {"P": [3, 2], "Q": [3, 2], "A": ["C", 2], "B": ["C", 2]}),
    # 1364 / 1366: into zeros only (a fill of 1 would be counted twice)
    (_ss(_fill(2, op="zeros"), "sum(A, B)"), f"sum({_ss(_fill(2, op='zeros'), 'A')}, {_ss(_fill(2, op='zeros'), 'B')})",
     f"sum({_ss(_fill(2, op='zeros'), 'A')}, {_ss(_fill(2, 1), 'B')})", {"A": ["C", 2], "B": ["C", 2]}),
    (_ss(_fill(2), "sum(A, B)"), f"sum({_ss(_fill(2), 'A')}, {_ss(_fill(2), 'B')})",
     f"sum({_ss(_fill(2, 1), 'A')}, {_ss(_fill(2, 1), 'B')})", {"A": ["C", 2], "B": ["C", 2]}),
    # 1367: a buffer's gradient with the written rows zeroed, per rank piece -- zeros, not another value
    (_ss("concat(P, Q, dim=1)", "aten.full(size=[C, 3], fill_value=0, dtype=float32)"),
     f"concat({_ss('P', 'aten.full(size=[C, 2], fill_value=0, dtype=float32)')}, "
     f"{_ss('Q', 'aten.full(size=[C, 1], fill_value=0, dtype=float32)')}, dim=1)",
     f"concat({_ss('P', 'aten.full(size=[C, 2], fill_value=0, dtype=float32)')}, "
     f"{_ss('Q', 'aten.full(size=[C, 1], fill_value=1, dtype=float32)')}, dim=1)", {"P": [3, 2], "Q": [3, 1]}),
])
def test_data_bound_lemmas_prove_and_their_twins_do_not(lhs, rhs, wrong, shapes):
    from graphguard.testing import proves
    shapes = {**shapes, **_B}
    assert proves(lhs, rhs, shapes, symbols=_C, dtypes=_BD)
    assert not proves(lhs, wrong, shapes, symbols=_C, dtypes=_BD)
