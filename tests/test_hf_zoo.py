"""HF transformers' own tensor-parallel plans on HF's own model code (examples/hf-zoo; the whole zoo is
bench/hf_zoo.py): eight architectures verify at TP=2 (Qwen3, Phi-3 and Mistral forward and backward), and
plans that are wrong -- a per-head norm whose weight gradients are never summed, an all-reduce of per-head
values, MoE experts whose partial outputs are not all-reduced -- are flagged at the operator where the
values part. Also the constructs these models brought: HF's backward hook translated, strided slices,
empty concat parts, _StridedShard placements, and their lemmas (14xx, 18xx)."""
from __future__ import annotations

import functools
import importlib.util

import numpy as np
import pytest

pytest.importorskip("transformers")

import torch  # noqa: E402

import graphguard  # noqa: E402
import graphguard.torch as ggt  # noqa: E402
from conftest import EXAMPLES  # noqa: E402
from graphguard.testing import proves  # noqa: E402
from graphguard.engine.replay import run_graph  # noqa: E402
from graphguard.errors import InputError  # noqa: E402
from graphguard.frontends.fx.relations import _forward_only  # noqa: E402

W = 2
_spec = importlib.util.spec_from_file_location("m_hf_zoo", EXAMPLES / "hf-zoo" / "model.py")
Z = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(Z)
Z.TINY.update(num_hidden_layers=1, first_k_dense_replace=0)  # one layer (a MoE one where there are experts)
GATHERED = [f"out0 = out0@{r}" for r in range(W)]  # lm_head colwise_gather_output: every rank holds the logits


@functools.lru_cache(maxsize=4)  # (the same specification serves a proving test and the bug tests)
def _spec_of(mt, backward=False):
    return ggt.capture(lambda r: Z.spec(mt), lambda r: Z.inputs(None, W, mt), backward=backward)


def _impl_of(mt, backward=False, override=None):
    return ggt.capture(lambda r: Z.impl(r, W, override, mt=mt), lambda r: Z.inputs(r, W, mt), world_size=W,
                       backward=backward)


def _verify(s, d, mt, backward=False, override=None):
    user = Z.relation(W, backward, override, mt=mt)  # (only the tensors the captured program reads)
    names = {i["name"] for i in s.doc["inputs"]}
    user = dict(user, inputs={k: v for k, v in user["inputs"].items() if k in names})
    return graphguard.verify(s.graph(), d.graph(), ggt.input_relation(s, d, user))


def _forward(c):
    return ggt.Captured(_forward_only(c.doc), c.relation)


def _forward_then_backward(s, d, mt):
    """The forward alone refines (logits gathered on every rank), then forward + backward with every
    expectation the plan states met; the latter's result."""
    fwd = _verify(_forward(s), _forward(d), mt)
    assert fwd.verdict == "refines", fwd.failure
    assert fwd.r_o_lines() == GATHERED
    r = _verify(s, d, mt, backward=True)
    assert r.verdict == "refines", r.failure
    assert r.expect["checked"] > 0 and not r.expect["missing"]
    return r


@pytest.mark.parametrize("mt", ["gemma", "qwen2", "gpt2", "mixtral", "deepseek_v3",
                                pytest.param("deepseek_v2", marks=pytest.mark.slow),
                                pytest.param("qwen3_next", marks=pytest.mark.slow)])
def test_hf_plan_forward_verifies(mt):
    """Gemma, Qwen2 (q/k/v biases), GPT-2 (vocabulary-parallel embedding), Mixtral (packed_colwise experts:
    _StridedShard), DeepSeek-V3 (MoE experts, shared experts, group-limited routing), DeepSeek-V2 (RoPE as a
    complex rotation), Qwen3-Next (gated delta net: short convolutions, a triangular solve)."""
    r = _verify(_spec_of(mt), _impl_of(mt), mt)
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == GATHERED


@pytest.mark.parametrize("mt", ["qwen3", pytest.param("phi3", marks=pytest.mark.slow),
                                pytest.param("mistral", marks=pytest.mark.slow),
                                pytest.param("mixtral", marks=pytest.mark.slow)])
