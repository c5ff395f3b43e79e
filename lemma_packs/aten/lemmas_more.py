"""Lemmas of the ATen pack that no operator property states. References: 1250-1299.

(The families derived from properties -- engine/families.py -- take 1201-1249.)
"""
from graphguard.ir.lemma import L

NUMBERS = range(1250, 1300)  # this file's lemma numbers (the plugin loader refuses others)

LEMMAS = [
    # reversing a concatenation along its own dim reverses the parts and their order
    L(1250, "flip-of-concat-along-it",
      "aten.flip(concat(?a, ?b, dim=?d), dims=?k) => concat(aten.flip(?b, dims=?k), aten.flip(?a, dims=?k), dim=?d)",
      "contains(?k, ?d)"),
]
