from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
sys.path.insert(0, str(EXAMPLES / "paper-fig1"))


@pytest.fixture(scope="session")
def plugins():
    from graphguard.plugins import load_plugins
    return load_plugins()


@pytest.fixture
def cx():
    from graphguard.ir.scalar import Constraints
    return Constraints()


def load_module(path: Path, **env):
    """Execute a model file as a fresh module with ``env`` set while it runs (its module-level settings:
    ``GG_LAYERS``, ``GG_SHAPE``, ...), the environment restored after."""
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        spec = importlib.util.spec_from_file_location(f"m_{path.parent.name}_{len(env)}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "graphguard", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


def write_example(tmp_path: Path, world: int = 2, variant: str = "ok") -> Path:
    """Write paper-fig1 (any world size / variant) into tmp_path; return the directory."""
    import json

    from make import build
    spec, impl, rel = build(world, variant)
    (tmp_path / "spec.gg.json").write_text(json.dumps(spec))
    (tmp_path / "impl.gg.json").write_text(json.dumps(impl))
    (tmp_path / "relation.yaml").write_text(rel)
    return tmp_path


def files(d: Path):
    return d / "spec.gg.json", d / "impl.gg.json", d / "relation.yaml"


def verify_model_file(path: Path, world: int):
    """Capture a model file's specification and implementation (forward + backward) and verify them with its
    relation and expectations, replaying the verdict."""
    import graphguard
    from graphguard.frontends.fx.model_file import load_model_file
    from graphguard.torch import capture
    mod = load_model_file(path)
    s = capture(lambda r: mod.spec(), lambda r: mod.inputs(None, world), backward=True)
    d = capture(lambda r: mod.impl(r, world), lambda r: mod.inputs(r, world), world_size=world, backward=True)
    rel = dict(mod.relation(world, True), expect=mod.expect(world, True))
    return graphguard.verify(s.graph(), d.graph(), rel, replay=True)


# tests of 15-45 s each (real frameworks' captures, the lemma fuzzer): started first, so that with -n 2 the
# last minutes are short tests on both workers rather than one long test on one (worksteal splits the list in
# order and steals from its end). Only the order changes.
LONG = ("test_examples.py::test_run_script_exit_code_and_replay[megatron", "test_hf_zoo.py::test_hf_plan",
        "test_hf_zoo.py::test_per_head", "test_torchtitan.py::test_tp2", "test_lemmas.py::test_every_builtin_lemma",
        "test_mutants.py::", "test_bad_input.py::test_every_bad_input", "test_llama.py::test_llama_forward",
        "test_new_pack.py::", "test_plugins.py::test_two_packs", "test_cross_hf_neuronx.py::test_hf_rms_norm",
        "test_cross_hf_neuronx.py::test_kv_caches", "test_repeat.py::test_llama_layers",
        "test_data_bounds.py::test_hf_aria", "test_data_bounds.py::test_a_rank")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda it: not any(k in it.nodeid for k in LONG))
