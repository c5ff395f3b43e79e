"""Mutants of the shipped PyTorch examples: equivalent rewrites and planted bugs, with their ground truth.

A mutant is an example's model file with one site rewritten (by its syntax tree) -- or, for ``shard-swap``, its
input relation with the shards of one input in the wrong order. A rewrite applies to the implementation only:
the site becomes ``(NEW if _gg_impl() else OLD)``, where ``_gg_impl()`` is true while a process group exists
(capture of G_d, the ranks of the eager run), so the specification keeps the original code. The helpers a
rewrite calls (``_gg_*``) are appended to the file as plain Python; TorchDynamo inlines them.

Kinds (:data:`KINDS`) are *equivalent* (a rewrite a user may write: commuted operands, ``x + 0``, a mean as
sum / n, a collective in another form, a buffer written through views, ...) or *bugs* (a dropped or
duplicated collective, another reduction, group, scale, slice offset, dim or operator, swapped shards...).

Ground truth (:func:`ground_truth`): the specification and every rank of the implementation run eagerly in
float64 (ranks as threads over torch's threaded process group) on random inputs made consistent with the
input relation; the mutant *changes the numbers* when some relation of the unmutated example's certificate
R_o no longer holds. Verification (:func:`run_one`) asks graphguard to find that same R_o (it is passed as
``expect``). A mutant whose captured graph equals the unmutated one, or whose program fails to run, is not
counted (``unchanged`` / ``invalid``).

``python3 tests/mutants.py worker OUTDIR`` runs mutant ids read from stdin, one JSON line each on stdout;
``bench/mutants.py`` drives the workers and prints the tables.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOL = 1e-7  # ground truth: |got - want| <= TOL * (max |want| + 1), elementwise, float64


@dataclass(frozen=True)
class Example:
    name: str
    path: str  # model file, relative to the repository root
    world: int
    backward: bool = True
    env: tuple = ()  # environment variables the model file reads


EXAMPLES = {e.name: e for e in [
    Example("mlp-tp", "examples/mlp-tp/model.py", 2),
    Example("gpt-tp", "examples/gpt-tp/model.py", 2),
    Example("gpt-tp-sp", "examples/gpt-tp-sp/model.py", 2),
    Example("llama-tp", "examples/llama-tp/model.py", 2),
    Example("dp-grads", "examples/dp-grads/model.py", 2),
    Example("grad-accum", "examples/grad-accum/model.py", 1),
    Example("moe-ep", "examples/moe-ep/model.py", 2),
    Example("moe-tp", "examples/moe-ep/model.py", 2, env=(("MOE_PARALLEL", "tp"),)),
    Example("mlp-dp-tp", "examples/mlp-dp-tp/model.py", 4),
    Example("gpt-tp-vocab", "examples/gpt-tp-vocab/model.py", 2),
]}

API = {"spec", "impl", "inputs", "relation", "expect", "dynamic_dims"}

# ---------------------------------------------------------------------------------------------------------
# helpers appended to every mutant (plain Python that TorchDynamo inlines)

PRELUDE = '''

import torch as _gg_torch
import torch.distributed as _gg_dist
import torch.distributed._functional_collectives as _gg_funcol


def _gg_impl():  # true in the ranks of the implementation, false in the specification
    return _gg_dist.is_initialized()


def _gg_float(x):
    return isinstance(x, _gg_torch.Tensor) and x.is_floating_point()


def _gg_add0(x):  # x + 0
    return x + 0 if _gg_float(x) else x


def _gg_mul1(x):  # x * 1
    return x * 1 if _gg_float(x) else x


def _gg_div1(x):  # x / 1
    return x / 1 if _gg_float(x) else x


def _gg_negneg(x):  # -(-x)
    return -(-x) if _gg_float(x) else x


def _gg_clone(x):
    return x.clone() if _gg_float(x) else x


def _gg_scale2(x):  # bug: twice the value
    return x * 2 if _gg_float(x) else x


def _gg_neg(x):  # bug: the sign flipped
    return -x if _gg_float(x) else x


def _gg_detach(x):  # bug: no gradient flows back through x
    return x.detach() if _gg_float(x) and x.requires_grad else x


def _gg_empty_views(x):  # a fresh empty_like buffer written through two views
    if not _gg_float(x) or x.dim() == 0 or x.shape[0] < 2:
        return x
    b = _gg_torch.empty_like(x)
    h = x.shape[0] // 2
    b[:h] = x[:h]
    b[h:] = x[h:]
    return b


def _gg_new_empty(x):  # x.new_empty(...) filled by copy_
    if not _gg_float(x):
        return x
    b = x.new_empty(x.shape)
    b.copy_(x)
    return b


def _gg_transpose2(x):  # transposed twice
    return x.transpose(-1, -2).transpose(-1, -2) if _gg_float(x) and x.dim() >= 2 else x


def _gg_split_cat(x):  # split in two along the last dim and concatenated again
    if not _gg_float(x) or x.dim() == 0 or x.shape[-1] % 2:
        return x
    return _gg_torch.cat(x.chunk(2, dim=-1), dim=-1)


def _gg_mean(x, dim=None, keepdim=False, **kw):  # mean as sum / n
    if dim is None:
        return x.sum() / x.numel()
    n = 1
    for d in ([dim] if isinstance(dim, int) else list(dim)):
        n *= x.shape[d]
    return x.sum(dim, keepdim=keepdim) / n


def _gg_mse(a, b, reduction="mean"):  # F.mse_loss written out
    d = (a - b) ** 2
    return d.mean() if reduction == "mean" else d.sum() if reduction == "sum" else d


def _gg_matmul_t(a, b):  # a @ b as (b^T a^T)^T
    if a.dim() < 2 or b.dim() < 2:
        return _gg_torch.matmul(a, b)
    return _gg_torch.matmul(b.transpose(-1, -2), a.transpose(-1, -2)).transpose(-1, -2)


def _gg_repeat(x, *sizes):  # expand (of size-1 dims) as repeat
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple)):
        sizes = tuple(sizes[0])
    if len(sizes) != x.dim() or any(s != -1 and d not in (1, s) for s, d in zip(sizes, x.shape)):
        return x.expand(*sizes)
    return x.repeat(*[1 if s == -1 else s // d for s, d in zip(sizes, x.shape)])


def _gg_stack_sum(xs):
    return _gg_torch.stack(xs).sum(0)


def _gg_ws(g):
    return _gg_dist.get_world_size(g)


def _gg_rank(g):
    return _gg_dist.get_rank(g)


def _gg_ar_ag(x, op, g):  # all-reduce as an all-gather and a reduction over the gathered dim
    y = _gg_funcol.all_gather_tensor(x.unsqueeze(0), 0, g)
    if op == "sum":
        return y.sum(0)
    if op == "avg":
        return y.mean(0)
    if op == "max":
        return y.amax(0)
    return _gg_funcol.all_reduce(x, op, g)


def _gg_ar_rs_ag(x, op, g):  # all-reduce as a reduce-scatter and an all-gather
    w = _gg_ws(g)
    if op not in ("sum", "avg") or x.dim() == 0:
        return _gg_funcol.all_reduce(x, op, g)
    if x.shape[0] % w == 0:
        return _gg_funcol.all_gather_tensor(_gg_funcol.reduce_scatter_tensor(x, op, 0, g), 0, g)
    if x.numel() % w == 0:
        y = _gg_funcol.reduce_scatter_tensor(x.reshape(-1), op, 0, g)
        return _gg_funcol.all_gather_tensor(y, 0, g).reshape(x.shape)
    return _gg_funcol.all_reduce(x, op, g)


def _gg_ar_factor(x, op, g):  # a factor taken back after the collective
    return _gg_funcol.all_reduce(x * 2, op, g) / 2


def _gg_avg_as_sum(x, op, g):  # avg as sum / world
    if op != "avg":
        return _gg_funcol.all_reduce(x, op, g)
    return _gg_funcol.all_reduce(x, "sum", g) / _gg_ws(g)


def _gg_padded(x, d, g):
    z = _gg_torch.zeros_like(x)
    return _gg_torch.cat([x if i == _gg_rank(g) else z for i in range(_gg_ws(g))], dim=d)


def _gg_ag_pad(x, d, g):  # all-gather as an all-reduce of zero-padded shards
    return _gg_funcol.all_reduce(_gg_padded(x, d, g), "sum", g)


class _GGAgPad(_gg_torch.autograd.Function):  # the same, differentiable (backward: the own slice of the sum)
    @staticmethod
    def forward(ctx, x, d, g):
        ctx.d, ctx.g, ctx.n = d, g, x.shape[d]
        return _gg_funcol.all_reduce(_gg_padded(x, d, g), "sum", g)

    @staticmethod
    def backward(ctx, grad):
        s = _gg_funcol.all_reduce(grad, "sum", ctx.g)
        return s.narrow(ctx.d, _gg_rank(ctx.g) * ctx.n, ctx.n), None, None


def _gg_ag_pad_autograd(x, d, g):
    return _GGAgPad.apply(x, d, g)


def _gg_rs_ar(x, op, d, g):  # reduce-scatter as an all-reduce and the own chunk
    return _gg_funcol.all_reduce(x, op, g).chunk(_gg_ws(g), dim=d)[_gg_rank(g)]


class _GGRsAr(_gg_torch.autograd.Function):  # the same, differentiable (backward: all-gather)
    @staticmethod
    def forward(ctx, x, op, d, g):
        ctx.d, ctx.g = d, g
        return _gg_rs_ar(x, op, d, g)

    @staticmethod
    def backward(ctx, grad):
        return _gg_funcol.all_gather_tensor(grad.contiguous(), ctx.d, ctx.g), None, None, None


def _gg_rs_ar_autograd(x, op, d, g):
    return _GGRsAr.apply(x, op, d, g)


def _gg_other_op(op):  # bug: another reduction
    return {"sum": "avg", "avg": "sum", "max": "sum"}.get(op, op)


def _gg_ag_local(x, d, g):  # bug: the local shard repeated instead of gathered
    return _gg_torch.cat([x] * _gg_ws(g), dim=d)


def _gg_rs_local(x, op, d, g):  # bug: the own chunk, not reduced
    return x.chunk(_gg_ws(g), dim=d)[_gg_rank(g)]
'''

# ---------------------------------------------------------------------------------------------------------
# kinds: which expressions are sites, and what each becomes

COLL = {"all_reduce", "all_gather_tensor", "all_gather_tensor_autograd", "reduce_scatter_tensor",
        "reduce_scatter_tensor_autograd", "all_to_all_single", "all_to_all_single_autograd"}
SKIP_CALLS = {"super", "isinstance", "range", "len", "zip", "enumerate", "int", "float", "list", "tuple", "dict",
              "sum", "min", "max", "getattr", "print", "_gg_impl"}
ACT = {"gelu": "silu", "silu": "gelu", "relu": "gelu", "softmax": "log_softmax", "rsqrt": "sqrt", "exp": "sigmoid"}
DIM_CALLS = {"cat", "softmax", "sum", "mean", "chunk", "split", "log_softmax", "all_gather_tensor",
             "all_gather_tensor_autograd", "transpose", "amax", "max", "layer_norm", "one_hot", "topk"}


def _name(n) -> str | None:
    """The called function's last name: ``funcol.all_reduce(...)`` -> all_reduce."""
    f = n.func if isinstance(n, ast.Call) else None
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _is_coll(n, names=COLL) -> bool:
    return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in names and \
        isinstance(n.func.value, ast.Name) and n.func.value.id == "funcol"


