"""The lint checks dtypes: known names only, each op's dtype rule (a declared dtype must agree; clean ops and
collectives keep their inputs' one dtype), and the input relation relates tensors of the same dtype."""
from __future__ import annotations

import copy
import json
import zipfile
from pathlib import Path

import pytest

from graphguard.ir.ops import DTYPES

ROOT = Path(__file__).resolve().parents[1]
FIG1 = ROOT / "examples" / "paper-fig1"
SPEC = json.loads((FIG1 / "spec.gg.json").read_text())
IMPL = json.loads((FIG1 / "impl.gg.json").read_text())
REL = (FIG1 / "relation.yaml").read_text()


def _cli(argv, capsys) -> tuple[int, str]:
    from graphguard.cli import main
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return e.value.code, out.out + out.err


def _verify(d: Path, capsys, spec=None, impl=None, rel=None, frontend="ir", ext="gg.json", extra=()):
    files = []
    for name, v, default in (("spec", spec, SPEC), ("impl", impl, IMPL)):
        v = default if v is None else v
        p = d / f"{name}.{ext}"
        p.write_text(v if isinstance(v, str) else json.dumps(v))
        files.append(p)
    (d / "relation.yaml").write_text(REL if rel is None else rel)
    return _cli(["verify", "--frontend", frontend, "--spec", files[0], "--impl", files[1],
                 "--relation", d / "relation.yaml", *extra], capsys)


def _refused(code_out, *needles):
    code, out = code_out
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("graphguard: error:"), (code, out)
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _tensor(doc, name):
    return next(t for t in doc["inputs"] if t["name"] == name)


def _spec(**dtypes):
    s = copy.deepcopy(SPEC)
    for k, v in dtypes.items():
        _tensor(s, k)["dtype"] = v
    return s


def _impl(**dtypes):
    s = copy.deepcopy(IMPL)
    for k, v in dtypes.items():
        _tensor(s, k.replace("_", "@"))["dtype"] = v
    return s


def test_example_with_its_dtypes_refines(tmp_path, capsys):
    assert _verify(tmp_path, capsys)[0] == 0
    both = {"A": "bfloat16", "B": "bfloat16", "E": "bfloat16"}
    assert _verify(tmp_path, capsys, spec=_spec(**both), impl=_impl(**{f"{k}_{r}": v for k, v in both.items()
                                                                      for r in (0, 1)}))[0] == 0


@pytest.mark.parametrize("dtype", ["float33", "f32", "torch.float32", "Float32", "", 32, None, ["float32"]])
def test_unknown_input_dtype(dtype, tmp_path, capsys):
    line = _refused(_verify(tmp_path, capsys, spec=_spec(B=dtype)), "spec.gg.json")
    assert "'B'" in line and ("unknown dtype" in line or "dtype must be a string" in line)


def test_unknown_declared_output_dtype(tmp_path, capsys):
    s = _spec()
    s["nodes"][0]["outputs"] = [{"name": "C", "shape": [8, 4], "dtype": "float33"}]
    _refused(_verify(tmp_path, capsys, spec=s), "spec.gg.json", "'C'", "unknown dtype 'float33'")


def test_unknown_dtype_from_an_attribute(tmp_path, capsys):
    s = _spec()
    s["nodes"].append({"name": "cast", "op": "aten._to_copy", "inputs": ["F"], "outputs": ["G"],
                       "attrs": {"dtype": "float33"}})
    _refused(_verify(tmp_path, capsys, spec=s), "spec.gg.json", "node 'cast'", "'G'", "unknown dtype 'float33'")


def test_declared_dtype_must_follow_the_op(tmp_path, capsys):
    s = _spec()
    s["nodes"][0]["outputs"] = [{"name": "C", "shape": [8, 4], "dtype": "float16"}]
    _refused(_verify(tmp_path, capsys, spec=s), "spec.gg.json", "node 'matmul'", "declared dtype float16",
             "gives float32")
    s["nodes"][0]["outputs"] = [{"name": "C", "shape": [8, 4], "dtype": "float32"}]
    assert _verify(tmp_path, capsys, spec=s)[0] == 0


def _lint(path: Path, doc: dict, capsys):
    path.write_text(json.dumps(doc))
    return _cli(["dump", path], capsys)


def test_declared_dtype_follows_an_op_rule(tmp_path, capsys):
    """aten.lt gives bool whatever its inputs: bool is right, float32 (its inputs' dtype) is not."""
    s = _spec()
    s["nodes"].append({"name": "lt", "op": "aten.lt.Tensor", "inputs": ["F", "F"],
                       "outputs": [{"name": "G", "shape": [8, 4], "dtype": "bool"}]})
    code, out = _lint(tmp_path / "g.gg.json", s, capsys)
    assert code == 0 and "G: [8, 4] = aten.lt.Tensor(F, F)" in out, out
    s["nodes"][-1]["outputs"][0]["dtype"] = "float32"
    _refused(_lint(tmp_path / "g.gg.json", s, capsys), "g.gg.json", "node 'lt'",
             "declared dtype float32 of 'G' contradicts aten.lt.Tensor, which gives bool")


def test_concat_of_two_dtypes(tmp_path, capsys):
    s = _spec(E="float16")
    s["nodes"].append({"name": "cat", "op": "core.concat", "inputs": ["B", "E"], "outputs": ["G"],
                       "attrs": {"dim": 0}})
    _refused(_verify(tmp_path, capsys, spec=s), "spec.gg.json", "node 'cat'", "float32 and float16")


