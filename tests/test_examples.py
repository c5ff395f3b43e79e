"""Every shipped example is a test: its run script's verdict, R_o text, and an independent numeric replay."""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess

import pytest

import graphguard
from conftest import EXAMPLES, files

EXAMPLE_DIRS = sorted(p.parent for p in EXAMPLES.glob("*/run") if p.parent.name != "bugs")
BUG_DIRS = sorted(p.parent for p in (EXAMPLES / "bugs").glob("*/run"))


def test_examples_are_found():
    assert {d.name for d in EXAMPLE_DIRS} >= {"paper-fig1", "paper-fig1-symbolic"}
    assert {d.name for d in BUG_DIRS} >= {"paper-fig1-missing-reduction"}


# where a bug example's failure must be reported (operator, G_s node): checked on the same run (tests of their own
# that would run the script again are marked slow)
BUG_AT = {"megatron-sp-layernorm-grad": ("aten.native_layer_norm_backward", "bw.native_layer_norm_backward"),
          "megatron-sp-grad-avg": ("aten.native_layer_norm_backward", "bw.native_layer_norm_backward"),
          "megatron-moe-routing": ("aten.topk", "topk"),
          "megatron-moe-aux-scale": ("aten.mul.Tensor", "bw.mul_18")}


# examples run with more than the default (forward + backward: the forward is part of it), and lines their R_o
# must hold
ARGS = {"megatron-gpt": ["--backward"],  # (megatron-moe's backward: tests/test_megatron_moe.py, slow)
        # HF's layer against NeuronX: what verifies today, the KV caches (the whole layer stops at HF's additive
        # mask, a real difference: examples/cross-hf-neuronx-llama/README.md, tests/test_cross_hf_neuronx.py)
        "cross-hf-neuronx-llama": ["--outputs", "cache"]}
# examples of a framework that is not a test dependency: without it, their run script verifies the graphs a
# capture of it kept (torchtitan: examples/torchtitan-llama/README.md)
KEPT = {"torchtitan-llama": ["--kept", "tp2"]}
# environment of a run: megatron-gpt with sequence parallelism (its other configurations: tests/test_megatron.py)
ENV = {"megatron-gpt": {"GG_SP": "1"}}
R_O = {"megatron-gpt": ["out0 = out0@0", "out0 = out0@1",  # the loss per token, on every rank
                        "grad.embedding.word_embeddings.weight = concat(grad.embedding.word_embeddings.weight@0, "
                        "grad.embedding.word_embeddings.weight@1, dim=0)",
                        "grad.output_layer.weight = concat(grad.output_layer.weight@0, grad.output_layer.weight@1, dim=0)",
                        # summed by Megatron's gradient step after backward (finalize_grads) under sequence parallelism
                        "grad.decoder.final_layernorm.weight = grad.decoder.final_layernorm.weight@1",
                        "grad.decoder.layers.0.mlp.linear_fc2.bias = grad.decoder.layers.0.mlp.linear_fc2.bias@0"],
       "megatron-moe": ["out0 = concat(out0@0, out0@1, dim=0)"]}


