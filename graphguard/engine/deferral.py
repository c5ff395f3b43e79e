"""Deferral (Listing 1): an operator whose outputs have no clean expression is carried as terms to its readers,
which may rescue it; a failure is reported at the earliest operator no reader rescued (:class:`Carried`)."""
from __future__ import annotations

from ..ir.expr import Term, substitute
from ..ir.graph import Graph, Node
from .context import Context, Relation
from .result import Failure


class Carried:
    """The deferred G_s tensors (outputs of operators without a clean expression, carried to their readers as
    the operator applied to its inputs' expressions) and the failures, for the report of Listing 1.

    Rules: (1) a deferred tensor's *origin* is the operator where deferring began -- the operator itself, or
    the earliest origin of its deferred inputs (origins follow every reader, not only the next one); (2) a reader
    that finds clean expressions for its outputs *rescues* its deferred inputs and, through them, the deferred
    tensors they were computed from; (3) a failure of an operator reading deferred tensors is charged to their
    earliest origin; (4) after the first failure, only the operators that can still rescue a deferred tensor
    of an earlier origin are processed (those reading a failed tensor fail with it); (5) the report names the
    earliest (topological order) of the charged failures and the origins of the deferred tensors not rescued:
    the first operator whose outputs cannot be mapped, deferral or not -- what the walk reports with no
    deferral, unless a reader rescues that operator's outputs."""

    def __init__(self, g_s: Graph, order: dict[str, int]):
        self.g_s, self.order = g_s, order
        self.origin: dict[str, tuple[Failure, str]] = {}  # deferred tensor -> (failure, verdict) at its origin
        self.depth_of: dict[str, int] = {}  # deferred tensor -> operators in a row deferred up to it
        self.parents: dict[str, list[str]] = {}  # deferred tensor -> the deferred inputs it was computed from
        self.rescued: set[str] = set()
        self.failed: tuple[Failure, str] | None = None  # the earliest failure charged so far
        self.poisoned: set[str] = set()  # tensors of failed operators (and of their readers, after a failure)
        self._needed: set[str] | None = None  # operators to process after a failure (None: to compute)

    def _at(self, fv: tuple[Failure, str]) -> int:
        return self.order[fv[0].node]

    def _deferred_inputs(self, v: Node) -> list[str]:
        return [t for t in dict.fromkeys(v.inputs) if t in self.origin]

    def depth(self, v: Node) -> int:
        """The operators in a row deferred if ``v`` is."""
        return 1 + max((self.depth_of[t] for t in self._deferred_inputs(v)), default=0)

    def can_defer(self, v: Node) -> bool:
        """Whether ``v`` may be deferred: at most MAX_DEFERRED operators in a row."""
        return self.depth(v) <= MAX_DEFERRED

    def _charged(self, v: Node, failure: Failure, verdict: str) -> tuple[Failure, str]:
        before = [self.origin[t] for t in self._deferred_inputs(v)]
        return min(before, key=self._at) if before else (failure, verdict)

    def defer(self, v: Node, outputs: list[str], failure: Failure, verdict: str) -> None:
        origin, depth, parents = self._charged(v, failure, verdict), self.depth(v), self._deferred_inputs(v)
        for o in outputs:
            self.origin[o], self.depth_of[o], self.parents[o] = origin, depth, parents
        self._needed = None

    def rescue(self, v: Node) -> None:
        """``v`` found clean expressions for all its outputs: its deferred inputs were right after all."""
        todo = self._deferred_inputs(v)
        while todo:
            t = todo.pop()
            if t not in self.rescued:
                self.rescued.add(t)
                todo.extend(self.parents[t])
                self._needed = None

    def fail(self, v: Node, failure: Failure, verdict: str) -> None:
        charged = self._charged(v, failure, verdict)
        if self.failed is None or self._at(charged) < self._at(self.failed):
            self.failed = charged
        self.poisoned.update(v.outputs)
        self._needed = None

    def unrescued(self) -> list[str]:
        return [t for t in self.origin if t not in self.rescued]

    def _open(self) -> list[str]:
        """Deferred tensors not rescued (yet) whose origin is before the earliest failure: a reader of theirs
        still to process decides whether the report is their origin."""
        return [t for t in self.unrescued() if self._at(self.origin[t]) < self._at(self.failed)]

    def settled(self) -> bool:
        return not self._open()

    def settles(self, v: Node, R: Relation) -> bool:
        """After a failure: whether to process ``v`` -- an operator that may rescue an open deferred tensor
        (a reader, within the deferrals a chain still allows), or one those need; it fails with its inputs'
        failures (and with a skipped input: what it would need was not computed)."""
        if self._needed is None:
            self._needed = self._needed_ops(R)
        if v.name not in self._needed:
            return False
        if any(t in self.poisoned or t not in R for t in v.inputs):
            self.poisoned.update(v.outputs)  # (charged to nothing: the failure it inherits is charged already)
            return False
        return True

    def _needed_ops(self, R: Relation) -> set[str]:
        known = lambda n: all(o in R or o in self.poisoned for o in n.outputs)
        targets, level = [], [(t, self.depth_of[t]) for t in self._open()]
        while level:  # the readers of open tensors, and theirs while they could be deferred again
            nxt = []
            for t, d in level:
                for n in self.g_s.consumers.get(t, ()):
                    if known(n):
                        continue
                    targets.append(n)
                    if d + 1 <= MAX_DEFERRED:
                        nxt.extend((o, d + 1) for o in n.outputs)
            level = nxt
        needed, todo = set(), list(targets)
        while todo:  # ... and the operators computing their inputs
            n = todo.pop()
            if n.name in needed:
                continue
            needed.add(n.name)
            todo.extend(p for t in n.inputs if (p := self.g_s.producer.get(t)) is not None and not known(p))
        return needed

    def report(self) -> tuple[Failure, str]:
        """The earliest of the failures charged and the origins of the deferred tensors no reader rescued."""
        return min([self.failed] * (self.failed is not None) + [self.origin[t] for t in self.unrescued()],
                   key=self._at)


def definitions(ctx: Context, v: Node, R: Relation) -> dict[str, Term]:
    """For a deferred operator: each input that an operator computed, as that operator's term over its own
    inputs' expressions (the same value as the input's clean expression, which that operator's search proved
    from this very term). A reader then also sees how the input was made -- the one-hot that PyTorch's
    cross-entropy backward scatters, multiplied by the upstream gradient, inside log_softmax's backward, which
    the ranks compute fused."""
    out = {}
    for t in dict.fromkeys(v.inputs):
        n = ctx.g_s.producer.get(t)
        if n is None or any(not R.get(x) for x in n.inputs) or t in ctx.g_s.inputs:
            continue
        term = ctx.g_s.node_terms(n)[n.outputs.index(t)]
        out[t] = substitute(term, {x: R[x][0] for x in n.inputs})
    return out


MAX_DEFERRED = 2  # operators in a row whose outputs are carried as terms to their readers (no clean expression)
