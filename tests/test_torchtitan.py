"""torchtitan 0.3.0's Llama-3 parallelized by torchtitan (examples/torchtitan-llama): the graphs a capture with
torchtitan installed wrote (kept in examples/torchtitan-llama/captured, provenance in the example's README),
verified here without torchtitan; bugs planted by editing the kept implementation graphs (a collective
dropped) flagged at the right operator; and the operators and lemmas (1700-1799) that torchtitan's model
needed, each with a proving and a must-not-prove case.
"""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
import yaml
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.placement_types import _StridedShard

import graphguard
from graphguard.testing import proves
from graphguard.errors import InputError
from graphguard.frontends.fx.dtensor import Layout

from conftest import EXAMPLES, run_cli

KEPT = EXAMPLES / "torchtitan-llama" / "captured"


def _load(name):
    d = KEPT / name
    return (json.loads((d / "spec.gg.json").read_text()), json.loads((d / "impl.gg.json").read_text()),
            yaml.safe_load((d / "relation.yaml").read_text()))


def _graph(doc):
    from graphguard.ir.scalar import Constraints
    from graphguard.ir.serde import graph_from_dict
    from graphguard.plugins import load_plugins
    return graph_from_dict(doc, f"<kept {doc['name']}>", load_plugins().registry, Constraints())


def _verify(spec, impl, rel, **kw):
    return graphguard.verify(_graph(spec), _graph(impl), rel, **kw)


# -- the kept graphs -------------------------------------------------------------------------------------

def test_tp2_sequence_parallel_forward_backward_refines():
    """TP=2 with sequence parallelism, forward and backward: the vocab-sharded logits and every gradient
    (sharded like its parameter; the RMSNorm weights' left as partial sums, as DTensor leaves them for the
    optimizer step)."""
    spec, impl, rel = _load("tp2")
    r = _verify(spec, impl, rel)
    assert r.verdict == "refines", r.failure
    lines = r.r_o_lines()
    assert "out0 = concat(out0@0, out0@1, dim=2)" in lines
    assert ("grad.model.layers.0.attention.qkv_linear.wqkv.weight = concat(grad.model.layers.0.attention.qkv_linear."
            "wqkv.weight@0, grad.model.layers.0.attention.qkv_linear.wqkv.weight@1, dim=0)") in lines
    assert ("grad.model.layers.0.ffn_norm.weight = sum(grad.model.layers.0.ffn_norm.weight@0, "
            "grad.model.layers.0.ffn_norm.weight@1)") in lines
    assert r.expect["checked"] == 11 and not r.expect["missing"]


@pytest.mark.slow
def test_fsdp_x_tp_forward_backward_refines():
    """SimpleFSDP (dp_shard 2) x TP 2 on a 2-D mesh: parameters all-gathered over the DP group before use,
    gradients reduce-scattered back to each rank's FSDP x TP shard."""
    spec, impl, rel = _load("fsdp2x-tp2")
    ops = [n["op"] for n in impl["nodes"]]
    assert ops.count("core.all_gather") >= 10 and ops.count("core.reduce_scatter") >= 10
    r = _verify(spec, impl, rel)
    assert r.verdict == "refines", r.failure
    lines = r.r_o_lines()
    # w2 is TP Shard(1), FSDP Shard(0): rank (f, t) holds rows f, columns t
    w2 = "grad.model.layers.0.feed_forward.w2.weight"
    assert (f"{w2} = concat(concat({w2}@0, {w2}@1, dim=1), concat({w2}@2, {w2}@3, dim=1), dim=0)") in lines
    assert "out0 = concat(concat(out0@0, out0@1, dim=2), concat(out0@2, out0@3, dim=2), dim=0)" in lines
    assert r.expect["checked"] == 10 and not r.expect["missing"]  # every gradient's


def _shapes(doc) -> dict:
    """Every tensor's shape in a graph document, from graphguard's own loader."""
    g = _graph(doc)
    return {t: [int(d) for d in g.shape(t)] for n in g.nodes for t in n.inputs + n.outputs}


