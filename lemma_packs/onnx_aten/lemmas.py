"""ONNX operators as the ATen operators computing them. References: 2100-2149.

The same function in two dialects is a table (``SAME``: ONNX op, ATen op, ATen attributes fixed), from which
one constrained bridge each is derived: ``onnx.X(args) => aten.Y(args)`` fires only where the e-graph already
holds ``aten.Y`` of the same operands -- in a mixed pair, the other program's pieces (as the ATen-HLO bridges,
``lemma_packs/aten_hlo``). In a program of one dialect it never fires, so ONNX-only and PyTorch-only
verifications pay nothing for it. Every bridge is fuzzed like any lemma (``graphguard lemmas check``), against
both references: ONNX's ``onnx.reference`` and ATen's torch.

Where the dialects write a computation differently, a hand-written bridge says how: ONNX's ``MatMul`` of a
batch of rows by a matrix is PyTorch's ``mm`` of the rows flattened (what ``nn.Linear`` becomes in a captured
graph), ``Softmax`` along an axis is ``_softmax`` along that dim, a constant exponent / factor is the scalar
op's attribute, ``Reciprocal(Sqrt(x))`` is ``rsqrt``, ``x * Sigmoid(x)`` is ``silu`` (both ways: a PyTorch
specification reaches the ONNX pieces), a batched ``MatMul`` is the ``batched_matmul`` fx's ``bmm`` of
batch-merging views is (364). Each is fuzzed against both references like the table's.
"""
from graphguard.ir.lemma import L

NUMBERS = range(2100, 2150)  # this file's lemma numbers (the plugin loader refuses others)

# (ONNX op, ATen op, the ATen op's attributes beyond the ONNX op's: fixed values); the tensor inputs and the
# ONNX op's attributes (same names) carry over. The fuzzer keeps this table honest: ONNX's Div truncates
# integers where ATen's div.Tensor divides exactly (floating inputs only, _COND); Gelu is left out -- the two
# references differ in the last bits of float32 (onnx.reference's erf form vs torch's kernel, 1.5e-8).
SAME = [
    ("onnx.Add", "aten.add.Tensor", {"alpha": 1}),
    ("onnx.Sub", "aten.sub.Tensor", {"alpha": 1}),
    ("onnx.Mul", "aten.mul.Tensor", {}),
    ("onnx.Div", "aten.div.Tensor", {}),
    ("onnx.Neg", "aten.neg", {}),
    ("onnx.Relu", "aten.relu", {}),
    ("onnx.Tanh", "aten.tanh", {}),
    ("onnx.Sigmoid", "aten.sigmoid", {}),
    ("onnx.Exp", "aten.exp", {}),
    ("onnx.Sqrt", "aten.sqrt", {}),
]
_ARITY = {"onnx.Add": 2, "onnx.Sub": 2, "onnx.Mul": 2, "onnx.Div": 2}
_ATTRS: dict = {}
_COND = {"onnx.Div": "floating(dtype(?a)) and floating(dtype(?b))"}


def _bridge(ref: int, onnx_op: str, aten_op: str, fixed: dict) -> L:
    args = ["?a", "?b"][:_ARITY.get(onnx_op, 1)]
    own = [f"{k}=?{k}" for k in _ATTRS.get(onnx_op, ())]
    aten = f"{aten_op}({', '.join(args + own + [f'{k}={v}' for k, v in fixed.items()])})"
    onnx = f"{onnx_op}({', '.join(args + own)})"
    return L(ref, f"{onnx_op[5:].lower()}-is-{aten_op[5:]}", f"{onnx} => {aten}", _COND.get(onnx_op, ""), when=aten)


