"""The lemma fuzzer as a gate across seeds: what other random streams than the suite's found, each fixed where it
lives, and each with a case that must not prove.

Found by ``graphguard lemmas check --seed N`` (N = 1..30; the suite runs seed 0): a sum of booleans times a
factor (their sum is their "or": lemma 409 asks for numbers), a partial sum divided by 0 (``(a + b) / 0`` is NaN where ``a / 0 + b / 0`` is
inf), an index that is a boolean mask (it selects, it does not gather rows), casts of NaN and out-of-range
floats to integers (NumPy's result differed between arrays), and rules whose right side computes a term the
rule's ``when`` clause asks for, drawn where that term is undefined (an integer division by zero outside the
slice), a softmax drawn on integers (no torch kernel; NumPy rounds float16 by the array's shape) and a
broadcast read as a reshape where it also widens a unit dim, and an empty matmul's row count."""
from __future__ import annotations

import numpy as np
import pytest

from graphguard.engine.fuzz import fuzz_rule
from graphguard.testing import proves
from graphguard.ir.ops import float_to_int

SH = {"A": [3, 4], "B": [3, 4], "P": [3, 4], "Q": [3, 4], "X": [4, 3, 2], "Y": [4, 1, 2], "M": [4, 3]}


def _family_rules(plugins, name: str) -> list:
    """The rules of the derived lemma named ``name`` (a family's member: ``rowwise-of-concats[aten._softmax]``)."""
    from graphguard.engine.families import derive
    from graphguard.engine.lemma import build_rules
    (lemma,) = [lm for lm in derive(plugins.registry) if lm.name == name]
    return build_rules(lemma, plugins.registry)


def _rule(plugins, label: str):
    """The one loaded rule of lemma ``pack:number``."""
    (rule,) = [r for r in plugins.lemmas if r.lemma.label == label]
    return rule


def test_a_factor_of_a_boolean_sum_does_not_distribute():
    """Lemma 409 holds for numbers, not booleans: 2 * (a or b) is 2 where 2 * a + 2 * b is 4 (its condition
    reads both summands' dtypes)."""
    lhs = "aten.mul.Scalar(sum(A, B), other=2)"
    rhs = "sum(aten.mul.Scalar(A, other=2), aten.mul.Scalar(B, other=2))"
    assert proves(lhs, rhs, SH)
    assert not proves(lhs, rhs, SH, dtypes={"A": "bool", "B": "bool"})


def test_a_partial_sum_divided_by_zero_does_not_distribute():
    """``div.Scalar`` declares its divisor (``OpDef.divisor``): linear only where it is not 0."""
    assert proves("aten.div.Scalar(sum(P, Q), other=4)",
                  "sum(aten.div.Scalar(P, other=4), aten.div.Scalar(Q, other=4))", SH)
    assert not proves("aten.div.Scalar(sum(P, Q), other=0)",
                      "sum(aten.div.Scalar(P, other=0), aten.div.Scalar(Q, other=0))", SH)


def test_a_boolean_mask_index_is_not_a_row_gather():
    """Lemma 1403 gathers rows by integer indices; a boolean mask indexes the masked entries instead."""
    lhs = "aten.index.Tensor(concat(X, Y, dim=1), M, absent=[])"
    rhs = "concat(aten.index.Tensor(X, M, absent=[]), aten.index.Tensor(Y, M, absent=[]), dim=2)"
    assert proves(lhs, rhs, SH, dtypes={"M": "int64"}, ranges={"M": (0, 4)})
    assert not proves(lhs, rhs, {**SH, "M": [4, 4]}, dtypes={"M": "bool"})


def test_casts_to_integers_are_one_function_in_every_dialect(plugins):
    """NaN, infinities and out-of-range values cast to each integer type the same way by ATen's ``_to_copy``,
    HLO's ``convert`` and ONNX's ``Cast`` (truncated, saturated, NaN to 0), whatever array they sit in."""
    x = np.array([np.nan, np.inf, -np.inf, 1e30, -1e30, 3.7, -3.7, 300.0, -0.5], dtype=np.float32)
    reg = plugins.registry
    for dt in ("int8", "uint8", "int32", "uint32", "int64"):
        want = float_to_int(x, dt)
        info = np.iinfo(dt)
        assert list(want[:5]) == [0, info.max, info.min, info.max, info.min]
        for name, attrs in (("aten._to_copy", {"dtype": dt}), ("hlo.convert", {"dtype": dt}),
                            ("onnx.Cast", {"dtype": dt})):
            got = np.asarray(reg.get(name).ref([x], attrs))
            assert got.dtype == np.dtype(dt) and np.array_equal(got, want), (name, dt, got)
        # the same values inside a longer array (another NumPy loop) cast alike
        assert np.array_equal(float_to_int(np.tile(x, 9), dt)[:x.size], want)


@pytest.mark.parametrize("seed", range(4))
def test_a_rule_is_fuzzed_only_where_its_when_term_is_defined(plugins, seed):
    """Family 1211 for integer division fires only beside the division of the whole inputs; drawn where that
    division meets a 0 outside the slice, the instance is no instance (it was reported as the right side
    failing)."""
    (rule,) = _family_rules(plugins, "elementwise-of-slices[aten.div.Tensor_mode]")
    assert rule.when is not None
    assert fuzz_rule(rule, plugins.registry, seed=seed).ok


def test_softmax_of_integers_is_no_instance(plugins):
    """Seed 20 drew family 1207 (a row-wise op of concatenations) for ``_softmax`` of int8 tensors: torch has no
    such kernel, and NumPy computed the exponentials in float16, whose rounding depends on the array's shape,
    so the two sides differed by 1e-3. The dtype rule refuses non-floating inputs (no instance, and no graph)."""
    from graphguard.ir.ops import ShapeError
    reg = plugins.registry
    for op in ("aten._softmax", "aten._log_softmax"):
        assert reg.get(op).dtype(["bfloat16"], {"half_to_float": True}) == "float32"
        assert reg.get(op).dtype(["float32"], {"half_to_float": False}) == "float32"
        for dt in ("int8", "int64", "bool"):
            with pytest.raises(ShapeError):
                reg.get(op).dtype([dt], {"half_to_float": True})
        for rule in _family_rules(plugins, f"rowwise-of-concats[{op}]"):
            assert fuzz_rule(rule, reg, seed=20).ok


def test_a_broadcast_that_widens_a_unit_dim_is_not_a_reshape(plugins):
    """Seed 23: lemma hlo-ops:885 read ``broadcast([2, 1] -> [2, 2, 1], dimensions=(0, 1))`` as a reshape, but it
    copies the column (the reshape is ill-formed there); it now asks the other dims to be the input's."""
    assert proves("hlo.broadcast(V, shape=[2, 1, 3], dimensions=[0, 2])", "reshape(V, shape=[2, 1, 3])", {"V": [2, 3]})
    assert fuzz_rule(_rule(plugins, "hlo-ops:885"), plugins.registry, seed=23).ok


def test_rows_of_an_empty_matmul_are_its_leading_dims(plugins):
    """Seed 26: lemma onnx-aten:2130 (MatMul = mm of the rows) took any row count for a [3, 0] input (every
    count has numel 0), then reshaped [6, 4] to [3, 4]; the rows are now the leading dims' product."""
    assert fuzz_rule(_rule(plugins, "onnx-aten:2130"), plugins.registry, seed=26).ok
    assert proves("onnx.MatMul(X, W)", "reshape(aten.mm(reshape(X, shape=[12, 2]), W), shape=[4, 3, 5])",
                  {"X": [4, 3, 2], "W": [2, 5]})
