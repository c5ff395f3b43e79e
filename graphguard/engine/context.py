"""The state of one verification: both graphs, the e-graph and its budget, and what the operators proven so far
leave for the next ones (aliases, size equalities, memo entries, provenance of every fact in R)."""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.expr import Term
from ..ir.graph import Graph
from .egraph import Budget, BudgetExceeded, EGraph
from .memo import Memo

Relation = dict[str, list[Term]]


@dataclass
class Context:
    g_s: Graph
    g_d: Graph
    egraph: EGraph
    budget: Budget
    max_exprs: int = 0  # expressions kept per tensor; 0: 16 + 4 per rank (replicated tensors have one per rank)
    stats: dict = field(default_factory=dict)
    aliases: dict = field(default_factory=dict)  # G_d tensor -> G_d tensors proven equal to it (same e-class)
    size_equalities: list = field(default_factory=list)  # (symbol, symbol it was proved equal to), in order
    structure: tuple | None = None  # G_d's constants, operators by input, outputs; G_s's outputs (gd_facts)
    memo: Memo = field(default_factory=Memo)  # per-operator results by local problem
    invertible: frozenset | None = None  # ops through which the frontier relates a class's parents (frontier.py)
    index_constants: dict = field(default_factory=dict)  # G_d index tensor -> the constant it is, or None
    ran_out: BudgetExceeded | None = None  # the current operator's search ran out of budget (partial_search)
    reused: bool = False  # the last operator took an earlier operator's result (memo.py)
    progress: object = None  # called (operators done, operators in all, node) after each G_s operator
    partial_from: dict = field(default_factory=dict)  # G_s tensor known only as partial results -> where they began
    scaled_from: dict = field(default_factory=dict)  # G_s tensor known only up to a constant factor -> where it entered
    # every fact of R: (G_s tensor, expression) -> the prover that made it (prover.py; "input" for R_i)
    provenance: dict = field(default_factory=dict)

    def __post_init__(self):
        if not self.max_exprs:
            self.max_exprs = 16 + 4 * ((self.g_d.world_size or 1) if self.g_d is not None else 1)
