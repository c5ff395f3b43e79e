"""Bad input never gives a traceback: ``graphguard verify`` exits 2 with ONE line naming the file.

The contract (README, ``graphguard/cli.py``): for a malformed graph, relation or command line the CLI exits
with code 2 and prints exactly one line on stderr, ``graphguard: error: ...``, naming the file (and the
node/op, or FILE:LINE:COL in a relation file); "Traceback" appears in neither stdout nor stderr.

Every case is a small variant of ``examples/paper-fig1`` written into its own temporary directory, and the
CLI is run as a real subprocess (``python -m graphguard verify ...``) so that exit codes and stderr are the
real ones. Starting the CLI costs about a second (imports), so the first test that needs a result builds
and runs all selected cases at once on a few workers; each test then checks its own case.
"""
from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIG1 = ROOT / "examples" / "paper-fig1"

_SPEC = json.loads((FIG1 / "spec.gg.json").read_text())
_IMPL = json.loads((FIG1 / "impl.gg.json").read_text())
_REL = (FIG1 / "relation.yaml").read_text()
REL_LINES = ["inputs:", "  A: concat(A@0, A@1, dim=1)", "  B: concat(B@0, B@1, dim=0)",
             "  E: concat(E@0, E@1, dim=0)"]
assert _REL.splitlines() == REL_LINES, "tests that point at a LINE:COL rely on the example's layout"


# -- the helper: one clear error line ---------------------------------------------------------------------

@dataclass
class Outcome:
    argv: list[str]
    returncode: int
    stdout: str
    stderr: str

    def show(self) -> str:
        return (f"\n$ graphguard {' '.join(self.argv)}\nexit code {self.returncode}\n"
                f"--- stdout ---\n{self.stdout}--- stderr ---\n{self.stderr}")


def assert_one_error_line(out: Outcome, *needles: str) -> str:
    """Exit code 2, no traceback, exactly one stderr line ``graphguard: error: ...`` containing every needle.

    Returns the line."""
    assert "Traceback" not in out.stdout + out.stderr, "a Python traceback was printed" + out.show()
    assert out.returncode == 2, f"exit code {out.returncode}, expected 2 (bad input)" + out.show()
    lines = out.stderr.splitlines()
    assert len(lines) == 1, f"expected exactly one line on stderr, got {len(lines)}" + out.show()
    line = lines[0]
    assert line.startswith("graphguard: error:"), "the line must start with 'graphguard: error:'" + out.show()
    for n in needles:
        assert n in line, f"the error line does not mention {n!r}" + out.show()
    return line


# -- building the inputs ----------------------------------------------------------------------------------

def spec_doc() -> dict:
    return copy.deepcopy(_SPEC)


def impl_doc() -> dict:
    return copy.deepcopy(_IMPL)


def node(doc: dict, name: str) -> dict:
    return next(n for n in doc["nodes"] if n["name"] == name)


def inp(doc: dict, name: str) -> dict:
    return next(t for t in doc["inputs"] if t["name"] == name)


def lines(*ls: str) -> str:
    return "\n".join(ls) + "\n"


@dataclass
class Files:
    """The three inputs of one case (the example's unless the case replaced one) and extra options."""
    spec: Path
    impl: Path
    rel: Path
    extra: list[str] = field(default_factory=list)

    def argv(self) -> list[str]:
        return ["verify", "--spec", str(self.spec), "--impl", str(self.impl), "--relation", str(self.rel),
                *self.extra]


def write(d: Path, spec: dict | str | None = None, impl: dict | str | None = None,
          rel: str | None = None) -> Files:
    """Write a case into ``d``: a dict is dumped as JSON, a str written verbatim, None means the example's."""
    def put(name: str, v, default) -> Path:
        v = default if v is None else v
        p = d / name
        p.write_text(v if isinstance(v, str) else json.dumps(v, indent=1) + "\n")
        return p
    return Files(put("spec.gg.json", spec, _SPEC), put("impl.gg.json", impl, _IMPL),
                 put("relation.yaml", rel, _REL))


# -- the cases --------------------------------------------------------------------------------------------
# A case writes its inputs into a fresh directory and returns (argv after "graphguard", the strings the error
# line must contain: the file, the node/op, FILE:LINE:COL, ...).

Case = Callable[[Path], "tuple[list[str], list[str]]"]
CASES: dict[str, Case] = {}


def case(name: str):
    def deco(fn: Case) -> Case:
        assert name not in CASES, name
        CASES[name] = fn
        return fn
    return deco


# graph files

@case("graph-not-json")
def _(d):
    f = write(d, spec="this is not JSON\n")
    return f.argv(), [str(f.spec), "JSON"]


