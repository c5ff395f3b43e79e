"""The commands README.md and docs/*.md show run, and the walkthrough's hint is the one the engine gives.

A fenced block is marked by an HTML comment on the line before it (a renderer shows no comment):

    <!-- doc-test: file NAME -->     the block is written to NAME (a model file the reader writes)
    <!-- doc-test: run -->           a shell block, run with bash; it must exit 0 (``run exit=1``: exit 1)
    <!-- doc-test: output -->        each part of the block between ``...`` lines appears, white space aside, in the
                                     output of the last block run before it
    <!-- doc-test: slow -->          a shell block run only with ``-m slow`` (``slow exit=1`` likewise)
    <!-- doc-test: skip REASON -->   a shell block not run (it installs packages, needs another venv...): each is
                                     reported as a skipped test with its reason

Every shell block (``sh``, ``bash``, ``shell``, ``console``) carries one marker, so no command is shown unchecked.
A document's blocks run in order in one folder of its own, in which every top-level entry of the repository is
linked (``examples/...`` reads the shipped files; ``-o out/`` writes there, not into the checkout).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL = {"sh", "bash", "shell", "console"}
MARK = re.compile(r"^<!--\s*doc-test:\s*(file|run|output|slow|skip)\b\s*(.*?)\s*-->\s*$")
FENCE = re.compile(r"^(```+|~~~+)\s*([\w+-]*)\s*$")


@dataclass
class Block:
    doc: str
    line: int  # of the fence
    lang: str
    text: str
    kind: str | None  # the marker's kind, None where unmarked
    arg: str = ""

    @property
    def where(self) -> str:
        return f"{self.doc}:{self.line}"

    @property
    def exit(self) -> int:
        m = re.search(r"\bexit=(\d+)", self.arg)
        return int(m[1]) if m else 0


def blocks(path: Path, rel: str | None = None) -> list[Block]:
    rel, out = rel or str(path.relative_to(ROOT)), []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        prev = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
        if not m and lines[i].startswith("    ") and i and not lines[i - 1].strip() and MARK.match(prev):
            j = next((k for k in range(i, len(lines)) if lines[k].strip() and not lines[k].startswith("    ")),
                     len(lines))  # an indented block after a marker: a shell block
            mark = MARK.match(prev)
            text = "\n".join(x[4:] for x in lines[i:j]).strip("\n") + "\n"
            out.append(Block(rel, i + 1, "sh", text, mark[1], mark[2]))
            i = j
            continue
        if not m:
            i += 1
            continue
        j = next((k for k in range(i + 1, len(lines)) if lines[k].startswith(m[1])), None)
        assert j is not None, f"{rel}:{i + 1}: a code fence that is never closed"
        mark = MARK.match(prev)
        out.append(Block(rel, i + 1, m[2], "\n".join(lines[i + 1:j]) + "\n", mark and mark[1], mark[2] if mark else ""))
        i = j + 1
    return out


ALL = [b for d in DOCS for b in blocks(d)]


def test_every_shell_block_is_marked():
    """A command shown is run, run with -m slow, or skipped with a reason; an unfenced command is none of them."""
    bad = [f"{b.where}: a {b.lang} block with no doc-test marker" for b in ALL if b.lang in SHELL and b.kind is None]
    bad += [f"{b.where}: 'doc-test: {b.kind}' on a {b.lang or 'plain'} block" for b in ALL
            if b.kind in ("run", "slow", "skip") and b.lang not in SHELL]
    bad += [f"{b.where}: 'doc-test: skip' without a reason" for b in ALL if b.kind == "skip" and not b.arg]
    bad += [f"{b.where}: 'doc-test: file' without a name" for b in ALL if b.kind == "file" and not b.arg]
    for d in DOCS:
        fenced, marked = False, {b.line for b in ALL if b.doc == str(d.relative_to(ROOT)) and b.kind}
        lines = d.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if FENCE.match(line):
                fenced = not fenced
            elif not fenced and re.match(r"^ {4,}(graphguard |python3? |pip |\./run|examples/)", line) and not any(
                    k <= n and all(x.startswith("    ") or not x.strip() for x in lines[k - 1:n]) for k in marked):
                bad.append(f"{d.relative_to(ROOT)}:{n}: an indented command with no doc-test marker")
    assert not bad, "\n".join(bad)


def test_the_markers_parse(tmp_path):
    text = ("x\n<!-- doc-test: file m.py -->\n```python\nA = 1\n```\n\n<!-- doc-test: run exit=1 -->\n```sh\nfalse\n```\n"
            "```sh\nls\n```\n")
    (p := tmp_path / "parse.md").write_text(text)
    got = [(b.kind, b.arg, b.lang, b.text, b.exit) for b in blocks(p, "parse.md")]
    assert got == [("file", "m.py", "python", "A = 1\n", 0), ("run", "exit=1", "sh", "false\n", 1),
                   (None, "", "sh", "ls\n", 0)]


def _workdir(tmp_path: Path) -> Path:
    for entry in ROOT.iterdir():
        if entry.name not in (".git",) and not (tmp_path / entry.name).exists():
            (tmp_path / entry.name).symlink_to(entry)
    return tmp_path


def _env() -> dict:
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["PYTHON"] = sys.executable
    env.pop("GG_DP_REDUCE", None)
    return env


def _normal(s: str) -> str:
    return " ".join(s.split())


def run_doc(doc: str, tmp_path: Path, slow: bool) -> list[str]:
    """Run ``doc``'s marked blocks in order in ``tmp_path``; the problems found (empty: every command did as shown)."""
    cwd, env, last, bad = _workdir(tmp_path), _env(), None, []
    for b in (b for b in ALL if b.doc == doc):
        if b.kind == "file":
            target = cwd / b.arg
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(b.text, encoding="utf-8")
        elif b.kind == "run" or (b.kind == "slow" and slow):
            p = subprocess.run(["bash", "-eo", "pipefail", "-c", b.text], cwd=cwd, env=env, capture_output=True,
                               text=True, timeout=600)
            last = (b, p.stdout + p.stderr)
            if p.returncode != b.exit:
                bad.append(f"{b.where}: exit {p.returncode}, the doc says {b.exit}:\n{b.text}{last[1][-3000:]}")
                break
        elif b.kind == "output" and last is not None and last[0].kind in ("run", "slow"):
            for part in re.split(r"^\s*\.\.\.\s*$", b.text, flags=re.M):
                if _normal(part) and _normal(part) not in _normal(last[1]):
                    bad.append(f"{b.where}: not in the output of {last[0].where}:\n{part}\n--- output:\n{last[1]}")
    return bad