def test_collective_over_two_dtypes(tmp_path, capsys):
    i = copy.deepcopy(IMPL)
    for n in i["nodes"]:  # rank 1 computes in float16 from the matmul on
        if n["name"] == "matmul@1":
            n["outputs"] = [{"name": "C@1", "shape": [8, 4], "dtype": "float16"}]
    line = _refused(_verify(tmp_path, capsys, impl=i), "impl.gg.json")
    assert "declared dtype float16" in line  # the matmul of float32 inputs is float32
    i = _impl(A_1="float16", B_1="float16")
    line = _refused(_verify(tmp_path, capsys, impl=i), "impl.gg.json", "reduce_scatter", "float32, float16")


def test_relation_relates_one_dtype(tmp_path, capsys):
    i = copy.deepcopy(IMPL)
    i["inputs"].append({"name": "X@1", "shape": [8, 4], "dtype": "float16"})
    rel = REL.replace("concat(A@0, A@1, dim=1)", "concat(A@0, X@1, dim=1)")
    line = _refused(_verify(tmp_path, capsys, impl=i, rel=rel), "relation.yaml:2:3", "relation for A")
    assert "float32 and float16" in line
    i["inputs"][-1]["dtype"] = "float32"
    assert _verify(tmp_path, capsys, impl=i, rel=rel)[0] != 2  # between float32 tensors it passes the lint


def test_relation_dtype_matches_the_specification(tmp_path, capsys):
    _refused(_verify(tmp_path, capsys, impl=_impl(B_0="bfloat16", B_1="bfloat16")), "relation.yaml:3:3",
             "relation for B has dtype bfloat16 but B has float32")


def test_expected_relation_dtype(tmp_path, capsys):
    rel = REL + "expect:\n  F: concat(F@0, F@1, dim=0)\n"
    assert _verify(tmp_path, capsys, rel=rel)[0] == 0
    i = copy.deepcopy(IMPL)
    i["nodes"].append({"name": "cast@1", "op": "aten._to_copy", "inputs": ["F@1"], "outputs": ["H@1"],
                       "attrs": {"dtype": "float16"}})
    rel = REL + "expect:\n  F: concat(F@0, H@1, dim=0)\n"
    _refused(_verify(tmp_path, capsys, impl=i, rel=rel), "relation.yaml:6:3", "relation for F", "float32 and float16")


HLO_SPEC = """HloModule spec

ENTRY main {{
  x = f32[4,6] parameter(0)
  ROOT y = {out}[4,6] exponential(x)
}}
"""
HLO_REL = "inputs:\n  x: [x@0, x@1]\n"


def test_hlo_types_are_the_canonical_names(tmp_path, capsys):
    code, out = _verify(tmp_path, capsys, spec=HLO_SPEC.format(out="f32"), impl=HLO_SPEC.format(out="f32"),
                        rel=HLO_REL, frontend="hlo", ext="hlo", extra=["--world-size", "2"])
    assert code == 0, out
    _refused(_verify(tmp_path, capsys, spec=HLO_SPEC.format(out="f16"), impl=HLO_SPEC.format(out="f16"),
                     rel=HLO_REL, frontend="hlo", ext="hlo", extra=["--world-size", "2"]),
             "spec.hlo", "declared dtype float16", "gives float32")


def test_hlo_concatenate_of_two_dtypes(tmp_path, capsys):
    text = """HloModule spec

ENTRY main {
  x = f32[4,6] parameter(0)
  h = f16[4,6] parameter(1)
  ROOT y = f32[8,6] concatenate(x, h), dimensions={0}
}
"""
    _refused(_verify(tmp_path, capsys, spec=text, impl=text, rel=HLO_REL + "  h: [h@0, h@1]\n",
                     frontend="hlo", ext="hlo", extra=["--world-size", "2"]), "spec.hlo", "float32 and float16")


def test_pt2_unknown_dtype_code(tmp_path, capsys):
    doc = {"graph_module": {
        "graph": {"tensor_values": {"x": {"sizes": [{"as_int": 4}], "dtype": 99}}, "nodes": []},
        "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                      "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "x"}}}}]}}}
    with zipfile.ZipFile(tmp_path / "m.pt2", "w") as z:
        z.writestr("m/models/model.json", json.dumps(doc))
    (tmp_path / "relation.yaml").write_text(HLO_REL)
    _refused(_cli(["verify", "--frontend", "fx", "--spec", tmp_path / "m.pt2", "--impl", tmp_path / "m.pt2",
                   "--world-size", "2", "--relation", tmp_path / "relation.yaml"], capsys),
             "m.pt2", "'x'", "unknown dtype code 99")


def test_frontends_write_known_dtypes():
    from graphguard.frontends.fx.convert import DTYPES as FX
    from graphguard.frontends.fx.load import SCALAR_TYPES
    from graphguard.frontends.hlo.module import DTYPES as HLO
    assert set(FX.values()) <= DTYPES and set(SCALAR_TYPES.values()) <= DTYPES and set(HLO.values()) <= DTYPES
    assert HLO["f32"] == FX["torch.float32"] == "float32" and HLO["pred"] == FX["torch.bool"] == "bool"
