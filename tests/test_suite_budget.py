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


def test_the_command_line_in_process_answers_as_a_real_process(tmp_path):
    """run_cli runs graphguard in the test's process; a verdict (exit 0), a bug (exit 1, its report) and bad input
    (exit 2, one line) read the same from a real process."""
    from conftest import EXAMPLES, files, run_cli
    cases = [["verify", *sum((["--" + k, str(v)] for k, v in zip(("spec", "impl", "relation"),
                                                                  files(EXAMPLES / d))), [])]
             for d in ("paper-fig1", "bugs/paper-fig1-missing-reduction")]
    cases.append(["verify", "--spec", str(tmp_path / "missing.gg.json"), "--impl", str(tmp_path / "x.gg.json"),
                  "--relation", str(tmp_path / "r.yaml")])
    for argv, rc in zip(cases, (0, 1, 2)):
        inner, real = run_cli(*argv), run_cli(*argv, process=True)
        assert inner.returncode == real.returncode == rc, (argv, inner.stderr, real.stderr)
        same = lambda t: re.sub(r"\d+\.\d+ s\b", "<t> s", t)  # (timings differ)
        assert same(inner.stdout) == same(real.stdout) and same(inner.stderr) == same(real.stderr), argv
