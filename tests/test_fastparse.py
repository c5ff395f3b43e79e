"""The relation language's fast parser agrees with its Lark grammar: the same value wherever it answers, no
answer wherever Lark rejects the text (graphguard/ir/fastparse.py)."""
import random

import pytest
from lark.exceptions import LarkError

from graphguard.ir import fastparse
from graphguard.ir import relation as R
from graphguard.plugins import load_plugins


def _lark(text, start):
    try:
        return R._ToRaw().transform(R._PARSER.parse(text, start=start))
    except (LarkError, RecursionError):
        return None


@pytest.fixture(scope="module")
def lemma_texts():
    """Every pattern and condition the built-in lemma packs parse."""
    seen = []
    real = fastparse.parse

    def record(text, start):
        seen.append((text, start))
        return real(text, start)
    fastparse.parse = record
    try:
        load_plugins.__wrapped__()  # (not the cached plugins other tests share)
    finally:
        fastparse.parse = real
    return sorted(set(seen))


def test_every_lemma_text_parses_alike(lemma_texts):
    assert len(lemma_texts) > 1000
    for text, start in lemma_texts:
        fast = fastparse.parse(text, start)
        assert fast is not None, (text, start)  # the fast path takes them all
        assert fast == _lark(text, start), (text, start)


WORDS = ["x", "x@0", "W.b", "dim#1", "?a", "?b", "concat", "sum", "f", "size", "(", ")", "[", "]", ",", "=", "==",
         "!=", "<", "<=", ">", ">=", "+", "-", "*", "/", "//", "and", "or", "not", "true", "None", "0", "12", "1.5",
         "2.", "3e4", "1.0e-3", '"s"', '"a\\"b"', "@1", "?", "and2", "@", "#", ".", "x @0"]


@pytest.mark.parametrize("start", ["expr", "cond"])
def test_random_texts_parse_alike_or_fall_back(start):
    rng = random.Random(7)
    answered = 0
    for _ in range(20000):
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9)))
        if rng.random() < 0.5:
            text = text.replace(" ", "")
        fast = fastparse.parse(text, start)
        if fast is not None:
            answered += 1
            assert fast == _lark(text, start), text
    assert answered > 100  # (the generator reaches well-formed texts)


def test_errors_still_come_from_the_grammar():
    with pytest.raises(R.ParseError, match=r"<e>:1:\d+: unexpected"):
        R.parse_cond("?a < ?b < ?c", "<e>")
    with pytest.raises(R.ParseError, match="positional argument after keyword argument"):
        R.parse_raw("concat(?a, dim=1, ?b)", "<e>")
