"""Inputs are data: nothing read from an input file is ever evaluated as code.

Scalar text (dimensions, symbolic attributes, ``.pt2`` size expressions) is read by graphguard's own grammar
(``graphguard.ir.scalar.parse``) into sympy objects; relation files by the relation grammar and YAML's
composer; HLO by its own lexer. Here known payloads go through every reader and each must be refused with
exit 2 and one line, quickly, without running: each payload would create a marker file if it ran.
"""
from __future__ import annotations

import ast
import json
import time
import zipfile
from pathlib import Path

import pytest
import sympy as sp
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from graphguard.ir import scalar as S

ROOT = Path(__file__).resolve().parents[1]
FIG1 = ROOT / "examples" / "paper-fig1"
SPEC = json.loads((FIG1 / "spec.gg.json").read_text())
IMPL = json.loads((FIG1 / "impl.gg.json").read_text())

# {m}: the marker file's path; every payload that ran would create it (or run something as bad)
PAYLOADS = {
    "subclasses": "[c for c in ().__class__.__base__.__subclasses__() if c.__name__ == '_wrap_close'][0]"
                  ".__init__.__globals__['system']('touch {m}')",
    "import": "__import__('os').system('touch {m}')",
    "lambda": "(lambda: __import__('os').system('touch {m}'))()",
    "open": "open('{m}', 'w')",
    "attribute": "K.__class__.__mro__",
    "dunder-name": "__builtins__",
    "dunder-import": "__import__",
    "exponent-bomb": "9**9**9",
    "power-bomb": "2**(2**64)",
    "degree-bomb": "(K + 1)**100000",
    "long": "+".join(["K"] * 3000),
    "deep": "(" * 400 + "K" + ")" * 400,
    "deep-unary": "-" * 3000 + "K",
    "unicode-ident": "\uff33\uff39\uff33",  # fullwidth SYS: NFKC would make it an identifier
    "unicode-digit": "\u0661\u0662",  # Arabic-Indic 12: int() would accept it
    "symbol-call": "Symbol('x')",
    "eval": "eval('1')",
    "exec": "exec('import os; os.system(\"touch {m}\")')",
    "fstring": "f'{{__import__(\"os\").system(\"touch {m}\")}}'",
    "conditional": "K if True else N",
    "statement": "K; __import__('os').system('touch {m}')",
    "newline": "K\n__import__('os').system('touch {m}')",
    "getattr": "getattr(K, '__class__')",
    "sympy-class": "Integer(10)**Integer(10)**Integer(10)",
    "float-bomb": "1.0e999999999",  # Fraction() would build a billion-digit integer
    "int-bomb": "1" * 5000,
}


def _payload(key: str, marker: Path) -> str:
    return PAYLOADS[key].replace("{m}", str(marker)).replace("{{", "{").replace("}}", "}")


def _cli(argv, capsys) -> tuple[int, str, float]:
    from graphguard.cli import main
    t0 = time.monotonic()
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in argv])
    out = capsys.readouterr()
    return e.value.code, out.out + out.err, time.monotonic() - t0


def _refused(argv, capsys, marker: Path, where: str = "") -> None:
    """Exit 2 with one error line naming ``where`` (the file the payload is in), quickly, and nothing ran."""
    code, out, took = _cli(argv, capsys)
    assert not marker.exists(), f"a payload ran: {marker} was created"
    assert "Traceback" not in out, out
    lines = out.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("graphguard: error:"), (code, out)
    assert where in lines[0], (where, lines[0])
    assert took < 10, f"took {took:.1f}s"


# -- the readers ------------------------------------------------------------------------------------------------

def _fig1(d: Path, spec=None, impl=None, rel=None) -> list:
    (d / "spec.gg.json").write_text(json.dumps(spec or SPEC))
    (d / "impl.gg.json").write_text(json.dumps(impl or IMPL))
    (d / "relation.yaml").write_text(rel if rel is not None else (FIG1 / "relation.yaml").read_text())
    return ["verify", "--spec", d / "spec.gg.json", "--impl", d / "impl.gg.json", "--relation", d / "relation.yaml"]


def _with_node(node: dict) -> dict:
    spec = json.loads(json.dumps(SPEC))
    spec["nodes"].append(node)
    return spec


def _ggjson_input_shape(d, p):
    spec = json.loads(json.dumps(SPEC))
    spec["inputs"][0]["shape"] = [p, 8]
    return _fig1(d, spec=spec)


