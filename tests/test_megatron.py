"""megatron-core's real GPTModel (examples/megatron-gpt) and the lemmas it needs (lemmas 1300-1306 of lemma_packs/aten/).

The example itself runs in test_examples.py (TP=2 forward and backward, with replay); here: its other configurations, the
one-rank group of a TP=1 capture, and one-line "proves" / "must not prove" tests of lemmas 1300-1306.
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import EXAMPLES
from graphguard.testing import proves

# -- lemmas: Megatron's attention at TP=2 (s=8, b=2, 4 heads of 4, 2 per rank) -------------------------------

SH = {"Q0": [8, 2, 2, 4], "Q1": [8, 2, 2, 4], "K0": [8, 2, 2, 4], "K1": [8, 2, 2, 4]}
Q = "permute(reshape(concat(Q0, Q1, dim=2), shape=[8, 8, 4]), dims=[1, 0, 2])"  # [b*heads, s, hn]
K = "permute(reshape(concat(K0, K1, dim=2), shape=[8, 8, 4]), dims=[1, 2, 0])"  # [b*heads, hn, s]
ZEROS = "aten.full(size=[{}, 8, 8], fill_value=0, dtype=float32)"


def _rank_scores(r: int, beta: int = 0) -> str:
    q = f"permute(reshape(Q{r}, shape=[8, 4, 4]), dims=[1, 0, 2])"
    k = f"permute(reshape(K{r}, shape=[8, 4, 4]), dims=[1, 2, 0])"
    return f"aten.baddbmm({ZEROS.format(4)}, {q}, {k}, beta={beta}, alpha=0.5)"


def _interleaved(a: str, b: str) -> str:
    """The ranks' [b*heads/2, s, s] scores, their heads put back between each batch row's."""
    return f"reshape(concat(reshape({a}, shape=[2, 2, 8, 8]), reshape({b}, shape=[2, 2, 8, 8]), dim=1), shape=[8, 8, 8])"


def test_merged_batch_attention_scores_are_the_ranks_interleaved():
    spec = f"aten.baddbmm({ZEROS.format(8)}, {Q}, {K}, beta=0, alpha=0.5)"
    assert proves(spec, _interleaved(_rank_scores(0), _rank_scores(1)), SH)


def test_merged_batch_scores_are_not_the_ranks_concatenated():
    """Concatenating the ranks' merged dims (rank 0's batch rows first) is not the interleaving."""
    spec = f"aten.baddbmm({ZEROS.format(8)}, {Q}, {K}, beta=0, alpha=0.5)"
    assert not proves(spec, f"concat({_rank_scores(0)}, {_rank_scores(1)}, dim=0)", SH)


def test_baddbmm_with_beta_0_ignores_its_input():
    sh = {"C": [2, 3, 3], "A": [2, 3, 4], "B": [2, 4, 3]}
    assert proves("aten.baddbmm(C, A, B, beta=0, alpha=0.25)", "aten.mul.Scalar(aten.bmm(A, B), other=0.25)", sh)


def test_baddbmm_with_beta_1_reads_its_input():
    sh = {"C": [2, 3, 3], "A": [2, 3, 4], "B": [2, 4, 3]}
    assert not proves("aten.baddbmm(C, A, B, beta=1, alpha=0.25)", "aten.mul.Scalar(aten.bmm(A, B), other=0.25)", sh)


def test_transpose_of_merging_view_moves_merged_dims_whole():
    sh = {"X": [3, 2, 4, 5]}
    assert proves("permute(reshape(X, shape=[3, 8, 5]), dims=[1, 0, 2])",
                  "reshape(permute(X, dims=[1, 2, 0, 3]), shape=[8, 3, 5])", sh)
    assert not proves("permute(reshape(X, shape=[3, 8, 5]), dims=[1, 0, 2])",
                      "reshape(permute(X, dims=[2, 1, 0, 3]), shape=[8, 3, 5])", sh)


def test_transpose_of_splitting_view_keeps_split_dims_together():
    sh = {"X": [4, 8, 5]}
    assert proves("permute(reshape(X, shape=[2, 2, 8, 5]), dims=[2, 0, 1, 3])",
                  "reshape(permute(X, dims=[1, 0, 2]), shape=[8, 2, 2, 5])", sh)
    # a permutation that takes a split dim apart is no transpose of X
    assert not proves("permute(reshape(X, shape=[2, 2, 8, 5]), dims=[1, 2, 0, 3])",
                      "reshape(permute(X, dims=[1, 0, 2]), shape=[2, 8, 2, 5])", sh)


def test_masked_fill_with_a_broadcast_mask_splits_over_heads():
    sh = {"A": [2, 1, 3, 3], "B": [2, 1, 3, 3], "M": [1, 1, 3, 3]}
    fill = "aten.masked_fill.Scalar({}, M, value=-10000)"
    assert proves(fill.format("concat(A, B, dim=1)"), f"concat({fill.format('A')}, {fill.format('B')}, dim=1)", sh,
                  dtypes={"M": "bool"})


def test_masked_fill_with_a_mask_varying_along_the_split_dim_does_not_split():
    sh = {"A": [1, 3], "B": [1, 3], "M": [2, 3]}
    fill = "aten.masked_fill.Scalar({}, {}, value=0)"
    assert not proves(fill.format("concat(A, B, dim=0)", "M"),
                      f"concat({fill.format('A', 'slice(M, dim=0, start=1, end=2)')}, "
                      f"{fill.format('B', 'slice(M, dim=0, start=0, end=1)')}, dim=0)", sh, dtypes={"M": "bool"})


# -- capture: Megatron's TP=1 program all-reduces on a one-rank group ------------------------------------------

def test_collective_over_one_rank_is_its_input():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    from torch.testing._internal.distributed.fake_pg import FakeStore

    import graphguard.torch as gt

    class M(torch.nn.Module):
        def forward(self, x):
            return funcol.all_reduce(x * 2, "sum", dist.group.WORLD)

    def build(rank):
        dist.init_process_group("fake", rank=0, world_size=1, store=FakeStore())
        return M()

    try:
        c = gt.capture(build, (torch.ones(2, 3),), world_size=1)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    ops = [n["op"] for n in c.doc["nodes"]]
    assert "aten.mul.Tensor" in ops and not any(op.startswith("core.all_") for op in ops)
    out = next(n for n in c.doc["nodes"] if n["outputs"] == ["out0"])
    assert out["op"] == "core.identity" and out["inputs"] == [next(n for n in c.doc["nodes"]
                                                                  if n["op"] == "aten.mul.Tensor")["outputs"][0]]


# -- the example's other configurations -------------------------------------------------------------------------

def _run(*args, env=None):
    pytest.importorskip("megatron.core")
    return subprocess.run([str(EXAMPLES / "megatron-gpt" / "run"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


@pytest.mark.parametrize("args,env", [pytest.param(["--backward"], {}, marks=pytest.mark.slow),
                                      pytest.param(["--world-size", "4"], {}, marks=pytest.mark.slow),
                                      # (test_examples' run of megatron-gpt: the same command)
                                      pytest.param(["--backward"], {"GG_SP": "1"}, marks=pytest.mark.slow),
                                      pytest.param([], {"GG_LABELS": "0"}, marks=pytest.mark.slow)],
                         ids=["tp2-backward", "tp4", "tp2-sp-backward", "tp2-logits"])
def test_megatron_gpt_refines(args, env):
    p = _run(*args, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    world = args[args.index("--world-size") + 1] if "--world-size" in args else "2"
    if env.get("GG_LABELS") == "0":
        parts = ", ".join(f"out0@{r}" for r in range(int(world)))
        assert f"out0 = concat({parts}, dim=2)" in p.stdout  # the vocabulary-parallel logits
    else:  # the loss per token from Megatron's vocab-parallel cross-entropy, the same on every rank
        assert all(f"out0 = out0@{r}" in p.stdout for r in range(int(world)))
    if "--backward" in args:
        assert "grad.embedding.word_embeddings.weight = concat(grad.embedding.word_embeddings.weight@0, " \
               "grad.embedding.word_embeddings.weight@1, dim=0)" in p.stdout
    if args == ["--backward"] and not env:  # (tests/test_megatron_ce.py's run with labels: the same command)
        assert "out0 = out0@0" in p.stdout and "out0 = out0@1" in p.stdout  # the loss per token, on every rank
        assert "grad.output_layer.weight = concat(grad.output_layer.weight@0, grad.output_layer.weight@1, dim=0)" \
            in p.stdout
    if env.get("GG_SP") == "1":  # summed by Megatron's gradient step after backward (finalize_grads)
        for r in range(2):
            assert f"grad.decoder.final_layernorm.weight = grad.decoder.final_layernorm.weight@{r}" in p.stdout
            assert f"grad.decoder.layers.0.mlp.linear_fc2.bias = grad.decoder.layers.0.mlp.linear_fc2.bias@{r}" \
                in p.stdout


# -- bugs planted in megatron-core (examples/bugs/megatron-*; their run scripts also run in test_examples.py) --

def _bug(name, tmp_path):
    pytest.importorskip("megatron.core")
    out = tmp_path / "result.json"
    p = subprocess.run([str(EXAMPLES / "bugs" / name / "run"), "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(out.read_text())


@pytest.mark.slow  # (its run script runs in tests/test_examples.py, which checks the operator)
def test_megatron_sp_layernorm_grad_allreduce_skipped(tmp_path):
    res = _bug("megatron-sp-layernorm-grad", tmp_path)
    f = res["failure"]
    assert (f["op"], f["node"], f["loc"]) == ("aten.native_layer_norm_backward", "bw.native_layer_norm_backward",
                                              "transformer_block.py:790")  # the final LayerNorm, first in backward
    assert f["partial_output"] == "grad.decoder.final_layernorm.bias"
    assert "left as partial results on the ranks" in f["reason"]
    assert "grad.decoder.layers.0.input_layernorm.weight" in f["reason"]  # also left partial


@pytest.mark.slow  # (its run script runs in tests/test_examples.py, which checks the operator)
def test_megatron_sp_grads_averaged_instead_of_summed(tmp_path):
    res = _bug("megatron-sp-grad-avg", tmp_path)
    f = res["failure"]
    # each rank holds half of the sequence-parallel LayerNorm gradients (avg, not sum): the two halves are shares
    # of the sequential gradient, which no rank holds -- reported where those partial results began, the final
    # LayerNorm first in backward (before scalar forms and shares of scales it was the first such output)
    assert (f["op"], f["node"]) == ("aten.native_layer_norm_backward", "bw.native_layer_norm_backward")
    assert "left as partial results on the ranks" in f["reason"]
    assert "grad.decoder.layers.0.input_layernorm.weight" in f["reason"]
