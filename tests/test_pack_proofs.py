"""Each built-in lemma pack says beside itself what its lemmas prove and what they must not (``proofs.py`` in the
pack's package: ``SHAPES``, ``PROVES`` and ``MUST_NOT_PROVE``, pairs of terms; optional ``DTYPES`` and
``MUST_NOT_SHAPES``): one parametrised test runs them all."""
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
CASES = [pytest.param(mod, lhs, rhs, True, id=f"{name}-proves-{i}") for name, mod in PACKS
         for i, (lhs, rhs) in enumerate(mod.PROVES)]
CASES += [pytest.param(mod, lhs, rhs, False, id=f"{name}-must-not-{i}") for name, mod in PACKS
          for i, (lhs, rhs) in enumerate(mod.MUST_NOT_PROVE)]


def test_packs_state_their_proofs():
    assert {"apex", "aten", "core", "vllm"} <= {name for name, _ in PACKS}
    assert all(mod.PROVES and mod.MUST_NOT_PROVE for _, mod in PACKS)


@pytest.mark.parametrize("mod,lhs,rhs,holds", CASES)
def test_pack_proof(mod, lhs, rhs, holds):
    shapes = mod.SHAPES if holds else getattr(mod, "MUST_NOT_SHAPES", mod.SHAPES)
    assert proves(lhs, rhs, shapes, dtypes=getattr(mod, "DTYPES", None)) == holds