def _tensor_call(n) -> bool:
    """A call that may compute a tensor (not a builtin, not a size query)."""
    return isinstance(n, ast.Call) and _name(n) not in SKIP_CALLS and _name(n) not in {"size", "dim", "item",
                                                                                    "get_world_size", "get_rank"}


def _call(fn: str, *args, keywords=()) -> ast.Call:
    return ast.Call(ast.Name(fn, ast.Load()), list(args), list(keywords))


def _num(n) -> bool:
    return isinstance(n, ast.Constant) and isinstance(n.value, (int, float)) and not isinstance(n.value, bool)


def _helper(fn):  # node -> fn(node)
    return lambda n: _call(fn, n)


def _coll_helper(fn, autograd_fn=None):  # funcol.X(args) -> fn(args)
    def rw(n):
        name = autograd_fn if autograd_fn and n.func.attr.endswith("_autograd") else fn
        return _call(name, *n.args, keywords=n.keywords)
    return rw


def _swap_binop(n):
    return ast.BinOp(n.right, n.op, n.left)


def _with_op(op):
    return lambda n: ast.BinOp(n.left, op, n.right)


def _mean_rw(n):
    f = n.func
    if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "torch":
        return _call("_gg_mean", *n.args, keywords=n.keywords)
    return _call("_gg_mean", f.value, *n.args, keywords=n.keywords)


