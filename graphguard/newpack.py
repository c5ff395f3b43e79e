"""``graphguard new-pack NAME``: a third-party lemma pack, ready to install, in one folder.

The skeleton holds what docs/lemma-packs.md ("Writing a lemma pack") describes, for one small operator: ``pyproject.toml``
(the ``graphguard.lemma_packs`` entry point NAME), the package NAME with ``__init__.py`` (the hooks), ``ops.py``
(``NAME.my_scale(x, factor)``: shape function, dtype rule, NumPy reference, declared elementwise and linear so the
engine derives those lemma families), ``lemmas.py`` (two true lemmas, ``NAME:1`` and ``NAME:2``),
``tests/test_NAME.py`` (proves / must-not-prove one-liners and the fuzzer) and a README. ``pip install -e``
the folder and ``graphguard plugins`` lists it; ``graphguard lemmas check --ref NAME:1`` fuzzes a lemma.
"""
from __future__ import annotations

import importlib.util
import keyword
import re
from importlib.metadata import entry_points
from pathlib import Path
from string import Template

from .errors import GraphGuardError

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "graphguard-$name"
version = "0.1.0"
description = "graphguard lemma pack '$name': the $name dialect's operators and lemmas"
requires-python = ">=3.10"
dependencies = ["graphguard", "numpy"]

[project.optional-dependencies]
test = ["pytest"]

# graphguard finds the pack through this entry point; its name is the pack's (lemmas $name:1, $name:2, ...)
[project.entry-points."graphguard.lemma_packs"]
$name = "$name"

[tool.setuptools]
packages = ["$name"]

[tool.pytest.ini_options]
testpaths = ["tests"]
'''

INIT = '''\
"""The $name lemma pack for graphguard (a plugin, entry point ``$name`` in group ``graphguard.lemma_packs``).

``ops.py`` says what the ``$name`` dialect's operators compute (shapes, dtypes, NumPy references), ``lemmas.py``
which identities hold between them. A third-party pack is fuzzed (``graphguard lemmas check``) the first time
it is loaded and refused if one of its lemmas fails.
"""
from graphguard.hookspecs import hookimpl

from .lemmas import LEMMAS
from .ops import OPS


@hookimpl
def graphguard_ops():
    return OPS


@hookimpl
def graphguard_lemmas():
    return LEMMAS


# A bridge pack, whose lemmas relate two dialects, may also need graph passes that move one program toward the
# other before proving (an idiom one side spells differently). Those live in the bridge pack, added to the
# pipeline by the graphguard_passes hook (graphguard/hookspecs.py; lemma_packs/aten_hlo/passes.py is one):
#
# from graphguard.passes import Pass
#
# @hookimpl
# def graphguard_passes():
#     return [Pass("my_alignment", my_alignment, requires={"scalar-forms"}, ensures={"my-aligned"},
#                  after="scalar_forms", doc="what it rewrites, into what")]
#
# my_alignment(graph, ctx) returns the number of sites it changed and edits the graph only through its API
# (Graph.rewrite, insert_node, remove_nodes); the program is validated again after it.
'''

OPS = '''\
"""Operators of the ``$name`` dialect.

A graph names an op by its dialect-qualified name: a PyTorch custom op ``$name::my_scale`` reaches the IR as
``$name.my_scale``, its tensor arguments inputs in schema order and the others attributes named as in the schema
(the fx frontend's conventions, ``lemma_packs/aten/ops/`` in graphguard). References compute on NumPy arrays.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir.ops import AttrSpec, OpDef, fail

MY_SCALE = "$name.my_scale"


def _my_scale_shape(shapes, attrs, cx):
    """The output shape from the input shapes (``cx.prove`` decides facts about symbolic sizes); ``fail`` on
    shapes the op does not accept."""
    (x,) = shapes
    return tuple(x)


def _my_scale_dtype(dtypes, attrs):
    """Floating-point inputs only: an integer tensor times a rational factor would round."""
    if dtypes[0] in ("bool", "pred") or dtypes[0].startswith(("int", "uint")):
        fail(f"{MY_SCALE}: needs a floating-point input, got {dtypes[0]}")
    return dtypes[0]


def _my_scale_ref(xs, attrs):
    return np.asarray(xs[0]) * float(attrs["factor"])


OPS = [
    # x * factor. ``factor`` is a number attribute: an exact rational (a float is its binary value). The declared
    # properties make the engine derive the standard lemma families for it ($name:1201 and on: a concatenation
    # of shards scales shard by shard, ...), each fuzzed like a hand-written lemma (``graphguard lemmas list``).
    OpDef(MY_SCALE, 1, _my_scale_shape, _my_scale_ref, (AttrSpec("factor", "number"),),
          doc="x * factor (an exact rational constant).", dtype=_my_scale_dtype, elementwise=(0,), linear=(0,)),
]
'''

LEMMAS = '''\
"""Lemmas of the ``$name`` pack: true identities over its operators, one line each.

