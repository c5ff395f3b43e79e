"""Normalise captured PyTorch graphs (torch.fx / torch.export) into graphguard IR.

Both sources -- a live ``torch.fx.GraphModule`` and the JSON graph inside a ``.pt2`` archive -- are first
read into :class:`TGraph` (targets as strings, arguments as :class:`Ref` or Python values, shapes and
dtypes from the fake-tensor metadata), then :func:`to_ir` applies one set of rules:

* collectives (``_c10d_functional.*`` and in-place ``c10d.*_``) become :class:`Collective` records kept
  per rank for stitching; ``wait_tensor`` and ``copy_`` after a collective are aliases (SSA);
* data movement becomes clean core ops (view/reshape/unsqueeze/squeeze -> ``core.reshape``,
  t/transpose/permute -> ``core.permute``, cat -> ``core.concat``, slice/select/split/chunk ->
  ``core.slice`` / ``core.split``), identities (clone, detach, alias, contiguous...) disappear;
* every other op keeps its ATen name (``aten.mm``, ``aten.add.Tensor``) and is split into tensor inputs
  and typed attributes by its schema;
* ``getitem`` picks an output of a multi-output op; dead code is removed.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from graphguard.errors import InputError
from graphguard.ir import scalar as S
from graphguard.ir.graph import source_keys
from graphguard.ir.ops import Registry

from ..source import frame_from_stack
from ..stitch import Collective, RankGraph


@dataclass(frozen=True)
class Ref:
    """A reference to another node's value (``index`` for a multi-output node's element)."""
    name: str


@dataclass
class TNode:
    name: str
    op: str  # "placeholder" | "call_function" | "output"
    target: str  # e.g. "aten.mm.default", "_c10d_functional.all_reduce.default", "getitem"
    args: tuple
    kwargs: dict
    shape: tuple | None = None  # of the (first) output
    dtype: str | None = None
    loc: str | None = None  # the user's source line: ``modeling_llama.py:65``
    func: str | None = None  # the function that line is in
    module: str | None = None  # the module path whose forward ran it: ``model.layers.0.mlp.down_proj``


@dataclass
class TGraph:
    nodes: list[TNode]
    source: str
    input_names: dict[str, str] = field(default_factory=dict)  # placeholder -> public name
    output_names: list[str] = field(default_factory=list)  # public names of outputs, in order


IDENTITY = {"aten.clone.default", "aten.detach.default", "aten.alias.default", "aten.lift_fresh_copy.default",
            "aten.contiguous.default", "_c10d_functional.wait_tensor.default", "aten.lift_fresh.default"}
# an empty buffer holds whatever memory held: it is filled with NaN, which poisons every result that reads it
# (NaN + y is not y), so a program that reads an unwritten part is never certified; fully overwritten (the
# backward of an in-place op copies into it), its contents never matter
_UNSET = float("nan")
FILLS = {"aten.new_zeros.default": 0, "aten.zeros_like.default": 0, "aten.new_ones.default": 1,
         "aten.ones_like.default": 1, "aten.new_full.default": None, "aten.full_like.default": None,
         "aten.new_empty.default": _UNSET, "aten.empty_like.default": _UNSET, "aten.empty.memory_format": _UNSET,
         "aten.new_empty_strided.default": _UNSET, "aten.empty_strided.default": _UNSET}
EMPTY = {"aten.empty_like.default", "aten.new_empty.default", "aten.empty.memory_format",
         "aten.empty_strided.default", "aten.new_empty_strided.default"}  # fresh buffers: contents never read
AUTO_FUNCTIONALIZED = {"auto_functionalized", "auto_functionalized_v2"}  # in-place custom ops, functionalised
# how auto_functionalized_v2 describes the view a mutated argument "a" is of its base: "_a_" + these
_VIEW_KEYS = ("slice_dim", "slice_start", "slice_end", "size", "stride", "storage_offset")
# ops that ignore their first operand when beta is 0 (torch does not read it, NaN or not): Megatron's attention
# passes a view of a shared scratch buffer there, which would otherwise tie the scores to whatever filled it
UNREAD_WHEN_BETA_0 = {"aten.baddbmm", "aten.addmm"}
RESHAPE = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"}

# ops whose output shape depends on tensor values (a MoE router's token selection): refused with advice
DATA_DEPENDENT = {"aten.masked_select.default": "one entry per true mask element",
                  "aten._unique2.default": "one entry per distinct value",
                  "aten.unique_dim.default": "one entry per distinct value",
                  "aten.unique_consecutive.default": "one entry per run of equal values"}


def data_dependent(target: str, where: str, loc: str | None) -> InputError:
    """The one-line error for an op whose output shape depends on the data (``aten.nonzero``)."""
    return InputError(f"{where}: {ir_op_name(target)}{f' at {loc}' if loc else ''} has a data-dependent output "
                      f"shape ({DATA_DEPENDENT[target]}), which graphguard cannot relate across ranks; dispatch with "
                      f"a fixed capacity instead (top-k scores and one-hot masks, or tokens scattered into an "
                      f"[experts, capacity, hidden] buffer; see examples/moe-ep)")


DTYPES = {"torch.float32": "float32", "torch.float64": "float64", "torch.float16": "float16",
          "torch.bfloat16": "bfloat16", "torch.int64": "int64", "torch.int32": "int32", "torch.bool": "bool",
          "torch.int8": "int8", "torch.uint8": "uint8"}


def dtype_name(dt) -> str:
    return DTYPES.get(str(dt), str(dt).replace("torch.", ""))


def loc_from_stack(stack: str | None) -> str | None:
    return frame_from_stack(stack)[0]


def module_path(meta: dict) -> str | None:
    """The module whose forward ran an fx node (innermost of ``nn_module_stack``; a backward node's
    ``fwd_nn_module_stack``) as the user names it: ``L['self'].model.layers[0]._modules['mlp']`` ->
    ``model.layers.0.mlp``."""
    stack = meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack")
    if not stack:
        return None
    path = str(list(stack.values())[-1][0])
    path = "." + re.sub(r"^L\[['\"]\w+['\"]\]\.?", "", path)  # the traced callable itself
    path = re.sub(r"\._(?:modules|parameters|buffers)\[['\"]([^'\"]+)['\"]\]", r".\1", path)
    path = re.sub(r"\[['\"]?([^'\"\]]+)['\"]?\]", r".\1", path).strip(".")
    # a module reached through a wrapped forward's closure (``layers.0.forward.__closure__.1.cell_contents``) or a
    # bound method (``.forward.__self__``) is the module it belongs to
    path = re.sub(r"\.\w+(?:\.__closure__\.\d+\.cell_contents)?\.__self__(?=\.|$)", "", "." + path)
    return path.strip(".") or None


def ir_op_name(target: str) -> str:
    """``aten.add.Tensor`` stays; ``aten.mm.default`` -> ``aten.mm``."""
    return target[: -len(".default")] if target.endswith(".default") else target


def _scalar(v, where: str):
    """A Python/SymInt value as an IR scalar."""
    if isinstance(v, bool):
        return v
    if isinstance(v, int):
        return v
    if hasattr(v, "node") and hasattr(v.node, "expr"):  # torch.SymInt
        return S.norm(S.parse(str(v.node.expr)))
    if isinstance(v, str):  # a .pt2 archive names the node computing a symbolic int: a size symbol
        return S.parse(v)
    return v


class _Converter:
    def __init__(self, g: TGraph, reg: Registry, rank: int | None, groups: dict[str, tuple[int, ...]]):
        self.g, self.reg, self.rank, self.groups = g, reg, rank, groups
        self.alias: dict[str, str] = {}
        self.multi: dict[str, list[str]] = {}
        self.shape: dict[str, tuple] = {}
        self.dtype: dict[str, str] = {}
        self.out = RankGraph([], [], [])
        self.counter = 0
        self.fills: dict[str, tuple] = {}  # fill constants (zeros...): name -> (value, dtype)

    # -- naming -------------------------------------------------------------------------------
    def t(self, name: str) -> str:
        """IR tensor name of a graph value (following aliases), with the rank suffix in G_d."""
        seen = set()
        while name in self.alias and name not in seen:
            seen.add(name)
            name = self.alias[name]
        return name

    def full(self, name: str) -> str:
        return name if self.rank is None else f"{name}@{self.rank}"

    def fresh(self, base: str) -> str:
        self.counter += 1
        return f"{base}.{self.counter}"

    def where(self, n: TNode) -> str:
        return f"{self.g.source}: node '{n.name}' ({n.target})" + (f" at {n.loc}" if n.loc else "")

    def ref(self, v, n: TNode) -> str:
        if not isinstance(v, Ref):
            raise InputError(f"{self.where(n)}: expected a tensor argument, got {v!r}")
        name = self.t(v.name)
        if name in self.multi:
            raise InputError(f"{self.where(n)}: uses a multi-output value without getitem")
        return name

    def emit(self, n: TNode, op: str, inputs: list[str], output: str | list[str], node: str | None = None,
             **attrs) -> None:
        outs = [output] if isinstance(output, str) else output
        self.out.nodes.append({"name": self.full(node or n.name), "op": op,
                               "inputs": [self.full(i) for i in inputs], "outputs": [self.full(o) for o in outs],
                               "attrs": attrs, **source_keys(n)})
        if isinstance(output, str) and n.shape is not None:
            self.shape[output], self.dtype[output] = tuple(n.shape), n.dtype

    # -- the walk -------------------------------------------------------------------------------
    def run(self) -> RankGraph:
        live = self._live()
        for n in self.g.nodes:
            if n.op == "placeholder":
                if n.name not in live:
                    continue
                name = self.g.input_names.get(n.name, n.name)
                if name != n.name:
                    self.alias[n.name] = name
                self.shape[name], self.dtype[name] = tuple(n.shape or ()), n.dtype or "float32"
                self.out.inputs.append({"name": self.full(name), "shape": [S.text(d) if not isinstance(d, int) else d
                                                                           for d in n.shape or ()],
                                        "dtype": n.dtype or "float32"})
            elif n.op == "call_function":
                if n.name in live:
                    self.node(n)
            elif n.op == "output":
                outs = n.args[0] if isinstance(n.args[0], (list, tuple)) else [n.args[0]]
                names = self.g.output_names or [f"output{i}" for i in range(len(outs))]
                for v, public in zip(outs, names):
                    src = self.ref(v, n)
                    self.emit(TNode(public, "call_function", "identity", (), {}, loc=None), "core.identity",
                              [src], public)
                    self.out.outputs.append(self.full(public))
        return self.out

    def _live(self) -> set[str]:
        """Dead-code elimination: names of nodes the outputs depend on."""
        by = {n.name: n for n in self.g.nodes}
        live: set[str] = set()
        stack = [n for n in self.g.nodes if n.op == "output"]
        while stack:
            n = stack.pop()
            for v in _refs((n.args, n.kwargs)):
                if v.name not in live and v.name in by:
                    live.add(v.name)
                    stack.append(by[v.name])
        return live

    def node(self, n: TNode) -> None:
        tgt = n.target
        if tgt in DATA_DEPENDENT:
            raise data_dependent(tgt, self.g.source, n.loc)
        if tgt in ("getitem", "_operator.getitem"):
            src, idx = n.args
            parts = self.multi.get(self.t(src.name))
            if parts is None:
                raise InputError(f"{self.where(n)}: getitem on a value with one output")
            self.alias[n.name] = parts[idx]
            if n.shape is not None:  # multi-output ops carry their outputs' metadata on the getitems
                self.shape.setdefault(parts[idx], tuple(n.shape))
                self.dtype.setdefault(parts[idx], n.dtype)
            return
        if tgt in IDENTITY or (tgt in ("aten._to_copy.default", "aten.view.dtype") and _same_dtype(n, self)):
            self.alias[n.name] = self.ref(n.args[0], n)
            return
        if tgt in ("aten.copy_.default", "aten.copy.default"):
            self.alias[n.name] = self.ref(n.args[1], n)
            return
        if tgt.startswith("_c10d_functional.") or tgt.startswith("c10d.") or tgt in self.reg.collective_ops:
            self.collective(n)
            return
        if tgt in AUTO_FUNCTIONALIZED:
            self.auto_functionalized(n)
            return
        handler = _DATA_MOVEMENT.get(tgt)
        if handler is not None:
            handler(self, n)
            return
        if tgt in FILLS and "aten.full" in self.reg:
            self.fill(n)
            return
        self.generic(n)

    def fill(self, n: TNode) -> None:
        """``new_zeros(x, size)``, ``zeros_like(x)``...: x gives only shape/dtype, so the result is a
        constant (``aten.full``) -- the same value on every rank, whatever x holds."""
        value = FILLS[n.target]
        if value is None:  # new_full / full_like
            value = n.args[2] if n.target == "aten.new_full.default" else n.args[1]
        size = [S.text(_scalar(d, "size")) for d in n.shape]
        # the captured dtype; without metadata the op's dtype= argument, else its input's (x.new_zeros, zeros_like)
        dtype = n.dtype or (dtype_name(n.kwargs["dtype"]) if n.kwargs.get("dtype") is not None else None)
        if dtype is None and n.args and isinstance(n.args[0], Ref):
            dtype = self.dtype.get(self.t(n.args[0].name))
        self.fills[n.name] = (_attr_value(value, "number", "fill_value", None), dtype)
        self.emit(n, "aten.full", [], n.name, size=size, fill_value=self.fills[n.name][0], dtype=dtype)

    # -- collectives ----------------------------------------------------------------------------
    def group(self, name, n: TNode) -> tuple[int, ...]:
        key = str(name)
        if key not in self.groups:
            raise InputError(f"{self.where(n)}: unknown process group '{key}' (not recorded at capture time)")
        return self.groups[key]

    def collective(self, n: TNode) -> None:
        tgt = n.target.split(".")[1]
        a = n.args
        x = self.ref(a[0], n)
        custom = self.reg.collective_ops.get(n.target)  # a pack's custom op that is a collective (vllm.all_reduce)
        if custom is not None:
            schema, gi = _schema(n.target), custom["group"]
            arg = lambda i: a[i] if i < len(a) else n.kwargs.get(schema.arguments[i].name) if schema else None  # noqa: E731
            g = arg(gi)
            kind, attrs = custom["kind"], dict(custom.get("attrs", {}))
            for name, i in custom.get("arg_attrs", {}).items():
                attrs[name] = arg(i)
            if isinstance(attrs.get("dim"), int) and attrs["dim"] < 0:
                attrs["dim"] += len(self.shape.get(x, ()))
        elif tgt == "all_reduce":
            kind, attrs, g = "all_reduce", {"op": _reduce_op(a[1])}, a[2]
        elif tgt == "all_gather_into_tensor":
            kind, attrs, g = "all_gather", {"dim": 0}, a[2]
        elif tgt == "reduce_scatter_tensor":
            kind, attrs, g = "reduce_scatter", {"op": _reduce_op(a[1]), "dim": 0}, a[3]
        elif tgt == "all_to_all_single":
            if a[1] or a[2]:
                sizes = set(a[1] or []) | set(a[2] or [])
                if len(sizes) > 1:
                    raise InputError(f"{self.where(n)}: all_to_all with uneven splits {a[1]} / {a[2]} is not "
                                     f"supported yet")
            kind, attrs, g = "all_to_all", {"split_dim": 0, "concat_dim": 0}, a[3]
        elif tgt == "broadcast":
            kind, attrs, g = "broadcast", {"src": int(a[1])}, a[2]
        else:
            raise InputError(f"{self.where(n)}: unsupported collective {n.target}")
        group = self.group(g, n)
        if len(group) == 1:  # any collective over one rank returns its input (Megatron reduces even at TP=1)
            self.alias[n.name] = x
            return
        if self.rank is None:
            raise InputError(f"{self.where(n)}: collective in a sequential (world size 1) capture")
        self.out.nodes.append(Collective(kind, group, self.full(x), self.full(n.name), attrs, n.loc, self.where(n),
                                         func=n.func, module=n.module))
        if n.shape is not None:
            self.shape[n.name], self.dtype[n.name] = tuple(n.shape), n.dtype

    # -- in-place custom ops, functionalised --------------------------------------------------------
    def auto_functionalized(self, n: TNode) -> None:
        """``auto_functionalized(op, **kwargs)`` (and ``_v2``): an in-place custom op (vLLM's
        ``_C::rms_norm(Tensor! result, ...) -> ()``) made functional. It becomes the IR op named after
        ``op`` whose inputs are its tensor arguments in schema order -- except a mutated argument whose
        incoming value is a fresh ``empty`` buffer (written, never read: an ``out``/``result`` argument) --
        and whose outputs are the op's returns followed by the new values of its mutated arguments, in
        schema order. The node's tuple -- (returns or None, mutated args (v1) / their bases (v2)) -- is
        mapped onto those outputs for ``getitem``.

        With ``_v2`` a mutated argument may be a view of its base (vLLM rotates q and k in place as column
        slices of the fused qkv output, and attention writes a per-head view of a flat buffer): a slice
        (``_x_slice_dim/start/end``; several arguments may be disjoint slices of one base) is read as
        ``core.slice`` of the base and written back as a concatenation (the slice_scatter); a view that
        reshapes a whole fresh ``empty`` buffer (``_x_size/_stride/_storage_offset``, contiguous, offset 0)
        is ``core.reshape`` both ways. Other views are refused."""
        op = n.args[0] if n.args else None
        schema = getattr(op, "_schema", None)
        if schema is None:
            raise InputError(f"{self.where(n)}: {n.target} of {op!r}, which has no schema")
        by = self._by_name()
        kw, v2 = dict(n.kwargs), n.target.endswith("_v2")
        bases = list(kw.pop("_all_bases", []) or []) if v2 else []
        mutated = [a for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        bound, written_only = {}, set()
        views: dict[str, tuple] = {}  # v2: mutated argument -> (base index, view)
        for a in schema.arguments:
            if a not in mutated or not v2:
                bound[a.name] = kw.get(a.name, a.default_value if a.has_default_value() else None)
                if a not in mutated:
                    continue
            else:
                idx = kw.get(f"_{a.name}_base_index")
                if idx is not None:
                    views[a.name] = (idx, self._view(n, op, a.name, kw, bases[idx]))
                bound[a.name] = bases[idx] if idx is not None else None
            v = bound[a.name]
            if isinstance(v, (list, tuple)):
                raise InputError(f"{self.where(n)}: mutated tensor list '{a.name}' of {op} is not supported")
            if isinstance(v, Ref) and v.name in by and by[v.name].target in EMPTY:
                written_only.add(a.name)
        by_base: dict[int, list[str]] = {}
        for arg, (idx, _) in views.items():
            by_base.setdefault(idx, []).append(arg)
        for idx, args in by_base.items():
            self._check_disjoint(n, op, [(arg, views[arg][1]) for arg in args])
        for arg, (idx, view) in views.items():  # read the viewed part of the base
            if view[0] != "whole" and arg not in written_only:
                bound[arg] = Ref(self._apply_view(n, f"{arg}_in", self.ref(bases[idx], n), view))
        name = ir_op_name(str(op))
        fn = replace(n, name=f"{n.name}_{name.rsplit('.', 1)[-1]}")  # the functional op's node (n: the tuple)
        self.generic(fn, name=name, schema=schema, bound=bound, skip=written_only)
        outs = self.multi.pop(fn.name, None) or [fn.name]
        present = [a.name for a in mutated if bound.get(a.name) is not None]
        n_ret = len(schema.returns)
        if len(outs) != n_ret + len(present):
            raise InputError(f"{self.where(n)}: {name} is defined with {len(outs)} output(s) but {op} has "
                             f"{n_ret} return(s) and {len(present)} mutated argument(s)")
        ir_of = dict(zip(present, outs[n_ret:]))
        slots = list(outs[:n_ret]) if n_ret else [None]
        if v2:
            slots += [self._write_back(n, i, self.ref(bases[i], n), [(a, views[a][1], ir_of[a]) for a in by_base[i]])
                      if i in by_base else None for i in range(len(bases))]
        else:
            slots += [ir_of.get(a.name) for a in mutated]
        self.multi[n.name] = slots

    def _view(self, n: TNode, op, arg: str, kw: dict, base) -> tuple:
        """How mutated argument ``arg`` of an ``auto_functionalized_v2`` node views its base:
        ("whole",), ("slice", dim, start, end) or ("reshape", size)."""
        p = f"_{arg}_"
        view_keys = [p + k for k in _VIEW_KEYS]  # exact keys: argument "x" must not read "_x_residual_..."
        if kw.get(f"{p}alias") or not any(k in kw for k in view_keys):
            return ("whole",)
        shape = self.shape.get(self.ref(base, n)) if isinstance(base, Ref) else None
        if f"{p}slice_dim" in kw and shape is not None:
            dim = _norm_dim(int(kw[f"{p}slice_dim"]), len(shape))
            start = _clamp(_scalar(kw[f"{p}slice_start"], "start"), shape[dim])
            end = _clamp(_scalar(kw[f"{p}slice_end"], "end"), shape[dim])
            return ("slice", dim, start, end)
        if f"{p}size" in kw and shape is not None:
            size = [_scalar(d, "size") for d in kw[f"{p}size"]]
            stride = [_scalar(d, "stride") for d in kw[f"{p}stride"]]
            contiguous = [S.norm(S.sp.Mul(*[S.sym(d) for d in size[i + 1:]])) for i in range(len(size))]
            fresh = isinstance(base, Ref) and base.name in self._by_name() and \
                self._by_name()[base.name].target == "aten.empty.memory_format"
            numel = lambda sh: S.norm(S.sp.Mul(*[S.sym(d) for d in sh]))  # noqa: E731
            if (fresh and S.norm(_scalar(kw[f"{p}storage_offset"], "offset")) == 0
                    and all(S.norm(d) == 1 or S.norm(a) == S.norm(b) for d, a, b in zip(size, stride, contiguous))
                    and numel(size) == numel(shape)):
                return ("reshape", tuple(S.norm(d) for d in size))
        views = ", ".join(f"{k}={kw[k]}" for k in view_keys if k in kw)
        raise InputError(f"{self.where(n)}: mutated argument '{arg}' of {op} is a view of another tensor ({views}); "
                         f"only whole tensors, slices and reshapes of a fresh empty buffer are supported")

    def _check_disjoint(self, n: TNode, op, args: list) -> None:
        """Several mutated arguments on one base: only disjoint slices along one dim (q and k of a fused qkv)."""
        if len(args) < 2:
            return
        ok = all(v[0] == "slice" and isinstance(v[2], int) and isinstance(v[3], int) for _, v in args) \
            and len({v[1] for _, v in args}) == 1
        if ok:  # concrete slices along one dim: disjoint once sorted
            spans = sorted((v[2], v[3]) for _, v in args)
            ok = all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
        if not ok:
            names = ", ".join(f"'{a}'" for a, _ in args)
            raise InputError(f"{self.where(n)}: mutated arguments {names} of {op} share one tensor in overlapping or "
                             f"non-slice views; not supported")

    def _apply_view(self, n: TNode, tag: str, base: str, view: tuple) -> str:
        name = self.fresh(f"{n.name}.{tag}")
        shape = self.shape[base]
        if view[0] == "slice":
            _, dim, start, end = view
            self.emit(n, "core.slice", [base], name, node=name, dim=dim, start=S.text(start), end=S.text(end))
            self.shape[name] = tuple(S.norm(S.sym(end) - S.sym(start)) if i == dim else d
                                     for i, d in enumerate(shape))
        else:
            self.emit(n, "core.reshape", [base], name, node=name, shape=[S.text(d) for d in view[1]])
            self.shape[name] = tuple(view[1])
        self.dtype[name] = self.dtype.get(base)
        return name

    def _write_back(self, n: TNode, idx: int, base: str, parts: list) -> str:
        """The new value of base ``idx`` once the op wrote ``parts`` ((argument, view, new value) ...) into it."""
        if len(parts) == 1 and parts[0][1][0] == "whole":
            return parts[0][2]
        if len(parts) == 1 and parts[0][1][0] == "reshape":
            name = self.fresh(f"{n.name}.base{idx}")
            self.emit(n, "core.reshape", [parts[0][2]], name, node=name, shape=[S.text(d) for d in self.shape[base]])
            self.shape[name], self.dtype[name] = self.shape[base], self.dtype.get(base)
            return name
        dim = parts[0][1][1]
        shape = self.shape[base]
        pieces, at = [], 0
        for _, (_, _, start, end), value in sorted(parts, key=lambda p: S.sym(p[1][2])):
            if S.norm(S.sym(start) - S.sym(at)) != 0:
                pieces.append(_base_piece(self, n, base, dim, at, start, f"base{idx}"))
            pieces.append(value)
            at = end
        if S.norm(S.sym(shape[dim]) - S.sym(at)) != 0:
            pieces.append(_base_piece(self, n, base, dim, at, shape[dim], f"base{idx}"))
        name = self.fresh(f"{n.name}.base{idx}")
        self.emit(n, "core.concat", pieces, name, node=name, dim=dim)
        self.shape[name], self.dtype[name] = shape, self.dtype.get(base)
        return name

    def _by_name(self) -> dict:
        if not hasattr(self, "_nodes_by_name"):
            self._nodes_by_name = {m.name: m for m in self.g.nodes}
        return self._nodes_by_name

    # -- generic ATen ops ----------------------------------------------------------------------
    def generic(self, n: TNode, name: str | None = None, schema=None, bound: dict | None = None,
                skip: set = frozenset()) -> None:
        name = name or ir_op_name(n.target)
        op = self.reg.get(name)
        if op is None:
            raise InputError(f"{self.where(n)}: unknown operator '{name}': no loaded lemma pack defines it "
                             f"(add one: see docs/lemma-packs.md, 'Writing a lemma pack')")
        if bound is None:
            schema = _schema(n.target)
            bound = _bind(schema, n.args, n.kwargs, self.where(n)) if schema is not None else {}
        inputs: list[str] = []
        absent: list[int] = []
        attrs: dict[str, Any] = {}
        pos = 0
        first_rank = None
        # the dtype of the op's first tensor operand: what a Python number among its tensors is compared with
        like = next((self.dtype.get(self.t(v.name)) for v in _refs(list(bound.values()))), None)
        for arg in (schema.arguments if schema is not None else []):
            v = bound.get(arg.name, arg.default_value if arg.has_default_value() else None)
            ty = str(arg.type)
            if arg.name in skip:
                continue
            if ty.startswith(("Tensor", "Optional[Tensor]")) or "Tensor" in ty and ("[]" in ty or "List[" in ty):
                vals = v if isinstance(v, (list, tuple)) else [v]
                for item in vals:
                    if item is None:
                        absent.append(pos)
                    else:
                        r = self.ref(item, n) if isinstance(item, Ref) else self.constant(item, n, like)
                        inputs.append(r)
                        if first_rank is None:
                            first_rank = len(self.shape.get(r, ()))
                    pos += 1
                continue
            spec = op.attr_spec(arg.name)
            if spec is None:
                continue  # device, layout, memory_format, ...: not semantic
            attrs[arg.name] = _attr_value(v, spec.kind, arg.name, first_rank)
        for a, d in op.data_dims(attrs):  # sizes the data decides: the captured symbol of that output dim
            attrs[a] = S.text(S.norm(n.shape[d]))
        if absent:
            if op.attr_spec("absent") is None:
                raise InputError(f"{self.where(n)}: optional tensor argument(s) missing, which {name} does not "
                                 f"support")
            attrs["absent"] = absent
        if name in UNREAD_WHEN_BETA_0 and attrs.get("beta") == "0" and inputs and inputs[0] in self.shape:
            inputs[0] = self._zeros(n, inputs[0])
        outs = self._outputs(n, op, len(inputs), attrs)
        self.emit(n, name, inputs, outs if len(outs) > 1 else outs[0], **attrs)

    def _zeros(self, n: TNode, like: str) -> str:
        """A zero fill shaped and typed like ``like``: an operand the op does not read (what it held is no part of
        the result, whatever buffer it came from)."""
        name = self.fresh(f"{n.name}.unread")
        self.shape[name], self.dtype[name] = self.shape[like], self.dtype.get(like)
        self.fills[name] = ("0", self.dtype[name])
        self.emit(TNode(name, "call_function", "full", (), {}, loc=n.loc, func=n.func, module=n.module), "aten.full", [], name,
                  size=[S.text(d) for d in self.shape[name]], fill_value="0", dtype=self.dtype[name])
        return name

    def constant(self, value, n: TNode, like: str | None = None) -> str:
        """A Python number where the schema wants a tensor (``x * 2``): a 0-dim constant tensor of the result's
        dtype -- of the other operand's (``like``) for a comparison, whose result is bool."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InputError(f"{self.where(n)}: expected a tensor argument, got {value!r}")
        name = self.fresh(f"{n.name}.const")
        dtype = n.dtype
        if dtype == "bool" and like not in (None, "bool"):
            dtype = like if isinstance(value, int) or not like.startswith(("int", "uint")) else "float32"
        dtype = "int64" if isinstance(value, int) and (dtype or "").startswith("int") else (dtype or "float32")
        self.emit(TNode(name, "call_function", "scalar_tensor", (), {}, loc=n.loc, func=n.func, module=n.module), "aten.scalar_tensor", [], name,
                  s=_attr_value(value, "number", "s", None), dtype=dtype)
        self.shape[name], self.dtype[name] = (), dtype
        return name

    def _outputs(self, n: TNode, op, n_inputs: int, attrs: dict) -> list[str]:
        if op.meaning is None:
            return [n.name]
        k = len(op.meaning([None] * n_inputs, {s.name: attrs.get(s.name, s.default) for s in op.attrs}))
        names = [f"{n.name}#{i}" for i in range(k)]
        self.multi[n.name] = names
        return names