def _mse_rw(n):
    return _call("_gg_mse", *n.args, keywords=n.keywords)


def _matmul_rw(n):
    if isinstance(n, ast.BinOp):
        return _call("_gg_matmul_t", n.left, n.right)
    return _call("_gg_matmul_t", *n.args)


def _is_matmul(n):
    return (isinstance(n, ast.BinOp) and isinstance(n.op, ast.MatMult)) or \
        (isinstance(n, ast.Call) and _name(n) == "matmul" and len(n.args) == 2 and not n.keywords)


def _is_mean(n):
    return isinstance(n, ast.Call) and _name(n) == "mean" and isinstance(n.func, ast.Attribute)


def _arg(n, i, kw):
    if len(n.args) > i:
        return n.args[i]
    return next((k.value for k in n.keywords if k.arg == kw), None)


def _op_pos(n) -> int | None:
    """Position of the reduction op of a funcol call."""
    return {"all_reduce": 1, "reduce_scatter_tensor": 1, "reduce_scatter_tensor_autograd": 1}.get(n.func.attr)


def _other_op_rw(n):
    n = copy.deepcopy(n)
    i = _op_pos(n)
    n.args[i] = _call("_gg_other_op", n.args[i])
    return n


def _drop_coll_rw(n):
    a = n.func.attr
    if a.startswith("all_reduce") or a.startswith("all_to_all"):
        return n.args[0]
    if a.startswith("all_gather"):
        return _call("_gg_ag_local", *n.args)
    return _call("_gg_rs_local", *n.args)


def _dup_coll_rw(n):
    inner = copy.deepcopy(n)
    outer = copy.deepcopy(n)
    outer.args[0] = inner
    return outer


def _dim_node(n):
    """The dim argument of a call (keyword ``dim`` or the call's usual position)."""
    for k in n.keywords:
        if k.arg in ("dim", "gather_dim", "scatter_dim") and _num(k.value):
            return k, "kw"
    pos = {"cat": 1, "chunk": 1, "split": 1, "all_gather_tensor": 1, "all_gather_tensor_autograd": 1,
           "transpose": 0, "softmax": 0 if isinstance(n.func, ast.Attribute) and
           not (isinstance(n.func.value, ast.Name) and n.func.value.id in ("torch", "F")) else 1}
    i = pos.get(_name(n))
    if i is not None and len(n.args) > i and (_num(n.args[i]) or (isinstance(n.args[i], ast.UnaryOp)
                                                                  and _num(n.args[i].operand))):
        return i, "pos"
    return None, None


def _has_dim(n):
    return isinstance(n, ast.Call) and _name(n) in DIM_CALLS and _dim_node(n)[0] is not None


def _other_dim(v: int) -> int:
    return {0: 1, 1: 0, -1: -2, -2: -1, 2: 1, 3: 2}.get(v, v - 1)


def _dim_rw(n):
    n = copy.deepcopy(n)
    where, how = _dim_node(n)
    if how == "kw":
        where.value = ast.Constant(_other_dim(where.value.value))
    else:
        a = n.args[where]
        v = a.value if _num(a) else -a.operand.value
        n.args[where] = ast.Constant(_other_dim(v))
    return n


def _slice_ok(n):
    return isinstance(n, ast.Slice) and (n.lower is not None or n.upper is not None) and n.step is None


def _slice_rw(n):
    one = ast.Constant(1)
    lo = ast.BinOp(n.lower, ast.Add(), one) if n.lower is not None else one
    hi = ast.BinOp(n.upper, ast.Add(), one) if n.upper is not None else None
    return ast.Slice(lo, hi, None)


def _act_rw(n):
    n = copy.deepcopy(n)
    n.func.attr = ACT[n.func.attr] if isinstance(n.func, ast.Attribute) else n.func.attr
    return n


def _is_act(n):
    return isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ACT


def _const_rw(n):
    return ast.Constant(n.value * 2 if n.value not in (0, 1) else n.value + 1)


def _is_rank(n):
    return (isinstance(n, ast.Attribute) and n.attr == "rank" and isinstance(n.value, ast.Name)) or \
        (isinstance(n, ast.Name) and n.id == "rank") or (isinstance(n, ast.Call) and _name(n) == "get_rank")


def _rank_rw(n):  # rank r -> r + 1 (mod world)
    return ast.BinOp(ast.BinOp(n, ast.Add(), ast.Constant(1)), ast.Mod(),
                     _call("_gg_ws", ast.Attribute(ast.Attribute(ast.Name("_gg_dist", ast.Load()), "group"), "WORLD")))


