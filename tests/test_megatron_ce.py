"""Megatron's vocab-parallel cross-entropy with labels (lemmas 1310-1322 in lemma_packs/aten/: elementwise.py, vocab_lookups.py, ...) and the
``ranges:`` section of relation files it needs: its parsing and bad input (exit 2, one line), lemma conditions
reading ranges (vmin/vend), the fuzzer drawing values in a range, replay, and the example and bug examples
built on megatron-core (examples/megatron-gpt, examples/bugs/megatron-ce-vocab-offset,
examples/bugs/megatron-grad-accum-scale).
"""
from __future__ import annotations

import json
import os
import subprocess

import pytest

import graphguard
from conftest import EXAMPLES, run_cli
from graphguard.engine.fuzz import fuzz_rule
from graphguard.engine.lemma import build_rules
from graphguard.ir.lemma import L
from graphguard.testing import proves
from graphguard.errors import InputError
from graphguard.ir.relation import parse_range, parse_relation_text
from graphguard.plugins import load_plugins

# -- lemmas: comparisons and lookups of ids in a stated range ------------------------------------------------------

FALSE = 'aten.full(size=[2, 3], fill_value=0, dtype="bool")'
INT = {"T": "int64"}


def test_comparison_below_the_range_is_all_false():
    assert proves("aten.lt.Scalar(T, other=0)", FALSE, {"T": [2, 3]}, dtypes=INT, ranges={"T": (0, 8)})
    assert proves("aten.ge.Scalar(T, other=8)", FALSE, {"T": [2, 3]}, dtypes=INT, ranges={"T": (0, 8)})


def test_comparison_is_not_false_without_a_range_or_beyond_it():
    assert not proves("aten.lt.Scalar(T, other=0)", FALSE, {"T": [2, 3]}, dtypes=INT)
    assert not proves("aten.lt.Scalar(T, other=0)", FALSE, {"T": [2, 3]}, dtypes=INT, ranges={"T": (-1, 8)})
    assert not proves("aten.ge.Scalar(T, other=8)", FALSE, {"T": [2, 3]}, dtypes=INT, ranges={"T": (0, 9)})


def test_range_of_a_view_is_its_input_s():
    """A permuted or reshaped tensor holds only values of its input: its range carries over."""
    assert proves("aten.lt.Scalar(permute(T, dims=[1, 0]), other=0)", 'aten.full(size=[3, 2], fill_value=0, dtype="bool")',
                  {"T": [2, 3]}, dtypes=INT, ranges={"T": (0, 8)})


# Megatron's masked target logits of logits X [4, cols] for targets T [2, 2], vocabulary [s, e)
_MASK = "aten.bitwise_or.Tensor(aten.lt.Scalar(T, other={s}), aten.ge.Scalar(T, other={e}))"
_LOCAL = (f"aten.index_put(aten.sub.Tensor(T, aten.scalar_tensor(s={{s}}, dtype=int64)), {_MASK},"
          " aten.full(size=[], fill_value=0, dtype=int64))")
_PRED = (f"aten.index_put(reshape(aten.index.Tensor({{x}}, aten.arange.start(start=0, end=4),"
         f" reshape({_LOCAL}, shape=[4])), shape=[2, 2]), {_MASK}, aten.full(size=[], fill_value=0, dtype=float32))")
CE_SH = {"A": [4, 4], "B": [4, 4], "T": [2, 2]}
LOOKUP = "aten.index.Tensor(concat(A, B, dim=1), aten.arange.start(start=0, end=4), reshape(T, shape=[4]))"


def _ranks(s1: int = 4) -> str:
    return f"reshape(sum({_PRED.format(x='A', s=0, e=s1)}, {_PRED.format(x='B', s=s1, e=8)}), shape=[4])"


def test_lookup_of_labels_in_range_is_the_ranks_masked_lookups():
    assert proves(LOOKUP, _ranks(), CE_SH, dtypes=INT, ranges={"T": (0, 8)})


def test_lookup_is_not_the_ranks_masked_lookups_without_the_range():
    assert not proves(LOOKUP, _ranks(), CE_SH, dtypes=INT)
    assert not proves(LOOKUP, _ranks(), CE_SH, dtypes=INT, ranges={"T": (0, 9)})  # a label past the vocabulary


def test_lookup_is_not_the_ranks_lookups_at_a_wrong_vocabulary_offset():
    assert not proves(LOOKUP, _ranks(s1=2), CE_SH, dtypes=INT, ranges={"T": (0, 8)})


# -- the fuzzer draws values in a range; a lemma assuming more than its range is unsound ------------------------

def _fuzz(cond: str):
    pl = load_plugins()
    lem = L(9001, "test-lt-below-range", 'aten.lt.Scalar(?t, other=?s) => aten.full(size=shape(?t), fill_value=0, '
            'dtype="bool")', cond)
    return [fuzz_rule(r, pl.registry) for r in build_rules(lem, pl.registry)]


