"""Join W per-rank graphs into one distributed graph G_d at their collectives.

Collectives are matched by (group rank set, per-group sequence index); kind, attributes and shapes must
agree. A rank that issues a collective its peers never reach is reported like a deadlock: which rank
waits on which collective.
"""
from __future__ import annotations

from graphguard.errors import InputError

from .convert import Collective, RankGraph

KIND_OP = {"all_reduce": "core.all_reduce", "all_gather": "core.all_gather",
           "reduce_scatter": "core.reduce_scatter", "all_to_all": "core.all_to_all",
           "broadcast": "core.broadcast"}


def stitch(ranks: list[RankGraph], name: str, source: str) -> dict:
    """Return a gg.json document holding every rank, with one node per matched collective."""
    world = len(ranks)
    doc = {"graphguard": 1, "name": name, "world_size": world, "inputs": [], "nodes": [], "outputs": []}
    per_group: dict[tuple, list[list[Collective]]] = {}
    for r, rg in enumerate(ranks):
        doc["inputs"].extend(rg.inputs)
        doc["outputs"].extend(rg.outputs)
        for item in rg.nodes:
            if isinstance(item, Collective):
                if r not in item.group:
                    raise InputError(f"{item.where}: rank {r} issues a collective on group {list(item.group)} "
                                     f"that does not contain it")
                per_group.setdefault(item.group, [[] for _ in range(world)])[r].append(item)
            else:
                doc["nodes"].append(item)
    for group, lists in per_group.items():
        counts = {r: len(lists[r]) for r in group}
        n = min(counts.values())
        for i in range(max(counts.values())):
            present = [r for r in group if i < counts[r]]
            if len(present) != len(group):
                waiting = present[0]
                missing = [r for r in group if r not in present]
                c = lists[waiting][i]
                raise InputError(f"{source}: deadlock: rank {waiting} waits in {c.kind} #{i} of group "
                                 f"{list(group)} ({c.loc or c.where}) which rank(s) {missing} never issue "
                                 f"(they issue {n} collective(s) on this group)")
            parts = [lists[r][i] for r in group]
            first = parts[0]
            for r, c in zip(group, parts):
                if c.kind != first.kind or c.attrs != first.attrs:
                    raise InputError(f"{source}: deadlock: collective #{i} of group {list(group)} is "
                                     f"{first.kind}{first.attrs} on rank {group[0]} but {c.kind}{c.attrs} on "
                                     f"rank {r} ({c.loc or c.where})")
            attrs = dict(first.attrs, group=list(group))
            doc["nodes"].append({"name": f"{first.kind}.g{'_'.join(map(str, group))}.{i}", "op": KIND_OP[first.kind],
                                 "inputs": [c.input for c in parts], "outputs": [c.output for c in parts],
                                 "attrs": attrs, **({"loc": first.loc} if first.loc else {})})
    return doc