A lemma is ``$name:NUMBER``: numbers are unique within this pack only (another pack's lemma 1 is another lemma),
and each file declares the numbers its lemmas take (``NUMBERS``, before them): the loader refuses a lemma outside
them, and two files of the pack whose numbers overlap.
A lemma fires only where its side condition is proved, and it must hold for every instance: an unsound lemma
makes graphguard certify wrong programs. ``graphguard lemmas check --ref $name:1`` fuzzes one against the NumPy
references.
"""
from graphguard.ir.lemma import L

NUMBERS = range(1, 100)  # this file's lemma numbers (a range, or a tuple of ranges)

S = "$name.my_scale"

LEMMAS = [
    # the condition keeps it exact: an inf or nan factor has no product to fold into (``finite``: a rational)
    L(1, "my-scale-of-my-scale", f"{S}({S}(?x, factor=?f), factor=?g) => {S}(?x, factor=?f * ?g)",
      "finite(?f) and finite(?g)"),
    L(2, "my-scale-by-one", f"{S}(?x, factor=1) => ?x"),
]
'''

TEST = '''\
"""The $name pack: "this proves that", "this must NOT prove that", and every lemma through the fuzzer."""
from graphguard.engine.fuzz import fuzz_rule
from graphguard.plugins import load_plugins
from graphguard.testing import proves

SHAPES = {"A": [2, 3], "B": [2, 3], "X": [4, 3]}


def test_proves():
    # $name:1: two scalings are one
    assert proves("$name.my_scale($name.my_scale(X, factor=2), factor=1/4)", "$name.my_scale(X, factor=1/2)", SHAPES)
    # $name:2 and $name:1: scaling back
    assert proves("$name.my_scale($name.my_scale(X, factor=4), factor=1/4)", "X", SHAPES)
    # a derived family (the op is declared elementwise): shards of the rows scale one by one
    assert proves("$name.my_scale(concat(A, B, dim=0), factor=3)",
                  "concat($name.my_scale(A, factor=3), $name.my_scale(B, factor=3), dim=0)", SHAPES)


def test_must_not_prove():
    assert not proves("$name.my_scale($name.my_scale(X, factor=2), factor=3)", "$name.my_scale(X, factor=5)", SHAPES)
    assert not proves("$name.my_scale(X, factor=2)", "X", SHAPES)
    # swapped shards: same shapes, other values
    assert not proves("$name.my_scale(concat(A, B, dim=0), factor=3)",
                      "concat($name.my_scale(B, factor=3), $name.my_scale(A, factor=3), dim=0)", SHAPES)


def test_every_lemma_passes_the_fuzzer():
    pl = load_plugins()  # (a pack whose lemma fails is refused here, naming it; `graphguard lemmas check` shows all)
    rules = [r for r in pl.lemmas if r.lemma.pack == "$name"]
    assert rules
    bad = [(r.id, rep.why()) for r in rules if not (rep := fuzz_rule(r, pl.registry)).ok]
    assert not bad
'''

README = '''\
# $name: a graphguard lemma pack

Operators of the `$name` dialect and lemmas about them, for graphguard's verifications of programs that call
them (`graphguard new-pack $name` wrote this skeleton).

    pip install -e .                     # registers the entry point: graphguard finds the pack
    graphguard plugins                   # lists it: graphguard.lemma_packs  $name
    graphguard lemmas list               # its lemmas, as $name:1, $name:2, ... (and those derived from its ops)
    graphguard lemmas check --ref $name:1  # fuzzes a lemma against the NumPy references
    python -m pytest                     # tests/test_$name.py

- `$name/ops.py`: each operator's typed attributes, shape function, dtype rule and NumPy reference, and its
  algebraic properties (`elementwise`, `linear`, ...), from which graphguard derives the standard lemma families.
- `$name/lemmas.py`: hand-written lemmas, `L(number, name, "lhs => rhs", condition)`; the number is unique
  within this pack (the lemma is `$name:number`) and lies in the file's declared `NUMBERS`. A lemma that restates
  a rule graphguard derives from the ops' properties (or another lemma) is refused unless it says why it must
  exist too (`L(..., duplicates="...")`).
- `$name/__init__.py`: the hooks (`graphguard_ops`, `graphguard_lemmas`) graphguard calls; a bridge pack
  between two dialects adds its alignment passes with a third, `graphguard_passes` (commented out there).
- `tests/test_$name.py`: one-line "proves" / "must not prove" tests and the fuzzer over every lemma.

A third-party pack is fuzzed the first time graphguard loads it (the verdict cached by the hash of its files) and
refused, with one line naming the lemma, if one fails. Disable it with `graphguard -p no:$name ...`.
'''

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def check_name(name: str) -> None:
    """A pack's name is its package's and its dialect's: an ASCII Python identifier, not a keyword."""
    if not NAME.fullmatch(name) or keyword.iskeyword(name):
        raise GraphGuardError(f"new-pack: {name!r} is not a valid pack name (a Python identifier: letters, digits, "
                              f"underscores, not starting with a digit, not a keyword)")


def check_free(name: str, registry) -> None:
    """The name must not be a plugin's (installed, loaded or not: plugins share one namespace), a dialect of the
    loaded operators, or an importable module."""
    from .plugins import GROUPS
    plugins = {ep.name for g in GROUPS for ep in entry_points(group=g)}
    if name in plugins:
        raise GraphGuardError(f"new-pack: {name!r} is already the name of an installed plugin")
    owner = next((op.source for op in registry if op.name.split(".", 1)[0] == name), None)
    if owner is not None:
        raise GraphGuardError(f"new-pack: {name!r} is already a dialect of loaded operators (pack {owner})")
    if importlib.util.find_spec(name) is not None:
        raise GraphGuardError(f"new-pack: {name!r} is already an importable Python module; choose another name")


def write_pack(name: str, out_dir: str | Path) -> list[Path]:
    """Write the skeleton into ``out_dir/name`` (which must not exist: nothing is overwritten); the files."""
    check_name(name)
    root = Path(out_dir) / name
    if root.exists() or root.is_symlink():
        raise GraphGuardError(f"new-pack: {root} already exists (nothing written)")
    files = {"pyproject.toml": PYPROJECT, "README.md": README, f"{name}/__init__.py": INIT, f"{name}/ops.py": OPS,
             f"{name}/lemmas.py": LEMMAS, f"tests/test_{name}.py": TEST}
    try:
        root.mkdir(parents=True)
        for rel, text in files.items():
            (root / rel).parent.mkdir(exist_ok=True)
            (root / rel).write_text(Template(text).substitute(name=name))
    except OSError as e:
        raise GraphGuardError(f"new-pack: cannot write {root}: {e.strerror or e}") from None
    return [root / rel for rel in files]
