"""ATen operators as the HLO ops that compute them. References: 834-843, 1100-1149.

How dialects meet (see ``lemma_packs/hlo/README.md``): where the core dialect has the operator, both dialects
bridge into it -- ``aten.mm`` and a 2-D ``hlo.dot`` are ``matmul`` (301, 800), ``aten.bmm`` and a batched
``hlo.dot`` are ``batched_matmul`` (365, 801, 807), ``aten.add.Tensor`` and ``hlo.add`` are ``sum`` (303; 802 +
core 210). For the rest, the lower dialect is the meeting point: an ATen op *is* the HLO expression XLA (and
JAX, torch-xla) computes it with -- ``silu(x) = x * 1 / (1 + exp(-x))``, a softmax is max-shifted exp over its
sum, a mean is a sum divided by the count.

Every lemma here is constrained (``when=``): it fires only where the e-graph already holds the first HLO op
the expression applies to the same operands -- in a mixed pair, the implementation's pieces; the frontier of
G_d then reaches the rest of the expression from there. In a program of one dialect it never fires, so
PyTorch-only and XLA-only verifications pay nothing for it; and the ATen side is split by ATen's own lemmas
(``aten.silu`` over a concatenation, 332) before it meets the per-rank HLO pieces.

A third dialect joins the same way: bridges into core where core has the op, and constrained lowerings into
the HLO expression where it does not (ONNX's ``Softmax``, a NeuronX ``AwsNeuronSoftmax`` custom call...).

Constants must be equal exactly: ``1e-6`` recorded by PyTorch is not the float32 value XLA holds (the fx frontend
keeps Python scalars as written), so models meant to meet use constants exact in their dtype (``2 ** -20``).
"""
from graphguard.ir.lemma import KEPT_UNGUARDED, L

NUMBERS = (range(834, 844), range(1100, 1150))  # this file's lemma numbers (the plugin loader refuses others)

# the HLO expressions JAX writes, built from the one HLO node that must exist (the first op applied to ?x): the
# frontier of G_d reaches the rest from there
_ONE = "hlo.constant(shape=shape(?x), value=1, dtype=float32)"
_SIGMOID = f"hlo.divide({_ONE}, hlo.add(hlo.exponential(hlo.negate(?x)), {_ONE}))"
_ROWS4 = "[size(?x, 0), size(?x, 1), size(?x, 2)]"  # a rank-4 tensor's shape without its last dim
_ROWMAX4 = (f"hlo.maximum(hlo.reduce(?x, dims=[3], reducer=max, init=?i), hlo.constant(shape={_ROWS4}, value=?i,"
            " dtype=float32))")
_SHIFTED4 = f"hlo.exponential(hlo.subtract(?x, hlo.broadcast({_ROWMAX4}, shape=shape(?x), dimensions=[0, 1, 2])))"
_SOFTMAX4 = (f"hlo.divide({_SHIFTED4}, hlo.broadcast(hlo.reduce({_SHIFTED4}, dims=[3], reducer=sum, init=0),"
             " shape=shape(?x), dimensions=[0, 1, 2]))")
_MEAN = ("hlo.divide(reshape(hlo.reduce(?x, dims=?k, reducer=sum, init=0), shape=set_at(shape(?x), at(?k, 0), 1)),"
         " hlo.constant(shape=set_at(shape(?x), at(?k, 0), 1), value=size(?x, at(?k, 0)), dtype=float32))")

