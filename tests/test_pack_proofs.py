"""Each built-in lemma pack says beside itself what its lemmas prove and what they must not (``proofs.py`` in the
pack's package: ``SHAPES``, ``PROVES`` and ``MUST_NOT_PROVE``, pairs of terms or (lhs, rhs, shapes, dtypes); optional
``DTYPES`` and ``MUST_NOT_SHAPES``): one parametrised test runs them all."""
from __future__ import annotations

import importlib
from importlib.metadata import entry_points

import pytest

from graphguard.testing import proves


def _packs():
    out = []
    for ep in sorted(entry_points(group="graphguard.lemma_packs"), key=lambda e: e.name):
        if not ep.value.startswith("lemma_packs."):
            continue  # (graphguard's own packs)
        try:
            mod = importlib.import_module(f"{ep.value}.proofs")
        except ModuleNotFoundError as e:
            if e.name != f"{ep.value}.proofs":
                raise
            continue
        out.append((ep.name, mod))
    return out


PACKS = _packs()
def _case(mod, case, holds):
    """(lhs, rhs, shapes, dtypes): a case of two takes its module's SHAPES (MUST_NOT_SHAPES for a must-not) and
    DTYPES; a case of four its own."""
    if len(case) == 4:
        return case
    lhs, rhs = case
    shapes = mod.SHAPES if holds else getattr(mod, "MUST_NOT_SHAPES", mod.SHAPES)
    return lhs, rhs, shapes, getattr(mod, "DTYPES", None)


CASES = [pytest.param(*_case(mod, c, True), True, id=f"{name}-proves-{i}") for name, mod in PACKS
         for i, c in enumerate(mod.PROVES)]
CASES += [pytest.param(*_case(mod, c, False), False, id=f"{name}-must-not-{i}") for name, mod in PACKS
          for i, c in enumerate(mod.MUST_NOT_PROVE)]


def test_packs_state_their_proofs():
    assert {"apex", "aten", "aten-hlo", "aten-neuronx", "core", "hlo-ops", "neuronx", "onnx-aten", "onnx-ops", "vllm"} <= {
        name for name, _ in PACKS}
    assert all(mod.PROVES and mod.MUST_NOT_PROVE for _, mod in PACKS)


@pytest.mark.parametrize("lhs,rhs,shapes,dtypes,holds", CASES)
def test_pack_proof(lhs, rhs, shapes, dtypes, holds):
    assert proves(lhs, rhs, shapes, dtypes=dtypes) == holds
