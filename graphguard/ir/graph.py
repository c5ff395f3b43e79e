"""Computation graphs.

A :class:`Graph` owns its :class:`Node` s and :class:`TensorInfo` s. Tensors are named; in a distributed
graph G_d every tensor name ends in ``@r`` (the rank that holds it) and a collective is *one* node whose
inputs and outputs lie on the ranks of its group, in group order -- the per-rank programs joined at
their collectives. A sequential graph G_s has no ranks.

Nodes are kept in a list; :meth:`Graph.validate` (the lint) checks: every op is known, arity and
attributes, every tensor is defined exactly once (graph input or node output) before use, no cycle,
shapes infer (and agree with declared ones), every dtype is a known name (:data:`~graphguard.ir.ops.DTYPES`)
and follows the ops' dtype rules (a declared dtype must agree; clean ops and collectives keep their
inputs' one dtype), and ranks are consistent. Mutate a graph only through
:meth:`add_input` / :meth:`add_node` / :attr:`outputs`, then call :meth:`validate`. A validated graph is
rewritten (the graph passes, :mod:`graphguard.passes`) through :meth:`rewrite` / :meth:`insert_node` /
:meth:`remove_nodes`, then :meth:`revalidate`; until then the producers', readers' and terms' tables are those
of the last validation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from graphlib import CycleError, TopologicalSorter
from typing import Any

from ..errors import InputError, ShapeError
from . import scalar as S
from .expr import VARIADIC, App, Leaf, Term, app, rank_of
from .ops import DTYPES, OpDef, Registry, Shape, expand, fmt_shape, normalize_attrs, normalize_dims
from .scalar import Constraints
from .semantics import term_dtype, term_shape


@dataclass
class TensorInfo:
    name: str
    shape: Shape
    dtype: str = "float32"

    @property
    def rank(self) -> int | None:
        return rank_of(self.name)


def source_text(x) -> str:
    """Where the user wrote ``x`` (anything with ``loc``, ``func``, ``module``: a node, a failure):
    ``modeling_llama.py:65 in forward, module model.layers.0.mlp`` (what is known)."""
    parts = [x.loc + (f" in {x.func}" if x.func else "")] if x.loc else []
    if x.module:
        parts.append(f"module {x.module}")
    return ", ".join(parts)


def source_keys(x) -> dict:
    """``x``'s source as the keys of a node record in a graph file: ``loc``, ``func``, ``module`` where known."""
    return {k: v for k in ("loc", "func", "module") if (v := getattr(x, k))}


@dataclass
class Node:
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""
    loc: str | None = None  # source location, when the frontend knows it: ``modeling_llama.py:65``
    func: str | None = None  # the function of the user's code at ``loc``
    module: str | None = None  # the module path whose forward ran it: ``model.layers.0.mlp.down_proj``

    def describe(self) -> str:
        loc = f" [{self.source_text()}]" if self.loc or self.module else ""
        return f"{self.op} (node '{self.name}' -> {', '.join(self.outputs)}){loc}"

    def source_text(self) -> str:
        return source_text(self)


