"""Products: matrix products (``mm``, ``bmm``, ``addmm``, ``baddbmm``), N-d convolutions and their backward
(the short causal convolutions of linear-attention and state-space layers: Qwen3-Next's gated delta net,
OLMo-hybrid, Kimi-linear, LFM2..., ``nn.Conv1d`` over the sequence with one filter per channel, ``groups`` =
channels), and triangular solves (the chunked gated delta rule's UT transform). Grouped matrix products, the
experts' kernel, are with the routing (``mixture_of_experts.py``)."""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, Bilinear, OpDef, fail, fmt_shape, multi_output, promote

from .helpers import ABSENT, _n, _optional, _same, broadcast, broadcasts_to


def _mm_shape(shapes, attrs, cx):
    a, b = shapes[-2:]
    if len(a) != 2 or len(b) != 2:
        fail(f"aten.mm: expects rank-2 tensors, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not _same(cx, a[1], b[0]):
        fail(f"aten.mm: inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    return (a[0], b[1])


def _bmm_shape(shapes, attrs, cx):
    a, b = shapes[-2:]
    if len(a) != 3 or len(b) != 3:
        fail(f"aten.bmm: expects rank-3 tensors, got {fmt_shape(a)} and {fmt_shape(b)}")
    if not _same(cx, a[0], b[0]):
        fail(f"aten.bmm: batch dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    if not _same(cx, a[2], b[1]):
        fail(f"aten.bmm: inner dimensions differ: {fmt_shape(a)} @ {fmt_shape(b)}")
    return (a[0], a[1], b[2])


def _addmm_shape(name, inner):
    def f(shapes, attrs, cx):
        out = inner(shapes, attrs, cx)
        broadcasts_to(name, shapes[0], out, cx, "self")
        return out
    return f


def _addmm_ref(xs, a):
    s, m1, m2 = xs
    beta, alpha = _n(a["beta"]), _n(a["alpha"])
    prod = np.matmul(m1, m2)
    prod = prod if alpha == 1 else alpha * prod
    if beta == 0:
        return prod + np.zeros_like(s)  # torch ignores self (even nan/inf) when beta == 0
    return (s if beta == 1 else beta * s) + prod


BETA_ALPHA = (AttrSpec("beta", "number", 1), AttrSpec("alpha", "number", 1))

MATMUL_OPS = [
    OpDef("aten.mm", 2, _mm_shape, lambda xs, a: xs[0] @ xs[1], doc="Matrix product of rank-2 tensors.",
          linear=(0, 1), rows=(0, 1), bilinear=Bilinear((), (1,), (), (0,), ranks=(2, 2))),
    OpDef("aten.bmm", 2, _bmm_shape, lambda xs, a: np.matmul(xs[0], xs[1]),
          doc="Batched matrix product of rank-3 tensors (same batch size).", linear=(0, 1),
          bilinear=Bilinear((0,), (2,), (0,), (1,), ranks=(3, 3))),
    OpDef("aten.addmm", 3, _addmm_shape("aten.addmm", _mm_shape), _addmm_ref, BETA_ALPHA,
          doc="beta * self + alpha * (mat1 @ mat2); self broadcasts to the product.",
          biased=("aten.mm", "aten.add.Tensor", {"beta": 1, "alpha": 1})),
    OpDef("aten.baddbmm", 3, _addmm_shape("aten.baddbmm", _bmm_shape), _addmm_ref, BETA_ALPHA,
          doc="beta * self + alpha * bmm(batch1, batch2); self broadcasts to the product."),
]


# -- convolution -------------------------------------------------------------------------------------

_CONV_ATTRS = (AttrSpec("stride", "scalars"), AttrSpec("padding", "scalars"), AttrSpec("dilation", "scalars"),
               AttrSpec("transposed", "bool"), AttrSpec("output_padding", "scalars"), AttrSpec("groups", "scalar"))


def _ints(name, a, key, k):
    v = [int(x) if S.is_concrete(S.norm(x)) else None for x in a[key]]
    if None in v:
        fail(f"{name}: symbolic {key} {list(a[key])} is not supported")
    if len(v) == 1 and k > 1:
        v = v * k
    if len(v) != k:
        fail(f"{name}: {key} {v} for {k} spatial dim(s)")
    return v


def _conv_geometry(name, x, w, a, cx):
    """(spatial dims k, stride, padding, dilation, groups) after checking input [N, C, *L] against weight
    [O, C / groups, *K]; transposed convolutions are refused."""
    if a["transposed"]:
        fail(f"{name}: transposed convolutions are not supported")
    k = len(w) - 2
    if k < 1 or len(x) != k + 2:
        fail(f"{name}: input {fmt_shape(x)} and weight {fmt_shape(w)} are not an N-d convolution's "
             f"(input [N, C, *L], weight [O, C/groups, *K])")
    if not S.is_concrete(S.norm(a["groups"])) or int(a["groups"]) < 1:
        fail(f"{name}: groups {a['groups']} must be a positive integer")
    g = int(a["groups"])
    st, pad, dil = (_ints(name, a, key, k) for key in ("stride", "padding", "dilation"))
    if min(st) < 1 or min(dil) < 1 or min(pad) < 0:
        fail(f"{name}: stride {st}, padding {pad}, dilation {dil} out of range")
    if not cx.prove("==", S.norm(S.sym(w[1]) * g), x[1]):
        fail(f"{name}: input {fmt_shape(x)} has not weight {fmt_shape(w)}'s {S.text(w[1])} channels per group "
             f"times groups={g}")
    if not cx.integral(S.norm(S.sym(w[0]) / g)):
        fail(f"{name}: {S.text(w[0])} output channels do not divide into groups={g}")
    return k, st, pad, dil, g


def _conv_out(name, x, w, a, cx):
    k, st, pad, dil, g = _conv_geometry(name, x, w, a, cx)
    out = [x[0], w[0]]
    for i in range(k):
        span = S.norm(S.sym(x[2 + i]) + 2 * pad[i] - dil[i] * (S.sym(w[2 + i]) - 1) - 1)
        if not cx.prove(">=", span, 0):
            fail(f"{name}: kernel {fmt_shape(w[2:])} (dilation {dil}) wider than the padded input {fmt_shape(x)}")
        out.append(S.norm(S.sym(S.floordiv(span, st[i])) + 1))
    return tuple(out)


def _conv_shape(shapes, a, cx):
    name = "aten.convolution"
    x, w, b = _optional(name, shapes, a["absent"], 3)
    if x is None or w is None:
        fail(f"{name}: only bias may be absent")
    out = _conv_out(name, x, w, a, cx)
    if b is not None and (len(b) != 1 or not cx.prove("==", b[0], w[0])):
        fail(f"{name}: bias {fmt_shape(b)} is not one value per output channel ({S.text(w[0])})")
    return out


def _windows(xp, kk, st, dil, out_sp):
    """The entries of the padded input each output position reads at kernel offset kk: [N, C, *out]."""
    return xp[(slice(None), slice(None)) + tuple(
        slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(kk, dil, st, out_sp))]


def _conv_parts(x, w, a):
    k = w.ndim - 2
    g = int(a["groups"])
    st, pad, dil = (_ints("aten.convolution", a, key, k) for key in ("stride", "padding", "dilation"))
    xp = np.pad(x, [(0, 0), (0, 0)] + [(p, p) for p in pad])
    out_sp = [(xp.shape[2 + i] - dil[i] * (w.shape[2 + i] - 1) - 1) // st[i] + 1 for i in range(k)]
    wg = w.reshape((g, w.shape[0] // g) + w.shape[1:])  # [G, O/G, C/G, *K]
    return g, st, pad, dil, xp, out_sp, wg


def _conv_ref(xs, a):
    x, w, b = _optional("aten.convolution", xs, a["absent"], 3)
    g, st, pad, dil, xp, out_sp, wg = _conv_parts(x, w, a)
    n, c = x.shape[:2]
    out = np.zeros((n, g, wg.shape[1]) + tuple(out_sp), dtype=np.result_type(x, w))
    for kk in np.ndindex(*w.shape[2:]):
        win = _windows(xp, kk, st, dil, out_sp).reshape((n, g, c // g) + tuple(out_sp))
        out += np.einsum("ngc...,goc->ngo...", win, wg[(Ellipsis,) + kk])
    out = out.reshape((n, w.shape[0]) + tuple(out_sp))
    if b is not None:
        out = out + b.reshape((1, -1) + (1,) * len(out_sp))
    return out


def _conv_bw_shapes(shapes, a, cx):
    name = "aten.convolution_backward"
    gy, x, w = shapes
    out = _conv_out(name, x, w, a, cx)
    if len(gy) != len(out) or not all(cx.prove("==", p, q) for p, q in zip(gy, out)):
        fail(f"{name}: grad_output {fmt_shape(gy)} is not the convolution's output {fmt_shape(out)}")
    bias = tuple(a["bias_sizes"]) if a["bias_sizes"] is not None else (w[0],)
    return [tuple(x), tuple(w), bias]


def _conv_bw_ref(xs, a):
    gy, x, w = xs
    g, st, pad, dil, xp, out_sp, wg = _conv_parts(x, w, a)
    n, c = x.shape[:2]
    gyg = gy.reshape((n, g, wg.shape[1]) + tuple(out_sp))
    gxp = np.zeros(xp.shape, dtype=np.result_type(gy, w))
    gw = np.zeros(wg.shape, dtype=np.result_type(gy, x))
    for kk in np.ndindex(*w.shape[2:]):
        win = _windows(xp, kk, st, dil, out_sp).reshape((n, g, c // g) + tuple(out_sp))
        gw[(Ellipsis,) + kk] = np.einsum("ngos,ngcs->goc", gyg.reshape(gyg.shape[:3] + (-1,)),
                                          win.reshape(win.shape[:3] + (-1,)))
        view = _windows(gxp, kk, st, dil, out_sp)  # a strided view: each entry once per offset
        view += np.einsum("ngo...,goc->ngc...", gyg, wg[(Ellipsis,) + kk]).reshape(view.shape)
    gx = gxp[(slice(None), slice(None)) + tuple(slice(p, p + s) for p, s in zip(pad, x.shape[2:]))]
    gb = gy.sum(axis=(0,) + tuple(range(2, gy.ndim)))
    if a["bias_sizes"] is not None:
        gb = gb.reshape([int(v) for v in a["bias_sizes"]])
    return [gx.copy(), gw.reshape(w.shape), gb]


# -- triangular solves (the chunked gated delta rule's UT transform) -----------------------------------

def _solve_tri_shape(shapes, a, cx):
    name = "aten.linalg_solve_triangular"
    m, b = shapes
    if len(m) < 2 or len(b) < 2 or not cx.prove("==", m[-1], m[-2]):
        fail(f"{name}: self {fmt_shape(m)} is not a (batch of) square matrices or B {fmt_shape(b)} not matrices")
    n = b[-2] if a["left"] else b[-1]
    if not cx.prove("==", n, m[-1]):
        fail(f"{name}: B {fmt_shape(b)} does not fit the {S.text(m[-1])}x{S.text(m[-1])} system "
             f"(left={a['left']})")
    return broadcast(name, [tuple(m[:-2]), tuple(b[:-2])], cx) + tuple(b[-2:])


def _solve_tri_ref(xs, a):
    m, b = xs
    t = np.triu(m) if a["upper"] else np.tril(m)
    if a["unitriangular"]:
        t = t - t * np.eye(m.shape[-1]) + np.eye(m.shape[-1])
    if not a["left"]:  # X A = B  <=>  A^T X^T = B^T
        t, b = np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2)
    batch = np.broadcast_shapes(t.shape[:-2], b.shape[:-2])
    x = np.linalg.solve(np.broadcast_to(t, batch + t.shape[-2:]), np.broadcast_to(b, batch + b.shape[-2:]))
    return x if a["left"] else np.swapaxes(x, -1, -2)


OPS = MATMUL_OPS + [
    OpDef("aten.convolution", None, _conv_shape, _conv_ref, _CONV_ATTRS + (ABSENT,),
          doc="N-d convolution (cross-correlation) of input [N, C, *L] with weight [O, C/groups, *K]: stride, "
              "zero padding, dilation, groups; bias [O] optional via absent. Transposed: not supported.",
          dtype=lambda ds, a: promote(*ds)),
    OpDef("aten.linalg_solve_triangular", 2, _solve_tri_shape, _solve_tri_ref,
          (AttrSpec("upper", "bool"), AttrSpec("left", "bool", True), AttrSpec("unitriangular", "bool", False)),
          doc="X with A X = B (left) or X A = B, A the upper or lower triangle of self (its diagonal taken as "
              "ones where unitriangular); batch dims broadcast.", dtype=lambda ds, a: promote(*ds),
          linear=(1,)),
] + multi_output("aten.convolution_backward", 3, _conv_bw_shapes, _conv_bw_ref,
                 (AttrSpec("bias_sizes", "scalars", optional=True),) + _CONV_ATTRS
                 + (AttrSpec("output_mask", "ints"),),
                 names=("grad_input", "grad_weight", "grad_bias"),
                 dtypes=lambda ds, a: [promote(*ds)] * 3,
                 doc="Gradients of convolution with respect to input, weight and bias (all three computed; "
                     "output_mask, as 0/1 ints, only says which torch returns).")
