"""HF transformers' Llama modules (fx) against the NeuronX-style HLO of examples/neuronx-llama-tp/make.py
(examples/cross-hf-neuronx-llama): the aten-neuronx bridges one by one -- each lemma fuzzed, each proved where it
should be and not where a twin differs (eps, normalised dim, dtype, comparison, broadcast axis) -- HF's RMSNorm
collapsed into one op before proving, constants computed by ops folded into the literals the HLO frontend writes;
the whole decoder layer, final norm and LM head verify at TP 2 (TP 1, 4, 8: slow) under the relation's
assumption on the scores (the additive mask read as selected), R_o relating the logits and both KV caches; the
updated KV caches alone refine (TP 1; 2, 4, 8: slow); without the assumption it stops at the additive mask; bug
twins are flagged at the RoPE glue, the rotation and the first reader of a K taken from the Q columns."""
from __future__ import annotations

import sys

import pytest

from conftest import EXAMPLES
from graphguard.engine.fuzz import fuzz_rule
from graphguard.testing import proves

HERE = EXAMPLES / "cross-hf-neuronx-llama"
RMS = "hlo.custom_call.AwsNeuronRmsNorm"
HF = "aten.hf_rms_norm"
EPS = "aten.scalar_tensor(s=2748779/274877906944, dtype=float32)"  # float32(1e-5), as loaded graphs hold it
NX_EPS = "hlo.constant(shape=[], value=2748779/274877906944, dtype=float32)"
SHAPES = {"X": [2, 3, 8], "Y": [8, 3, 2], "W": [8], "V": [3], "H": [2, 3, 8]}
DT = {"X": "float32", "Y": "float32", "W": "float16", "V": "float16", "H": "float16"}


def _rules(plugins, ref, pack="aten-neuronx"):
    return [r for r in plugins.lemmas if r.lemma.ref == ref and r.lemma.pack == pack]


@pytest.mark.parametrize("ref", [1150, 1151, 1152, 1153, 1154, 1155, 1156, 1157, 1158, 1159, 1218])
def test_bridge_lemma_fuzzed(plugins, ref):
    rules = _rules(plugins, ref)
    assert rules, ref
    for rep in (fuzz_rule(r, plugins.registry) for r in rules):
        assert rep.ok, (rep.rule.id, rep.failure)


def test_permute_family_fuzzed_for_casts(plugins):
    rules = [r for r in plugins.lemmas if r.lemma.ref == 1217
             and r.lemma.family and r.lemma.family[1] in ("aten._to_copy", "hlo.convert")]
    assert len(rules) == 2
    for rep in (fuzz_rule(r, plugins.registry) for r in rules):
        assert rep.ok, (rep.rule.id, rep.failure)


def p(lhs, rhs, shapes=SHAPES, dtypes=DT):
    return proves(lhs, rhs, shapes, dtypes=dtypes)


# 1150 + 1217: HF's f32 copy of [b, s, h] is NeuronX's convert of [h, s, b], permuted
def test_cast_bridges_and_moves_through_permute():
    assert p("aten._to_copy(permute(H, dims=[2, 1, 0]), dtype=float32)",
             "permute(hlo.convert(H, dtype=float32), dims=[2, 1, 0])", {"H": [8, 3, 2]})


def test_cast_under_another_permutation_is_not_moved():  # 1217, wrong axis: the permutation must be the same
    assert not p("aten._to_copy(permute(H, dims=[2, 1, 0]), dtype=float32)",
                 "permute(hlo.convert(H, dtype=float32), dims=[0, 2, 1])", {"H": [4, 4, 4]})
    assert not p("aten.add.Tensor(permute(A, dims=[1, 0]), B, alpha=1)",
                 "permute(aten.add.Tensor(A, B, alpha=1), dims=[1, 0])", {"A": [3, 3], "B": [3, 3]})


def test_cast_to_another_dtype_is_not_the_convert():  # wrong dtype
    assert not p("aten._to_copy(permute(H, dims=[2, 1, 0]), dtype=float32)",
                 "permute(hlo.convert(H, dtype=bfloat16), dims=[2, 1, 0])", {"H": [8, 3, 2]})


