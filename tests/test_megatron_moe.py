"""megatron-core's MoE layer (examples/megatron-moe) and what it needs: aten.scatter.value, aten.sort.stable
and lemmas 1350-1351 (lemma_packs/aten/indexing.py).

The lemmas get one-line "proves" / "must not prove" tests; the operators' references are checked against
torch; the example runs Megatron's own layer at expert-parallel size 2 (all-to-all dispatcher, padded to a
capacity equal to the tokens: dropless) and a copy with a planted routing bug.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from conftest import EXAMPLES
from graphguard.testing import proves

# -- lemma 1350: the router's combine weights, token shards -----------------------------------------------------

SH = {"I0": [3, 2], "I1": [5, 2], "P0": [3, 2], "P1": [5, 2]}
IDX = {"I0": "int64", "I1": "int64"}


def _scatter(n: int, i: str, p: str, dim: int = 1) -> str:
    return f"aten.scatter.src(aten.full(size=[{n}, 4], fill_value=0, dtype=float32), {i}, {p}, dim={dim})"


def test_scatter_into_zeros_of_token_shards_is_the_shards_scatters():
    spec = _scatter(8, "concat(I0, I1, dim=0)", "concat(P0, P1, dim=0)")
    assert proves(spec, f"concat({_scatter(3, 'I0', 'P0')}, {_scatter(5, 'I1', 'P1')}, dim=0)", SH, dtypes=IDX)


def test_scatter_along_the_concat_dim_does_not_split():
    """Written along the dim the shards are stacked in, an index of one shard points into the whole."""
    sh = {"I0": [4, 2], "I1": [4, 2], "P0": [4, 2], "P1": [4, 2]}
    spec = "aten.scatter.src(aten.full(size=[8, 2], fill_value=0, dtype=float32), concat(I0, I1, dim=0), concat(P0, P1, dim=0), dim=0)"
    part = "aten.scatter.src(aten.full(size=[4, 2], fill_value=0, dtype=float32), {}, {}, dim=0)"
    assert not proves(spec, f"concat({part.format('I0', 'P0')}, {part.format('I1', 'P1')}, dim=0)", sh, dtypes=IDX)


# -- lemma 1351: the capacity mask -------------------------------------------------------------------------------

def _mask(k: int) -> str:
    return (f"aten.scatter.value(aten.full(size=[8, 4], fill_value=0, dtype=float32), "
            f"aten.topk#1(Y, k={k}, dim=0, largest=true, sorted=false), dim=0, value=1)")


def test_capacity_of_every_token_keeps_every_token():
    assert proves(_mask(8), "aten.full(size=[8, 4], fill_value=1, dtype=float32)", {"Y": [8, 4]})


def test_capacity_below_the_tokens_drops_some():
    assert not proves(_mask(7), "aten.full(size=[8, 4], fill_value=1, dtype=float32)", {"Y": [8, 4]})


def test_topk_along_another_dim_does_not_cover_this_one():
    mask = ("aten.scatter.value(aten.full(size=[4, 4], fill_value=0, dtype=float32), "
            "aten.topk#1(Y, k=4, dim=1, largest=true, sorted=false), dim=0, value=1)")
    assert not proves(mask, "aten.full(size=[4, 4], fill_value=1, dtype=float32)", {"Y": [4, 4]})


# -- the operators' references against torch ---------------------------------------------------------------------

def test_sort_stable_and_scatter_value_references_match_torch():
    torch = pytest.importorskip("torch")
    from lemma_packs.aten.ops.indexing import _scatter_value_ref
    from lemma_packs.aten.ops.mixture_of_experts import _sort_ref
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.integers(0, 3, (3, 6)).astype(np.float64)  # ties: the stable order matters
        for desc in (False, True):
            v, i = _sort_ref([x], {"dim": 1, "descending": desc})
            tv, ti = torch.sort(torch.tensor(x), dim=1, descending=desc, stable=True)
            assert (i == ti.numpy()).all() and (v == tv.numpy()).all()
        idx = rng.integers(0, 3, (2, 6))
        out = _scatter_value_ref([x, idx], {"dim": 0, "value": 5})
        assert (out == torch.tensor(x).scatter(0, torch.tensor(idx), 5).numpy()).all()


# -- the example ---------------------------------------------------------------------------------------------------

def _run(*args, env=None):
    pytest.importorskip("megatron.core")
    return subprocess.run([str(EXAMPLES / "megatron-moe" / "run"), *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


@pytest.mark.slow  # (suite time: the forward runs in tests/test_examples.py)
def test_expert_parallel_backward_refines():
    """Forward and backward at EP 2: the router's weight gradient summed over the ranks' tokens, the input
    gradient sharded as the tokens, each expert's gradient on the rank that owns it."""
    p = _run("--backward", "--replay")
    assert p.returncode == 0, p.stdout + p.stderr
    for line in ["out0 = concat(out0@0, out0@1, dim=0)",
                 "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1)",
                 "grad.hidden_states = concat(grad.hidden_states@0, grad.hidden_states@1, dim=0)",
                 "grad.experts.local_experts.3.linear_fc2.weight = grad.experts.local_experts.1.linear_fc2.weight@1"]:
        assert f"  {line}\n" in p.stdout, p.stdout
    assert "replay: ok" in p.stdout