def _ggjson_impl_shape(d, p):
    impl = json.loads(json.dumps(IMPL))
    impl["inputs"][0]["shape"] = [8, p]
    return _fig1(d, impl=impl)


def _ggjson_declared_output_shape(d, p):
    return _fig1(d, spec=_with_node({"op": "core.identity", "inputs": ["F"],
                                     "outputs": [{"name": "G", "shape": [p, 4]}]}))


def _ggjson_scalar_attr(d, p):
    return _fig1(d, spec=_with_node({"op": "core.slice", "inputs": ["F"], "outputs": ["G"],
                                     "attrs": {"dim": 0, "start": p, "end": 1}}))


def _ggjson_scalars_attr(d, p):
    return _fig1(d, spec=_with_node({"op": "core.reshape", "inputs": ["F"], "outputs": ["G"],
                                     "attrs": {"shape": [p, 4]}}))


def _ggjson_number_attr(d, p):
    return _fig1(d, spec=_with_node({"op": "core.full", "inputs": [], "outputs": ["G"],
                                     "attrs": {"shape": [2], "value": p}}))


def _rel(inputs: dict | None = None, **sections) -> str:
    doc = {"inputs": inputs or {"A": "concat(A@0, A@1, dim=1)", "B": "concat(B@0, B@1, dim=0)",
                                "E": "concat(E@0, E@1, dim=0)"}, **sections}
    return yaml.safe_dump(doc, width=100000)


def _relation_expression(d, p):
    return _fig1(d, rel=_rel({"A": p, "B": "concat(B@0, B@1, dim=0)", "E": "concat(E@0, E@1, dim=0)"}))


def _relation_quoted_attr(d, p):
    e = f"slice(concat(A@0, A@1, dim=1), dim=0, start={json.dumps(p)}, end=8)"
    return _fig1(d, rel=_rel({"A": e, "B": "concat(B@0, B@1, dim=0)", "E": "concat(E@0, E@1, dim=0)"}))


def _relation_bare_attr(d, p):
    e = f"slice(concat(A@0, A@1, dim=1), dim=0, start={p}, end=8)"
    return _fig1(d, rel=_rel({"A": e, "B": "concat(B@0, B@1, dim=0)", "E": "concat(E@0, E@1, dim=0)"}))


def _relation_symbol_name(d, p):
    return _fig1(d, rel=_rel(symbols={p: {"min": 2}}))


def _relation_symbol_value(d, p):
    return _fig1(d, rel=_rel(symbols={"K": {"min": p}}))


def _relation_expect(d, p):
    return _fig1(d, rel=_rel(expect={"F": p}))


def _relation_expect_attr(d, p):
    return _fig1(d, rel=_rel(expect={"F": f"slice(concat(F@0, F@1, dim=0), dim=0, start={json.dumps(p)}, end=2)"}))


HLO = """HloModule m

ENTRY main {{
  x = f32[4,{dim}] parameter(0)
  t = f32[{dim},4] transpose(x), dimensions={{{perm}}}
  c = f32[] constant({const})
  ROOT y = f32[{dim},4] exponential(t)
}}
"""


def _hlo(d, text):
    (d / "spec.hlo").write_text(text)
    (d / "relation.yaml").write_text("inputs:\n  x: [x@0, x@1]\n")
    return ["verify", "--frontend", "hlo", "--spec", d / "spec.hlo", "--impl", d / "spec.hlo", "--world-size", "2",
            "--relation", d / "relation.yaml"]


def _hlo_shape(d, p):
    return _hlo(d, HLO.format(dim=p, perm="1,0", const="1"))


def _hlo_attr(d, p):
    return _hlo(d, HLO.format(dim=6, perm=p, const="1"))


def _hlo_constant(d, p):
    return _hlo(d, HLO.format(dim=6, perm="1,0", const=p))