def test_fuzzer_passes_a_lemma_its_range_justifies():
    assert all(rep.ok for rep in _fuzz("finite(?s) and vmin(?t) >= ?s"))


def test_fuzzer_fails_a_lemma_that_assumes_more_than_its_range():
    reps = _fuzz("finite(?s) and vmin(?t) >= ?s - 1")
    assert not any(rep.ok for rep in reps)
    assert "values differ" in reps[0].failure and " in [" in reps[0].failure  # the instance names its range


# -- relation files: ranges: -------------------------------------------------------------------------------------

def test_parse_range_forms():
    assert parse_range("[0, 128)") == (0, 128)
    assert parse_range("[-3, 4]") == (-3, 5)
    assert parse_range(" [ 2 , 3 ) ") == (2, 3)
    for bad in ("[3, 3)", "[4, 2]", "(0, 3)", "[0, 3", "0, 3", "[0.5, 3)", "[a, 3)", "[0, 1, 2)", ""):
        assert parse_range(bad) is None, bad


def test_relation_file_ranges_section():
    reg = load_plugins().registry
    rel = parse_relation_text('inputs:\n  T: [T@0, T@1]\nranges:\n  T: "[0, 32)"\n', "r.yaml", reg)
    assert rel.ranges == {"T": (0, 32)}
    assert rel.leaf_ranges() == {"T@0": (0, 32), "T@1": (0, 32)}
    rel = parse_relation_text('inputs:\n  T: concat(T@0, slice(U@1, dim=0, start=0, end=2), dim=0)\n'
                              'ranges:\n  T: "[1, 4]"\n', "r.yaml", reg)
    assert rel.leaf_ranges() == {"T@0": (1, 5)}  # a sliced tensor holds other values too: no range


@pytest.mark.parametrize("text,why", [
    ('ranges:\n  T: [0, 32)\n', "invalid YAML"),
    ('ranges:\n  T: "[0, 32"\n', "the range of 'T' must be"),
    ('ranges:\n  T: "[5, 2)"\n', "the range of 'T' must be"),
    ('ranges:\n  T: [0, 32]\n', "the range of 'T' must be"),
    ('ranges: "[0, 3)"\n', "'ranges' must map input names"),
])
def test_malformed_ranges_are_bad_input(text, why):
    reg = load_plugins().registry
    with pytest.raises(InputError, match="r.yaml") as e:
        parse_relation_text("inputs:\n  T: [T@0, T@1]\n" + text, "r.yaml", reg)
    assert why in str(e.value)


def _pair(tmp_path):
    """A two-rank pair with an integer input T and a float input X (each replicated)."""
    def graph(name, ranks):
        sfx = [f"@{r}" for r in range(ranks)] if ranks else [""]
        return {"graphguard": 1, "name": name,
                "inputs": [i for s in sfx for i in ({"name": f"T{s}", "shape": [4], "dtype": "int64"},
                                                    {"name": f"X{s}", "shape": [4], "dtype": "float32"})],
                "nodes": [n for s in sfx for n in (
                    {"name": f"lt{s}", "op": "aten.lt.Scalar", "inputs": [f"T{s}"], "outputs": [f"Y{s}"],
                     "attrs": {"other": 0}},
                    {"name": f"id{s}", "op": "core.identity", "inputs": [f"X{s}"], "outputs": [f"Z{s}"]})],
                "outputs": [o for s in sfx for o in (f"Y{s}", f"Z{s}")], **({"world_size": ranks} if ranks else {})}
    (tmp_path / "spec.gg.json").write_text(json.dumps(graph("spec", 0)))
    (tmp_path / "impl.gg.json").write_text(json.dumps(graph("impl", 2)))
    return tmp_path / "spec.gg.json", tmp_path / "impl.gg.json"


def _verify_with(tmp_path, ranges: str, *extra):
    s, i = _pair(tmp_path)
    rel = tmp_path / "rel.yaml"
    rel.write_text("inputs:\n  T: [T@0, T@1]\n  X: [X@0, X@1]\n" + ranges)
    return run_cli("verify", "--spec", s, "--impl", i, "--relation", rel, *extra), rel


def test_ranges_verify_and_replay_in_range(tmp_path):
    p, _ = _verify_with(tmp_path, 'ranges:\n  T: "[0, 5)"\n', "--replay")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "replay: ok" in p.stdout