@pytest.mark.slow  # (suite time: the correct layer's forward runs in tests/test_examples.py)
def test_planted_routing_bug_is_flagged_at_the_expert_choice():
    """The ranks' router logits rotated by one expert: flagged at the router's top-k (the expert choice), an
    operator the correct layer gets past (it is related there as the concatenation of the ranks' top-k)."""
    bad = subprocess.run([str(EXAMPLES / "bugs" / "megatron-moe-routing" / "run")], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "stopped at G_s operator aten.topk (node 'topk' -> topk#0, topk#1) at moe_utils.py:697" in bad.stdout
    good = _run()
    assert good.returncode == 0, good.stdout + good.stderr
    # the layer's output, tokens sharded over the ranks as the input is; the dispatcher's token order, which
    # Megatron keeps on the module, is no output
    assert "out0 = concat(out0@0, out0@1, dim=0)" in good.stdout and "out1" not in good.stdout


@pytest.mark.slow  # (about 80 s: examples/megatron-moe/README.md, "TP x EP")
def test_tensor_times_expert_parallel_refines():
    """EP 2 x TP 2 with sequence parallel: the router over interleaved token shards, the experts' probabilities
    multiplied on rows another all-gather re-sorted, fc2 on the pair's column halves, the output reached through
    reduce-scatter, all-to-all and scatter_add (relayout.py's labels, sums and row layouts)."""
    p = _run("--world-size", "4", "--replay", env={"GG_TP": "2"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert ("out0 = permute(reshape(concat(out0@0, out0@1, out0@2, out0@3, dim=0), shape=[2, 4, 8]), "
            "dims=[1, 0, 2])") in p.stdout
    assert "replay: ok" in p.stdout


@pytest.mark.slow  # (about a minute: capture 8 s, verify 44 s)
def test_tensor_times_expert_parallel_backward_refines():
    """EP 2 x TP 2, forward and backward, two experts (top-1): the experts' probabilities on rows an all-gather
    took partly from a rank's own all-to-all (labels carried through G_d's definitions where an entry is
    moved, relayout.py), the router's backward gather over each rank's tokens after the backward all-to-all,
    index_add into zeros at the dispatch's order and the capacity mask G_d proves all ones (labels through
    ``x * 1``), then family 1212 for gather; every gradient where Megatron leaves it, checked by replay."""
    _tp_ep_backward_refines({"GG_TP": "2", "GG_EXPERTS": "2", "GG_TOPK": "1"}, expert=(1, 0), expected=6)


@pytest.mark.slow  # (about two minutes: capture 22 s, verify 86 s)
def test_four_experts_tensor_times_expert_parallel_backward_refines():
    """EP 2 x TP 2, forward and backward, four experts (two per EP rank, top-2): the dispatcher re-sorts the tokens
    by local expert, so the router's backward gather reads the probabilities' gradient -- a partial sum over the
    pair -- after the re-sort, the reduce-scatter, the all-to-all and index_add (relayout.py's Sums carried to
    the gathers' inputs); the probabilities' multiply on interleaved rows is matched on labels first (infer.py);
    grad.hidden_states is expected in another layout of the same entries (same_entries). It was a false alarm."""
    _tp_ep_backward_refines({"GG_TP": "2"}, expert=(3, 1), expected=10)


def _tp_ep_backward_refines(env, expert, expected):
    """The EP 2 x TP 2 forward+backward run refines with replay: the router's gradient the sum over the four
    ranks, expert ``expert[0]``'s fc1 gradient the TP pair of EP rank 1's local expert ``expert[1]``."""
    p = _run("--world-size", "4", "--backward", "--replay", env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    g, e = "grad.experts.local_experts", expert
    for line in ["grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1, grad.router.weight@2, "
                 "grad.router.weight@3)",
                 f"{g}.{e[0]}.linear_fc1.weight = concat({g}.{e[1]}.linear_fc1.weight@2, "
                 f"{g}.{e[1]}.linear_fc1.weight@3, dim=0)"]:
        assert f"  {line}\n" in p.stdout, p.stdout
    assert "replay: ok" in p.stdout and f"expected relations: all {expected} found in R_o" in p.stdout


@pytest.mark.slow  # (about a minute)
def test_planted_tp_gradient_split_is_flagged():
    """Must not prove: the dispatcher's token all-gather over the expert-TP pair splits its gradient instead of
    reduce-scattering it (examples/bugs/megatron-moe-tp-grad) -- flagged where the sum is first needed whole,
    the router's backward gather, with the split among the G_d tensors it explored."""
    pytest.importorskip("megatron.core")
    bad = subprocess.run([str(EXAMPLES / "bugs" / "megatron-moe-tp-grad" / "run")], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "stopped at G_s operator aten.gather (node 'bw.gather_1' -> bw.gather_1) at moe_utils.py:744" in bad.stdout
    assert "mappings.py:75 in _split_along_first_dim" in bad.stdout
    # the hint names the partial sums (inside the layout of the pair's rows) and the missing reduction
    assert "input bw.mul_8 is known only as a sum of the ranks' partial results" in bad.stdout
    assert "no all-reduce or reduce-scatter of G_d follows `experts.local_experts.0`" in bad.stdout


@pytest.mark.slow
def test_planted_routing_bug_is_flagged_at_tensor_times_expert_parallel():
    pytest.importorskip("megatron.core")
    bad = subprocess.run([str(EXAMPLES / "bugs" / "megatron-moe-routing" / "run"), "--world-size", "4"],
                         capture_output=True, text=True, env={**os.environ, "GG_TP": "2"})
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "stopped at G_s operator aten.topk" in bad.stdout, bad.stdout


# -- lemmas 1352-1355 and 511: the dispatch's index arithmetic and all-to-all views --------------------------------

_ORDER = "aten.expand(reshape(aten.arange(end={n}, dtype=None), shape=[1, {n}]), size=[{e}, {n}], implicit=false)"


def test_expert_offsets_plus_token_order_is_arange():
    lhs = (f"aten.add.Tensor(aten.mul.Tensor(reshape(aten.arange(end=4, dtype=None), shape=[4, 1]),"
           f" aten.scalar_tensor(s=8, dtype=int64)), {_ORDER.format(n=8, e=4)}, alpha=1)")
    assert proves(f"aten.index_select(X, reshape({lhs}, shape=[32]), dim=0)", "X", {"X": [32, 3]})


def test_expert_offsets_of_another_stride_are_not_arange():
    lhs = (f"aten.add.Tensor(aten.mul.Tensor(reshape(aten.arange(end=4, dtype=None), shape=[4, 1]),"
           f" aten.scalar_tensor(s=7, dtype=int64)), {_ORDER.format(n=8, e=4)}, alpha=1)")
    assert not proves(f"aten.index_select(X, reshape({lhs}, shape=[32]), dim=0)", "X", {"X": [32, 3]})


def _unpermute(n, e, h, y="Y"):
    idx = f"aten.expand(reshape({_ORDER.format(n=n, e=e)}, shape=[{e * n}, 1]), size=[-1, {h}], implicit=false)"
    return f"aten.scatter_add(aten.zeros(size=[{n}, {h}], dtype=float32), {idx}, {y}, dim=0)"


def test_unpermute_is_the_sum_over_experts():
    sum_e = "aten.sum.dim_IntList(reshape(Y, shape=[4, 8, 3]), dim=[0], keepdim=false, dtype=None)"
    assert proves(_unpermute(8, 4, 3), sum_e, {"Y": [32, 3]})


def test_unpermute_is_not_the_sum_over_tokens():
    """The rows are expert-major: [tokens, experts] is another grouping of the same rows."""
    wrong = ("aten.sum.dim_IntList(permute(reshape(Y, shape=[8, 4, 3]), dims=[1, 0, 2]), dim=[0], keepdim=false,"
             " dtype=None)")
    assert not proves(_unpermute(8, 4, 3), wrong, {"Y": [32, 3]})


_R4 = "reshape(C, shape=[2, 2, 4, 8])"


def test_all_to_all_chunk_of_transposed_view_is_a_slice_of_the_merged_view():
    chunk = f"reshape(slice(reshape(permute({_R4}, dims=[1, 0, 2, 3]), shape=[16, 8]), dim=0, start=8, end=16), shape=[2, 4, 8])"
    assert proves(f"concat(reshape(C, shape=[2, 8, 8]), {chunk}, dim=1)",
                  "concat(reshape(C, shape=[2, 8, 8]), slice(reshape(C, shape=[2, 8, 8]), dim=1, start=4, end=8), dim=1)",
                  {"C": [16, 8]})


def test_all_to_all_chunk_is_not_the_other_ranks_rows():
    chunk = f"reshape(slice(reshape(permute({_R4}, dims=[1, 0, 2, 3]), shape=[16, 8]), dim=0, start=8, end=16), shape=[2, 4, 8])"
    assert not proves(f"concat(reshape(C, shape=[2, 8, 8]), {chunk}, dim=1)",
                      "concat(reshape(C, shape=[2, 8, 8]), slice(reshape(C, shape=[2, 8, 8]), dim=1, start=0, end=4), dim=1)",
                      {"C": [16, 8]})


def test_slice_of_a_permute_that_moves_data_is_no_view():
    """Slicing one row of the moved dim of [3, 2, 2] leaves [2, 1, 2] -> [1, 2, 2]: no data moves; two rows do."""
    assert proves("slice(permute(X, dims=[1, 0, 2]), dim=0, start=1, end=2)",
                  "reshape(slice(X, dim=1, start=1, end=2), shape=[1, 3, 2])", {"X": [3, 2, 2]})
    assert not proves("slice(permute(X, dims=[1, 0, 2]), dim=1, start=0, end=2)",
                      "reshape(slice(X, dim=0, start=0, end=2), shape=[2, 2, 2])", {"X": [3, 2, 2]})


@pytest.mark.slow  # (the sharded-token run is tests/test_examples.py's)
def test_replicated_tokens_verify_on_every_rank():
    """Every rank the same tokens: each rank's experts run on both ranks' copies; every rank holds the output."""
    p = _run(env={"GG_TOKENS": "replicated"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "out0 = out0@0" in p.stdout and "out0 = out0@1" in p.stdout


# -- lemmas 1356-1358: the permutations' backward ---------------------------------------------------------------

_COL = "aten.expand(reshape({o}, shape=[32, 1]), size=[-1, 3], implicit=false)".format(o=_ORDER.format(n=8, e=4))
_REPEAT = "reshape(aten.expand(reshape(G, shape=[1, 8, 3]), size=[4, 8, 3], implicit=false), shape=[32, 3])"


def test_gather_at_the_token_order_repeats_the_gradient_per_expert():
    assert proves(f"aten.gather(G, {_COL}, dim=0)", _REPEAT, {"G": [8, 3]})


def test_gather_at_the_token_order_is_not_each_token_repeated():
    """Expert-major: the whole gradient once per expert, not each row four times in a row."""
    rows = "reshape(aten.expand(reshape(G, shape=[8, 1, 3]), size=[8, 4, 3], implicit=false), shape=[32, 3])"
    assert not proves(f"aten.gather(G, {_COL}, dim=0)", rows, {"G": [8, 3]})


def test_index_add_at_arange_into_zeros_is_the_source():
    lhs = "aten.index_add(aten.full(size=[6, 2], fill_value=0, dtype=float32), aten.arange(end=6, dtype=None), Y, dim=0, alpha=1)"
    assert proves(lhs, "Y", {"Y": [6, 2]})


def test_index_add_at_arange_into_ones_is_not_the_source():
    lhs = "aten.index_add(aten.full(size=[6, 2], fill_value=1, dtype=float32), aten.arange(end=6, dtype=None), Y, dim=0, alpha=1)"
    assert not proves(lhs, "Y", {"Y": [6, 2]})


def _index_add(z="aten.full(size=[8, 3], fill_value=0, dtype=float32)"):
    return f"aten.index_add({z}, reshape({_ORDER.format(n=8, e=4)}, shape=[32]), Y, dim=0, alpha=1)"


def test_index_add_at_the_token_order_is_the_sum_over_experts():
    sum_e = "aten.sum.dim_IntList(reshape(Y, shape=[4, 8, 3]), dim=[0], keepdim=false, dtype=None)"
    assert proves(_index_add(), sum_e, {"Y": [32, 3]})


def test_index_add_at_the_token_order_is_not_the_sum_over_tokens():
    wrong = ("aten.sum.dim_IntList(permute(reshape(Y, shape=[8, 4, 3]), dims=[1, 0, 2]), dim=[0], keepdim=false,"
             " dtype=None)")
    assert not proves(_index_add(), wrong, {"Y": [32, 3]})


# -- the router's auxiliary load-balancing loss -----------------------------------------------------------------

def _routing_map(n: int, i: str, dim: int = 1) -> str:
    return f"aten.scatter.value(aten.full(size=[{n}, 4], fill_value=0, dtype=int32), {i}, dim={dim}, value=1)"


def test_routing_map_of_token_shards_is_the_shards_maps():
    """lemma aten:1359: ones written at each token's top-k experts, the tokens in shards."""
    sh, idx = {"I0": [3, 2], "I1": [5, 2]}, {"I0": "int64", "I1": "int64"}
    assert proves(_routing_map(8, "concat(I0, I1, dim=0)"),
                  f"concat({_routing_map(3, 'I0')}, {_routing_map(5, 'I1')}, dim=0)", sh, dtypes=idx)


def test_routing_map_along_the_shard_dim_does_not_split():
    sh, idx = {"I0": [4, 2], "I1": [4, 2]}, {"I0": "int64", "I1": "int64"}
    part = "aten.scatter.value(aten.full(size=[4, 2], fill_value=0, dtype=int32), {}, dim=0, value=1)"
    assert not proves("aten.scatter.value(aten.full(size=[8, 2], fill_value=0, dtype=int32), concat(I0, I1, dim=0), "
                      "dim=0, value=1)", f"concat({part.format('I0')}, {part.format('I1')}, dim=0)", sh, dtypes=idx)


def test_aux_loss_scaler_gives_megatrons_gradients():
    """graphguard.patches.megatron reads MoEAuxLossAutoScaler's backward scale as a number (TorchDynamo cannot
    read the class attribute): the same gradients, 1.0 by default and what set_loss_scale sets."""
    import torch
    from graphguard.patches import megatron as gm
    gm.patch()
    from megatron.core.transformer.moe.moe_utils import MoEAuxLossAutoScaler as S
    try:
        for scale in (None, 0.25):
            if scale is not None:
                S.set_loss_scale(torch.tensor(scale))
            out, aux = torch.randn(3, requires_grad=True), torch.tensor(2.0, requires_grad=True)
            S.apply(out, aux).sum().backward()
            assert torch.equal(out.grad, torch.ones(3)) and aux.grad.item() == (scale or 1.0)
    finally:
        S.set_loss_scale(torch.tensor(1.0))


@pytest.mark.slow  # (about 1 minute)
def test_global_aux_loss_refines_and_the_local_one_is_named():
    """Megatron's global_aux_loss (token counts all-reduced before the loss) at EP 2, forward and backward,
    refines the layer at EP 1; the per-rank aux_loss (each rank's own token counts) does not, and the report
    names the router's token counts as the partial sums no all-reduce follows."""
    p = _run("--backward", env={"GG_AUX": "global_aux_loss"})
    assert p.returncode == 0, p.stdout + p.stderr
    assert "grad.router.weight = sum(grad.router.weight@0, grad.router.weight@1)" in p.stdout
    p = _run("--backward", env={"GG_AUX": "aux_loss"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "in switch_load_balancing_loss_func, module router" in p.stdout
    assert "the partial sums begin at G_s aten.sum.dim_IntList (moe_utils.py:" in p.stdout
    assert "in get_tokens_per_expert_and_token_count, module router" in p.stdout
    # planted: the ranks' coefficient multiplied by the EP size (examples/bugs/megatron-moe-aux-scale)
    bad = subprocess.run([str(EXAMPLES / "bugs" / "megatron-moe-aux-scale" / "run")], capture_output=True, text=True)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert ("stopped at G_s operator aten.mul.Tensor (node 'bw.mul_18' -> bw.mul_18) at moe_utils.py:130 in "
            "switch_load_balancing_loss_func, module router") in bad.stdout