# 1150 from int32: the RoPE positions' cast (int -> float rounds to nearest in both)
def test_int_positions_cast_bridges():
    assert p("aten._to_copy(I, dtype=float32)", "hlo.convert(I, dtype=float32)", {"I": [3]}, {"I": "int32"})


def test_int_positions_cast_to_another_dtype_is_not_the_convert():  # wrong dtype
    assert not p("aten._to_copy(I, dtype=float32)", "hlo.convert(I, dtype=float16)", {"I": [3]}, {"I": "int32"})


# 1154 / 1155: the RoPE tables' cos and sin; the full-width table cat(a, a) is NeuronX's concatenate of halves
def test_rope_tables_bridge_across_the_concat():
    assert p("aten.cos(concat(X, X, dim=1))", "concat(hlo.cosine(X), hlo.cosine(X), dim=1)", {"X": [2, 2]})
    assert p("aten.sin(concat(X, X, dim=1))", "concat(hlo.sine(X), hlo.sine(X), dim=1)", {"X": [2, 2]})


def test_cos_is_not_sine():  # wrong function
    assert not p("aten.cos(X)", "hlo.sine(X)", {"X": [2, 2]})
    assert not p("aten.cos(concat(X, X, dim=1))", "concat(hlo.cosine(X), hlo.sine(X), dim=1)", {"X": [2, 2]})


# 1156: NeuronX's projection contracts the hidden-major activations' dim 0
_DOT0 = "lhs_batch=[], rhs_batch=[], lhs_contracting=[0], rhs_contracting=[0]"


def test_dot_contracting_dim_0_is_the_transposed_matmul():
    assert p("aten.mm(permute(A, dims=[1, 0]), B)", f"hlo.dot(A, B, {_DOT0})", {"A": [8, 4], "B": [8, 6]})


def test_dot_contracting_another_dim_is_not():  # wrong axis: [8, 8] operands contracted along dim 1 of the lhs
    assert not p("aten.mm(permute(A, dims=[1, 0]), B)",
                 "hlo.dot(A, B, lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0])",
                 {"A": [8, 8], "B": [8, 6]})


# 1157-1159: the mask -- ATen's implicit broadcasts of unit-dim views against HLO's explicit broadcasts
_MASK = {"K": [6], "C": [2], "M": [2, 6], "N": [2, 6]}
_MASK_DT = {"K": "int32", "C": "int32", "M": "bool", "N": "bool"}


def _cmp(op, direction, m=(1,), n=(0,)):
    return (f"aten.{op}.Tensor(reshape(K, shape=[1, 1, 6]), reshape(C, shape=[1, 2, 1]))",
            f"reshape(hlo.compare(hlo.broadcast(K, shape=[2, 6], dimensions={list(m)}), hlo.broadcast(C, shape=[2, 6],"
            f" dimensions={list(n)}), direction={direction}), shape=[1, 2, 6])")


def test_mask_comparisons_bridge():
    assert p(*_cmp("le", "LE"), _MASK, _MASK_DT)
    assert p(*_cmp("ge", "GE"), _MASK, _MASK_DT)
    assert p("aten.bitwise_and.Tensor(reshape(M, shape=[1, 2, 6]), reshape(N, shape=[2, 1, 6]))",
             "hlo.and(hlo.broadcast(M, shape=[2, 2, 6], dimensions=[1, 2]), hlo.broadcast(N, shape=[2, 2, 6],"
             " dimensions=[0, 2]))", _MASK, _MASK_DT)


def test_mask_comparisons_twins_not_proved():
    assert not p(*_cmp("le", "LT"), _MASK, _MASK_DT)  # another comparison (off by one at the diagonal)
    assert not p(*_cmp("le", "GE"), _MASK, _MASK_DT)  # the other direction
    sq = {"K": [2], "C": [2]}  # square: the broadcasts swapped still type-check, but are the transposed mask
    a = "aten.le.Tensor(reshape(K, shape=[1, 1, 2]), reshape(C, shape=[1, 2, 1]))"
    b = ("reshape(hlo.compare(hlo.broadcast(K, shape=[2, 2], dimensions=[0]), hlo.broadcast(C, shape=[2, 2],"
         " dimensions=[1]), direction=LE), shape=[1, 2, 2])")
    assert not p(a, b, sq, {"K": "int32", "C": "int32"})  # wrong axis
    assert not p("aten.bitwise_and.Tensor(reshape(M, shape=[1, 2, 6]), reshape(N, shape=[2, 1, 6]))",
                 "hlo.or(hlo.broadcast(M, shape=[2, 2, 6], dimensions=[1, 2]), hlo.broadcast(N, shape=[2, 2, 6],"
                 " dimensions=[0, 2]))", _MASK, _MASK_DT)  # or for and


