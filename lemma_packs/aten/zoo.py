"""Lemmas for HF transformers' TP-plan zoo (bench/hf_zoo.py) that no operator property states. References:
1800-1849.

Complex RoPE (DeepSeek-V2, Llama-4): ``view_as_complex`` reads pairs along the last dim as complex numbers and
``view_as_real`` writes them back; both keep a concatenation along any other dim (heads sharded by the plan).
"""
from graphguard.ir.lemma import L

NUMBERS = range(1800, 1850)  # this file's lemma numbers (the plugin loader refuses others)

LEMMAS = [
    L(1800, "view-as-complex-of-concat",
      "aten.view_as_complex(concat(?a, ?b, dim=?d)) => concat(aten.view_as_complex(?a), aten.view_as_complex(?b), dim=?d)",
      "?d < rank(?a) - 1",
      examples=[{"a": [2, 3, 2], "b": [1, 3, 2], "d": 0}, {"a": [2, 1, 4, 2], "b": [2, 3, 4, 2], "d": 1}]),
    L(1801, "view-as-real-of-concat",
      "aten.view_as_real(concat(?a, ?b, dim=?d)) => concat(aten.view_as_real(?a), aten.view_as_real(?b), dim=?d)",
      examples=[{"a": [2, 3], "b": [1, 3], "d": 0}, {"a": [2, 1, 4], "b": [2, 3, 4], "d": 1}]),
    # both are linear: the ranks' partial sums of a RoPE gradient go through (the family linear-over-sum, 1203,
    # asks floating(), which a complex input is not, and one dtype of the summands, which these ops need)
    L(1802, "view-as-complex-of-sum",
      "aten.view_as_complex(sum(?a, ?b)) => sum(aten.view_as_complex(?a), aten.view_as_complex(?b))",
      "dtype(?a) == dtype(?b)"),
    L(1803, "view-as-real-of-sum",
      "aten.view_as_real(sum(?a, ?b)) => sum(aten.view_as_real(?a), aten.view_as_real(?b))",
      "dtype(?a) == dtype(?b)"),
]