def _pt2(d: Path, sizes: list, node_args: list | None = None) -> list:
    """A hand-written torch.export archive (only its JSON graph is ever read)."""
    nodes = []
    if node_args is not None:
        nodes.append({"target": "torch.ops.aten.view.default", "inputs": node_args,
                      "outputs": [{"as_tensor": {"name": "y"}}], "metadata": {}})
    doc = {"graph_module": {
        "graph": {"tensor_values": {"x": {"sizes": sizes, "dtype": 7}, "y": {"sizes": [{"as_int": 4}], "dtype": 7}},
                  "nodes": nodes},
        "signature": {"input_specs": [{"user_input": {"arg": {"as_tensor": {"name": "x"}}}}],
                      "output_specs": [{"user_output": {"arg": {"as_tensor": {"name": "y" if nodes else "x"}}}}]}}}
    path = d / "m.pt2"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("m/models/model.json", json.dumps(doc))
    (d / "relation.yaml").write_text("inputs:\n  x: [x@0, x@1]\n")
    return ["verify", "--frontend", "fx", "--spec", path, "--impl", path, "--world-size", "2",
            "--relation", d / "relation.yaml"]


def _pt2_size_expr(d, p):
    return _pt2(d, [{"as_expr": {"expr_str": p}}, {"as_int": 4}])


def _pt2_symint_name(d, p):
    return _pt2(d, [{"as_int": 4}], [{"name": "self", "arg": {"as_tensor": {"name": "x"}}},
                                     {"name": "size", "arg": {"as_sym_ints": [{"as_name": p}]}}])


READERS = {f.__name__[1:]: f for f in (
    _ggjson_input_shape, _ggjson_impl_shape, _ggjson_declared_output_shape, _ggjson_scalar_attr,
    _ggjson_scalars_attr, _ggjson_number_attr, _relation_expression, _relation_quoted_attr, _relation_bare_attr,
    _relation_symbol_name, _relation_symbol_value, _relation_expect, _relation_expect_attr, _hlo_shape, _hlo_attr,
    _hlo_constant, _pt2_size_expr, _pt2_symint_name)}


# an HLO float constant of 1.0e999999999 or of 5000 digits is a legal spelling of inf (read as a float)
_LEGAL = {("hlo_constant", "float-bomb"), ("hlo_constant", "int-bomb")}


@pytest.mark.parametrize("reader,payload", [(r, p) for r in sorted(READERS) for p in sorted(PAYLOADS)
                                            if (r, p) not in _LEGAL])
def test_payload_is_refused_by_every_reader(reader, payload, tmp_path, capsys):
    marker = tmp_path / "ran"
    argv = READERS[reader](tmp_path, _payload(payload, marker))
    where = {"ggjson": "spec.gg.json", "relation": "relation.yaml", "hlo": "spec.hlo", "pt2": "m.pt2"}
    _refused(argv, capsys, marker, where[reader.split("_")[0]].replace("spec", "impl") if "impl" in reader
             else where[reader.split("_")[0]])


def test_the_readers_accept_what_they_should(tmp_path, capsys):
    """The cases above fail on the payload, not on the surrounding files: with a plain value they verify."""
    for reader, value in (("ggjson_input_shape", 8), ("ggjson_impl_shape", "8/2"), ("relation_symbol_name", "K"),
                          ("relation_symbol_value", 2)):
        d = tmp_path / reader
        d.mkdir()
        code, out, _ = _cli(READERS[reader](d, value), capsys)
        assert code == 0, (reader, out)


@pytest.mark.parametrize("tag", ['!!python/object/apply:os.system ["touch {m}"]',
                                 '!!python/name:os.system', "!!binary aGVsbG8="])
@pytest.mark.parametrize("where", ["symbol", "symbol-min", "input", "expect"])
def test_yaml_tags_are_never_constructed(tag, where, tmp_path, capsys):
    marker = tmp_path / "ran"
    tag = tag.replace("{m}", str(marker))
    base = (FIG1 / "relation.yaml").read_text()
    rel = {"symbol": base + f"symbols:\n  K: {tag}\n", "symbol-min": base + f"symbols:\n  K: {{min: {tag}}}\n",
           "input": base.replace("concat(A@0, A@1, dim=1)", tag),
           "expect": base + f"expect:\n  F: {tag}\n"}[where]
    _refused(_fig1(tmp_path, rel=rel), capsys, marker, "relation.yaml")


@pytest.mark.parametrize("value", ['"__import__(1)" + 1', "[1] * 2", "true + 1", "None - 1", '1 - "K"'])
def test_relation_arithmetic_is_on_numbers_only(value, tmp_path, capsys):
    e = f"slice(concat(A@0, A@1, dim=1), dim=0, start={value}, end=8)"
    rel = _rel({"A": e, "B": "concat(B@0, B@1, dim=0)", "E": "concat(E@0, E@1, dim=0)"})
    _refused(_fig1(tmp_path, rel=rel), capsys, tmp_path / "ran", "relation.yaml:2:")


