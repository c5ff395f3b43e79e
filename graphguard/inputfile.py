"""Reading input files: the checks every reader shares, so that each malformed file ends in ONE
:class:`InputError` naming it.

* :func:`read_bytes` / :func:`read_text`: a regular file (not a folder, device or pipe), read whole;
* :func:`load_json`: strict JSON -- no NaN/Infinity, no duplicate keys, no lone surrogates, numbers within
  range, nesting within :data:`MAX_DEPTH`;
* :func:`malformed`: a context for the code that walks a parsed document of a foreign format (an exported
  program, a protobuf): the lookups such code does on a document of the wrong shape (``KeyError``,
  ``TypeError``...) become one error naming the file. It wraps only reading a document into the project's
  own structures, never the engine.
"""
from __future__ import annotations

import json
import re
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

MAX_DEPTH = 200  # nesting levels of a JSON or YAML document; real inputs use fewer than 20


def regular_file(path: str | Path) -> Path:
    """``path``, after checking that it is a regular file (a folder, device or pipe is one InputError)."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"{path}: is a folder, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"{path}: not a regular file")
    return path


def read_bytes(path: str | Path) -> bytes:
    path = regular_file(path)
    try:
        return path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from None


def read_text(path: str | Path, hint: str = "wrong file or wrong --frontend?") -> str:
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not a UTF-8 text file (byte {e.start}; {hint})") from None


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"key '{k}' appears twice in one object")
            seen.add(k)
    return out


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def _float(text: str) -> float:
    v = float(text)
    if v in (float("inf"), float("-inf")):
        raise ValueError(f"number {text[:40]} is out of range")
    return v


_SURROGATE = re.compile(r"\\u[dD][89a-fA-F]")
_LONE = re.compile("[\ud800-\udfff]")


def _check_strings(doc: Any) -> None:
    stack = [doc]
    while stack:
        x = stack.pop()
        if isinstance(x, str):
            if _LONE.search(x):
                raise ValueError(f"string {x[:40]!r} holds an unpaired surrogate (not Unicode text)")
        elif isinstance(x, dict):
            stack += list(x) + list(x.values())
        elif isinstance(x, list):
            stack += x


def nesting(text: str | bytes, brackets: str = "[]{}") -> int:
    """How deep ``brackets`` (pairs: open, close) nest in ``text``, counting brackets inside strings too.
    Checked before parsing, so that a recursion bomb fails fast and by name."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    b = np.frombuffer(data, np.uint8)
    step = np.zeros(256, np.int8)
    step[[ord(c) for c in brackets[::2]]], step[[ord(c) for c in brackets[1::2]]] = 1, -1
    return int(np.cumsum(step[b], dtype=np.int64).max(initial=0))


def load_json(data: str | bytes, source: str, what: str = "JSON") -> Any:
    """Parse strict JSON; any problem is one InputError naming ``source``."""
    try:
        if nesting(data) > MAX_DEPTH:
            raise InputError(f"{source}: {what} nested more than {MAX_DEPTH} levels deep")
        doc = json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constant, parse_float=_float)
        if _SURROGATE.search(data if isinstance(data, str) else data.decode("utf-8", "replace")):
            _check_strings(doc)
        return doc
    except json.JSONDecodeError as e:
        raise InputError(f"{source}: not valid {what} ({e.msg} at line {e.lineno}, column {e.colno})") from None
    except RecursionError:
        raise InputError(f"{source}: {what} nested too deeply") from None
    except ValueError as e:  # our hooks, UnicodeDecodeError, and int() of numbers with too many digits
        raise InputError(f"{source}: not valid {what} ({e})") from None


@contextmanager
def malformed(source: str, what: str):
    """Turn the errors of walking a document of the wrong shape into one InputError naming ``source``."""
    try:
        yield
    except InputError:
        raise
    except RecursionError:
        raise InputError(f"{source}: malformed {what} (nested too deeply)") from None
    except (KeyError, IndexError, TypeError, AttributeError, ValueError, StopIteration) as e:
        detail = f"missing {e}" if isinstance(e, KeyError) else str(e) or type(e).__name__
        raise InputError(f"{source}: malformed {what} ({detail})") from None
