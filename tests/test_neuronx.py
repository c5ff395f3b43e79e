"""The neuronx pack (AWS Neuron custom calls in HLO) and its example, a NeuronX-style Llama-3 layer at TP=1, 2, 4, 8.

The pack loads as a plugin; its NumPy references compute what the Neuron kernels compute (checked against
torch and against the same normalisation spelled out in plain HLO, as transformers-neuronx's fallback
writes it); its lemmas are sound, prove what they should and not what they must not. The example's
shipped files are what its generator writes, verify (with a numeric replay), and the K-slice bug is
flagged at the first operator computing on K.
"""
from __future__ import annotations

import importlib.util
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import EXAMPLES

import graphguard
from graphguard.engine.fuzz import fuzz_rule
from graphguard.errors import InputError

RMS, SOFTMAX, GELU, RING = ("hlo.custom_call.AwsNeuron" + t for t in ("RmsNorm", "Softmax", "GeluApprxTanh",
                                                                       "TransferWithStaticRing"))
REFS = set(range(900, 908))
EXAMPLE, BUG = EXAMPLES / "neuronx-llama-tp", EXAMPLES / "bugs" / "neuronx-k-slice"


def _make():
    spec = importlib.util.spec_from_file_location("neuronx_make", EXAMPLE / "make.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    return mod


make = _make()


def test_pack_loads_through_its_entry_point(plugins):
    assert ("graphguard.lemma_packs", "neuronx", "lemma_packs.neuronx") in plugins.loaded
    assert {plugins.registry.get(n).source for n in (RMS, SOFTMAX, GELU, RING)} == {"neuronx"}
    assert {r.ref for r in plugins.lemmas if r.lemma.pack == "neuronx"} == REFS


# =================================================================================================
# References: what the Neuron kernels compute
# =================================================================================================

def test_references_match_torch(plugins):
    import torch
    import torch.nn.functional as F
    reg = plugins.registry
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((5, 3, 2)), rng.standard_normal(5)
    eps = np.asarray(1e-5)
    t = torch.from_numpy
    # RmsNorm over dim 0 (NeuronX's hidden-major [H, S, B]) and over the last dim (-1, also the default)
    want0 = F.rms_norm(t(np.moveaxis(x, 0, -1)), (5,), t(w), 1e-5).numpy()
    np.testing.assert_allclose(reg.get(RMS).ref([x, w, eps], {"backend_config": 0}), np.moveaxis(want0, -1, 0),
                               rtol=1e-12)
    y = rng.standard_normal((2, 3, 4))
    want = F.rms_norm(t(y), (4,), t(w[:4]), 1e-5).numpy()
    for k in (2, -1):
        np.testing.assert_allclose(reg.get(RMS).ref([y, w[:4], eps], {"backend_config": k}), want, rtol=1e-12)
    for k in (0, 1, 2, -1):
        np.testing.assert_allclose(reg.get(SOFTMAX).ref([y], {"backend_config": k}), torch.softmax(t(y), k).numpy(),
                                   rtol=1e-12)
    np.testing.assert_allclose(reg.get(GELU).ref([y], {}), F.gelu(t(y), approximate="tanh").numpy(), rtol=1e-12)
    assert np.array_equal(reg.get(RING).ref([y], {}), y)


def _load(tmp_path, text: str, name="m.hlo", role="spec"):
    from graphguard.frontends import LoadRequest
    from graphguard.frontends.hlo.load import load
    from graphguard.ir.scalar import Constraints
    from graphguard.plugins import load_plugins
    p = tmp_path / name
    p.write_text(text)
    return load(LoadRequest([str(p)], role, load_plugins().registry, Constraints(), None))


def _run(g, env):
    from graphguard.engine.replay import run_graph
    from graphguard.plugins import load_plugins
    return run_graph(g, dict(env), load_plugins().registry, {})


CUSTOM = """HloModule custom
ENTRY %main (x: f16[8,2,3], w: f16[8]) -> (f16[8,2,3], f16[8,2,3], f16[8,2,3], f16[8]) {
  %x = f16[8,2,3]{2,1,0} parameter(0)
  %w = f16[8]{0} parameter(1)
  %ring = f16[8]{0} custom-call(f16[8]{0} %w), custom_call_target="AwsNeuronTransferWithStaticRing", api_version=API_VERSION_UNSPECIFIED
  %x32 = f32[8,2,3]{2,1,0} convert(f16[8,2,3]{2,1,0} %x)
  %eps = f32[] constant(1e-05)
  %rms = f16[8,2,3]{2,1,0} custom-call(f32[8,2,3]{2,1,0} %x32, f16[8]{0} %ring, f32[] %eps), custom_call_target="AwsNeuronRmsNorm", api_version=API_VERSION_UNSPECIFIED, backend_config="0"
  %sm = f16[8,2,3]{2,1,0} custom-call(f16[8,2,3]{2,1,0} %x), custom_call_target="AwsNeuronSoftmax", backend_config="2"
  %gelu = f16[8,2,3]{2,1,0} custom-call(f16[8,2,3]{2,1,0} %x), custom_call_target="AwsNeuronGeluApprxTanh"
  ROOT %t = (f16[8,2,3], f16[8,2,3], f16[8,2,3], f16[8]) tuple(%rms, %sm, %gelu, %ring)
}
"""

# transformers-neuronx's rms_norm_legacy: the same normalisation in plain HLO
LEGACY = """HloModule legacy
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b)
}
ENTRY %main (x: f16[8,2,3], w: f16[8]) -> f16[8,2,3] {
  %x = f16[8,2,3]{2,1,0} parameter(0)
  %w = f16[8]{0} parameter(1)
  %h = f32[8,2,3]{2,1,0} convert(%x)
  %sq = f32[8,2,3]{2,1,0} multiply(%h, %h)
  %zero = f32[] constant(0)
  %ssum = f32[2,3]{1,0} reduce(%sq, %zero), dimensions={0}, to_apply=%add
  %n = f32[] constant(0.125)
  %nb = f32[2,3]{1,0} broadcast(%n), dimensions={}
  %mean = f32[2,3]{1,0} multiply(%ssum, %nb)
  %eps = f32[] constant(1e-05)
  %epsb = f32[2,3]{1,0} broadcast(%eps), dimensions={}
  %ms = f32[2,3]{1,0} add(%mean, %epsb)
  %r = f32[2,3]{1,0} rsqrt(%ms)
  %rb = f32[8,2,3]{2,1,0} broadcast(%r), dimensions={1,2}
  %scaled = f32[8,2,3]{2,1,0} multiply(%h, %rb)
  %w32 = f32[8]{0} convert(%w)
  %wb = f32[8,2,3]{2,1,0} broadcast(%w32), dimensions={0}
  %prod = f32[8,2,3]{2,1,0} multiply(%scaled, %wb)
  ROOT %y = f16[8,2,3]{2,1,0} convert(%prod)
}
"""


def test_custom_calls_load_with_neuronx_operands_and_backend_config(tmp_path):
    g = _load(tmp_path, CUSTOM)
    rms = g.producer["rms"]
    assert rms.op == RMS and rms.attrs["backend_config"] == 0 and len(rms.inputs) == 3  # x, weight, eps
    assert g.producer["sm"].attrs["backend_config"] == 2
    assert g.tensors["rms"].dtype == "float16"  # the declared result type, not the f32 input's
    rng = np.random.default_rng(1)
    env = {"x": rng.standard_normal((8, 2, 3)), "w": rng.standard_normal(8)}
    out = _run(g, env)
    legacy = _run(_load(tmp_path, LEGACY, "legacy.hlo"), env)["out0"]
    np.testing.assert_allclose(out["out0"], legacy, rtol=1e-6)  # eps: the same f32 constant in both
    e = np.exp(env["x"] - env["x"].max(2, keepdims=True))
    np.testing.assert_allclose(out["out1"], e / e.sum(2, keepdims=True), rtol=1e-12)
    assert np.array_equal(out["out3"], env["w"])


def test_absent_backend_config_is_the_last_dim_and_a_bad_one_an_error(tmp_path):
    sm = CUSTOM.replace(', backend_config="2"', "")
    g = _load(tmp_path, sm)
    assert g.producer["sm"].attrs["backend_config"] == 2  # -1, made non-negative when the graph is loaded
    x = np.random.default_rng(2).standard_normal((8, 2, 3))
    e = np.exp(x - x.max(2, keepdims=True))
    np.testing.assert_allclose(_run(g, {"x": x, "w": np.ones(8)})["out1"], e / e.sum(2, keepdims=True), rtol=1e-12)
    for bad, what in (('backend_config="3"', "is not a dim of a rank-3 tensor"),
                      ('backend_config="eps=1"', "kind scalar")):
        with pytest.raises(InputError, match=what):
            _load(tmp_path, CUSTOM.replace('backend_config="2"', bad), "bad.hlo")


# =================================================================================================
# Lemmas: sound (what they prove and must not: lemma_packs/neuronx/proofs.py)
# =================================================================================================

def test_lemmas_are_sound(plugins):
    rules = [r for r in plugins.lemmas if r.ref in REFS | {880, 881, 882, 884, 885}]
    reports = [fuzz_rule(r, plugins.registry) for r in rules]
    assert len(reports) == 13 and all(rep.ok for rep in reports), [(r.rule.id, r.failure, r.trials) for r in reports]


# what they prove, and must not: lemma_packs/neuronx/proofs.py (tests/test_pack_proofs.py)


# =================================================================================================
# The example: a NeuronX-style Llama-3 layer, TP=2
# =================================================================================================

def test_shipped_files_are_what_the_generator_writes(tmp_path):
    for d, variant in ((EXAMPLE, "ok"), (BUG, "k-slice")):
        make.write(tmp_path / variant, 2, variant)
        for f in ("spec.hlo", "impl.hlo.pb", "relation.yaml"):
            assert (tmp_path / variant / f).read_bytes() == (d / f).read_bytes(), (d, f)
    text = (EXAMPLE / "spec.hlo").read_text()
    impl = make.build(2).text()
    assert "replica-id" not in impl and "partition-id" not in impl and "sharding=" not in impl  # manual partition
    assert impl.count("all-reduce(") == 2 and "replica_groups={{0,1}}" in impl and "all-reduce(" not in text
    for target in ("AwsNeuronRmsNorm", "AwsNeuronTransferWithStaticRing"):
        assert f'custom_call_target="{target}"' in impl
    ops = set(re.findall(r" ([a-z-]+)\(", impl))
    assert {"dot", "slice", "sine", "cosine", "iota", "reduce", "exponential", "divide", "logistic", "select",
            "compare", "and", "dynamic-slice", "dynamic-update-slice", "custom-call", "all-reduce", "transpose"} <= ops
    assert "f16[" in impl


def _ins(text: str, name: str) -> str:
    return next(line for line in text.splitlines() if re.match(rf"\s*(ROOT )?%{re.escape(name)} = ", line))


def test_the_layer_is_what_transformers_neuronx_writes():
    """Left-padding mask (hlo.decoder_attention_mask), -30000 fill (attention.mask), softmax on an f32 copy
    (attention.context), logits of the last position only (ln_lm_head), [V / tp, B] per rank."""
    t = make.build(2).text()
    assert "%start_ids = s32[2]{0} parameter(2)" in t
    assert "direction=LE" in _ins(t, "mask.causal") and "%mask.q_pos" in _ins(t, "mask.causal")
    assert "direction=GE" in _ins(t, "mask.started") and "%mask.start" in _ins(t, "mask.started")
    assert "s32[2,6]{1,0} %start_ids" not in t and "broadcast(s32[2]{0} %start_ids), dimensions={0}" in t
    assert re.search(r"%mask = pred\[2,2,6\]\{2,1,0\} and\(", t)
    assert "dimensions={0,2,3}" in _ins(t, "mask.b") and "constant(-30000)" in _ins(t, "scores.low.c")
    assert _ins(t, "scores.masked").split(" select(")[1].startswith("pred[2,4,2,6]{3,2,1,0} %mask.b")
    for name, dtype in (("scores.f32", "f32"), ("probs.max", "f32"), ("probs.sum", "f32"), ("probs", "f16")):
        assert f"%{name} = {dtype}[" in _ins(t, name)
    assert "to_apply=%max_f32" in _ins(t, "probs.max") and "to_apply=%add_f32" in _ins(t, "probs.sum")
    last = _ins(t, "last")
    assert "f16[32,1,2]{2,1,0} dynamic-slice(" in last and "dynamic_slice_sizes={32,1,2}" in last
    assert "constant(1)" in _ins(t, "last.at")  # S - 1: with left padding every row's last token is there
    root = _ins(t, "outputs")
    assert root.strip().startswith("ROOT %outputs = (f32[32,2]{1,0}, f16[6,2,2,4]{3,2,1,0}, f16[6,2,2,4]{3,2,1,0})")


def test_kv_heads_are_replicated_beyond_one_per_rank():
    """tp > KV heads: each KV head on tp / KV heads ranks; the relation lists one assembly per replica."""
    assert [make.kv_layout(tp) for tp in (1, 2, 4, 8)] == [(4, 1), (2, 1), (1, 1), (1, 2)]
    t = make.build(8).text()
    assert "%cache_k = f16[6,2,1,4]{3,2,1,0} parameter(3)" in t and "f16[32,12]{1,0} parameter" in t  # 1 q + 1 k + 1 v
    rel = make.relation(8)
    assert ('cache_k: ["concat(cache_k@0, cache_k@2, cache_k@4, cache_k@6, dim=2)", '
            '"concat(cache_k@1, cache_k@3, cache_k@5, cache_k@7, dim=2)"]') in rel
    qkv = re.search(r"qkv_weight: (.*)", rel).group(1)
    assert qkv.count('"concat(') == 2 and "slice(qkv_weight@1, dim=1, start=4, end=8)" in qkv
    with pytest.raises(SystemExit, match="tp=3"):
        make.build(3)


def test_dimensions_follow_the_size():
    try:
        make.set_dims(**make.LLAMA_3_2_1B)
        assert (make.H, make.NH, make.NKV, make.D, make.F, make.V) == (2048, 32, 8, 64, 8192, 128256)
        assert make.kv_layout(8) == (1, 1)
        t = make.build(8).text()
        assert "f32[16032,2]{1,0}" in t and "f16[2048,384]{1,0} parameter" in t  # 4 q + 1 k + 1 v heads of 64
    finally:
        make.set_dims(hidden=32, heads=8, kv_heads=4, mlp=64, vocab=64, batch=2, new_tokens=2, cached=4)
    assert make.build(1).text() == (EXAMPLE / "spec.hlo").read_text()  # the tiny dimensions are back


def test_neuronx_llama_tp2_at_llama_3_2_1b_dimensions_verifies(tmp_path):
    """Llama-3.2-1B's layer (hidden 2048, 32 heads over 8 KV heads, MLP 8192, vocabulary 128256) at TP 2: the
    same operators, so about as fast as the tiny one (no replay: the weights would be drawn)."""
    p = subprocess.run([sys.executable, str(EXAMPLE / "make.py"), "--size", "llama-3.2-1b", "--tp", "2", "--out",
                        str(tmp_path)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = graphguard.verify(*_files(tmp_path), frontend="hlo", world_size=2)
    assert r.verdict == "refines" and r.exit_code == 0, r.render()
    assert r.r_o_lines()[0] == "out0 = concat(out0@0, out0@1, dim=0)"


def test_text_and_binary_modules_load_to_the_same_graph(tmp_path):
    """The builder's two spellings (and the frontend's two readers) agree, f32/f16 constants included."""
    from graphguard.frontends import LoadRequest
    from graphguard.frontends.hlo.load import load
    from graphguard.ir.scalar import Constraints
    from graphguard.plugins import load_plugins
    m = make.build(2)
    (tmp_path / "impl.hlo").write_text(m.text())
    (tmp_path / "impl.hlo.pb").write_bytes(m.proto())
    reg = load_plugins().registry
    g_text, g_pb = (load(LoadRequest([str(tmp_path / f)], "impl", reg, Constraints(), 2))
                    for f in ("impl.hlo", "impl.hlo.pb"))
    assert g_text.dump().splitlines()[1:] == g_pb.dump().splitlines()[1:]
    assert g_pb.world_size == 2 and "cache_k@1" in g_pb.inputs


def _files(d):
    return str(d / "spec.hlo"), str(d / "impl.hlo.pb"), str(d / "relation.yaml")


def test_neuronx_llama_tp2_verifies():
    r = graphguard.verify(*_files(EXAMPLE), frontend="hlo", world_size=2, replay=True)
    assert r.verdict == "refines" and r.exit_code == 0, r.render()
    assert r.r_o_lines() == ["out0 = concat(out0@0, out0@1, dim=0)",  # logits sharded on the vocabulary
                             "out1 = concat(out1@0, out1@1, dim=2)", "out2 = concat(out2@0, out2@1, dim=2)"]
    assert r.replay["ok"] and r.replay["checked"] >= 100
    assert r.stats["lemma_hits"].get("hlo-ops:880") and r.stats["lemma_hits"].get("hlo-ops:881")  # the mask / RoPE tables, fused QKV


def test_neuronx_llama_tp4_verifies(tmp_path):
    """At 4 ranks a rank's q heads and its one k head are broadcasts of one RoPE table at two widths: R keeps
    k's sequential table as q-width copies, which the engine cuts to k's width knowing they are broadcasts."""
    make.write(tmp_path, 4, "ok")
    r = graphguard.verify(*_files(tmp_path), frontend="hlo", world_size=4, replay=True)
    assert r.verdict == "refines" and r.exit_code == 0, r.render()
    parts = lambda o: ", ".join(f"{o}@{i}" for i in range(4))
    assert r.r_o_lines() == [f"out0 = concat({parts('out0')}, dim=0)", f"out1 = concat({parts('out1')}, dim=2)",
                             f"out2 = concat({parts('out2')}, dim=2)"]
    assert r.replay["ok"] and r.replay["checked"] >= 100


def _flagged_at_the_first_op_on_k(r, tp: int):
    assert r.verdict == "does-not-refine" and r.exit_code == 1
    f = r.failure
    source = (EXAMPLE / "make.py").read_text().splitlines()
    line = next(i for i, s in enumerate(source, 1) if '"multiply", f"{name}.xcos"' in s)
    assert (f.op, f.node, f.loc, f.outputs) == ("hlo.multiply", "k.rope.xcos", f"make.py:{line}", ["k.rope.xcos"])
    # what G_s's K is: the K columns of each rank's fused projection -- which the ranks never read
    q_cols, k_cols = make.NH // tp * make.D, make.NKV // tp * make.D
    assert any(f"slice(qkv@0, dim=1, start={q_cols}, end={q_cols + k_cols})" in e for e in f.input_relations["k"])
    assert f.replay["max_abs_diff"] > 1e-3
    assert r.replay["ok"]  # every relation found before the failure holds numerically


@pytest.mark.slow
def test_neuronx_llama_tp8_replicated_kv_heads_verifies(tmp_path):
    """8 ranks over 4 KV heads: each KV head on 2 ranks, one query head per rank (the mask broadcast over one
    head is a reshape: 884, 885)."""
    make.write(tmp_path, 8, "ok")
    r = graphguard.verify(*_files(tmp_path), frontend="hlo", world_size=8, replay=True)
    assert r.verdict == "refines" and r.exit_code == 0, r.render()
    parts = lambda o, rs: ", ".join(f"{o}@{i}" for i in rs)  # noqa: E731
    assert r.r_o_lines() == [f"out0 = concat({parts('out0', range(8))}, dim=0)",
                             f"out1 = concat({parts('out1', range(0, 8, 2))}, dim=2)",
                             f"out2 = concat({parts('out2', range(0, 8, 2))}, dim=2)"]
    assert r.stats["lemma_hits"].get("hlo-ops:884") and r.stats["lemma_hits"].get("hlo-ops:885")
    assert r.replay["ok"] and r.replay["checked"] >= 400


def test_k_sliced_from_the_q_columns_is_flagged_at_the_first_op_on_k():
    r = graphguard.verify(*_files(BUG), frontend="hlo", world_size=2, replay=True)
    _flagged_at_the_first_op_on_k(r, 2)


def test_k_sliced_from_the_q_columns_is_flagged_at_the_same_op_at_tp4(tmp_path):
    make.write(tmp_path, 4, "k-slice")
    r = graphguard.verify(*_files(tmp_path), frontend="hlo", world_size=4, replay=True)
    _flagged_at_the_first_op_on_k(r, 4)


def test_a_rank_after_rank_fused_qkv_relation_is_refuted(tmp_path):
    """Stating the fused weight as the ranks' [q | k | v] blocks one after another is wrong (K and V heads
    would be Q heads): graphguard refutes it, numerically visible."""
    rel = (EXAMPLE / "relation.yaml").read_text()
    bad = re.sub(r"qkv_weight: concat\(.*\)", "qkv_weight: concat(qkv_weight@0, qkv_weight@1, dim=1)", rel)
    assert bad != rel
    (tmp_path / "relation.yaml").write_text(bad)
    r = graphguard.verify(str(EXAMPLE / "spec.hlo"), str(EXAMPLE / "impl.hlo.pb"), str(tmp_path / "relation.yaml"),
                          frontend="hlo", world_size=2, replay=True)
    assert r.verdict == "does-not-refine" and r.failure.replay["max_abs_diff"] > 1e-3



def test_without_the_pack_the_error_names_the_target():
    from conftest import run_cli
    p = run_cli("-p", "no:neuronx", "-p", "no:aten-neuronx", "verify", "--frontend", "hlo", "--spec", EXAMPLE / "spec.hlo", "--impl",
                EXAMPLE / "impl.hlo.pb", "--world-size", "2", "--relation", EXAMPLE / "relation.yaml")
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1
    assert "custom-call target 'AwsNeuronTransferWithStaticRing' is unknown" in p.stderr
    assert "hlo.custom_call.AwsNeuronTransferWithStaticRing" in p.stderr