class Graph:
    def __init__(self, name: str = "graph", source: str = "<memory>"):
        self.name = name
        self.source = source
        self.inputs: list[str] = []
        self.outputs: list[str] = []
        self.nodes: list[Node] = []
        self.tensors: dict[str, TensorInfo] = {}
        self.producer: dict[str, Node] = {}
        self.consumers: dict[str, list[Node]] = {}
        self.sources: list[Node] = []
        self.world_size: int | None = None
        # (layers' module path, count, the layer traced[, attributes allowed to differ]): copied (fx repeat)
        self.repeat: tuple | None = None
        self._terms: dict[str, Term] = {}
        self._edited: dict[int, tuple[Node, list[str]]] = {}  # rewritten in place: id -> (node, inputs before)
        self._inserts: dict[int, list[Node]] = {}  # id of a node (0: the end) -> nodes to place after it
        self._restructured = False  # nodes added, removed or outputs renamed since the last validation

    # -- construction ---------------------------------------------------------------------------
    def add_input(self, name: str, shape, dtype: str = "float32") -> str:
        if name in self.tensors:
            raise InputError(f"{self.source}: tensor '{name}' is defined twice")
        self.inputs.append(name)
        self.tensors[name] = TensorInfo(name, tuple(S.norm(d) for d in shape), dtype)
        return name

    def add_node(self, op: str, inputs: list[str], outputs: list[str], attrs: dict | None = None,
                 name: str = "", loc: str | None = None, shapes: dict | None = None, func: str | None = None,
                 module: str | None = None) -> Node:
        node = Node(op, list(inputs), list(outputs), dict(attrs or {}), name or f"n{len(self.nodes)}", loc, func,
                    module)
        node._declared = shapes or {}  # type: ignore[attr-defined]
        self.nodes.append(node)
        self._restructured = True
        return node

    # -- rewriting a validated graph (graph passes), then revalidate --------------------------------
    def rewrite(self, node: Node, *, op: str | None = None, inputs: list[str] | None = None,
                attrs: dict | None = None, outputs: list[str] | None = None) -> Node:
        """Change ``node`` in place: its operator, inputs, attributes or output names (a new output name is
        the tensor it writes from now on; its info is inferred again by :meth:`revalidate`)."""
        if id(node) not in self._edited:
            self._edited[id(node)] = (node, list(node.inputs))
        if op is not None:
            node.op = op
        if inputs is not None:
            node.inputs = list(inputs)
        if attrs is not None:
            node.attrs = dict(attrs)
        if outputs is not None and list(outputs) != node.outputs:
            for old, new in zip(node.outputs, outputs):
                if new not in self.tensors and old in self.tensors:  # (a placeholder: names stay unique)
                    self.tensors[new] = TensorInfo(new, self.tensors[old].shape, self.tensors[old].dtype)
            node.outputs = list(outputs)
            self._restructured = True
        return node

    def insert_node(self, after: Node | None, op: str, inputs: list[str], outputs: list[str],
                    attrs: dict | None = None, name: str = "", loc: str | None = None, func: str | None = None,
                    module: str | None = None) -> Node:
        """A new node placed right after node ``after`` (None: at the end) when the graph is revalidated."""
        node = Node(op, list(inputs), list(outputs), dict(attrs or {}), name or f"n{len(self.nodes)}", loc, func,
                    module)
        node._declared = {}  # type: ignore[attr-defined]
        for o in outputs:
            self.tensors.setdefault(o, TensorInfo(o, (), "float32"))  # (a placeholder: names stay unique)
        self._inserts.setdefault(0 if after is None else id(after), []).append(node)
        self._restructured = True
        return node

    def remove_nodes(self, nodes) -> None:
        """Drop ``nodes`` and the tensors they write."""
        gone = {id(n) for n in nodes}
        if not gone:
            return
        self.nodes = [n for n in self.nodes if id(n) not in gone]
        for n in nodes:
            for o in n.outputs:
                self.tensors.pop(o, None)
        self._restructured = True

    def revalidate(self, reg: Registry, cx: Constraints) -> "Graph":
        """Check the graph after :meth:`rewrite` / :meth:`insert_node` / :meth:`remove_nodes`: nodes rewritten
        in place, keeping their outputs and reading tensors defined before them, are inferred again (their
        terms) and the readers' table updated -- the order stays topological; where nodes were added, removed
        or renamed their outputs, where a node reads a tensor not defined before it, or where an output's
        shape or dtype came out different, the whole graph is validated again."""
        edited = list(self._edited.values())
        if self._restructured or self._inserts:
            return self.validate(reg, cx)
        self._edited = {}
        if not edited:
            return self
        pos = None
        for n, before in edited:
            new = [i for i in n.inputs if i not in before]
            if new:
                if pos is None:
                    pos = {id(x): k for k, x in enumerate(self._order)}
                    ins = set(self.inputs)
                if any(i not in ins and (i not in self.producer or
                                         pos.get(id(self.producer[i]), len(pos)) >= pos.get(id(n), -1))
                       for i in new):
                    return self.validate(reg, cx)
        outs = {o: self.tensors[o] for n, _ in edited for o in n.outputs}
        for n, before in edited:
            self._infer(n, reg, cx)
            for i in dict.fromkeys(before):
                if i not in n.inputs:
                    self.consumers[i] = [c for c in self.consumers.get(i, []) if c is not n]
            for i in dict.fromkeys(n.inputs):
                if i not in before:
                    self.consumers.setdefault(i, []).append(n)
        if any(self.tensors[o] != t for o, t in outs.items()):
            return self.validate(reg, cx)
        if any(not n.inputs or not before for n, before in edited):
            self.sources = [n for n in self.nodes if not n.inputs]
        return self

    @property
    def distributed(self) -> bool:
        return self.world_size is not None

    # -- queries --------------------------------------------------------------------------------
    def shape(self, t: str) -> Shape:
        return self.tensors[t].shape

    def where(self, node: Node) -> str:
        return f"{self.source}: node '{node.name}' ({node.op})"

    def topo_order(self) -> list[Node]:
        return list(self._order)

    def node_terms(self, node: Node) -> list[Term]:
        """The outputs of ``node`` as terms over its input tensors (collectives: their clean meaning)."""
        return [self._terms[o] for o in node.outputs]

    # -- lint -----------------------------------------------------------------------------------
    def validate(self, reg: Registry, cx: Constraints) -> "Graph":
        src = self.source
        if self._inserts:  # (nodes inserted by a rewrite take their places; after a removed node: at the end)
            ins, self._inserts, nodes = self._inserts, {}, []
            for x in self.nodes:
                nodes.append(x)
                nodes += ins.pop(id(x), ())
            self.nodes = nodes + [y for ys in ins.values() for y in ys]
        self._edited, self._restructured = {}, False
        defined: dict[str, str] = {t: "input" for t in self.inputs}
        for n in self.nodes:
            if not n.outputs:
                raise InputError(f"{self.where(n)}: node has no outputs")
            for o in n.outputs:
                if o in defined:
                    raise InputError(f"{self.where(n)}: tensor '{o}' is defined twice")
                defined[o] = n.name
        for n in self.nodes:
            for i in n.inputs:
                if i not in defined:
                    raise InputError(f"{self.where(n)}: input tensor '{i}' is not defined anywhere "
                                     f"(dangling tensor)")
        for o in self.outputs:
            if o not in defined:
                raise InputError(f"{src}: graph output '{o}' is not defined anywhere (dangling tensor)")
        self.producer = {o: n for n in self.nodes for o in n.outputs}
        self.sources = [n for n in self.nodes if not n.inputs]  # constants
        self.consumers = {}
        for n in self.nodes:
            for i in n.inputs:
                self.consumers.setdefault(i, []).append(n)
        ts = TopologicalSorter({n.name: [self.producer[i].name for i in n.inputs if i in self.producer]
                                for n in self.nodes})
        by_name = {n.name: n for n in self.nodes}
        if len(by_name) != len(self.nodes):
            seen = set()
            for n in self.nodes:
                if n.name in seen:
                    raise InputError(f"{src}: two nodes are named '{n.name}'")
                seen.add(n.name)
        try:
            order = [by_name[x] for x in ts.static_order()]
        except CycleError as e:
            cyc = " -> ".join(dict.fromkeys(e.args[1]))
            raise InputError(f"{src}: the graph has a cycle through nodes {cyc}") from None
        self._order = order
        for t in self.inputs:
            if self.distributed:
                self._check_rank_name(t, f"{src}: graph input")
            self._check_dims(f"{src}: graph input '{t}'", self.tensors[t].shape, cx)
            _check_dtype(f"{src}: graph input '{t}'", self.tensors[t].dtype)
        memo: dict = {}  # (op, attributes, input shapes and dtypes, declarations) -> what _infer found
        for n in order:
            self._infer_memo(n, reg, cx, memo)
        if self.distributed:
            self._check_world()
        return self

    def _check_world(self) -> None:
        """Every rank below world_size holds a tensor (the names checked that none is outside it)."""
        present = {rank_of(t) for t in self.tensors}
        if len(present) != self.world_size:
            r = next(r for r in range(self.world_size) if r not in present)
            raise InputError(f"{self.source}: world_size is {self.world_size} but no tensor is on rank {r} "
                             f"(tensors name ranks {fmt_ranks(present)})")

    @staticmethod
    def _check_dims(where: str, shape: Shape, cx: Constraints) -> None:
        for d in shape:
            if not cx.integral(d):
                raise InputError(f"{where}: dimension {S.text(d)} is not an integer for every allowed value of "
                                 f"its symbols (declare e.g. multiple_of in the relation file)")
            if not cx.prove(">=", d, 0):
                raise InputError(f"{where}: dimension {S.text(d)} can be negative")

    def _check_rank_name(self, t: str, where: str) -> int:
        r = rank_of(t)
        if r is None:
            raise InputError(f"{where}: tensor '{t}' of a distributed graph must be named NAME@RANK")
        if not 0 <= r < self.world_size:
            raise InputError(f"{where}: tensor '{t}' is on rank {r}, outside world size {self.world_size}")
        return r

    def _infer_memo(self, n: Node, reg: Registry, cx: Constraints, memo: dict) -> None:
        """:meth:`_infer`, whose result depends on the node's operator, attributes, input shapes and dtypes and
        declared outputs only (a repeated layer's nodes are inferred once): taken from ``memo`` where an
        earlier node had the same; the rank checks run for every node."""
        ins = [self.tensors[i] for i in n.inputs]
        declared = getattr(n, "_declared", {})
        try:
            key = (n.op, _frozen(n.attrs), tuple(t.shape for t in ins), tuple(t.dtype for t in ins),
                   tuple(n.inputs.index(i) for i in n.inputs), len(n.outputs),
                   _frozen([declared.get(o) for o in n.outputs]))
            hash(key)
        except TypeError:
            key = None
        hit = memo.get(key) if key is not None else None
        if hit is None:
            self._infer(n, reg, cx)
            if key is not None:
                memo[key] = (n.op, dict(n.attrs), list(n.inputs),
                             [(self.tensors[o].shape, self.tensors[o].dtype, self._terms[o]) for o in n.outputs])
            return
        n.op, attrs, first, outs = hit
        n.attrs = dict(attrs)
        self._check_ranks(n, reg.get(n.op))
        names = dict(zip(first, n.inputs))
        for o, (shape, dtype, term) in zip(n.outputs, outs):
            self.tensors[o] = TensorInfo(o, shape, dtype)
            self._terms[o] = _renamed(term, names)

    def _infer(self, n: Node, reg: Registry, cx: Constraints) -> None:
        where = self.where(n)
        op: OpDef | None = reg.get(n.op)
        if op is None:
            raise InputError(f"{where}: unknown operator '{n.op}' (no loaded op definition or lemma pack "
                             f"provides it; see `graphguard plugins`)")
        if op.name in VARIADIC and len(n.inputs) == 1:  # a one-operand concat / sum / max is its operand
            op, n.attrs = reg.get("core.identity"), {}
        n.op = op.name
        if op.arity is not None and len(n.inputs) != op.arity:
            raise InputError(f"{where}: {op.name} takes {op.arity} input(s), got {len(n.inputs)}")
        if op.arity is None and not n.inputs:
            raise InputError(f"{where}: {op.name} needs at least one input")
        try:
            attrs = normalize_attrs(op, n.attrs, where)
        except ShapeError as e:
            raise InputError(str(e)) from None
        in_shapes = [self.tensors[i].shape for i in n.inputs]
        n.attrs = normalize_dims(op, dict(attrs), [len(s) for s in in_shapes])  # dims in [0, rank) from here on
        attrs = tuple(n.attrs.items())
        self._check_ranks(n, op)
        leaves = [Leaf(i) for i in n.inputs]
        try:
            if op.meaning is not None:
                outs = expand(op, leaves, n.attrs, in_shapes)
            else:
                outs = [app(op.name, *leaves, **dict(attrs))]  # n-ary concat/sum: left-nested, as in terms
            if len(outs) != len(n.outputs):
                raise InputError(f"{where}: {op.name} produces {len(outs)} output(s), node lists "
                                 f"{len(n.outputs)}")
            shapes = [term_shape(t, self.shape, reg, cx) for t in outs]
        except (ShapeError, ValueError, ZeroDivisionError) as e:
            raise InputError(f"{where}: {e}") from None
        except (IndexError, KeyError, TypeError) as e:
            raise InputError(f"{where}: {op.name} cannot be applied to these inputs/attributes "
                             f"({type(e).__name__}: {e})") from None
        in_dtypes = [self.tensors[i].dtype for i in n.inputs]
        if op.collective and len(set(in_dtypes)) > 1:
            raise InputError(f"{where}: a collective over tensors of dtypes {', '.join(dict.fromkeys(in_dtypes))} "
                             f"(its inputs share one dtype)")
        try:
            dtypes = [term_dtype(t, lambda x: self.tensors[x].dtype, reg) for t in outs]
        except ShapeError as e:
            raise InputError(f"{where}: {e}") from None
        except (IndexError, KeyError, TypeError) as e:
            raise InputError(f"{where}: {op.name}: no dtype for inputs {in_dtypes} ({type(e).__name__}: {e})") from None
        declared = getattr(n, "_declared", {})
        for o, t, s, dtype in zip(n.outputs, outs, shapes, dtypes):
            self._check_dims(f"{where}: output '{o}'", s, cx)
            if o in declared and declared[o] is not None:
                d = tuple(S.norm(x) for x in declared[o]["shape"])
                if len(d) != len(s) or any(S.norm(a) != S.norm(b) for a, b in zip(d, s)):
                    raise InputError(f"{where}: declared shape {fmt_shape(d)} of '{o}' does not match the "
                                     f"inferred shape {fmt_shape(s)}")
                if "dtype" in declared[o]:
                    _check_dtype(f"{where}: output '{o}'", declared[o]["dtype"])
                    if dtype is None:  # the op leaves the dtype to the call site
                        dtype = declared[o]["dtype"]
                    elif declared[o]["dtype"] != dtype:
                        raise InputError(f"{where}: declared dtype {declared[o]['dtype']} of '{o}' contradicts "
                                         f"{op.name}, which gives {dtype} for inputs of dtype "
                                         f"{', '.join(in_dtypes) or '(none)'}")
            if dtype is None:
                dtype = in_dtypes[0] if in_dtypes else "float32"
            _check_dtype(f"{where}: output '{o}'", dtype)
            self.tensors[o] = TensorInfo(o, s, dtype)
            self._terms[o] = t

    def symbols(self) -> set[str]:
        """The size symbols in this graph's shapes."""
        return {x for t in self.tensors.values() for d in t.shape for x in S.free_symbols(d)}

    def rename_symbols(self, names: dict[str, str]) -> None:
        """Rename size symbols (old -> new) in every shape and attribute: two symbols proved equal (the sizes
        of equal data) get one name, so shapes compare structurally."""
        from .expr import rename_symbols
        for t in self.tensors.values():
            t.shape = S.rename(t.shape, names)
        for n in self.nodes:
            n.attrs = {k: S.rename(v, names) for k, v in n.attrs.items()}
        self._terms = {o: rename_symbols(t, names) for o, t in self._terms.items()}

    def _check_ranks(self, n: Node, op: OpDef) -> None:
        if not self.distributed:
            if op.collective:
                raise InputError(f"{self.where(n)}: collective in a sequential graph (set world_size)")
            return
        where = self.where(n)
        in_r = [self._check_rank_name(t, where) for t in n.inputs]
        out_r = [self._check_rank_name(t, where) for t in n.outputs]
        if op.name == "core.sendrecv":
            if in_r[0] != n.attrs["src"] or out_r[0] != n.attrs["dst"]:
                raise InputError(f"{where}: sendrecv input must be on rank src={n.attrs['src']} and output on "
                                 f"rank dst={n.attrs['dst']}")
        elif op.collective:
            group = list(n.attrs["group"])
            if in_r != group or out_r != group:
                raise InputError(f"{where}: collective over group {group} has inputs on ranks {in_r} and "
                                 f"outputs on ranks {out_r} (rank mismatch; one per group member, in order)")
        else:
            rs = set(in_r) | set(out_r)
            if len(rs) > 1:
                raise InputError(f"{where}: a non-collective op mixes tensors of ranks {sorted(rs)} "
                                 f"(rank mismatch)")

    # -- text dump ------------------------------------------------------------------------------
    def dump(self) -> str:
        lines = [f"graph {self.name}" + (f" (world size {self.world_size})" if self.distributed else "")]
        for t in self.inputs:
            ti = self.tensors[t]
            lines.append(f"  input {t}: {ti.dtype}{fmt_shape(ti.shape)}")
        for n in self._order:
            outs = ", ".join(f"{o}: {fmt_shape(self.tensors[o].shape)}" for o in n.outputs)
            attrs = ", ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs.items())
            args = ", ".join(n.inputs + ([attrs] if attrs else []))
            loc = f"    # {n.source_text()}" if n.loc or n.module else ""
            lines.append(f"  {outs} = {n.op}({args}){loc}")
        lines.append(f"  output {', '.join(self.outputs)}")
        return "\n".join(lines)


def _check_dtype(where: str, dtype) -> None:
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise InputError(f"{where}: unknown dtype {str(dtype)[:40]!r} (known: {', '.join(sorted(DTYPES))})")


def _fmt_attr(v) -> str:
    from .expr import attr_text
    return attr_text(v)


def fmt_ranks(ranks) -> str:
    """``0-3, 6`` for {0, 1, 2, 3, 6}."""
    rs, out = sorted(ranks), []
    for r in rs:
        if out and out[-1][1] == r - 1:
            out[-1][1] = r
        else:
            out.append([r, r])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in out)


def _frozen(v):
    """``v`` hashable: lists as tuples, dicts as sorted item tuples (TypeError where a value is not)."""
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _frozen(x)) for k, x in v.items()))
    hash(v)
    return (type(v).__name__, v)


def _renamed(t: Term, names: dict) -> Term:
    """Term ``t`` over one node's inputs, over another's (``names``: first node's input -> this one's)."""
    if isinstance(t, Leaf):
        return Leaf(names.get(t.name, t.name))
    if isinstance(t, App):
        return App(t.op, tuple(_renamed(a, names) for a in t.args), t.attrs)
    return t