def test_hf_plan_forward_and_backward_verify(mt):
    """Qwen3 (q_norm/k_norm replicated_with_grad_allreduce: HF's backward hook, translated), Phi-3 (packed
    qkv_proj / gate_up_proj gathered, then rowwise_split_input), Mistral (sliding-window mask), Mixtral
    (packed experts: each rank's gate_up_proj gradient, one bmm, holds its gate and up columns -- lemma 132).
    Every gradient is laid out like its parameter: the replicated norms' gradients summed over the ranks."""
    r = _forward_then_backward(_spec_of(mt, backward=True), _impl_of(mt, backward=True), mt)
    if mt == "qwen3":
        g = "grad.lm.model.layers.0.self_attn.q_norm.weight"
        assert [x for x in r.r_o_lines() if x.startswith(g + " ")] == [f"{g} = {g}@{i}" for i in range(W)]


def test_per_head_norm_without_its_gradient_all_reduce_is_flagged():
    """Qwen3's plan with q_norm/k_norm dropped: each rank's norm weights see only its heads, so their
    gradients stay partial sums -- flagged at the norm's weight-gradient reduction."""
    drop = {"model.layers.*.self_attn.q_norm": None, "model.layers.*.self_attn.k_norm": None}
    mt = "qwen3"
    r = _verify(_spec_of(mt, backward=True), _impl_of(mt, backward=True, override=drop), mt, True, drop)
    assert r.verdict == "does-not-refine"
    assert r.failure.op == "aten.sum.dim_IntList" and r.failure.loc.startswith("modeling_qwen3.py")
    assert r.failure.partial_output == "grad.lm.model.layers.0.self_attn.q_norm.weight"
    assert "missing all-reduce" in r.failure.reason


APERTUS_FIX = {"model.layers.*.mlp.act_fn": "replicated_with_grad_allreduce"}


