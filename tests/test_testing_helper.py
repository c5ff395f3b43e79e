"""graphguard.testing.assert_refines: graphguard in a user's own pytest suite."""
from __future__ import annotations

import pytest
import torch

from conftest import EXAMPLES, load_module
from graphguard.testing import assert_refines


def test_a_model_file_that_refines_returns_the_certificate():
    r = assert_refines(EXAMPLES / "mlp-tp" / "model.py", world_size=2)
    assert r.verdict == "refines" and "out0 = out0@0" in r.r_o_lines()


def test_a_bug_fails_with_the_report_as_message():
    with pytest.raises(AssertionError) as e:
        assert_refines(EXAMPLES / "bugs" / "missing-allreduce" / "model.py", world_size=2)
    msg = str(e.value)
    assert "does not refine the sequential one at world size 2" in msg
    assert "stopped at G_s operator aten.addmm" in msg and "module fc2" in msg and "hint:" in msg


def test_an_imported_module_or_plain_functions():
    mod = load_module(EXAMPLES / "mlp-tp" / "model.py")
    assert assert_refines(mod, world_size=2).verdict == "refines"

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class HalfEach(torch.nn.Module):  # each rank doubles its rows: the rows of the result, split
        def forward(self, x):
            return x * 2
    r = assert_refines(spec=Scale, impl=lambda rank, world: HalfEach(),
                       inputs=lambda rank, world: (torch.ones(4 if rank is None else 2, 3),), world_size=2,
                       relation={"inputs": {"x": "concat(x@0, x@1, dim=0)"}})
    assert r.r_o_lines() == ["out0 = concat(out0@0, out0@1, dim=0)"]
    with pytest.raises(TypeError, match="needs a model file"):
        assert_refines(spec=Scale)
