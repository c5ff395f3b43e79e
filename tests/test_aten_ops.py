"""The aten lemma pack's operators against PyTorch: names and attributes follow the op schemas, the NumPy
references, shape functions and dtypes agree with torch on small examples, shapes stay symbolic."""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pytest
import torch

from graphguard.errors import ShapeError
from graphguard.ir.ops import coerce_attr, normalize_attrs
from graphguard.ir.scalar import Constraints, symbol
from lemma_packs.aten import graphguard_ops

# the pack's ops without an example against torch here (their references are checked where they are used:
# tests/test_torchtitan.py, tests/test_megatron_moe.py, tests/test_hf_zoo_ops.py, the fuzzer of their lemmas)
NO_EXAMPLE = {"aten._scaled_dot_product_flash_attention_for_cpu",
              "aten._scaled_dot_product_flash_attention_for_cpu_backward", "aten.abs", "aten.amin", "aten.bitwise_xor.Tensor", "aten.flip", "aten.linalg_vector_norm",
              "aten.logical_and", "aten.logical_or", "aten.logical_xor", "aten.roll", "aten.slice_at",
              "aten.slice_scatter_at", "aten.sort.stable", "aten.var", "aten.var.correction", "aten.var.dim"}
OPS = [o for o in graphguard_ops() if o.name.split("#")[0] not in NO_EXAMPLE]

BY_NAME = {o.name: o for o in OPS}
# ops as the frontend names them -> the term ops giving each output ([op] or [op#0, op#1, ...])
OUTPUTS = {}
for _o in OPS:
    if _o.meaning is None:
        OUTPUTS.setdefault(_o.name.split("#")[0], []).append(_o)
assert all(n in BY_NAME for n in OUTPUTS)  # every multi-output op has its wrapper
ALL_OUTPUTS = {}  # the same over the pack's whole operator list
for _o in graphguard_ops():
    if _o.meaning is None:
        ALL_OUTPUTS.setdefault(_o.name.split("#")[0], []).append(_o)

DROPPED = {"layout", "device", "pin_memory", "memory_format", "generator", "non_blocking"}


# -- schemas ----------------------------------------------------------------------------------------
def torch_op(name: str):
    assert name.startswith("aten.")
    op, _, overload = name[5:].partition(".")
    return getattr(getattr(torch.ops.aten, op), overload or "default")


@dataclass
class Arg:
    name: str
    type: str  # as written in the schema, alias annotations removed: "SymInt[]", "Tensor?[]", "int[1]?"
    default: str | None
    kwarg_only: bool

    @property
    def optional(self) -> bool:
        return self.type.endswith("?")

    @property
    def elem(self) -> str:
        return re.sub(r"\[\d*\]$", "", self.type.rstrip("?"))

    @property
    def is_list(self) -> bool:
        return self.type.rstrip("?").endswith("]")

    @property
    def is_tensor(self) -> bool:
        return self.elem.rstrip("?") == "Tensor"


def schema_args(name: str) -> list[Arg]:
    """The schema's arguments, parsed from its text (which keeps SymInt/ScalarType, unlike arg.type)."""
    text = str(torch_op(name)._schema)
    inner = text[text.index("(") + 1:text.rindex(") ->")]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    parts.append(cur.strip())
    out, kw = [], False
    for p in parts:
        if p == "*":
            kw = True
            continue
        decl, eq, default = p.partition("=")
        typ, arg = decl.rsplit(" ", 1)
        out.append(Arg(arg, re.sub(r"\(.*?\)", "", typ), default if eq else None, kw))
    return out


KINDS = {"int": ("int", "ints"), "SymInt": ("scalar", "scalars"), "float": ("number", None),
         "Scalar": ("number", None), "bool": ("bool", "ints"), "str": ("str", None), "ScalarType": ("str", None)}


