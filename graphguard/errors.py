"""Errors that reach the user as one line (exit code 2) rather than a traceback."""


class GraphGuardError(Exception):
    """Bad input or usage: the CLI prints ``graphguard: error: <message>`` and exits with 2."""


class InputError(GraphGuardError):
    """A malformed graph, relation, lemma or file; the message names the file and the op."""


class ShapeError(InputError):
    """An operator applied to shapes it does not accept."""


class ForwardVerdict(Exception):
    """``capture --backward`` derives the gradient fed into each output from the forward's certificate; a forward
    that does not refine (or is inconclusive) has none. Not bad input: the CLI prints the forward's report
    (``result``) and exits with its verdict's code (1 does not refine, 3 inconclusive), saying the backward was
    not derived."""

    def __init__(self, where: str, result, tangents: list[str]):
        self.where, self.result, self.tangents = where, result, tangents
        verdict = "does not refine" if result.verdict == "does-not-refine" else f"is {result.verdict}"
        super().__init__(f"{where}: the forward {verdict}, so the backward was not derived "
                         f"(the gradient fed into {', '.join(t[len('tangent.'):] for t in tangents)} is laid out as "
                         f"the forward's certificate says, and there is none); fix the forward first")


class UnsoundLemmaError(Exception):
    """A lemma produced a union whose two sides disagree (shape or value): a bug in a lemma pack."""


def printable(text: str) -> str:
    """``text`` with control characters (newlines, escapes, NUL), unpaired surrogates and other unprintable
    characters escaped: user strings (tensor names, source locations) never break a report's lines."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else c.encode("unicode_escape", "backslashreplace").decode("ascii")
                   for c in text)