def _same_dtype(n: TNode, conv: "_Converter") -> bool:
    """A dtype conversion (``_to_copy``) or reinterpretation (``view.dtype``) to the dtype the tensor has."""
    src = n.args[0]
    want = n.args[1] if n.target == "aten.view.dtype" else n.kwargs.get("dtype")
    return want is None or (isinstance(src, Ref) and conv.dtype.get(conv.t(src.name)) == dtype_name(want))


def _reduce_op(v) -> str:
    s = str(v).lower()
    for k in ("sum", "avg", "max"):
        if k in s:
            return k
    raise InputError(f"unsupported reduction '{v}'")


def _norm_dim(d: int, rank: int) -> int:
    return d + rank if d < 0 else d


def _attr_value(v, kind: str, name: str, rank: int | None):
    if v is None:
        return None
    if kind == "int":
        v = int(v)
        if "dim" in name and rank is not None:
            v = _norm_dim(v, rank)
        return v
    if kind == "ints":
        vals = [int(x) for x in v]
        if "dim" in name and rank is not None:
            vals = [_norm_dim(x, rank) for x in vals]
        return vals
    if kind == "scalar":
        return S.text(_scalar(v, name))
    if kind == "scalars":
        return [S.text(_scalar(x, name)) for x in v]
    if kind == "number":
        if isinstance(v, bool):
            return str(int(v))
        if isinstance(v, float):
            if v != v or v in (float("inf"), float("-inf")):
                return repr(v)
            return str(Fraction(v))  # exact: the float's binary value
        return str(Fraction(v))
    if kind == "bool":
        return bool(v)
    if kind == "str":
        return dtype_name(v) if "torch." in str(v) else str(v)
    return v