# fold_constants (lemma_packs/aten_hlo/passes.py): HF's exp(arange(D / 2) * c) is the hlo.literal NeuronX's exponential(iota * c) folds into
def _literals(g):
    return sorted(n.attrs["values"] for n in g.nodes if n.op == "hlo.literal" and n.attrs["dtype"] == "float32")


def _small_graph(reg, cx, literal=False):
    from graphguard.ir.builder import GraphBuilder
    b = GraphBuilder("g")
    x = b.input("x", [2], "float32")
    if literal:
        c = b.op("hlo.literal", [], "c", shape=[2], values="1.0,2.0", dtype="float32")
    else:
        c = b.op("aten.exp", [b.op("aten.arange", [], "i", end=2, dtype="float32")], "c")
    b.output(b.op("aten.add.Tensor", [x, c], "y", alpha=1))
    return b.build(reg, cx)


def test_fold_needs_a_program_with_literals():
    from lemma_packs.aten_hlo.passes import fold_constants
    from graphguard.ir import scalar as S
    from graphguard.plugins import load_plugins
    reg, cx = load_plugins().registry, S.Constraints()
    g = _small_graph(reg, cx)
    assert fold_constants(g, reg, cx, other=_small_graph(reg, cx)) == 0  # beside a program without literals: kept
    assert any(n.op == "aten.exp" for n in g.nodes)
    assert fold_constants(g, reg, cx, other=_small_graph(reg, cx, literal=True)) == 1
    assert [n.attrs["values"] for n in g.nodes if n.op == "hlo.literal"] == ["1.0,2.7182817459106445"]  # float32(e)


# 1151: one constant, whichever dialect wrote it
def test_eps_constant_bridges():
    assert p(f"aten.add.Tensor(X, {EPS}, alpha=1)", f"aten.add.Tensor(X, {NX_EPS}, alpha=1)")


def test_another_eps_is_another_constant():  # wrong eps (1e-6 in float32)
    assert not p(f"aten.add.Tensor(X, {EPS}, alpha=1)",
                 "aten.add.Tensor(X, hlo.constant(shape=[], value=8796093/8796093022208, dtype=float32), alpha=1)")


# 1152 + 1153 (+ 900): HF's RMSNorm of [b, s, h] = the custom call over dim 0 of [h, s, b], permuted
def _hf(x, w="W", c=EPS, t="float16"):
    return f"{HF}({x}, {w}, {c}, dtype={t})"


def _nx(x, k, w="W", c=NX_EPS):
    return f"{RMS}({x}, {w}, {c}, backend_config={k})"


def test_rms_norm_bridges_across_layouts():
    assert p(_hf("permute(Y, dims=[2, 1, 0])"), f"permute({_nx('Y', 0)}, dims=[2, 1, 0])")
    assert p(_hf("X"), _nx("X", 2))


def test_rms_norm_wrong_axis_not_proved():
    assert not p(_hf("permute(Y, dims=[2, 1, 0])"), f"permute({_nx('Y', 2)}, dims=[2, 1, 0])", 
                 {**SHAPES, "Y": [8, 3, 8]})
    assert not p(_hf("X"), _nx("X", 1), {**SHAPES, "X": [2, 8, 8]})


def test_rms_norm_wrong_eps_not_proved():
    other = "hlo.constant(shape=[], value=8796093/8796093022208, dtype=float32)"
    assert not p(_hf("X"), _nx("X", 2, c=other))


def test_rms_norm_wrong_dtype_not_proved():  # HF casting back to float32 is not the kernel's float16 result
    assert not p(_hf("X", t="float32"), _nx("X", 2))