# -- the scalar grammar --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_scalar_parser_refuses_payload_quickly(payload, tmp_path):
    marker = tmp_path / "ran"
    t0 = time.monotonic()
    with pytest.raises(ValueError, match="bad scalar expression"):
        S.parse(_payload(payload, marker))
    assert time.monotonic() - t0 < 1 and not marker.exists()


@pytest.mark.parametrize("text", ["0**-1", "1/0", "K/(N-N)", "Mod(K, 0)", "K // 0", "K % (2-2)", "K**N", "K**(1/2)",
                                  "floor()", "Mod(K)", "ceiling(K, N)", "floor", "K +", "(K", "K)", "", "  ", "1.5",
                                  "1e3", "0x10", "1_000", "K..N", "'K'", "[K]", "K,N", "1" * 101, "x" * 201])
def test_scalar_parser_refuses(text):
    with pytest.raises(ValueError, match="bad scalar expression"):
        S.parse(text)


@pytest.mark.parametrize("text,want", [
    ("8", 8), (" -3 ", -3), ("K/2", "K/2"), ("2*K + 1", "2*K+1"), ("K // 2", "floor(K/2)"), ("K % 3", "Mod(K,3)"),
    ("floor(K/2)", "floor(K/2)"), ("ceiling(K/3)", "ceiling(K/3)"), ("Mod(K, N)", "Mod(K,N)"), ("K**2", "K**2"),
    ("K**(-2)", "K**(-2)"), ("K**-2", "K**(-2)"), ("-2**2", -4), ("2**-1", "1/2"), ("(K+1)*(K-1)", "K**2-1"),
    ("2**62", 2**62), ("-K/2+3", "-K/2+3"), ("+K", "K"), ("K/(2*N)", "K/(2*N)"), ("nnz_nonzero_1_r0", "nnz_nonzero_1_r0"),
])
def test_scalar_parser_reads(text, want):
    got = S.parse(text)
    assert (got == want) if isinstance(want, int) else S.text(got) == want


_SYMS = [S.symbol(n) for n in ("K", "N", "M", "s0", "nnz_x_r1")]
_LEAF = st.one_of(st.sampled_from(_SYMS), st.integers(-40, 40).map(sp.Integer),
                  st.tuples(st.integers(-9, 9), st.integers(1, 9)).map(lambda t: sp.Rational(*t)))


def _grow(kids):
    nonzero = st.one_of(st.integers(1, 12).map(sp.Integer), st.sampled_from(_SYMS))
    return st.one_of(
        st.tuples(kids, kids).map(lambda t: t[0] + t[1]),
        st.tuples(kids, kids).map(lambda t: t[0] - t[1]),
        st.tuples(kids, kids).map(lambda t: t[0] * t[1]),
        st.tuples(kids, nonzero).map(lambda t: t[0] / t[1]),
        kids.map(lambda a: -a),
        kids.map(sp.floor),
        kids.map(sp.ceiling),
        st.tuples(kids, nonzero).map(lambda t: sp.Mod(t[0], t[1])),
        st.tuples(kids, st.integers(-2, 3)).map(lambda t: t[0] ** t[1]),
    )


_EXPRS = st.recursive(_LEAF, _grow, max_leaves=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_EXPRS)
def test_text_reads_back(e):
    """Everything ``S.text`` prints parses back to the same (canonical) scalar."""
    try:
        x = S.norm(e)
    except TypeError:
        return
    if not isinstance(x, int) and any(a.is_Atom and not (a.is_Symbol or a.is_Rational)
                                      for a in sp.preorder_traversal(x)):
        return  # 0**-1 and the like: not a scalar
    t = S.text(x)
    back = S.parse(t)
    assert back == x, (t, back)
    assert S.text(back) == t


def test_scalar_lists_read_back():
    x = (S.parse("K"), S.parse("Mod(K, 2)"), 4, S.parse("floor(K/N)"))
    from graphguard.ir.expr import attr_text
    assert S.parse_list(attr_text(x)) == x and S.parse_list("[]") == ()


# -- no reader uses an evaluator -------------------------------------------------------------------------------

