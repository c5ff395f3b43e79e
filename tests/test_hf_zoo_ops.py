"""Constructs HF transformers' TP-plan zoo (bench/hf_zoo.py) brought beyond the examples': rounded division and
floor (Llama-4's attention temperature), the short depthwise convolutions and triangular solves of
linear-attention layers (Qwen3-Next, OLMo-hybrid, Kimi-linear), complex RoPE (DeepSeek-V2, Llama-4:
``polar``, ``view_as_complex``, ``view_as_real``) and their lemmas (18xx); whole models at TP=2 in
test_hf_zoo.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import graphguard
import graphguard.torch as ggt
from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.lemma import build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves
from graphguard.engine.replay import run_graph


class _Zoo(torch.nn.Module):
    """Each construct once, as the zoo's models write it."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3)  # a causal short convolution per channel
        self.w = torch.nn.Parameter(torch.randn(6, 6) * 0.1)

    def forward(self, x, pos):  # x [B, S, C], pos [S] int
        c = self.conv(x.transpose(1, 2))[..., : x.shape[1]].transpose(1, 2)
        scale = torch.floor((pos + 1).float() / 4) + torch.div(pos, 3, rounding_mode="floor")  # Llama-4's temperature
        a = torch.tril(x @ self.w @ x.transpose(1, 2), -1)  # a unit lower-triangular system (UT transform)
        u = torch.linalg.solve_triangular(a, c, upper=False, unitriangular=True)
        freqs = torch.polar(torch.ones(x.shape[1], 3), pos[:, None].float() / torch.arange(1, 4).float())
        rot = torch.view_as_real(torch.view_as_complex(u.contiguous().reshape(*u.shape[:-1], 3, 2)) * freqs).flatten(2)
        return rot * scale[:, None]


def test_zoo_constructs_and_their_backward_compute_what_torch_does(plugins):
    x, pos = torch.randn(2, 5, 6), torch.arange(5)
    c = ggt.capture(lambda r: _Zoo(), (x.clone().requires_grad_(True), pos), backward=True)
    ops = {n["op"] for n in c.doc["nodes"]}
    assert {"aten.convolution", "aten.convolution_backward", "aten.floor", "aten.div.Tensor_mode",
            "aten.linalg_solve_triangular", "aten.polar", "aten.view_as_complex", "aten.view_as_real"} <= ops
    g = c.graph(plugins)
    t = np.random.default_rng(0).standard_normal((2, 5, 6))
    m = _Zoo()
    feed = {"x": x.double().numpy(), "pos": pos.numpy(), "tangent.out0": t,
            **{f"{k}": v.detach().double().numpy() for k, v in m.named_parameters()}}
    env = run_graph(g, {k: v for k, v in feed.items() if k in {i["name"] for i in c.doc["inputs"]}},
                    plugins.registry, {})
    xx = x.clone().requires_grad_(True)
    y = m(xx, pos)
    y.backward(torch.tensor(t, dtype=torch.float32))
    assert np.abs(env["out0"] - y.detach().numpy()).max() < 1e-4
    assert np.abs(env["grad.x"] - xx.grad.numpy()).max() < 1e-4
    assert np.abs(env["grad.conv.weight"] - m.conv.weight.grad.numpy()).max() < 1e-4


def test_a_transposed_convolution_is_refused_naming_it():
    from graphguard.errors import InputError
    with pytest.raises(InputError, match="transposed convolutions are not supported"):
        ggt.capture(lambda r: torch.nn.ConvTranspose1d(2, 2, 3), (torch.randn(1, 2, 5),)).graph()


class _Rope(torch.nn.Module):
    def forward(self, q, f):  # q [B, H, S, D] (heads sharded), f [S, D/2] complex
        return torch.view_as_real(torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * f).flatten(3)


def _freqs():
    return torch.polar(torch.ones(3, 2), torch.randn(3, 2))


def test_complex_rope_of_sharded_heads_verifies():
    """Heads split across two ranks: RoPE as a complex rotation of each rank's heads is the rotation of all."""
    q, f = torch.randn(2, 4, 3, 4), _freqs()
    s = ggt.capture(lambda r: _Rope(), (q, f))
    d = ggt.capture(lambda r: _Rope(), lambda r: (q[:, 2 * r:2 * r + 2], f), world_size=2)
    rel = {"inputs": {"q": "concat(q@0, q@1, dim=1)", "f": ["f@0", "f@1"]}}
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == ["out0 = concat(out0@0, out0@1, dim=1)"]


def test_complex_rope_of_pairs_split_across_ranks_refines_with_their_frequencies():
    """The head dim split between the ranks, one (real, imaginary) pair each, each rotated by its own
    frequency column: the rotation of the whole."""
    q, f = torch.randn(2, 4, 3, 4), _freqs()
    s = ggt.capture(lambda r: _Rope(), (q, f))
    d = ggt.capture(lambda r: _Rope(), lambda r: (q[..., 2 * r:2 * r + 2], f[:, r:r + 1]), world_size=2)
    rel = {"inputs": {"q": "concat(q@0, q@1, dim=3)", "f": "concat(f@0, f@1, dim=1)"}}
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "refines", r.failure


class _RopeFirstFrequency(torch.nn.Module):
    def forward(self, q, f):  # a bug: every rank rotates its pair by the first frequency
        return _Rope()(q, f[:, :1])


