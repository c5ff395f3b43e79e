"""Convert one ONNX ``GraphProto`` into the IR program of one rank (a :class:`RankGraph`; G_s: rank None).

Rules (the op conventions are in ``lemma_packs/onnx/ops.py``):

* graph inputs and the initializers that some node reads as a tensor become IR inputs, by name (characters other
  than letters, digits, ``_`` and ``.`` become ``_``), ``NAME@r`` on rank r; ``dim_param`` dims are symbols;
* constants (``Constant`` nodes, initializers, ``Shape`` of a static shape, and any op whose inputs are all
  constants, computed with the pack's reference) are tracked by value: shape-carrying inputs -- Reshape's
  shape, Slice's starts/ends/axes/steps, Unsqueeze/Squeeze axes, Split sizes, Expand's shape, the Reduce ops'
  axes -- are read from them; a constant a tensor op reads is emitted as ``onnx.ConstantFill`` (one value) or
  ``onnx.Constant``;
* data movement becomes clean core ops (Transpose, Reshape, Flatten, Squeeze, Unsqueeze, Concat, step-1 Slice,
  Split, Identity); other default-domain ops become ``onnx.<OpType>`` where the pack defines them;
* ``com.microsoft`` ``AllReduce`` (sum), ``AllGather`` (``axis``, ``group_size``) and ``AllToAll`` -- ONNX
  Runtime's collective contrib ops over every rank -- and the project's ``ai.graphguard`` ``ReduceScatter``,
  ``Broadcast`` and ``CollectivePermute`` become :class:`Collective` records for stitching;
* ``com.microsoft`` ``SimplifiedLayerNormalization`` / ``Skip[Simplified]LayerNormalization`` become the adds and
  the default-domain normalisation they fuse;
* model-local ONNX functions are inlined at each call, ``If`` on a constant condition takes its branch;
* graph outputs are ``out0``, ``out1``... (identities of the values returned).

Anything else -- another domain, Loop/Scan, If on a computed condition, a shape input that is not a
constant -- is an error naming the file, the node and its op.
"""
from __future__ import annotations

import re

import numpy as np

from graphguard.errors import GraphGuardError, InputError
from graphguard.ir import scalar as S
from graphguard.ir.ops import Registry, number_text, numel

from ..source import frame_from_stack
from ..stitch import Collective, RankGraph

KNOWN_MAX = 4096  # constants up to this many entries are tracked by value (and folded)
LITERAL_MAX = 4096
ONNX_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"
MS_COLLECTIVES = {"AllReduce": "all_reduce", "AllGather": "all_gather", "AllToAll": "all_to_all"}
GG_COLLECTIVES = {"ReduceScatter": "reduce_scatter", "Broadcast": "broadcast", "CollectivePermute": "permute"}
MS_NORMS = ("SimplifiedLayerNormalization", "SkipLayerNormalization", "SkipSimplifiedLayerNormalization")
GG_DOMAIN = "ai.graphguard"  # the project's own collectives: ReduceScatter, Broadcast, CollectivePermute
MAX_NESTING = 32  # functions and If branches inlined within each other
INTEGRAL = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool")
INT_MAX = 2 ** 62  # Slice ends beyond this mean "to the end"

DTYPE_OF = {1: "float32", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64", 9: "bool",
            10: "float16", 11: "float64", 12: "uint32", 13: "uint64", 16: "bfloat16", 17: "float8_e4m3fn",
            18: "float8_e4m3fnuz", 19: "float8_e5m2", 20: "float8_e5m2fnuz"}


