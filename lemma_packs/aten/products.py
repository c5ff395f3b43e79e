"""Matrix products: ``bmm``, ``baddbmm``, batched and grouped matmuls (``aten._grouped_mm``) split along their
batch, rows, columns or contracted dim, and products written transposed (``(a @ b).T`` as ``b.T @ a.T``).

Part of the ATen pack's lemmas, one file per subject (``__init__.py`` joins them).
"""
from __future__ import annotations

from graphguard.ir.lemma import L

# the numbers its lemmas have, then 2300-2349 for new ones
NUMBERS = (range(360, 365), range(1300, 1301), range(1302, 1303), range(1854, 1855), range(1856, 1859),
           range(1900, 1904), range(2300, 2350))


_G = "absent=[3]"  # offsets given, no bias
_OFFS = {"o": "size(?x, 0) + 1"}
_OFFS_T = {"o": "size(?x, 1) + 1"}


LEMMAS = [
    L(364, "bmm-of-batch-merging-views",
      "aten.bmm(reshape(?x, shape=?s), reshape(?y, shape=?t))"
      " => reshape(batched_matmul(?x, ?y), shape=[at(?s, 0), at(?s, 1), at(?t, 2)])",
      "bmm_view_ok(?x, ?y, ?s, ?t)",
      examples=[{"x": x, "y": y, "s": s_, "t": t} for x, y, s_, t in (
          ([2, 3, 4, 5], [2, 3, 5, 2], [6, 4, 5], [6, 5, 2]), ([2, 2, 3], [2, 3, 4], [2, 2, 3], [2, 3, 4]),
          ([1, 2, 3, 4], [1, 2, 4, 1], [2, 3, 4], [2, 4, 1]), ([3, 1, 2, 2], [3, 1, 2, 3], [3, 2, 2], [3, 2, 3]))]),
    L(360, "bmm-batch", "aten.bmm(concat(?a, ?b, dim=0), concat(?c, ?e, dim=0)) => concat(aten.bmm(?a, ?c), aten.bmm(?b, ?e), dim=0)",
      "size(?a, 0) == size(?c, 0)",
      examples=[{"a": [2, 3, 4], "b": [1, 3, 4], "c": [2, 4, 2], "e": [1, 4, 2]},
                {"a": [1, 2, 2], "b": [3, 2, 2], "c": [1, 2, 3], "e": [3, 2, 3]}]),
    L(361, "bmm-rows", "aten.bmm(concat(?a, ?b, dim=1), ?w) => concat(aten.bmm(?a, ?w), aten.bmm(?b, ?w), dim=1)"),
    L(362, "bmm-cols", "aten.bmm(?x, concat(?a, ?b, dim=2)) => concat(aten.bmm(?x, ?a), aten.bmm(?x, ?b), dim=2)"),
    L(363, "bmm-block-k", "aten.bmm(concat(?a, ?b, dim=2), concat(?c, ?e, dim=1)) => sum(aten.bmm(?a, ?c), aten.bmm(?b, ?e))",
      "size(?a, 2) == size(?c, 1)",
      examples=[{"a": [2, 3, 2], "b": [2, 3, 1], "c": [2, 2, 4], "e": [2, 1, 4]},
                {"a": [1, 2, 3], "b": [1, 2, 3], "c": [1, 3, 2], "e": [1, 3, 2]}]),
    # torch.baddbmm ignores its first operand when beta is 0 (even NaN or inf in an empty buffer)
    L(1300, "baddbmm-without-input",
      "aten.baddbmm(?c, ?a, ?b, beta=0, alpha=?s) => aten.mul.Scalar(aten.bmm(?a, ?b), other=?s)",
      "finite(?s) and floating(dtype(?a))"),
    # the converse of 364: a batched matmul over several batch dims is a bmm of the views merging them (what a
    # rank computes when its batch rows are a slice of a merged dim)
    L(1302, "batched-matmul-is-bmm-of-merged-views",
      "batched_matmul(?x, ?y) => reshape(aten.bmm(reshape(?x, shape=batch_merged(?x)), reshape(?y, shape=batch_merged(?y))),"
      " shape=batched_mm_shape(?x, ?y))",
      "rank(?x) >= 4 and rank(?y) == rank(?x) and numel(?x) > 0 and numel(?y) > 0",
      examples=[{"x": [2, 3, 4, 5], "y": [2, 3, 5, 2]}, {"x": [2, 1, 3, 4, 5], "y": [2, 1, 3, 5, 3]}]),
    # (b^T a^T)^T is a @ b (matrices)
    L(1854, "transposed-product",
      "permute(matmul(permute(?b, dims=[1, 0]), permute(?a, dims=[1, 0])), dims=[1, 0]) => matmul(?a, ?b)"),
    # ... and where one operand is transposed ((b^T a)^T is a^T b, (b a^T)^T is a b^T: autograd's weight
    # gradients transposed back), building no transpose of a transpose
    L(1857, "transposed-product-left",
      "permute(matmul(permute(?b, dims=[1, 0]), ?a), dims=[1, 0]) => matmul(permute(?a, dims=[1, 0]), ?b)"),
    L(1858, "transposed-product-right",
      "permute(matmul(?b, permute(?a, dims=[1, 0])), dims=[1, 0]) => matmul(?a, permute(?b, dims=[1, 0]))"),
    # ... and of batches of matrices (attention's q @ k^T as (k q^T)^T; ?p swaps the last two dims)
    L(1856, "batched-transposed-product",
      "permute(batched_matmul(permute(?b, dims=?p), permute(?a, dims=?p)), dims=?p) => batched_matmul(?a, ?b)",
      "rank(?a) >= 3 and rank(?b) == rank(?a) and ?p == batch_perm(?a, [0, 2, 1])",
      examples=[{"a": [2, 3, 4], "b": [2, 4, 5], "p": [0, 2, 1]}, {"a": [2, 3, 4, 5], "b": [2, 3, 5, 2], "p": [0, 1, 3, 2]},
                {"a": [1, 3, 4, 5], "b": [1, 3, 5, 2], "p": [0, 1, 3, 2]}, {"a": [2, 1, 4], "b": [2, 4, 1], "p": [0, 2, 1]}]),
    L(1900, "grouped-mm-cols",
      f"aten._grouped_mm(?x, concat(?a, ?b, dim=2), ?o, {_G})"
      f" => concat(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?x, ?b, ?o, {_G}), dim=1)",
      "rank(?x) == 2 and rank(?a) == 3", index=_OFFS,
      examples=[{"x": [6, 4], "a": [3, 4, 2], "b": [3, 4, 3], "o": [3]},
                {"x": [5, 2], "a": [2, 2, 1], "b": [2, 2, 2], "o": [2]}]),
    L(1901, "grouped-mm-block-k",
      f"aten._grouped_mm(concat(?x, ?y, dim=1), concat(?a, ?b, dim=1), ?o, {_G})"
      f" => sum(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?y, ?b, ?o, {_G}))",
      "rank(?x) == 2 and rank(?a) == 3 and size(?x, 1) == size(?a, 1)", index=_OFFS,
      examples=[{"x": [6, 2], "y": [6, 3], "a": [3, 2, 4], "b": [3, 3, 4], "o": [3]},
                {"x": [4, 1], "y": [4, 1], "a": [2, 1, 2], "b": [2, 1, 2], "o": [2]}]),
    L(1902, "grouped-mm-weight-grad-rows",
      f"aten._grouped_mm(concat(?a, ?b, dim=0), ?y, ?o, {_G})"
      f" => concat(aten._grouped_mm(?a, ?y, ?o, {_G}), aten._grouped_mm(?b, ?y, ?o, {_G}), dim=1)",
      "rank(?a) == 2 and rank(?y) == 2", index={"o": "size(?a, 1) + 1"},
      examples=[{"a": [2, 6], "b": [3, 6], "y": [6, 4], "o": [3]},
                {"a": [1, 4], "b": [2, 4], "y": [4, 2], "o": [2]}]),
    L(1903, "grouped-mm-weight-grad-cols",
      f"aten._grouped_mm(?x, concat(?a, ?b, dim=1), ?o, {_G})"
      f" => concat(aten._grouped_mm(?x, ?a, ?o, {_G}), aten._grouped_mm(?x, ?b, ?o, {_G}), dim=2)",
      "rank(?x) == 2 and rank(?a) == 2", index=_OFFS_T,
      examples=[{"x": [3, 6], "a": [6, 2], "b": [6, 3], "o": [3]},
                {"x": [2, 4], "a": [4, 1], "b": [4, 2], "o": [2]}]),
]
