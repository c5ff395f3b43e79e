"""``graphguard new-pack``: the skeleton it writes installs, loads, passes the fuzzer and its own tests.

The pack is installed (``pip install -e``) into a throwaway virtual environment that sees this one's packages
(a ``.pth`` file), never into this one: other tests, running at the same time in other workers, load every
installed plugin.
"""
from __future__ import annotations

import os
import re
import site
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest

from graphguard.cli import main


def _cli(*args, capsys):
    """Run the command in this process (its plugins loaded once); (exit code, stdout, stderr)."""
    with pytest.raises(SystemExit) as e:
        main([str(a) for a in args])
    out = capsys.readouterr()
    return e.value.code, out.out, out.err


def _in_venv(py, env):
    """``graphguard ARGS`` run by the virtual environment's python."""
    return lambda *args: subprocess.run([py, "-m", "graphguard", *map(str, args)], env=env, capture_output=True,
                                        text=True)


@pytest.fixture
def venv(tmp_path):
    """A virtual environment seeing this interpreter's site-packages, for ``pip install -e``; its python and
    environment. Whatever was installed into it is uninstalled afterwards, passed or failed."""
    root = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    py = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    (purelib,) = {Path(p) for p in subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True,
        check=True).stdout.split()}
    outer = site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    (purelib / "_graphguard_outer.pth").write_text("import site; " + "; ".join(f"site.addsitedir({d!r})" for d in outer)
                                                   + "\n")
    env = dict(os.environ, GRAPHGUARD_CACHE_DIR=str(tmp_path / "cache"), PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INDEX="1")
    installed: list[str] = []
    yield py, env, installed
    for dist in installed:
        subprocess.run([py, "-m", "pip", "uninstall", "-y", "-q", dist], env=env, capture_output=True)


def test_a_new_pack_installs_and_passes_its_checks(tmp_path, venv, capsys):
    py, env, installed = venv
    code, out, err = _cli("new-pack", "demo", "-o", tmp_path, capsys=capsys)
    assert code == 0, err
    pack = tmp_path / "demo"
    assert sorted(str(p.relative_to(pack)) for p in pack.rglob("*") if p.is_file()) == [
        "README.md", "demo/__init__.py", "demo/lemmas.py", "demo/ops.py", "pyproject.toml", "tests/test_demo.py"]
    assert out.split() == [str(pack / f) for f in ("pyproject.toml", "README.md", "demo/__init__.py", "demo/ops.py",
                                                     "demo/lemmas.py", "tests/test_demo.py")]
    installed.append("graphguard-demo")
    p = subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "-e", pack], env=env,
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr
    gg = _in_venv(py, env)
    p = gg("plugins")  # loaded (and fuzzed, as a third party's pack is when first loaded)
    assert p.returncode == 0, p.stderr
    assert re.search(r"^graphguard.lemma_packs\s+demo\s+demo$", p.stdout, re.M), p.stdout
    assert re.search(r"operators: .*demo: 1\b", p.stdout) and re.search(r"lemmas: .*demo: \d+", p.stdout)
    p = gg("lemmas", "check", "--ref", "demo:1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert re.search(r"ok\s+demo:1 my-scale-of-my-scale", p.stdout) and "1 passed, 0 failed" in p.stdout
    p = subprocess.run([py, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=pack, env=env, capture_output=True,
                       text=True)
    assert p.returncode == 0 and "3 passed" in p.stdout, p.stdout + p.stderr
    with pytest.raises(PackageNotFoundError):  # (this environment is untouched)
        distribution("graphguard-demo")


@pytest.mark.parametrize("name,msg", [
    ("1demo", "'1demo' is not a valid pack name"),
    ("my-pack", "'my-pack' is not a valid pack name"),
    ("class", "'class' is not a valid pack name"),
    ("aten", "'aten' is already the name of an installed plugin"),
    ("onnx", "'onnx' is already the name of an installed plugin"),  # (a frontend's: plugins share one namespace)
    ("numpy", "'numpy' is already an importable Python module"),
])
def test_new_pack_refuses_a_bad_name(tmp_path, capsys, name, msg):
    code, out, err = _cli("new-pack", name, "-o", tmp_path, capsys=capsys)
    assert code == 2 and not out and err.count("\n") == 1 and err.startswith(f"graphguard: error: new-pack: {msg}"), err
    assert not list(tmp_path.iterdir())


def test_new_pack_never_overwrites(tmp_path, capsys):
    (tmp_path / "demo").mkdir()
    (tmp_path / "demo" / "mine.txt").write_text("keep")
    code, out, err = _cli("new-pack", "demo", "-o", tmp_path, capsys=capsys)
    assert code == 2 and err == f"graphguard: error: new-pack: {tmp_path / 'demo'} already exists (nothing written)\n"
    assert [p.name for p in (tmp_path / "demo").iterdir()] == ["mine.txt"]