@case("graph-truncated-json")
def _(d):
    text = json.dumps(_IMPL, indent=1)
    f = write(d, impl=text[: len(text) // 2])
    return f.argv(), [str(f.impl), "JSON"]


@case("graph-not-utf8")
def _(d):
    f = write(d)
    f.spec.write_bytes(b"PK\x03\x04\xff\xfe binary, e.g. a .pt file given to the ir frontend")
    return f.argv(), [str(f.spec)]


@case("graph-json-list")
def _(d):
    f = write(d, spec="[1, 2, 3]\n")
    return f.argv(), [str(f.spec), "JSON object"]


@case("graph-no-version")
def _(d):
    doc = spec_doc()
    del doc["graphguard"]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), '"graphguard"']


@case("graph-no-nodes")
def _(d):
    doc = impl_doc()
    del doc["nodes"]
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "'nodes'"]


@case("graph-unknown-op")
def _(d):
    doc = spec_doc()
    node(doc, "matmul")["op"] = "core.frobnicate"
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "unknown operator 'core.frobnicate'", "node 'matmul'"]


@case("graph-wrong-arity")
def _(d):
    doc = spec_doc()
    node(doc, "matmul")["inputs"] = ["A"]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "node 'matmul'", "core.matmul", "got 1"]


@case("graph-shape-mismatch")
def _(d):
    doc = spec_doc()
    inp(doc, "B")["shape"] = [4, 4]  # A is 8x8: matmul inner dims 8 vs 4
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "node 'matmul'", "core.matmul"]


@case("graph-cycle")
def _(d):
    doc = spec_doc()
    node(doc, "matmul")["inputs"] = ["A", "F"]  # matmul needs F from sub, sub needs C from matmul
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "cycle", "matmul", "sub"]


@case("graph-dangling-tensor")
def _(d):
    doc = impl_doc()
    node(doc, "sub@1")["inputs"] = ["D@1", "Z@1"]
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "'Z@1'", "node 'sub@1'"]


@case("graph-tensor-defined-twice")
def _(d):
    doc = spec_doc()
    node(doc, "sub")["outputs"] = ["C"]  # C is matmul's output too
    doc["outputs"] = ["C"]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "'C'", "twice"]


@case("graph-output-not-defined")
def _(d):
    doc = spec_doc()
    doc["outputs"] = ["F", "G"]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "'G'"]


@case("graph-rank-mismatch-collective-group")
def _(d):
    doc = impl_doc()
    node(doc, "reduce_scatter")["attrs"]["group"] = [1, 0]  # its inputs are C@0, C@1
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "node 'reduce_scatter'", "core.reduce_scatter", "rank mismatch"]


@case("graph-rank-mismatch-non-collective")
def _(d):
    doc = impl_doc()
    node(doc, "sub@0")["inputs"] = ["D@0", "E@1"]
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "node 'sub@0'", "core.sub", "rank mismatch"]


@case("graph-tensor-without-rank")
def _(d):
    doc = impl_doc()
    node(doc, "matmul@0")["outputs"] = ["C"]
    node(doc, "reduce_scatter")["inputs"] = ["C", "C@1"]
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "'C'", "NAME@RANK"]


@case("graph-declared-shape")
def _(d):
    doc = spec_doc()
    node(doc, "matmul")["outputs"] = [{"name": "C", "shape": [8, 5]}]  # inferred: [8, 4]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "node 'matmul'", "'C'", "declared shape"]


@case("graph-bad-attribute-type")
def _(d):
    doc = impl_doc()
    node(doc, "reduce_scatter")["attrs"]["dim"] = "x"
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "node 'reduce_scatter'", "dim"]


@case("graph-attribute-out-of-range")
def _(d):
    doc = impl_doc()
    node(doc, "reduce_scatter")["attrs"]["dim"] = 5  # its inputs have rank 2
    f = write(d, impl=doc)
    return f.argv(), [str(f.impl), "node 'reduce_scatter'", "dim"]


@case("graph-spec-as-impl")
def _(d):
    f = write(d)
    f.impl = f.spec  # a sequential graph where the distributed one is expected
    return f.argv(), [str(f.spec), "distributed"]


@case("graph-nonexistent-file")
def _(d):
    f = write(d)
    f.spec = d / "no-such-spec.gg.json"
    return f.argv(), [str(f.spec)]


# relation files

@case("relation-invalid-yaml")
def _(d):
    f = write(d, rel=lines(REL_LINES[0], REL_LINES[1], REL_LINES[2][1:], REL_LINES[3]))  # B: under-indented
    return f.argv(), [f"{f.rel}:3:", "YAML"]