def _drop(impl, op, pick, replace):
    """The implementation with the first collective of kind ``op`` that ``pick(node)`` accepts replaced, on every
    rank, by the node ``replace(rank, input, output, node, shapes)`` returns."""
    impl, shapes = copy.deepcopy(impl), _shapes(impl)
    i = next(i for i, n in enumerate(impl["nodes"]) if n["op"] == op and pick(n))
    n = impl["nodes"][i]
    impl["nodes"][i:i + 1] = [replace(r, a, o, n, shapes) for r, (a, o) in enumerate(zip(n["inputs"], n["outputs"]))]
    return impl


def _own_slice(r, a, o, n, shapes):
    """A reduce-scatter dropped: each rank keeps its own slice of its partial result."""
    d = n["attrs"]["dim"]
    size = shapes[o][d]
    return {"name": f"drop.{o}", "op": "core.slice", "inputs": [a], "outputs": [o],
            "attrs": {"dim": d, "start": str(r * size), "end": str((r + 1) * size)}}


def _repeat_own(r, a, o, n, shapes):
    """An all-gather dropped: each rank uses its own shard in every place."""
    return {"name": f"drop.{o}", "op": "core.concat", "inputs": [a] * len(n["inputs"]), "outputs": [o],
            "attrs": {"dim": n["attrs"]["dim"]}}


def test_dropped_sequence_parallel_reduce_scatter_is_flagged():
    """The reduce-scatter after the vocabulary-parallel embedding (its partial lookups summed and split along
    the sequence) replaced by each rank's own slice: the embedding's result is never summed, and the first
    operator that needs it whole is flagged."""
    spec, impl, rel = _load("tp2")
    bad = _drop(impl, "core.reduce_scatter", lambda n: True, _own_slice)
    r = _verify(spec, bad, rel)
    assert r.verdict == "does-not-refine"
    # the first operator reading the embedding's output: attention_norm's square (Llama3TransformerBlock.forward)
    assert (r.failure.op, r.failure.node, r.failure.loc) == ("aten.pow.Tensor_Scalar", "pow_1", "model.py:48")


def _reads(impl, name):
    """Does the collective's input come, through reshapes, from G_d input ``name@r``?"""
    producer = {o: n for n in impl["nodes"] for o in n["outputs"]}

    def pick(n):
        t = n["inputs"][0]
        while t in producer and producer[t]["op"] == "core.reshape":
            t = producer[t]["inputs"][0]
        return t.rsplit("@", 1)[0] == name
    return pick


def _keep_own(r, a, o, n, shapes):
    """An all-reduce dropped: each rank keeps its own partial result."""
    return {"name": f"drop.{o}", "op": "core.identity", "inputs": [a], "outputs": [o], "attrs": {}}


@pytest.mark.parametrize("param,op,node", [
    ("model.layers.0.attention_norm.weight", "aten.mul.Tensor", "mul_1"),
    # (the strided FSDP-over-TP shard of a weight; 30 s: the search around the first mm is wide)
    pytest.param("model.layers.0.attention.qkv_linear.wqkv.weight", "aten.mm", "mm", marks=pytest.mark.slow)],
    ids=["norm-weight", "wqkv"])
def test_dropped_fsdp_parameter_all_gather_is_flagged(param, op, node):
    """An FSDP parameter all-gather (over the DP group) replaced by the rank's own shard repeated: the first
    G_s operator reading that parameter is flagged."""
    spec, impl, rel = _load("fsdp2x-tp2")
    bad = _drop(impl, "core.all_gather", _reads(impl, param), _repeat_own)
    r = _verify(spec, bad, rel)
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.node) == (op, node), r.failure