def ident(s: str | bytes) -> str:
    """A tensor name of the IR for an ONNX name (a name that is not UTF-8 text arrives as bytes)."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "replace")
    s = re.sub(r"[^A-Za-z0-9_.]", "_", s)
    return s if re.match(r"[A-Za-z_]", s) else "t" + s


def _torch_source(node) -> dict:
    """Where a node exported by ``torch.onnx.export`` came from, read from its metadata (strings only, never
    evaluated): the user's source line and function (``pkg.torch.onnx.stack_trace``) and the module path
    (``pkg.torch.onnx.name_scopes``, e.g. ``['', 'layers.0', 'mlp', 'linear']`` -> ``layers.0.mlp``)."""
    meta = {p.key: p.value for p in node.metadata_props}
    out = {}
    loc, func = frame_from_stack(meta.get("pkg.torch.onnx.stack_trace"))
    if loc:
        out["loc"] = loc
        if func:
            out["func"] = func
    scopes = re.findall(r"'([^']*)'", meta.get("pkg.torch.onnx.name_scopes", ""))[:-1]  # (the last: the fx node)
    if any(scopes):
        out["module"] = ".".join(x for x in scopes if x)
    return out


class Val:
    """A value: its IR tensor name and/or its known contents, with its shape and dtype."""

    def __init__(self, shape: tuple, dtype: str, name: str | None = None, const: np.ndarray | None = None,
                 init: str | None = None):
        self.shape, self.dtype, self.name, self.const, self.init = tuple(shape), dtype, name, const, init


def numpy_helper_to_array(t) -> np.ndarray:
    from onnx import numpy_helper
    try:
        return numpy_helper.to_array(t)
    except Exception:
        raise InputError("a malformed tensor attribute") from None


def dims_text(shape) -> list:
    """A shape as graph files write it: integers, and symbolic dims as text."""
    return [d if isinstance(d, int) else S.text(d) for d in shape]




class Converter:
    def __init__(self, model, source: str, reg: Registry, rank: int | None, world: int):
        self.m, self.g, self.source, self.reg, self.rank, self.world = model, model.graph, source, reg, rank, world
        self.out = RankGraph([], [], [])
        self.env: dict[str, Val] = {}
        self.taken: set[str] = set()
        self.node = None
        self.opset = {o.domain: o.version for o in model.opset_import}
        self.functions: dict[tuple, object] = {}  # (domain, name, overload) -> FunctionProto, inlined where called
        self.calls: list[str] = []  # the functions being inlined (innermost last), for error messages

    # -- names and errors -------------------------------------------------------------------------
    def full(self, name: str) -> str:
        return name if self.rank is None else f"{name}@{self.rank}"

    def fresh(self, base: str) -> str:
        base, k = ident(base), 1
        name = base
        while name in self.taken:
            k += 1
            name = f"{base}.{k}"
        self.taken.add(name)
        return name

    def inside(self) -> str:
        """`` in function F (called by node 'n')``... for a node of an inlined body, innermost first."""
        return "".join(f" in {c}" for c in reversed(self.calls))

    def where(self) -> str:
        n = self.node
        dom = f"{n.domain}::" if n.domain not in ONNX_DOMAINS else ""
        name = n.name or n.output[0] if n.output else n.name
        return f"{self.source}: node '{name}' ({dom}{n.op_type}){self.inside()}"

    def error(self, msg: str):
        raise InputError(f"{self.where()}: {msg}")

    # -- values -----------------------------------------------------------------------------------
    def type_of(self, tp, what: str) -> tuple[tuple, str]:
        if not tp.HasField("tensor_type"):
            raise InputError(f"{self.source}: {what}: only tensor types are supported")
        tt = tp.tensor_type
        if tt.elem_type not in DTYPE_OF:
            raise InputError(f"{self.source}: {what}: unsupported element type {tt.elem_type}")
        if not tt.HasField("shape"):
            raise InputError(f"{self.source}: {what}: the shape is unknown (graphguard needs every input's rank)")
        dims = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                if d.dim_value < 0:
                    raise InputError(f"{self.source}: {what}: negative dimension {d.dim_value}")
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param"):
                try:
                    dims.append(S.parse(ident(d.dim_param)))
                except ValueError as e:
                    raise InputError(f"{self.source}: {what}: dim '{d.dim_param[:40]}': {e}") from None
            else:
                raise InputError(f"{self.source}: {what}: a dimension has neither a size nor a name")
        return tuple(dims), DTYPE_OF[tt.elem_type]

    def tensor(self, v: Val, hint: str = "c") -> str:
        """The IR tensor holding ``v`` (an initializer becomes an input, a constant an op, on first use)."""
        if v.name is not None:
            return v.name
        if v.init is not None:
            name = ident(v.init)
            self.taken.add(name)
            self.out.inputs.append({"name": self.full(name), "shape": dims_text(v.shape), "dtype": v.dtype})
            v.name = name
            return name
        flat = np.asarray(v.const).reshape(-1)
        if flat.size and (flat == flat[0]).all():
            v.name = self.emit("onnx.ConstantFill", [], hint, shape=list(v.shape), value=number_text(flat[0]), dtype=v.dtype)
        elif flat.size <= LITERAL_MAX:
            v.name = self.emit("onnx.Constant", [], hint, shape=list(v.shape), values=",".join(map(number_text, flat)),
                               dtype=v.dtype)
        else:
            self.error("a constant of more than 4096 entries is computed from constants (not supported yet)")
        return v.name

    def const_of(self, name: str, what: str) -> np.ndarray:
        v = self.env.get(name)
        if v is None or v.const is None:
            self.error(f"{what} must be a constant (initializer or Constant node), got '{name}'")
        return v.const

    def ints_of(self, name: str, what: str) -> list[int]:
        c = self.const_of(name, what)
        if c.dtype.kind not in "iu":
            self.error(f"{what} must hold integers")
        return [int(x) for x in c.reshape(-1)]

    # -- emitting ---------------------------------------------------------------------------------
    def emit(self, op: str, inputs: list, out: str, **attrs) -> str:
        name = self.fresh(out)
        node = {"name": self.full(name), "op": op, "inputs": [self.full(i) for i in inputs],
                "outputs": [self.full(name)], "attrs": attrs}
        if self.node is not None:
            node["loc"] = f"{self.source}:{self.node.name or self.node.op_type} ({self.node.op_type}){self.inside()}"
            node.update(_torch_source(self.node))
        self.out.nodes.append(node)
        return name

    def shape_of(self, op: str, in_vals: list[Val], attrs: dict) -> tuple[tuple, str]:
        """Output shape and dtype of IR op ``op`` (the registry's shape function; errors name the node)."""
        from graphguard.ir.ops import normalize_attrs, normalize_dims
        d = self.reg.get(op)
        try:
            a = dict(normalize_attrs(d, attrs, op))
            a = normalize_dims(d, a, [len(v.shape) for v in in_vals])
            shape = d.shape([v.shape for v in in_vals], a, self.cx)
            dtype = d.dtype([v.dtype for v in in_vals], a) if d.dtype else in_vals[0].dtype
        except GraphGuardError as e:
            self.error(str(e))
        return tuple(shape), dtype

    def op(self, op: str, ins: list[Val], out: str, **attrs) -> Val:
        """Emit IR op ``op`` on ``ins``, folding it where every input is a small constant."""
        shape, dtype = self.shape_of(op, ins, attrs)
        d = self.reg.get(op)
        # fold constants (shape arithmetic, Constant nodes); a floating initializer is a parameter: an input
        if ins and all(v.const is not None and not (v.init and v.dtype not in INTEGRAL) for v in ins) and \
                d.ref is not None and \
                all(isinstance(x, int) for x in shape) and int(np.prod(shape)) <= KNOWN_MAX:
            from graphguard.ir.ops import normalize_attrs, normalize_dims
            a = normalize_dims(d, dict(normalize_attrs(d, attrs, op)), [len(v.shape) for v in ins])
            return Val(shape, dtype, const=np.asarray(d.ref([v.const for v in ins], a)).reshape(shape))
        name = self.emit(op, [self.tensor(v) for v in ins], out, **attrs)
        return Val(shape, dtype, name=name)

    # -- the walk ---------------------------------------------------------------------------------
    def initializers(self, g) -> dict[str, Val]:
        """A graph's initializers as values (the small ones by value; of external data, small integer ones)."""
        from onnx import numpy_helper
        inits = {}
        for t in g.initializer:
            shape, dtype = tuple(int(d) for d in t.dims), DTYPE_OF.get(t.data_type)
            if dtype is None:
                raise InputError(f"{self.source}: initializer '{t.name}': unsupported element type {t.data_type}")
            const = None
            small = int(np.prod(shape, dtype=np.int64)) <= KNOWN_MAX
            if t.data_location == 1 and small and dtype in INTEGRAL:  # 1: external data (a shape input's?)
                const = self.external(t, shape, dtype)
            elif t.data_location != 1 and small:
                try:
                    const = numpy_helper.to_array(t)
                except Exception as e:  # a malformed TensorProto: its data does not match its dims
                    raise InputError(f"{self.source}: initializer '{t.name}' is malformed: "
                                     f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
                if const.dtype.kind == "f":
                    const = const.astype(np.float64)
            inits[t.name] = Val(shape, dtype, const=const, init=t.name)
        return inits

    def external(self, t, shape: tuple, dtype: str) -> np.ndarray:
        """A small integer initializer stored outside the model (what a shape input may read): the bytes at its
        ``location`` -- a file beside the model, named relative to it without leaving its folder -- ``offset``
        and ``length``, little-endian as ONNX stores them. Floating initializers stay unread (parameters)."""
        from pathlib import Path

        from graphguard.inputfile import read_bytes
        info = {e.key: e.value for e in t.external_data}
        where = f"{self.source}: initializer '{t.name}' (external data)"
        loc = info.get("location", "")
        if isinstance(loc, bytes) or not loc or Path(loc).is_absolute() or ".." in Path(loc).parts or "\0" in loc:
            raise InputError(f"{where}: location {loc!r} is not a file name relative to the model's folder")
        try:
            offset, length = int(info.get("offset", 0)), info.get("length")
            length = None if length is None else int(length)
        except ValueError:
            raise InputError(f"{where}: offset / length are not integers") from None
        dt = np.dtype(dtype if dtype != "bool" else "bool").newbyteorder("<")
        need = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        if offset < 0 or (length is not None and length != need):
            raise InputError(f"{where}: offset {offset} / length {length} do not fit {need} bytes of {dtype}")
        data = read_bytes(Path(self.source).parent / loc)
        if offset + need > len(data):
            raise InputError(f"{where}: {loc} has {len(data)} bytes, fewer than offset {offset} + {need}")
        return np.frombuffer(data[offset:offset + need], dtype=dt).reshape(shape).astype(dtype)

    def run(self, cx) -> RankGraph:
        self.cx = cx
        g = self.g
        for f in self.m.functions:
            key = (f.domain, f.name, getattr(f, "overload", ""))
            if key in self.functions:
                raise InputError(f"{self.source}: ONNX function {f.domain}::{f.name} is defined twice")
            self.functions[key] = f
        inits = self.initializers(g)
        for i in g.input:
            if i.name in inits:
                continue
            shape, dtype = self.type_of(i.type, f"input '{i.name}'")
            name = ident(i.name)
            if name in self.taken:
                raise InputError(f"{self.source}: two inputs are named '{name}'")
            self.taken.add(name)
            self.out.inputs.append({"name": self.full(name), "shape": dims_text(shape), "dtype": dtype})
            self.env[i.name] = Val(shape, dtype, name=name)
        for t in g.initializer:
            if ident(t.name) in self.taken:
                raise InputError(f"{self.source}: initializer '{t.name}' is named like an input")
        self.env.update({k: v for k, v in inits.items() if k not in self.env})
        self.taken |= {f"out{k}" for k in range(len(g.output))} | {ident(t) for t in inits}
        for n in g.node:
            self.node = n
            self.convert(n)
        self.node = None
        for k, o in enumerate(g.output):
            v = self.env.get(o.name)
            if v is None:
                raise InputError(f"{self.source}: output '{o.name}' is not computed by any node")
            src = self.tensor(v, f"out{k}")
            self.taken.discard(f"out{k}")
            name = self.emit("core.identity", [src], f"out{k}")
            self.out.outputs.append(self.full(name))
        return self.out

    def convert(self, n) -> None:
        texts = (n.name, n.op_type, n.domain, *n.input, *n.output, *(a.name for a in n.attribute))
        raw = [t for t in texts if isinstance(t, bytes)]
        if raw:
            raise InputError(f"{self.source}: node {ident(n.name)!r}: a name that is not UTF-8 text "
                             f"({ident(raw[0])[:40]!r})")
        if any(a.ref_attr_name for a in n.attribute):
            self.error("an attribute reference (ref_attr_name) outside an ONNX function's body")
        fn = self.functions.get((n.domain, n.op_type, getattr(n, "overload", "")))
        if not (fn is not None or (n.op_type == "If" and n.domain in ONNX_DOMAINS)) and \
                any(a.type in (5, 10) for a in n.attribute):  # GRAPH, GRAPHS
            self.error("subgraphs (Loop, Scan; If with a condition computed at run time) are not supported")
        ins = []
        for i in n.input:
            if i == "":
                ins.append(None)
                continue
            if i not in self.env:
                self.error(f"input '{i}' is used before it is defined")
            ins.append(self.env[i])
        if any(isinstance(v, list) for v in ins) and n.op_type != "SequenceAt":
            self.error("sequences are read only by SequenceAt with a constant position")
        if fn is not None:
            outs = self.call(n, fn, ins)
        elif n.domain in ONNX_DOMAINS and n.op_type == "If":
            outs = self.if_node(n)
        elif n.domain in ONNX_DOMAINS:
            outs = self.onnx_node(n, ins)
        elif n.domain in (MS_DOMAIN, GG_DOMAIN):
            outs = self.collective_or_ms_node(n, ins)
        else:
            self.error(f"operators of domain '{n.domain}' are not supported (and the model defines no function "
                       f"{n.domain}::{n.op_type})")
        if len(outs) > len(n.output):
            self.error(f"has {len(n.output)} outputs, expected {len(outs)}")
        for name, v in zip(n.output, outs):
            if name:
                self.env[name] = v
        for name in list(n.output)[len(outs):]:
            if name:
                self.env[name] = None  # an output graphguard does not compute: an error where read

    # -- ONNX functions and If with a constant condition: inlined ---------------------------------
    def nested(self, nodes, env: dict[str, Val], outputs: list[str], where: str) -> list:
        """Convert ``nodes`` in scope ``env`` (restored after); the values of ``outputs`` there."""
        outer, node = self.env, self.node
        if len(self.calls) >= MAX_NESTING:
            self.error(f"functions and If branches nest deeper than {MAX_NESTING} (a recursive function?)")
        self.env = env
        self.calls.append(where)
        try:
            for b in nodes:
                self.node = b
                self.convert(b)
            self.node = node
            outs = []
            for o in outputs:
                if not o or o not in self.env or self.env[o] is None:
                    self.error(f"output '{o}' of {where} is not computed by its body")
                outs.append(self.env[o])
        finally:
            self.env, self.node = outer, node
            self.calls.pop()
        return outs

    def call(self, n, fn, ins: list) -> list[Val]:
        """A call of a model-local ONNX function: its body with the call's inputs and attributes."""
        from onnx import AttributeProto, NodeProto
        if len(ins) > len(fn.input) or len(n.output) > len(fn.output):
            self.error(f"calls function {fn.name} with {len(ins)} inputs / {len(n.output)} outputs; it takes "
                       f"{len(fn.input)} / {len(fn.output)}")
        given = {a.name: a for a in n.attribute}
        defaults = {a.name: a for a in fn.attribute_proto}
        unknown = set(given) - set(fn.attribute) - set(defaults)
        if unknown:
            self.error(f"function {fn.name} has no attribute {sorted(unknown)[0]}")
        absent = {f for f, v in zip(fn.input, ins + [None] * len(fn.input)) if v is None}
        body = []
        for b in fn.node:
            c = NodeProto()
            c.CopyFrom(b)
            c.input[:] = ["" if i in absent else i for i in c.input]
            kept = []
            for a in c.attribute:
                if a.ref_attr_name:
                    src = given.get(a.ref_attr_name) or defaults.get(a.ref_attr_name)
                    if src is None:
                        continue  # an optional attribute the call does not set
                    a2 = AttributeProto()
                    a2.CopyFrom(src)
                    a2.name = a.name
                    a = a2
                kept.append(a)
            del c.attribute[:]
            c.attribute.extend(kept)
            body.append(c)
        env = {f: v for f, v in zip(fn.input, ins) if v is not None}
        outs = self.nested(body, env, list(fn.output), f"function {fn.domain}::{fn.name} (called by node "
                                                       f"'{n.name or n.output[0] if n.output else n.name}')")
        return outs[:len(n.output)]

    def if_node(self, n) -> list[Val]:
        """``If`` whose condition is a constant: the branch it takes (which may read the enclosing scope)."""
        (c,) = n.input[:1] or [""]
        cond = self.const_of(c, "If's condition").reshape(-1)
        if cond.size != 1:
            self.error(f"the condition has {cond.size} entries (one expected)")
        a = {x.name: x for x in n.attribute}
        branch = a.get("then_branch" if bool(cond[0]) else "else_branch")
        if branch is None or branch.type != 5:
            self.error("needs then_branch and else_branch graphs")
        g = branch.g
        if len(g.output) != len(n.output):
            self.error(f"the branch has {len(g.output)} outputs, the node {len(n.output)}")
        env = dict(self.env)
        env.update(self.initializers(g))
        return self.nested(list(g.node), env, [o.name for o in g.output],
                           f"If's {'then' if bool(cond[0]) else 'else'} branch")

    def attrs(self, n) -> dict:
        from onnx import helper
        return {a.name: helper.get_attribute_value(a) for a in n.attribute}

    # -- default-domain operators -------------------------------------------------------------------
    def onnx_node(self, n, ins: list) -> list[Val]:
        op, a, out = n.op_type, self.attrs(n), n.output[0] if n.output else "t"
        x = ins[0] if ins else None
        need = {"Constant": 0, "Shape": 1, "Identity": 1, "Transpose": 1, "Reshape": 2, "Flatten": 1,
                "Unsqueeze": 1, "Squeeze": 1, "Concat": 1, "Slice": 3, "Split": 1, "Expand": 2, "Cast": 1}
        if len([v for v in ins if v is not None]) < need.get(op, 0):
            self.error(f"needs at least {need[op]} input(s), got {len(ins)}")
        if any(v is None for v in ins[:need.get(op, len(ins))]):
            self.error("reads a value graphguard does not compute (an unused output of another node?)")
        if op == "Constant":
            return [self.constant(n)]
        if op == "Shape":
            if not all(isinstance(d, int) for d in x.shape):
                self.error("Shape of a tensor with symbolic dims is not supported yet")
            s = np.asarray(x.shape, dtype=np.int64)[slice(a.get("start"), a.get("end"))]
            return [Val((len(s),), "int64", const=s)]
        if op == "Identity":
            return [x if x.const is not None else self.op("core.identity", [x], out)]
        if op == "Transpose":
            perm = list(a.get("perm", range(len(x.shape) - 1, -1, -1)))
            return [self.op("core.permute", [x], out, dims=perm)]
        if op in ("Reshape", "Flatten", "Unsqueeze", "Squeeze"):
            return [self.op("core.reshape", [x], out, shape=dims_text(self.new_shape(op, x, ins, a)))]
        if op == "Concat":
            if "axis" not in a:
                self.error("needs attribute axis")
            if len(ins) == 1:
                return [ins[0]]
            return [self.op("core.concat", ins, out, dim=int(a["axis"]))]
        if op == "Slice":
            return [self.slice(x, ins, out)]
        if op == "Split":
            return self.split(x, ins, a, out, len(n.output))
        if op == "SplitToSequence":
            return [self.split_to_sequence(x, ins, a, out)]
        if op == "SequenceAt":
            if not isinstance(x, list):
                self.error("reads a sequence that is not SplitToSequence's")
            (k,) = self.ints_of(n.input[1], "SequenceAt's position") or [None]
            if not -len(x) <= k < len(x):
                self.error(f"position {k} is outside the sequence of {len(x)}")
            return [x[k]]
        if op == "ConstantOfShape":
            shape = self.ints_of(n.input[0], "ConstantOfShape's shape")
            if any(d < 0 for d in shape):
                self.error(f"negative size in {shape}")
            value = np.zeros([1], dtype=np.float32)
            if "value" in a:
                value = numpy_helper_to_array(a["value"])
            dtype = DTYPE_OF.get(int(a["value"].data_type)) if "value" in a else "float32"
            if dtype is None or value.size != 1:
                self.error("value must be a one-element tensor of a supported type")
            if int(np.prod(shape)) <= KNOWN_MAX:
                c = np.full(shape, value.reshape(-1)[0])
                return [Val(tuple(shape), dtype, const=c.astype(np.float64) if c.dtype.kind == "f" else c)]
            name = self.emit("onnx.ConstantFill", [], out, shape=shape, value=number_text(value.reshape(-1)[0]), dtype=dtype)
            return [Val(tuple(shape), dtype, name=name)]
        if op == "Range":
            if len(ins) != 3:
                self.error("needs start, limit and delta")
            vals = [self.const_of(i, "Range's inputs") for i in n.input]
            if vals[2].reshape(-1)[0] == 0:
                self.error("delta 0")
            c = np.arange(*(v.reshape(-1)[0] for v in vals))
            if c.size > KNOWN_MAX:
                self.error("a Range of more than 4096 entries is not supported yet")
            return [Val(c.shape, ins[0].dtype, const=c.astype(np.float64) if c.dtype.kind == "f" else c)]
        if op == "Trilu":
            k = self.ints_of(n.input[1], "Trilu's k")[0] if len(ins) > 1 and ins[1] is not None else 0
            return [self.op("onnx.Trilu", [x], out, upper=bool(a.get("upper", 1)), k=k)]
        if op == "Expand":
            shape = self.ints_of(n.input[1], "Expand's shape")
            r = max(len(shape), len(x.shape))
            xs, ss = (1,) * (r - len(x.shape)) + x.shape, [1] * (r - len(shape)) + shape
            target = [d if s == 1 else s for d, s in zip(xs, ss)]
            return [self.op("onnx.Expand", [x], out, shape=dims_text(target))]
        if op == "Cast":
            to = a.get("to")
            if to not in DTYPE_OF:
                self.error(f"unsupported target type {to}")
            return [self.op("onnx.Cast", [x], out, dtype=DTYPE_OF[to])]
        if op in ("ReduceSum", "ReduceMean", "ReduceMax"):
            return [self.reduce(n, op, x, ins, a, out)]
        if op == "Gemm" and (len(ins) == 2 or ins[2] is None):  # no C: alpha * A' @ B'
            return [self.gemm_without_c(ins, a, out)]
        if op == "LayerNormalization":
            return self.layer_norm(n, ins, a, out)
        if op == "RMSNormalization":
            return self.layer_norm(n, ins, a, out, rms=True)
        return [self.generic(n, op, ins, a, out)]

    def gemm_without_c(self, ins: list, a: dict, out: str) -> Val:
        unknown = set(a) - {"alpha", "beta", "transA", "transB"}
        if unknown:
            self.error(f"unknown attribute(s) {', '.join(sorted(unknown))}")
        m = []
        for v, t in zip(ins[:2], (a.get("transA", 0), a.get("transB", 0))):
            if len(v.shape) != 2:
                self.error(f"A and B must be matrices, got {dims_text(v.shape)}")
            m.append(self.op("core.permute", [v], out, dims=[1, 0]) if t else v)
        y = self.op("onnx.MatMul", m, out)
        alpha = float(a.get("alpha", 1.0))
        if alpha != 1.0:
            y = self.op("onnx.Mul", [y, Val((), y.dtype, const=np.asarray(alpha))], out)
        return y

    def constant(self, n) -> Val:
        from onnx import numpy_helper
        a = n.attribute
        if len(a) != 1:
            self.error("needs exactly one attribute")
        a = a[0]
        if a.name == "value":
            try:
                c = numpy_helper.to_array(a.t)
            except Exception:
                self.error("its tensor is malformed")
            dtype = DTYPE_OF.get(a.t.data_type)
            if dtype is None:
                self.error(f"unsupported element type {a.t.data_type}")
        elif a.name in ("value_float", "value_floats"):
            c = np.asarray(a.f if a.name == "value_float" else list(a.floats), dtype=np.float32)
            dtype = "float32"
        elif a.name in ("value_int", "value_ints"):
            c = np.asarray(a.i if a.name == "value_int" else list(a.ints), dtype=np.int64)
            dtype = "int64"
        else:
            self.error(f"attribute {a.name} is not supported")
        if c.size > KNOWN_MAX:
            self.error("constants of more than 4096 entries are not supported yet (make it an initializer)")
        if c.dtype.kind == "f":
            c = c.astype(np.float64)
        return Val(c.shape, dtype, const=c)

    def new_shape(self, op: str, x: Val, ins: list, a: dict) -> list:
        r = len(x.shape)
        if op == "Reshape":
            target = self.ints_of(self.node.input[1], "Reshape's shape")
            zero = bool(a.get("allowzero", 0))
            out = [x.shape[k] if (t == 0 and not zero) else t for k, t in enumerate(target)]
            if any(t == 0 and not zero for t in target[r:]) or target.count(-1) > 1 or any(t < -1 for t in target):
                self.error(f"shape {target} is not a valid target for a rank-{r} input")
            if -1 in out:
                k = out.index(-1)
                rest = numel([d for d in out if d != -1])
                total = numel(x.shape)
                if rest == 0 or (isinstance(total, int) and isinstance(rest, int) and total % rest):
                    self.error(f"cannot reshape {dims_text(x.shape)} to {target}")
                out[k] = S.norm(S.sym(total) / S.sym(rest))
            return out
        if op == "Flatten":
            ax = int(a.get("axis", 1))
            ax = ax + r if ax < 0 else ax
            if not 0 <= ax <= r:
                self.error(f"axis {a.get('axis')} out of range for a rank-{r} input")
            return [numel(x.shape[:ax]), numel(x.shape[ax:])]
        axes = self.ints_of(self.node.input[1], f"{op}'s axes") if len(ins) > 1 and ins[1] is not None \
            else list(a.get("axes", []))
        if op == "Unsqueeze":
            r2 = r + len(axes)
            axes = sorted(k + r2 if k < 0 else k for k in axes)
            if len(set(axes)) != len(axes) or any(not 0 <= k < r2 for k in axes):
                self.error(f"axes {axes} are not distinct dims of the rank-{r2} output")
            out, it = [], iter(x.shape)
            for k in range(r2):
                out.append(1 if k in axes else next(it))
            return out
        # Squeeze
        if not axes:
            if not all(isinstance(d, int) for d in x.shape):
                self.error("Squeeze without axes of a tensor with symbolic dims (which are 1 decides at run time)")
            axes = [k for k, d in enumerate(x.shape) if d == 1]
        axes = [k + r if k < 0 else k for k in axes]
        if any(not 0 <= k < r for k in axes) or any(not self.cx.prove("==", x.shape[k], 1) for k in axes):
            self.error(f"axes {axes} are not size-1 dims of {list(map(S.text, x.shape))}")
        return [d for k, d in enumerate(x.shape) if k not in axes]

    def slice(self, x: Val, ins: list, out: str) -> Val:
        names = list(self.node.input) + [""] * 5
        starts, ends = self.ints_of(names[1], "Slice's starts"), self.ints_of(names[2], "Slice's ends")
        r = len(x.shape)
        axes = self.ints_of(names[3], "Slice's axes") if names[3] else list(range(len(starts)))
        steps = self.ints_of(names[4], "Slice's steps") if names[4] else [1] * len(starts)
        if not len(starts) == len(ends) == len(axes) == len(steps):
            self.error("starts, ends, axes and steps differ in length")
        v = x
        for s, e, ax, st in zip(starts, ends, axes, steps):
            ax = ax + r if ax < 0 else ax
            if not 0 <= ax < r:
                self.error(f"axis {ax} out of range for a rank-{r} input")
            if st != 1:
                self.error(f"steps other than 1 are not supported yet (step {st} on axis {ax})")
            n = x.shape[ax]
            b = [self.bound(t, n) for t in (s, e)]
            if b[0] == 0 and b[1] is n:
                continue
            v = self.op("core.slice", [v], out, dim=ax, start=S.text(b[0]) if not isinstance(b[0], int) else b[0],
                        end=S.text(b[1]) if not isinstance(b[1], int) else b[1])
        return v if v is not x else self.op("core.identity", [x], out)

    def bound(self, t: int, n):
        """A Slice start/end clamped to [0, n] (negative: from the end), n possibly symbolic."""
        if t >= INT_MAX // 2:
            return n
        if isinstance(n, int):
            t = t + n if t < 0 else t
            return min(max(t, 0), n)
        if t < 0:
            if not self.cx.prove(">=", S.norm(S.sym(n) + t), 0):
                self.error(f"a negative bound {t} on a symbolic dim {S.text(n)} that may be shorter")
            return S.norm(S.sym(n) + t)
        if not self.cx.prove("<=", t, n):
            self.error(f"bound {t} may exceed the symbolic dim {S.text(n)}")
        return t

    def split(self, x: Val, ins: list, a: dict, out: str, n_out: int) -> list[Val]:
        r = len(x.shape)
        ax = int(a.get("axis", 0))
        ax = ax + r if ax < 0 else ax
        if not 0 <= ax < r:
            self.error(f"axis {a.get('axis', 0)} out of range for a rank-{r} input")
        if len(ins) > 1 and ins[1] is not None:
            sizes = self.ints_of(self.node.input[1], "Split's sizes")
        elif "split" in a:
            sizes = list(a["split"])
        else:
            k = int(a.get("num_outputs", n_out))
            n = x.shape[ax]
            if not isinstance(n, int):
                self.error("an even split of a symbolic dim is not supported yet")
            chunk = -(-n // k)
            sizes = [min(chunk, n - i * chunk) for i in range(k)]
        if len(sizes) != n_out or any(s < 0 for s in sizes):
            self.error(f"split sizes {sizes} do not fit its {n_out} outputs")
        if not self.cx.prove("==", sum(sizes), x.shape[ax]):
            self.error(f"split sizes {sizes} do not add up to dim {ax} of size {S.text(x.shape[ax])}")
        vals, start = [], 0
        for s in sizes:
            vals.append(self.op("core.slice", [x], out, dim=ax, start=start, end=start + s))
            start += s
        return vals

    def split_to_sequence(self, x: Val, ins: list, a: dict, out: str) -> list:
        """The pieces, as a Python list (SequenceAt with a constant position picks one; nothing else reads it)."""
        r = len(x.shape)
        ax = int(a.get("axis", 0))
        ax = ax + r if ax < 0 else ax
        if not 0 <= ax < r or not isinstance(x.shape[ax], int):
            self.error(f"axis {a.get('axis', 0)} is not a static dim of a rank-{r} input")
        n = x.shape[ax]
        if len(ins) > 1 and ins[1] is not None:
            split = self.const_of(self.node.input[1], "SplitToSequence's split")
            sizes = [int(v) for v in split.reshape(-1)]
            if split.ndim == 0:
                if sizes[0] <= 0:
                    self.error(f"split {sizes[0]} is not positive")
                sizes = [min(sizes[0], n - i) for i in range(0, n, sizes[0])]
            squeeze = False
        else:
            sizes, squeeze = [1] * n, not a.get("keepdims", 1)
        if sum(sizes) != n or any(v < 0 for v in sizes):
            self.error(f"split sizes {sizes} do not add up to dim {ax} of size {n}")
        vals, start = [], 0
        for v in sizes:
            piece = self.op("core.slice", [x], out, dim=ax, start=start, end=start + v)
            if squeeze:
                piece = self.op("core.reshape", [piece], out, shape=dims_text(x.shape[:ax] + x.shape[ax + 1:]))
            vals.append(piece)
            start += v
        return vals

    def reduce(self, n, op: str, x: Val, ins: list, a: dict, out: str) -> Val:
        if len(ins) > 1 and ins[1] is not None:
            axes = self.ints_of(n.input[1], f"{op}'s axes")
        else:
            axes = list(a.get("axes", []))
        if not axes and a.get("noop_with_empty_axes", 0):
            return self.op("core.identity", [x], out)
        unknown = set(a) - {"axes", "keepdims", "noop_with_empty_axes"}
        if unknown:
            self.error(f"unknown attribute(s) {', '.join(sorted(unknown))}")
        return self.op(f"onnx.{op}", [x], out, axes=axes or None, keepdims=bool(a.get("keepdims", 1)))

    def layer_norm(self, n, ins: list, a: dict, out: str, rms: bool = False) -> list[Val]:
        if not rms and (len(ins) < 3 or ins[2] is None):  # no bias: a zero one
            if len(ins) < 2 or ins[1] is None:
                self.error("needs X and Scale")
            if not all(isinstance(d, int) for d in ins[1].shape):
                self.error("a LayerNormalization without bias over symbolic dims is not supported yet")
            ins = [ins[0], ins[1], Val(ins[1].shape, ins[1].dtype, const=np.zeros(ins[1].shape))]
        if int(a.get("stash_type", 1)) != 1:
            self.error("stash_type other than 1 (float32) is not supported")
        r = len(ins[0].shape)
        ax = int(a.get("axis", -1))
        ax = ax + r if ax < 0 else ax
        if not 0 <= ax < r:
            self.error(f"axis {a.get('axis', -1)} out of range for a rank-{r} input")
        y = self.op("onnx.RMSNormalization" if rms else "onnx.LayerNormalization", ins[:2 if rms else 3], out,
                    normalized_shape=dims_text(ins[0].shape[ax:]),
                    epsilon=number_text(a.get("epsilon", 1e-5)))
        return [y]

    def generic(self, n, op: str, ins: list, a: dict, out: str) -> Val:
        name = f"onnx.{op}"
        d = self.reg.get(name)
        if d is None or d.meaning is not None:
            self.error(f"operator {op} is not supported (no loaded lemma pack defines '{name}')")
        if len(n.output) > 1 and any(n.output[1:]):
            self.error("only its first output is supported")
        if d.arity is not None and len(ins) != d.arity:
            self.error(f"takes {d.arity} inputs, got {len(ins)}")
        attrs = {}
        for k, v in a.items():
            spec = d.attr_spec(k)
            if spec is None:
                self.error(f"attribute {k} is not supported")
            if isinstance(v, bytes):
                v = v.decode("utf-8", "replace")
            elif spec.kind == "number":
                v = number_text(v)
            elif spec.kind == "bool":
                v = bool(v)
            elif isinstance(v, list):
                v = [int(t) for t in v]
            attrs[k] = v
        return self.op(name, ins, out, **attrs)

    # -- collectives (com.microsoft and the project's ai.graphguard domain), com.microsoft normalisations --
    def collective_or_ms_node(self, n, ins: list) -> list[Val]:
        op, a = n.op_type, self.attrs(n)
        if n.domain == MS_DOMAIN and op in MS_NORMS:
            return self.ms_norm(n, op, ins, a)
        kind = (MS_COLLECTIVES if n.domain == MS_DOMAIN else GG_COLLECTIVES).get(op)
        if kind is None:
            self.error(f"not supported: the {n.domain} operators read are the collectives "
                       f"{', '.join(MS_COLLECTIVES if n.domain == MS_DOMAIN else GG_COLLECTIVES)}" +
                       (f" and the normalisations {', '.join(MS_NORMS)}" if n.domain == MS_DOMAIN else ""))
        if self.rank is None:
            self.error("the specification runs on one device: it may hold no collective")
        if any(v is None for v in ins) or len(ins) != len(n.output) or not ins:
            self.error("needs one output per input")
        allowed = {"all_reduce": {"group_size", "reduction"}, "all_gather": {"group_size", "axis"},
                   "all_to_all": {"group_size"}, "reduce_scatter": {"group_size", "axis", "reduction"},
                   "broadcast": {"group_size", "src"}, "permute": {"source_target_pairs"}}[kind]
        if set(a) - allowed:
            self.error(f"unsupported attribute(s) {', '.join(sorted(set(a) - allowed))}")
        if kind == "permute":
            return [self.permute(x, o, a) for x, o in zip(ins, n.output)]
        gs = a.get("group_size", self.world if kind in ("all_reduce", "broadcast") else 1)
        if gs != self.world:
            self.error(f"group_size {gs} is not the world size {self.world} (collectives over every rank only)")
        attrs = {}
        if "reduction" in a or kind in ("all_reduce", "reduce_scatter"):
            red = a.get("reduction", "sum")
            red = red.decode("utf-8", "replace") if isinstance(red, bytes) else str(red)
            if red not in ("sum", "max", "avg") or (n.domain == MS_DOMAIN and red != "sum"):
                self.error(f"reduction {red!r} (com.microsoft AllReduce sums; ai.graphguard: sum, max, avg)")
            attrs["op"] = red
        if kind in ("all_gather", "reduce_scatter") and "axis" not in a:
            self.error(f"{op} needs an explicit axis" + (" (ONNX Runtime's schema defaults it to 1 but its shape "
                                                         "inference to 0)" if kind == "all_gather" else ""))
        if kind == "all_to_all":
            attrs = {"split_dim": 0, "concat_dim": 0}
        if kind == "broadcast":
            if not isinstance(a.get("src"), int) or not 0 <= a["src"] < self.world:
                self.error(f"src {a.get('src')} is not a rank of the {self.world}")
            attrs = {"src": a["src"]}
        outs = []
        for x, o in zip(ins, n.output):
            r = len(x.shape)
            shape = list(x.shape)
            at = dict(attrs)
            if kind in ("all_gather", "reduce_scatter"):
                ax = int(a["axis"])
                ax = ax + r if ax < 0 else ax
                if not 0 <= ax < r:
                    self.error(f"axis {a['axis']} out of range for a rank-{r} input")
                at["dim"] = ax
                if kind == "all_gather":
                    shape[ax] = S.norm(S.sym(shape[ax]) * self.world)
                else:
                    if not self.cx.prove("==", S.norm(S.sym(shape[ax]) % self.world), 0):
                        self.error(f"dim {ax} of size {S.text(shape[ax])} does not split into {self.world} equal parts")
                    shape[ax] = S.norm(S.sym(shape[ax]) / self.world)
            if kind == "all_to_all":
                if r == 0 or not self.cx.prove("==", S.norm(S.sym(shape[0]) % self.world), 0):
                    self.error(f"dim 0 of {dims_text(x.shape)} does not split into {self.world} equal parts")
            src = self.tensor(x)
            name = self.fresh(o)
            self.out.nodes.append(Collective(kind, tuple(range(self.world)), self.full(src), self.full(name), at,
                                             f"{self.source}:{n.name or op} ({op})", self.where()))
            outs.append(Val(tuple(shape), x.dtype, name=name))
        return outs

    def permute(self, x: Val, o: str, a: dict) -> Val:
        """ai.graphguard CollectivePermute (every rank runs it): x goes from each source to its target, as XLA's
        collective-permute; a rank that is no pair's target gets zeros."""
        flat = list(a.get("source_target_pairs", []))
        pairs = [tuple(flat[k:k + 2]) for k in range(0, len(flat), 2)]
        targets = [t for _, t in pairs]
        if not pairs or len(flat) % 2 or len(set(targets)) != len(targets) or \
                any(not 0 <= r < self.world for p in pairs for r in p) or any(s == t for s, t in pairs):
            self.error(f"source_target_pairs {flat} must be (source, target) pairs of distinct ranks below "
                       f"{self.world}, each target once")
        ranks = tuple(sorted({r for p in pairs for r in p}))
        receives = self.rank in targets
        if receives:
            name = self.fresh(o)
            result = Val(x.shape, x.dtype, name=name)
        else:
            result = Val(x.shape, x.dtype, name=self.emit("onnx.ConstantFill", [], o, shape=dims_text(x.shape),
                                                          value="0", dtype=x.dtype))
        if self.rank in ranks:
            src = self.full(self.tensor(x)) if any(s == self.rank for s, _ in pairs) else None
            self.out.nodes.append(Collective("permute", ranks, src, self.full(result.name) if receives else None,
                                             {"pairs": [list(p) for p in pairs]},
                                             f"{self.source}:{self.node.name or 'CollectivePermute'} "
                                             f"(CollectivePermute)", self.where()))
        return result

    def ms_norm(self, n, op: str, ins: list, a: dict) -> list[Val]:
        """ONNX Runtime's fused normalisations, as the default-domain ops they fuse:
        SimplifiedLayerNormalization(X, scale) = RMSNormalization; Skip[Simplified]LayerNormalization(input, skip,
        gamma[, beta][, bias]) = the normalisation of s = input + skip (+ bias), s its 4th output."""
        out = n.output[0] if n.output else "t"
        unknown = set(a) - {"axis", "epsilon", "stash_type"}
        if unknown:
            self.error(f"unsupported attribute(s) {', '.join(sorted(unknown))}")
        if op == "SimplifiedLayerNormalization":
            if len(ins) != 2 or None in ins:
                self.error("needs X and scale")
            if len(n.output) > 1 and any(n.output[1:]):
                self.error("only its first output is supported (inv_std_var is a training output)")
            return self.layer_norm(n, ins, a, out, rms=True)
        rms = op == "SkipSimplifiedLayerNormalization"
        if "axis" in a:
            self.error("has no axis attribute (it normalises the last dim)")
        x, skip = ins[0], ins[1] if len(ins) > 1 else None
        gamma = ins[2] if len(ins) > 2 else None
        beta = None if rms else (ins[3] if len(ins) > 3 else None)
        bias = ins[3 if rms else 4] if len(ins) > (3 if rms else 4) else None
        if x is None or skip is None or gamma is None or len(ins) > (4 if rms else 5):
            self.error("needs input, skip and gamma" + ("" if rms else " (beta and bias optional)"))
        if len(n.output) > 1 and any(n.output[1:3]):
            self.error("its mean / inv_std_var outputs are not supported (training outputs)")
        s = self.op("onnx.Add", [x, skip], out)
        if bias is not None:
            s = self.op("onnx.Add", [s, bias], out)
        if s.shape != x.shape:
            self.error(f"skip {dims_text(skip.shape)} does not broadcast to input {dims_text(x.shape)}")
        norm_ins = [s, gamma] if rms else [s, gamma, beta]
        (y,) = self.layer_norm(n, norm_ins, {"epsilon": a.get("epsilon", 1e-12)}, out, rms=rms)  # ORT's default
        return [y, None, None, s][:max(len(n.output), 1)]
