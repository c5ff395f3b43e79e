from __future__ import annotations

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
