"""Relations across dtypes: ``convert(p@0, dtype=t)`` in an input relation states that the G_d input p@0 is the
exact conversion of the specification input (dtype t) to p's dtype -- allowed only where t -> p's dtype loses
nothing (graphguard/ir/dtypes.py), built into G_d as a ``core.convert`` of a new t input
(graphguard/ir/relation.py: exact_conversions). Proving and must-not-prove cases; lossy ones are exit 2."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

import graphguard
from graphguard.errors import InputError
from graphguard.ir import scalar as S
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.dtypes import exact_conversion
from graphguard.plugins import load_plugins
from graphguard.testing import proves

RMS = "hlo.custom_call.AwsNeuronRmsNorm"


@pytest.mark.parametrize("src, dst", [("float16", "float32"), ("bfloat16", "float32"), ("float32", "float64"),
                                      ("float16", "float64"), ("int8", "int32"), ("int32", "int64"),
                                      ("uint8", "int16"), ("bool", "int32"), ("bool", "float16"),
                                      ("int8", "float16"), ("int16", "float32"), ("int32", "float64"),
                                      ("float32", "float32")])
def test_exact_conversions(src, dst):
    assert exact_conversion(src, dst)


@pytest.mark.parametrize("src, dst", [("float32", "float16"), ("float32", "bfloat16"), ("float16", "bfloat16"),
                                      ("bfloat16", "float16"), ("int64", "int32"), ("float32", "int32"),
                                      ("float16", "int64"), ("int8", "uint8"), ("int32", "float32"),
                                      ("int16", "float16"), ("int32", "bool"), ("float64", "float32")])
def test_lossy_conversions(src, dst):
    assert not exact_conversion(src, dst)


# core 150: a round trip through a wider dtype is the identity only where the widening is exact
def test_round_trip_through_an_exact_widening_is_the_identity():
    assert proves("convert(convert(X, dtype=float32), dtype=float16)", "X", {"X": [2, 3]}, dtypes={"X": "float16"})
    assert proves("convert(convert(I, dtype=int64), dtype=int32)", "I", {"I": [3]}, dtypes={"I": "int32"})


def test_round_trip_through_a_narrowing_is_not():  # float32 -> float16 -> float32 rounds
    assert not proves("convert(convert(X, dtype=float16), dtype=float32)", "X", {"X": [2, 3]},
                      dtypes={"X": "float32"})
    assert not proves("convert(convert(X, dtype=bfloat16), dtype=float16)", "X", {"X": [2, 3]},
                      dtypes={"X": "float16"})


# neuronx 907: the kernel reads its weight's values: an exact widening of the weight is the weight
_W = {"X": [4, 3], "W": [4], "C": []}


def test_rms_norm_of_an_upcast_weight_is_of_the_weight():
    assert proves(f"{RMS}(X, convert(W, dtype=float32), C, backend_config=0)", f"{RMS}(X, W, C, backend_config=0)",
                  _W, dtypes={"X": "float32", "W": "float16", "C": "float32"})


def test_rms_norm_of_a_downcast_weight_is_not():
    assert not proves(f"{RMS}(X, convert(W, dtype=float16), C, backend_config=0)",
                      f"{RMS}(X, W, C, backend_config=0)", _W, dtypes={"X": "float32", "W": "float32", "C": "float32"})


# whole verifications: G_s normalises with an f16 weight, G_d with an f32 one (transformers-neuronx's RMSNorm)
def _pair(g_d_weight="w32@0", scale=None, w_dtype="float32", s_dtype="float16", extra=False):
    reg = load_plugins().registry
    s = GraphBuilder("spec")
    s.input("x", [4, 3], "float32")
    s.input("w", [4], s_dtype)
    s.input("c", [], "float32")
    s.op(RMS, ["x", "w", "c"], "y", backend_config=0)
    s.output("y")
    d = GraphBuilder("impl", world_size=1)
    d.input("x@0", [4, 3], "float32")
    d.input("w32@0", [4], w_dtype)
    if extra:
        d.input("v32@0", [4], w_dtype)
    d.input("c@0", [], "float32")
    wd = g_d_weight
    if scale is not None:
        wd = d.op("core.scale", [wd], "w.scaled@0", factor=scale)
    d.op(RMS, ["x@0", wd, "c@0"], "y@0", backend_config=0)
    d.output("y@0")
    return s.build(reg, S.Constraints()), d.build(reg, S.Constraints())


def _verify(g_s, g_d, w="convert(w32@0, dtype=float16)", **more):
    rel = {"inputs": {"x": "x@0", "w": w, "c": "c@0", **more}}
    return graphguard.verify(g_s, g_d, rel)


def test_upcast_weight_refines():
    g_s, g_d = _pair()
    r = _verify(g_s, g_d)
    assert r.verdict == "refines", r.render()
    # the G_d input is now the convert of a new float16 input, which the relation names
    from graphguard.ir.expr import to_text
    assert [to_text(e) for e in r.relations["w"]] == ["w32.float16@0"]
    assert g_d.tensors["w32.float16@0"].dtype == "float16" and "w32@0" not in g_d.inputs
    assert g_d.producer["w32@0"].op == "core.convert"


def test_upcast_weight_used_otherwise_does_not_refine():  # must not prove: G_d scales the weight first
    g_s, g_d = _pair(scale=2)
    assert _verify(g_s, g_d).verdict != "refines"


def test_the_other_upcast_weight_does_not_refine():  # must not prove: G_d normalises with another f32 weight
    _, g_d = _pair(g_d_weight="v32@0", extra=True)
    reg = load_plugins().registry  # (G_s holds both weights, each related to its own f32 one)
    b = GraphBuilder("spec")
    b.input("x", [4, 3], "float32")
    b.input("w", [4], "float16")
    b.input("v", [4], "float16")
    b.input("c", [], "float32")
    b.op(RMS, ["x", "w", "c"], "y", backend_config=0)
    b.output("y")
    s2 = b.build(reg, S.Constraints())
    r = _verify(s2, g_d, v="convert(v32@0, dtype=float16)")
    assert r.verdict != "refines"


@pytest.mark.parametrize("s_dtype, w_dtype", [("float32", "float16"), ("float32", "bfloat16"),
                                              ("float16", "bfloat16"), ("bfloat16", "float16")])
def test_lossy_relation_is_refused(s_dtype, w_dtype):
    g_s, g_d = _pair(w_dtype=w_dtype, s_dtype=s_dtype)
    with pytest.raises(InputError) as e:
        _verify(g_s, g_d, w=f"convert(w32@0, dtype={s_dtype})")
    msg = str(e.value)
    assert "relation for w" in msg and s_dtype in msg and w_dtype in msg and "not exact" in msg, msg


def test_int_narrowing_relation_is_refused():
    reg = load_plugins().registry
    s = GraphBuilder("spec")
    s.input("i", [3], "int64")
    s.op("core.identity", ["i"], "o")
    s.output("o")
    d = GraphBuilder("impl", world_size=1)
    d.input("i@0", [3], "int32")
    d.op("core.identity", ["i@0"], "o@0")
    d.output("o@0")
    with pytest.raises(InputError, match="int64 -> int32 is not exact"):
        graphguard.verify(s.build(reg, S.Constraints()), d.build(reg, S.Constraints()),
                          {"inputs": {"i": "convert(i@0, dtype=int64)"}})


def test_convert_of_a_slice_is_refused():  # only whole inputs (and their concat / permute / reshape) convert
    g_s, g_d = _pair()
    with pytest.raises(InputError, match="convert exactly"):
        _verify(g_s, g_d, w="convert(slice(concat(w32@0, w32@0, dim=0), dim=0, start=0, end=4), dtype=float16)")


def test_without_convert_the_dtypes_still_differ():  # the lint as before: no silent cast
    g_s, g_d = _pair()
    with pytest.raises(InputError, match="has dtype float32 but w has float16"):
        _verify(g_s, g_d, w="w32@0")


def test_lossy_relation_is_exit_2_in_one_line(tmp_path):
    s = GraphBuilder("spec")
    s.input("x", [4, 3], "float32")
    s.input("w", [4], "float32")
    s.input("c", [], "float32")
    s.op(RMS, ["x", "w", "c"], "y", backend_config=0)
    s.output("y")
    d = GraphBuilder("impl", world_size=1)
    d.input("x@0", [4, 3], "float32")
    d.input("w32@0", [4], "float16")
    d.input("c@0", [], "float32")
    d.op(RMS, ["x@0", "w32@0", "c@0"], "y@0", backend_config=0)
    d.output("y@0")
    (tmp_path / "s.gg.json").write_text(json.dumps(s.to_dict()))
    (tmp_path / "d.gg.json").write_text(json.dumps(d.to_dict()))
    (tmp_path / "r.yaml").write_text(yaml.safe_dump({"inputs": {"x": "x@0", "w": "convert(w32@0, dtype=float32)",
                                                                "c": "c@0"}}))
    p = subprocess.run([sys.executable, "-m", "graphguard", "verify", "--spec", str(tmp_path / "s.gg.json"),
                        "--impl", str(tmp_path / "d.gg.json"), "--relation", str(tmp_path / "r.yaml")],
                       capture_output=True, text=True)
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert "r.yaml" in lines[0] and "relation for w" in lines[0] and "float32 -> float16 is not exact" in lines[0]
