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
* ``com.microsoft`` ``AllReduce`` (sum) and ``AllGather`` (``axis``, ``group_size``) -- ONNX Runtime's
  collective contrib ops over every rank -- become :class:`Collective` records for stitching;
* graph outputs are ``out0``, ``out1``... (identities of the values returned).

Anything else -- another domain, subgraphs (If, Loop, Scan), ONNX functions, a shape input that is not a
constant -- is an error naming the file, the node and its op.
"""
from __future__ import annotations

import re

import numpy as np

from graphguard.errors import GraphGuardError, InputError
from graphguard.ir import scalar as S
from graphguard.ir.ops import Registry, number_text, numel

from ..stitch import Collective, RankGraph

KNOWN_MAX = 4096  # constants up to this many entries are tracked by value (and folded)
LITERAL_MAX = 4096
ONNX_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"
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

    def where(self) -> str:
        n = self.node
        dom = f"{n.domain}::" if n.domain not in ONNX_DOMAINS else ""
        return f"{self.source}: node '{n.name or n.output[0] if n.output else n.name}' ({dom}{n.op_type})"

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
            node["loc"] = f"{self.source}:{self.node.name or self.node.op_type} ({self.node.op_type})"
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
    def run(self, cx) -> RankGraph:
        from onnx import numpy_helper
        self.cx = cx
        g = self.g
        if self.m.functions:
            raise InputError(f"{self.source}: the model defines ONNX functions "
                             f"({', '.join(f.name for f in list(self.m.functions)[:3])}): not supported yet")
        inits = {}
        for t in g.initializer:
            shape, dtype = tuple(int(d) for d in t.dims), DTYPE_OF.get(t.data_type)
            if dtype is None:
                raise InputError(f"{self.source}: initializer '{t.name}': unsupported element type {t.data_type}")
            const = None
            if t.data_location != 1 and int(np.prod(shape, dtype=np.int64)) <= KNOWN_MAX:  # 1: external data
                try:
                    const = numpy_helper.to_array(t)
                except Exception as e:  # a malformed TensorProto: its data does not match its dims
                    raise InputError(f"{self.source}: initializer '{t.name}' is malformed: "
                                     f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
                if const.dtype.kind == "f":
                    const = const.astype(np.float64)
            inits[t.name] = Val(shape, dtype, const=const, init=t.name)
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
        for a in n.attribute:
            if a.type in (5, 10):  # GRAPH, GRAPHS
                self.error("subgraphs (If, Loop, Scan) are not supported yet")
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
        if n.domain in ONNX_DOMAINS:
            outs = self.onnx_node(n, ins)
        elif n.domain == MS_DOMAIN:
            outs = self.ms_node(n, ins)
        else:
            self.error(f"operators of domain '{n.domain}' are not supported" +
                       (" (an ONNX function: not inlined yet)" if n.domain in self.opset else ""))
        if len(outs) > len(n.output):
            self.error(f"has {len(n.output)} outputs, expected {len(outs)}")
        for name, v in zip(n.output, outs):
            if name:
                self.env[name] = v
        for name in list(n.output)[len(outs):]:
            if name:
                self.env[name] = None  # an output graphguard does not compute: an error where read

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
        if op == "LayerNormalization":
            return self.layer_norm(n, ins, a, out)
        if op == "RMSNormalization":
            return self.layer_norm(n, ins, a, out, rms=True)
        return [self.generic(n, op, ins, a, out)]

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
        if not rms and (len(ins) < 3 or ins[2] is None):
            self.error("LayerNormalization without a bias is not supported yet")
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

    # -- com.microsoft collectives --------------------------------------------------------------
    def ms_node(self, n, ins: list) -> list[Val]:
        op, a = n.op_type, self.attrs(n)
        if op not in ("AllReduce", "AllGather"):
            self.error("only the com.microsoft collectives AllReduce and AllGather are supported")
        if self.rank is None:
            self.error("the specification runs on one device: it may hold no collective")
        if any(v is None for v in ins) or len(ins) != len(n.output) or not ins:
            self.error("needs one output per input")
        gs = a.get("group_size", self.world if op == "AllReduce" else 1)
        if gs != self.world:
            self.error(f"group_size {gs} is not the world size {self.world} (collectives over every rank only)")
        if op == "AllReduce":
            if set(a) - {"group_size", "reduction"} or a.get("reduction", b"sum") not in (b"sum", "sum"):
                self.error(f"unsupported attributes {a} (AllReduce sums over every rank)")
            kind, attrs = "all_reduce", {"op": "sum"}
        else:
            if "axis" not in a:
                self.error("AllGather needs an explicit axis (ONNX Runtime's schema defaults it to 1 but its shape "
                           "inference to 0)")
            if set(a) - {"group_size", "axis"}:
                self.error(f"unsupported attributes {sorted(set(a) - {'group_size', 'axis'})}")
            kind = "all_gather"
        outs = []
        for x, o in zip(ins, n.output):
            r = len(x.shape)
            shape = list(x.shape)
            if kind == "all_gather":
                ax = int(a["axis"])
                ax = ax + r if ax < 0 else ax
                if not 0 <= ax < r:
                    self.error(f"axis {a['axis']} out of range for a rank-{r} input")
                attrs = {"dim": ax}
                shape[ax] = S.norm(S.sym(shape[ax]) * self.world)
            src = self.tensor(x)
            name = self.fresh(o)
            self.out.nodes.append(Collective(kind, tuple(range(self.world)), self.full(src), self.full(name), attrs,
                                             f"{self.source}:{n.name or op} ({op})", self.where()))
            outs.append(Val(tuple(shape), x.dtype, name=name))
        return outs
