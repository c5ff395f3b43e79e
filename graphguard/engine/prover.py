"""Provers: the ways R_v is proven for one G_s operator, as data.

A :class:`Prover` has a ``name`` (its provenance in the certificate), an applicability test stated by the
operator's declared properties (:class:`graphguard.ir.ops.OpDef`: ``bilinear``, ``elementwise``,
``data_movement``, ``rows``/``rowwise``, ``clean``/``meaning``/``broadcast``), a ``stage`` and
``prove(query) -> facts``, each :class:`Fact` carrying the prover's name and its case
(``labels.products:positions``). The order in which they are asked is one list, ``infer.PROVERS``, with the
rules of that order written beside it; the stages are:

- ``first``: asked before the search, in list order; the first whose facts answer v's output ends the
  operator (the same proof, entry by entry on labels, at a fraction of the search's cost);
- ``search``: the e-graph searches of Listing 2 (each runs while an output has no clean expression); their
  facts record the lemmas that fired (``search [lemmas aten:224 core:127]``);
- ``late``: asked by the last search where the others left an output without a clean expression: equalities
  proven on labels that it adds to the e-graph. Of the ``answers`` provers only the first that answers is
  asked further (its facts are also kept as the output's expressions); the others add equalities.

Nothing here decides anything: the label proofs are in :mod:`graphguard.engine.labels`, the searches in
:mod:`graphguard.engine.infer`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from ..ir.expr import Term
from ..ir.graph import Node
from ..ir.ops import OpDef

STAGES = ("first", "search", "late")


@dataclass(frozen=True)
class Fact:
    """``lhs = rhs`` proven by ``by`` (a prover's name, with its case after a colon). ``lhs``: the name of one of
    v's outputs (``rhs`` is then an expression of it over G_d tensors), or a term over v's inputs' relations (an
    equality for the e-graph)."""
    lhs: str | Term
    rhs: Term
    by: str


@dataclass
class Query:
    """One G_s operator's problem as the provers see it: ``v``, the relation ``R`` so far, and -- for the late
    provers -- the last search's snapshot, the G_d tensors it explored and ``grow`` (add G_d facts, saturate,
    return the new snapshot). ``facts``: what the provers asked before, in this stage, proved (a later one may
    read them); ``aliases``: G_d tensors a prover showed equal (tensor, {tensors})."""
    ctx: object
    v: Node
    R: dict
    const_of: Callable | None = None
    snap: object = None
    explored: set = field(default_factory=set)
    grow: Callable | None = None
    facts: list = field(default_factory=list)
    aliases: list = field(default_factory=list)
    search: object = None  # what the searches of one operator share (infer.py)

    @property
    def op(self) -> OpDef | None:
        return self.ctx.egraph.reg.get(self.v.op)


@dataclass(frozen=True)
class Prover:
    """A way to prove v's outputs. ``applies(op, v)``: by op's declared properties (a cheap test; ``prove`` may
    still find nothing). ``answers``: (late provers) its facts are v's output's expressions, and the first such
    prover that answers is the only one asked; else its facts are equalities for the e-graph. ``to_outputs``:
    (first provers) an answer for an output of G_s must name G_d's outputs -- carried there through sums where
    it does not -- or the search runs."""
    name: str
    stage: str
    applies: Callable[[OpDef | None, Node], bool]
    prove: Callable[[Query], list]
    doc: str = ""
    answers: bool = False
    to_outputs: bool = True

    def __post_init__(self):
        if self.stage not in STAGES:
            raise ValueError(f"prover {self.name}: stage {self.stage!r} is not one of {', '.join(STAGES)}")

    def ask(self, q: Query) -> list[Fact]:
        """``prove(q)`` where the operator's declared properties say this prover applies; [] elsewhere."""
        return list(self.prove(q)) if self.applies(q.op, q.v) else []


# -- applicability by declared property --------------------------------------------------------------------

def any_op(op: OpDef | None, v: Node) -> bool:
    """Every operator (the searches; label proofs whose reference evaluation decides)."""
    return True


def moves_data(op: OpDef | None, v: Node) -> bool:
    """A clean op (data movement, the certificate's dialect), one defined by clean terms (``meaning``:
    collectives, split) or a broadcast (``broadcast``/``broadcast_to``)."""
    return op is not None and (op.clean or op.meaning is not None or bool(op.broadcast or op.broadcast_to))


def bilinear(op: OpDef | None, v: Node) -> bool:
    """A product of two inputs over contracted dims (``OpDef.bilinear``)."""
    return op is not None and op.bilinear is not None and len(v.inputs) == 2


def elementwise(op: OpDef | None, v: Node) -> bool:
    """Elementwise in every tensor input (``OpDef.elementwise``)."""
    return op is not None and bool(v.inputs) and sorted(op.elementwise) == list(range(len(v.inputs)))


def data_movement(op: OpDef | None, v: Node) -> bool:
    """Every output entry a copy of an entry of input 0 (``OpDef.data_movement``)."""
    return op is not None and op.data_movement


def row_wise(op: OpDef | None, v: Node) -> bool:
    """Each output row a function of one input's row (``OpDef.rows`` or ``OpDef.rowwise``)."""
    return op is not None and bool(op.rows or op.rowwise)


def check_order(provers: list[Prover]) -> list[Prover]:
    """The list, checked: each prover named once, the stages in order (first, search, late, then the search that
    reads the late provers' facts)."""
    names = [p.name for p in provers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"provers named twice: {', '.join(twice)}")
    firsts = [i for i, p in enumerate(provers) if p.stage == "first"]
    searches = [i for i, p in enumerate(provers) if p.stage == "search"]
    if firsts and searches and max(firsts) > min(searches):
        raise ValueError("a first prover after a search")
    return provers