def test_apertus_plan_leaves_the_xielu_gradients_partial():
    """A bug in HF's own plan (transformers 5.17, configuration_apertus.py): Apertus's MLP activation is xIELU
    with learnable ``alpha_p`` / ``alpha_n``, applied to the column-sharded up projection; the plan gives q_norm /
    k_norm ``replicated_with_grad_allreduce`` but not ``mlp.act_fn``, so each rank's alpha gradients are its
    shard's partial sums and the ranks' replicated alphas drift apart once an optimizer steps. Flagged at the
    gradient's reduction in xIELU's forward line, module ``act_fn``, as a missing all-reduce."""
    mt = "apertus"
    r = _verify(_spec_of(mt, backward=True), _impl_of(mt, backward=True), mt, True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert r.failure.op == "aten.sum.dim_IntList" and r.failure.loc.startswith("modeling_apertus.py")
    assert r.failure.partial_output.startswith("grad.lm.model.layers.0.mlp.act_fn.alpha_")
    assert "missing all-reduce" in r.failure.reason


@pytest.mark.slow
def test_apertus_plan_with_the_act_fn_gradient_all_reduce_verifies():
    """The one-line fix (``mlp.act_fn``: ``replicated_with_grad_allreduce``) verifies, every alpha gradient the
    same on each rank."""
    mt = "apertus"
    r = _verify(_spec_of(mt, backward=True), _impl_of(mt, backward=True, override=APERTUS_FIX), mt, True, APERTUS_FIX)
    assert r.verdict == "refines", r.failure
    g = "grad.lm.model.layers.0.mlp.act_fn.alpha_p"
    assert [x for x in r.r_o_lines() if x.startswith(g + " ")] == [f"{g} = {g}@{i}" for i in range(W)]


def test_all_reduce_style_on_per_head_values_is_flagged():
    """A wrong style: ``all_reduce`` on q_norm sums the ranks' different heads. Flagged where the summed
    query is first used (RoPE)."""
    wrong, mt = {"model.layers.*.self_attn.q_norm": "all_reduce"}, "qwen3"
    r = _verify(_spec_of(mt), _impl_of(mt, override=wrong), mt, False, wrong)
    assert r.verdict == "does-not-refine"
    assert r.failure.op == "aten.mul.Tensor" and r.failure.loc.startswith("modeling_qwen3.py")
    assert any("all_reduce" in t for t in r.failure.explored)


def test_moe_experts_without_their_output_all_reduce_are_flagged(monkeypatch):
    """HF's moe_tp_experts style with its all-reduce dropped: every rank adds only its share of the experts'
    output to the residual stream; flagged at the first operator the partial sum cannot pass (the next
    RMSNorm's square)."""
    from transformers.distributed import tensor_parallel as tp
    mt = "mixtral"
    s = _spec_of(mt)
    monkeypatch.setattr(tp.MoeExpertsParallel, "transform_output_post_forward",
                        lambda self, module, output, mesh, source=None: output)
    r = _verify(s, _impl_of(mt), mt)
    assert r.verdict == "does-not-refine"
    assert r.failure.op == "aten.pow.Tensor_Scalar" and r.failure.loc.startswith("modeling_mixtral.py")
    assert any(e.startswith("sum(") for exprs in r.failure.input_relations.values() for e in exprs)


@pytest.fixture
def grouped_experts(monkeypatch):
    """HF's default experts (``grouped_mm``) in bfloat16, as HF runs them compiled: ``torch._grouped_mm``."""
    monkeypatch.setattr(Z, "EXPERTS", "grouped_mm")
    monkeypatch.setattr(Z, "DTYPE", torch.bfloat16)


def test_hf_default_grouped_experts_verify_forward(grouped_experts):
    """Qwen3-MoE with HF's default experts, forward (inference): ``_grouped_mm`` column- then row-parallel."""
    mt = "qwen3_moe"
    s = ggt.capture(lambda r: Z.spec(mt), lambda r: Z.inputs(None, W, mt))
    assert any(n["op"] == "aten._grouped_mm" for n in s.doc["nodes"])
    r = _verify(s, _impl_of(mt), mt)
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == GATHERED


@pytest.mark.slow
def test_hf_default_grouped_experts_verify_forward_and_backward(grouped_experts):
    """Qwen3-MoE with HF's default experts: tokens sorted by expert, ``_grouped_mm`` over offsets the routing
    decides (the same on every rank), the packed gate/up projection column-parallel and the down projection
    row-parallel (its partial sums through the sentinel ``masked_fill`` and the gather back to token order),
    then the experts' all-reduce; backward: the grouped weight-gradient products (lemmas 1900-1904)."""
    mt = "qwen3_moe"
    s = ggt.capture(lambda r: Z.spec(mt), lambda r: Z.inputs(None, W, mt), backward=True)
    assert any(n["op"] == "aten._grouped_mm" for n in s.doc["nodes"])
    r = _forward_then_backward(s, _impl_of(mt, backward=True), mt)
    g = "grad.lm.model.layers.0.mlp.experts.down_proj"
    assert f"{g} = concat({g}@0, {g}@1, dim=2)" in r.r_o_lines()


def test_hf_grouped_experts_without_their_output_all_reduce_are_flagged(grouped_experts, monkeypatch):
    """The same experts with moe_tp_experts' all-reduce dropped: each rank keeps its down projection's partial
    sum; flagged after the experts, not certified."""
    from transformers.distributed import tensor_parallel as tp
    mt = "qwen3_moe"
    s = ggt.capture(lambda r: Z.spec(mt), lambda r: Z.inputs(None, W, mt))
    monkeypatch.setattr(tp.MoeExpertsParallel, "transform_output_post_forward",
                        lambda self, module, output, mesh, source=None: output)
    r = _verify(s, _impl_of(mt), mt)
    assert r.verdict == "does-not-refine"
    assert r.failure.loc.startswith("modeling_qwen3_moe.py")
    assert any(e.startswith("sum(") for exprs in r.failure.input_relations.values() for e in exprs)


# -- module backward hooks --------------------------------------------------------------------------


class _Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4))

    def forward(self, x):
        return x * self.w


