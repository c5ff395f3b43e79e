"""The apex pack (Apex's fused layer norm, a PyTorch custom op): it loads as a plugin, its NumPy references
match the custom op, its lemmas are sound, what they prove -- and what they must not."""
from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import graphguard
from conftest import EXAMPLES, run_cli
from graphguard.engine.fuzz import fuzz_rule
from graphguard.frontends.fx.model_file import load_model_file
from graphguard.torch import capture

sys.path.insert(0, str(EXAMPLES / ".lib"))
import apex_ops  # noqa: E402

FWD, BWD = "apex.fused_layer_norm_affine", "apex.fused_layer_norm_affine_bwd"
REFS = set(range(601, 607))


def test_pack_loads_through_its_entry_point(plugins):
    assert ("graphguard.lemma_packs", "apex", "lemma_packs.apex") in plugins.loaded
    assert {plugins.registry.get(n).source for n in (FWD, f"{FWD}#1", BWD, f"{BWD}#2")} == {"apex"}
    assert {r.ref for r in plugins.lemmas if r.lemma.pack == "apex"} == REFS


@pytest.mark.parametrize("x_shape,ns", [((4, 3, 8), (8,)), ((2, 3, 2, 4), (2, 4)), ((5, 6), (6,))])
def test_references_match_the_custom_op(plugins, x_shape, ns):
    """The pack's NumPy references compute what the torch custom op computes (and that is torch's layer norm)."""
    g = torch.Generator().manual_seed(0)
    x, gy = (torch.randn(x_shape, dtype=torch.float64, generator=g) for _ in range(2))
    w, b = (torch.randn(ns, dtype=torch.float64, generator=g) for _ in range(2))
    eps = 1e-5
    outs = torch.ops.apex.fused_layer_norm_affine(x, w, b, list(ns), eps)
    grads = torch.ops.apex.fused_layer_norm_affine_bwd(gy, outs[1], outs[2], x, w, list(ns))
    reg, np_ = plugins.registry, lambda t: t.numpy()  # noqa: E731
    fwd_attrs, bwd_attrs = {"normalized_shape": ns, "eps": Fraction(eps)}, {"normalized_shape": ns}
    for k in range(3):
        np.testing.assert_allclose(reg.get(f"{FWD}#{k}").ref([np_(x), np_(w), np_(b)], fwd_attrs), np_(outs[k]),
                                   rtol=1e-10, atol=1e-12)
        ins = [np_(gy), np_(outs[1]), np_(outs[2]), np_(x), np_(w)]
        np.testing.assert_allclose(reg.get(f"{BWD}#{k}").ref(ins, bwd_attrs), np_(grads[k]), rtol=1e-10, atol=1e-12)
    # the custom op (forward and its registered backward) against torch's own layer norm
    leaves = [t.clone().requires_grad_() for t in (x, w, b)]
    ref = torch.nn.functional.layer_norm(leaves[0], ns, leaves[1], leaves[2], eps)
    torch.testing.assert_close(outs[0], ref.detach())
    mine = [t.clone().requires_grad_() for t in (x, w, b)]
    ours = apex_ops.fused_layer_norm(*mine, ns, eps)
    for a, c in zip(torch.autograd.grad(ours, mine, gy), torch.autograd.grad(ref, leaves, gy)):
        torch.testing.assert_close(a, c)


def test_lemmas_are_sound(plugins):
    rules = [r for r in plugins.lemmas if r.ref in REFS]
    reports = [fuzz_rule(r, plugins.registry) for r in rules]
    assert len(reports) == 6 and all(rep.ok for rep in reports), [(r.rule.id, r.failure, r.trials) for r in reports]


# what the lemmas prove, and must not: lemma_packs/apex/proofs.py (tests/test_pack_proofs.py)


# -- captured programs -------------------------------------------------------------------------------

SEQ, BATCH, HIDDEN = 4, 2, 8