LEMMAS = [_bridge(2100 + k, *row) for k, row in enumerate(SAME)] + [
    # a batch of rows times a matrix: the rows flattened, multiplied, and unflattened (nn.Linear in fx)
    L(2130, "matmul-is-mm-of-rows",
      "onnx.MatMul(?x, ?w) => reshape(aten.mm(reshape(?x, shape=?s), ?w), shape=set_at(shape(?x), rank(?x) - 1, size(?w, 1)))",
      # (the rows are the leading dims' product: with a 0-size last dim, any row count has numel 0)
      "rank(?w) == 2 and rank(?x) >= 2 and len(?s) == 2 and at(?s, 1) == size(?x, rank(?x) - 1)"
      " and at(?s, 0) == prod(drop_at(shape(?x), rank(?x) - 1))",
      when="aten.mm(reshape(?x, shape=?s), ?w)",
      examples=[{"x": [2, 3, 4], "w": [4, 5], "s": [6, 4]}, {"x": [3, 4], "w": [4, 2], "s": [3, 4]}]),
    L(2131, "matmul-is-mm", "onnx.MatMul(?a, ?b) => aten.mm(?a, ?b)", "rank(?a) == 2 and rank(?b) == 2",
      when="aten.mm(?a, ?b)"),
    L(2132, "softmax-is-aten-softmax", "onnx.Softmax(?x, axis=?d) => aten._softmax(?x, dim=?d, half_to_float=false)",
      "floating(dtype(?x)) and numel(?x) > 0", when="aten._softmax(?x, dim=?d, half_to_float=false)"),
    # what exports and captures write differently (a Llama block: RMSNorm, SiLU, the attention's scale)
    L(2133, "scalar-constant-is-scalar-tensor",
      "onnx.ConstantFill(shape=[], value=?v, dtype=?t) => aten.scalar_tensor(s=?v, dtype=?t)",
      when="aten.scalar_tensor(s=?v, dtype=?t)"),
    L(2134, "pow-of-constant-is-pow-scalar",
      "onnx.Pow(?x, onnx.ConstantFill(shape=[], value=?e, dtype=?t)) => aten.pow.Tensor_Scalar(?x, exponent=?e)",
      "floating(dtype(?x)) and dtype(?x) == ?t", when="aten.pow.Tensor_Scalar(?x, exponent=?e)"),
    L(2135, "reducemean-is-mean-dim", "onnx.ReduceMean(?x, axes=?d, keepdims=?k) => aten.mean.dim(?x, dim=?d, keepdim=?k)",
      "floating(dtype(?x)) and len(?d) > 0", when="aten.mean.dim(?x, dim=?d, keepdim=?k)"),
    L(2136, "reciprocal-of-sqrt-is-rsqrt", "onnx.Reciprocal(onnx.Sqrt(?x)) => aten.rsqrt(?x)", "floating(dtype(?x))",
      when="aten.rsqrt(?x)"),
    L(2137, "mul-by-sigmoid-is-silu", "onnx.Mul(?x, onnx.Sigmoid(?x)) => aten.silu(?x)", "floating(dtype(?x))",
      when="aten.silu(?x)"),
    L(2138, "mul-by-constant-is-mul-scalar",
      "onnx.Mul(?x, onnx.ConstantFill(shape=[], value=?c, dtype=?t)) => aten.mul.Scalar(?x, other=?c)",
      "floating(dtype(?x)) and dtype(?x) == ?t", when="aten.mul.Scalar(?x, other=?c)"),
    L(2143, "div-by-constant-is-mul-scalar",
      "onnx.Div(?x, onnx.ConstantFill(shape=[], value=?c, dtype=?t)) => aten.mul.Scalar(?x, other=1 / ?c)",
      "floating(dtype(?x)) and dtype(?x) == ?t and finite(?c) and ?c != 0", when="aten.mul.Scalar(?x, other=?r)"),
    # (where fx expands the same tensor, to this size or a narrower one: KV heads replicated on several ranks
    # hold narrower copies, where families 1215/1216 split the broadcast)
    L(2139, "expand-is-aten-expand", "onnx.Expand(?x, shape=?s) => aten.expand(?x, size=?s, implicit=false)",
      when="aten.expand(?x, size=?t, implicit=?i)"),
    # a batched MatMul without broadcasting (attention's scores and context): fx's bmm of batch-merging views is
    # batched_matmul of the same operands (364)
    L(2140, "batched-matmul-is-core", "onnx.MatMul(?a, ?b) => batched_matmul(?a, ?b)",
      "rank(?a) == rank(?b) and rank(?a) >= 3 and drop_at(drop_at(shape(?a), rank(?a) - 1), rank(?a) - 2)"
      " == drop_at(drop_at(shape(?b), rank(?b) - 1), rank(?b) - 2)", when="batched_matmul(?a, ?b)"),
    # one ATen op that ONNX writes as two, the other way (a PyTorch specification against an ONNX
    # implementation): the ONNX pieces become sub-results of the ATen op's class, so the frontier reaches them
    L(2141, "rsqrt-is-reciprocal-of-sqrt", "aten.rsqrt(?x) => onnx.Reciprocal(onnx.Sqrt(?x))", "floating(dtype(?x))",
      when="onnx.Sqrt(?x)"),
    L(2142, "silu-is-mul-by-sigmoid", "aten.silu(?x) => onnx.Mul(?x, onnx.Sigmoid(?x))", "floating(dtype(?x))",
      when="onnx.Sigmoid(?x)"),
]
