"""The vllm pack (vLLM's custom ops: in-place ``_C`` kernels under auto_functionalized, ``vllm.all_reduce``,
``_C.rotary_embedding`` on views of the fused qkv, ``vllm.unified_attention_with_output``): it loads as a
plugin, its NumPy references match the torch stand-ins, its lemmas are sound, the Qwen2 TP example verifies
(neox and GPT-J rotary styles) -- and vLLM's merged gate_up or fused qkv stated as a plain concat of the
ranks' blocks does not."""
from __future__ import annotations

import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

import graphguard
from conftest import EXAMPLES, run_cli
from graphguard.engine.fuzz import fuzz_rule
from graphguard.frontends.fx.model_file import load_model_file
from graphguard.torch import capture

sys.path.insert(0, str(EXAMPLES / ".lib"))
import vllm_ops  # noqa: E402

RMS, FUSED, SILU = "_C.rms_norm", "_C.fused_add_rms_norm", "_C.silu_and_mul"
ROTARY, ROPE, ATTN = "_C.rotary_embedding", "vllm.rope", "vllm.unified_attention_with_output"
REFS = set(range(701, 708)) | set(range(720, 726)) | set(range(1600, 1607))  # 16xx: vLLM 0.3x (test_vllm_real)
MODEL = EXAMPLES / "vllm-qwen2-tp" / "model.py"


def test_pack_loads_through_its_entry_point(plugins):
    assert ("graphguard.lemma_packs", "vllm", "lemma_packs.vllm") in plugins.loaded
    assert {plugins.registry.get(n).source for n in (RMS, SILU, f"{FUSED}#0", f"{FUSED}#1", f"{ROTARY}#0",
                                                     f"{ROTARY}#1", ROPE, ATTN)} == {"vllm"}
    assert {r.ref for r in plugins.lemmas if r.lemma.pack == "vllm"} == REFS
    assert plugins.registry.collective_ops["vllm.all_reduce.default"]["kind"] == "all_reduce"
    assert plugins.registry.collective_ops["vllm.all_gather.default"]["kind"] == "all_gather"


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