_FORBIDDEN_CALLS = {"eval", "exec", "compile", "__import__"}
_FORBIDDEN_ATTRS = {"sympify", "parse_expr", "unsafe_load", "full_load", "load_all", "full_load_all"}
_FORBIDDEN_MODULES = {"pickle", "cPickle", "dill", "marshal", "shelve", "sympy.parsing", "sympy.parsing.sympy_parser"}


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    out = []
    for n in ast.walk(tree):
        where = f"{path.relative_to(ROOT)}:{getattr(n, 'lineno', 0)}"
        if isinstance(n, ast.Call):
            f = n.func
            if isinstance(f, ast.Name) and (f.id in _FORBIDDEN_CALLS or f.id in ("sympify", "parse_expr")):
                out.append(f"{where}: {f.id}()")
            if isinstance(f, ast.Attribute) and f.attr in _FORBIDDEN_ATTRS:
                out.append(f"{where}: .{f.attr}()")
            if isinstance(f, ast.Attribute) and f.attr in ("load", "loads") and isinstance(f.value, ast.Name) \
                    and f.value.id in ("yaml", "pickle", "marshal", "torch", "np", "numpy"):
                out.append(f"{where}: {f.value.id}.{f.attr}()")
        if isinstance(n, ast.Import):
            out += [f"{where}: import {a.name}" for a in n.names if a.name in _FORBIDDEN_MODULES]
        if isinstance(n, ast.ImportFrom) and (n.module in _FORBIDDEN_MODULES or (
                (n.module or "").startswith(("sympy", "yaml")) and any(a.name in _FORBIDDEN_ATTRS for a in n.names))):
            out.append(f"{where}: from {n.module} import ...")
    return out


def test_no_evaluator_in_the_sources():
    """graphguard and the lemma packs never call an evaluator or a code-constructing loader: no eval/exec,
    no sympy string parsing (``sympify``/``parse_expr``), no pickle/marshal, no yaml.load."""
    files = sorted((ROOT / "graphguard").rglob("*.py")) + sorted((ROOT / "lemma_packs").rglob("*.py"))
    assert len(files) > 20
    bad = [v for f in files for v in _violations(f)]
    assert not bad, "\n".join(bad)


def test_verification_never_calls_an_evaluator(monkeypatch, tmp_path):
    """Real verifications (gg.json, symbolic gg.json, HLO) with sympy's parsers and Python's eval/exec made
    to fail: no input path uses them."""
    import builtins
    import importlib

    import graphguard
    from test_hlo_frontend import IMPL as HLO_IMPL, RELATION as HLO_REL, SPEC as HLO_SPEC

    tmp = tmp_path
    (tmp / "spec.hlo").write_text(HLO_SPEC)
    (tmp / "impl.hlo").write_text(HLO_IMPL)
    (tmp / "relation.yaml").write_text(HLO_REL)

    def run_all():
        for ex in ("paper-fig1", "paper-fig1-symbolic"):
            d = ROOT / "examples" / ex
            r = graphguard.verify(d / "spec.gg.json", d / "impl.gg.json", d / "relation.yaml")
            assert r.verdict == "refines", (ex, r.render())
        r = graphguard.verify(tmp / "spec.hlo", tmp / "impl.hlo", tmp / "relation.yaml", frontend="hlo")
        assert r.verdict == "refines", r.render()

    run_all()  # every module imported, every plugin loaded: only the verification itself runs below
    calls = []

    def refuse(name):
        def f(*a, **k):
            calls.append(name)
            raise AssertionError(f"{name} called while verifying")
        return f

    sympify_module = importlib.import_module("sympy.core.sympify")  # (sympy.core.sympify is the function)
    parser_module = importlib.import_module("sympy.parsing.sympy_parser")
    real_sympify = sympify_module.sympify

    def sympify(a, *args, **kw):
        if isinstance(a, str):
            calls.append(f"sympify({a!r})")
            raise AssertionError("sympify of text while verifying")
        return real_sympify(a, *args, **kw)

    for mod in (sp, sympify_module):
        monkeypatch.setattr(mod, "sympify", sympify)
    for mod in (sp, parser_module):
        monkeypatch.setattr(mod, "parse_expr", refuse("parse_expr"))
    monkeypatch.setattr(builtins, "eval", refuse("eval"))
    monkeypatch.setattr(builtins, "exec", refuse("exec"))
    try:
        run_all()
    finally:
        monkeypatch.undo()
    assert not calls
