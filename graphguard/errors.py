"""Errors that reach the user as one line (exit code 2) rather than a traceback."""


class GraphGuardError(Exception):
    """Bad input or usage: the CLI prints ``graphguard: error: <message>`` and exits with 2."""


class InputError(GraphGuardError):
    """A malformed graph, relation, lemma or file; the message names the file and the op."""


class ShapeError(InputError):
    """An operator applied to shapes it does not accept."""


class UnsoundLemmaError(Exception):
    """A lemma produced a union whose two sides disagree (shape or value): a bug in a lemma pack."""


def printable(text: str) -> str:
    """``text`` with control characters (newlines, escapes, NUL), unpaired surrogates and other unprintable
    characters escaped: user strings (tensor names, source locations) never break a report's lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