def ref_names(a) -> list[str]:
    """The names of the nodes ``a`` (a node's args, kwargs, or any nesting of them) refers to, in order."""
    return [r.name for r in _refs(a)]


def _refs(x):
    if isinstance(x, Ref):
        yield x
    elif isinstance(x, (list, tuple)):
        for v in x:
            yield from _refs(v)
    elif isinstance(x, dict):
        for v in x.values():
            yield from _refs(v)


def _schema(target: str):
    import torch
    parts = target.split(".")
    try:
        packet = getattr(getattr(torch.ops, parts[0]), parts[1])
        return getattr(packet, parts[2] if len(parts) > 2 else "default")._schema
    except (AttributeError, IndexError, RuntimeError):
        return None


def _bind(schema, args, kwargs, where: str) -> dict:
    """Arguments by name; more arguments than the schema has, or a name it lacks, is an error."""
    names = [a.name for a in schema.arguments]
    if len(args) > len(names):
        raise InputError(f"{where}: {len(args)} arguments for {schema.name}, which takes {len(names)}")
    unknown = sorted(set(kwargs) - set(names))
    if unknown:
        raise InputError(f"{where}: {schema.name} has no argument '{unknown[0]}'")
    out = dict(zip(names, args))
    out.update(kwargs)
    return out