def test_complex_rope_with_another_ranks_frequency_does_not_refine():
    q, f = torch.randn(2, 4, 3, 4), _freqs()
    s = ggt.capture(lambda r: _Rope(), (q, f))
    d = ggt.capture(lambda r: _RopeFirstFrequency(), lambda r: (q[..., 2 * r:2 * r + 2], f), world_size=2)
    rel = {"inputs": {"q": "concat(q@0, q@1, dim=3)", "f": ["f@0", "f@1"]}}
    r = graphguard.verify(s.graph(), d.graph(), rel)
    assert r.verdict == "does-not-refine" and r.failure.op in ("aten.mul.Tensor", "aten.view_as_real"), r.failure


SHAPES = {"A": [2, 3, 4, 2], "B": [2, 1, 4, 2], "P": [2, 3, 4], "Q": [2, 1, 4], "F": [4], "H": [2, 3, 4, 1]}
CPLX = {"P": "complex64", "Q": "complex64", "F": "complex64"}
PROVES = [
    ("aten.view_as_complex(concat(A, B, dim=1))", "concat(aten.view_as_complex(A), aten.view_as_complex(B), dim=1)"),
    ("aten.view_as_real(concat(P, Q, dim=1))", "concat(aten.view_as_real(P), aten.view_as_real(Q), dim=1)"),
    ("aten.view_as_real(aten.mul.Tensor(aten.view_as_complex(concat(A, B, dim=1)), F))",
     "concat(aten.view_as_real(aten.mul.Tensor(aten.view_as_complex(A), F)),"
     " aten.view_as_real(aten.mul.Tensor(aten.view_as_complex(B), F)), dim=1)"),
]
MUST_NOT_PROVE = [
    # the parts swapped
    ("aten.view_as_complex(concat(A, B, dim=1))", "concat(aten.view_as_complex(B), aten.view_as_complex(A), dim=1)"),
    ("aten.view_as_real(concat(P, Q, dim=1))", "concat(aten.view_as_real(Q), aten.view_as_real(P), dim=1)"),
    # halves of each pair are no complex numbers: H's pairs cut in two are not view_as_complex of them
    ("aten.view_as_complex(concat(H, H, dim=3))", "aten.view_as_complex(concat(H, aten.neg(H), dim=3))"),
]


@pytest.mark.parametrize("lhs,rhs", PROVES)
def test_lemmas_prove(lhs, rhs):
    assert proves(lhs, rhs, SHAPES, dtypes={k: v for k, v in CPLX.items() if k in lhs + rhs})


@pytest.mark.parametrize("lhs,rhs", MUST_NOT_PROVE)
def test_lemmas_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, SHAPES, dtypes={k: v for k, v in CPLX.items() if k in lhs + rhs})


@pytest.mark.parametrize("rule", [
    # wrong: the parts' order
    "aten.view_as_real(concat(?a, ?b, dim=?d)) => concat(aten.view_as_real(?b), aten.view_as_real(?a), dim=?d)",
    # wrong: conjugates
    "aten.view_as_real(?a) => aten.view_as_real(aten.mul.Tensor(?a, ?a))",
])
def test_fuzzer_draws_complex_values_and_catches_wrong_complex_lemmas(plugins, rule):
    (r, *_) = build_rules(L(9001, "bogus", rule), plugins.registry)
    rep = fuzz_rule(r, plugins.registry, trials=25)
    assert not rep.ok and rep.instances == 0 and "differ" in rep.why()


class _LoopOverHits(torch.nn.Module):
    def forward(self, x):  # an eager MoE's loop over the experts hit (LongCat-Flash)
        out = torch.zeros_like(x)
        for i in (x.sum(0) > 0).nonzero():
            out = out + x * i
        return out


def test_a_loop_over_data_dependent_hits_is_refused_saying_why():
    from graphguard.errors import InputError
    with pytest.raises(InputError, match=r"test_hf_zoo_ops.py:\d+: GuardOnDataDependentSymNode: .* branches or loops "
                                         r"on tensor values there"):
        ggt.capture(lambda r: _LoopOverHits(), (torch.randn(3, 4),))


def test_partial_sums_of_complementary_zero_pads():
    """Cohere's interleaved rotary backward: the two zero-padded halves of the gradient, summed once the add is
    a sum (lemmas 427/429) -- proving; the pads on the same side, or a nonzero pad, must not."""
    from graphguard.testing import proves
    shapes = {"a": [2, 3, 1], "b": [2, 3, 1]}
    z = "aten.full(size=[2, 3, 1], fill_value={v}, dtype=float32)"
    pad_a, pad_b = f"concat(a, {z.format(v=0)}, dim=2)", f"concat({z.format(v=0)}, b, dim=2)"
    assert proves(f"sum({pad_a}, {pad_b})", "concat(a, b, dim=2)", shapes)
    assert proves(f"sum({pad_b}, {pad_a})", "concat(a, b, dim=2)", shapes)
    assert not proves(f"sum({pad_a}, concat(b, {z.format(v=0)}, dim=2))", "concat(a, b, dim=2)", shapes)
    assert not proves(f"sum({pad_a}, concat({z.format(v=1)}, b, dim=2))", "concat(a, b, dim=2)", shapes)
