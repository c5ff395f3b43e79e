"""Convert one HLO :class:`Module` into the IR program of one rank (a :class:`RankGraph`; G_s: rank None).

Instantiation: ``partition-id`` / ``replica-id`` are this rank's ids, and every value computed only from
constants and ids is folded with the NumPy references of the ``hlo`` pack (``dynamic-slice(constant
s32[N]{...}, partition-id)``, ``convert``/``multiply``/``add`` arithmetic, ``and`` + ``select``...). A folded
value that a tensor op still needs is emitted as a constant (``hlo.constant`` for a splat, ``hlo.literal``
when small) or, when large (an iota mask), as the ops that compute it.

Rules (see ``lemma_packs/hlo/ops.py`` for the op conventions):

* data movement becomes clean core ops -- reshape/bitcast (and a broadcast that only adds size-1 dims) ->
  ``core.reshape``, transpose -> ``core.permute``, stride-1 slice and dynamic-slice with known offsets ->
  ``core.slice``, concatenate -> ``core.concat``, dynamic-update-slice with known offsets and pad with a
  known value -> ``core.concat`` of slices and constants; copies, tuples, get-tuple-element and
  optimization barriers disappear;
* fusion / call / async computations are inlined, a conditional with a known predicate is its branch;
  reducers of reduce and the collectives are interpreted (add -> sum, maximum -> max...);
* collectives become :class:`Collective` records for stitching: all-reduce, all-gather, reduce-scatter,
  all-to-all (array form: one collective; tuple form: point-to-point), collective-permute (point-to-point;
  ranks that receive nothing get zeros); their ``-start``/``-done`` forms too;
* a custom call is the op ``hlo.custom_call.<target>`` when a loaded pack defines it (GSPMD's ``Sharding``
  annotation is an identity); every other op is ``hlo.<opcode>`` with ``-`` written ``_``.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphguard.errors import InputError, ShapeError
from graphguard.ir.ops import Registry, normalize_attrs, number_text

from ..stitch import Collective, RankGraph
from .module import ELIDED, Computation, Instruction, Module, Shape, numpy_dtype, stored

KNOWN_MAX = 4096  # values up to this many elements are tracked (and folded) while converting
LITERAL_MAX = 64  # folded values up to this size are emitted as hlo.literal; larger ones as the ops computing them

ELEMENTWISE = {
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or", "xor",
    "shift-left", "shift-right-arithmetic", "negate", "abs", "sign", "exponential", "exponential-minus-one", "log",
    "log-plus-one", "sqrt", "rsqrt", "cbrt", "tanh", "logistic", "sine", "cosine", "tan", "erf", "floor", "ceil",
    "round-nearest-afz", "round-nearest-even", "not", "is-finite", "compare", "select", "clamp", "convert"}
REDUCERS = {"add": "sum", "multiply": "prod", "maximum": "max", "minimum": "min", "and": "and", "or": "or"}
COLLECTIVE_REDUCERS = ("sum", "max")  # what core.all_reduce / core.reduce_scatter express
IDENTITY = {"copy", "domain", "opt-barrier", "optimization-barrier", "add-dependency"}
# custom calls that only annotate (GSPMD's and Shardy's sharding annotations), when shapes are unchanged
IDENTITY_TARGETS = {"Sharding", "xla.sdy.FuncResultSharding"}
UNSUPPORTED = {"while": "while loops are not supported (unroll the loop before dumping)",
               "scatter": "scatter is not supported yet", "sort": "sort is not supported yet",
               "convolution": "convolution is not supported yet", "reduce-window": "reduce-window is not supported yet",
               "select-and-scatter": "select-and-scatter is not supported yet", "rng": "random numbers are not supported",
               "rng-bit-generator": "random numbers are not supported", "send": "send/recv are not supported",
               "recv": "send/recv are not supported", "infeed": "infeed is not supported",
               "outfeed": "outfeed is not supported"}


@dataclass
class Val:
    """An array value: its IR tensor (once emitted) and/or its known contents (a 0-d array when ``splat``).
    ``build`` emits the ops that compute a known value, for values too large to write as a literal."""
    shape: Shape
    name: str | None = None
    const: np.ndarray | None = None
    splat: bool = False
    build: Callable[[], Val] | None = field(default=None, repr=False)
    hint: str = "c"  # a name for the constant, when emitted
    structural: bool = False  # emit through ``build`` at any size (a broadcast of a known value stays one)

    def full(self) -> np.ndarray:
        return np.broadcast_to(self.const, self.shape.dims) if self.splat else self.const


@dataclass
class Tup:
    items: list


def _leaves(s: Shape) -> int:
    return sum(_leaves(e) for e in s.elements) if s.is_tuple else int(s.is_array)


def op_name(opcode: str) -> str:
    return "hlo." + opcode.replace("-", "_")


def _ident(s: str) -> str:
    s = re.sub(r"[^A-Za-z0-9_.]", "_", s)
    return s if re.match(r"[A-Za-z_]", s) else "t" + s




class Converter:
    def __init__(self, module: Module, reg: Registry, rank: int | None, world: int, ids: dict):
        self.m, self.reg, self.rank, self.world, self.ids = module, reg, rank, world, ids
        self.out = RankGraph([], [], [])
        self.taken: set[str] = set()  # names handed out (never again)
        self.used: set[str] = set()  # names of emitted tensors
        self.params: dict[tuple, dict] = {}
        self.live_cache: dict[str, set] = {}
        self.used_ids: set[str] = set()

    # -- names ----------------------------------------------------------------------------------
    def full(self, name: str) -> str:
        return name if self.rank is None else f"{name}@{self.rank}"

    def fresh(self, base: str) -> str:
        base = _ident(base)
        name, k = base, 1
        while name in self.taken:
            k += 1
            name = f"{base}.{k}"
        self.taken.add(name)
        return name

    def where(self, ins: Instruction) -> str:
        loc = f" at {ins.loc}" if ins.loc else ""
        return f"{self.m.source}: instruction '{ins.name}' ({ins.opcode}){loc}"

    # -- emitting ---------------------------------------------------------------------------------
    def declare(self, name: str, shape: Shape) -> None:
        self.used.add(name)
        self.taken.add(name)
        self.out.shapes[self.full(name)] = {"shape": list(shape.dims), "dtype": shape.dtype}

    def emit(self, op: str, inputs: list[Val], name: str, oshape: Shape, loc: str | None, **attrs) -> Val:
        ins = [self.tensor(v) for v in inputs]
        name = self.fresh(name) if name in self.used else name
        self.used.add(name)
        self.taken.add(name)
        node = {"name": self.full(name), "op": op, "inputs": [self.full(i) for i in ins],
                "outputs": [self.full(name)], "attrs": attrs}
        if loc:
            node["loc"] = loc
        self.out.nodes.append(node)
        self.declare(name, oshape)
        return Val(oshape, name=name)

    def tensor(self, v) -> str:
        """The IR tensor holding ``v`` (emitting a known value as a constant or its ops on first use)."""
        if isinstance(v, Tup):
            raise InputError(f"{self.m.source}: a tuple is used where an array is expected")
        if v.name is not None:
            return v.name
        if v.const is None:
            raise InputError(f"{self.m.source}: value of '{v.hint}' is unknown (a constant elided from the dump?)")
        flat = v.full() if v.const.size <= KNOWN_MAX or v.splat else None
        dtype = v.shape.dtype
        name = v.hint
        if v.splat or (flat is not None and flat.size and (flat == flat.flat[0]).all()):
            first = v.const.reshape(-1)[0] if v.const.size else 0
            val = self.emit("hlo.constant", [], name, v.shape, None, shape=list(v.shape.dims), value=number_text(first),
                            dtype=dtype)
        elif v.build is not None and (v.const.size > LITERAL_MAX or v.structural):
            val = v.build()
        else:
            val = self.emit("hlo.literal", [], name, v.shape, None, shape=list(v.shape.dims),
                            values=",".join(number_text(x) for x in np.asarray(v.const).reshape(-1)), dtype=dtype)
        v.name = val.name
        return v.name

    def known(self, shape: Shape, value, build=None, hint: str = "c") -> Val:
        value = stored(np.asarray(value).astype(numpy_dtype(shape.dtype), copy=False), shape.dtype)
        if value.shape != tuple(shape.dims):
            value = value.reshape(shape.dims)
        if value.size > KNOWN_MAX:
            if build is None:
                raise AssertionError("a large known value needs its ops")
            return build()
        return Val(shape, const=value, build=build, hint=hint)

    # -- the walk -------------------------------------------------------------------------------
    def run(self) -> RankGraph:
        entry = self.m.computations[self.m.entry]
        for i in entry.instructions:
            if i.opcode == "parameter":
                self.taken.add(_ident(i.name))
        n_out = _leaves(entry.by_name[entry.root].shape)
        self.taken |= {f"out{k}" for k in range(n_out)}
        result = self.computation(entry, None, "")
        flat: list[Val] = []
        self._flatten(result, flat)
        for k, v in enumerate(flat):
            name = f"out{k}" if k < n_out else self.fresh(f"out{k}")
            src = self.tensor(v)
            self.emit("core.identity", [Val(v.shape, name=src)], name, v.shape, None)
            self.out.outputs.append(self.full(name))
        self.out.inputs = [self.params[k] for k in sorted(self.params)]
        if {"partition-id", "replica-id"} <= self.used_ids and self.ids.get("ambiguous"):
            raise InputError(f"{self.m.source}: the module uses both partition-id and replica-id but declares "
                             f"neither num_partitions nor replica_count")
        return self.out

    def _flatten(self, v, out: list) -> None:
        if isinstance(v, Tup):
            for x in v.items:
                self._flatten(x, out)
        elif v is not None:
            out.append(v)

    def live(self, comp: Computation) -> set:
        if comp.name not in self.live_cache:
            seen, stack = set(), [comp.root]
            while stack:
                n = stack.pop()
                if n not in seen:
                    seen.add(n)
                    stack.extend(comp.by_name[n].operands)
            self.live_cache[comp.name] = seen
        return self.live_cache[comp.name]

    def computation(self, comp: Computation, args: list | None, prefix: str):
        env: dict[str, object] = {}
        live = self.live(comp)
        for ins in comp.instructions:
            if ins.name in live:
                for o in ins.operands:
                    if o not in env:
                        raise InputError(f"{self.where(ins)}: operand '{o}' is used before it is defined")
                env[ins.name] = self.instruction(ins, [env[o] for o in ins.operands], args, prefix)
        return env[comp.root]

    def call(self, ins: Instruction, comp_name: str, args: list, caller: str):
        """Inline computation ``comp_name`` on ``args``; its instructions are named ``<caller>.<name>``."""
        comp = self.m.computations[comp_name]
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        if len(params) != len(args):
            raise InputError(f"{self.where(ins)}: calls '{comp_name}' with {len(args)} operand(s), which takes "
                             f"{len(params)}")
        return self.computation(comp, args, f"{caller}.")

    # -- instructions ---------------------------------------------------------------------------
    def instruction(self, ins: Instruction, xs: list, args: list | None, prefix: str):
        op = ins.opcode
        try:
            if op == "parameter":
                return self.parameter(ins, args)
            name = self.fresh(f"{prefix}{ins.name}")
            if op in UNSUPPORTED:
                raise InputError(f"{self.where(ins)}: {UNSUPPORTED[op]}")
            handler = HANDLERS.get(op)
            if handler is not None:
                return handler(self, ins, xs, name, prefix)
            if op in ELEMENTWISE:
                return self.elementwise(ins, xs, name)
            raise InputError(f"{self.where(ins)}: opcode '{op}' is not supported by the hlo frontend")
        except ShapeError as e:
            raise InputError(f"{self.where(ins)}: {e}") from None
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as e:  # attributes missing or odd
            raise InputError(f"{self.where(ins)}: malformed instruction ({type(e).__name__}: {e})") from None

    def parameter(self, ins: Instruction, args):
        k = ins.attrs["parameter_number"]
        if args is not None:
            if not 0 <= k < len(args):
                raise InputError(f"{self.where(ins)}: parameter {k} of a computation called with {len(args)}")
            return args[k]

        def make(shape: Shape, base: str):
            if shape.is_tuple:
                return Tup([make(s, f"{base}.{i}") for i, s in enumerate(shape.elements)])
            if not shape.is_array:
                return None
            n = _ident(base)
            self.taken.add(n)
            self.params[(k, len(self.params))] = {"name": self.full(n), "shape": list(shape.dims),
                                                        "dtype": shape.dtype}
            self.declare(n, shape)
            return Val(shape, name=n)
        return make(ins.shape, ins.name)

    def array(self, ins: Instruction, x, what: str = "operand") -> Val:
        if not isinstance(x, Val):
            raise InputError(f"{self.where(ins)}: {what} is a tuple or token, expected an array")
        return x

    def apply(self, ins: Instruction, op: str, xs: list[Val], name: str, **attrs) -> Val:
        """``op(xs)`` with attributes (the result shaped like ``ins``): folded when every input is known (and
        small), else emitted."""
        shape = ins.shape
        opdef = self.reg.get(op)
        if opdef is None:
            raise InputError(f"{self.where(ins)}: operator '{op}' is unknown: no loaded lemma pack defines it "
                             f"(the 'hlo' pack defines the HLO opcodes; is it disabled?)")

        def build():
            return self.emit(op, xs, name, shape, ins.loc, **attrs)
        if xs and all(x.const is not None for x in xs) and opdef.ref is not None:
            norm = dict(normalize_attrs(opdef, attrs, self.where(ins)))
            if all(x.splat for x in xs) and ins.opcode in ELEMENTWISE:
                with np.errstate(all="ignore"):
                    value = np.asarray(opdef.ref([x.const for x in xs], norm))
                return Val(shape, const=stored(value.astype(numpy_dtype(shape.dtype)), shape.dtype), splat=True,
                           build=build, hint=name)
            if sum(x.const.size if not x.splat else int(np.prod(x.shape.dims)) for x in xs) <= KNOWN_MAX \
                    and int(np.prod(shape.dims)) <= KNOWN_MAX:
                with np.errstate(all="ignore"):
                    value = opdef.ref([x.full() for x in xs], norm)
                return self.known(shape, value, build, name)
        return build()

    def elementwise(self, ins: Instruction, xs: list, name: str) -> Val:
        xs = [self.array(ins, x) for x in xs]
        attrs = {}
        if ins.opcode == "compare":
            attrs["direction"] = ins.attrs.get("direction", "")
        if ins.opcode == "convert":
            if xs[0].shape.dtype == ins.shape.dtype:
                return xs[0]
            attrs["dtype"] = ins.shape.dtype
        if ins.opcode == "select" and xs[0].const is not None:
            p = xs[0].full()
            if p.size and (p == p.flat[0]).all():  # a known predicate picks a branch (the and/select id form)
                return xs[1] if bool(p.flat[0]) else xs[2]
        return self.apply(ins, op_name(ins.opcode), xs, name, **attrs)

    # -- data movement --------------------------------------------------------------------------
    def reshape_to(self, ins: Instruction, x: Val, shape: Shape, name: str) -> Val:
        if tuple(x.shape.dims) == tuple(shape.dims):
            return x

        def build():
            return self.emit("core.reshape", [x], name, shape, ins.loc, shape=list(shape.dims))
        if x.const is not None:
            if x.splat:
                return Val(shape, const=x.const, splat=True, build=build, hint=name)
            return self.known(shape, x.const.reshape(shape.dims), build, name)
        return build()

    def slice_dims(self, ins: Instruction, x: Val, ranges: list[tuple[int, int]], name: str, shape: Shape) -> Val:
        """x[a0:b0, a1:b1, ...] as core.slice per dim that is not taken whole."""
        cut = [(d, a, b) for d, (a, b) in enumerate(ranges) if (a, b) != (0, x.shape.dims[d])]
        if not cut:
            return x

        def build():
            cur = x
            dims = list(x.shape.dims)
            for k, (d, a, b) in enumerate(cut):
                dims[d] = b - a
                last = k == len(cut) - 1
                cur = self.emit("core.slice", [cur], name if last else self.fresh(f"{name}.s{d}"),
                                Shape(x.shape.dtype, tuple(dims)), ins.loc, dim=d, start=a, end=b)
            return cur
        if x.const is not None:
            if x.splat:
                return Val(shape, const=x.const, splat=True, build=build, hint=name)
            return self.known(shape, x.const[tuple(slice(a, b) for a, b in ranges)], build, name)
        return build()

    def concat(self, ins: Instruction, parts: list[Val], dim: int, name: str, shape: Shape) -> Val:
        parts = [p for p in parts if p.shape.dims[dim] != 0] or parts[:1]
        if len(parts) == 1:
            return parts[0]

        def build():
            return self.emit("core.concat", parts, name, shape, ins.loc, dim=dim)
        if all(p.const is not None for p in parts) and int(np.prod(shape.dims)) <= KNOWN_MAX:
            return self.known(shape, np.concatenate([p.full() for p in parts], axis=dim), build, name)
        return build()

    def constant_like(self, shape: Shape, value, hint: str) -> Val:
        return Val(shape, const=np.asarray(value).astype(numpy_dtype(shape.dtype)), splat=True, hint=hint)

    def starts(self, ins: Instruction, xs: list, first: int, rank: int) -> list[int] | None:
        """Known start indices of a dynamic (update) slice, or None."""
        idx = [self.array(ins, x, "a start index") for x in xs[first:]]
        if len(idx) == 1 and rank != 1 and len(idx[0].shape.dims) == 1:  # the old form: one index vector
            return [int(v) for v in idx[0].full()] if idx[0].const is not None else None
        if len(idx) != rank:
            raise InputError(f"{self.where(ins)}: needs {rank} start indices, got {len(idx)}")
        if any(x.const is None for x in idx):
            return None
        return [int(np.asarray(x.full()).reshape(())) for x in idx]


# -- handlers -------------------------------------------------------------------------------------

def _dim(c: Converter, ins: Instruction) -> int:
    """The one dimension of concatenate / iota / all-gather / reduce-scatter."""
    dims = ins.attrs.get("dimensions") or []
    if len(dims) != 1:
        raise InputError(f"{c.where(ins)}: needs one dimension (dimensions={{d}}), got {dims}")
    return dims[0]


def _constant(c: Converter, ins: Instruction, xs, name, prefix):
    if ins.literal is ELIDED:
        return Val(ins.shape, hint=name)
    if not ins.shape.is_array:
        raise InputError(f"{c.where(ins)}: constants of shape {ins.shape} are not supported")
    value = np.asarray(ins.literal)
    if value.size and (value == value.flat[0]).all():
        return Val(ins.shape, const=value.reshape(-1)[:1].reshape(()), splat=True, hint=name)
    if value.size <= KNOWN_MAX:
        return Val(ins.shape, const=value, hint=name)
    v = Val(ins.shape, const=value, hint=name)  # a large literal: written out when used
    c.tensor(v)
    return Val(ins.shape, name=v.name)


def _id(kind: str):
    def f(c: Converter, ins: Instruction, xs, name, prefix):
        c.used_ids.add(ins.opcode)
        value = c.ids["partition" if kind == "partition-id" else "replica"]
        return c.constant_like(ins.shape, value, name)
    return f


def _iota(c: Converter, ins: Instruction, xs, name, prefix):
    attrs = {"shape": list(ins.shape.dims), "dimension": _dim(c, ins), "dtype": ins.shape.dtype}

    def build():
        return c.emit("hlo.iota", [], name, ins.shape, ins.loc, **attrs)
    if int(np.prod(ins.shape.dims)) <= KNOWN_MAX:
        opdef = c.reg.get("hlo.iota")
        return c.known(ins.shape, opdef.ref([], dict(normalize_attrs(opdef, attrs, c.where(ins)))), build, name)
    return build()


def _tuple(c, ins, xs, name, prefix):
    return Tup(list(xs))


def _gte(c, ins, xs, name, prefix):
    t = xs[0]
    if not isinstance(t, Tup):
        raise InputError(f"{c.where(ins)}: operand is not a tuple")
    k = ins.attrs["tuple_index"]
    if not 0 <= k < len(t.items):
        raise InputError(f"{c.where(ins)}: index {k} out of range for a {len(t.items)}-tuple")
    return t.items[k]


def _identity(c, ins, xs, name, prefix):
    return xs[0] if xs else None


def _token(c, ins, xs, name, prefix):
    return None


def _reshape(c, ins, xs, name, prefix):
    return c.reshape_to(ins, c.array(ins, xs[0]), ins.shape, name)


def _transpose(c, ins, xs, name, prefix):
    x = c.array(ins, xs[0])
    perm = list(ins.attrs["dimensions"])
    if perm == list(range(len(perm))):
        return x

    def build():
        return c.emit("core.permute", [x], name, ins.shape, ins.loc, dims=perm)
    if x.const is not None:
        if x.splat:
            return Val(ins.shape, const=x.const, splat=True, build=build, hint=name)
        return c.known(ins.shape, np.transpose(x.const, perm), build, name)
    return build()


def _broadcast(c, ins, xs, name, prefix):
    x = c.array(ins, xs[0])
    dims, out = list(ins.attrs["dimensions"]), tuple(ins.shape.dims)
    if x.splat or (x.const is not None and x.const.size == 1):
        build = lambda: c.emit("hlo.broadcast", [x], name, ins.shape, ins.loc, shape=list(out), dimensions=dims)
        return Val(ins.shape, const=x.const.reshape(()), splat=True, build=build, hint=name)
    if dims == sorted(dims) and int(np.prod(out)) == int(np.prod(x.shape.dims)) and int(np.prod(out)) > 0:
        return c.reshape_to(ins, x, ins.shape, name)  # only adds size-1 dims
    v = c.apply(ins, "hlo.broadcast", [x], name, shape=list(out), dimensions=dims)
    # a known value broadcast is emitted as the broadcast of its (literal) operand whatever its size, as the
    # specification's larger copy is: the pieces of one meet the other
    v.structural = x.const is not None
    return v


def _slice(c, ins, xs, name, prefix):
    x = c.array(ins, xs[0])
    sl = ins.attrs.get("slice") or []
    if len(sl) != len(x.shape.dims):
        raise InputError(f"{c.where(ins)}: slice needs one [start:limit] per dim of {x.shape}")
    if all(s == 1 for _, _, s in sl):
        return c.slice_dims(ins, x, [(a, b) for a, b, _ in sl], name, ins.shape)
    return c.apply(ins, "hlo.slice", [x], name, starts=[a for a, _, _ in sl], limits=[b for _, b, _ in sl],
                   strides=[s for _, _, s in sl])


def _concatenate(c, ins, xs, name, prefix):
    parts = [c.array(ins, x) for x in xs]
    return c.concat(ins, parts, _dim(c, ins), name, ins.shape)


def _dynamic_slice(c, ins, xs, name, prefix):
    x = c.array(ins, xs[0])
    sizes = ins.attrs.get("dynamic_slice_sizes") or list(ins.shape.dims)
    starts = c.starts(ins, xs, 1, len(x.shape.dims))
    if starts is None:
        return c.apply(ins, "hlo.dynamic_slice", [x] + [c.array(ins, s) for s in xs[1:]], name, sizes=list(sizes))
    st = [min(max(s, 0), n - z) for s, n, z in zip(starts, x.shape.dims, sizes)]
    return c.slice_dims(ins, x, [(s, s + z) for s, z in zip(st, sizes)], name, ins.shape)


def _dynamic_update_slice(c, ins, xs, name, prefix):
    x, u = c.array(ins, xs[0]), c.array(ins, xs[1])
    starts = c.starts(ins, xs, 2, len(x.shape.dims))
    if starts is None or (x.const is not None and u.const is not None):
        return c.apply(ins, "hlo.dynamic_update_slice", [x, u] + [c.array(ins, s) for s in xs[2:]], name)
    st = [min(max(s, 0), n - z) for s, n, z in zip(starts, x.shape.dims, u.shape.dims)]

    def place(base: Val, d: int, final: bool) -> Val:
        if d == len(st):
            return u
        n, z, s = base.shape.dims[d], u.shape.dims[d], st[d]
        if z == n:
            return place(base, d + 1, final)
        parts = []

        def part(a, b, tag):
            dims = list(base.shape.dims)
            dims[d] = b - a
            return c.slice_dims(ins, base, [(a, b) if k == d else (0, m) for k, m in enumerate(base.shape.dims)],
                                c.fresh(f"{name}.{tag}{d}"), Shape(base.shape.dtype, tuple(dims)))
        if s > 0:
            parts.append(part(0, s, "before"))
        parts.append(place(part(s, s + z, "at"), d + 1, False))
        if s + z < n:
            parts.append(part(s + z, n, "after"))
        return c.concat(ins, parts, d, name if final else c.fresh(f"{name}.d{d}"), base.shape)
    return place(x, 0, True)


def _pad(c, ins, xs, name, prefix):
    x, v = c.array(ins, xs[0]), c.array(ins, xs[1])
    pad = ins.attrs.get("padding") or []
    if len(pad) != len(x.shape.dims):
        raise InputError(f"{c.where(ins)}: padding needs one low_high[_interior] per dim of {x.shape}")
    if v.const is None or any(i for _, _, i in pad) or x.const is not None:
        return c.apply(ins, "hlo.pad", [x, v], name, low=[p[0] for p in pad], high=[p[1] for p in pad],
                       interior=[p[2] for p in pad])
    cur = x
    todo = [d for d, (lo, hi, _) in enumerate(pad) if lo or hi]
    for k, d in enumerate(todo):
        lo, hi, _ = pad[d]
        last = k == len(todo) - 1
        dims = list(cur.shape.dims)
        if lo < 0 or hi < 0:
            a, b = max(-lo, 0), dims[d] - max(-hi, 0)
            dims[d] = b - a
            cur = c.slice_dims(ins, cur, [(a, b) if j == d else (0, m) for j, m in enumerate(cur.shape.dims)],
                               c.fresh(f"{name}.crop{d}"), Shape(cur.shape.dtype, tuple(dims)))
            lo, hi = max(lo, 0), max(hi, 0)
        parts = []
        for width in (lo, None, hi):
            if width is None:
                parts.append(cur)
            elif width:
                fd = list(cur.shape.dims)
                fd[d] = width
                parts.append(c.constant_like(Shape(cur.shape.dtype, tuple(fd)), v.full().reshape(()), f"{name}.fill"))
        out = list(cur.shape.dims)
        out[d] = sum(p.shape.dims[d] for p in parts)
        cur = c.concat(ins, parts, d, name if last else c.fresh(f"{name}.pad{d}"), Shape(cur.shape.dtype, tuple(out)))
    return cur


def _reducer(c: Converter, ins: Instruction, comp_name: str) -> str:
    comp = c.m.computations[comp_name]
    root = comp.by_name[comp.root]
    params = sorted((i for i in comp.instructions if i.opcode == "parameter"),
                    key=lambda i: i.attrs["parameter_number"])
    kind = REDUCERS.get(root.opcode)
    if kind is None or len(params) != 2 or sorted(root.operands) != sorted(p.name for p in params):
        raise InputError(f"{c.where(ins)}: reducer computation '{comp_name}' is not one of "
                         f"{', '.join(sorted(REDUCERS))} of its two parameters")
    return kind


def _reduce(c, ins, xs, name, prefix):
    if len(xs) != 2 or not ins.called:
        raise InputError(f"{c.where(ins)}: reduce of several operands (variadic, e.g. argmax) is not supported yet")
    x, init = c.array(ins, xs[0]), c.array(ins, xs[1])
    reducer = _reducer(c, ins, ins.called[0])
    if init.const is None:
        raise InputError(f"{c.where(ins)}: the reduce's init value must be a constant")
    value = init.full().reshape(-1)[0]
    dims = list(ins.attrs["dimensions"])
    unit = [d for d in dims if x.shape.dims[d] == 1]
    if unit and _is_identity(reducer, value):
        # reducing a size-1 dim from the reducer's identity only drops the dim: data movement, a reshape
        # (as a broadcast that only adds size-1 dims is one) -- the same whichever unit dims a program reduces
        kept = tuple(n for d, n in enumerate(x.shape.dims) if d not in unit)
        rest = [d - sum(1 for u in unit if u < d) for d in dims if d not in unit]
        x = c.reshape_to(ins, x, Shape(x.shape.dtype, kept), name if not rest else c.fresh(f"{name}.unit"))
        if not rest:
            return x
        dims = rest
    return c.apply(ins, "hlo.reduce", [x], name, dims=dims, reducer=reducer, init=number_text(value))


IDENTITIES = {"sum": 0, "prod": 1, "max": -np.inf, "min": np.inf, "and": True, "or": False}


def _is_identity(reducer: str, value) -> bool:
    return bool(np.asarray(value == IDENTITIES[reducer]))


def _dot(c, ins, xs, name, prefix):
    d = ins.attrs.get("dot") or {"lhs_batch": [], "rhs_batch": [], "lhs_contracting": [], "rhs_contracting": []}
    return c.apply(ins, "hlo.dot", [c.array(ins, x) for x in xs], name, **{k: list(v) for k, v in d.items()})


def _gather(c, ins, xs, name, prefix):
    g = dict(ins.attrs["gather"])
    return c.apply(ins, "hlo.gather", [c.array(ins, x) for x in xs], name, **g)


def _reverse(c, ins, xs, name, prefix):
    dims = list(ins.attrs["dimensions"])
    x = c.array(ins, xs[0])
    if not dims or all(x.shape.dims[d] <= 1 for d in dims):
        return x
    return c.apply(ins, "hlo.reverse", [x], name, dimensions=dims)


def _inline(c, ins, xs, name, prefix):
    if not ins.called:
        raise InputError(f"{c.where(ins)}: calls no computation")
    return c.call(ins, ins.called[0], list(xs), name)


def _async_start(c, ins, xs, name, prefix):
    return Tup([Tup(list(xs)), _inline(c, ins, xs, name, prefix)])


def _done(c, ins, xs, name, prefix):
    """``*-done(start)``: the result the matching ``*-start`` holds (element 1 of its tuple, if a tuple)."""
    t = xs[0]
    if isinstance(t, Tup):
        return t.items[1]
    return t


def _conditional(c, ins, xs, name, prefix):
    p = c.array(ins, xs[0], "the predicate")
    if p.const is None:
        raise InputError(f"{c.where(ins)}: conditional on a value unknown before running (only rank-dependent "
                         f"predicates, known after instantiation, are supported)")
    v = p.full().reshape(())
    nb = len(ins.called)
    k = (0 if bool(v) else 1) if p.shape.dtype == "bool" else (int(v) if 0 <= int(v) < nb else nb - 1)
    return c.call(ins, ins.called[k], [xs[1 + k]], name)


def _custom_call(c, ins, xs, name, prefix):
    target = ins.attrs.get("custom_call_target", "")
    if target in IDENTITY_TARGETS and len(xs) == 1 and isinstance(xs[0], Val) and ins.shape.is_array \
            and tuple(xs[0].shape.dims) == tuple(ins.shape.dims):
        return xs[0]
    op = f"hlo.custom_call.{_ident(target)}"
    opdef = c.reg.get(op)
    if opdef is None:
        raise InputError(f"{c.where(ins)}: custom-call target '{target}' is unknown: no loaded lemma pack defines "
                         f"op '{op}' (a pack can add it: see docs/lemma-packs.md, 'Writing a lemma pack')")
    attrs = {}
    spec = opdef.attr_spec("backend_config")
    if spec is not None and (ins.attrs.get("backend_config") or spec.required):  # absent: the op's default
        attrs["backend_config"] = ins.attrs.get("backend_config", "")
    inputs = [c.array(ins, x) for x in xs]
    if not ins.shape.is_tuple:
        return c.apply(ins, op, inputs, name, **attrs)
    if opdef.meaning is None:
        raise InputError(f"{c.where(ins)}: custom call '{target}' returns a tuple but op '{op}' has one output")
    outs = [f"{name}#{k}" for k in range(len(ins.shape.elements))]
    node = {"name": c.full(name), "op": op, "inputs": [c.full(c.tensor(v)) for v in inputs],
            "outputs": [c.full(o) for o in outs], "attrs": attrs, **({"loc": ins.loc} if ins.loc else {})}
    c.out.nodes.append(node)
    vals = []
    for o, s in zip(outs, ins.shape.elements):
        c.taken.add(o)
        c.declare(o, s)
        vals.append(Val(s, name=o))
    return Tup(vals)


# -- collectives ----------------------------------------------------------------------------------

def _group(c: Converter, ins: Instruction) -> tuple[int, ...]:
    groups = ins.attrs.get("replica_groups") or [list(range(c.world))]
    for g in groups:
        if any(not 0 <= r < c.world for r in g):
            raise InputError(f"{c.where(ins)}: replica group {g} names ranks outside world size {c.world}")
    mine = [g for g in groups if c.rank in g]
    if len(mine) != 1:
        raise InputError(f"{c.where(ins)}: rank {c.rank} is in {len(mine)} of the replica groups {groups}")
    return tuple(mine[0])


def _collective_base(c: Converter, ins: Instruction):
    if c.rank is None:
        raise InputError(f"{c.where(ins)}: collective in the specification (a specification is a single-device "
                         f"module: use the pre-partition module, or pass this one as --impl)")
    base = ins.opcode.removesuffix("-start")
    return base


def _result_shapes(ins: Instruction, n: int) -> list[Shape]:
    s = ins.shape
    if ins.opcode.endswith("-start") and s.is_tuple:  # (operands, results[, contexts])
        s = s.elements[1]
    if n == 1 and not s.is_tuple:
        return [s]
    if not s.is_tuple or len(s.elements) != n:
        raise ShapeError(f"{n} operands but result shape {ins.shape}")  # instruction() names the instruction
    return list(s.elements)


def _collective(c, ins, xs, name, prefix):
    base = _collective_base(c, ins)
    xs = [c.array(ins, x) for x in xs]
    shapes = _result_shapes(ins, len(xs))
    attrs: dict = {}
    if base in ("all-reduce", "reduce-scatter"):
        op = _reducer(c, ins, ins.called[0]) if ins.called else None
        if op not in COLLECTIVE_REDUCERS:
            raise InputError(f"{c.where(ins)}: {base} with a '{op}' reducer has no core collective (sum, max)")
        attrs["op"] = op
    if base in ("all-gather", "reduce-scatter"):
        attrs["dim"] = _dim(c, ins)
    kind = {"all-reduce": "all_reduce", "all-gather": "all_gather", "reduce-scatter": "reduce_scatter"}[base]
    group = _group(c, ins)
    outs = []
    for k, (x, s) in enumerate(zip(xs, shapes)):
        o = name if len(xs) == 1 else c.fresh(f"{name}.{k}")
        c.out.nodes.append(Collective(kind, group, c.full(c.tensor(x)), c.full(o), dict(attrs), ins.loc, c.where(ins)))
        c.declare(o, s)
        outs.append(Val(s, name=o))
    result = outs[0] if len(outs) == 1 else Tup(outs)
    if ins.opcode.endswith("-start") and ins.shape.is_tuple:
        return Tup([Tup(list(xs)) if len(xs) > 1 else xs[0], result])
    return result


def _all_to_all(c, ins, xs, name, prefix):
    _collective_base(c, ins)
    xs = [c.array(ins, x) for x in xs]
    group = _group(c, ins)
    dims = ins.attrs.get("dimensions") or []
    if len(xs) == 1 and dims:  # array form: split and concatenate along one dim
        o = name
        c.out.nodes.append(Collective("all_to_all", group, c.full(c.tensor(xs[0])), c.full(o),
                                      {"split_dim": dims[0], "concat_dim": dims[0]}, ins.loc, c.where(ins)))
        c.declare(o, ins.shape)
        return Val(ins.shape, name=o)
    shapes = _result_shapes(ins, len(xs))
    if len(xs) != len(group):
        raise InputError(f"{c.where(ins)}: the tuple all-to-all has {len(xs)} operands for a group of {len(group)}")
    outs = [c.fresh(f"{name}.{k}") for k in range(len(xs))]
    c.out.nodes.append(Collective("all_to_all_tuple", group, None, None, {}, ins.loc, c.where(ins),
                                  inputs=tuple(c.full(c.tensor(x)) for x in xs),
                                  outputs=tuple(c.full(o) for o in outs)))
    for o, s in zip(outs, shapes):
        c.declare(o, s)
    return Tup([Val(s, name=o) for o, s in zip(outs, shapes)])


def _collective_permute(c, ins, xs, name, prefix):
    _collective_base(c, ins)
    x = c.array(ins, xs[0])
    shape = _result_shapes(ins, 1)[0]
    pairs = [tuple(p) for p in ins.attrs.get("source_target_pairs", [])]
    targets = [t for _, t in pairs]
    if len(set(targets)) != len(targets) or any(not 0 <= r < c.world for p in pairs for r in p):
        raise InputError(f"{c.where(ins)}: source_target_pairs {pairs} repeat a target or leave world size {c.world}")
    ranks = tuple(sorted({r for p in pairs for r in p}))
    receives = c.rank in targets
    result = Val(shape, name=name) if receives else c.constant_like(shape, 0, name)
    if c.rank in ranks:
        src = c.full(c.tensor(x)) if any(s == c.rank for s, _ in pairs) else None
        c.out.nodes.append(Collective("permute", ranks, src, c.full(result.name) if receives else None,
                                      {"pairs": [list(p) for p in pairs]}, ins.loc, c.where(ins)))
        if receives:
            c.declare(result.name, shape)
    if ins.opcode.endswith("-start") and ins.shape.is_tuple:
        return Tup([x, result])
    return result


HANDLERS = {
    "constant": _constant, "partition-id": _id("partition-id"), "replica-id": _id("replica-id"), "iota": _iota,
    "tuple": _tuple, "get-tuple-element": _gte, "after-all": _token, "reshape": _reshape, "bitcast": _reshape,
    "transpose": _transpose, "broadcast": _broadcast, "slice": _slice, "concatenate": _concatenate,
    "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice, "pad": _pad, "reduce": _reduce,
    "dot": _dot, "gather": _gather, "reverse": _reverse, "fusion": _inline, "call": _inline,
    "async-start": _async_start, "async-update": _identity, "async-done": _done, "conditional": _conditional,
    "custom-call": _custom_call, "copy-start": lambda c, ins, xs, n, p: Tup([xs[0], xs[0]]),
    "copy-done": lambda c, ins, xs, n, p: xs[0].items[0] if isinstance(xs[0], Tup) else xs[0],
    "all-reduce": _collective, "all-reduce-start": _collective, "all-reduce-done": _done,
    "all-gather": _collective, "all-gather-start": _collective, "all-gather-done": _done,
    "reduce-scatter": _collective, "all-to-all": _all_to_all, "collective-permute": _collective_permute,
    "collective-permute-start": _collective_permute, "collective-permute-done": _done,
    **{op: _identity for op in IDENTITY},
}


def to_rank_graph(module: Module, reg: Registry, rank: int | None, world: int, ids: dict) -> RankGraph:
    return Converter(module, reg, rank, world, ids).run()