def test_an_unknown_backward_hook_is_refused_naming_the_module():
    def build(r):
        m = torch.nn.Sequential(_Scale())
        m[0].register_full_backward_hook(lambda mod, gi, go: None)
        return m
    with pytest.raises(InputError, match=r"module '0' has a backward hook \(.*test_hf_zoo.*\), which TorchDynamo"):
        ggt.capture(build, (torch.randn(2, 4),))


def test_a_backward_pre_hook_is_refused():
    def build(r):
        m = _Scale()
        m.register_full_backward_pre_hook(lambda mod, go: None)
        return m
    with pytest.raises(InputError, match="backward pre-hook"):
        ggt.capture(build, (torch.randn(2, 4),))


# -- strided slices ---------------------------------------------------------------------------------


class _Strided(torch.nn.Module):
    def forward(self, x):
        return torch.cat([x[..., ::2], x[..., 1::2], x[:, 1:7:3], x[:, 2::4]], dim=-1) * 2


def test_strided_slices_and_their_backward_compute_what_torch_does(plugins):
    x = torch.randn(3, 8)
    c = ggt.capture(lambda r: _Strided(), (x.clone().requires_grad_(True),), backward=True)
    g = c.graph(plugins)
    t = np.random.default_rng(0).standard_normal((3, 12))
    env = run_graph(g, {"x": x.double().numpy(), "tangent.out0": t}, plugins.registry, {})
    xx = x.clone().requires_grad_(True)
    y = _Strided()(xx)
    y.backward(torch.tensor(t, dtype=torch.float32))
    assert np.abs(env["out0"] - y.detach().numpy()).max() < 1e-6
    assert np.abs(env["grad.x"] - xx.grad.numpy()).max() < 1e-6


class _Even(torch.nn.Module):
    def __init__(self, odd=False):
        super().__init__()
        self.odd = odd

    def forward(self, x):
        return x[..., 1::2] if self.odd else x[..., ::2]


def test_even_entries_do_not_refine_odd_ones():
    x = torch.randn(3, 8)
    s = ggt.capture(lambda r: _Even(), (x,))
    for odd, verdict in ((False, "refines"), (True, "does-not-refine")):
        d = ggt.capture(lambda r: _Even(odd), (x,), world_size=1, distributed=True)
        r = graphguard.verify(s.graph(), d.graph(), {"inputs": {"x": "x@0"}})
        assert r.verdict == verdict, (odd, r.failure)


def test_a_strided_slice_whose_rows_do_not_fit_is_refused():
    class M(torch.nn.Module):
        def forward(self, x):
            return x[..., ::2]
    with pytest.raises(InputError, match=r"slice \[0:7:2\] of a dim of size 7 is not supported"):
        ggt.capture(lambda r: M(), (torch.randn(2, 7),))


# -- placements ------------------------------------------------------------------------------------


def test_strided_shard_is_each_packed_part_sharded():
    from torch.distributed.tensor.placement_types import _StridedShard

    from graphguard.frontends.fx.dtensor import Layout
    lay = Layout((_StridedShard(dim=1, split_factor=2),), [0, 1], 3, (4, 8, 3))
    assert lay.relation("w") == ("concat(slice(w@0, dim=1, start=0, end=2), slice(w@1, dim=1, start=0, end=2), "
                                 "slice(w@0, dim=1, start=2, end=4), slice(w@1, dim=1, start=2, end=4), dim=1)")
    with pytest.raises(InputError, match="_StridedShard map to a relation"):
        Layout((_StridedShard(dim=1, split_factor=2),) * 2, [[0, 1], [2, 3]], 3, (4, 8, 3)).relation("w")


# -- lemmas 14xx -----------------------------------------------------------------------------------

SHAPES = {"A": [2, 3, 4], "B": [2, 5, 4], "E": [2, 0, 4], "C": [2, 3, 4], "P": [4, 3, 6], "Q": [4, 2, 6],
          "I": [5], "X": [4, 6, 3], "G": [5, 3, 6], "H": [5, 2, 6], "G2": [5, 2, 6], "V": [5, 4, 6],
          "R": [3, 4, 2], "S": [3, 4, 2], "Z1": [3, 4], "Z2": [3, 4]}