@pytest.mark.slow
def test_dropped_norm_gradient_all_reduce_is_flagged():
    """Under FSDP x TP with sequence parallelism each TP rank holds part of an RMSNorm weight's gradient (its
    sequence shard's); the TP all-reduce before FSDP's reduce-scatter dropped leaves partial sums
    (Megatron-LM #1446's bug class, here in torchtitan's program)."""
    spec, impl, rel = _load("fsdp2x-tp2")
    # the first TP all-reduce of the backward: the final norm's weight gradient, before its reduce-scatter
    bad = _drop(impl, "core.all_reduce", lambda n: n["attrs"]["group"] == [0, 1], _keep_own)
    r = _verify(spec, bad, rel)
    assert r.verdict == "does-not-refine"
    assert r.failure.node == "grad.model.norm.weight", r.failure
    assert "not outputs of G_d" in r.failure.reason  # left as the ranks' partial sums


# -- torchtitan's loss parallel (GG_TITAN_LOSS=1: _LossParallelCrossEntropy on the vocab-sharded logits) -----------

def test_tp2_loss_parallel_forward_backward_refines():
    """torchtitan's cross-entropy on vocab-sharded logits (max and sum of exponentials all-reduced, the target's
    log-probability gathered where the rank owns it and all-reduced; a fused backward with no collective)
    against PyTorch's cross-entropy of the whole logits (log_softmax, nll_loss, and their backward)."""
    spec, impl, rel = _load("tp2-loss")
    r = _verify(spec, impl, rel)
    assert r.verdict == "refines", r.failure
    lines = r.r_o_lines()
    assert "out0 = out0@0" in lines and "out0 = out0@1" in lines  # the summed loss, on every rank
    assert ("grad.model.lm_head.weight = concat(grad.model.lm_head.weight@0, grad.model.lm_head.weight@1, dim=0)"
            in lines)
    assert r.expect["checked"] == 10 and not r.expect["missing"]


@pytest.mark.slow
def test_tp4_loss_parallel_forward_backward_refines():
    spec, impl, rel = _load("tp4-loss")
    r = _verify(spec, impl, rel)
    assert r.verdict == "refines", r.failure
    assert "out0 = out0@3" in r.r_o_lines() and not r.expect["missing"]


def _at(loc):
    return lambda n: n.get("loc") == loc


def _set_const(impl, prefix, rank, value):
    """The implementation with the ``aten.scalar_tensor`` constants whose names start with ``prefix`` on ``rank``
    holding ``value``."""
    impl = copy.deepcopy(impl)
    hit = [n for n in impl["nodes"] if n["name"].startswith(prefix) and n["name"].endswith(f"@{rank}")]
    assert hit
    for n in hit:
        n["attrs"]["s"] = str(value)
    return impl


# Each is flagged at the user's cross-entropy line (model.py's loss, loss.py:60 in G_s). Without the max or the
# sum all-reduce, log_softmax has no clean expression and is carried to its readers, as is nll_loss's backward
# multiply (bw.mul_11: the ranks fuse it into log_softmax's backward); the reader of both fails and the report
# names the earlier of the two (Carried, rule 3). Without the target's all-reduce the summed log-probability is
# known as a partial sum over the ranks, which the masking `where` does not take.
@pytest.mark.parametrize("loc,node", [
    ("loss.py:158", "bw.mul_11"),  # the sum of exponentials: each rank's own softmax denominator
    pytest.param("loss.py:151", "bw.mul_11", marks=pytest.mark.slow),  # the max: each rank its own shift
    pytest.param("loss.py:174", "where_1", marks=pytest.mark.slow),  # the target's: left as partial sums
])
def test_loss_parallel_without_an_all_reduce_is_flagged(loc, node):
    spec, impl, rel = _load("tp2-loss")
    r = _verify(spec, _drop(impl, "core.all_reduce", _at(loc), _keep_own), rel)
    assert r.verdict == "does-not-refine"
    assert (r.failure.node, r.failure.loc) == (node, "loss.py:60"), r.failure
    if node == "where_1":
        assert r.failure.input_relations["neg_2"] == ["sum(neg_2@0, neg_2@1)"]