@case("relation-not-utf8")
def _(d):
    f = write(d)
    f.rel.write_bytes(b"inputs:\n  A: \xff\xfe\n")
    return f.argv(), [str(f.rel)]


# Bad expression syntax: the message must point at FILE:LINE:COL of the offending spot.
@case("relation-syntax-line2")
def _(d):
    bad = "  A: concat(A@0, A@1, dim=)"
    f = write(d, rel=lines(REL_LINES[0], bad, *REL_LINES[2:]))
    return f.argv(), [f"{f.rel}:2:{bad.index(')') + 1}:"]  # the ")" where a value was due


@case("relation-syntax-unclosed-line4")
def _(d):
    bad = "  E: concat(E@0, E@1, dim=0"
    f = write(d, rel=lines(*REL_LINES[:3], bad))
    return f.argv(), [f"{f.rel}:4:{len(bad) + 1}:", "end"]  # just past the expression: ")" is missing


@case("relation-unknown-op")
def _(d):
    f = write(d, rel=lines(*REL_LINES[:2], "  B: frobnicate(B@0, B@1, dim=0)", REL_LINES[3]))
    return f.argv(), [f"{f.rel}:3:", "frobnicate"]


@case("relation-not-a-spec-input")
def _(d):
    f = write(d, rel=_REL + "  C: concat(C@0, C@1, dim=0)\n")  # C is a G_s tensor, but not an input
    return f.argv(), [str(f.rel), "'C'", "input"]


@case("relation-spec-input-unmapped")
def _(d):
    f = write(d, rel=lines(*REL_LINES[:3]))  # no E
    return f.argv(), [str(f.rel), "'E'"]


@case("relation-tensor-not-in-impl")
def _(d):
    f = write(d, rel=_REL.replace("concat(A@0, A@1, dim=1)", "concat(A@0, A@7, dim=1)"))
    return f.argv(), [str(f.rel), "'A@7'", "implementation"]


@case("relation-shape-mismatch")
def _(d):
    f = write(d, rel=_REL.replace("concat(A@0, A@1, dim=1)", "concat(A@0, A@1, dim=0)"))  # [16, 4] vs [8, 8]
    return f.argv(), [str(f.rel), "relation for A", "shape"]


@case("relation-unknown-section")
def _(d):
    f = write(d, rel=_REL + "outputs:\n  F: concat(F@0, F@1, dim=0)\n")
    return f.argv(), [f"{f.rel}:5:1:", "'outputs'"]


@case("relation-bad-symbol")
def _(d):
    f = write(d, rel=_REL + 'symbols:\n  K: {min: "a"}\n')
    return f.argv(), [f"{f.rel}:6:", "'K'"]


@case("relation-bad-symbol-empty-range")
def _(d):
    f = write(d, rel=_REL + "symbols:\n  K: {min: 8, max: 2}\n")  # no value satisfies it
    return f.argv(), [f"{f.rel}:6:", "'K'"]


@case("relation-bad-symbol-multiple-of-zero")
def _(d):
    f = write(d, rel=_REL + "symbols:\n  K: {min: 2, multiple_of: 0}\n")
    return f.argv(), [f"{f.rel}:6:", "'K'", "multiple_of"]


# usage

@case("usage-unknown-frontend")
def _(d):
    f = write(d)
    f.extra = ["--frontend", "nope"]
    return f.argv(), ["frontend 'nope'"]


@case("usage-missing-option")
def _(d):
    f = write(d)
    return ["verify", "--spec", str(f.spec), "--impl", str(f.impl)], ["--relation"]


@case("usage-negative-budget")
def _(d):
    f = write(d)
    f.extra = ["--max-iterations", "-1"]
    return f.argv(), ["--max-iterations"]


@case("usage-unwritable-json")
def _(d):
    f = write(d)
    f.extra = ["--json", str(d / "no" / "such" / "dir" / "out.json")]
    return f.argv(), ["out.json", "cannot write"]


@case("relation-pattern-variable")
def _(d):
    f = write(d, rel=lines(*REL_LINES[:3], "  E: concat(?e, E@1, dim=0)"))
    return f.argv(), [f"{f.rel}:4:6:", "?e"]


@case("graph-dtype-not-a-string")
def _(d):
    doc = spec_doc()
    inp(doc, "A")["dtype"] = ["float32"]
    f = write(d, spec=doc)
    return f.argv(), [str(f.spec), "dtype"]


# -- running the cases ------------------------------------------------------------------------------------

def run_cli(argv: list[str], cwd: Path) -> Outcome:
    try:
        p = subprocess.run([sys.executable, "-m", "graphguard", *argv], capture_output=True, text=True,
                           cwd=cwd, timeout=120)
    except subprocess.TimeoutExpired as e:
        return Outcome(argv, -1, str(e.stdout or ""), f"(timed out after {e.timeout} s)\n{e.stderr or ''}")
    return Outcome(argv, p.returncode, p.stdout, p.stderr)


