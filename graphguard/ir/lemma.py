"""Lemmas as data: :class:`Lemma` and :func:`L`, the constructor lemma packs call (``from graphguard.ir.lemma
import L``), and :func:`keeps_order`, a shape test packs' condition functions use. Packs depend on the IR only;
the engine compiles lemmas into rules (:mod:`graphguard.engine.lemma`: patterns, conditions, ``FUNCTIONS``).

A lemma is one line -- a numeric reference, a name, ``lhs => rhs`` (or ``lhs <=> rhs`` for both directions), an
optional side condition, and where the left side must exist. Its identity is ``pack:number`` (``core:104``: the
pack's entry-point name, a number unique within that pack)::

    L(104, "slice-of-concat-left",
      "slice(concat(?p, ?q, dim=?d), dim=?d, start=?s, end=?e) => slice(?p, dim=?d, start=?s, end=?e)",
      "?e <= size(?p, ?d)")
"""
from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass
class Lemma:
    ref: int
    name: str
    rule: str
    cond: str = ""
    exists: str = "root"
    where: str = ""
    pack: str = ""
    examples: tuple = ()  # seeds for the fuzzer: ({"a": [2, 3], "d": 0, ...}, ...) -- tensor shapes, attrs
    when: str = ""  # a pattern that must also exist as an e-node (a constrained lemma, §4.3)
    index: tuple = ()  # ((var, bound), ...): tensor variables holding indices, fuzzed as integers in [0, bound)
    variant: str = ""  # a lemma of a family (engine/families.py): the op it is stated for (its rules' ids name it)
    late: bool = False  # run only in the searches after the label provers' equalities (EGraph.late)
    tensors: tuple = ()  # variables whose e-class must hold a G_d tensor (a leaf) for the lemma to fire
    family: tuple = ()  # a derived lemma's (family name, op) (engine/families.py)
    duplicates: str = ""  # why a rule equal to another (a derived one's) must exist too; the loader refuses it else
    numbers: tuple = ()  # the numbers its file declares (module-level ``NUMBERS``): ranges; the loader enforces them

    @property
    def key(self) -> tuple[str, int]:
        """The lemma's identity: (pack, number). Numbers are unique within a pack only (a derived lemma shares
        its family's number with the family's other lemmas of that pack: ``variant`` tells them apart)."""
        return (self.pack, self.ref)

    @property
    def label(self) -> str:
        """The lemma as named to a user: ``aten:470`` (the pack as its entry point registers it; the bare
        number while it belongs to none, as a lemma built by hand)."""
        return f"{self.pack}:{self.ref}" if self.pack else str(self.ref)

    def text(self) -> str:
        """The rule with its condition and how it fires."""
        c = f"  if {self.cond}" if self.cond else ""
        w = f"  when {self.when} exists" if self.when else ""
        w += "  where a tensor holds it" if self.exists == "tensor" else ""
        w += "  (late)" if self.late else ""
        return f"{self.rule}{c}{w}"

    def __str__(self) -> str:
        return f"[{self.label}] {self.name}: {self.text()}"


# the reason of a lemma kept although it restates a family's rule without that rule's guards (L(duplicates=))
KEPT_UNGUARDED = ("fires without a guard of the family rule it restates; removing such restatements changed verdicts (HF gpt_neox at TP 2 needs core 122/123 both ways; the HF/NeuronX Llama layer at TP 4 needs 1303): kept until each is shown unneeded")


def L(ref: int, name: str, rule: str, cond: str = "", exists: str = "root", examples: tuple = (),
      when: str = "", index: dict | None = None, late: bool = False, tensors: tuple = (),
      duplicates: str = "") -> Lemma:
    """Declare a lemma (records the caller's file:line). ``examples`` seed the fuzzer where random shapes
    rarely satisfy the pattern; they are checked numerically like any other instance. ``index``
    (``{"i": "size(?a, 0)"}``) names tensor variables that hold indices and the bound of the left side's
    domain (torch raises outside [0, bound)); the fuzzer draws them as integers in [0, bound). ``late``: the
    lemma runs only in the search that follows layouts proven on labelled entries (``engine/labels``), where
    rows of several ranks interleave; everywhere, it would grow every concatenation of slices. ``tensors``:
    variables that must stand for an e-class holding a G_d tensor (a rank's own rows, not any sub-term).
    ``duplicates``: why the lemma must exist although one of its rules equals another loaded rule (a family's
    derived rule or another pack lemma's) up to the names of its variables -- e.g. a cheaper firing condition, or
    a guard of the family's rule it drops (it fires where the family's does not) that a search needs; without it
    the plugin loader refuses such a lemma (engine/lemma.py, :func:`~graphguard.engine.lemma.duplicate_problems`).

    The calling module declares the numbers its lemmas take, before them: ``NUMBERS = range(1300, 1310)``, or
    several ranges, ``NUMBERS = (range(300, 470), range(490, 500))``. The plugin loader refuses a lemma outside its
    file's numbers, a file without them, and two files of one pack whose numbers overlap."""
    f = sys._getframe(1)
    decl = f.f_globals.get("NUMBERS")
    numbers = () if decl is None else tuple(decl) if isinstance(decl, (tuple, list)) else (decl,)
    return Lemma(ref, name, rule, cond, exists, f"{f.f_code.co_filename}:{f.f_lineno}", examples=tuple(examples),
                 when=when, index=tuple((index or {}).items()), late=late, tensors=tuple(tensors),
                 duplicates=duplicates, numbers=numbers)


def keeps_order(cx, shape, p) -> bool:
    """Does permuting ``shape`` by ``p`` keep the order of its dims that are not (provably) of size 1 -- a
    permute that moves no data?"""
    p = [int(i) for i in p]
    if sorted(p) != list(range(len(shape))):
        raise ValueError("not a permutation of the operand's dims")
    kept = [i for i in p if not cx.prove("==", shape[i], 1)]
    return kept == sorted(kept)
