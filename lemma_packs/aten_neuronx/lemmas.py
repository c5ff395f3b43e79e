"""Lemmas of the aten-neuronx pack: HF transformers' ATen graphs against NeuronX HLO. References: 1150-1179.

Properties first, per-site lemmas never: a cast is one function whatever dialect writes it (1150: ATen's
``_to_copy`` to a float dtype is HLO's ``convert`` to it, from a float or int32 -- rounded to nearest both; both
are declared elementwise, so families 1201, 1211, 1213 and 1217 move either through concatenations, slices,
reshapes and permutations); a 0-dim constant is one constant (1151; the values were rounded to their dtype when
the graphs were loaded: the pass ``round_fills``, ``graphguard/passes/fills.py``, so PyTorch's float32(1e-5) and
HLO's decimal 1e-05 are one number).

HF's RMSNorm is collapsed into ``aten.hf_rms_norm`` before proving (``ops.py``); that op is NeuronX's
``AwsNeuronRmsNorm`` normalising the last dim (1152) where its result is stored in the weight's dtype (the kernel
returns the model dtype, HF casts back to the input dtype and multiplies by the weight); the custom call
normalises one dim of any layout, and a permutation moves that dim (1153: HF's [b, s, h] is NeuronX's
[h, s, b] permuted; the dim normalised follows the permutation). RoPE's tables: ``aten.cos`` / ``aten.sin`` are
HLO's ``cosine`` / ``sine`` (1154, 1155). NeuronX's projections contract the hidden-major activations' dim 0: that
dot is the matmul of the transposed lhs (1156). The attention mask: ATen's comparisons and logical and of
unit-dim views broadcast implicitly; HLO's broadcast explicitly -- 1157-1159 relate the two where the condition
``implicit_is_broadcast`` (a lemma function of this pack) finds, on labelled entries, that both move every entry
alike.
"""
import numpy as np

from graphguard.ir.lemma import KEPT_UNGUARDED, L
from lemma_packs.neuronx.ops import RMS

from .ops import HF_RMS

NUMBERS = range(1150, 1180)  # this file's lemma numbers (the plugin loader refuses others)

_RMS_SEEDS = tuple({"x": x, "w": [x[-1]], "c": [], "t": w, "x:dtype": "float32", "w:dtype": w, "c:dtype": "float32"}
                   for x, w in (([2, 3, 4], "float16"), ([3, 5], "float32"), ([1, 2, 2, 3], "float16"),
                                ([4, 1, 2], "float16"), ([6], "float32")))
_PERM_SEEDS = ({"x": [4, 3, 2], "q": [2, 1, 0], "k": 2, "w": [4], "c": []},
               {"x": [4, 3, 2], "q": [1, 0, 2], "k": 1, "w": [4], "c": []},
               {"x": [3, 5], "q": [1, 0], "k": 0, "w": [5], "c": []})

LEMMAS = [
    L(1150, "to-copy-is-convert", "aten._to_copy(?x, dtype=?t) => hlo.convert(?x, dtype=?t)",
      'floating(?t) and (floating(dtype(?x)) or dtype(?x) == "int32")', when="hlo.convert(?y, dtype=?t)",
      examples=({"x": [2, 3], "t": "float16", "y": [1]}, {"x": [4], "t": "float32", "y": [1]},
                {"x": [3], "t": "float32", "y": [1], "x:dtype": "int32"})),
    L(1151, "scalar-tensor-is-constant", "aten.scalar_tensor(s=?c, dtype=?t) => hlo.constant(shape=[], value=?c, dtype=?t)",
      "floating(?t)", when="hlo.constant(shape=[], value=?c, dtype=?t)"),
    L(1152, "hf-rms-norm-is-neuron-rms-norm",
      f"{HF_RMS}(?x, ?w, ?c, dtype=?t) => {RMS}(?x, ?w, ?c, backend_config=rank(?x) - 1)",
      '?t == dtype(?w) and dtype(?x) == "float32" and rank(?x) >= 1', examples=_RMS_SEEDS),
    L(1153, "neuron-rms-norm-of-permute",
      f"{RMS}(permute(?x, dims=?q), ?w, ?c, backend_config=?k) => permute({RMS}(?x, ?w, ?c, backend_config=at(?q, ?k)), dims=?q)",
      "?k >= 0 and ?k < rank(?x)", examples=_PERM_SEEDS),
    # NeuronX's projections contract the hidden-major activations' dim 0 (x [H, S * B] against w [H, out]): a dot
    # contracting both operands' dim 0 is the matmul of the transposed lhs
    L(1156, "dot-contracting-dim-0-is-matmul-of-transpose",
      "hlo.dot(?a, ?b, lhs_batch=[], rhs_batch=[], lhs_contracting=[0], rhs_contracting=[0])"
      " => matmul(permute(?a, dims=[1, 0]), ?b)", "rank(?a) == 2 and rank(?b) == 2",
      examples=({"a": [3, 2], "b": [3, 4]},)),
]


