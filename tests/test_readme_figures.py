"""Every count README.md and docs/*.md quote -- operators, lemmas, rules, families, packs -- is the loaded registry's.

A figure is checked where README states it in one of the forms below; a count of operators or lemmas in any
other form fails the test, so that no figure goes stale unchecked. Only graphguard's own plugins are counted (a
third party's pack installed here is not README's).
"""
from __future__ import annotations

import re

from conftest import ROOT

# a dialect as README names it -> the pack (operator source) whose operators it counts
DIALECTS = {"ATen": "aten", "ONNX": "onnx-ops", "HLO": "hlo-ops", "XLA": "hlo-ops", "clean": "graphguard.ir",
            "core": "core", "vLLM": "vllm", "Apex": "apex", "NeuronX": "neuronx"}
N = r"(?<!\d\s)(?<![\w.])(\d+)"  # a count (not the tail of "100 000", "1.5" or "float16")
ANY = re.compile(N + r"\s+(?:[A-Za-z][\w.-]*\s+){0,2}(?:operators|lemmas|rules|families|packs)\b")


def figures(plugins) -> dict:
    own = {name for group, name, value in plugins.loaded if value.split(".")[0] in ("graphguard", "lemma_packs")}
    own.add("graphguard.ir")  # (the clean dialect's operators: no plugin's)
    ops: dict[str, int] = {}
    for op in plugins.registry:
        if op.source in own:
            ops[op.source] = ops.get(op.source, 0) + 1
    lemmas: dict[str, set] = {}
    rules = [r for r in plugins.lemmas if r.lemma.pack in own]
    for r in rules:
        lemmas.setdefault(r.lemma.pack, set()).add(id(r.lemma))
    derived = {pack: len({id(r.lemma) for r in rules if r.lemma.pack == pack and r.lemma.family}) for pack in lemmas}
    fams = {r.lemma.ref for r in rules if r.lemma.family}
    return {"ops": ops, "lemmas": {k: len(v) for k, v in lemmas.items()}, "derived": derived, "rules": len(rules),
            "families": fams}


def _words(pattern: str) -> str:
    """``pattern`` with each space matching any run of white space (a figure's sentence may wrap)."""
    return pattern.replace(" ", r"\s+")


def problems(text: str, f: dict) -> list[str]:
    """The figures of ``text`` that are not ``f``'s (:func:`figures`), and those in no form checked."""
    n_ops, n_lemmas, n_derived = sum(f["ops"].values()), sum(f["lemmas"].values()), sum(f["derived"].values())
    checked: list[tuple[int, int]] = []  # spans of the figures checked
    bad: list[str] = []

    def each(pattern):
        for m in re.finditer(pattern, text, re.M):
            checked.append(m.span())
            yield m

    def want(m, got, expected):
        if got != expected:
            bad.append(f"{' '.join(m[0].split())!r}: the registry has {expected}")

    # `graphguard plugins`' lines, as quoted
    for m in each(r"^\s*(operators|lemmas): ((?:[\w.-]+: \d+(?:, )?)+)$"):
        want(m, {k: int(v) for k, v in re.findall(r"([\w.-]+): (\d+)", m[2])},
             f["ops"] if m[1] == "operators" else f["lemmas"])
    for m in each(N + r"\s+(?:PyTorch\s+)?(" + "|".join(DIALECTS) + r")\s+operators\b"):
        want(m, int(m[1]), f["ops"].get(DIALECTS[m[2]], 0))
    for m in each(_words(N + r" operators and (\d+) lemmas, (\d+) of them derived from operator properties by (\d+) "
                         r"families")):
        want(m, tuple(map(int, m.groups())), (n_ops, n_lemmas, n_derived, len(f["families"])))
    # `graphguard lemmas list`'s count lines
    for m in each(r"^([\w.-]+): (\d+) lemmas \((\d+) derived from operator properties\)$"):
        want(m, (int(m[2]), int(m[3])), (f["lemmas"].get(m[1], 0), f["derived"].get(m[1], 0)))
    for m in each(_words(N + r" lemmas in (\d+) packs \((\d+) rules; (\d+) lemmas derived from operator properties "
                         r"by (\d+) families\)")):
        want(m, tuple(map(int, m.groups())), (n_lemmas, len(f["lemmas"]), f["rules"], n_derived, len(f["families"])))
    for m in each(r"families\.py`, references (\d+)-(\d+)"):
        want(m, (int(m[1]), int(m[2])), (min(f["families"]), max(f["families"])))
    bad += [f"{' '.join(m[0].split())!r}: a figure in no form this test checks" for m in ANY.finditer(text)
            if not any(a <= m.start() < b for a, b in checked)]
    return bad


def test_readme_figures_are_the_registry(plugins):
    text = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    assert re.search(r"^\s*operators: ", text, re.M) and re.search(r"^\s*lemmas: ", text, re.M)  # (quoted)
    assert not problems(text, figures(plugins))


def test_a_stale_or_unchecked_figure_is_caught(plugins):
    f = figures(plugins)
    ops = "operators: " + ", ".join(f"{k}: {v}" for k, v in sorted(f["ops"].items()))
    assert not problems(f"{ops}\nthe {f['ops']['aten']} ATen operators, a float16 tensor of 100 000 operators\n", f)
    stale = [ops.replace(f"aten: {f['ops']['aten']}", "aten: 89"), "89 ATen operators",
             f"{sum(f['ops'].values()) + 1} operators and 1 lemmas, 0 of them derived from operator\n"
             "  properties by 1 families",
             "core: 1 lemmas (0 derived from operator properties)", "`families.py`, references 1201-1210",
             "it has 1253 lemmas", "89 HF operators"]
    for line in stale:
        assert len(problems(line, f)) == 1, line