@pytest.mark.slow  # (suite time: loss parallel's other bug, the dropped all-reduce, is flagged by default)
def test_loss_parallel_with_a_wrong_vocab_offset_is_flagged():
    """Rank 1 shifts its targets by 0 instead of its shard's start (32), forward and backward: the backward's
    one-hot of the targets (first in G_s's order: it reads only the labels) has no counterpart."""
    spec, impl, rel = _load("tp2-loss")
    bad = _set_const(_set_const(impl, "sub_3.const", 1, 0), "bw.sub_4.const", 1, 0)
    r = _verify(spec, bad, rel)
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.loc) == ("aten.scatter.value", "loss.py:60"), r.failure


@pytest.mark.slow
def test_loss_parallel_backward_with_the_one_hot_sign_flipped_is_flagged():
    """The fused backward writes mask + 1 (1 where the rank owns the target) instead of mask - 1."""
    spec, impl, rel = _load("tp2-loss")
    bad = _set_const(_set_const(impl, "bw.sub_5.const", 0, -1), "bw.sub_5.const", 1, -1)
    r = _verify(spec, bad, rel)
    assert r.verdict == "does-not-refine"
    assert r.failure.loc == "loss.py:60" and r.failure.op in ("aten._log_softmax_backward_data", "aten.mul.Tensor",
                                                              "aten.scatter.value"), r.failure


# -- operators: references against torch -----------------------------------------------------------------

@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("hq,hk,lq,lk", [(4, 2, 6, 6), (4, 4, 5, 7), (6, 2, 7, 5)])
def test_cpu_flash_attention_references_match_torch(plugins, causal, hq, hk, lq, lk):
    reg = plugins.registry
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, h, n, 8, dtype=torch.float64) for h, n in ((hq, lq), (hk, lk), (hk, lk)))
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, scale=0.3)
    g = torch.randn_like(o)
    grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, o, lse, 0.0, causal,
                                                                               scale=0.3)
    a = {"dropout_p": 0, "is_causal": causal, "scale": 0.3, "absent": (3,)}
    fwd = "aten._scaled_dot_product_flash_attention_for_cpu"
    got = [reg.get(f"{fwd}#{i}").ref([q.numpy(), k.numpy(), v.numpy()], a) for i in range(2)]
    b = dict(a, absent=(6,))
    xs = [t.numpy() for t in (g, q, k, v, o, lse)]
    got_bw = [reg.get(f"{fwd}_backward#{i}").ref(xs, b) for i in range(3)]
    for x, y in zip(got + got_bw, [o, lse, *grads]):
        np.testing.assert_allclose(x, y.numpy(), rtol=1e-10, atol=1e-12)


# -- lemmas 1700-1709: attention over head groups and batch shards ------------------------------------------

def _fwd(k, q, kk, v):
    return (f"aten._scaled_dot_product_flash_attention_for_cpu#{k}({q}, {kk}, {v}, is_causal=true, "
            "absent=[3])")


def _bwd(k, *xs):
    return (f"aten._scaled_dot_product_flash_attention_for_cpu_backward#{k}({', '.join(xs)}, is_causal=true, "
            "absent=[6])")


def _cat(a, b, d):
    return f"concat({a}, {b}, dim={d})"


ATT = {"Q0": [2, 4, 8, 4], "Q1": [2, 4, 8, 4], "K0": [2, 2, 8, 4], "K1": [2, 2, 8, 4], "V0": [2, 2, 8, 4],
       "V1": [2, 2, 8, 4], "G0": [2, 4, 8, 4], "G1": [2, 4, 8, 4], "O0": [2, 4, 8, 4], "O1": [2, 4, 8, 4],
       "L0": [2, 4, 8], "L1": [2, 4, 8]}