# ATen broadcasts implicitly (operands of unit dims, numpy's rules); HLO broadcasts explicitly (broadcast's
# dimensions map the operand's dims into the result's). An ATen comparison / logical and of reshapes -- unit dims
# inserted -- is the HLO op of the operands' broadcasts, reshaped to ATen's result shape, wherever the two
# movements of every entry are the same: checked on labelled entries (implicit_is_broadcast), not assumed.
def _ints(v):
    return tuple(int(d) for d in v)


def _hlo_broadcast(x, s, m):
    r = [1] * len(s)
    order = np.argsort(m)
    for i, d in enumerate(np.asarray(m)[order]):
        r[int(d)] = x.shape[int(order[i])]
    return np.broadcast_to(np.transpose(x, order).reshape(r), s)


def implicit_is_broadcast(ctx, x, u, y, v, s, m, n) -> bool:
    """``reshape(x, u)`` and ``reshape(y, v)`` broadcast against each other (NumPy's rules) to a shape o: is each
    of them ``reshape(hlo.broadcast(x, s, m), o)`` (``y``: dimensions n), entry by entry?"""
    try:
        xs, ys, u, v, s, m, n = (_ints(ctx.shape_of(x)), _ints(ctx.shape_of(y)), _ints(u), _ints(v), _ints(s),
                                 _ints(m), _ints(n))
        o = np.broadcast_shapes(u, v)
        if int(np.prod(o)) != int(np.prod(s)) or len(m) != len(xs) or len(n) != len(ys) or \
                len(set(m)) != len(m) or len(set(n)) != len(n) or not all(0 <= d < len(s) for d in m + n):
            return False
        lx = np.arange(int(np.prod(xs))).reshape(xs)
        ly = np.arange(int(np.prod(ys))).reshape(ys) + lx.size
        return all(a.shape == b.shape and (a == b).all() for a, b in (
            (np.broadcast_to(lx.reshape(u), o), _hlo_broadcast(lx, s, m).reshape(o)),
            (np.broadcast_to(ly.reshape(v), o), _hlo_broadcast(ly, s, n).reshape(o))))
    except (ValueError, TypeError):
        return False


FUNCTIONS = {"implicit_is_broadcast": implicit_is_broadcast,
             "bshape": lambda ctx, u, v: tuple(np.broadcast_shapes(_ints(u), _ints(v)))}

_BCAST_SEEDS = ({"x": [6], "u": [1, 1, 6], "y": [2], "v": [1, 2, 1], "s": [2, 6], "m": [1], "n": [0]},
                {"x": [2, 6], "u": [1, 2, 6], "y": [2, 6], "v": [2, 1, 6], "s": [2, 2, 6], "m": [1, 2], "n": [0, 2]},
                {"x": [3], "u": [3, 1], "y": [4], "v": [1, 4], "s": [3, 4], "m": [0], "n": [1]})


def _implicit(ref, name, aten, hlo, attrs="", dtypes=("int32", "float32")):
    b = "hlo.broadcast(?x, shape=?s, dimensions=?m), hlo.broadcast(?y, shape=?s, dimensions=?n)"
    return L(ref, name, f"{aten}(reshape(?x, shape=?u), reshape(?y, shape=?v)) => reshape({hlo}({b}{attrs}),"
             " shape=bshape(?u, ?v))", "dtype(?x) == dtype(?y) and implicit_is_broadcast(?x, ?u, ?y, ?v, ?s, ?m, ?n)",
             when=f"{hlo}({b}{attrs})",
             examples=tuple(dict(e, **{"x:dtype": t, "y:dtype": t}) for e in _BCAST_SEEDS for t in dtypes))


LEMMAS += [
    # the attention mask: key position <= query position, >= the row's start, both
    _implicit(1157, "le-is-compare-le-of-broadcasts", "aten.le.Tensor", "hlo.compare", ", direction=LE"),
    _implicit(1158, "ge-is-compare-ge-of-broadcasts", "aten.ge.Tensor", "hlo.compare", ", direction=GE"),
    _implicit(1159, "bitwise-and-is-and-of-broadcasts", "aten.bitwise_and.Tensor", "hlo.and", dtypes=("bool", "int32")),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires where the family's guarded rule does not

KEPT = [
    # RoPE's tables: one cosine, one sine, whichever dialect writes them (both elementwise: the full-width
    # table cos(cat(angles, angles)) meets NeuronX's concatenate of the cosine of the angles by family 1201)
    L(1154, "cos-is-cosine", "aten.cos(?x) => hlo.cosine(?x)", "floating(dtype(?x))", when="hlo.cosine(?x)", duplicates=KEPT_UNGUARDED),
    L(1155, "sin-is-sine", "aten.sin(?x) => hlo.sine(?x)", "floating(dtype(?x))", when="hlo.sine(?x)", duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
