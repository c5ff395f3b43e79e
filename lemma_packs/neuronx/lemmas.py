"""Lemmas of the NeuronX pack. References: 900-929.

The static-ring transfer is the identity (900). RmsNorm and softmax work row by row along their dim
(``backend_config``, negative counting from the end), so a tensor split along any *other* dim is normalised
part by part: the result concatenates along the same dim (901, 902; the RmsNorm weight and eps are whole
on every part). GELU is elementwise: any split (903). The same independence lets a slice along such a dim
move outside (904-906: ``op(slice(x))`` is a slice of ``op(x)``), which relates a rank that normalises its
slice of a replicated tensor (sequence parallelism) to the sequential op. The kernel computes in float32 from
its weight's values and returns the dtype its call declares, so an exact widening of the weight is the weight
(907: transformers-neuronx keeps RMSNorm weights in float32, the exact upcast of a float16 checkpoint's; a
narrowing, which rounds, is not dropped).
"""
from graphguard.ir.lemma import L

from .ops import GELU, RING, RMS, SOFTMAX

NUMBERS = range(900, 930)  # this file's lemma numbers (the plugin loader refuses others)

_RMS = "?w, ?c, backend_config=?k"
_OTHER = "?d != ?k and ?d != ?k + rank(?a)"  # the split dim is not the normalised one (?k may be negative)
_OTHER_X = "?d != ?k and ?d != ?k + rank(?x)"


def _seed(a, b, d, k, **kw):  # shards a, b on dim d; normalised dim k
    return {"a": a, "b": b, "d": d, "k": k, **kw}


def _rms_seed(a, b, d, k):
    return _seed(a, b, d, k, w=[a[k]], c=[])


_RMS_SEEDS = [_rms_seed([4, 1, 2], [4, 3, 2], 1, 0), _rms_seed([4, 1, 2], [4, 1, 3], 2, 0),  # NeuronX [H, S, B]
              _rms_seed([2, 3, 4], [1, 3, 4], 0, 2), _rms_seed([2, 3, 4], [1, 3, 4], 0, -1),
              _rms_seed([2, 5], [2, 1], 1, 0), _rms_seed([3, 2], [1, 2], 0, 1)]
_SOFTMAX_SEEDS = [_seed([1, 2, 3, 4], [1, 1, 3, 4], 1, 3), _seed([2, 3], [1, 3], 0, -1), _seed([3, 2], [3, 4], 1, 0),
                  _seed([2, 2, 3], [2, 1, 3], 1, 2)]
_SLICE_RMS_SEEDS = [{"x": [4, 3, 2], "d": 1, "s": 1, "e": 3, "k": 0, "w": [4], "c": []},
                    {"x": [3, 5], "d": 0, "s": 0, "e": 2, "k": -1, "w": [5], "c": []}]
_SLICE_SEEDS = [{"x": [2, 4, 3], "d": 1, "s": 1, "e": 3, "k": 2}, {"x": [4, 3], "d": 0, "s": 2, "e": 4, "k": -1},
                {"x": [3, 4], "d": 1, "s": 0, "e": 1, "k": 0}]

LEMMAS = [
    L(900, "transfer-with-static-ring-is-identity", f"{RING}(?x) => ?x"),
    L(901, "rms-norm-of-concat-along-another-dim",
      f"{RMS}(concat(?a, ?b, dim=?d), {_RMS}) => concat({RMS}(?a, {_RMS}), {RMS}(?b, {_RMS}), dim=?d)",
      _OTHER, examples=_RMS_SEEDS),
    L(902, "softmax-of-concat-along-another-dim",
      f"{SOFTMAX}(concat(?a, ?b, dim=?d), backend_config=?k)"
      f" => concat({SOFTMAX}(?a, backend_config=?k), {SOFTMAX}(?b, backend_config=?k), dim=?d)",
      _OTHER, examples=_SOFTMAX_SEEDS),
    L(903, "gelu-tanh-of-concat", f"{GELU}(concat(?a, ?b, dim=?d)) => concat({GELU}(?a), {GELU}(?b), dim=?d)"),
    L(904, "rms-norm-of-slice-along-another-dim",
      f"{RMS}(slice(?x, dim=?d, start=?s, end=?e), {_RMS}) => slice({RMS}(?x, {_RMS}), dim=?d, start=?s, end=?e)",
      _OTHER_X, examples=_SLICE_RMS_SEEDS),
    L(905, "softmax-of-slice-along-another-dim",
      f"{SOFTMAX}(slice(?x, dim=?d, start=?s, end=?e), backend_config=?k)"
      f" => slice({SOFTMAX}(?x, backend_config=?k), dim=?d, start=?s, end=?e)", _OTHER_X, examples=_SLICE_SEEDS),
    L(907, "rms-norm-of-an-exactly-widened-weight",
      f"{RMS}(?x, convert(?w, dtype=?t), ?c, backend_config=?k) => {RMS}(?x, ?w, ?c, backend_config=?k)",
      "exact_conversion(dtype(?w), ?t)",
      examples=tuple({"x": x, "w": [x[k]], "c": [], "t": t, "k": k, "x:dtype": "float32", "w:dtype": w,
                      "c:dtype": "float32"}
                     for x, k, w, t in (([4, 3], 0, "float16", "float32"), ([2, 5], 1, "bfloat16", "float32"),
                                        ([4, 3, 2], 0, "float16", "float32"), ([3, 4], 1, "float32", "float64"),
                                        ([2, 2, 6], 2, "float16", "float64"), ([5], 0, "bfloat16", "float64")))),
    L(906, "gelu-tanh-of-slice",
      f"{GELU}(slice(?x, dim=?d, start=?s, end=?e)) => slice({GELU}(?x), dim=?d, start=?s, end=?e)"),
]