@pytest.mark.parametrize("out", [0, 1])
def test_attention_of_head_groups(out):
    lhs = _fwd(out, _cat("Q0", "Q1", 1), _cat("K0", "K1", 1), _cat("V0", "V1", 1))
    assert proves(lhs, _cat(_fwd(out, "Q0", "K0", "V0"), _fwd(out, "Q1", "K1", "V1"), 1), ATT)
    # the parts swapped: query heads read another group's keys
    assert not proves(lhs, _cat(_fwd(out, "Q0", "K1", "V1"), _fwd(out, "Q1", "K0", "V0"), 1), ATT)


def test_attention_split_off_its_groups_is_not_proved():
    """Query heads split 2 | 6 against key/value heads 2 | 2 (ratio 2): the first part's queries would read
    their keys at ratio 1."""
    shapes = dict(ATT, Q0=[2, 2, 8, 4], Q1=[2, 6, 8, 4])
    lhs = _fwd(0, _cat("Q0", "Q1", 1), _cat("K0", "K1", 1), _cat("V0", "V1", 1))
    assert not proves(lhs, _cat(_fwd(0, "Q0", "K0", "V0"), "Q1", 1), shapes)
    assert not proves(lhs, _cat(_fwd(0, "Q0", "K0", "V0"), _fwd(0, "Q1", "K1", "V1"), 1), shapes)


@pytest.mark.parametrize("out", [0, 1, 2])
def test_attention_backward_of_head_groups(out):
    c = [_cat(f"{t}0", f"{t}1", 1) for t in "GQKVOL"]
    lhs = _bwd(out, *c)
    parts = [_bwd(out, *(f"{t}{i}" for t in "GQKVOL")) for i in (0, 1)]
    assert proves(lhs, _cat(parts[0], parts[1], 1), ATT)
    assert not proves(lhs, _cat(parts[1], parts[0], 1), ATT)


def test_attention_of_batch_shards():
    shapes = {k: [1] + v[1:] for k, v in ATT.items()}
    lhs = _fwd(0, _cat("Q0", "Q1", 0), _cat("K0", "K1", 0), _cat("V0", "V1", 0))
    assert proves(lhs, _cat(_fwd(0, "Q0", "K0", "V0"), _fwd(0, "Q1", "K1", "V1"), 0), shapes)
    assert not proves(lhs, _cat(_fwd(0, "Q0", "K1", "V1"), _fwd(0, "Q1", "K0", "V0"), 0), shapes)
    c = [_cat(f"{t}0", f"{t}1", 0) for t in "GQKVOL"]
    parts = [_bwd(1, *(f"{t}{i}" for t in "GQKVOL")) for i in (0, 1)]
    assert proves(_bwd(1, *c), _cat(parts[0], parts[1], 0), shapes)
    assert not proves(_bwd(1, *c), _cat(parts[1], parts[0], 0), shapes)


# -- torchtitan's vocabulary-parallel embedding (core.masked_lookup, core.masked_embedding_backward: its spellings) ----

def _lookup(w, s, e, mask=True, rows=None):
    """torchtitan's Embedding.forward on a rank owning rows [s, e) of the table."""
    rows = e - s if rows is None else rows
    m = f"aten.bitwise_and.Tensor(aten.ge.Scalar(I, other={s}), aten.lt.Scalar(I, other={e}))"
    ids = f"aten.clamp(aten.sub.Tensor(I, aten.scalar_tensor(s={s}, dtype=int64)), min=0, max={rows - 1})"
    out = f"aten.embedding({w}, {ids})"
    return f"aten.mul.Tensor({out}, aten._to_copy(reshape({m}, shape=[2, 3, 1]), dtype=float32))" if mask else out


def _ids_shapes(parts):
    return {"I": [2, 3], **{f"W{i}": [4, 5] for i in range(parts)}}


def test_embedding_of_vocabulary_shards():
    shapes = _ids_shapes(2)
    dt = {"I": "int64"}
    full = "aten.embedding(concat(W0, W1, dim=0), I)"
    assert proves(full, f"sum({_lookup('W0', 0, 4)}, {_lookup('W1', 4, 8)})", shapes, dtypes=dt)
    # a rank that does not mask the rows of ids it does not own
    assert not proves(full, f"sum({_lookup('W0', 0, 4)}, {_lookup('W1', 4, 8, mask=False)})", shapes, dtypes=dt)
    # a rank taking its vocabulary range from its neighbour's offset
    assert not proves(full, f"sum({_lookup('W0', 0, 4)}, {_lookup('W1', 0, 4)})", shapes, dtypes=dt)