# the fusion: HF's module captured and collapsed into aten.hf_rms_norm only beside a program that fuses it
def test_hf_rms_norm_collapsed_before_proving(tmp_path):
    sys.path.insert(0, str(HERE))
    import capture
    paths = capture.capture(2, tmp_path)
    from graphguard.api import load_inputs
    g_s, g_d, _, _ = load_inputs(paths["spec"], paths["impl"], paths["relation"], spec_frontend="ir",
                                 impl_frontend="hlo", world_size=2)
    fused = [n for n in g_s.nodes if n.op == HF]
    assert len(fused) == 3 and not any(n.op == "aten.rsqrt" for n in g_s.nodes)
    # two HF programs keep theirs (their operators meet one by one)
    from graphguard.passes import fuse_expressions
    from graphguard.frontends.ir.load import load_graph
    from graphguard.ir import scalar as S
    from graphguard.plugins import load_plugins
    reg = load_plugins().registry
    g1, g2 = (load_graph(str(paths["spec"]), reg, S.Constraints()) for _ in range(2))
    assert fuse_expressions(g1, reg, S.Constraints(), other=g2) == 0
    assert fuse_expressions(g1, reg, S.Constraints(), other=g_d) == 3


def _verify(tp, tmp_path, variant="ok", outputs="all", literals=False, size="tiny"):
    sys.path.insert(0, str(HERE))
    import capture
    import graphguard
    from graphguard.api import load_inputs
    paths = capture.capture(tp, tmp_path, variant=variant, outputs=outputs, size=size)
    if literals:  # the inverse frequencies: HF's exp(arange * c), folded, and the literal NeuronX's was folded into
        g_s, g_d = load_inputs(paths["spec"], paths["impl"], paths["relation"], spec_frontend="ir",
                               impl_frontend="hlo", world_size=tp)[:2]
        assert _literals(g_s) == _literals(g_d) == ["1.0,0.0014142137952148914"]  # float32(exp(c)), rounded once
        assert not any(n.op in ("aten.exp", "aten.arange") for n in g_s.nodes)
    return graphguard.verify(paths["spec"], paths["impl"], paths["relation"], spec_frontend="ir", impl_frontend="hlo",
                             world_size=tp)


def _line(text):  # hf_model.py:N of the glue line holding text
    return next(f"hf_model.py:{i}" for i, line in enumerate((HERE / "hf_model.py").read_text().splitlines(), 1)
                if text in line)