LEMMAS = [
    L(834, "pow-2-is-square", "aten.pow.Tensor_Scalar(?x, exponent=2) => hlo.multiply(?x, ?x)", "floating(dtype(?x))",
      when="hlo.multiply(?x, ?x)"),
    L(835, "rsqrt-is-hlo-rsqrt", "aten.rsqrt(?x) => hlo.rsqrt(?x)", "floating(dtype(?x))", when="hlo.rsqrt(?x)"),
    # ATen broadcasts implicitly; HLO says how (a weight vector along the last dim: family 1220) ...
    # ... a row statistic ([.., n, 1], keepdim) along the rows: its unit dim dropped, then broadcast
    L(838, "mul-by-row-statistic-is-multiply-by-broadcast",
      "aten.mul.Tensor(?a, ?b) => hlo.multiply(?a, hlo.broadcast(reshape(?b, shape=?u), shape=?s, dimensions=?m))",
      "rank(?a) == 3 and rank(?b) == 3 and size(?b, 2) == 1 and ?u == [size(?b, 0), size(?b, 1)] and ?m == [0, 1]"
      " and ?s == shape(?a)",
      when="hlo.broadcast(reshape(?b, shape=?u), shape=?s, dimensions=?m)",
      examples=({"a": [2, 3, 4], "b": [2, 3, 1], "u": [2, 3], "s": [2, 3, 4], "m": [0, 1]},)),
    L(839, "mul-by-scalar-is-multiply-by-splat",
      "aten.mul.Scalar(?x, other=?c) => hlo.multiply(?x, hlo.constant(shape=?s, value=?c, dtype=?t))",
      "?s == shape(?x) and floating(?t) and floating(dtype(?x))",
      when="hlo.multiply(?x, hlo.constant(shape=?s, value=?c, dtype=?t))",
      examples=({"x": [2, 3], "c": 2, "s": [2, 3], "t": "float32"},)),
    L(840, "add-scalar-tensor-is-add-splat",
      "aten.add.Tensor(?x, aten.scalar_tensor(s=?c, dtype=?u), alpha=1) => hlo.add(?x, hlo.constant(shape=?s, value=?c,"
      " dtype=?t))", "?s == shape(?x) and ?t == ?u and floating(dtype(?x))", when="hlo.add(?x, hlo.constant(shape=?s, value=?c, dtype=?t))",
      examples=({"x": [2, 3], "c": 2, "s": [2, 3], "t": "float32", "u": "float32"},)),
    L(841, "mean-is-sum-over-count", f"aten.mean.dim(?x, dim=?k, keepdim=true, dtype=None) => {_MEAN}",
      "len(?k) == 1", when="hlo.reduce(?x, dims=?k, reducer=sum, init=0)",
      examples=({"x": [2, 3, 4], "k": [2]}, {"x": [2, 3, 4], "k": [1]})),
    L(842, "silu-is-x-times-sigmoid", f"aten.silu(?x) => hlo.multiply(?x, {_SIGMOID})", "floating(dtype(?x))",
      when="hlo.negate(?x)"),
    # softmax along the last dim: exp(x - c) over its sum, for any finite c constant along that dim (JAX
    # subtracts the row max, the max of the reduce's init -inf and the row). (An init of +inf would make c
    # infinite: conditions cannot compare infinities yet, so that nonsense program is not excluded.)
    L(843, "softmax-is-shifted-exp-over-its-sum", f"aten._softmax(?x, dim=3, half_to_float=false) => {_SOFTMAX4}",
      "rank(?x) == 4 and floating(dtype(?x))", when="hlo.reduce(?x, dims=[3], reducer=max, init=?i)",
      examples=({"x": [2, 3, 2, 4], "i": -1000},)),
    # a Llama layer's attention: an additive [seq, seq] mask (HF's causal mask) broadcast over batch and heads.
    # The implementation's broadcast is per rank (fewer heads): the full one splits at it (hlo 880)
    L(1100, "add-trailing-matrix-is-add-broadcast",
      "aten.add.Tensor(?a, ?m, alpha=1) => hlo.add(?a, hlo.broadcast(?m, shape=shape(?a), dimensions=?k))",
      "rank(?a) == 4 and rank(?m) == 2 and ?k == [2, 3] and shape(?m) == [size(?a, 2), size(?a, 3)]",
      when="hlo.broadcast(?m, shape=?t, dimensions=?k)",
      examples=({"a": [2, 3, 4, 5], "m": [4, 5], "k": [2, 3], "t": [2, 1, 4, 5]},)),
    # RoPE: q and k [b, h, s, hd] times the [seq, hd] cos / sin tables, broadcast the same way
    L(1101, "mul-by-trailing-matrix-is-multiply-by-broadcast",
      "aten.mul.Tensor(?a, ?m) => hlo.multiply(?a, hlo.broadcast(?m, shape=shape(?a), dimensions=?k))",
      "rank(?a) == 4 and rank(?m) == 2 and ?k == [2, 3] and shape(?m) == [size(?a, 2), size(?a, 3)]",
      when="hlo.broadcast(?m, shape=?t, dimensions=?k)",
      examples=({"a": [2, 3, 4, 5], "m": [4, 5], "k": [2, 3], "t": [2, 1, 4, 5]},)),
    # RoPE's rotate_half: cat(-x2, x1) (slices and cat are core ops on both sides)
    L(1102, "neg-is-negate", "aten.neg(?x) => hlo.negate(?x)", when="hlo.negate(?x)"),
    # GQA's repeat_kv: k[:, :, None].expand(b, kv, rep, s, hd) -- JAX's broadcast_to of k[:, :, None] is a
    # broadcast of k itself (the unit dim dropped) along the new dim 2. ATen's expand of a concatenation of KV
    # heads splits first (aten 420) and meets each rank's broadcast
    L(1103, "expand-of-unit-dim-is-broadcast",
      "aten.expand(?u, size=?s, implicit=false) => hlo.broadcast(reshape(?u, shape=?v), shape=?s, dimensions=?m)",
      "rank(?u) == 5 and size(?u, 2) == 1 and ?v == [size(?u, 0), size(?u, 1), size(?u, 3), size(?u, 4)]"
      " and ?m == [0, 1, 3, 4] and ?s == set_at(shape(?u), 2, at(?s, 2))",
      when="hlo.broadcast(reshape(?u, shape=?v), shape=?s, dimensions=?m)",
      examples=({"u": [2, 3, 1, 4, 5], "s": [2, 3, 2, 4, 5], "v": [2, 3, 4, 5], "m": [0, 1, 3, 4]},)),
]


# kept although a family derives the same rule (graphguard/engine/lemma.py: duplicate_problems): each fires
# where the family's guarded rule does not
KEPT = [
    L(836, "mul-is-multiply", "aten.mul.Tensor(?a, ?b) => hlo.multiply(?a, ?b)", "shape(?a) == shape(?b)",
      when="hlo.multiply(?a, ?b)", duplicates=KEPT_UNGUARDED),
    # ATen broadcasts implicitly; HLO says how: a weight vector along the last dim ...
    L(837, "mul-by-vector-is-multiply-by-broadcast",
      "aten.mul.Tensor(?w, ?y) => hlo.multiply(hlo.broadcast(?w, shape=?s, dimensions=?m), ?y)",
      "rank(?w) == 1 and ?s == shape(?y) and ?m == [rank(?y) - 1]",
      when="hlo.broadcast(?w, shape=?s, dimensions=?m)",
      examples=({"w": [4], "y": [2, 3, 4], "s": [2, 3, 4], "m": [2]},), duplicates=KEPT_UNGUARDED),
]

LEMMAS += KEPT