def parse_default(text: str):
    if text == "None":
        return None
    if text in ("True", "False"):
        return text == "True"
    if text.startswith('"'):
        return text.strip('"')
    if text.startswith("["):
        return [int(v) for v in text.strip("[]").split(",") if v.strip()]
    return float(text) if "." in text or "e" in text else int(text)


@pytest.mark.parametrize("name", sorted(OUTPUTS))
def test_schema(name):
    """The op resolves to a torch overload; its attributes are exactly the schema's non-tensor arguments,
    same names and order, with the kinds and defaults the convention gives them."""
    op = OUTPUTS[name][0]
    args = schema_args(name)
    tensors = [a for a in args if a.is_tensor]
    others = [a for a in args if not a.is_tensor and a.name not in DROPPED]
    has_optional_tensor = any("?" in a.type for a in tensors)
    # (a size the data decides is no argument: the frontend names it, see OpDef.data_sizes)
    attrs = [s for s in op.attrs if s.name != "absent" and s.name not in dict(op.data_sizes)]
    assert [s.name for s in attrs] == [a.name for a in others]
    assert (op.attr_spec("absent") is not None) == has_optional_tensor
    if has_optional_tensor or any(a.is_list for a in tensors):
        assert op.arity is None
    else:
        assert op.arity == len(tensors)
    for spec, a in zip(attrs, others):
        kind = KINDS[a.elem][1 if a.is_list else 0]
        assert spec.kind == kind, (a.name, a.type, spec.kind)
        if a.default is None:
            assert spec.required or a.optional, a.name
        elif parse_default(a.default) is None:
            assert spec.optional and spec.default is None, a.name
        else:
            assert coerce_attr(op, spec, spec.default, name) == coerce_attr(op, spec, parse_default(a.default), name)
        if a.optional:
            assert spec.optional, a.name


# -- calling torch ----------------------------------------------------------------------------------
def to_torch_value(arg: Arg, v):
    if v is None:
        return None
    if arg.elem == "ScalarType":
        return getattr(torch, v)
    if arg.elem == "bool" and arg.is_list:
        return [bool(x) for x in v]
    if isinstance(v, tuple):
        return [int(x) for x in v]
    if arg.elem == "float":
        return float(v)
    if arg.elem == "Scalar":
        return int(v) if v.denominator == 1 else float(v)
    if arg.elem == "SymInt":
        return int(v)
    return v


def torch_call(name: str, ins: list[np.ndarray], attrs: dict):
    args = schema_args(name)
    absent = set(attrs.get("absent", ()))
    n_listed = len(ins) + len(absent) - sum(1 for a in args if a.is_tensor and not a.is_list)
    flat = iter(range(len(ins) + len(absent)))
    it = iter(torch.from_numpy(np.array(x, copy=True)) for x in ins)

    def take():
        return None if next(flat) in absent else next(it)
    pos, kw = [], {}
    for a in args:
        if a.is_tensor:
            v = [take() for _ in range(n_listed)] if a.is_list else take()
        elif a.name in attrs:
            v = to_torch_value(a, attrs[a.name])
        else:
            continue
        (kw.__setitem__(a.name, v) if a.kwarg_only else pos.append(v))
    out = torch_op(name)(*pos, **kw)
    return list(out) if isinstance(out, (tuple, list)) else [out]


# -- examples: (op, inputs, attrs) ------------------------------------------------------------------
rng = np.random.default_rng(0)


def f(*s):
    return rng.standard_normal(s)


def pos(*s):
    return rng.random(s) + 0.5


def i(hi, *s):
    return rng.integers(0, hi, s)


def b(*s):
    return rng.random(s) < 0.5


def _torch(name, *xs, **kw):
    return [t.numpy() for t in torch_call(name, list(xs), kw)]


