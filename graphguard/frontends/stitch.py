"""Join W per-rank graphs into one distributed graph G_d at their collectives (shared by the frontends).

A frontend converts each rank's program into a :class:`RankGraph` whose nodes are gg.json node dicts
(tensor names already ``NAME@RANK``) and :class:`Collective` records -- one rank's side of a collective.
:func:`stitch` matches the records by (group rank set, per-group sequence index); kind, attributes and
shapes must agree. A rank that issues a collective its peers never reach is reported like a deadlock:
which rank waits on which collective. A gather or scatter on dim d written around a dim-0 collective is
folded into one collective on dim d.

Kinds: ``all_reduce``, ``all_gather``, ``reduce_scatter``, ``all_to_all``, ``broadcast`` (one IR collective
each), and two point-to-point kinds that become ``core.sendrecv`` nodes:

* ``permute`` (``attrs["pairs"]``: (source, target) ranks): the output on each target is the input on its
  source. A rank that is no target has ``output=None`` (its frontend gives it its own value, e.g. zeros);
* ``all_to_all_tuple`` (``inputs``/``outputs``: one tensor per group member): output j on member i is input
  i on member j.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from graphguard.errors import InputError
from graphguard.ir.graph import source_keys

KIND_OP = {"all_reduce": "core.all_reduce", "all_gather": "core.all_gather",
           "reduce_scatter": "core.reduce_scatter", "all_to_all": "core.all_to_all",
           "broadcast": "core.broadcast"}


@dataclass
class Collective:
    """One rank's side of a collective, matched across ranks when stitching."""
    kind: str  # all_reduce | all_gather | reduce_scatter | all_to_all | broadcast | permute | all_to_all_tuple
    group: tuple[int, ...]
    input: str | None
    output: str | None
    attrs: dict
    loc: str | None
    where: str
    inputs: tuple[str, ...] = ()  # all_to_all_tuple: one tensor per group member
    outputs: tuple[str, ...] = ()
    func: str | None = None  # the function and module path of the user's code that issued it
    module: str | None = None


@dataclass
class RankGraph:
    """One rank's graph in IR terms, before stitching: inputs, nodes (dicts as in gg.json), collectives."""
    inputs: list[dict]
    nodes: list[dict | Collective]
    outputs: list[str]
    shapes: dict = field(default_factory=dict)  # optional: tensor -> {"shape": [...], "dtype": ...} to declare


def stitch(ranks: list[RankGraph], name: str, source: str) -> dict:
    """Return a gg.json document holding every rank, with one node per matched collective."""
    world = len(ranks)
    doc = {"graphguard": 1, "name": name, "world_size": world, "inputs": [], "nodes": [], "outputs": []}
    per_group: dict[tuple, list[list[Collective]]] = {}
    for r, rg in enumerate(ranks):
        doc["inputs"].extend(rg.inputs)
        doc["outputs"].extend(rg.outputs)
        for item in rg.nodes:
            if not isinstance(item, dict):  # a Collective record (or a frontend's own record of that shape)
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
            base = f"{first.kind}.g{'_'.join(map(str, group))}.{i}"
            loc = source_keys(first)
            if first.kind == "permute":
                doc["nodes"].extend(_permute_nodes(base, group, parts, loc))
            elif first.kind == "all_to_all_tuple":
                doc["nodes"].extend(_all_to_all_tuple_nodes(base, group, parts, loc))
            else:
                attrs = dict(first.attrs, group=list(group))
                doc["nodes"].append({"name": base, "op": KIND_OP[first.kind], "inputs": [c.input for c in parts],
                                     "outputs": [c.output for c in parts], "attrs": attrs, **loc})
    return fold_collective_dims(doc)


def _permute_nodes(base: str, group: tuple, parts: list[Collective], loc: dict) -> list[dict]:
    by_rank = dict(zip(group, parts))
    nodes = []
    for s, t in parts[0].attrs["pairs"]:
        if by_rank[t].output is None or by_rank[s].input is None:
            raise InputError(f"{parts[0].where}: permute pair ({s}, {t}) lacks its input or output")
        nodes.append({"name": f"{base}.{s}to{t}", "op": "core.sendrecv", "inputs": [by_rank[s].input],
                      "outputs": [by_rank[t].output], "attrs": {"src": s, "dst": t}, **loc})
    return nodes