def test_embedding_of_four_vocabulary_shards():
    shapes = _ids_shapes(4)
    dt = {"I": "int64"}
    full = "aten.embedding(concat(W0, W1, W2, W3, dim=0), I)"
    parts = ", ".join(_lookup(f"W{r}", 4 * r, 4 * r + 4) for r in range(4))
    assert proves(full, f"sum({parts})", shapes, dtypes=dt)
    # shards 2 and 3 given each other's vocabulary ranges
    wrong = ", ".join(_lookup(f"W{r}", 4 * s, 4 * s + 4) for r, s in enumerate((0, 1, 3, 2)))
    assert not proves(full, f"sum({wrong})", shapes, dtypes=dt)


def _emb_bw(s, e, n, mask=True):
    m = f"aten.bitwise_and.Tensor(aten.ge.Scalar(I, other={s}), aten.lt.Scalar(I, other={e}))"
    g = f"aten.mul.Tensor(G, aten._to_copy(reshape({m}, shape=[2, 3, 1]), dtype=float32))" if mask else "G"
    ids = f"aten.clamp(aten.sub.Tensor(I, aten.scalar_tensor(s={s}, dtype=int64)), min=0, max={e - s - 1})"
    return f"aten.embedding_dense_backward({g}, {ids}, num_weights={n}, padding_idx=-1, scale_grad_by_freq=false)"


def test_embedding_backward_of_vocabulary_shards():
    shapes, dt = {"I": [2, 3], "G": [2, 3, 5]}, {"I": "int64"}
    full = "aten.embedding_dense_backward(G, I, num_weights=8, padding_idx=-1, scale_grad_by_freq=false)"
    assert proves(full, f"concat({_emb_bw(0, 4, 4)}, {_emb_bw(4, 8, 4)}, dim=0)", shapes, dtypes=dt)
    # the gradient of rows of ids another rank owns not masked: they land on the clamped row
    assert not proves(full, f"concat({_emb_bw(0, 4, 4)}, {_emb_bw(4, 8, 4, mask=False)}, dim=0)", shapes, dtypes=dt)


# -- lemma 1720: mean over an unsharded dim ------------------------------------------------------------------

def test_mean_of_sequence_shards():
    shapes = {"A": [2, 4, 8], "B": [2, 4, 8]}
    lhs = "aten.mean.dim(concat(A, B, dim=1), dim=[2], keepdim=true)"
    assert proves(lhs, "concat(aten.mean.dim(A, dim=[2], keepdim=true), aten.mean.dim(B, dim=[2], keepdim=true), "
                       "dim=1)", shapes)
    # the mean over the sharded dim is not the concatenation of the shards' means
    lhs2 = "aten.mean.dim(concat(A, B, dim=2), dim=[2], keepdim=true)"
    assert not proves(lhs2, "concat(aten.mean.dim(A, dim=[2], keepdim=true), aten.mean.dim(B, dim=[2], "
                            "keepdim=true), dim=2)", {"A": [2, 4, 4], "B": [2, 4, 4]})


# -- _StridedShard: FSDP over TP ----------------------------------------------------------------------------

def test_strided_shard_of_fsdp_over_tp():
    """torch's own example (placement_types._StridedShard): rank (f, t) holds piece f of TP shard t."""
    lay = Layout((_StridedShard(0, split_factor=2), Shard(0)), [[0, 1], [2, 3]], 2)
    assert lay.relation("w") == "concat(concat(w@0, w@2, dim=0), concat(w@1, w@3, dim=0), dim=0)"
    lay = Layout((_StridedShard(0, split_factor=2), Shard(0)), [[0, 1], [2, 3], [4, 5]], 2)
    assert lay.relation("w") == "concat(concat(w@0, w@2, w@4, dim=0), concat(w@1, w@3, w@5, dim=0), dim=0)"
    lay = Layout((Shard(0), Replicate()), [[0, 1], [2, 3]], 2)
    assert lay.relation("w") == ["concat(w@0, w@2, dim=0)", "concat(w@1, w@3, dim=0)"]