def _check(r, tp=2):
    from graphguard.ir.expr import to_text
    rel = lambda t: [to_text(e) for e in r.relations.get(t, [])]  # noqa: E731
    # the whole layer, final norm and LM head verify, the additive mask read as selected (the relation's ranges
    # and assume:), stated with the verdict
    assert r.verdict == "refines", r.render()
    assert len(r.assumed) == 1 and r.assumed[0].startswith("G_s: modeling_llama.py:206"), r.assumed
    ranks = range(tp)
    # R_o: the logits (NeuronX's vocab-major [V / tp, B] per rank, transposed and concatenated along the
    # vocabulary), the updated K and V caches
    logits = [f"reshape(permute(out0@{k}, dims=[1, 0]), shape=[2, 1, {64 // tp}])" for k in ranks]
    assert to_text(r.r_o["out0"][0]) == (f"concat({', '.join(logits)}, dim=2)" if tp > 1 else logits[0]), \
        r.r_o_lines()
    assert {"out1", "out2"} <= set(r.r_o), r.r_o_lines()
    # the RoPE tables: the positions' cast, the angles (HF's mm = NeuronX's dot), the full-width cos / sin
    assert rel("_to_copy")[0] == "rope.pos.f32@0"
    assert rel("mm")[0] == "rope.angles@0"
    assert "concat(rope.cos1@0, rope.cos1@0, dim=1)" in rel("cos")
    assert "concat(rope.sin1@0, rope.sin1@0, dim=1)" in rel("sin")
    # the mask's comparisons: ATen's implicit broadcasts against HLO's compare / and of broadcasts
    assert rel("le")[0] == "reshape(mask.causal@0, shape=[1, 2, 6])"
    assert rel("ge")[0] == "reshape(mask.started@0, shape=[2, 1, 6])"
    assert rel("bitwise_and")[0] == "mask@0"
    # HF's input RMSNorm (module layer.input_layernorm) is NeuronX's AwsNeuronRmsNorm, permuted to HF's layout
    assert rel("_to_copy_3")[0] == "permute(ln1.f32@0, dims=[2, 1, 0])"
    assert "permute(ln1@0, dims=[2, 1, 0])" in rel("mul_2")
    # HF's repeat_kv (unsqueeze, expand) is NeuronX's broadcast of the KV heads, matched on labels (TP 4: the
    # search's form, the expand of the ranks' caches; TP 8: each KV head on two ranks, the odd ranks' replicas
    # labelled as the even ranks' -- no broadcast at all, each rank's own copy)
    if tp != 4:
        assert any(all(f"@{k}" in e for k in ranks) and "expand" not in e for e in rel("expand_1")), rel("expand_1")
    # the scores: HF's (q @ k.T) * scaling, its factor moved onto q, is NeuronX's dot of the scaled q, matched on
    # the pairs of entries the products sum (TP 1: one rank's scores; TP n: the ranks' heads)
    assert "scores@0" in " ".join(rel("mul_7")), rel("mul_7")
    # the mask selected in the scores' place is NeuronX's select of its -30000 constant (labelled by value)
    assert "scores.masked@0" in " ".join(rel("add_3")), rel("add_3")
    # the softmax in float32 is NeuronX's max-shifted exp over its sum (aten-hlo 843, hlo 888)
    assert "probs.f32@0" in " ".join(rel("_softmax")), rel("_softmax")
    # the output and down projections: each rank's dot of its heads' / MLP columns' rows, summed over the
    # ranks (the pairs of entries summed split into one entry of each rank's partial product)
    for mm, name in (("mm_4", "o_proj"), ("mm_7", "down_proj")):
        parts = [f"reshape(permute(reshape({name}@{k}, shape=[32, 2, 2]), dims=[2, 1, 0]), shape=[4, 32])"
                 for k in ranks]
        assert (f"sum({', '.join(parts)})" if tp > 1 else parts[0]) in rel(mm), rel(mm)
    # SwiGLU: HF's silu is NeuronX's multiply(x, logistic(x)) (family 1222), on labels
    assert any("silu@0" in e for e in rel("silu")), rel("silu")
    # the last position (HF's h[:, -1:] is NeuronX's slice, transposed: core 115), the final norm, the LM head
    assert "permute(last@0, dims=[2, 1, 0])" in rel("slice_9"), rel("slice_9")
    assert any("lm_head@0" in e for e in rel("mm_8")), rel("mm_8")
    if tp > 1:  # the projections: the ranks' column shards of the replicated activations
        assert rel("mm_1")[0].startswith("reshape(permute(reshape(concat(q.cols@0, q.cols@1"), rel("mm_1")
        return
    # TP 1: the q / k / v projections (rows re-sorted: HF's [B * S, H] rows are NeuronX's [H, S * B] columns)
    assert rel("mm_1")[0] == "reshape(permute(reshape(q.cols@0, shape=[2, 2, 32]), dims=[1, 0, 2]), shape=[4, 32])"
    assert rel("mm_2")[0] == "reshape(permute(reshape(k.cols@0, shape=[2, 2, 16]), dims=[1, 0, 2]), shape=[4, 16])"
    # RoPE applied (HF's full-width rotate_half on [B, nh, S, D] = NeuronX's in [S, B, nh, D]), the cache writes
    assert rel("add_1")[0] == "permute(q.rope@0, dims=[1, 2, 0, 3])"
    assert rel("add_2")[0] == "permute(k.rope@0, dims=[1, 2, 0, 3])"
    assert rel("cat_3")[0] == ("concat(permute(k_cache.before0@0, dims=[1, 2, 0, 3]), permute(k.rope@0, dims=[1, 2, 0, "
                               "3]), dim=2)")
    assert "v_cache.before0@0" in rel("cat_4")[0]


@pytest.mark.slow  # (suite time: test_kv_caches_refine_at_tp1 runs the same capture by default)
def test_tp1_layer_norm_and_lm_head_verify(tmp_path):
    _check(_verify(1, tmp_path), 1)