def _lnb_case(shape, ns, weight, bias):
    x = f(*shape)
    w, bb = (f(*ns) if weight else None), (f(*ns) if bias else None)
    absent = [p for p, t in ((1, w), (2, bb)) if t is None]
    _, mean, rstd = _torch("aten.native_layer_norm", *[t for t in (x, w, bb) if t is not None],
                           normalized_shape=tuple(ns), eps=1e-5, absent=tuple(absent))
    ins = [f(*shape), x, mean, rstd] + [t for t in (w, bb) if t is not None]
    mask = (1, int(weight), int(bias))
    return ("native_layer_norm_backward", ins,
            {"normalized_shape": ns, "output_mask": mask, "absent": [p + 3 for p in absent]})


def _sm(x, d):
    e = np.exp(x - x.max(d, keepdims=True))
    return e / e.sum(d, keepdims=True)


def _mask(*s):
    m = b(*s)
    m[..., 0] = True  # no fully masked rows
    return m


COMPARE = [(n, "other") for n in ("lt.Scalar", "le.Scalar", "gt.Scalar", "ge.Scalar")]
UNARY_F = ["neg", "exp", "tanh", "sigmoid", "silu", "relu", "cos", "sin"]

CASES = [
    ("mse_loss", [f(3, 4), f(3, 4)], {}),
    ("mse_loss", [f(3, 4), f(3, 4)], {"reduction": 0}),
    ("mse_loss", [f(3, 4), f(3, 4)], {"reduction": 2}),
    ("mse_loss_backward", [f(), f(3, 4), f(3, 4)], {"reduction": 1}),
    ("mse_loss_backward", [f(3, 4), f(3, 4), f(3, 4)], {"reduction": 0}),
    ("mm", [f(3, 4), f(4, 5)], {}),
    ("addmm", [f(5), f(3, 4), f(4, 5)], {"beta": 0.5, "alpha": 2}),
    ("addmm", [f(3, 5), f(3, 4), f(4, 5)], {}),
    ("bmm", [f(2, 3, 4), f(2, 4, 5)], {}),
    ("baddbmm", [f(2, 3, 5), f(2, 3, 4), f(2, 4, 5)], {"beta": 0, "alpha": 0.5}),
    ("baddbmm", [f(3, 1), f(2, 3, 4), f(2, 4, 5)], {"beta": 2}),
    ("add.Tensor", [f(2, 3), f(3)], {"alpha": 2}),
    ("add.Tensor", [i(5, 2, 1), i(5, 3)], {}),
    ("add.Tensor", [i(5, 3), f(2, 3)], {}),
    ("add.Scalar", [f(2, 3)], {"other": 1.5, "alpha": 2}),
    ("add.Scalar", [i(5, 3)], {"other": 1.5}),
    ("mul.Scalar", [b(3)], {"other": 3}),
    ("sub.Tensor", [f(2, 1, 3), f(4, 1)], {"alpha": 0.5}),
    ("sub.Scalar", [f(3)], {"other": 2}),
    ("rsub.Scalar", [f(3)], {"other": 1, "alpha": 3}),
    ("mul.Tensor", [f(2, 3), b(2, 3)], {}),
    ("mul.Tensor", [i(4, 2, 3), b(3)], {}),
    ("mul.Scalar", [f(2, 3)], {"other": -0.25}),
    ("div.Tensor", [f(2, 3), pos(3)], {}),
    ("div.Tensor", [i(5, 3), i(4, 3) + 1], {}),
    ("div.Scalar", [f(4)], {"other": 3}),
    ("pow.Tensor_Scalar", [pos(2, 3)], {"exponent": 2.5}),
    ("pow.Tensor_Scalar", [f(3)], {"exponent": 2}),
    ("sqrt", [pos(4)], {}),
    ("rsqrt", [pos(4)], {}),
    ("log", [pos(4)], {}),
    ("sqrt", [i(9, 4)], {}),
    *[(n, [f(2, 3)], {}) for n in UNARY_F],
    ("gelu", [f(5)], {}),
    ("gelu", [f(5)], {"approximate": "tanh"}),
    ("gelu_backward", [f(5), f(5)], {}),
    ("gelu_backward", [f(5), f(5)], {"approximate": "tanh"}),
    ("sigmoid_backward", [f(4), rng.random(4)], {}),
    ("tanh_backward", [f(4), rng.random(4)], {}),
    ("silu_backward", [f(2, 4), f(2, 4)], {}),
    ("threshold_backward", [f(6), f(6)], {"threshold": 0}),
    ("threshold_backward", [f(6), f(6)], {"threshold": 0.25}),
    ("maximum", [f(2, 3), f(3)], {}),
    ("minimum", [f(2, 1), f(3)], {}),
    ("clamp", [f(6)], {"min": -0.5, "max": 0.5}),
    ("clamp", [f(6)], {"min": 0}),
    ("clamp", [i(9, 6)], {"max": 4}),
    *[(n, [f(2, 3)], {k: 0.1}) for n, k in COMPARE],
    ("eq.Scalar", [i(3, 6)], {"other": 1}),
    ("ne.Scalar", [i(3, 6)], {"other": 1}),
    ("lt.Tensor", [f(2, 3), f(3)], {}),
    ("le.Tensor", [i(2, 1, 3), i(1, 4, 1)], {}),
    ("eq.Tensor", [i(3, 2, 3), i(3, 1, 3)], {}),
    ("gt.Tensor", [f(2, 3), f(3)], {}),  # (HF's masks)
    ("ge.Tensor", [i(2, 1, 3), i(1, 4, 1)], {}),
    ("ne.Tensor", [i(3, 2, 3), i(3, 1, 3)], {}),
    ("log1p", [pos(4)], {}),
    ("expm1", [f(2, 3)], {}),
    ("scatter.value", [f(3, 5), np.array([[1, 3], [0, 0], [4, 2]]), ], {"dim": 1, "value": 1}),
    # (HF's TP-plan zoo: rounded positions, short convolutions of linear-attention layers)
    ("floor", [f(2, 3) * 3], {}),
    ("floor", [i(9, 4)], {}),
    ("div.Tensor_mode", [f(2, 3) * 4, pos(3)], {"rounding_mode": "floor"}),
    ("div.Tensor_mode", [f(2, 3) * 4, -pos(2, 1)], {"rounding_mode": "trunc"}),
    ("div.Tensor_mode", [i(9, 2, 3) - 4, i(3, 3) + 1], {"rounding_mode": "trunc"}),
    ("div.Tensor_mode", [i(9, 2, 3) - 4, -i(3, 3) - 1], {"rounding_mode": "floor"}),
    ("div.Tensor_mode", [i(9, 4), i(3, 4) + 1], {}),
    ("convolution", [f(2, 6, 9), f(6, 1, 4)], {"stride": [1], "padding": [3], "dilation": [1], "transposed": False,
                                               "output_padding": [0], "groups": 6, "absent": [2]}),
    ("convolution", [f(2, 6, 9), f(4, 3, 3), f(4)], {"stride": [2], "padding": [1], "dilation": [2],
                                                     "transposed": False, "output_padding": [0], "groups": 2}),
    ("convolution", [f(1, 4, 5, 6), f(2, 2, 2, 3)], {"stride": [1, 2], "padding": [1, 0], "dilation": [1, 1],
                                                     "transposed": False, "output_padding": [0, 0], "groups": 2,
                                                     "absent": [2]}),
    ("_conj", [f(2, 3) + 1j * f(2, 3)], {}),
    ("polar", [pos(2, 3), f(3)], {}),
    ("view_as_complex", [f(2, 3, 2)], {}),
    ("view_as_real", [f(2, 3) + 1j * f(2, 3)], {}),
    ("linalg_solve_triangular", [f(2, 4, 4), f(2, 4, 3)], {"upper": False, "unitriangular": True}),
    ("linalg_solve_triangular", [f(4, 4) + 4 * np.eye(4), f(3, 2, 4)], {"upper": True, "left": False}),
    ("convolution_backward", [f(2, 6, 12), f(2, 6, 9), f(6, 1, 4)],
     {"bias_sizes": [6], "stride": [1], "padding": [3], "dilation": [1], "transposed": False, "output_padding": [0],
      "groups": 6, "output_mask": [1, 1, 1]}),
    ("convolution_backward", [f(2, 4, 4), f(2, 6, 9), f(4, 3, 3)],
     {"bias_sizes": [4], "stride": [2], "padding": [1], "dilation": [2], "transposed": False, "output_padding": [0],
      "groups": 2, "output_mask": [1, 1, 1]}),
    ("bitwise_or.Tensor", [b(2, 3), b(3)], {}),
    ("bitwise_and.Tensor", [i(8, 4), i(8, 4)], {}),
    ("bitwise_not", [b(4)], {}),
    ("bitwise_not", [i(8, 4)], {}),
    ("logical_not", [b(4)], {}),
    ("logical_not", [np.array([0.0, 1.5, -2.0])], {}),
    ("where.self", [b(2, 3), f(3), f(2, 1)], {}),
    ("masked_fill.Scalar", [f(2, 3), b(3)], {"value": -1e9}),
    ("masked_fill.Scalar", [f(3), b(2, 3)], {"value": 0.5}),
    ("masked_fill.Scalar", [i(5, 4), b(4)], {"value": 7}),
    ("masked_fill.Tensor", [f(2, 3), b(2, 3), np.array(2.5)], {}),
    ("_to_copy", [f(4)], {"dtype": "float32"}),
    ("_to_copy", [f(4) * 3], {"dtype": "int64"}),
    ("_to_copy", [b(4)], {"dtype": "float64"}),
    ("_to_copy", [f(3)], {}),
    ("_softmax", [f(2, 5)], {"dim": 1, "half_to_float": False}),
    ("_softmax", [f(3, 2)], {"dim": -2, "half_to_float": False}),
    ("_log_softmax", [f(2, 5)], {"dim": 1, "half_to_float": False}),
    ("_softmax_backward_data", [f(2, 5), _sm(f(2, 5), 1)], {"dim": 1, "input_dtype": "float64"}),
    ("_log_softmax_backward_data", [f(4, 3), np.log(_sm(f(4, 3), 0))], {"dim": 0, "input_dtype": "float64"}),
    ("native_layer_norm", [f(2, 3, 4), f(4), f(4)], {"normalized_shape": [4], "eps": 1e-5}),
    ("native_layer_norm", [f(2, 3, 4)], {"normalized_shape": [3, 4], "eps": 1e-5, "absent": [1, 2]}),
    ("native_layer_norm", [f(2, 4), f(4)], {"normalized_shape": [4], "eps": 1e-6, "absent": [2]}),
    _lnb_case((2, 3, 4), [4], True, True),
    _lnb_case((2, 3, 4), [3, 4], True, False),
    _lnb_case((3, 4), [4], False, False),
    ("native_dropout", [f(3, 4)], {"p": 0.0, "train": True}),
    ("native_dropout", [f(3, 4)], {"p": 0.5, "train": False}),
    ("native_dropout_backward", [f(3, 4), b(3, 4)], {"scale": 2.0}),
    ("sum", [f(2, 3)], {}),
    ("sum", [b(2, 3)], {}),
    ("sum.dim_IntList", [f(2, 3, 4)], {"dim": [0, 2], "keepdim": True}),
    ("sum.dim_IntList", [f(2, 3, 4)], {"dim": [-1]}),
    ("sum.dim_IntList", [f(2, 3)], {"dim": None}),
    ("sum.dim_IntList", [i(5, 2, 3)], {"dim": [1], "dtype": "float64"}),
    ("mean", [f(3, 4)], {}),
    ("mean.dim", [f(2, 3, 4)], {"dim": [1]}),
    ("mean.dim", [f(2, 3, 4)], {"dim": [0, -1], "keepdim": True}),
    ("amax", [f(2, 3, 4)], {"dim": [1, 2], "keepdim": True}),
    ("amax", [f(3, 4)], {}),
    ("max.dim", [f(3, 4)], {"dim": 1}),
    ("max.dim", [f(3, 4)], {"dim": 0, "keepdim": True}),
    ("topk", [f(3, 6)], {"k": 2}),
    ("topk", [f(5, 3)], {"k": 3, "dim": 0, "largest": False}),
    ("argmax", [f(3, 4)], {"dim": 1}),
    ("argmax", [f(3, 4)], {}),
    ("argmax", [f(3, 4)], {"keepdim": True}),
    ("cumsum", [f(3, 4)], {"dim": 1}),
    ("cumsum", [b(5)], {"dim": 0}),
    ("embedding", [f(10, 4), i(10, 2, 3)], {}),
    ("embedding_dense_backward", [f(2, 3, 4), i(6, 2, 3)],
     {"num_weights": 6, "padding_idx": 1, "scale_grad_by_freq": True}),
    ("embedding_dense_backward", [f(5, 4), i(7, 5)], {"num_weights": 7, "padding_idx": -1,
                                                      "scale_grad_by_freq": False}),
    ("index.Tensor", [f(5, 4, 3), i(5, 2), i(4, 2)], {}),
    ("index.Tensor", [f(5, 4, 3), i(4, 2, 2)], {"absent": [1]}),
    ("index.Tensor", [f(5, 4, 3), i(5, 2), i(3, 2)], {"absent": [2]}),
    ("index_put", [f(5, 3), np.array([4, 1]), f(2, 3)], {}),
    ("index_put", [f(5, 3), i(5, 4), f(3)], {"accumulate": True}),
    ("index_put", [f(4, 5), np.array([0, 3]), f(4, 2)], {"absent": [1]}),
    ("index_select", [f(5, 3), i(5, 4)], {"dim": 0}),
    ("index_copy", [f(5, 3), np.array([4, 0, 2]), f(3, 3)], {"dim": 0}),
    ("index_copy", [f(2, 5), np.array([1, 3]), f(2, 2)], {"dim": -1}),
    # grouped products: every row in a group (past offs[-1] the kernel writes nothing: not compared anywhere)
    ("_grouped_mm", [f(8, 8).astype(np.float32), f(3, 8, 4).astype(np.float32), np.array([2, 2, 8], dtype=np.int32)],
     {"absent": [3]}),
    ("_grouped_mm", [f(4, 8).astype(np.float32), f(8, 4).astype(np.float32), np.array([3, 3, 8], dtype=np.int32)],
     {"absent": [3]}),
    ("histc", [f(20)], {"bins": 5, "min": -1, "max": 1}),
    ("histc", [f(3, 4)], {"bins": 4}),  # min = max = 0: the data's own range
    ("histc", [np.array([0.0, 1.0, 1.0, 3.0, 3.0, 3.0])], {"bins": 4, "min": 0, "max": 3}),  # max: the last bin
    ("sort", [f(3, 5)], {"dim": 1}),
    ("sort", [f(4, 2)], {"dim": 0, "descending": True}),
    ("index_select", [f(2, 5), i(5, 3)], {"dim": -1}),
    ("gather", [f(4, 5), i(5, 4, 2)], {"dim": 1}),
    ("gather", [f(4, 5), i(4, 2, 3)], {"dim": 0}),
    ("scatter_add", [f(4, 5), i(4, 2, 5), f(2, 5)], {"dim": 0}),
    ("scatter_add", [f(3, 4), i(4, 3, 2), f(3, 3)], {"dim": 1}),
    ("scatter.src", [f(4, 5), np.array([[0, 1, 2, 3, 0], [1, 2, 3, 0, 2]]), f(2, 5)], {"dim": 0}),
    ("scatter.src", [f(3, 4), np.array([[3, 0], [1, 2], [0, 1]]), f(3, 3)], {"dim": 1}),
    ("nonzero", [np.array([[1.0, 0.0, 2.0], [0.0, 0.0, 3.0]])], {"count": 3}),  # count: the data's
    ("nonzero", [np.array([True, False, True, True])], {"count": 3}),
    ("index_add", [f(5, 3), np.array([0, 4, 0]), f(3, 3)], {"dim": 0}),  # repeated rows accumulate
    ("index_add", [f(2, 5), np.array([1, 1, 3]), f(2, 3)], {"dim": 1, "alpha": 2}),
    ("one_hot", [i(5, 2, 3)], {"num_classes": 5}),
    ("arange.start", [], {"start": 2, "end": 7}),
    ("arange.start", [], {"start": 0.5, "end": 3}),
    ("arange", [], {"end": 5}),
    ("arange", [], {"end": 4, "dtype": "float64"}),
    ("zeros", [], {"size": [2, 3]}),
    ("zeros", [], {"size": [2], "dtype": "int64"}),
    ("ones", [], {"size": [3, 1], "dtype": "bool"}),
    ("full", [], {"size": [2, 2], "fill_value": 1.5}),
    ("full", [], {"size": [3], "fill_value": 7}),
    ("full", [], {"size": [3], "fill_value": -2, "dtype": "float64"}),
    ("scalar_tensor", [], {"s": 2.5}),
    ("scalar_tensor", [], {"s": 3, "dtype": "int64"}),
    ("zeros_like", [f(2, 3)], {}),
    ("ones_like", [i(3, 4)], {}),
    ("ones_like", [f(2)], {"dtype": "int64"}),
    ("full_like", [f(2, 3)], {"fill_value": -2.0}),
    ("empty_like", [f(2, 3)], {}),
    ("new_zeros", [f(2)], {"size": [3, 2]}),
    ("expand", [f(3, 1)], {"size": [2, -1, 4]}),
    ("expand", [f(1, 4)], {"size": [3, 4]}),
    ("repeat", [f(2, 3)], {"repeats": [2, 1, 2]}),
    ("scaled_dot_product_attention", [f(2, 3, 4), f(2, 5, 4), f(2, 5, 6)], {"absent": [3]}),
    ("scaled_dot_product_attention", [f(2, 2, 4, 3), f(2, 2, 4, 3), f(2, 2, 4, 5)],
     {"is_causal": True, "scale": 0.3, "absent": [3]}),
    ("scaled_dot_product_attention", [f(2, 3, 4), f(2, 5, 4), f(2, 5, 6), _mask(3, 5)], {}),
    ("scaled_dot_product_attention", [f(2, 3, 4), f(2, 5, 4), f(2, 5, 6), f(2, 1, 5)], {}),
    ("scaled_dot_product_attention", [f(1, 4, 3, 2), f(1, 2, 3, 2), f(1, 2, 3, 2)],
     {"enable_gqa": True, "absent": [3]}),
]
CASES = [("aten." + n, ins, attrs) for n, ins, attrs in CASES]
NO_VALUES = {"aten.empty_like"}  # torch leaves it uninitialised


