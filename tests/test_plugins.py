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
from graphguard.engine.lemma import L
from graphguard.ir.ops import OpDef

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
    assert re.fullmatch(r"graphguard: error: lemma pack 'extra' is refused: lemma 9902 double-is-sum-BOGUS "
                        r"\(.*ggextra.__init__\.py:\d+\): values differ [^\n]*\n", p.stderr), p.stderr
    p = _gg(third_party, "lemmas", "check", "--ref", "9901", "--ref", "9902")  # ... and says why
    assert p.returncode == 1
    assert re.search(r"ok\s+L9901", p.stdout)
    assert re.search(r"FAIL\s+L9902 double-is-sum-BOGUS \[.*ggextra.__init__\.py:\d+\]: values differ", p.stdout)
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
            "-p", "no:onnx-aten", "-p", "no:extra", "verify", "--spec", spec, "--impl", impl, "--relation", rel)
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
                     "graphguard_lemmas", "graphguard_ops"]


@pytest.mark.parametrize("change,msg", [
    (("extra_rank(?a) >= 1", "extra_rnak(?a) >= 1"),
     r"lemma 9901 \(.*ggextra.__init__\.py:\d+\): unknown function\(s\) extra_rnak\(\) \(built-in, or a plugin's "
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
    assert re.fullmatch(r"graphguard: error: lemma 301 \(.*lemmas.py:\d+\): unknown operator 'matmul'\n", p.stderr)
