"""HF transformers' LlamaForCausalLM with its own TP plan (examples/hf-llama-tp): relations from the plan's
DTensor placements, the certificate the plan dictates for the logits, and a wrong relation refused."""
from __future__ import annotations

import importlib.util

import pytest

pytest.importorskip("transformers")

import graphguard  # noqa: E402
import graphguard.torch as ggt  # noqa: E402
from conftest import EXAMPLES  # noqa: E402

W = 2
_spec = importlib.util.spec_from_file_location("m_hf_llama_tp", EXAMPLES / "hf-llama-tp" / "model.py")
HF = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(HF)
P = "model.layers.0."


def _cat(name, dim):
    return f"concat({', '.join(f'{name}@{r}' for r in range(W))}, dim={dim})"


@pytest.fixture(scope="module")
def spec():
    return ggt.capture(lambda r: HF.spec(), lambda r: HF.inputs(None, W))


def _impl(override):
    return ggt.capture(lambda r: HF.impl(r, W, override), lambda r: HF.inputs(r, W), world_size=W)


@pytest.fixture(scope="module")
def hf_plan(spec):
    d = _impl({})
    return d, ggt.input_relation(spec, d, HF.relation(W, False, {}))


def test_relations_come_from_hf_plan(hf_plan):
    rel = hf_plan[1]["inputs"]
    for lin in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
        assert rel[P + lin + ".weight"] == _cat(P + lin + ".weight", 0)  # colwise
    for lin in ("self_attn.o_proj", "mlp.down_proj"):
        assert rel[P + lin + ".weight"] == _cat(P + lin + ".weight", 1)  # rowwise
    assert rel["lm_head.weight"] == _cat("lm_head.weight", 0)  # colwise_gather_output
    assert rel["model.embed_tokens.weight"] == [f"model.embed_tokens.weight@{r}" for r in range(W)]  # not in the plan


def test_hf_plan_gathers_the_logits_on_every_rank(spec, hf_plan):
    r = graphguard.verify(spec.graph(), hf_plan[0].graph(), hf_plan[1])  # test_examples replays it
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == [f"out0 = out0@{i}" for i in range(W)]


def test_colwise_lm_head_leaves_logits_sharded_on_the_vocabulary(spec):
    over = {"lm_head": "colwise"}
    d = _impl(over)
    r = graphguard.verify(spec.graph(), d.graph(), ggt.input_relation(spec, d, HF.relation(W, False, over)))
    assert r.verdict == "refines", r.failure
    assert r.r_o_lines() == [f"out0 = {_cat('out0', 2)}"]


def test_swapped_kv_shards_do_not_refine(spec, hf_plan):
    """Claiming rank 0 holds the second half of the KV heads pairs its query heads with the wrong keys."""
    d, rel = hf_plan
    k = P + "self_attn.k_proj.weight"
    wrong = dict(rel, inputs=dict(rel["inputs"], **{k: f"concat({k}@1, {k}@0, dim=0)"}))
    r = graphguard.verify(spec.graph(), d.graph(), wrong)
    assert r.verdict == "does-not-refine"
    assert r.failure.op == "aten.bmm"


@pytest.mark.slow
def test_forgotten_down_proj_allreduce_is_named_in_the_users_terms(spec, monkeypatch):
    """HF's rowwise down_proj with its all-reduce skipped: the report stops where the partial sums can go no
    further (the final RMSNorm's pow) and its hint names the module whose output is a partial sum."""
    from torch.distributed.tensor import DTensor
    from transformers.distributed import tensor_parallel as tp
    orig = tp.RowwiseParallel.transform_output_post_forward

    def skip(self, module, output, mesh):
        if getattr(module, "_skip_allreduce", False):
            return output.to_local() if isinstance(output, DTensor) else output
        return orig(self, module, output, mesh)
    monkeypatch.setattr(tp.RowwiseParallel, "transform_output_post_forward", skip)

    def build(r):
        m = HF.impl(r, W, {})
        m.model.layers[0].mlp.down_proj._skip_allreduce = True
        return m
    d = ggt.capture(build, lambda r: HF.inputs(r, W), world_size=W)
    r = graphguard.verify(spec.graph(), d.graph(), ggt.input_relation(spec, d, HF.relation(W, False, {})))
    f = r.failure
    assert r.verdict == "does-not-refine" and f.op == "aten.pow.Tensor_Scalar" and f.module == "model.norm"
    assert f.loc.startswith("modeling_llama.py:") and f.func == "forward"
    assert "the partial sums begin at G_s aten.mm (modeling_llama.py:" in f.hint
    assert "no all-reduce or reduce-scatter of G_d follows `model.layers.0.mlp.down_proj`" in f.hint
    assert any(src.endswith("module model.layers.0.mlp.down_proj") for src in f.sources.values())