@pytest.mark.parametrize("placements,mesh", [
    ((_StridedShard(0, split_factor=2),), [0, 1]),  # no TP shard inside
    ((_StridedShard(0, split_factor=2), Shard(0)), [[0, 1, 2, 3], [4, 5, 6, 7]]),  # split factor != TP size
    ((_StridedShard(0, split_factor=2), Shard(1)), [[0, 1], [2, 3]]),  # the TP shard on another dim
])
def test_other_strided_shards_are_refused(placements, mesh):
    with pytest.raises(InputError, match="unsupported DTensor placement"):
        Layout(placements, mesh, 2).relation("w")


def test_a_dropped_collective_from_the_cli(tmp_path):
    """The CLI on a kept graph with the sequence-parallel reduce-scatter dropped: exit 1, the operator named."""
    spec, impl, rel = _load("tp2")
    (tmp_path / "impl.gg.json").write_text(json.dumps(_drop(impl, "core.reduce_scatter", lambda n: True, _own_slice)))
    d = KEPT / "tp2"
    p = run_cli("verify", "--spec", d / "spec.gg.json", "--impl", tmp_path / "impl.gg.json", "--relation",
                d / "relation.yaml")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "stopped at G_s operator aten.pow.Tensor_Scalar (node 'pow_1'" in p.stdout


# -- loss parallel (lemmas 1730-1734; core.masked_neg_one_hot) -------------------------------------------------------

_MX = "max(aten.amax(A, dim=[1], keepdim=true), aten.amax(B, dim=[1], keepdim=true))"


def _sumexp(x, m=_MX):
    return f"aten.sum.dim_IntList(aten.exp(aten.sub.Tensor({x}, {m})), dim=[1], keepdim=true, dtype=None)"


def _logp(x, total):
    return f"aten.sub.Tensor(aten.sub.Tensor({x}, {_MX}), aten.log({total}))"


def test_log_softmax_of_vocab_shards():
    """1730: log_softmax over the split dim from the parts' maxes and sums of exponentials all-reduced; a part's
    own sum (the sum all-reduce missing) or log_softmax along the other dim must not prove."""
    s = {"A": [4, 3], "B": [4, 5]}
    lhs = "aten._log_softmax(concat(A, B, dim=1), dim=1, half_to_float=false)"
    total = f"sum({_sumexp('A')}, {_sumexp('B')})"
    assert proves(lhs, f"concat({_logp('A', total)}, {_logp('B', total)}, dim=1)", s)
    assert proves("aten._log_softmax(concat(A, B, dim=1), dim=-1, half_to_float=false)",
                  f"concat({_logp('A', total)}, {_logp('B', total)}, dim=1)", s)  # (dims made explicit first)
    assert not proves(lhs, f"concat({_logp('A', _sumexp('A'))}, {_logp('B', _sumexp('B'))}, dim=1)", s)
    assert not proves(lhs, f"concat({_logp('A', total)}, {_logp('B', _sumexp('B'))}, dim=1)", s)
    assert not proves("aten._log_softmax(concat(A, B, dim=1), dim=0, half_to_float=false)",
                      f"concat({_logp('A', total)}, {_logp('B', total)}, dim=1)", s)