# -- data movement -> clean core ops ------------------------------------------------------------------

def _shape_of(conv: _Converter, v, n: TNode) -> tuple:
    return conv.shape[conv.ref(v, n)]


def _reshape(conv: _Converter, n: TNode) -> None:
    x = conv.ref(n.args[0], n)
    conv.emit(n, "core.reshape", [x], n.name, shape=[S.text(_scalar(d, "shape")) for d in n.shape])


def _permute(conv: _Converter, n: TNode) -> None:
    x = conv.ref(n.args[0], n)
    r = len(conv.shape[x])
    if n.target == "aten.t.default":
        dims = [1, 0] if r == 2 else list(range(r))
    elif n.target == "aten.transpose.int":
        d0, d1 = _norm_dim(int(n.args[1]), r), _norm_dim(int(n.args[2]), r)
        dims = list(range(r))
        dims[d0], dims[d1] = dims[d1], dims[d0]
    else:
        dims = [_norm_dim(int(d), r) for d in n.args[1]]
    conv.emit(n, "core.permute", [x], n.name, dims=dims)


def _cat(conv: _Converter, n: TNode) -> None:
    xs = [conv.ref(v, n) for v in n.args[0]]
    dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim", 0)
    xs = [x for x in xs if not (len(conv.shape[x]) == 1 and conv.shape[x][0] == 0)]  # legacy empty tensors
    r = len(conv.shape[xs[0]])
    dim = _norm_dim(int(dim), r)
    xs = _nonempty(conv, xs, dim)
    if len(xs) == 1:
        conv.alias[n.name] = xs[0]
        return
    conv.emit(n, "core.concat", xs, n.name, dim=dim)