FAST = sorted({b.doc for b in ALL if b.kind == "run"})
SLOW = sorted({b.doc for b in ALL if b.kind == "slow"})


@pytest.mark.parametrize("doc", FAST)
def test_the_commands_shown_run(doc, tmp_path):
    bad = run_doc(doc, tmp_path, slow=False)
    assert not bad, "\n\n".join(bad)


@pytest.mark.slow
@pytest.mark.parametrize("doc", SLOW)
def test_the_heavy_commands_shown_run(doc, tmp_path):
    bad = run_doc(doc, tmp_path, slow=True)
    assert not bad, "\n\n".join(bad)


@pytest.mark.parametrize("where,reason", [(b.where, b.arg) for b in ALL if b.kind == "skip"])
def test_commands_not_run_are_reported(where, reason):
    pytest.skip(f"{where}: not run: {reason}")


# the walkthrough's factor hint, as graphguard/engine/explain.py (_summed_copies) words it for mlp_tp_bug.py
WALKTHROUGH_HINT = (
    "hint: the ranks hold 2 times the value G_s computes (a constant factor 2): G_d's aten.mm (bw.mm_2@0 at "
    "mlp_tp_bug.py:13 in forward, module fc2) reads bw.all_reduce_1@0 = the sum over 2 ranks of tangent.out0, which "
    "every rank already holds whole (tangent.out0 = tangent.out0@0 = tangent.out0@1); the factor entered at "
    "core.all_reduce over ranks [0, 1] (all_reduce.g0_1.1 at mlp_tp_bug.py:14 in forward, its backward); usual "
    "causes: a differentiable all-reduce whose backward reduces again")


def test_the_walkthrough_shows_the_hint_graphguard_gives():
    """The output block the walkthrough shows holds the exact hint (test_the_commands_shown_run checks that
    the run prints it)."""
    walk = [b for b in ALL if b.doc == "docs/walkthrough.md" and b.kind in ("run", "output")]
    shown = [k for k, b in enumerate(walk) if b.kind == "output" and _normal(WALKTHROUGH_HINT) in _normal(b.text)]
    assert shown, f"docs/walkthrough.md shows no output block with: {WALKTHROUGH_HINT}"
    ran = walk[shown[0] - 1] if shown[0] else None
    assert ran is not None and ran.kind == "run" and ran.exit == 1 and "mlp_tp_bug.py" in ran.text, ran


def test_the_examples_list_names_every_example():
    text = (ROOT / "docs" / "examples.md").read_text(encoding="utf-8")
    dirs = [p for p in sorted((ROOT / "examples").iterdir()) if p.is_dir() and not p.name.startswith(".")]
    dirs += [p for p in sorted((ROOT / "examples" / "bugs").iterdir()) if p.is_dir()]
    missing = [str(p.relative_to(ROOT / "examples")) for p in dirs if p.name != "bugs"
               and f"`{p.relative_to(ROOT / 'examples')}`" not in text]
    assert not missing, f"docs/examples.md does not name: {missing}"


def test_docs_links_resolve():
    """Every relative link of README.md and docs/*.md names a file or folder of the repository."""
    bad = []
    for d in DOCS:
        for m in re.finditer(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", d.read_text(encoding="utf-8")):
            target = m[1]
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (d.parent / target).exists():
                bad.append(f"{d.relative_to(ROOT)}: ({target})")
    assert not bad, bad


def test_sentences_are_short():
    """No sentence of README.md or docs/*.md runs past 80 words (code blocks aside)."""
    bad = []
    for d in DOCS:
        prose = re.sub(r"^(```+|~~~+).*?^\1\s*$", "", d.read_text(encoding="utf-8"), flags=re.M | re.S)
        prose = re.sub(r"`[^`]*`", "X", prose)
        for para in re.split(r"\n\s*\n|\n\s*[-|#*] ", prose):
            for s in re.split(r"(?<=[.!?:;])\s+(?=[A-Z(`*])", para):
                if len(s.split()) > 80:
                    bad.append(f"{d.relative_to(ROOT)}: {len(s.split())} words: {' '.join(s.split()[:12])} ...")
    assert not bad, "\n".join(bad)
