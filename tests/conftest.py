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