# examples whose run script repeats what another default test verifies in-process (run with -m slow)
SLOW = {"torchtitan-llama": "tests/test_torchtitan.py verifies the graphs it kept (torchtitan is not a test dependency)",
        "hf-zoo": "tests/test_hf_zoo.py verifies its default, Qwen3 with HF's plan, forward and backward",
        # the project's own imitations of bugs that are planted in real megatron-core and run by default
        # (suite time: the same bug in the project's model runs by default, examples/bugs/layernorm-grad-sp)
        "megatron-sp-layernorm-grad": "examples/bugs/layernorm-grad-sp: the same bug, the project's model",
        "mlp-dtensor": "examples/gpt-tp-dtensor: DTensor capture of a whole block",
        # (suite time: real megatron-core bugs whose capture costs ~25 s each; one runs by default, its
        # imitation runs for the gradient-accumulation scale, the others' operators are checked by
        # bench/mutants.py's corpus and tests/test_megatron*.py)
        "megatron-grad-accum-scale": "examples/bugs/grad-accum-scale: the same bug, the project's model",
        "megatron-sp-grad-avg": "tests/test_megatron.py::test_megatron_sp_grads_averaged_instead_of_summed (slow)",
        "megatron-ce-vocab-offset": "tests/test_megatron_ce.py: Megatron's vocab-parallel cross-entropy bugs",
        "megatron-ce-grad-scale": "examples/bugs/mlp-tp-grad-scale: a gradient scaled by the TP size (and "
                                  "bench/bug_vs_twin.py times this one against examples/megatron-gpt)",
        "megatron-moe-routing": "tests/test_megatron_moe.py::test_planted_routing_bug_is_flagged_at_the_expert_choice "
                                "(slow; by default the real MoE layer verifies, megatron-moe, and the project's "
                                "routing bugs are flagged: tests/test_moe_sparse.py)",
        "megatron-moe-tp-grad": "tests/test_megatron_moe.py::test_planted_tp_gradient_split_is_flagged (slow, ~1 min)",
        "megatron-moe-aux-scale": "tests/test_megatron_moe.py::test_global_aux_loss_refines_and_the_local_one_is_named "
                                  "(slow, ~1 min; lemma aten:1359 and the aux-loss patch run by default)",
        "cross-hf-neuronx-llama": "tests/test_cross_hf_neuronx.py::test_kv_caches_refine_at_tp1 and "
                                  "test_tp1_rope_tables_mask_projections_verify_then_stops_at_the_additive_mask",
        "hf-llama-tp": "tests/test_hf_zoo.py: HF's own plans for Llama-family models",
        "cross-fx-hlo-llama": "tests/test_jax.py: the PyTorch Llama layer refined by the JAX layer",
        "gpt-tp-sp-apex": "examples/gpt-tp-sp: the same block with PyTorch's layer norm",
        "vllm-qwen2-tp": "examples/vllm-qwen2-real: vLLM's own Qwen2 graphs (tests/test_vllm_real.py)",
        "gpt-tp-vocab": "examples/megatron-gpt: Megatron's own vocab-parallel embedding and cross-entropy",
        # the ONNX route's run script runs for onnx-gpt-sp; the others are captured and verified in-process
        "onnx-block-tp": "tests/test_onnx_examples.py::test_onnx_block_tp_refines",
        "onnx-llama-tp": "tests/test_onnx_examples.py::test_onnx_llama_tp4_refines (TP 4)",
        "onnx-mlp-missing-allreduce": "tests/test_onnx_examples.py::test_onnx_missing_allreduce_is_flagged",
        # (suite time: a model file an in-process test captures and verifies in the same or a larger
        # configuration; the run scripts of each route -- fx, hlo, onnx, ir, NeuronX, bug exit 1 -- run by default
        # for mlp-tp, jax-mlp-gspmd, onnx-gpt-sp, paper-fig1, neuronx-*, megatron-*, the bugs of paper-fig1,
        # NeuronX and megatron-core)
        "llama-tp": "tests/test_llama.py::test_llama_forward_and_backward",
        "gpt-tp": "tests/test_fx.py::test_gpt_block_tensor_parallel",
        "gpt-tp-sp": "tests/test_fx.py::test_sequence_parallel_block",
        "gpt-tp-dtensor": "tests/test_fx_dtensor.py::test_gpt_block_sequence_parallel_backward",
        "grad-accum": "tests/test_fx.py::test_gradient_accumulation",
        "mlp-dp-tp": "tests/test_dp_tp.py::test_every_rank_logs_the_loss_and_holds_its_gradient_slice",
        "dp-grads": "tests/test_dp_grads.py::test_every_rank_holds_the_sequential_loss_and_gradients",
        "moe-ep": "tests/test_moe.py::test_expert_parallel_forward_and_backward",
        "jax-block-shardmap": "tests/test_jax.py::test_example_refines_with_expected_output_layout",
        "jax-block-gspmd": "tests/test_jax.py::test_example_refines_with_expected_output_layout",
        "jax-mlp-shardmap": "tests/test_jax.py::test_example_refines_with_expected_output_layout",
        "dp-tp-wrong-group": "tests/test_dp_tp.py::test_gradients_averaged_over_the_tp_group_are_flagged",
        "dp-grads-sum": "tests/test_dp_grads.py::test_summed_gradients_are_flagged_at_the_mean_loss",
        "mlp-tp-grad-scale": "tests/test_fx.py::test_grad_scale_bug",
        "grad-accum-scale": "tests/test_fx.py::test_gradient_accumulation_without_loss_scaling",
        "sharded-experts-sp": "tests/test_fx.py::test_sharded_experts_under_sp",
        "rope-offset-sp": "tests/test_llama.py::test_rope_offset_in_custom_backward",
        "pad-slice-mismatch": "tests/test_llama.py::test_pad_slice_mismatch",
        "moe-local-expert-id":
            "tests/test_moe_sparse.py::test_local_expert_index_bug_is_flagged_at_the_token_selection",
        "aux-loss-scale": "tests/test_moe.py::test_aux_loss_not_divided_is_flagged_at_the_router_softmax_backward",
        "missing-allreduce": "tests/test_fx.py::test_missing_allreduce_bug",
        "jax-block-missing-psum":
            "tests/test_jax.py::test_shard_map_block_missing_its_psum_does_not_refine_at_the_norm_that_reads_it",
        "onnx-mlp-tp": "tests/test_onnx_examples.py::test_onnx_mlp_tp_refines (capture, then the CLI's verify)"}