def _is_group(n):
    return isinstance(n, ast.Name) and n.id in ("tp_group", "dp_group")


def _group_rw(n):
    return ast.Name("dp_group" if n.id == "tp_group" else "tp_group", ast.Load())


def _scalar_operand(n):
    return isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Div)) and \
        (_num(n.right) or isinstance(n.right, (ast.Attribute, ast.Call)) and not _is_matmul(n))


@dataclass(frozen=True)
class Kind:
    name: str
    equivalent: bool
    match: object  # ast node -> bool
    rewrite: object  # ast node -> ast node (a copy may be modified)
    doc: str
    per_example: int = 8  # at most this many sites per example, spread over its sites


_B = lambda *ops: (lambda n: isinstance(n, ast.BinOp) and isinstance(n.op, ops))  # noqa: E731

KINDS = {k.name: k for k in [
    # equivalent rewrites
    Kind("commute", True, _B(ast.Add, ast.Mult), _swap_binop, "operands of + or * swapped (b + y)"),
    Kind("add-zero", True, _tensor_call, _helper("_gg_add0"), "x + 0", per_example=2),
    Kind("mul-one", True, _tensor_call, _helper("_gg_mul1"), "x * 1", per_example=2),
    Kind("div-one", True, _tensor_call, _helper("_gg_div1"), "x / 1", per_example=2),
    Kind("neg-neg", True, _tensor_call, _helper("_gg_negneg"), "-(-x)", per_example=2),
    Kind("sub-as-add-neg", True, _B(ast.Sub), lambda n: ast.BinOp(n.left, ast.Add(), ast.UnaryOp(ast.USub(), n.right)),
         "a - b as a + (-b)"),
    Kind("mean-as-sum", True, _is_mean, _mean_rw, "x.mean(d) as x.sum(d) / n"),
    Kind("mse-expanded", True, lambda n: isinstance(n, ast.Call) and _name(n) == "mse_loss", _mse_rw,
         "F.mse_loss(a, y) as ((a - y) ** 2).mean()"),
    Kind("matmul-transposed", True, _is_matmul, _matmul_rw, "a @ b as (b^T @ a^T)^T"),
    Kind("transpose-twice", True, _tensor_call, _helper("_gg_transpose2"), "x.transpose(-1, -2) twice", per_example=2),
    Kind("split-cat", True, _tensor_call, _helper("_gg_split_cat"), "cat(x.chunk(2, -1), -1)", per_example=2),
    Kind("clone", True, _tensor_call, _helper("_gg_clone"), "x.clone()", per_example=2),
    Kind("empty-views", True, _tensor_call, _helper("_gg_empty_views"),
         "an empty_like buffer written through two slice views", per_example=2),
    Kind("new-empty", True, _tensor_call, _helper("_gg_new_empty"), "x.new_empty(shape).copy_(x)", per_example=2),
    Kind("expand-as-repeat", True, lambda n: isinstance(n, ast.Call) and _name(n) == "expand" and
         isinstance(n.func, ast.Attribute), lambda n: _call("_gg_repeat", n.func.value, *n.args),
         "x.expand(sizes) as x.repeat(sizes / x.shape)"),
    Kind("stack-sum", True, lambda n: isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == "sum"
         and len(n.args) == 1 and isinstance(n.args[0], ast.GeneratorExp),
         lambda n: _call("_gg_stack_sum", ast.ListComp(n.args[0].elt, n.args[0].generators)),
         "sum(a_i for ...) as torch.stack([a_i ...]).sum(0) (per-micro-batch means)"),
    Kind("ar-as-ag-sum", True, lambda n: _is_coll(n, {"all_reduce"}), _coll_helper("_gg_ar_ag"),
         "all-reduce as all-gather + sum over the gathered dim"),
    Kind("ar-as-rs-ag", True, lambda n: _is_coll(n, {"all_reduce"}), _coll_helper("_gg_ar_rs_ag"),
         "all-reduce as reduce-scatter + all-gather"),
    Kind("ar-factor", True, lambda n: _is_coll(n, {"all_reduce"}), _coll_helper("_gg_ar_factor"),
         "all_reduce(2 x) / 2"),
    Kind("avg-as-sum", True, lambda n: _is_coll(n, {"all_reduce"}), _coll_helper("_gg_avg_as_sum"),
         "avg all-reduce as sum all-reduce / world"),
    Kind("ag-as-ar-pad", True, lambda n: _is_coll(n, {"all_gather_tensor", "all_gather_tensor_autograd"}),
         _coll_helper("_gg_ag_pad", "_gg_ag_pad_autograd"), "all-gather as all-reduce of zero-padded shards"),
    Kind("rs-as-ar-slice", True, lambda n: _is_coll(n, {"reduce_scatter_tensor", "reduce_scatter_tensor_autograd"}),
         _coll_helper("_gg_rs_ar", "_gg_rs_ar_autograd"), "reduce-scatter as all-reduce + own chunk"),
    # bugs
    Kind("drop-collective", False, _is_coll, _drop_coll_rw, "a collective left out", per_example=4),
    Kind("dup-collective", False, _is_coll, _dup_coll_rw, "a collective applied twice", per_example=4),
    Kind("wrong-reduce-op", False, lambda n: _is_coll(n) and _op_pos(n) is not None, _other_op_rw,
         "sum <-> avg, max -> sum", per_example=4),
    Kind("wrong-group", False, _is_group, _group_rw, "the TP group instead of the DP group or back", per_example=4),
    Kind("wrong-scale", False, lambda n: _is_coll(n) or _scalar_operand(n), _helper("_gg_scale2"),
         "a collective's result or a scaled term doubled", per_example=4),
    Kind("wrong-const", False, _num, _const_rw, "a numeric constant changed", per_example=4),
    Kind("wrong-slice", False, _slice_ok, _slice_rw, "a slice shifted by one", per_example=4),
    Kind("wrong-dim", False, _has_dim, _dim_rw, "another dim for cat/softmax/sum/chunk/gather...", per_example=4),
    Kind("wrong-rank", False, _is_rank, _rank_rw, "the next rank's offset", per_example=4),
    Kind("arith", False, _B(ast.Add, ast.Sub, ast.Mult, ast.Div),
         lambda n: _with_op({ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div,
                             ast.Div: ast.Mult}[type(n.op)]())(n), "+ <-> -, * <-> /", per_example=4),
    Kind("drop-term", False, _B(ast.Add, ast.Sub), lambda n: n.left, "a + b -> a", per_example=4),
    Kind("activation", False, _is_act, _act_rw, "gelu <-> silu, relu -> gelu, softmax -> log_softmax, ...", per_example=4),
    Kind("negate", False, _tensor_call, _helper("_gg_neg"), "a computed tensor's sign flipped", per_example=4),
    Kind("detach", False, _tensor_call, _helper("_gg_detach"), "a computed tensor detached (its gradient lost)",
         per_example=4),
    Kind("swap-operands", False, _B(ast.Sub, ast.Div), _swap_binop, "a - b -> b - a, a / b -> b / a", per_example=4),
    Kind("drop-scale", False, _scalar_operand, lambda n: n.left, "a scaled term without its factor (x * c -> x)",
         per_example=4),
    Kind("shard-swap", False, None, None, "an input's shards concatenated in the wrong order (relation)", per_example=4),
]}
EQUIVALENT = [k for k, v in KINDS.items() if v.equivalent]
BUGS = [k for k, v in KINDS.items() if not v.equivalent]
PER_KIND = 8  # at most this many sites per (example, kind), spread over the sites