def _all_to_all_tuple_nodes(base: str, group: tuple, parts: list[Collective], loc: dict) -> list[dict]:
    w = len(group)
    for c in parts:
        if len(getattr(c, "inputs", ())) != w or len(c.outputs) != w:
            raise InputError(f"{c.where}: an all-to-all over {w} ranks needs {w} operands and results, got "
                             f"{len(c.inputs)} and {len(c.outputs)}")
    return [{"name": f"{base}.{group[j]}to{group[i]}", "op": "core.sendrecv", "inputs": [parts[j].inputs[i]],
             "outputs": [parts[i].outputs[j]], "attrs": {"src": group[j], "dst": group[i]}, **loc}
            for i in range(w) for j in range(w)]


def fold_collective_dims(doc: dict) -> dict:
    """Collectives act on dim 0; a gather or scatter on dim d is written around one (funcol, DTensor):

    * ``all_gather(x, dim 0) -> split(dim 0, W equal) -> concat(dim d)`` is ``all_gather(x, dim d)``;
    * ``split(x, dim d, W equal) -> concat(dim 0) -> reduce_scatter(dim 0)`` is ``reduce_scatter(x, dim d)``.

    Folded only where every rank has the pattern and nothing else reads its intermediates."""
    nodes = doc["nodes"]
    producer = {o: n for n in nodes for o in n["outputs"]}
    users: dict[str, list] = {}
    for n in nodes:
        for i in n["inputs"]:
            users.setdefault(i, []).append(n)
    outputs, drop = set(doc["outputs"]), set()

    def only_user(t: str):
        u = users.get(t, [])
        return u[0] if len(u) == 1 and t not in outputs else None

    def even_split(n, world: int, dim: int | None = None) -> bool:
        a = n.get("attrs", {})
        return (n["op"] == "core.split" and len(a.get("sizes", [])) == world and len(set(map(str, a["sizes"]))) == 1
                and (dim is None or a["dim"] == dim))

    for c in [n for n in nodes if n["op"] in ("core.all_gather", "core.reduce_scatter") and n["attrs"].get("dim") == 0]:
        w, found = len(c["attrs"]["group"]), []
        for t_in, t_out in zip(c["inputs"], c["outputs"]):
            if c["op"] == "core.all_gather":
                sp = only_user(t_out)
                cat = sp and only_user(sp["outputs"][0])
                ok = sp is not None and even_split(sp, w, 0) and cat is not None and cat["op"] == "core.concat" \
                    and cat["inputs"] == sp["outputs"] and all(only_user(o) is cat for o in sp["outputs"])
                found.append((sp, cat, cat and cat["attrs"]["dim"]) if ok else None)
            else:
                cat = producer.get(t_in)
                sp = cat and producer.get(cat["inputs"][0])
                ok = cat is not None and cat["op"] == "core.concat" and cat["attrs"]["dim"] == 0 \
                    and only_user(t_in) is c and sp is not None and even_split(sp, w) \
                    and cat["inputs"] == sp["outputs"] and all(only_user(o) is cat for o in sp["outputs"])
                found.append((sp, cat, sp and sp["attrs"]["dim"]) if ok else None)
        if None in found or len({f[2] for f in found}) != 1 or found[0][2] == 0:
            continue
        c["attrs"] = dict(c["attrs"], dim=found[0][2])
        if c["op"] == "core.all_gather":
            c["outputs"] = [cat["outputs"][0] for _, cat, _ in found]
        else:
            c["inputs"] = [sp["inputs"][0] for sp, _, _ in found]
        drop |= {id(n) for sp, cat, _ in found for n in (sp, cat)}
    doc["nodes"] = [n for n in nodes if id(n) not in drop]
    return doc