def test_slow_examples_name_tests_that_exist():
    """Every run script left to -m slow names where its model is verified by default; the named tests exist."""
    root = EXAMPLES.parent
    assert set(SLOW) <= {d.name for d in EXAMPLE_DIRS + BUG_DIRS}
    for name, why in SLOW.items():
        for path, test in re.findall(r"(tests/\w+\.py)::(\w+)", why):
            assert re.search(rf"^def {test}\(", (root / path).read_text(), re.M), (name, path, test)


@pytest.mark.parametrize("d", [pytest.param(d, marks=pytest.mark.slow) if d.name in SLOW else d
                               for d in EXAMPLE_DIRS + BUG_DIRS], ids=lambda d: d.name)
def test_run_script_exit_code_and_replay(d, tmp_path):
    """run exits 0 for correct examples, 1 for bugs, from another working directory; replay agrees."""
    args = ARGS.get(d.name, [])
    if d.name in KEPT and importlib.util.find_spec(d.name.split("-")[0]) is None:
        args = KEPT[d.name]  # (the framework is not a test dependency: the run script verifies the graphs it kept)
    out = tmp_path / "result.json"
    p = subprocess.run([str(d / "run"), *args, "--replay", "--json", str(out)], capture_output=True,
                       text=True, cwd=tmp_path, env={**os.environ, **ENV.get(d.name, {})})
    expected = 1 if d.parent.name == "bugs" else 0
    assert p.returncode == expected, p.stdout + p.stderr
    res = json.loads(out.read_text())
    assert res["replay"]["ok"] and res["replay"]["checked"] >= 1
    assert (d / "README.md").is_file()
    for line in R_O.get(d.name, []):
        assert f"  {line}\n" in p.stdout, p.stdout
    if expected == 1:
        assert res["failure"]["replay"]["max_abs_diff"] > 1e-3  # the bug is numerically visible
        if d.name in BUG_AT:
            assert (res["failure"]["op"], res["failure"]["node"]) == BUG_AT[d.name], res["failure"]


@pytest.mark.parametrize("name", ["paper-fig1", "paper-fig1-symbolic"])
def test_paper_fig1_certificate(name):
    r = graphguard.verify(*files(EXAMPLES / name), replay=True)
    assert r.verdict == "refines" and r.exit_code == 0
    assert r.r_o_lines() == ["F = concat(F@0, F@1, dim=0)"]
    assert r.replay["ok"]


def test_paper_fig1_keeps_both_relations_of_c():
    """Several clean expressions per tensor are kept: later operators may need either."""
    r = graphguard.verify(*files(EXAMPLES / "paper-fig1"))
    c = sorted(graphguard.ir.to_text(e) for e in r.relations["C"])
    assert c == ["concat(D@0, D@1, dim=0)", "sum(C@0, C@1)"]


def test_missing_reduction_is_flagged_at_the_subtraction():
    r = graphguard.verify(*files(EXAMPLES / "bugs" / "paper-fig1-missing-reduction"), replay=True)
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    f = r.failure
    assert (f.op, f.node, f.loc, f.outputs) == ("core.sub", "sub", "model.py:4", ["F"])
    assert f.input_relations["C"] == ["sum(C@0, C@1)"]
    assert f.input_relations["E"] == ["concat(E@0, E@1, dim=0)"]
    assert "D@0" in f.explored and "D@1" in f.explored
    assert f.replay["max_abs_diff"] > 1e-3
    assert r.replay["ok"]  # every relation found before the failure still holds numerically


def test_cli_text_of_a_bug(tmp_path):
    from conftest import run_cli
    p = run_cli("verify", *sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"),
                files(EXAMPLES / "bugs" / "paper-fig1-missing-reduction"))), []))
    assert p.returncode == 1
    assert "stopped at G_s operator core.sub (node 'sub' -> F) at model.py:4" in p.stdout
    assert "C = sum(C@0, C@1)" in p.stdout
