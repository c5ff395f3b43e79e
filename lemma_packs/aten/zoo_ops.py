"""ATen operators of HF transformers' TP-plan zoo beyond the examples' (bench/hf_zoo.py).

``floor`` and ``div.Tensor_mode`` (division rounded toward zero or down: Llama-4's and Ministral-3's
attention temperature, ``floor((pos + 1) / scale)``) are elementwise; the engine's families carry them through
concatenations. ``convolution`` and its backward: the short causal convolutions of linear-attention and
state-space layers (Qwen3-Next's gated delta net, OLMo-hybrid, Kimi-linear, LFM2...), ``nn.Conv1d`` over the
sequence with one filter per channel (``groups`` = channels). Depthwise convolutions of channel-sharded
activations are split by a lemma (``zoo.py``); otherwise the convolution reads tensors every rank holds whole.
"""
from __future__ import annotations

import numpy as np

from graphguard.ir import scalar as S
from graphguard.ir.ops import AttrSpec, OpDef, fail, fmt_shape, multi_output, promote
from graphguard.ir.ops import dtype_category as _cat

from .ops import ABSENT, _bin, _float_ref, _optional, _un, broadcast


def _div_mode(x, y, a):
    m = a["rounding_mode"]
    if m is None:
        return np.true_divide(x, y)
    if x.dtype.kind in "biu" and y.dtype.kind in "biu":
        if np.any(y == 0):
            fail("aten.div.Tensor_mode: integer division by zero")
        q = np.floor_divide(x, y)
        if m == "trunc":  # toward zero: floor, plus one where the exact quotient is negative and inexact
            q = q + ((q < 0) & (q * y != x))
        return q.astype(np.result_type(x, y))
    q = np.true_divide(x, y)
    return np.trunc(q) if m == "trunc" else np.floor(q)


def _div_mode_dtype(ds, a):
    d = promote(*ds)
    return d if a.get("rounding_mode") is not None or _cat(d) == 2 else "float32"


def _floor(x, a):
    return x.copy() if x.dtype.kind in "biu" else np.floor(x)


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


# -- complex numbers (RoPE as a complex rotation: DeepSeek-V2, Llama-4) ------------------------------

_COMPLEX_OF = {"float16": "complex32", "float32": "complex64", "float64": "complex128"}
_REAL_OF = {v: k for k, v in _COMPLEX_OF.items()}


def _to_complex_dtype(name):
    def f(ds, a):
        if ds[0] not in _COMPLEX_OF:
            fail(f"{name}: needs a float16, float32 or float64 input, got {ds[0]}")
        return _COMPLEX_OF[ds[0]]
    return f


def _polar_dtype(ds, a):
    if len(set(ds)) != 1:
        fail(f"aten.polar: abs and angle must have one dtype, got {ds[0]} and {ds[1]}")
    return _to_complex_dtype("aten.polar")(ds, a)


def _view_as_complex_shape(shapes, a, cx):
    x = shapes[0]
    if not x or not cx.prove("==", x[-1], 2):
        fail(f"aten.view_as_complex: the last dim of {fmt_shape(x)} must be 2 (real and imaginary parts)")
    return tuple(x[:-1])


def _view_as_real_dtype(ds, a):
    if ds[0] not in _REAL_OF:
        fail(f"aten.view_as_real: needs a complex input, got {ds[0]}")
    return _REAL_OF[ds[0]]


ZOO_OPS = [
    _un("floor", _floor, "Round down (integers unchanged).", lambda ds, a: ds[0]),
    _bin("div.Tensor_mode", _div_mode,
         "self / other (broadcasting), rounded toward zero (rounding_mode 'trunc') or down ('floor'); None: true "
         "division.", dtype=_div_mode_dtype,
         attrs=(AttrSpec("rounding_mode", "str", optional=True, choices=("trunc", "floor")),)),
    OpDef("aten.convolution", None, _conv_shape, _conv_ref, _CONV_ATTRS + (ABSENT,),
          doc="N-d convolution (cross-correlation) of input [N, C, *L] with weight [O, C/groups, *K]: stride, "
              "zero padding, dilation, groups; bias [O] optional via absent. Transposed: not supported.",
          dtype=lambda ds, a: promote(*ds)),
    _bin("polar", lambda r, t, a: r * np.cos(t) + 1j * (r * np.sin(t)),
         "The complex number abs * (cos(angle) + i sin(angle)) (broadcasting).", dtype=_polar_dtype),
    _un("_conj", lambda x, a: np.conj(x), "Complex conjugate (real tensors unchanged).", linear=(0,)),
    OpDef("aten.view_as_complex", 1, _view_as_complex_shape,
          lambda xs, a: xs[0][..., 0] + 1j * xs[0][..., 1],
          doc="Pairs along the last dim (of size 2) read as complex numbers (real, imaginary).",
          dtype=_to_complex_dtype("aten.view_as_complex")),
    OpDef("aten.view_as_real", 1, lambda shapes, a, cx: tuple(shapes[0]) + (2,),
          lambda xs, a: np.stack([np.real(xs[0]), np.imag(xs[0])], -1),
          doc="Complex entries as (real, imaginary) pairs along a new last dim of size 2.",
          dtype=_view_as_real_dtype),
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
