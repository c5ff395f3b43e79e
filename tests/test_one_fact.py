"""One fact, written once (issue 40, item 2): the plugin loader refuses a hand-written rule that restates a
derived one (or another hand-written one) up to the names of its variables unless it says why it must exist --
also one that drops a guard of the derived rule it restates (it fires where the family's does not); each pack file declares the numbers its lemmas
take (``NUMBERS``), and the loader refuses a lemma outside them and two files of one pack whose numbers overlap."""
from __future__ import annotations

import importlib
import itertools
import re
import textwrap

import pytest

from graphguard.engine.lemma import compile_lemmas, duplicate_problems, normal_form
from graphguard.errors import GraphGuardError
from graphguard.ir.lemma import L
from graphguard.plugins import _check_numbers, load_plugins

_names = itertools.count()

# a derived rule of the ATen pack: linear-over-sum[aten.neg] (aten:1203), "if floating(dtype(?a0))"
NEG_OF_SUM = "aten.neg(sum(?p, ?q)) => sum(aten.neg(?p), aten.neg(?q))"
# ... and elementwise-of-concats[aten.neg] (aten:1201), no condition
NEG_OF_CONCAT = "aten.neg(concat(?x, ?y, dim=?k)) => concat(aten.neg(?x), aten.neg(?y), dim=?k)"