@pytest.mark.parametrize("ranges,why", [
    ('ranges:\n  U: "[0, 5)"\n', "ranges: 'U' is not an input of the specification"),
    ('ranges:\n  X: "[0, 5)"\n', "ranges: 'X' has dtype float32; only integer inputs take a value range"),
    ('ranges:\n  T: "[0, 5"\n', "the range of 'T' must be"),
])
def test_bad_ranges_exit_2_with_one_line_naming_the_file(tmp_path, ranges, why):
    p, rel = _verify_with(tmp_path, ranges)
    assert p.returncode == 2, p.stdout + p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and str(rel) in lines[0] and why in lines[0], p.stderr
    assert "Traceback" not in p.stdout + p.stderr


def test_replay_draws_an_input_in_its_range():
    from graphguard.engine.replay import _inputs
    from graphguard.ir.scalar import Constraints
    from graphguard.ir.serde import graph_from_dict
    reg = load_plugins().registry
    rel = parse_relation_text('inputs:\n  T: [T@0, T@1]\nranges:\n  T: "[7, 9)"\n', "r.yaml", reg)
    g_s = graph_from_dict({"graphguard": 1, "name": "s", "inputs": [{"name": "T", "shape": [64], "dtype": "int64"}],
                           "nodes": [], "outputs": ["T"]}, "s", reg, Constraints())
    g_d = graph_from_dict({"graphguard": 1, "name": "d", "world_size": 2, "nodes": [], "outputs": ["T@0", "T@1"],
                           "inputs": [{"name": f"T@{r}", "shape": [64], "dtype": "int64"} for r in range(2)]},
                          "d", reg, Constraints())
    d_env, _ = _inputs(g_s, g_d, rel, reg, {}, 0, "graph")
    for r in range(2):
        assert d_env[f"T@{r}"].min() >= 7 and d_env[f"T@{r}"].max() <= 8
    assert (d_env["T@0"] == d_env["T@1"]).all() and len(set(d_env["T@0"].tolist())) == 2


# -- megatron-core: the example and the planted bugs --------------------------------------------------------------

def _run(path, *args, env=None):
    pytest.importorskip("megatron.core")
    return subprocess.run([str(path), *args], capture_output=True, text=True, env={**os.environ, **(env or {})})


@pytest.mark.slow  # (suite time: tests/test_examples.py runs megatron-gpt with sequence parallelism, which checks these
# lines too; the plain-TP forward runs in the predicted-logits bug test below)
def test_megatron_gpt_cross_entropy_with_labels_refines_forward_and_backward():
    p = _run(EXAMPLES / "megatron-gpt" / "run", "--backward")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "out0 = out0@0" in p.stdout and "out0 = out0@1" in p.stdout  # the loss per token, on every rank
    assert "grad.output_layer.weight = concat(grad.output_layer.weight@0, grad.output_layer.weight@1, dim=0)" \
        in p.stdout


def _bug(name, tmp_path, env=None):
    out = tmp_path / "result.json"
    p = _run(EXAMPLES / "bugs" / name / "run", "--json", str(out), env=env)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(out.read_text())["failure"]


@pytest.mark.slow  # (its run script also runs in tests/test_examples.py)
def test_megatron_cross_entropy_wrong_vocab_range_is_flagged_at_the_lookup(tmp_path):
    f = _bug("megatron-ce-vocab-offset", tmp_path)
    # the lookup of the target's logit (line 59) and the zeroing of the masked ones (line 62) are one canonical
    # op, core.masked_pick (lemma_packs/core/lookups.py), reported at the line that completes it
    assert (f["op"], f["loc"]) == ("core.masked_pick", "cross_entropy.py:62")


@pytest.mark.slow  # (suite time, 25 s; by default: megatron-gpt verifies with this cross-entropy, and torchtitan's
# loss-parallel cross-entropy without its all-reduce is flagged, tests/test_torchtitan.py)
def test_megatron_cross_entropy_without_predicted_logits_allreduce_is_flagged_at_the_loss(tmp_path):
    f = _bug("megatron-ce-vocab-offset", tmp_path, env={"GG_CE_BUG": "allreduce"})
    assert (f["op"], f["loc"]) == ("aten.sub.Tensor", "cross_entropy.py:77")


@pytest.mark.slow  # (its run script also runs in tests/test_examples.py)
def test_megatron_grad_accum_loss_not_scaled_is_flagged_at_the_scale(tmp_path):
    f = _bug("megatron-grad-accum-scale", tmp_path)
    # (the division by a constant is the scalar form mul.Scalar(x, 1/n) once passes.scalars has run; the line is
    # the user's division)
    assert f["op"] in ("aten.div.Tensor", "aten.mul.Scalar") and f["loc"].startswith("model.py:")
    assert "known only up to a constant factor" in f["reason"]


