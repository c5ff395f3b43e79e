"""The independent checker (graphguard/check.py): outside the engine's import closure, on by default, a REFINES
whose R_o it does not confirm numerically becomes inconclusive (exit 3) naming the line; --check off as before."""
from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import graphguard
import graphguard.api
from graphguard.cli import main as cli_main
from graphguard.ir.builder import GraphBuilder
from graphguard.ir.expr import App, Leaf
from graphguard.ir.relation import parse_relation_text

from conftest import EXAMPLES, files, run_cli

ROOT = Path(graphguard.__file__).resolve().parent
FORBIDDEN = {f"graphguard.engine.{m}" for m in ("infer", "memo", "relayout", "egraph", "lemma", "families")}
FIG1 = EXAMPLES / "paper-fig1"


# -- (a) the import closure -------------------------------------------------------------------------

def _module_file(mod: str) -> Path | None:
    rel = Path(*mod.split(".")[1:])
    for p in (ROOT / rel.with_suffix(".py"), ROOT / rel / "__init__.py"):
        if p.is_file():
            return p
    return None


def _imports(mod: str, path: Path) -> set[str]:
    """The graphguard modules ``path`` (module ``mod``) imports anywhere in it (lazy imports included), each
    with the packages it passes through (their ``__init__``s run too)."""
    pkg = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = pkg.split(".")
                up = parts[:len(parts) - (node.level - 1)]
                base = ".".join(up + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]  # (a name may be a submodule)
        for n in names:
            if n == "graphguard" or n.startswith("graphguard."):
                parts = n.split(".")
                out.update(".".join(parts[:i]) for i in range(2, len(parts) + 1))
    return {m for m in out if _module_file(m) is not None}


def closure(start: str) -> set[str]:
    seen, todo = {start}, [start]
    while todo:
        m = todo.pop()
        for n in _imports(m, _module_file(m)):
            if n not in seen:
                seen.add(n)
                todo.append(n)
    return seen


def test_the_checker_imports_no_part_of_the_engine_it_checks():
    mods = closure("graphguard.check")
    assert "graphguard.engine.replay" in mods and "graphguard.ir.semantics" in mods  # (the walk follows imports)
    assert not mods & FORBIDDEN, sorted(mods & FORBIDDEN)
    assert not {m for m in mods if m.startswith("graphguard.frontends") or m == "graphguard.api"}
    assert not closure("graphguard.engine.replay") & FORBIDDEN  # replay: ir/ and result only


# -- (b) a correct pair -------------------------------------------------------------------------------