class _SyncGrad(torch.autograd.Function):  # identity forward; all-reduce the gradient (SP layer-norm params)
    @staticmethod
    def forward(ctx, w):
        return w

    @staticmethod
    def backward(ctx, g):
        return funcol.all_reduce(g, "sum", dist.group.WORLD)


class Norm(torch.nn.Module):
    """A fused layer norm over the last ``hidden`` features, its parameters optionally gradient-synced."""

    def __init__(self, hidden=HIDDEN, sync=False):
        super().__init__()
        self.ln, self.sync = torch.nn.LayerNorm(hidden), sync

    def forward(self, x):
        w, b = self.ln.weight, self.ln.bias
        if self.sync:
            w, b = _SyncGrad.apply(w), _SyncGrad.apply(b)
        return apex_ops.fused_layer_norm(x, w, b, self.ln.normalized_shape, self.ln.eps)


def _verify(impl_build, impl_shape, relation, backward, world=2):
    pl = graphguard.plugins.load_plugins()
    s = capture(lambda r: Norm(), (torch.randn(SEQ, BATCH, HIDDEN),), backward=backward, name="norm-spec")
    d = capture(impl_build, lambda r: (torch.randn(*impl_shape),), world_size=world, backward=backward,
                name="norm-impl")
    return graphguard.verify(s.graph(pl), d.graph(pl), relation, replay=True, plugins=pl)


def _sp_relation(world=2):
    rep = lambda n: [f"{n}@{r}" for r in range(world)]  # noqa: E731
    seq = lambda n: f"concat({', '.join(rep(n))}, dim=0)"  # noqa: E731
    return {"inputs": {"x": seq("x"), "ln.weight": rep("ln.weight"), "ln.bias": rep("ln.bias"),
                       "tangent.out0": seq("tangent.out0")},
            "expect": {"out0": seq("out0"), "grad.ln.weight": "grad.ln.weight@0", "grad.ln.bias": "grad.ln.bias@0"}}


def test_sequence_parallel_norm_with_synced_grads_refines():
    r = _verify(lambda rank: Norm(sync=True), (SEQ // 2, BATCH, HIDDEN), _sp_relation(), backward=True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]


def test_sequence_parallel_norm_without_synced_grads_does_not_meet_the_expectation():
    r = _verify(lambda rank: Norm(sync=False), (SEQ // 2, BATCH, HIDDEN), _sp_relation(), backward=True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert r.failure.op == BWD
    assert "grad.ln.weight = sum(grad.ln.weight@0, grad.ln.weight@1)" in r.r_o_lines()
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_hidden_sharded_norm_does_not_refine():
    """Each rank normalising its half of the hidden features is not the layer norm: the pack must not map it."""
    rel = {"inputs": {"x": "concat(x@0, x@1, dim=2)", "ln.weight": "concat(ln.weight@0, ln.weight@1, dim=0)",
                      "ln.bias": "concat(ln.bias@0, ln.bias@1, dim=0)"}}
    r = _verify(lambda rank: Norm(HIDDEN // 2), (SEQ, BATCH, HIDDEN // 2), rel, backward=False)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert r.failure.op == FWD
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_the_example_verifies_forward_and_backward():
    mod = load_model_file(EXAMPLES / "gpt-tp-sp-apex" / "model.py")
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 2), backward=True)
    d = capture(lambda r: mod.impl(r, 2), lambda r: mod.inputs(r, 2), world_size=2, backward=True)
    r = graphguard.verify(s.graph(), d.graph(), dict(mod.relation(2, True), expect=mod.expect(2, True)), replay=True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    assert "grad.ln1.weight = grad.ln1.weight@1" in r.r_o_lines()
    assert {f"apex:{ref}" for ref in range(601, 607)} <= set(r.stats["lemma_hits"])


def test_without_the_pack_capture_names_the_operator(tmp_path):
    p = run_cli("-p", "no:apex", "capture", EXAMPLES / "gpt-tp-sp-apex" / "model.py", "--world-size", "2",
                "-o", tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "unknown operator 'apex.fused_layer_norm_affine'" in p.stderr and "Writing a lemma pack" in p.stderr
