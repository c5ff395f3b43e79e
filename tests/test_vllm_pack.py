"""The vllm pack (vLLM's custom ops: in-place ``_C`` kernels under auto_functionalized, ``vllm.all_reduce``): it
loads as a plugin, its NumPy references match the torch stand-ins, its lemmas are sound, the Qwen2-style TP
example verifies -- and vLLM's merged gate_up stated as a plain concat of the ranks' blocks does not."""
from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

import graphguard
from conftest import EXAMPLES, run_cli
from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.prove import proves
from graphguard.frontends.fx.model_file import load_model_file
from graphguard.torch import capture

sys.path.insert(0, str(EXAMPLES / ".lib"))
import vllm_ops  # noqa: E402

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
REFS = set(range(701, 708))
MODEL = EXAMPLES / "vllm-qwen2-tp" / "model.py"


def test_pack_loads_through_its_entry_point(plugins):
    assert ("graphguard.lemma_packs", "vllm", "lemma_packs.vllm") in plugins.loaded
    assert {plugins.registry.get(n).source for n in (RMS, SILU, f"{FUSED}#0", f"{FUSED}#1")} == {"vllm"}
    assert {r.ref for r in plugins.lemmas if r.lemma.pack == "vllm"} == REFS
    assert plugins.registry.collective_ops["vllm.all_reduce.default"]["kind"] == "all_reduce"


@pytest.mark.parametrize("shape", [(5, 8), (2, 3, 6)])
def test_references_match_the_torch_stand_ins(plugins, shape):
    g = torch.Generator().manual_seed(0)
    x, r = (torch.randn(shape, dtype=torch.float64, generator=g) for _ in range(2))
    w = torch.randn(shape[-1], dtype=torch.float64, generator=g)
    eps, reg = 1e-6, plugins.registry
    attrs = {"epsilon": Fraction(eps)}
    out = torch.empty_like(x)
    torch.ops._C.rms_norm(out, x, w, eps)
    np.testing.assert_allclose(reg.get(RMS).ref([x.numpy(), w.numpy()], attrs), out.numpy(), rtol=1e-12)
    xi, ri = x.clone(), r.clone()
    torch.ops._C.fused_add_rms_norm(xi, ri, w, eps)  # in place: xi <- norm(x + r), ri <- x + r
    for k, want in enumerate((xi, ri)):
        np.testing.assert_allclose(reg.get(f"{FUSED}#{k}").ref([x.numpy(), r.numpy(), w.numpy()], attrs),
                                   want.numpy(), rtol=1e-12)
    res = x.new_empty(*shape[:-1], shape[-1] // 2)
    torch.ops._C.silu_and_mul(res, x)
    d = shape[-1] // 2
    torch.testing.assert_close(res, torch.nn.functional.silu(x[..., :d]) * x[..., d:])
    np.testing.assert_allclose(reg.get(SILU).ref([x.numpy()], {}), res.numpy(), rtol=1e-12)
    # the stand-in is RMSNorm as vLLM defines it
    torch.testing.assert_close(out, x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w)


def test_lemmas_are_sound(plugins):
    reports = [fuzz_rule(r, plugins.registry) for r in plugins.lemmas if r.ref in REFS]
    assert len(reports) == len(REFS) and all(rep.ok for rep in reports), \
        [(r.rule.id, r.failure, r.trials) for r in reports]


SHAPES = {"A": [3, 2], "B": [3, 2], "C": [3, 2], "E": [3, 2], "X0": [2, 8], "X1": [3, 8], "W": [8]}


def silu(x):
    return f"{SILU}({x})"


def cat(*xs, d=1):
    return f"concat({', '.join(xs)}, dim={d})"


PROVES = [
    # vLLM's merged gate_up: [gate_0 | gate_1 | up_0 | up_1] -> per rank [gate_r | up_r]
    (silu(cat(cat("A", "B"), cat("C", "E"))), cat(silu(cat("A", "C")), silu(cat("B", "E")))),
    (silu(cat("A", "B", "C", "E")), cat(silu(cat("A", "C")), silu(cat("B", "E")))),  # left-nested, via 706
    (f"{RMS}(concat(X0, X1, dim=0), W, epsilon=0.000001)",
     f"concat({RMS}(X0, W, epsilon=0.000001), {RMS}(X1, W, epsilon=0.000001), dim=0)"),
]

MUST_NOT_PROVE = [
    # the ranks' [gate_r | up_r] blocks concatenated are not the sequential [gate | up]
    (silu(cat(cat("A", "C"), cat("B", "E"))), cat(silu(cat("A", "C")), silu(cat("B", "E")))),
    (silu(cat(cat("A", "B"), cat("C", "E"))), cat(silu(cat("A", "B")), silu(cat("C", "E")))),
    # RMSNorm of a hidden-split input is not the concat of the halves' norms
    (f"{RMS}(concat(A, B, dim=1), concat(W, W, dim=0), epsilon=0.000001)",
     f"concat({RMS}(A, W, epsilon=0.000001), {RMS}(B, W, epsilon=0.000001), dim=1)"),
]


@pytest.mark.parametrize("lhs,rhs", PROVES)
def test_proves(lhs, rhs):
    assert proves(lhs, rhs, SHAPES)


@pytest.mark.parametrize("lhs,rhs", MUST_NOT_PROVE)
def test_must_not_prove(lhs, rhs):
    assert not proves(lhs, rhs, dict(SHAPES, W=[2]))


# -- the captured example ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def captured():
    mod = load_model_file(MODEL)
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 2))
    d = capture(lambda r: mod.impl(r, 2), lambda r: mod.inputs(r, 2), world_size=2)
    return mod, s.graph(), d.graph()


def test_capture_maps_the_in_place_ops_and_the_collective(captured):
    _, spec, impl = captured
    ops = {n.op for n in spec.nodes}
    assert {RMS, FUSED, SILU} <= ops or {RMS, f"{FUSED}#0", SILU} <= ops, ops
    assert any("all_reduce" in n.op for n in impl.nodes), {n.op for n in impl.nodes}


def test_the_example_verifies(captured):
    mod, spec, impl = captured
    r = graphguard.verify(spec, impl, dict(mod.relation(2), expect=mod.expect(2)), replay=True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    assert {"out0 = out0@0", "out1 = out1@1"} <= set(r.r_o_lines())
    assert {"706", "707"} <= {str(k) for k in r.stats["lemma_hits"]}


def test_merged_gate_up_as_plain_concat_does_not_verify(captured, monkeypatch):
    mod, spec, impl = captured
    monkeypatch.setenv("GG_BAD_GATE_UP", "1")
    r = graphguard.verify(spec, impl, dict(mod.relation(2)), replay=True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert r.failure.op == SILU
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_without_the_pack_capture_names_the_operator(tmp_path):
    p = run_cli("-p", "no:vllm", "capture", MODEL, "--world-size", "2", "-o", tmp_path)
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    assert "unknown operator '_C.rms_norm'" in p.stderr