def _gptj_rotate(positions, x, head_size, cache):
    """GPT-J style written out by hand, pair by pair: (x[2i], x[2i+1]) rotated by angle i."""
    out = x.clone().reshape(x.shape[0], -1, head_size)
    rot = cache.shape[1]
    for t in range(x.shape[0]):
        cos, sin = cache[positions[t], : rot // 2], cache[positions[t], rot // 2:]
        for i in range(rot // 2):
            a, b = out[t, :, 2 * i].clone(), out[t, :, 2 * i + 1].clone()
            out[t, :, 2 * i], out[t, :, 2 * i + 1] = a * cos[i] - b * sin[i], b * cos[i] + a * sin[i]
    return out.reshape(x.shape)


@pytest.mark.parametrize("is_neox,rot", [(True, 4), (False, 4), (True, 2), (False, 2)])
def test_rotary_reference_matches_the_stand_in(plugins, is_neox, rot):
    g = torch.Generator().manual_seed(1)
    positions = torch.tensor([3, 0, 7, 7, 1])
    q, k = (torch.randn(shape, dtype=torch.float64, generator=g) for shape in ((5, 12), (5, 2, 4)))
    cache = torch.randn(8, rot, dtype=torch.float64, generator=g)  # any [cos | sin] table will do
    qi, ki = q.clone(), k.clone()
    torch.ops._C.rotary_embedding(positions, qi, ki, 4, cache, is_neox)  # in place
    attrs = {"head_size": 4, "is_neox": is_neox}
    args = [positions.numpy(), q.numpy(), k.numpy(), cache.numpy()]
    for i, want in enumerate((qi, ki)):
        np.testing.assert_allclose(plugins.registry.get(f"{ROTARY}#{i}").ref(args, attrs), want.numpy(), rtol=1e-12)
    if not is_neox:  # the stand-in (vLLM's forward_native) is GPT-J as written pair by pair
        torch.testing.assert_close(qi, _gptj_rotate(positions, q, 4, cache))
    else:  # neox: rotate_half on the first rot entries of each head, the rest passes through
        c, s_ = cache[positions, : rot // 2].repeat(1, 2)[:, None], cache[positions, rot // 2:].repeat(1, 2)[:, None]
        h = q.reshape(5, 3, 4)
        x1, x2 = h[..., : rot // 2], h[..., rot // 2: rot]
        want = torch.cat((h[..., :rot] * c + torch.cat((-x2, x1), -1) * s_, h[..., rot:]), -1).reshape(5, 12)
        torch.testing.assert_close(qi, want)
    assert not torch.equal(qi, q)


@pytest.mark.parametrize("hq,hk", [(4, 2), (3, 3), (6, 1)])
def test_attention_reference_matches_the_stand_in(plugins, hq, hk):
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(5, h, d, dtype=torch.float64, generator=g) for h, d in ((hq, 4), (hk, 4), (hk, 3)))
    out = torch.empty(5, hq, 3, dtype=torch.float64)
    torch.ops.vllm.unified_attention_with_output(q, k, v, out, "layer")
    ref = plugins.registry.get(ATTN).ref([q.numpy(), k.numpy(), v.numpy()], {"layer_name": "layer", "absent": [3, 4]})
    np.testing.assert_allclose(ref, out.numpy(), rtol=1e-10)
    # by hand for the last token of head 0 (reads KV head 0; every token is visible to the last)
    w = torch.softmax(q[4, 0] @ k[:, 0].T / 2.0, dim=0)
    torch.testing.assert_close(out[4, 0], w @ v[:, 0])
    torch.testing.assert_close(out[0, hq - 1], v[0, hk - 1])  # the first token sees only itself


def test_lemmas_are_sound(plugins):
    reports = [fuzz_rule(r, plugins.registry) for r in plugins.lemmas if r.ref in REFS]
    assert len(reports) == len(REFS) and all(rep.ok for rep in reports), \
        [(r.rule.id, r.failure, r.trials) for r in reports]


# what the lemmas prove, and must not: lemma_packs/vllm/proofs.py (tests/test_pack_proofs.py)


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
    assert {RMS, FUSED, SILU, ROTARY, ATTN} <= ops, ops
    assert any("all_reduce" in n.op for n in impl.nodes), {n.op for n in impl.nodes}
    # q and k are rotated in place as column slices of the fused qkv output: read as slices of it, written
    # back as its new value; attention writes a per-head view of a fresh flat buffer: reshapes both ways
    (rot,) = [n for n in spec.nodes if n.op == ROTARY]
    qkv = {spec.producer[t].inputs[0] for t in rot.inputs[1:3]}
    assert [spec.producer[t].op for t in rot.inputs[1:3]] == ["core.slice", "core.slice"] and len(qkv) == 1
    assert spec.producer[next(iter(qkv))].op == "aten.addmm"
    assert [spec.shape(t) for t in rot.inputs] == [(5,), (5, 48), (5, 8), (16, 4)]
    (att,) = [n for n in spec.nodes if n.op == ATTN]
    assert [spec.shape(t) for t in att.inputs] == [(5, 12, 4), (5, 2, 4), (5, 2, 4)]
    assert [n.op for n in spec.consumers[att.outputs[0]]] == ["core.reshape"]
    heads = {tuple(impl.shape(t)) for n in impl.nodes if n.op == ATTN for t in n.inputs}
    assert heads == {(5, 6, 4), (5, 1, 4)}  # 6 query heads and 1 KV head per rank


def test_the_example_verifies(captured):
    mod, spec, impl = captured
    r = graphguard.verify(spec, impl, dict(mod.relation(2), expect=mod.expect(2)), replay=True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    assert {"out0 = out0@0", "out1 = out1@1"} <= set(r.r_o_lines())
    assert {"vllm:706", "vllm:707", "vllm:722", "vllm:724"} <= set(r.stats["lemma_hits"])


def test_the_example_verifies_at_degree_4_with_replicated_kv_heads():
    # 2 KV heads on 4 ranks: replicas' k/v are equal slices of their fused qkv outputs (inferred, not given)
    mod = load_model_file(MODEL)
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 4))
    d = capture(lambda r: mod.impl(r, 4), lambda r: mod.inputs(r, 4), world_size=4)
    r = graphguard.verify(s.graph(), d.graph(), dict(mod.relation(4), expect=mod.expect(4)), replay=True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"] and r.replay["checked"] > 100
    assert "vllm:725" in r.stats["lemma_hits"]


def test_the_example_verifies_with_gptj_rotary(monkeypatch):
    monkeypatch.setenv("GG_ROPE_STYLE", "gptj")
    mod = load_model_file(MODEL)
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, 2))
    d = capture(lambda r: mod.impl(r, 2), lambda r: mod.inputs(r, 2), world_size=2)
    assert {n.attrs["is_neox"] for n in s.graph().nodes if n.op == ROTARY} == {False}
    r = graphguard.verify(s.graph(), d.graph(), dict(mod.relation(2), expect=mod.expect(2)), replay=True)
    assert r.verdict == "refines" and not r.expect["missing"] and r.replay["ok"], r.failure


def test_fused_qkv_as_plain_concat_does_not_verify(captured, monkeypatch):
    mod, spec, impl = captured
    monkeypatch.setenv("GG_BAD_QKV", "1")  # rank 0's k and v rows taken for rank 1's query heads
    r = graphguard.verify(spec, impl, dict(mod.relation(2)), replay=True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    assert r.failure.op == ROTARY
    assert r.failure.replay["max_abs_diff"] > 1e-3


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


class _Rotate(torch.nn.Module):
    """Rotary in place on views of one tensor: ``overlap`` -- q and k share columns; ``transposed`` -- q is a
    transposed (non-contiguous) view."""

    def __init__(self, how):
        super().__init__()
        self.how = how
        self.register_buffer("cache", torch.randn(8, 4))

    def forward(self, positions, x):
        x = x * 1.0
        if self.how == "overlap":
            q, k = x[:, 0:8], x[:, 4:8]
        else:
            q, k = (x[:, :8] * 1.0).reshape(8, 3).t(), x[:, 8:12] * 1.0  # q: a transposed view
        torch.ops._C.rotary_embedding(positions, q, k, 4, self.cache, True)
        return x, q, k


@pytest.mark.parametrize("how,msg", [
    ("overlap", "mutated arguments 'query', 'key' of _C.rotary_embedding.default share one tensor in overlapping"),
    ("transposed", "mutated argument 'query' of _C.rotary_embedding.default is a view of another tensor"),
])
def test_unsupported_views_of_mutated_arguments_are_refused(how, msg):
    from graphguard.errors import InputError
    with pytest.raises(InputError, match=msg.replace("(", r"\(")):
        capture(lambda r: _Rotate(how), (torch.tensor([0, 1, 2]), torch.randn(3, 12)))
