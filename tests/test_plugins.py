"""Plugins are found through entry points, exactly as a third party's; the core names none of them."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import EXAMPLES, ROOT, files, run_cli

PLUGIN = '''
import numpy as np
from graphguard import hookimpl
from graphguard.ir.lemma import L
from graphguard.ir.ops import OpDef

NUMBERS = range(9900, 10000)

@hookimpl
def graphguard_ops():
    return [OpDef("extra.double", 1, lambda s, a, cx: tuple(s[0]), lambda xs, a: 2 * xs[0], doc="2x")]

@hookimpl
def graphguard_lemma_functions():
    return {"extra_rank": lambda ctx, x: len(ctx.shape_of(x))}

@hookimpl
def graphguard_lemmas():
    return [
        L(9901, "double-of-concat",
          "extra.double(concat(?a, ?b, dim=?d)) => concat(extra.double(?a), extra.double(?b), dim=?d)",
          "extra_rank(?a) >= 1"),
        L(9902, "double-is-sum-BOGUS", "extra.double(?x) => ?x"),
    ]
'''


@pytest.fixture
def third_party(tmp_path):
    """An installed-looking third-party package registering a lemma pack by entry point."""
    (tmp_path / "ggextra").mkdir()
    (tmp_path / "ggextra" / "__init__.py").write_text(PLUGIN)
    dist = tmp_path / "ggextra-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: ggextra\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[graphguard.lemma_packs]\nextra = ggextra\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", ""),
               GRAPHGUARD_CACHE_DIR=str(tmp_path / "cache"))
    return env


def _gg(env, *args):
    return subprocess.run([sys.executable, "-m", "graphguard", *map(str, args)], capture_output=True, text=True,
                          env=env)


def test_builtin_plugins_are_entry_points():
    p = run_cli("plugins")
    assert p.returncode == 0
    assert re.search(r"graphguard.frontends\s+ir\s+graphguard.frontends.ir", p.stdout)
    assert re.search(r"graphguard.lemma_packs\s+core\s+lemma_packs.core", p.stdout)
    assert re.search(r"lemmas: .*core: \d+", p.stdout)


def test_third_party_pack_is_loaded_and_fuzzed(third_party):
    p = _gg(third_party, "plugins")  # its bogus lemma fails the fuzzer when the pack is first loaded: refused
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert re.fullmatch(r"graphguard: error: lemma pack 'extra' is refused: lemma extra:9902 double-is-sum-BOGUS "
                        r"\(.*ggextra.__init__\.py:\d+\): values differ [^\n]*\n", p.stderr), p.stderr
    p = _gg(third_party, "lemmas", "check", "--ref", "9901", "--ref", "9902")  # ... and says why
    assert p.returncode == 1
    assert re.search(r"ok\s+extra:9901 ", p.stdout)
    assert re.search(r"FAIL\s+extra:9902 double-is-sum-BOGUS \[.*ggextra.__init__\.py:\d+\]: values differ", p.stdout)
    assert "1 passed, 1 failed" in p.stdout


def test_a_sound_third_party_pack_is_fuzzed_once_per_content(third_party, tmp_path):
    init = tmp_path / "ggextra" / "__init__.py"
    init.write_text(init.read_text().replace('L(9902, "double-is-sum-BOGUS", "extra.double(?x) => ?x"),', ""))
    p = _gg(third_party, "plugins")
    assert p.returncode == 0, p.stderr
    assert re.search(r"lemmas: .*core: \d+.*extra: 1", p.stdout)
    (verdict,) = (tmp_path / "cache" / "packs").glob("extra-*.json")
    assert json.loads(verdict.read_text())["failed"] is None
    # the cached verdict is what a later load reads (a forged one shows it) ...
    verdict.write_text(json.dumps({"failed": "lemma 9901 forged", "rules": 1}))
    p = _gg(third_party, "plugins")
    assert p.returncode == 2 and "lemma pack 'extra' is refused: lemma 9901 forged" in p.stderr
    # ... until the pack's source changes: fuzzed again, under a new hash
    init.write_text(init.read_text() + "\n# a new version\n")
    p = _gg(third_party, "plugins")
    assert p.returncode == 0, p.stderr
    assert len(list((tmp_path / "cache" / "packs").glob("extra-*.json"))) == 2


def test_a_plugin_can_be_disabled(third_party):
    p = _gg(third_party, "-p", "no:extra", "lemmas", "check", "--ref", "9902")
    assert p.returncode == 2 and "no loaded lemma has the reference 9902" in p.stderr
    spec, impl, rel = files(EXAMPLES / "paper-fig1")
    p = _gg(third_party, "-p", "no:core", "-p", "no:aten", "-p", "no:vllm", "-p", "no:hlo-ops", "-p", "no:aten-hlo",
            "-p", "no:onnx-aten", "-p", "no:aten-neuronx", "-p", "no:neuronx",  # (neuronx 907 reads core.convert)
            "-p", "no:extra", "verify", "--spec", spec, "--impl", impl, "--relation", rel)
    assert p.returncode == 2
    assert "unknown operator 'core.matmul'" in p.stderr and "Traceback" not in p.stderr


def test_core_never_imports_packs_or_frontends_by_name():
    # graphguard/torch.py and jax.py are the fx and hlo frontends' public namespaces (graphguard.torch.capture,
    # graphguard.jax.capture), not the core
    core = [p for p in (ROOT / "graphguard").rglob("*.py")
            if "frontends" not in p.relative_to(ROOT).parts and p.name not in ("torch.py", "jax.py")]
    for p in core:
        text = p.read_text()
        assert not re.search(r"^\s*(from|import)\s+lemma_packs", text, re.M), p
        assert not re.search(r"frontends\.(ir|fx|hlo|onnx)\b", text), p


def test_one_hookspec_module_lists_every_extension_point():
    from graphguard import hookspecs
    hooks = sorted(n for n in dir(hookspecs) if n.startswith("graphguard_"))
    assert hooks == ["graphguard_collective_ops", "graphguard_frontends", "graphguard_lemma_functions",
                     "graphguard_lemmas", "graphguard_ops", "graphguard_passes"]


@pytest.mark.parametrize("change,msg", [
    (("extra_rank(?a) >= 1", "extra_rnak(?a) >= 1"),
     r"lemma extra:9901 \(.*ggextra.__init__\.py:\d+\): unknown function\(s\) extra_rnak\(\) \(built-in, or a plugin's "
     r"graphguard_lemma_functions\)"),
    (('{"extra_rank":', '{"size":'), r"lemma function size\(\) of plugin extra is defined twice"),
])
def test_lemma_functions_of_a_plugin_are_checked_when_loaded(third_party, tmp_path, change, msg):
    init = tmp_path / "ggextra" / "__init__.py"
    init.write_text(init.read_text().replace(*change))
    p = _gg(third_party, "lemmas", "list")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert re.fullmatch(r"graphguard: error: " + msg + r"\n", p.stderr), p.stderr


def test_a_pack_whose_dependency_is_disabled_fails_clearly():
    spec, impl, rel = files(EXAMPLES / "paper-fig1")
    p = run_cli("-p", "no:core", "verify", "--spec", spec, "--impl", impl, "--relation", rel)
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert re.fullmatch(r"graphguard: error: lemma aten:301 \(.*bridges.py:\d+\): unknown operator 'matmul'\n", p.stderr)


# -- a lemma is pack:number: numbers are unique within a pack only ----------------------------------------------

def test_two_packs_may_number_a_lemma_alike(third_party, tmp_path):
    init = tmp_path / "ggextra" / "__init__.py"  # the third party's sound lemma takes core's number 104
    init.write_text(PLUGIN.replace("L(9901,", "L(104,").replace("range(9900, 10000)", "range(100, 110)").replace(
        'L(9902, "double-is-sum-BOGUS", "extra.double(?x) => ?x"),', ""))
    p = _gg(third_party, "lemmas", "list")  # both, distinct: pack, pack:number, name, file:line
    assert p.returncode == 0, p.stderr
    assert re.search(r"^core +core:104 +slice-of-concat-left  .*core.lemmas\.py:\d+$", p.stdout, re.M)
    assert re.search(r"^extra +extra:104 +double-of-concat  .*ggextra.__init__\.py:\d+$", p.stdout, re.M)
    assert re.search(r"^extra: 1 lemmas \(0 derived from operator properties\)$", p.stdout, re.M)
    assert re.search(r"^\d+ lemmas in \d+ packs \(", p.stdout, re.M)
    p = _gg(third_party, "lemmas", "check", "--ref", "extra:104", "--ref", "core:104")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"ok\s+extra:104 double-of-concat", p.stdout) and re.search(r"ok\s+core:104 slice", p.stdout)
    assert "2 passed, 0 failed" in p.stdout
    p = _gg(third_party, "lemmas", "check", "--ref", "104")  # a bare number two packs have: one line, exit 2
    assert p.returncode == 2 and p.stderr == ("graphguard: error: lemma reference 104 is ambiguous: core:104, "
                                              "extra:104 (give pack:number)\n"), p.stderr
    p = _gg(third_party, "lemmas", "check", "--ref", "extra:105")
    assert p.returncode == 2 and p.stderr == "graphguard: error: no loaded lemma has the reference extra:105\n"


@pytest.mark.parametrize("ref,msg", [
    ("9902", r"lemma reference extra:9902 is used twice \(.*ggextra.__init__\.py:\d+ and .*ggextra.__init__\.py:\d+\)"),
    ("1201", r"lemma extra:1201 \(.*ggextra.__init__\.py:\d+\): 1201 is the number of the lemma family "
             r"elementwise-of-concats \(graphguard/engine/families\.py\), .*"),
], ids=["twice", "a-family-number"])
def test_a_number_is_unique_within_its_pack(third_party, tmp_path, ref, msg):
    init = tmp_path / "ggextra" / "__init__.py"
    init.write_text(PLUGIN.replace("L(9901,", f"L({ref},"))  # (refused when loaded, before its lemmas are fuzzed)
    p = _gg(third_party, "lemmas", "list")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert re.fullmatch(r"graphguard: error: " + msg + r"\n", p.stderr), p.stderr


def test_rules_of_two_packs_with_one_number_are_distinct_in_the_egraph(plugins):
    from graphguard.engine.lemma import build_rules
    from graphguard.ir.lemma import L
    from graphguard.testing import proves
    from graphguard.plugins import Plugins
    (core104,) = [r for r in plugins.lemmas if r.lemma.key == ("core", 104)]
    lem = L(104, "neg-of-neg", "neg(neg(?x)) => ?x", "rank(?x) >= 0")  # (conditional: matched by the engine)
    lem.pack = "extra"
    (extra104,) = build_rules(lem, plugins.registry)
    assert not core104.native and not extra104.native and core104.id != extra104.id
    pl = Plugins(plugins.registry, [core104, extra104], plugins.frontends)
    shapes = {"P": [2, 3], "Q": [3, 3], "X": [2, 3]}
    term, head = "slice(concat(P, Q, dim=0), dim=0, start=0, end=1)", "slice(P, dim=0, start=0, end=1)"
    assert proves(term, head, shapes, plugins=pl) and proves("neg(neg(X))", "X", shapes, plugins=pl)
    assert proves(f"neg(neg({term}))", head, shapes, plugins=pl)  # both in one search
    assert not proves(term, "slice(Q, dim=0, start=0, end=1)", shapes, plugins=pl)
