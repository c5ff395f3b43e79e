"""Llama TP (RMSNorm, RoPE, SwiGLU, GQA incl. replicated KV heads) and the RoPE / padding bug classes."""
from __future__ import annotations

import pytest

import graphguard
import graphguard.torch as ggt
from conftest import EXAMPLES, load_module as _load


def _verify(mod, world, backward):
    s = ggt.capture(lambda r: mod.spec(), lambda r: mod.inputs(None, world), world_size=1, backward=backward)
    d = ggt.capture(lambda r: mod.impl(r, world), lambda r: mod.inputs(r, world), world_size=world,
                    backward=backward)
    rel = dict(mod.relation(world, backward), expect=mod.expect(world, backward))
    return graphguard.verify(s.graph(), d.graph(), rel, replay=True)


LLAMA = _load(EXAMPLES / "llama-tp" / "model.py")


def test_llama_forward_and_backward():
    r = _verify(LLAMA, 2, True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    lines = r.r_o_lines()
    assert "grad.layers.0.o_proj.weight = concat(grad.layers.0.o_proj.weight@0, grad.layers.0.o_proj.weight@1, dim=1)" in lines
    assert "grad.layers.0.post_norm.weight = grad.layers.0.post_norm.weight@1" in lines


def test_llama_replicated_kv_heads():
    """World 4 > 2 KV heads: replicas hold equal k/v weights, derived from the two concatenations."""
    r = _verify(LLAMA, 4, False)
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == [f"out0 = out0@{i}" for i in range(4)]


def test_wrong_kv_replica_layout_is_flagged():
    """Claiming rank 1 holds KV head 1 (it holds a replica of head 0) must not verify."""
    rel = LLAMA.relation(4, False)
    for lin in ("k_proj", "v_proj"):
        rel["inputs"][f"layers.0.{lin}.weight"] = f"concat(layers.0.{lin}.weight@0, layers.0.{lin}.weight@1, dim=0)"
    s = ggt.capture(lambda r: LLAMA.spec(), lambda r: LLAMA.inputs(None, 4))
    d = ggt.capture(lambda r: LLAMA.impl(r, 4), lambda r: LLAMA.inputs(r, 4), world_size=4)
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "does-not-refine"
    assert r.failure.op in ("aten.expand", "aten.bmm") and r.failure.replay["max_abs_diff"] > 1e-3


@pytest.mark.parametrize("fixed", [False, True])
def test_rope_offset_in_custom_backward(fixed):
    mod = _load(EXAMPLES / "bugs" / "rope-offset-sp" / "model.py", ROPE_BACKWARD_OFFSET="1" if fixed else "0")
    r = _verify(mod, 2, True)
    if fixed:
        assert r.verdict == "refines" and not r.expect["missing"]
        return
    assert r.verdict == "does-not-refine"
    f = r.failure
    assert (f.op, f.node, f.loc) == ("aten.mul.Tensor", "bw.mul_2", "model.py:45")
    assert f.input_relations["tangent.out0"] == ["concat(tangent.out0@0, tangent.out0@1, dim=0)"]
    assert f.replay["max_abs_diff"] > 1e-3


@pytest.mark.parametrize("fixed", [False, True])
def test_pad_slice_mismatch(fixed):
    mod = _load(EXAMPLES / "bugs" / "pad-slice-mismatch" / "model.py", PAD_AT_END="1" if fixed else "0")
    r = _verify(mod, 2, False)
    if fixed:
        assert r.verdict == "refines" and r.r_o_lines() == ["out0 = out0@0", "out0 = out0@1"]
        return
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.node) == ("aten.addmm", "addmm")
    assert "x = concat(x@0, x@1, dim=0)" in [f"x = {e}" for e in r.failure.input_relations["x"]]
    assert any("constant_pad_nd" in t for t in r.failure.explored)
    assert r.failure.replay["max_abs_diff"] > 1e-3


@pytest.mark.slow
def test_llama_replicated_kv_heads_backward():
    """World 4 > 2 KV heads, forward + backward: a replicated KV head's k and v weight gradients are sums over
    its replicas (expected: training code all-reduces them within the KV group); RoPE's backward adds n-way
    partial sums, whose searches are cut short once answered (engine/infer.py: partial_search)."""
    r = _verify(LLAMA, 4, True)
    assert r.verdict == "refines", r.failure
    assert not r.expect["missing"] and r.replay["ok"]
    assert ("grad.layers.0.v_proj.weight = concat(sum(grad.layers.0.v_proj.weight@0, grad.layers.0.v_proj.weight@1), "
            "sum(grad.layers.0.v_proj.weight@2, grad.layers.0.v_proj.weight@3), dim=0)") in r.r_o_lines()