def test_without_the_assumption_the_additive_mask_stays_a_difference(tmp_path):
    """Must not prove: the relation without ``assume: masked_scores_within`` -- scores of any size, where
    s - 30000 and -30000 need not both vanish in the softmax -- stops at the additive mask, as NeuronX never
    computes one; nothing is assumed."""
    import yaml

    import graphguard
    sys.path.insert(0, str(HERE))
    import capture
    paths = capture.capture(2, tmp_path)
    rel = yaml.safe_load(paths["relation"].read_text())
    del rel["assume"]
    paths["relation"].write_text(yaml.safe_dump(rel))
    r = graphguard.verify(paths["spec"], paths["impl"], paths["relation"], spec_frontend="ir", impl_frontend="hlo",
                          world_size=2)
    assert r.assumed == [] and r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.loc) == ("aten.where.self", _line("torch.where(allowed")), r.failure


def test_kv_caches_refine_at_tp1(tmp_path):  # HF's modules returning the updated caches only: R_o
    from graphguard.ir.expr import to_text
    r = _verify(1, tmp_path, outputs="cache", literals=True)
    assert r.verdict == "refines", r.failure
    assert [to_text(e) for e in r.r_o["out0"]][0] == \
        "reshape(permute(reshape(out1@0, shape=[6, 8, 4]), dims=[1, 0, 2]), shape=[2, 4, 6, 4])"  # keys, HF's layout


@pytest.mark.slow
@pytest.mark.parametrize("tp", [2, 4, 8])
def test_kv_caches_refine_at_other_degrees(tp, tmp_path):  # heads sharded (TP 8: each KV head on 2 ranks)
    r = _verify(tp, tmp_path, outputs="cache")
    assert r.verdict == "refines", r.failure
    assert len(r.r_o["out0"]) >= 1 and len(r.r_o["out1"]) >= 1


def test_rope_rotation_twin_is_flagged_at_the_rotation(tmp_path):  # bug twin: rotate-half's halves swapped
    r = _verify(1, tmp_path, "rope-rotation", outputs="cache")
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.loc) == ("aten.mul.Tensor", "modeling_llama.py:159"), r.failure


def test_rope_at_the_wrong_position_is_flagged_at_the_positions(tmp_path):  # bug twin: angles at cache_ids + 1
    r = _verify(1, tmp_path, "rope-offset")
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.loc) == ("aten._to_copy", _line("cache_ids.float()")), r.failure


@pytest.mark.parametrize("tp", [2, pytest.param(4, marks=pytest.mark.slow), pytest.param(8, marks=pytest.mark.slow)])
def test_other_degrees(tp, tmp_path):
    _check(_verify(tp, tmp_path), tp)


def test_k_read_from_the_q_columns_is_flagged_where_k_is_first_used(tmp_path):
    """Bug twin (make.py's k-slice): each rank's K read from its Q columns -- flagged at K's RoPE (modeling_llama.py
    :159, the first operator reading K), with everything before it (Q's RoPE at :158) verified."""
    r = _verify(2, tmp_path, "k-slice")
    assert r.verdict == "does-not-refine"
    assert (r.failure.op, r.failure.loc) == ("aten.mul.Tensor", "modeling_llama.py:159"), r.failure


@pytest.mark.slow  # (about 30 s: Llama-3.2-1B's shapes, the projections checked on 16.8M-entry shards)
def test_llama_3_2_1b_dims_verify(tmp_path):
    """At production dims the layer, the final norm and the LM head verify: the row-parallel projections as the
    sum of the ranks' products, decided on positions; the LM head's 262M-entry weight, too large to label, as
    each rank's product of its whole shard with the replicated activation (relayout._products_of_whole_shards);
    the logits' cast labelled (256k entries)."""
    from graphguard.ir.expr import to_text
    r = _verify(2, tmp_path, size="llama-3.2-1b")
    assert r.verdict == "refines", r.render()
    assert any(to_text(e).startswith("sum(") and "o_proj@1" in to_text(e) for e in r.relations["mm_4"])
    assert any("silu@0" in to_text(e) for e in r.relations["silu"])
    assert to_text(r.r_o["out0"][0]) == ("concat(reshape(permute(out0@0, dims=[1, 0]), shape=[2, 1, 64128]), "
                                         "reshape(permute(out0@1, dims=[1, 0]), shape=[2, 1, 64128]), dim=2)")