def _nonempty(conv: _Converter, xs: list[str], dim: int) -> list[str]:
    """The parts of a concatenation that add something: those of size 0 along dim are dropped (one is kept
    if all are), e.g. RoPE's pass-through part when the rotary dims are the whole head."""
    kept = [x for x in xs if S.norm(conv.shape[x][dim]) != 0]
    return kept or xs[:1]


def _slice_range(conv: _Converter, n: TNode, shape: tuple, first: int, steps: bool = False) -> tuple:
    """(dim, start, end) of a slice-like op whose dim/start/end/step arguments begin at position ``first``,
    normalised and clamped the way PyTorch does (with ``steps``: (dim, start, end, step))."""
    a = list(n.args) + [None] * (first + 4)
    dim = _norm_dim(int(a[first] if a[first] is not None else n.kwargs.get("dim", 0)), len(shape))
    start = a[first + 1] if a[first + 1] is not None else n.kwargs.get("start", 0)
    end = a[first + 2] if a[first + 2] is not None else n.kwargs.get("end")
    step = a[first + 3] if a[first + 3] is not None else n.kwargs.get("step", 1)
    if step != 1 and not steps:
        raise InputError(f"{conv.where(n)}: slices with step {step} are not supported yet")
    size = shape[dim]
    start = _clamp(_scalar(start if start is not None else 0, "start"), size)
    end = size if end is None else _clamp(_scalar(end, "end"), size)
    return (dim, start, end, step) if steps else (dim, start, end)


