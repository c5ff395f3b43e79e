"""Errors that reach the user as one line (exit code 2) rather than a traceback."""


class GraphGuardError(Exception):
    """Bad input or usage: the CLI prints ``graphguard: error: <message>`` and exits with 2."""


class InputError(GraphGuardError):
    """A malformed graph, relation, lemma or file; the message names the file and the op."""


class ShapeError(InputError):
    """An operator applied to shapes it does not accept."""


class UnsoundLemmaError(Exception):
    """A lemma produced a union whose two sides disagree (shape or value): a bug in a lemma pack."""
