"""The default suite's time budget (issue 42 item 6): each whole-model test moved to -m slow by
tests/conftest.py's BUDGET_SLOW names the default test that keeps its construct verified; those exist, and the
moved ones are deselected by default."""
from __future__ import annotations

import re
from pathlib import Path

from conftest import BUDGET_SLOW

TESTS = Path(__file__).resolve().parent


def test_each_moved_test_names_default_tests_that_exist():
    for moved, keeper in BUDGET_SLOW.items():
        path, name = moved.split("::", 1)
        assert re.search(rf"^def {re.escape(name.split('[')[0])}\(", (TESTS / path).read_text(), re.M), moved
        named = re.findall(r"tests/(\w+\.py)::(\w+)", keeper)
        assert named, (moved, keeper)
        for f, test in named:
            assert re.search(rf"^def {test}\(", (TESTS / f).read_text(), re.M), (moved, f, test)
            assert f"{f}::{test}" not in BUDGET_SLOW, (moved, "its keeper is moved too")