def test_target_column_gather_and_masked_index_put():
    """1731: gather with a column of indices is advanced indexing; 1732: index_put with a boolean mask of the
    tensor's shape commutes with a reshape of both. Gathering along dim 0, or a mask reshaped otherwise, must
    not prove."""
    s = {"X": [4, 6], "I": [4], "Y": [4], "M": [4], "Z": []}
    d = {"I": "int64", "M": "bool"}
    r = {"I": (0, 6)}
    assert proves("aten.gather(X, reshape(I, shape=[4, 1]), dim=1, sparse_grad=false)",
                  "reshape(aten.index.Tensor(X, aten.arange.start(start=0, end=4), I), shape=[4, 1])", s, dtypes=d,
                  ranges=r)
    assert not proves("aten.gather(X, reshape(I, shape=[4, 1]), dim=0, sparse_grad=false)",
                      "reshape(aten.index.Tensor(X, aten.arange.start(start=0, end=4), I), shape=[4, 1])", s,
                      dtypes=d, ranges=r)
    assert proves("aten.index_put(reshape(Y, shape=[4, 1]), reshape(M, shape=[4, 1]), Z)",
                  "reshape(aten.index_put(Y, M, Z), shape=[4, 1])", s, dtypes=d)
    assert not proves("aten.index_put(reshape(Y, shape=[4, 1]), reshape(aten.flip(M, dims=[0]), shape=[4, 1]), Z)",
                      "reshape(aten.index_put(Y, M, Z), shape=[4, 1])", s, dtypes=d)


_ONE_HOT = "aten.scatter.value(aten.full(size=[4, 6], fill_value=0, dtype=float32), T, dim=1, value=-1)"


def test_cross_entropy_backward_is_the_fused_form():
    """1733: log_softmax's backward of nll_loss's one-hot times w is (one-hot + exp(ls)) * w, torchtitan's
    fused backward; minus exp(ls), or another one-hot's, must not prove."""
    s = {"T": [4, 1], "W": [4, 1], "L": [4, 6], "U": [4, 1]}
    d = {"T": "int64", "U": "int64"}
    r = {"T": (0, 6), "U": (0, 6)}
    lhs = f"aten._log_softmax_backward_data(aten.mul.Tensor({_ONE_HOT}, W), L, dim=1, input_dtype=float32)"
    assert proves(lhs, f"aten.mul.Tensor(aten.add.Tensor({_ONE_HOT}, aten.exp(L)), W)", s, dtypes=d, ranges=r)
    assert not proves(lhs, f"aten.mul.Tensor(aten.sub.Tensor({_ONE_HOT}, aten.exp(L)), W)", s, dtypes=d, ranges=r)
    other = _ONE_HOT.replace("T,", "U,")
    assert not proves(lhs, f"aten.mul.Tensor(aten.add.Tensor({other}, aten.exp(L)), W)", s, dtypes=d, ranges=r)


def _oh(s_, e, n=4):
    from lemma_packs.aten.vocab_lookups import _OH
    return _OH.format(n=n, z=f"[{n}, {e - s_}]", s=s_, e=e).replace("?i", "I").replace("?y", "float32")


def test_one_hot_of_vocab_shards():
    """1734 (core:304): nll_loss's one-hot over a vocabulary of 8 split at the ranks' shard ends (where their masks
    compare the ids) is each rank's one-hot of its own targets; the shards' offsets swapped must not prove."""
    s = {"I": [4]}
    d = {"I": "int64"}
    r = {"I": (0, 8)}
    lhs = "aten.scatter.value(aten.full(size=[4, 8], fill_value=0, dtype=float32), reshape(I, shape=[4, 1]), dim=1, value=-1)"
    assert proves(lhs, f"concat({_oh(0, 4)}, {_oh(4, 8)}, dim=1)", s, dtypes=d, ranges=r)
    assert proves(lhs, f"concat({_oh(0, 2)}, {_oh(2, 4)}, {_oh(4, 6)}, {_oh(6, 8)}, dim=1)", s, dtypes=d, ranges=r)
    assert not proves(lhs, f"concat({_oh(4, 8)}, {_oh(0, 4)}, dim=1)", s, dtypes=d, ranges=r)
    assert not proves(lhs, f"concat({_oh(0, 4)}, {_oh(0, 4)}, dim=1)", s, dtypes=d, ranges=r)