def _mutable_functions(tree: ast.Module) -> set[int]:
    """ids of the FunctionDefs a mutation may touch: methods of classes but ``__init__``, and the module-level
    functions they call (transitively); never the model file's API (spec, impl, inputs, relation...)."""
    top = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    funcs = [f for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
             if isinstance(f, ast.FunctionDef) and f.name != "__init__"]
    todo, seen = list(funcs), {id(f) for f in funcs}
    while todo:
        f = todo.pop()
        for n in ast.walk(f):
            if isinstance(n, ast.Name) and n.id in top and n.id not in API and id(top[n.id]) not in seen:
                seen.add(id(top[n.id]))
                todo.append(top[n.id])
    return seen


class _Apply(ast.NodeTransformer):
    """Counts the sites of ``kind`` in mutable functions (pre-order) and rewrites site ``target``."""

    def __init__(self, kind: Kind, target: int, mutable: set[int]):
        self.kind, self.target, self.mutable = kind, target, mutable
        self.n, self.inside, self.what = 0, 0, None

    def visit_FunctionDef(self, node):
        inside = id(node) in self.mutable
        self.inside += inside
        node.body = [self.visit(s) for s in node.body]  # not the decorators or defaults
        self.inside -= inside
        return node

    def visit(self, node):
        if self.inside and isinstance(node, ast.expr) and self.kind.match(node):
            i, self.n = self.n, self.n + 1
            if i == self.target:
                new = self.kind.rewrite(copy.deepcopy(node))
                self.what = f"line {getattr(node, 'lineno', '?')}: {ast.unparse(node)} -> {ast.unparse(new)}"
                if isinstance(node, ast.Slice):
                    return ast.Slice(ast.IfExp(_call("_gg_impl"), new.lower, node.lower or ast.Constant(None)),
                                     ast.IfExp(_call("_gg_impl"), new.upper, node.upper or ast.Constant(None))
                                     if new.upper is not None or node.upper is not None else None, None)
                return ast.IfExp(_call("_gg_impl"), new, node)
        return super().visit(node)


def _sites(tree: ast.Module, kind: Kind) -> int:
    tree = copy.deepcopy(tree)
    a = _Apply(kind, -1, _mutable_functions(tree))
    a.visit(tree)
    return a.n


def _spread(n: int, k: int) -> list[int]:
    """k of range(n), evenly spread (all when n <= k)."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)}) if k > 1 else [0]


@dataclass(frozen=True)
class Mutant:
    id: str  # example/kind/site
    example: str
    kind: str
    site: int
    what: str = ""

    @property
    def equivalent(self) -> bool:
        return KINDS[self.kind].equivalent


def _source(ex: Example) -> str:
    return (ROOT / ex.path).read_text()


def mutants(examples=None, kinds=None, per_kind: int = PER_KIND) -> list[Mutant]:
    """Every mutant of the corpus, in a fixed order: per example, per kind, up to ``per_kind`` sites."""
    out = []
    for ex in (EXAMPLES[e] for e in (examples or EXAMPLES)):
        tree = ast.parse(_source(ex))
        for k in (kinds or KINDS):
            kind = KINDS[k]
            n = len(_relation_sites(ex)) if k == "shard-swap" else _sites(tree, kind)
            out += [Mutant(f"{ex.name}/{k}/{i}", ex.name, k, i) for i in _spread(n, min(per_kind, kind.per_example))]
    return out


def mutant_source(m: Mutant) -> tuple[str, str]:
    """The mutated model file (helpers appended) and a one-line description of the rewrite."""
    ex = EXAMPLES[m.example]
    tree = ast.parse(_source(ex))
    what = ""
    if m.kind != "shard-swap":
        a = _Apply(KINDS[m.kind], m.site, _mutable_functions(tree))
        tree = ast.fix_missing_locations(a.visit(tree))
        if a.what is None:
            raise ValueError(f"{m.id}: no such site")
        what = a.what
    return ast.unparse(tree) + "\n" + PRELUDE, what


def _relation_sites(ex: Example) -> list[str]:
    """Inputs of the example's relation given as a concatenation (shard-swap sites), from its baseline."""
    rel = _baseline_relation_inputs(ex)
    return sorted(k for k, v in rel.items() if isinstance(v, str) and v.startswith("concat("))