def test_every_op_has_an_example():
    assert set(OUTPUTS) - {n for n, _, _ in CASES} == set()


def _ids():
    seen: dict[str, int] = {}
    out = []
    for n, _, _ in CASES:
        seen[n] = seen.get(n, 0) + 1
        out.append(f"{n[5:]}-{seen[n]}")
    return out


def _dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


@pytest.mark.parametrize("name,ins,attrs", CASES, ids=_ids())
def test_against_torch(name, ins, attrs):
    outs = ALL_OUTPUTS[name]
    norm = dict(normalize_attrs(outs[0], attrs, name))
    expected = torch_call(name, ins, norm)
    assert len(expected) == len(outs)
    cx = Constraints()
    in_shapes = [tuple(x.shape) for x in ins]
    in_dtypes = [x.dtype.name for x in ins]
    for op, t in zip(outs, expected):
        if t is None:  # output_mask switched it off
            continue
        e = t.resolve_conj().numpy()
        assert tuple(op.shape(in_shapes, norm, cx)) == e.shape, op.name
        dt = op.dtype(in_dtypes, norm) if op.dtype else (in_dtypes[0] if in_dtypes else "float32")
        assert dt == _dtype_name(t), op.name
        if name in NO_VALUES:
            continue
        r = np.asarray(op.ref([x.copy() for x in ins], norm))
        assert r.shape == e.shape, op.name
        if e.dtype.kind in "fc":
            np.testing.assert_allclose(r, e, rtol=1e-6, atol=1e-9, err_msg=op.name)
        else:
            assert r.dtype == e.dtype, op.name
            np.testing.assert_array_equal(r, e, err_msg=op.name)


