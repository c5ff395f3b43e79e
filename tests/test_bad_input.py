"""Bad input never gives a traceback: ``graphguard`` exits 2 with ONE line naming the file.

The contract (README, ``graphguard/cli.py``): for a malformed or hostile graph, relation, HLO module, archive or
command line the CLI exits with code 2 and prints exactly one line on stderr, ``graphguard: error: ...``, naming
the file (and the node/op, or FILE:LINE:COL in a relation file); "Traceback" appears in neither stdout nor
stderr; each case stays within a few seconds of CPU and 2 GB of address space.

The cases are the corpus of ``tests/bad_input_corpus.py`` (generated with fixed seeds from the shipped examples:
truncations at many offsets, wrong JSON types at every field, missing fields, bit flips of HloModuleProto
binaries, zip bombs and damaged archives, recursion bombs, tags and aliases in YAML, huge numbers and shapes,
NaN, duplicate names, cycles, dangling names, control characters in names, folders and devices for files, bad
option values). They run in-process (``graphguard.cli.main``) in two worker processes; see that module.

Size and cost (``python3 bench/bad_input_corpus.py``, 2-core machine shared with other jobs): 1097 cases -- 1042
that must exit 2 with one line, 51 that may also give a verdict (48 bit flips of an HloModuleProto, 3 valid
but odd modules; none may exit 4), 4 unmodified bases that must verify. About 7-8 s of CPU for the cases and
14 s of CPU in all with worker start-up (torch, for the ``.pt2`` op schemas, in one worker only); 21 s wall when
the machine is otherwise idle, 45-70 s when it is loaded. Before the readers were hardened, 224 of the first 1054 cases failed (108 exit 4, 50 exit
0, 33 several lines, 32 a line naming neither file nor op, 1 timeout).
"""
from __future__ import annotations

import collections
import subprocess
import sys

import bad_input_corpus as corpus


def test_the_corpus_covers_every_reader():
    kinds = collections.Counter(c.kind for c in corpus.CASES.values())
    strict = sum(c.expect == "error" for c in corpus.CASES.values())
    assert strict >= 300, strict
    for reader in ("gg.json", "relation", "hlo-text", "hlo-pb", "pt2", "cli", "files"):
        assert sum(n for k, n in kinds.items() if k.startswith(reader)) >= 10, (reader, kinds)


def test_every_bad_input_is_one_line_and_exit_2(tmp_path):
    """Runs the whole corpus once; a failure lists every case that is not as expected, with its output."""
    results = corpus.run_corpus(list(corpus.CASES), tmp_path)
    failures = []
    for name, c in corpus.CASES.items():
        bad = corpus.problems(c, results[name])
        if bad:
            failures.append(f"=== {name}: {'; '.join(bad)}\n{corpus.describe(c, results[name])}")
    assert not failures, f"{len(failures)} of {len(corpus.CASES)} cases failed:\n" + "\n".join(failures)


def test_a_real_process_prints_the_same_single_line(tmp_path):
    """The in-process runs match the command as a real process (interpreter start-up, real stderr)."""
    for name in ("gg-newline-in-node-name", "rel-tag-python-object", "pb-name-newline"):
        d = tmp_path / name
        d.mkdir()
        argv, needles = corpus.CASES[name].build(d)
        p = subprocess.run([sys.executable, "-m", "graphguard", *argv], capture_output=True, text=True,
                           timeout=300)
        lines = p.stderr.splitlines()
        assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stdout + p.stderr, p.stderr
        assert lines[0].startswith("graphguard: error:") and all(n in lines[0] for n in needles), lines[0]


def test_relations_written_by_graphguard_hold_no_aliases(plugins):
    """The reader refuses YAML aliases, so the writers never produce them, even for a list used twice."""
    from graphguard.ir.relation import parse_relation_text, relation_yaml
    shared = ["E@0", "E@1"]
    text = relation_yaml({"inputs": {"E": shared, "G": shared}})
    assert "&" not in text and "*" not in text
    rel = parse_relation_text(text, "<relation>", plugins.registry)
    assert [t.name for t in rel.inputs["E"]] == [t.name for t in rel.inputs["G"]] == ["E@0", "E@1"]


def test_a_verdict_report_keeps_one_line_per_line(tmp_path):
    """A source location or name holding a newline or an escape sequence is escaped in the verdict report too
    (not only in error lines): the report's lines are the report's."""
    import json

    from conftest import files, run_cli, write_example
    d = write_example(tmp_path, variant="missing-reduction")
    spec = json.loads((d / "spec.gg.json").read_text())
    for n in spec["nodes"]:
        n["loc"] = "model.py:3\nreason: forged\x1b[2J"
    (d / "spec.gg.json").write_text(json.dumps(spec))
    s, i, r = files(d)
    p = run_cli("verify", "--spec", s, "--impl", i, "--relation", r)
    assert p.returncode == 1, p.stderr
    assert "\x1b" not in p.stdout and "\nreason: forged" not in p.stdout
    assert "model.py:3\\nreason: forged\\x1b[2J" in p.stdout