@pytest.fixture(scope="module")
def outcomes(request, tmp_path_factory) -> dict[str, tuple[Outcome, list[str]]]:
    """Build and run every case selected in this session, concurrently: name -> (outcome, needles)."""
    params = [it.callspec.params for it in request.session.items
              if it.module is request.module and hasattr(it, "callspec")]
    wanted = dict.fromkeys(p["name"] for p in params if "name" in p)
    built = {}
    for name in wanted:
        d = tmp_path_factory.mktemp(name)
        argv, needles = CASES[name](d)
        built[name] = (argv, needles, d)
    with ThreadPoolExecutor(max(2, (os.cpu_count() or 1) + 1)) as pool:
        futures = {n: pool.submit(run_cli, argv, d) for n, (argv, _, d) in built.items()}
        return {n: (futures[n].result(), built[n][1]) for n in built}


def check(outcomes, name: str) -> str:
    out, needles = outcomes[name]
    return assert_one_error_line(out, *needles)


def test_every_case_is_tested():
    tested = set()
    for fn in [v for k, v in globals().items() if k.startswith("test_") and callable(v)]:
        for m in getattr(fn, "pytestmark", []):
            if m.name == "parametrize" and m.args[0] == "name":
                tested |= set(m.args[1])
    assert tested == set(CASES), set(CASES) ^ tested


def test_unmodified_example_is_valid_input(tmp_path):
    """Guard: the base files load cleanly, so each error below comes from its case's mutation."""
    from graphguard.api import load_inputs
    f = write(tmp_path)
    g_s, g_d, rel, _ = load_inputs(str(f.spec), str(f.impl), str(f.rel))
    assert set(rel.inputs) == set(g_s.inputs) == {"A", "B", "E"} and g_d.world_size == 2


# graph files

@pytest.mark.parametrize("name", ["graph-not-json", "graph-truncated-json", "graph-not-utf8"])
def test_graph_not_json(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-json-list"])
def test_graph_json_not_an_object(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-no-version"])
def test_graph_missing_version_key(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-no-nodes"])
def test_graph_missing_nodes(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-unknown-op"])
def test_graph_unknown_operator(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-wrong-arity"])
def test_graph_wrong_arity(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-shape-mismatch"])
def test_graph_shape_mismatch(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-cycle"])
def test_graph_cycle(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-dangling-tensor"])
def test_graph_dangling_tensor(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-tensor-defined-twice"])
def test_graph_tensor_defined_twice(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-output-not-defined"])
def test_graph_output_not_defined(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-rank-mismatch-collective-group", "graph-rank-mismatch-non-collective"])
def test_graph_rank_mismatch(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-tensor-without-rank"])
def test_graph_tensor_without_rank(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-declared-shape"])
def test_graph_declared_shape_disagrees(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-bad-attribute-type", "graph-attribute-out-of-range"])
def test_graph_bad_attribute_type(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-spec-as-impl"])
def test_graph_sequential_where_distributed_expected(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-nonexistent-file"])
def test_nonexistent_file(outcomes, name):
    check(outcomes, name)


# relation files

@pytest.mark.parametrize("name", ["relation-invalid-yaml", "relation-not-utf8"])
def test_relation_invalid_yaml(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-syntax-line2", "relation-syntax-unclosed-line4"])
def test_relation_expression_syntax(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-unknown-op"])
def test_relation_unknown_operator(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-not-a-spec-input"])
def test_relation_for_tensor_not_a_spec_input(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-spec-input-unmapped"])
def test_relation_missing_for_spec_input(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-tensor-not-in-impl"])
def test_relation_tensor_not_in_impl(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-shape-mismatch"])
def test_relation_shape_mismatch(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-unknown-section"])
def test_relation_unknown_section(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-bad-symbol", "relation-bad-symbol-empty-range",
                                  "relation-bad-symbol-multiple-of-zero"])
def test_relation_bad_symbol_spec(outcomes, name):
    check(outcomes, name)


# usage

@pytest.mark.parametrize("name", ["usage-unknown-frontend"])
def test_usage_unknown_frontend(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["usage-missing-option"])
def test_usage_missing_required_option(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["usage-negative-budget", "usage-unwritable-json"])
def test_usage_bad_option_values(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["relation-pattern-variable"])
def test_relation_pattern_variable(outcomes, name):
    check(outcomes, name)


@pytest.mark.parametrize("name", ["graph-dtype-not-a-string"])
def test_graph_dtype_not_a_string(outcomes, name):
    check(outcomes, name)
