"""The label proofs as provers (:mod:`graphguard.engine.prover`): each entry point of this package with its name,
the operators it applies to by declared property, and its facts. Their order is ``infer.PROVERS``."""
from __future__ import annotations

from ...ir.expr import App, Term, flat_args, leaves
from ..prover import Fact, Prover, Query, any_op, bilinear, data_movement, elementwise, moves_data, row_wise
from .elementwise import elementwise_outputs
from .inputs import relayouts
from .movement import moved_outputs, movement_first
from .poly import sum_outputs
from .products import products_first
from .rows import rows_through


def _movement_first(q: Query) -> list[Fact]:
    exprs, aliases = movement_first(q.ctx, q.v, q.R, q.const_of)
    q.aliases = aliases
    return [Fact(q.v.outputs[0], e, "labels.movement") for e in exprs]


def _products_first(q: Query) -> list[Fact]:
    found = products_first(q.ctx, q.v, q.R, q.const_of)[:1]
    return [Fact(q.v.outputs[0], t, f"labels.products:{case}") for case, t in found]


def _elementwise_first(q: Query) -> list[Fact]:
    """Only where an input is known only as the ranks' rows interleaved, or G_d spells a ``where`` in another
    dialect: there the search would not end in time (see ELEMENTWISE_FIRST)."""
    if not (any(q.R.get(x) and all(_interleaved(e) for e in q.R[x]) for x in q.v.inputs) or _other_dialects(q)):
        return []
    eqs = elementwise_outputs(q.ctx, None, q.v, q.R, set(), None, q.const_of)
    return [Fact(q.v.outputs[0], t, ELEMENTWISE_FIRST.name) for t in dict.fromkeys(t for _, t in eqs)]


INTERLEAVED = 4  # slices of a concatenation from which it is the ranks' rows interleaved (layout.chunks)


def _interleaved(t: Term) -> bool:
    """Whether ``t`` holds a concatenation of at least INTERLEAVED slices of two or more tensors: rows of
    several ranks interleaved one by one (layout.chunks writes them so)."""
    if not isinstance(t, App):
        return False
    if t.op == "core.concat":
        parts = flat_args(t)
        if len(parts) >= INTERLEAVED and all(isinstance(a, App) and a.op == "core.slice" for a in parts) \
                and len({leaf for a in parts for leaf in leaves(a)}) > 1:
            return True
    return any(_interleaved(a) for a in t.args)


def _other_dialects(q: Query) -> bool:
    """Is v a selection (``where``) that G_d spells only in another dialect? Its lemmas then state it with every
    operand's broadcast made explicit, each way (family 1220), and the search over them grows with the operands'
    forms (HF's masked scores against XLA's select at Llama-3.2-1B's dims, TP 1: 38 s); its G_d counterpart is
    found on labels instead (its other-dialect counterparts by the same lemmas)."""
    op, v = q.op, q.v
    if op is None or op.computes != "where" or sorted(op.elementwise) != list(range(len(v.inputs))):
        return False
    return not any(n.op == v.op for n in q.ctx.g_d.nodes)


def _late(name: str, fn):
    def prove(q: Query) -> list[Fact]:
        return [Fact(lhs, rhs, name) for lhs, rhs in fn(q.ctx, q.snap, q.v, q.R, q.explored, q.grow, q.const_of)]
    return prove


def _relayouts(q: Query) -> list[Fact]:
    eqs = relayouts(q.ctx, q.snap, q.v, q.R, q.explored, q.grow, q.const_of)
    return [Fact(lhs, rhs, "labels.relayouts") for lhs, rhs in eqs]


def _rows(q: Query) -> list[Fact]:
    """Through a row-wise operator, also on the inputs' layouts the provers before proved (``q.facts``)."""
    ins = {x: [f.rhs for f in q.facts if f.lhs in q.R.get(x, ())] + list(q.R.get(x, ())) for x in q.v.inputs}
    return [Fact(lhs, rhs, "labels.rows") for lhs, rhs in rows_through(q.ctx, q.v, {**q.R, **ins})]


MOVEMENT_FIRST = Prover(
    "labels.movement", "first", moves_data, _movement_first,
    "a data-movement operator (a transpose, a view, a broadcast) of sharded inputs: its output as the same data "
    "over its G_d counterparts' outputs (what the search proves at many times the cost)")
PRODUCTS_FIRST = Prover(
    "labels.products", "first", bilinear, _products_first,
    "a product of views against another dialect's products, on the pairs of entries each output entry sums")
ELEMENTWISE_FIRST = Prover(
    "labels.elementwise.first", "first", elementwise, _elementwise_first,
    "an elementwise operator of the ranks' rows interleaved (the search would distribute it over every slice "
    "and grouping: Megatron's MoE at TP x EP, 50 s -> 0.1 s), or a where G_d spells in another dialect",
    to_outputs=False)
MOVED = Prover(
    "labels.moved", "late", data_movement, _late("labels.moved", moved_outputs),
    "data movement at constant indices (a gather by a constant order), evaluated on labels", answers=True)
ELEMENTWISE = Prover(
    "labels.elementwise", "late", elementwise, _late("labels.elementwise", elementwise_outputs),
    "an elementwise operator of inputs in layouts its counterparts do not share", answers=True)
POLY = Prover(
    "labels.poly", "late", any_op, _late("labels.poly", sum_outputs),
    "an operator that adds and multiplies (its reference on polynomials) as the sum of the ranks' partial results",
    answers=True)
RELAYOUTS = Prover(
    "labels.relayouts", "late", any_op, _relayouts,
    "an input related in one layout, written over the inputs its G_d counterparts read (another layout)")
ROWS = Prover(
    "labels.rows", "late", row_wise, _rows,
    "a row-wise operator of rows its counterparts read in another order: the same rows of the operator of them")