def _pair(plugins, check="outputs"):
    """G_s: Z = relu(X) @ W, F = Z + 1 on the whole; each of two ranks: its rows of X, all of W."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    s.input("X", [8, 6]); s.input("W", [6, 4])
    s.op("aten.relu", ["X"], "R")
    s.op("aten.mm", ["R", "W"], "Z")
    s.output("Z")
    for r in range(2):
        d.input(f"X@{r}", [4, 6]); d.input(f"W@{r}", [6, 4])
        d.op("aten.relu", [f"X@{r}"], f"R@{r}")
        d.op("aten.mm", [f"R@{r}", f"W@{r}"], f"Z@{r}")
    d.output("Z@0", "Z@1")
    rel = parse_relation_text("inputs:\n  X: concat(X@0, X@1, dim=0)\n  W: [W@0, W@1]\n", "rel", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def test_a_correct_pair_refines_with_the_checker_confirming(plugins):
    r = graphguard.verify(*_pair(plugins), plugins=plugins)
    assert r.verdict == "refines", r.render()
    c = r.checked
    assert c["ok"] and c["scope"] == "outputs" and c["lines"] == c["confirmed"] == len(r.r_o_lines()) >= 1
    assert c["points"] == 2 and len(set(c["seeds"])) == 2 and c["max_error_ratio"] <= 1 and c["error"] is None
    assert "checked: 1 R_o line(s) confirmed at 2 random points in float64" in r.render()
    d = r.to_dict()
    assert d["checked"]["confirmed"] == 1 and d["exit_code"] == 0 and "check" in r.timings
    everything = graphguard.verify(*_pair(plugins), plugins=plugins, check="all")
    c = everything.checked
    assert everything.verdict == "refines" and c["ok"] and c["scope"] == "all"
    assert c["lines"] + c["skipped"] > 1 and c["confirmed"] == c["lines"]  # R, Z and the inputs too


def test_the_shipped_example_refines_checked_on_the_command_line(tmp_path):
    p = run_cli("verify", "--spec", FIG1 / "spec.gg.json", "--impl", FIG1 / "impl.gg.json",
                "--relation", FIG1 / "relation.yaml", "--json", tmp_path / "r.json")
    assert p.returncode == 0, p.stdout + p.stderr
    assert "checked: 1 R_o line(s) confirmed" in p.stdout
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["checked"]["ok"] and doc["checked"]["lines"] == 1 and doc["checked"]["seconds"] >= 0


def test_help_documents_check():
    p = run_cli("verify", "--help")
    assert p.returncode == 0 and "--check [outputs|all|off]" in p.stdout and "inconclusive" in p.stdout


def test_an_unknown_scope_is_bad_input(plugins):
    with pytest.raises(graphguard.InputError, match="check"):
        graphguard.verify(*_pair(plugins), plugins=plugins, check="some")
    p = run_cli("verify", "--spec", FIG1 / "spec.gg.json", "--impl", FIG1 / "impl.gg.json",
                "--relation", FIG1 / "relation.yaml", "--check", "some")
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


# -- (c) a corrupted engine ----------------------------------------------------------------------------

def _corrupt(monkeypatch, how: str):
    """The engine's R_o rewritten after the search: each concat's operands in reverse order ("swap"), or
    every operand the first one (the wrong rank's tensor, "rank")."""
    real = graphguard.api.compute_out_rel

    def bad(e):
        if isinstance(e, Leaf):
            return e
        args = tuple(bad(a) for a in e.args)
        if e.op == "core.concat":
            args = args[::-1] if how == "swap" else (args[0],) * len(args)
        return App(e.op, args, e.attrs)

    def patched(*a, **k):
        res = real(*a, **k)
        res.r_o = {t: [bad(e) for e in exprs] for t, exprs in res.r_o.items()}
        return res
    monkeypatch.setattr(graphguard.api, "compute_out_rel", patched)


def _cli(capsys, *args) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as ex:
        cli_main(["verify", *map(str, args)])
    out = capsys.readouterr()
    return ex.value.code, out.out, out.err


@pytest.mark.parametrize("how,line", [("swap", "F = concat(F@1, F@0, dim=0)"),
                                      ("rank", "F = concat(F@0, F@0, dim=0)")])
def test_a_false_r_o_is_inconclusive_naming_the_line(monkeypatch, capsys, tmp_path, how, line):
    _corrupt(monkeypatch, how)
    spec, impl, rel = files(FIG1)
    code, out, _ = _cli(capsys, "--spec", spec, "--impl", impl, "--relation", rel, "--json", tmp_path / "r.json")
    assert code == 3, out
    assert "INCONCLUSIVE" in out and "REFINES" not in out.replace("INCONCLUSIVE", "")
    assert f"reason: the independent check did not confirm {line}: max |diff|" in out
    assert f"not confirmed: {line}" in out
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["verdict"] == "inconclusive" and doc["exit_code"] == 3 and not doc["checked"]["ok"]
    assert doc["checked"]["unconfirmed"][0].startswith(line) and doc["checked"]["unconfirmed_outputs"] == ["F"]
    assert doc["failure"]["outputs"] == ["F"] and doc["failure"]["op"] != "(input)"


def test_a_false_r_o_is_inconclusive_through_the_api(monkeypatch, plugins):
    _corrupt(monkeypatch, "swap")
    r = graphguard.verify(*_pair(plugins), plugins=plugins)
    assert r.verdict == "inconclusive" and r.exit_code == 3
    assert "Z = concat(Z@1, Z@0, dim=0)" in r.failure.reason and r.failure.op == "aten.mm"
    assert r.checked["confirmed"] == 0 and r.checked["lines"] == 1


def test_a_check_that_cannot_run_is_inconclusive(monkeypatch, plugins):
    import graphguard.check as C

    def broken(*a, **k):
        raise C.ReplayError("no values satisfy the symbol constraints")
    monkeypatch.setattr(C, "_run", broken)
    r = graphguard.verify(*_pair(plugins), plugins=plugins)
    assert r.verdict == "inconclusive" and "could not run" in r.failure.reason
    assert "no values satisfy" in r.failure.reason and r.checked["error"] and not r.checked["ok"]
    assert "checked: NOT RUN" in r.render()


# -- (d) --check off: as before ------------------------------------------------------------------------

def test_check_off_keeps_the_engines_verdict(monkeypatch, capsys, tmp_path):
    _corrupt(monkeypatch, "swap")
    spec, impl, rel = files(FIG1)
    code, out, _ = _cli(capsys, "--spec", spec, "--impl", impl, "--relation", rel, "--check", "off",
                        "--json", tmp_path / "r.json")
    assert code == 0 and "REFINES" in out and "checked:" not in out
    assert "checked" not in json.loads((tmp_path / "r.json").read_text())


def test_replay_still_reports_on_its_own(monkeypatch, capsys):
    """--replay's report is the engine's verdict's (its own mismatch, exit 4), the checker's verdict besides."""
    _corrupt(monkeypatch, "swap")
    spec, impl, rel = files(FIG1)
    code, out, err = _cli(capsys, "--spec", spec, "--impl", impl, "--relation", rel, "--replay")
    assert code == 4 and "replay: MISMATCH" in out and "relation that does not hold numerically" in err
    assert "INCONCLUSIVE" in out and "not confirmed: F = concat(F@1, F@0, dim=0)" in out


# -- (e) the two unsound cases of issue 39 ----------------------------------------------------------------

def _two_layer_where(plugins, ws=(1, 0)):
    """where(M, A, B) with M all true in G_s; each rank's mask a scatter of value w at top-k indices into
    zeros: the second layer writes 0, its mask all false (G_d computes B there)."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=2)
    rel = "inputs:\n"
    outs_s, outs_d = [], []
    for lay, w in enumerate(ws):
        s.input(f"A{lay}", [4, 4]); s.input(f"B{lay}", [4, 4]); s.input(f"X{lay}", [1, 4])
        s.op("aten.full", [], f"M{lay}", size=[1, 4], fill_value=1, dtype="bool")
        s.op("aten.where.self", [f"M{lay}", f"A{lay}", f"B{lay}"], f"O{lay}")
        outs_s.append(f"O{lay}")
        rel += (f"  A{lay}: concat(A{lay}@0, A{lay}@1, dim=0)\n  B{lay}: concat(B{lay}@0, B{lay}@1, dim=0)\n"
                f"  X{lay}: [X{lay}@0, X{lay}@1]\n")
        for r in range(2):
            d.input(f"A{lay}@{r}", [2, 4]); d.input(f"B{lay}@{r}", [2, 4]); d.input(f"X{lay}@{r}", [1, 4])
            d.op("aten.topk", [f"X{lay}@{r}"], [f"tv{lay}@{r}", f"ti{lay}@{r}"], k=4, dim=-1, largest=True,
                 sorted=True)
            d.op("aten.full", [], f"z{lay}@{r}", size=[1, 4], fill_value=0.0, dtype="float32")
            d.op("aten.scatter.value", [f"z{lay}@{r}", f"ti{lay}@{r}"], f"sc{lay}@{r}", dim=1, value=float(w))
            d.op("aten._to_copy", [f"sc{lay}@{r}"], f"m{lay}@{r}", dtype="bool")
            d.op("aten.where.self", [f"m{lay}@{r}", f"A{lay}@{r}", f"B{lay}@{r}"], f"O{lay}@{r}")
            outs_d.append(f"O{lay}@{r}")
    s.output(*outs_s); d.output(*outs_d)
    rel = parse_relation_text(rel, "rel", plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


def _mm_repeated(plugins, n=33):
    """G_s: X @ Y with X = [x, x] and Y = [y; y] (2 x@y); G_d: [x, y] @ [y; x] (x@y + y@x)."""
    s, d = GraphBuilder("spec"), GraphBuilder("impl", world_size=1)
    s.input("X", [n, 2 * n], "float32"); s.input("Y", [2 * n, n], "float32")
    s.op("aten.mm", ["X", "Y"], "Z"); s.output("Z")
    d.input("x@0", [n, n], "float32"); d.input("y@0", [n, n], "float32")
    d.op("core.concat", ["x@0", "y@0"], "A@0", dim=1)
    d.op("core.concat", ["y@0", "x@0"], "B@0", dim=0)
    d.op("hlo.dot", ["A@0", "B@0"], "Z@0", lhs_batch=[], rhs_batch=[], lhs_contracting=[1], rhs_contracting=[0])
    d.output("Z@0")
    rel = parse_relation_text("inputs:\n  X: concat(x@0, x@0, dim=1)\n  Y: concat(y@0, y@0, dim=0)\n", "rel",
                              plugins.registry)
    cx = rel.constraints()
    return s.build(plugins.registry, cx), d.build(plugins.registry, cx), rel


@pytest.mark.parametrize("build,false_line", [(_two_layer_where, "O1 = concat(O1@0, O1@1, dim=0)"),
                                              (_mm_repeated, "Z = Z@0")])
def test_the_unsound_cases_of_issue_39_never_refine(plugins, build, false_line):
    """Whatever the engine answers, the checker leaves no REFINES: where the engine alone (--check off) still
    claims the false line, the checker names it and the verdict is inconclusive."""
    r = graphguard.verify(*build(plugins), plugins=plugins)
    assert r.verdict != "refines", r.render()
    alone = graphguard.verify(*build(plugins), plugins=plugins, check="off")
    if alone.verdict == "refines":
        assert false_line in alone.r_o_lines()
        assert r.verdict == "inconclusive" and false_line in r.failure.reason
        assert any(u.startswith(false_line) for u in r.checked["unconfirmed"])