_REL_CACHE: dict[str, dict] = {}


def _baseline_relation_inputs(ex: Example) -> dict:
    """The input relation the model file states (``relation(world, backward)['inputs']``), without capture."""
    if ex.name not in _REL_CACHE:
        with _env(ex):
            mod = _load(ex.name, ast.unparse(ast.parse(_source(ex))) + "\n" + PRELUDE, Path(os.environ.get(
                "TMPDIR", "/tmp")) / f"gg-mutants-rel-{os.getpid()}")
            _REL_CACHE[ex.name] = mod.relation(ex.world, ex.backward).get("inputs", {}) \
                if hasattr(mod, "relation") else {}
    return _REL_CACHE[ex.name]


def _swap_shards(expr: str) -> str:
    """concat(a@0, a@1, ..., dim=d) -> the same shards in reverse order."""
    head, rest = expr[len("concat("):].rsplit(", dim=", 1)
    parts = [p.strip() for p in head.split(",")]
    return f"concat({', '.join(reversed(parts))}, dim={rest}"


class _env:
    def __init__(self, ex: Example):
        self.ex = ex

    def __enter__(self):
        self.old = {k: os.environ.get(k) for k, _ in self.ex.env}
        os.environ.update(dict(self.ex.env))

    def __exit__(self, *a):
        for k, v in self.old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _load(name: str, source: str, workdir: Path):
    """Write ``source`` as ``workdir/<name>.m/model.py`` and run it; the shipped examples are its siblings
    (``workdir/<example>`` links to ``examples/<example>``: gpt-tp-vocab reads ../gpt-tp/model.py)."""
    from graphguard.frontends.fx.model_file import load_model_file
    workdir.mkdir(parents=True, exist_ok=True)
    for ex in (ROOT / "examples").iterdir():
        link = workdir / ex.name
        if ex.is_dir() and not link.exists():
            try:
                link.symlink_to(ex, target_is_directory=True)
            except FileExistsError:  # another worker made it
                pass
    d = workdir / f"{name}.m"
    d.mkdir(parents=True, exist_ok=True)
    (d / "model.py").write_text(source)
    return load_model_file(d / "model.py")


# ---------------------------------------------------------------------------------------------------------
# ground truth: eager float64 runs


def _graph_hash(doc: dict) -> str:
    strip = {"nodes": [{k: v for k, v in n.items() if k != "loc"} for n in doc["nodes"]],
             "inputs": doc["inputs"], "outputs": doc["outputs"]}
    return hashlib.sha256(json.dumps(strip, sort_keys=True).encode()).hexdigest()[:16]


def _assign(module, args, values: dict, suffix: str):
    """Parameters and buffers of ``module`` and the arguments ``args`` set from ``values`` (float64) by the
    names capture gives them (``fc1.weight``, ``x``, ``xy.0``; ``@r`` on a rank); returns the arguments."""
    import numpy as np
    import torch

    from graphguard.frontends.fx.capture import _named_args

    def t(v, like):
        x = torch.from_numpy(np.ascontiguousarray(v))
        if x.is_floating_point():
            x = x.to(torch.float64)
        return x.to(like.dtype) if not like.is_floating_point() else x

    module.double()
    with torch.no_grad():
        for name, p in list(module.named_parameters()) + list(module.named_buffers()):
            if name + suffix in values:
                p.data = t(values[name + suffix], p)
    flat = list(_named_args(module, args).items())
    new = []
    for name, v in flat:
        if isinstance(v, torch.Tensor) and name + suffix in values:
            x = t(values[name + suffix], v)
            new.append(x.requires_grad_(v.requires_grad and x.is_floating_point()))
        elif isinstance(v, torch.Tensor) and v.is_floating_point():
            new.append(v.double())
        else:
            new.append(v)
    # rebuild the positional arguments (varargs were flattened as name.i)
    return tuple(new)


def _run(module, args, values: dict, suffix: str, backward: bool) -> dict:
    """Outputs ``out{i}`` and gradients ``grad.{name}`` of one program, as NumPy arrays."""
    import torch
    from graphguard.frontends.fx.capture import _named_args
    names = list(_named_args(module, args))
    args = _assign(module, args, values, suffix)
    out = module(*args)
    outs = out if isinstance(out, (list, tuple)) else (out,)
    res = {f"out{i}": o.detach().numpy() for i, o in enumerate(outs) if isinstance(o, torch.Tensor)}
    if backward:
        idx = [i for i, o in enumerate(outs) if isinstance(o, torch.Tensor) and o.requires_grad]
        wrt = [(n, p) for n, p in module.named_parameters()] + \
              [(n, a) for n, a in zip(names, args) if isinstance(a, torch.Tensor) and a.requires_grad]
        tangents = [torch.from_numpy(values[f"tangent.out{i}{suffix}"]).to(outs[i].dtype)
                    if f"tangent.out{i}{suffix}" in values else torch.ones_like(outs[i]) for i in idx]
        grads = torch.autograd.grad([outs[i] for i in idx], [p for _, p in wrt], tangents, allow_unused=True)
        res.update({f"grad.{n}": g.detach().numpy() for (n, _), g in zip(wrt, grads) if g is not None})
    return res