INT = {"I": "int64", "Z1": "complex64", "Z2": "complex64"}
PROVES = [
    ("aten.mean.dim(concat(A, B, dim=1), dim=[2], keepdim=false)",
     "concat(aten.mean.dim(A, dim=[2], keepdim=false), aten.mean.dim(B, dim=[2], keepdim=false), dim=1)"),
    ("concat(A, E, dim=1)", "A"),
    ("concat(E, B, dim=1)", "B"),
    ("aten.index.Tensor(concat(P, Q, dim=1), I)", "concat(aten.index.Tensor(P, I), aten.index.Tensor(Q, I), dim=1)"),
    ("aten.index.Tensor(slice(X, dim=1, start=2, end=5), I)", "slice(aten.index.Tensor(X, I), dim=1, start=2, end=5)"),
    ("aten.index_put(aten.full(size=[4, 5, 6], fill_value=0, dtype=float32), I, concat(G, H, dim=1), accumulate=true)",
     "concat(aten.index_put(aten.full(size=[4, 3, 6], fill_value=0, dtype=float32), I, G, accumulate=true),"
     " aten.index_put(aten.full(size=[4, 2, 6], fill_value=0, dtype=float32), I, H, accumulate=true), dim=1)"),
    ("aten.index_put(aten.full(size=[4, 2, 6], fill_value=0, dtype=float32), I, slice(V, dim=1, start=1, end=3), accumulate=true)",
     "slice(aten.index_put(aten.full(size=[4, 4, 6], fill_value=0, dtype=float32), I, V, accumulate=true), dim=1, start=1, end=3)"),
    # complex RoPE's views are linear: the ranks' partial sums of its gradient go through (1802-1803)
    ("aten.view_as_complex(sum(R, S))", "sum(aten.view_as_complex(R), aten.view_as_complex(S))"),
    ("aten.view_as_real(sum(Z1, Z2))", "sum(aten.view_as_real(Z1), aten.view_as_real(Z2))"),
]
MUST_NOT_PROVE = [
    # a mean along the concatenated dim needs both parts
    ("aten.mean.dim(concat(A, B, dim=1), dim=[1], keepdim=true)",
     "concat(aten.mean.dim(A, dim=[1], keepdim=true), aten.mean.dim(B, dim=[1], keepdim=true), dim=1)"),
    # only an empty part disappears
    ("concat(A, C, dim=1)", "A"),
    # gathered rows of swapped parts
    ("aten.index.Tensor(concat(P, Q, dim=1), I)", "concat(aten.index.Tensor(Q, I), aten.index.Tensor(P, I), dim=1)"),
    # gathering along the sliced dim is not slicing the gathered rows
    ("aten.index.Tensor(slice(X, dim=0, start=1, end=3), I)", "slice(aten.index.Tensor(X, I), dim=0, start=1, end=3)"),
    # accumulated rows of swapped parts
    ("aten.index_put(aten.full(size=[4, 4, 6], fill_value=0, dtype=float32), I, concat(H, G2, dim=1), accumulate=true)",
     "concat(aten.index_put(aten.full(size=[4, 2, 6], fill_value=0, dtype=float32), I, G2, accumulate=true),"
     " aten.index_put(aten.full(size=[4, 2, 6], fill_value=0, dtype=float32), I, H, accumulate=true), dim=1)"),
    # one rank's partial result is not the sum, nor is one summand taken twice
    ("aten.view_as_complex(sum(R, S))", "aten.view_as_complex(R)"),
    ("aten.view_as_real(sum(Z1, Z2))", "sum(aten.view_as_real(Z1), aten.view_as_real(Z1))"),
]


@pytest.mark.parametrize("lhs,rhs", PROVES)
def test_lemmas_prove(lhs, rhs):
    assert proves(lhs, rhs, SHAPES, dtypes=INT)


@pytest.mark.parametrize("lhs,rhs", MUST_NOT_PROVE)
def test_lemmas_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, SHAPES, dtypes=INT)