# -- dropout with p > 0 (the reference's own fixed-seed mask) -----------------------------------------
def test_dropout_reference_is_a_fixed_seed_mask():
    op0, op1 = BY_NAME["aten.native_dropout#0"], BY_NAME["aten.native_dropout#1"]
    x = f(50, 40)
    a = dict(normalize_attrs(op0, {"p": 0.25, "train": True}, "t"))
    out, mask = op0.ref([x], a), op1.ref([x], a)
    np.testing.assert_array_equal(mask, op1.ref([x], a))
    assert mask.dtype == np.bool_ and 0.65 < mask.mean() < 0.85
    np.testing.assert_allclose(out, x * mask / 0.75)
    back = BY_NAME["aten.native_dropout_backward"].ref([out, mask], {"scale": 1 / 0.75})
    np.testing.assert_allclose(back, x * mask / 0.75 ** 2)


# -- symbolic shapes ---------------------------------------------------------------------------------
def test_symbolic_shapes():
    cx = Constraints()
    s = symbol("S")

    def sh(n, shapes, **attrs):
        return BY_NAME[n].shape(shapes, dict(normalize_attrs(BY_NAME[n], attrs, n)), cx)
    assert sh("aten.mm", [(s, 4), (4, 2 * s)]) == (s, 2 * s)
    assert sh("aten.mm", [(3, s), (s, 5)]) == (3, 5)
    assert sh("aten.add.Tensor", [(s, 1, 4), (3, 1)]) == (s, 3, 4)
    assert sh("aten.add.Tensor", [(1, s), (s,)]) == (1, s)
    assert sh("aten.sum.dim_IntList", [(2, s, 4)], dim=[1], keepdim=True) == (2, 1, 4)
    assert sh("aten.sum.dim_IntList", [(2, s, 4)], dim=[0, -1]) == (s,)
    assert sh("aten.embedding", [(s, 8), (2, s)]) == (2, s, 8)
    assert sh("aten.embedding_dense_backward", [(2, s, 8), (2, s)], num_weights="V", padding_idx=-1,
              scale_grad_by_freq=False) == (symbol("V"), 8)
    with pytest.raises(ShapeError):
        sh("aten.mm", [(s, 4), (5, 2)])
    with pytest.raises(ShapeError):
        sh("aten.add.Tensor", [(s, 4), (3, 4)])  # S is not provably 3 (or 1)
    with pytest.raises(ShapeError):
        sh("aten.sum.dim_IntList", [(2, s)], dim=[2])
    with pytest.raises(ShapeError):
        sh("aten.topk#0", [(2, s)], k=5)  # k <= S is not provable
    assert sh("aten.topk#1", [(2, s)], k="S") == (2, s)
    assert sh("aten.addmm", [(1, s), (3, 4), (4, s)]) == (3, s)
    with pytest.raises(ShapeError):
        sh("aten.addmm", [(3, 4), (3, 4), (4, s)])
    assert sh("aten.index_put", [(s, 3), (2,), (3,)], absent=[]) == (s, 3)
    with pytest.raises(ShapeError):
        sh("aten.index_put", [(s, 3), (2,), (2, 4)], absent=[])