@pytest.mark.slow
def test_megatron_grad_accum_scaled_by_megatron_refines_forward_and_backward():
    p = _run(EXAMPLES / "bugs" / "megatron-grad-accum-scale" / "run", "--backward", env={"GG_BUG": "0"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "expected relations: all" in p.stdout


# -- lemmas 1320-1324: a mean's backward over micro-batches, scaled gradients, the MoE capacity mask ---------------

def test_mean_backward_over_micro_batches_is_their_halves():
    """A number broadcast over the whole batch / 16 is the micro-batches' broadcasts of half of it / 8."""
    half = "aten.div.Scalar(aten.expand(aten.mul.Scalar(T, other=0.5), size=[1, 8], implicit=false), other=8)"
    assert proves("aten.div.Scalar(aten.expand(T, size=[2, 8], implicit=false), other=16)",
                  f"concat({half}, {half}, dim=0)", {"T": []})


def test_mean_backward_over_micro_batches_without_the_half_is_not():
    whole = "aten.div.Scalar(aten.expand(T, size=[1, 8], implicit=false), other=8)"
    assert not proves("aten.div.Scalar(aten.expand(T, size=[2, 8], implicit=false), other=16)",
                      f"concat({whole}, {whole}, dim=0)", {"T": []})


def test_masked_fill_with_zero_keeps_a_factor_but_not_with_another_value():
    sh, dt = {"X": [2, 3], "M": [2, 3]}, {"M": "bool"}
    assert proves("aten.masked_fill.Scalar(scale(X, factor=0.5), M, value=0)",
                  "scale(aten.masked_fill.Scalar(X, M, value=0), factor=0.5)", sh, dtypes=dt)
    assert not proves("aten.masked_fill.Scalar(scale(X, factor=0.5), M, value=1)",
                      "scale(aten.masked_fill.Scalar(X, M, value=1), factor=0.5)", sh, dtypes=dt)


def test_product_with_an_all_true_mask_is_the_tensor():
    mask = 'aten._to_copy(aten.full(size=[2, 3], fill_value={}, dtype=float32), dtype="bool")'
    assert proves(f"aten.mul.Tensor(X, {mask.format(1)})", "X", {"X": [2, 3]})
    assert not proves(f"aten.mul.Tensor(X, {mask.format(0)})", "X", {"X": [2, 3]})


# -- the engine: an operator without a clean expression is carried to its readers; a failure stays where it began --

def _chain(tmp_path, impl_other):
    """G_s: Y = T < 0, Z = float(Y); each rank: T < impl_other, then float()."""
    def graph(name, sfx, other):
        return {"graphguard": 1, "name": name, "inputs": [{"name": f"T{s}", "shape": [4], "dtype": "int64"} for s in sfx],
                "nodes": [n for s in sfx for n in (
                    {"name": f"lt{s}", "op": "aten.lt.Scalar", "inputs": [f"T{s}"], "outputs": [f"Y{s}"],
                     "attrs": {"other": other}},
                    {"name": f"cp{s}", "op": "aten._to_copy", "inputs": [f"Y{s}"], "outputs": [f"Z{s}"],
                     "attrs": {"dtype": "float32"}})],
                "outputs": [f"Z{s}" for s in sfx], **({"world_size": 2} if sfx[0] else {})}
    (tmp_path / "s.gg.json").write_text(json.dumps(graph("s", [""], 0)))
    (tmp_path / "d.gg.json").write_text(json.dumps(graph("d", ["@0", "@1"], impl_other)))
    return graphguard.verify(tmp_path / "s.gg.json", tmp_path / "d.gg.json", {"inputs": {"T": ["T@0", "T@1"]}})


def test_a_failure_carried_to_the_reader_is_reported_where_it_began(tmp_path):
    r = _chain(tmp_path, 1)
    assert r.verdict == "does-not-refine" and r.failure.node == "lt"


def test_the_same_chain_with_the_same_comparison_refines(tmp_path):
    assert _chain(tmp_path, 0).verdict == "refines"


def test_tokens_permuted_by_the_sorted_all_ones_mask_are_the_tokens_repeated_per_expert():
    mask = 'aten._to_copy(aten._to_copy(aten.full(size=[8, 4], fill_value=1, dtype=float32), dtype="bool"), dtype="int8")'
    order = f"reshape(aten.sort.stable#1(permute({mask}, dims=[1, 0]), stable=true, dim=1, descending=true), shape=[32])"
    repeated = "reshape(aten.expand(reshape(concat(A, B, dim=0), shape=[1, 8, 8]), size=[4, 8, 8], implicit=false), shape=[32, 8])"
    sh = {"A": [4, 8], "B": [4, 8]}
    assert proves(f"aten.index_select(concat(A, B, dim=0), {order}, dim=0)", repeated, sh)
    # a mask of zeros and ones sorts otherwise: not the tokens in order
    mixed = order.replace('aten.full(size=[8, 4], fill_value=1, dtype=float32)', "M")
    assert not proves(f"aten.index_select(concat(A, B, dim=0), {mixed}, dim=0)", repeated, {**sh, "M": [8, 4]})