def _read_bounds(conv: _Converter, n: TNode, first: int) -> tuple | None:
    """(dim, start, end) of a slice-like op with a bound read from a tensor (capture gives its 0-d tensor as a
    :class:`Ref`), each bound a 0-d int64 tensor (an int bound becomes a constant one); None for other slices."""
    a = list(n.args) + [None] * (first + 4)
    start = a[first + 1] if a[first + 1] is not None else n.kwargs.get("start")
    end = a[first + 2] if a[first + 2] is not None else n.kwargs.get("end")
    if not isinstance(start, Ref) and not isinstance(end, Ref):
        return None
    step = a[first + 3] if a[first + 3] is not None else n.kwargs.get("step", 1)
    if step != 1:
        raise InputError(f"{conv.where(n)}: a slice with step {step} at bounds the data decides is not supported")
    x = conv.ref(n.args[0], n)
    dim = _norm_dim(int(a[first] if a[first] is not None else n.kwargs.get("dim", 0)), len(conv.shape[x]))

    def bound(b, default):
        if isinstance(b, Ref):
            t = conv.ref(b, n)
            if conv.shape.get(t) != () or not str(conv.dtype.get(t, "")).startswith(("int", "uint")):
                raise InputError(f"{conv.where(n)}: a slice bound read from {t}, which is not a 0-d integer tensor")
            return t
        v = _scalar(default if b is None else b, "bound")
        if not isinstance(v, int):
            raise InputError(f"{conv.where(n)}: a slice with a symbolic bound beside one the data decides")
        name = conv.fresh(f"{n.name}.bound")
        conv.emit(TNode(name, "call_function", "scalar_tensor", (), {}, loc=n.loc, func=n.func, module=n.module),
                  "aten.scalar_tensor", [], name, s=str(min(v, 2**62)), dtype="int64")
        conv.shape[name], conv.dtype[name] = (), "int64"
        return name
    return dim, bound(start, 0), bound(end, 2**62)


def _slice(conv: _Converter, n: TNode) -> None:
    read = _read_bounds(conv, n, 1)
    if read is not None:  # x[a:b] at bounds the data decides; its length: the captured symbol
        dim, lo, hi = read
        x = conv.ref(n.args[0], n)
        conv.emit(n, "aten.slice_at", [x, lo, hi], n.name, dim=dim, length=S.text(conv.shape[x][dim]),
                  count=S.text(S.norm(n.shape[dim])))
        return
    x = conv.ref(n.args[0], n)
    dim, start, end, step = _slice_range(conv, n, conv.shape[x], 1, steps=True)
    if step != 1:
        _strided_slice(conv, n, x, dim, start, end, step)
        return
    size = conv.shape[x][dim]
    if start == 0 and S.norm(end) == S.norm(size):
        conv.alias[n.name] = x
        return
    conv.emit(n, "core.slice", [x], n.name, dim=dim, start=S.text(start), end=S.text(end))