def _pack(tmp_path, monkeypatch, files: dict[str, str], lemmas: str):
    """An extra pack (a package written to ``tmp_path``, registered as ``load_plugins(extra=...)`` registers it):
    ``files`` its modules (name -> source, each ``from graphguard.ir.lemma import L`` first), ``lemmas`` the
    expression its ``graphguard_lemmas`` hook returns."""
    name = f"ggonefact{next(_names)}"
    pkg = tmp_path / name
    pkg.mkdir()
    for f, src in files.items():
        (pkg / f"{f}.py").write_text("from graphguard.ir.lemma import L\n\n" + textwrap.dedent(src))
    imports = "".join(f"from . import {f}\n" for f in files)
    (pkg / "__init__.py").write_text(f"from graphguard import hookimpl\n{imports}\n\n@hookimpl\n"
                                     f"def graphguard_lemmas():\n    return {lemmas}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return importlib.import_module(name)


def _load(mod):
    return load_plugins.__wrapped__(extra=(mod,))  # (not cached: each pack is loaded once)


def _extra_rules(plugins, *lemmas):
    for lem in lemmas:
        lem.pack = "extra"
    return compile_lemmas(list(lemmas), plugins.registry)


# -- rules restating another rule ----------------------------------------------------------------------------------

def test_the_loaded_packs_restate_a_rule_only_with_a_reason(plugins):
    assert duplicate_problems(plugins.lemmas) == []
    # every hand-written rule that equals a derived one states why it exists; none equals another hand-written one
    hand = [r for r in plugins.lemmas if not r.lemma.variant]
    derived = {normal_form(r)[0] for r in plugins.lemmas if r.lemma.variant}
    keys = [normal_form(r)[0] for r in hand]
    restating = [r for r, k in zip(hand, keys) if k in derived]
    assert all(r.lemma.duplicates for r in restating)
    assert len(set(keys)) == len(keys)
    # the reasons given are kept to the restatements that fire where the family's rule does not (no equal rule
    # with the family's guards is kept: issue 40 removed those)
    assert len({r.lemma.key for r in restating}) == 40, sorted(r.id for r in restating)


def test_a_lemma_equal_to_a_derived_rule_up_to_names_is_refused_in_one_line(tmp_path, monkeypatch):
    mod = _pack(tmp_path, monkeypatch, {"lemmas": f"""
        NUMBERS = range(9900, 10000)
        LEMMAS = [L(9901, "my-neg-of-concat", "{NEG_OF_CONCAT}")]
        """}, "lemmas.LEMMAS")
    with pytest.raises(GraphGuardError) as e:
        _load(mod)
    msg = str(e.value)
    assert "\n" not in msg
    assert re.fullmatch(r"1 lemma\(s\) restate another rule: lemma ggonefact\d+:9901 my-neg-of-concat \(.*lemmas\.py:\d+\): "
                        r"rule ggonefact\d+:9901 equals aten:1201\.aten\.neg elementwise-of-concats\[aten\.neg\] "
                        r"\(derived: .*families\.py:\d+ \(aten\.neg\)\) up to variable names; remove it, or state why "
                        r"it must exist \(L\(\.\.\., duplicates=\"\.\.\.\"\)\)", msg), msg


def test_a_lemma_equal_to_a_derived_rule_is_accepted_with_a_reason(tmp_path, monkeypatch):
    mod = _pack(tmp_path, monkeypatch, {"lemmas": f"""
        NUMBERS = range(9900, 10000)
        LEMMAS = [L(9901, "my-neg-of-concat", "{NEG_OF_CONCAT}", duplicates="kept for the example")]
        """}, "lemmas.LEMMAS")
    pl = _load(mod)
    (r,) = [r for r in pl.lemmas if r.lemma.name == "my-neg-of-concat"]
    assert r.lemma.duplicates == "kept for the example"


def test_a_lemma_dropping_a_guard_of_the_derived_rule_needs_a_reason(plugins):
    # 1203[aten.neg] holds if floating(dtype(?a0)); this one asks for shapes: it fires where the family's does not
    (r,) = _extra_rules(plugins, L(9901, "neg-of-partial-sum", NEG_OF_SUM, "shape(?p) == shape(?q)"))
    (msg,) = duplicate_problems(plugins.lemmas + [r])
    assert re.fullmatch(r"lemma extra:9901 neg-of-partial-sum \(.*test_one_fact\.py:\d+\): rule extra:9901 restates "
                        r"aten:1203\.aten\.neg linear-over-sum\[aten\.neg\] \(derived: .*\) without its guards "
                        r"\(a condition\), so it fires where the family's rule does not; remove it, or state why it "
                        r"must \(L\(\.\.\., duplicates=\"\.\.\.\"\)\)", msg), msg
    (r,) = _extra_rules(plugins, L(9901, "neg-of-partial-sum", NEG_OF_SUM, "shape(?p) == shape(?q)",
                                   duplicates="integer partial sums too"))
    assert duplicate_problems(plugins.lemmas + [r]) == []
    # a hand-written rule restating another hand-written one without its 'when' pattern: the same fact
    (r,) = _extra_rules(plugins, L(9902, "sum-swap-anywhere", "sum(sum(?a, ?b), ?c) => sum(sum(?a, ?c), ?b)"))
    (msg,) = duplicate_problems(plugins.lemmas + [r])
    assert "extra:9902 equals core:131 sum-swap-where-grouped" in msg


def test_a_lemma_adding_a_guard_restates_the_rule_and_needs_a_reason(plugins):
    # fires where the derived rule fires, and nowhere else: the same fact, accepted only with a reason
    cond = "floating(dtype(?p)) and rank(?p) >= 1"
    (r,) = _extra_rules(plugins, L(9901, "neg-of-partial-sum", NEG_OF_SUM, cond))
    (msg,) = duplicate_problems(plugins.lemmas + [r])
    assert "equals aten:1203.aten.neg linear-over-sum[aten.neg]" in msg and "without its guards" not in msg
    (r,) = _extra_rules(plugins, L(9901, "neg-of-partial-sum", NEG_OF_SUM, cond, duplicates="a narrower condition"))
    assert duplicate_problems(plugins.lemmas + [r]) == []
    # the derived rule's own guard, spelt with other names and beside another conjunct, is that guard
    (r,) = _extra_rules(plugins, L(9901, "neg-of-partial-sum", NEG_OF_SUM, "rank(?q) >= 0 and floating(dtype(?p))",
                                   duplicates="a narrower condition"))
    assert duplicate_problems(plugins.lemmas + [r]) == []


@pytest.mark.parametrize("rule,cond", [
    ("sum(aten.neg(?p), aten.neg(?q)) => aten.neg(sum(?p, ?q))", "floating(dtype(?p))"),  # the other direction
    ("aten.neg(sum(?p, ?q)) => sum(aten.neg(?q), aten.neg(?p))", "floating(dtype(?p))"),  # another right side
    ("aten.neg(sum(?p, ?p)) => sum(aten.neg(?p), aten.neg(?p))", "floating(dtype(?p))"),  # a narrower left side
    ("aten.abs(aten.neg(?x)) => aten.abs(?x)", ""),  # another fact
], ids=["reversed", "other-rhs", "one-variable-twice", "another-fact"])
def test_a_different_rule_is_not_refused(plugins, rule, cond):
    (r,) = _extra_rules(plugins, L(9901, "different", rule, cond))
    assert duplicate_problems(plugins.lemmas + [r]) == []


def test_two_equal_hand_written_rules_are_refused(plugins):
    a, b = _extra_rules(plugins, L(9901, "abs-of-neg", "aten.abs(aten.neg(?x)) => aten.abs(?x)"),
                        L(9902, "abs-of-negated", "aten.abs(aten.neg(?y)) => aten.abs(?y)", "rank(?y) >= 0"))
    (msg,) = duplicate_problems(plugins.lemmas + [a, b])
    assert re.fullmatch(r"lemma extra:9902 abs-of-negated \(.*\): rule extra:9902 equals extra:9901 abs-of-neg "
                        r"\(.*test_one_fact\.py:\d+\) up to variable names; remove one, or state why it must exist "
                        r"\(L\(\.\.\., duplicates=\"\.\.\.\"\)\)", msg), msg
    # across packs too: core:104 restated
    (r,) = _extra_rules(plugins, L(9903, "slice-of-concat-left-again",
                                   "slice(concat(?a, ?b, dim=?k), dim=?k, start=?x, end=?y) => slice(?a, dim=?k, start=?x, end=?y)",
                                   "?y <= size(?a, ?k)"))
    (msg,) = duplicate_problems(plugins.lemmas + [r])
    assert "equals core:104 slice-of-concat-left" in msg
    a, b = _extra_rules(plugins, L(9901, "abs-of-neg", "aten.abs(aten.neg(?x)) => aten.abs(?x)"),
                        L(9902, "abs-of-negated", "aten.abs(aten.neg(?y)) => aten.abs(?y)", duplicates="for the test"))
    assert duplicate_problems(plugins.lemmas + [a, b]) == []


# -- lemma numbers: a range per file -------------------------------------------------------------------------------

def test_every_pack_file_declares_its_numbers_and_no_two_overlap(plugins):
    hand = [r.lemma for r in plugins.lemmas if not r.lemma.variant]
    assert hand and all(lem.numbers and any(lem.ref in n for n in lem.numbers) for lem in hand)
    _check_numbers(hand)  # (as the loader did)
    files: dict = {}
    for lem in hand:
        files.setdefault((lem.pack, lem.where.rsplit(":", 1)[0]), set()).update(i for n in lem.numbers for i in n)
    for (p1, f1), (p2, f2) in itertools.combinations(files, 2):
        assert p1 != p2 or not files[p1, f1] & files[p2, f2], (f1, f2)
    # the ATen pack's lemmas are in files named by subject, each with a range of its own for new lemmas
    aten = {f.rsplit("/", 1)[1]: n for (p, f), n in files.items() if p == "aten"}
    assert sorted(aten) == ["attention.py", "bridges.py", "elementwise.py", "indexing.py", "losses.py",
                            "normalisation.py", "partial_sums.py", "products.py", "reductions.py", "scaling.py",
                            "views_movement.py", "vocab_lookups.py"]
    assert all(len(n) - len({lem.ref for lem in hand if lem.where.rsplit(":", 1)[0].endswith("/" + f)}) >= 50
               for f, n in aten.items())


def test_a_lemma_outside_its_files_numbers_is_refused(tmp_path, monkeypatch):
    mod = _pack(tmp_path, monkeypatch, {"lemmas": """
        NUMBERS = (range(9900, 9910), range(9950, 9960))
        LEMMAS = [L(9905, "abs-of-neg", "aten.abs(aten.neg(?x)) => aten.abs(?x)"),
                  L(9920, "neg-of-abs", "aten.abs(aten.abs(?x)) => aten.abs(?x)")]
        """}, "lemmas.LEMMAS")
    with pytest.raises(GraphGuardError) as e:
        _load(mod)
    assert re.fullmatch(r"lemma ggonefact\d+:9920 neg-of-abs \(.*lemmas\.py:\d+\): 9920 lies outside the numbers its file "
                        r"declares \(9900-9909, 9950-9959\); take a free one of those, or widen NUMBERS", str(e.value))


@pytest.mark.parametrize("decl,msg", [
    ("", r"lemma ggonefact\d+:9901 \(.*lemmas\.py:\d+\): its file declares no lemma numbers; declare them at module "
         r"level before its lemmas \(NUMBERS = range\(first, last \+ 1\)\)"),
    ("NUMBERS = [9901, 9902]", r"lemma ggonefact\d+:9901 \(.*\): NUMBERS of .*lemmas\.py must be a range or a tuple of "
                               r"ranges \(step 1, not empty\), not \(9901, 9902\)"),
], ids=["none", "not-ranges"])
def test_a_file_must_declare_its_numbers_as_ranges(tmp_path, monkeypatch, decl, msg):
    mod = _pack(tmp_path, monkeypatch, {"lemmas": f"""
        {decl}
        LEMMAS = [L(9901, "abs-of-neg", "aten.abs(aten.neg(?x)) => aten.abs(?x)")]
        """}, "lemmas.LEMMAS")
    with pytest.raises(GraphGuardError) as e:
        _load(mod)
    assert re.fullmatch(msg, str(e.value)), str(e.value)


def test_two_files_of_a_pack_with_overlapping_numbers_are_refused(tmp_path, monkeypatch):
    files = {"views": """
        NUMBERS = range(9900, 9950)
        LEMMAS = [L(9901, "abs-of-neg", "aten.abs(aten.neg(?x)) => aten.abs(?x)")]
        """, "products": """
        NUMBERS = (range(9800, 9810), range(9940, 9960))
        LEMMAS = [L(9955, "abs-of-abs", "aten.abs(aten.abs(?x)) => aten.abs(?x)")]
        """}
    mod = _pack(tmp_path, monkeypatch, files, "views.LEMMAS + products.LEMMAS")
    with pytest.raises(GraphGuardError) as e:
        _load(mod)
    assert re.fullmatch(r"lemma numbers of pack 'ggonefact\d+' overlap: \S*views\.py declares 9900-9949 and "
                        r"\S*products\.py 9940-9959; give each file its own numbers", str(e.value)), str(e.value)
    # apart, both load (numbers as ranges, one or several)
    files["products"] = files["products"].replace("range(9940, 9960)", "range(9950, 9960)")
    mod = _pack(tmp_path, monkeypatch, files, "views.LEMMAS + products.LEMMAS")
    names = {r.lemma.name for r in _load(mod).lemmas}
    assert {"abs-of-neg", "abs-of-abs"} <= names
