"""The ONNX examples end to end: torch.onnx.export capture (spec and every rank on a fake process group, the
functional all-reduce as com.microsoft AllReduce), then verification: onnx-mlp-tp refines (with replay);
bugs/onnx-mlp-missing-allreduce is flagged at the Add where the partial sums meet the replicated bias."""
from __future__ import annotations

import pytest
from conftest import EXAMPLES, run_cli

pytest.importorskip("onnx")
pytest.importorskip("onnxscript")


def capture(model, out, **kw):
    from graphguard.frontends.onnx.capture import capture_model_file
    return capture_model_file(model, out, 2, **kw)


def verify(files, *extra):
    return run_cli("verify", "--frontend", "onnx", "--spec", files["spec"], "--impl", *files["impl"].split(),
                   "--relation", files["relation"], *extra)


def verify_here(plugins, files, **kw):
    import graphguard
    return graphguard.verify(str(files["spec"]), files["impl"].split(), str(files["relation"]), frontend="onnx",
                             plugins=plugins, **kw)


def test_onnx_mlp_tp_refines(tmp_path):
    files = capture(EXAMPLES / "onnx-mlp-tp" / "model.py", tmp_path)
    import onnx
    ops = [n.op_type for n in onnx.load(files["impl"].split()[0]).graph.node]
    assert "AllReduce" in ops and "MatMul" in ops
    r = verify(files, "--replay")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "out0 = out0@0" in r.stdout and "replay: ok" in r.stdout and "expected relations: all 2 found" in r.stdout


def test_onnx_block_tp_refines(tmp_path, plugins):
    """A transformer block (attention + MLP) at TP 2: heads split across ranks, two all-reduces."""
    files = capture(EXAMPLES / "onnx-block-tp" / "model.py", tmp_path)
    r = verify_here(plugins, files, replay=True)
    assert r.exit_code == 0, r.render()
    assert "out0 = out0@1" in r.render() and "replay: ok" in r.render()


def test_onnx_block_tp_at_opset_17_refines(tmp_path, plugins):
    """Opset 17: no Gelu operator; the exporter writes it with Erf, Mul, Div and Add of constants."""
    import onnx
    files = capture(EXAMPLES / "onnx-block-tp" / "model.py", tmp_path, opset=17)
    m = onnx.load(files["spec"])
    assert [o.version for o in m.opset_import if o.domain == ""] == [17]
    assert "Erf" in {n.op_type for n in m.graph.node}
    r = verify_here(plugins, files)
    assert r.exit_code == 0, r.render()


def test_onnx_missing_allreduce_is_flagged(tmp_path, plugins):
    files = capture(EXAMPLES / "bugs" / "onnx-mlp-missing-allreduce" / "model.py", tmp_path)
    r = verify_here(plugins, files)
    assert r.exit_code == 1, r.render()
    assert r.failure.op == "onnx.Add" and r.failure.node == "add", r.render()
    assert "linear_1 = sum(linear_1@0, linear_1@1)" in r.render()


def test_backward_capture_is_refused(tmp_path):
    from graphguard.errors import InputError
    from graphguard.frontends.onnx.capture import capture_model_file
    with pytest.raises(InputError, match="forward programs only"):
        capture_model_file(EXAMPLES / "onnx-mlp-tp" / "model.py", tmp_path, 2, backward=True)