class _Strided:
    """``x[start:end:k]`` along dim as data movement: the first k*M entries of x viewed as M rows of k (dim
    split into [M, k]), column ``start % k``, rows ``start // k`` on -- where that window fits in x
    (k*M <= size) and the sizes are known numbers. Emits the clean ops for a strided slice and for its
    backward, a strided slice_scatter."""

    def __init__(self, conv: _Converter, n: TNode, x: str, dim: int, start, end, step):
        shape = conv.shape[x]
        size = shape[dim]
        if not all(isinstance(v, int) for v in (size, start, end, step)) or step < 1:
            raise InputError(f"{conv.where(n)}: a slice with step {step} over a dim of symbolic size or bounds is "
                             f"not supported")
        self.m = max(0, -(-(end - start) // step))  # entries taken
        self.first, self.col = divmod(start, step)
        self.rows = self.first + self.m
        if self.m == 0 or self.rows * step > size:
            raise InputError(f"{conv.where(n)}: slice [{start}:{end}:{step}] of a dim of size {size} is not "
                             f"supported (only strided slices whose rows of {step} fit in the dim)")
        self.conv, self.n, self.shape, self.dim, self.k, self.size = conv, n, shape, dim, step, size
        self.dtype = conv.dtype.get(x, n.dtype)

    def with_dim(self, *new):
        return tuple(self.shape[:self.dim]) + tuple(new) + tuple(self.shape[self.dim + 1:])

    def emit(self, op, srcs, new_shape, name=None, **attrs):
        conv = self.conv
        if name is None:
            name = conv.fresh(f"{self.n.name}.{op.split('.')[-1]}")
            conv.emit(self.n, op, srcs, name, node=name, **attrs)
        else:
            conv.emit(self.n, op, srcs, name, **attrs)
        conv.shape[name], conv.dtype[name] = tuple(new_shape), self.dtype
        return name

    def piece(self, x, new_shape, op, **attrs):
        """A piece of x (slice or reshape); of a fill, a smaller fill."""
        if x in self.conv.fills:
            value, dtype = self.conv.fills[x]
            name = self.emit("aten.full", [], new_shape, size=[S.text(d) for d in new_shape], fill_value=value,
                             dtype=dtype)
            self.conv.fills[name] = (value, dtype)
            return name
        if op == "core.reshape":
            attrs = {"shape": [S.text(d) for d in new_shape]}
        return self.emit(op, [x], new_shape, **attrs)

    def rows_view(self, x):
        """x's first k*M entries along dim, as [M, k]."""
        d, w = self.dim, self.rows * self.k
        if w != self.size:
            x = self.piece(x, self.with_dim(w), "core.slice", dim=d, start="0", end=str(w))
        return self.piece(x, self.with_dim(self.rows, self.k), "core.reshape")

    def column(self, r, c):
        return self.piece(r, self.with_dim(self.rows, 1), "core.slice", dim=self.dim + 1, start=str(c), end=str(c + 1))

    def slice(self, x, out: str) -> None:
        cur = self.column(self.rows_view(x), self.col)
        if self.first:
            cur = self.piece(cur, self.with_dim(self.m, 1), "core.slice", dim=self.dim, start=str(self.first),
                             end=str(self.rows))
        self.emit("core.reshape", [cur], self.with_dim(self.m), name=out, shape=[S.text(d) for d in self.with_dim(self.m)])

    def scatter(self, base, src, out: str) -> None:
        """base with x[start:end:k] replaced by src."""
        d, r = self.dim, self.rows_view(base)
        new = self.piece(src, self.with_dim(self.m, 1), "core.reshape")
        if self.first:
            above = self.piece(self.column(r, self.col), self.with_dim(self.first, 1), "core.slice", dim=d,
                               start="0", end=str(self.first))
            new = self.emit("core.concat", [above, new], self.with_dim(self.rows, 1), dim=d)
        cols = [new if c == self.col else self.column(r, c) for c in range(self.k)]
        cur = self.emit("core.concat", cols, self.with_dim(self.rows, self.k), dim=d + 1)
        w = self.rows * self.k
        if w == self.size:
            self.emit("core.reshape", [cur], self.shape, name=out, shape=[S.text(x) for x in self.shape])
            return
        cur = self.piece(cur, self.with_dim(w), "core.reshape")
        rest = self.piece(base, self.with_dim(self.size - w), "core.slice", dim=d, start=str(w), end=str(self.size))
        self.emit("core.concat", [cur, rest], self.shape, name=out, dim=d)


def _strided_slice(conv: _Converter, n: TNode, x: str, dim: int, start, end, step) -> None:
    """``x[start:end:k]`` (interleaved RoPE's ``x[..., ::2]``): see :class:`_Strided`."""
    _Strided(conv, n, x, dim, start, end, step).slice(x, n.name)


def _strided_slice_scatter(conv: _Converter, n: TNode, base: str, src: str, dim: int, start, end, step) -> None:
    """``slice_scatter(base, src, dim, start, end, k)`` (the backward of a strided slice): see :class:`_Strided`."""
    _Strided(conv, n, base, dim, start, end, step).scatter(base, src, n.name)


def _base_piece(conv: _Converter, n: TNode, base: str, dim: int, a, b, tag: str) -> str:
    """base[a:b] along dim: a slice, or a smaller fill when base is one (zeros)."""
    shape = conv.shape[base]
    name = conv.fresh(f"{n.name}.{tag}")
    conv.shape[name] = tuple(S.norm(S.sym(b) - S.sym(a)) if i == dim else x for i, x in enumerate(shape))
    conv.dtype[name] = conv.dtype.get(base)
    if base in conv.fills:
        value, dtype = conv.fills[base]
        conv.emit(n, "aten.full", [], name, node=name, size=[S.text(x) for x in conv.shape[name]],
                  fill_value=value, dtype=dtype)
    else:
        conv.emit(n, "core.slice", [base], name, node=name, dim=dim, start=S.text(a), end=S.text(b))
    return name


def _slice_scatter(conv: _Converter, n: TNode) -> None:
    """``slice_scatter(base, src, dim, start, end)`` (backward of a slice) is data movement:
    ``concat(base[:start], src, base[end:], dim)``."""
    base, src = conv.ref(n.args[0], n), conv.ref(n.args[1], n)
    read = _read_bounds(conv, n, 2)
    if read is not None:  # base[a:b] = src at bounds the data decides
        conv.emit(n, "aten.slice_scatter_at", [base, src, read[1], read[2]], n.name, dim=read[0])
        return
    shape = conv.shape[base]
    dim, start, end, step = _slice_range(conv, n, shape, 2, steps=True)
    if step != 1:
        _strided_slice_scatter(conv, n, base, src, dim, start, end, step)
        return
    size = shape[dim]
    parts = []
    if S.norm(start) != 0:
        parts.append(_base_piece(conv, n, base, dim, 0, start, "before"))
    parts.append(src)
    if S.norm(end) != S.norm(size):
        parts.append(_base_piece(conv, n, base, dim, end, size, "after"))
    parts = _nonempty(conv, parts, dim)
    if len(parts) == 1:
        conv.alias[n.name] = parts[0]
        return
    conv.emit(n, "core.concat", parts, n.name, dim=dim)


def _constant_pad(conv: _Converter, n: TNode) -> None:
    """``constant_pad_nd(x, pad, value)`` is data movement: per padded dim, ``concat(fill, x, fill)``
    (a negative pad slices)."""
    x = conv.ref(n.args[0], n)
    pad = list(n.args[1] if len(n.args) > 1 else n.kwargs["pad"])
    value = n.args[2] if len(n.args) > 2 else n.kwargs.get("value", 0)
    fill_value = _attr_value(value, "number", "value", None)
    cur, dtype = x, conv.dtype.get(x, n.dtype)
    for i in range(len(pad) // 2):
        dim = len(conv.shape[cur]) - 1 - i
        lo, hi = int(pad[2 * i]), int(pad[2 * i + 1])
        shape = conv.shape[cur]
        if lo < 0 or hi < 0:
            start, end = max(-lo, 0), S.norm(S.sym(shape[dim]) - max(-hi, 0))
            name = conv.fresh(f"{n.name}.crop")
            conv.emit(n, "core.slice", [cur], name, node=name, dim=dim, start=str(start), end=S.text(end))
            conv.shape[name] = tuple(S.norm(S.sym(end) - start) if k == dim else d for k, d in enumerate(shape))
            cur, shape, lo, hi = name, conv.shape[name], max(lo, 0), max(hi, 0)
        parts = []
        for tag, width in (("before", lo), ("x", None), ("after", hi)):
            if width is None:
                parts.append(cur)
            elif width:
                name = conv.fresh(f"{n.name}.{tag}")
                conv.shape[name] = tuple(width if k == dim else d for k, d in enumerate(shape))
                conv.emit(n, "aten.full", [], name, node=name, size=[S.text(d) for d in conv.shape[name]],
                          fill_value=fill_value, dtype=dtype)
                parts.append(name)
        if len(parts) > 1:
            name = conv.fresh(f"{n.name}.pad")
            conv.emit(n, "core.concat", parts, name, node=name, dim=dim)
            conv.shape[name] = tuple(sum(conv.shape[p_][dim] for p_ in parts) if k == dim else d
                                     for k, d in enumerate(shape))
            cur = name
    conv.alias[n.name] = cur


def _clamp(v, size):
    """PyTorch clamps slice bounds (``end=9223372036854775807``) and counts negatives from the end."""
    if isinstance(v, int):
        if v < 0:
            v = S.norm(S.sym(size) + v)
            return max(v, 0) if isinstance(v, int) else v
        if isinstance(size, int):
            return min(v, size)
        if v >= 2**62:
            return size
    return v


def _select(conv: _Converter, n: TNode) -> None:
    x = conv.ref(n.args[0], n)
    shape = conv.shape[x]
    dim = _norm_dim(int(n.args[1]), len(shape))
    idx = int(n.args[2])
    if idx < 0:
        idx = S.norm(S.sym(shape[dim]) + idx)
    mid = conv.fresh(n.name)
    sl = list(shape)
    sl[dim] = 1
    conv.emit(TNode(mid, "call_function", "slice", (), {}, loc=n.loc, func=n.func, module=n.module), "core.slice", [x], mid, dim=dim,
              start=S.text(idx), end=S.text(S.norm(S.sym(idx) + 1)))
    conv.shape[mid] = tuple(sl)
    conv.emit(n, "core.reshape", [mid], n.name, shape=[S.text(d) for i, d in enumerate(shape) if i != dim])


def _split(conv: _Converter, n: TNode) -> None:
    x = conv.ref(n.args[0], n)
    shape = conv.shape[x]
    if n.target == "aten.split_with_sizes.default":
        sizes = [_scalar(s, "sizes") for s in n.args[1]]
        dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
    elif n.target == "aten.chunk.default":
        chunks = int(n.args[1])
        dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
        d = _norm_dim(int(dim), len(shape))
        each = S.exact_div(shape[d], chunks)
        sizes = [each] * chunks
    else:  # split.Tensor(x, split_size, dim)
        dim = n.args[2] if len(n.args) > 2 else n.kwargs.get("dim", 0)
        d = _norm_dim(int(dim), len(shape))
        each = _scalar(n.args[1], "split_size")
        total = shape[d]
        if not (isinstance(each, int) and isinstance(total, int)):
            sizes = [each] * int(S.exact_div(total, each))
        else:
            sizes = [each] * (total // each) + ([total % each] if total % each else [])
    dim = _norm_dim(int(dim), len(shape))
    names = [f"{n.name}#{i}" for i in range(len(sizes))]
    conv.multi[n.name] = names
    conv.emit(n, "core.split", [x], names, dim=dim, sizes=[S.text(s) for s in sizes])
    for nm, s in zip(names, sizes):
        sh = list(shape)
        sh[dim] = s
        conv.shape[nm], conv.dtype[nm] = tuple(sh), conv.dtype.get(x)


def _unsqueeze_squeeze(conv: _Converter, n: TNode) -> None:
    x = conv.ref(n.args[0], n)
    if tuple(S.norm(_scalar(d, "")) for d in n.shape) == tuple(S.norm(d) for d in conv.shape[x]):
        conv.alias[n.name] = x
        return
    _reshape(conv, n)


_DATA_MOVEMENT = {
    **{t: _reshape for t in RESHAPE},
    "aten.t.default": _permute, "aten.transpose.int": _permute, "aten.permute.default": _permute,
    "aten.cat.default": _cat, "aten.slice.Tensor": _slice, "aten.slice_scatter.default": _slice_scatter,
    "aten.constant_pad_nd.default": _constant_pad, "aten.select.int": _select,
    "aten.split.Tensor": _split, "aten.split_with_sizes.default": _split, "aten.chunk.default": _split,
    "aten.unsqueeze.default": _unsqueeze_squeeze, "aten.squeeze.dim": _unsqueeze_squeeze,
    "aten.squeeze.dims": _unsqueeze_squeeze, "aten.squeeze.default": _unsqueeze_squeeze,
}


def to_rank_graph(g: TGraph, reg: Registry, rank: int | None, groups: dict) -> RankGraph:
    return _Converter(g, reg, rank, groups).run()
