"""What a graph pass is, and the pass manager that runs the pipeline (onnx-ir's pass infrastructure is the model).

A :class:`Pass` is data: a name, the function that rewrites one program, the properties it **requires** of
the program (established by passes before it) and those it **ensures** after it ran, and where it was written
(file:line, for messages). The pipeline is an ordered list (``graphguard.passes.PIPELINE``); a plugin adds a
pass with the ``graphguard_passes`` hook, naming the pass it runs ``after``. :func:`build_pipeline` splices
the contributed passes in and checks that every pass's requirements are ensured by an earlier one;
:func:`run_pipeline` runs each pass on the specification, then on the implementation, and validates the
program again after each pass (:meth:`Graph.revalidate`): a pass that leaves it invalid is named.

A pass mutates the graph only through its API (:meth:`Graph.rewrite`, :meth:`~Graph.insert_node`,
:meth:`~Graph.remove_nodes`) and returns the number of sites it changed.
"""
from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..errors import GraphGuardError, InputError
from ..ir import scalar as S
from ..ir.graph import Graph
from ..ir.ops import Registry


class PassError(GraphGuardError):
    """A pipeline that cannot be built (a requirement no earlier pass ensures, a name given twice, an unknown
    ``after``), or a pass that left its program invalid; the message names the pass and where it is written."""


@dataclass
class PassContext:
    """What a pass sees besides the program it rewrites."""
    reg: Registry
    cx: S.Constraints
    role: str = "spec"  # the program's role: "spec" (G_s) or "impl" (G_d)
    other: Graph | None = None  # the program it is compared with (as the passes left it so far)
    rel: object = None  # the relation file (graphguard.ir.relation.RelationFile), where there is one
    loaded_ops: dict = field(default_factory=dict)  # role -> the operators the program called as loaded
    assumed: list = field(default_factory=list)  # what a rewrite rests on beyond the relation (the report's)

    def assume(self, text: str) -> None:
        self.assumed.append(text)


def _where(depth: int) -> str:
    f = sys._getframe(depth)
    path = Path(f.f_code.co_filename)
    for top in path.parents:  # the path from the package's parent: graphguard/passes/__init__.py
        if not (top / "__init__.py").exists():
            try:
                return f"{path.relative_to(top)}:{f.f_lineno}"
            except ValueError:
                break
    return f"{path.name}:{f.f_lineno}"


@dataclass(frozen=True)
class Pass:
    """One graph pass: ``run(graph, ctx) -> number of sites changed``.

    ``requires``: properties of the program that earlier passes ensure and this one reads (checked when the
    pipeline is built); ``ensures``: what holds after it ran; ``after``: for a pass a plugin contributes, the
    pass it runs right after (None: at the end); ``source``: the plugin that contributed it."""
    name: str
    run: Callable[[Graph, PassContext], int]
    requires: frozenset = frozenset()
    ensures: frozenset = frozenset()
    after: str | None = None
    doc: str = ""
    source: str = "graphguard"
    where: str = field(default="", compare=False)

    def __post_init__(self):
        object.__setattr__(self, "requires", frozenset(self.requires))
        object.__setattr__(self, "ensures", frozenset(self.ensures))
        if not self.where:
            object.__setattr__(self, "where", _where(3))  # (__post_init__ <- __init__ <- the caller)

    def __repr__(self) -> str:
        return f"Pass({self.name}, {self.where})"


def build_pipeline(core, contributed=()) -> list[Pass]:
    """``core`` in order, each contributed pass placed right after the pass it names (after any placed there
    before it); every pass's requirements ensured by an earlier pass."""
    out = list(core)
    names = {p.name: p for p in out}
    for p in contributed:
        if p.name in names:
            raise PassError(f"graph pass '{p.name}' ({p.where}, plugin {p.source}) is defined twice (also "
                            f"{names[p.name].where})")
        if p.after is None:
            out.append(p)
        elif p.after not in names:
            raise PassError(f"graph pass '{p.name}' ({p.where}, plugin {p.source}) runs after '{p.after}', which "
                            f"is no pass of the pipeline ({', '.join(x.name for x in out)})")
        else:
            i = next(k for k, x in enumerate(out) if x.name == p.after)
            while i + 1 < len(out) and out[i + 1].after == p.after:
                i += 1
            out.insert(i + 1, p)
        names[p.name] = p
    check_order(out)
    return out


def check_order(passes) -> None:
    """Every pass's ``requires`` is ensured by an earlier pass."""
    ensured: set = set()
    for p in passes:
        missing = sorted(p.requires - ensured)
        if missing:
            raise PassError(f"graph pass '{p.name}' ({p.where}) requires {', '.join(missing)}, which no earlier "
                            f"pass ensures (pipeline: {', '.join(x.name for x in passes)})")
        ensured |= p.ensures


def run_pass(p: Pass, g: Graph, ctx: PassContext, check: bool = False) -> int:
    """Run ``p`` on ``g`` and validate ``g`` again; an invalid graph is reported as the pass's. ``check``: also
    check what the pass ensures -- its normal form reached, so the pass run once more (on a copy) changes
    nothing (:func:`check_ensures`)."""
    try:
        changed = p.run(g, ctx)
        g.revalidate(ctx.reg, ctx.cx)
    except InputError as e:
        raise PassError(f"graph pass '{p.name}' ({p.where}) left {g.source} invalid: {e}") from e
    if check:
        check_ensures(p, g, ctx)
    return changed or 0


def check_ensures(p: Pass, g: Graph, ctx: PassContext) -> None:
    """What ``p`` ensures holds of ``g`` as it left it: every property a pass ensures is that no site of its
    rewrite is left (a normal form), so ``p`` run again on a copy changes nothing; a pass that does is named
    with the properties it claimed."""
    import copy
    twin = copy.deepcopy(g)
    again = p.run(twin, dataclasses.replace(ctx, assumed=[]))
    if again:
        raise PassError(f"graph pass '{p.name}' ({p.where}) does not ensure {', '.join(sorted(p.ensures)) or 'its rewrite'} "
                        f"on {g.source}: run again, it changes {again} more site(s)")


def run_pipeline(passes, g_s: Graph, g_d: Graph, reg: Registry, cx: S.Constraints, rel=None,
                 check: bool | None = None) -> None:
    """Every pass on the specification, then every pass on the implementation (which sees the specification
    as the passes left it); each program's ``assumed``: what its rewrites rest on beyond the relation.
    ``check`` (default: the environment's ``GRAPHGUARD_CHECK_PASSES=1``): check each pass's ``ensures`` after it
    ran (:func:`check_ensures`; a copy of the program per pass, so off by default)."""
    if check is None:
        check = os.environ.get("GRAPHGUARD_CHECK_PASSES") == "1"
    loaded = {"spec": frozenset(n.op for n in g_s.nodes), "impl": frozenset(n.op for n in g_d.nodes)}
    for role, g, other in (("spec", g_s, g_d), ("impl", g_d, g_s)):
        ctx = PassContext(reg, cx, role, other, rel, loaded)
        for p in passes:
            run_pass(p, g, ctx, check)
        g.assumed = ctx.assumed