def _eager_ranks(build, inputs, values: dict, world: int, backward: bool) -> dict:
    """Every rank as a thread of torch's threaded process group; their outputs named ``name@r``."""
    import torch
    import torch.distributed as dist
    from torch.testing._internal.distributed import multi_threaded_pg as mt
    results, errors = {}, []
    store = dist.HashStore()
    mt._install_threaded_pg()
    torch._C._distributed_c10d._set_thread_isolation_mode(True)

    def rank(r):
        try:
            dist.init_process_group("threaded", rank=r, world_size=world, store=store)
            try:
                res = _run(build(r), inputs(r), values, f"@{r}", backward)
                results.update({f"{k}@{r}": v for k, v in res.items()})
            finally:
                dist.destroy_process_group()
        except BaseException as e:  # noqa: BLE001 -- reported as the mutant's failure; release the others
            errors.append(f"rank {r}: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0]}")
            mt.ProcessLocalGroup.exception_handle(e)

    try:
        ts = [threading.Thread(target=rank, args=(r,), daemon=True) for r in range(world)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(120)
        if any(t.is_alive() for t in ts):
            errors.append("eager ranks hung")
            mt.ProcessLocalGroup.exception_handle(TimeoutError())
    finally:
        torch._C._distributed_c10d._set_thread_isolation_mode(False)
        mt._uninstall_threaded_pg()
        mt.ProcessLocalGroup.reset()
    if errors:
        raise RuntimeError(errors[0])
    return results


def eager(mod, ex: Example, g_s, g_d, rel, reg, seed: int = 0) -> tuple[dict, dict]:
    """(specification outputs, implementation outputs by ``name@rank``) of eager float64 runs on inputs drawn
    through the input relation."""
    import torch

    from graphguard.engine.replay import _inputs
    from graphguard.ir.semantics import term_eval
    torch.manual_seed(seed)
    d_env, first = _inputs(g_s, g_d, rel, reg, {}, seed, "float64")
    s_env = {n: term_eval(e, d_env.__getitem__, reg) for n, e in first.items()}
    spec = _run(mod.spec(), mod.inputs(None, ex.world), s_env, "", ex.backward)
    impl = _eager_ranks(lambda r: mod.impl(r, ex.world), lambda r: mod.inputs(r, ex.world), d_env, ex.world,
                        ex.backward)
    return spec, impl


def changed_relations(spec: dict, impl: dict, r_o: dict, reg) -> list[str]:
    """The relations of ``r_o`` (G_s output -> expressions over G_d outputs) the eager values break."""
    import numpy as np

    from graphguard.ir.relation import parse_term
    from graphguard.ir.semantics import term_eval
    bad = []
    for t, exprs in r_o.items():
        for text in exprs:
            e = parse_term(text, reg)
            try:
                got = term_eval(e, impl.__getitem__, reg)
            except KeyError as k:
                bad.append(f"{t} = {text}: {k} was not computed")
                continue
            want = spec.get(t)
            if want is None:
                bad.append(f"{t}: not computed by the specification")
                continue
            got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
            if got.shape != want.shape:
                bad.append(f"{t} = {text}: shape {got.shape} vs {want.shape}")
            elif not np.all(np.abs(got - want) <= TOL * (np.max(np.abs(want), initial=0.0) + 1.0)):
                bad.append(f"{t} = {text}: differs by {float(np.max(np.abs(got - want))):.3g}")
    return bad


# ---------------------------------------------------------------------------------------------------------
# one mutant, in a worker


@dataclass
class Baseline:
    spec_doc: dict
    impl_hash: str
    relation: dict  # the relation file as a dict (inputs, symbols, expect, allow_partial)
    r_o: dict  # G_s output -> [expr text]
    impl_inputs: list = field(default_factory=list)


_BASE: dict[str, Baseline] = {}


def _capture(mod, ex: Example, role: str, plugins):
    from graphguard.frontends.fx.capture import capture
    w = ex.world
    if role == "spec":
        return capture(lambda r: mod.spec(), lambda r: mod.inputs(None, w), world_size=1, backward=ex.backward,
                       name=f"{ex.name}-spec", plugins=plugins)
    return capture(lambda r: mod.impl(r, w), lambda r: mod.inputs(r, w), world_size=w, backward=ex.backward,
                   name=f"{ex.name}-impl", plugins=plugins, distributed=True)


def baseline(ex: Example, workdir: Path, plugins) -> Baseline:
    """The unmutated example (its source as the mutants print it): captured, verified (its R_o), and
    checked eagerly (R_o must hold on the eager values)."""
    if ex.name in _BASE:
        return _BASE[ex.name]
    cached = workdir / "baselines" / f"{ex.name}.json"
    if cached.exists():
        _BASE[ex.name] = Baseline(**json.loads(cached.read_text()))
        return _BASE[ex.name]
    import graphguard
    from graphguard.frontends.fx.model_file import _user_relation
    from graphguard.frontends.fx.relations import input_relation
    with _env(ex):
        src = ast.unparse(ast.parse(_source(ex))) + "\n" + PRELUDE
        mod = _load(f"{ex.name}-b{os.getpid()}", src, workdir)  # (one file per worker: they share workdir)
        s, d = _capture(mod, ex, "spec", plugins), _capture(mod, ex, "impl", plugins)
        rel = input_relation(s, d, _user_relation(mod, workdir / f"{ex.name}-b{os.getpid()}.m" / "model.py", ex.world,
                                                  ex.backward),
                             plugins, ex.path)
        res = graphguard.verify(s.graph(plugins), d.graph(plugins), rel, plugins=plugins)
        if res.verdict != "refines":
            raise RuntimeError(f"{ex.name}: the unmutated example does not verify ({res.verdict})")
        r_o = {t: [_text(e) for e in es] for t, es in res.r_o.items()}
        base = Baseline(s.doc, _graph_hash(d.doc), rel, r_o, d.doc["inputs"])
        g_s, g_d, relf, _ = graphguard.api.load_inputs(s.graph(plugins), d.graph(plugins), rel, plugins=plugins)
        sv, iv = eager(mod, ex, g_s, g_d, relf, plugins.registry)
        bad = changed_relations(sv, iv, r_o, plugins.registry)
        if bad:
            raise RuntimeError(f"{ex.name}: eager run of the unmutated example breaks its R_o: {bad[0]}")
    _BASE[ex.name] = base
    cached.parent.mkdir(parents=True, exist_ok=True)
    tmp = cached.with_suffix(f".{os.getpid()}")
    tmp.write_text(json.dumps(base.__dict__))
    tmp.replace(cached)
    return base


def _text(e) -> str:
    from graphguard.ir.expr import to_text
    return to_text(e)


def run_one(mid: str, workdir: Path, plugins, timeout: float = 300.0) -> dict:
    """Generate, capture, check eagerly and verify one mutant. The result's ``status``: ``unchanged``,
    ``invalid`` (the program fails to capture or run) or ``ok``; with ``ok``: ``changed`` (ground truth),
    ``verdict`` (graphguard's: refines / does-not-refine / inconclusive / missing-output / error)."""
    import resource

    import graphguard
    from graphguard.engine.egraph import Budget
    from graphguard.errors import GraphGuardError
    ex_name, kind, site = mid.split("/")
    m = Mutant(mid, ex_name, kind, int(site))
    ex = EXAMPLES[ex_name]
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    out = {"id": mid, "example": ex_name, "kind": kind, "equivalent": m.equivalent}

    def done(**kw):
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        out.update(kw, seconds=round(time.monotonic() - t0, 2),
                   cpu=round(r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime, 2))
        return out

    base = baseline(ex, workdir, plugins)
    src, what = mutant_source(m)
    out["what"] = what
    rel = copy.deepcopy(base.relation)
    rel.pop("expect", None)  # the unmutated R_o is expected instead (below)
    if kind == "shard-swap":
        name = _relation_sites(ex)[m.site]
        rel["inputs"][name] = _swap_shards(rel["inputs"][name])
        out["what"] = f"relation: {name}: {rel['inputs'][name]}"
    with _env(ex):
        try:
            mod = _load(f"{ex_name}-m{os.getpid()}", src, workdir)  # (one file per worker: they share workdir)
            d = _capture(mod, ex, "impl", plugins)
        except Exception as e:  # noqa: BLE001 -- the mutant's program fails: not counted
            return done(status="invalid", why=f"capture: {(str(e).strip().splitlines() or [''])[0][:300]}")
        h = _graph_hash(d.doc)
        out["hash"] = h
        if h == base.impl_hash and kind != "shard-swap":
            return done(status="unchanged")
        have = {i["name"] for i in d.doc["inputs"]}
        d.doc["inputs"] += [i for i in base.impl_inputs if i["name"] not in have]  # parameters no longer read
        s_graph = _graph_from_doc(base.spec_doc, plugins)
        try:
            d_graph = d.graph(plugins)
            g_s, g_d, relf, _ = graphguard.api.load_inputs(s_graph, d_graph, rel, plugins=plugins)
            sv, iv = eager(mod, ex, g_s, g_d, relf, plugins.registry)
        except Exception as e:  # noqa: BLE001
            return done(status="invalid", why=f"eager: {type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:300]}")
    bad = changed_relations(sv, iv, base.r_o, plugins.registry)
    out.update(status="ok", changed=bool(bad), why=bad[:3])
    outputs = set(g_d.outputs)
    missing = [t for t, es in base.r_o.items() for e in es
               if any(leaf not in outputs for leaf in _leaves(e, plugins))]
    if missing:
        return done(verdict="missing-output", detail=f"{missing[0]} has no G_d output to hold it")
    rel["expect"] = {t: list(es) for t, es in base.r_o.items()}
    try:
        res = graphguard.verify(s_graph, g_d, rel, plugins=plugins, budget=Budget(seconds=min(60.0, timeout)))
    except GraphGuardError as e:
        return done(verdict="error", detail=str(e).splitlines()[0][:300])
    f = res.failure
    return done(verdict=res.verdict, detail=f"{f.op} {f.node}: {f.reason}"[:300] if f else "",
                infer=round(res.timings.get("infer", 0.0), 2))


def _leaves(text: str, plugins) -> set[str]:
    from graphguard.ir.expr import leaves
    from graphguard.ir.relation import parse_term
    return set(leaves(parse_term(text, plugins.registry)))


def _graph_from_doc(doc: dict, plugins):
    from graphguard.ir.scalar import Constraints
    from graphguard.ir.serde import graph_from_dict
    return graph_from_dict(doc, f"<capture {doc['name']}>", plugins.registry, Constraints())


# ---------------------------------------------------------------------------------------------------------
# worker: ids on stdin, one JSON line per id on stdout


MEMORY_LIMIT = 5 << 30  # RLIMIT_AS of a worker, bytes


def worker(workdir: Path) -> None:
    import resource
    import warnings
    warnings.filterwarnings("ignore")
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    from graphguard.plugins import load_plugins
    plugins = load_plugins()
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # model code and capture print nothing into the result stream
    for line in sys.stdin:
        mid = line.strip()
        if not mid:
            continue
        try:
            res = run_one(mid, workdir, plugins)
        except MemoryError:
            res = {"id": mid, "status": "error", "why": "MemoryError"}
        except Exception as e:  # noqa: BLE001 -- a harness failure, reported per mutant
            res = {"id": mid, "status": "error", "why": f"{type(e).__name__}: {str(e)[:400]}"}
        real_stdout.write(json.dumps(res) + "\n")
        real_stdout.flush()


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "worker":
        sys.path.insert(0, str(ROOT))
        worker(Path(sys.argv[2]))
    elif len(sys.argv) >= 2 and sys.argv[1] == "list":
        for m in mutants():
            print(m.id)
