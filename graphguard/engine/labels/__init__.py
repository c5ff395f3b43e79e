"""Label proofs: G_d tensors evaluated on labelled entries (integers, multisets of them, polynomials in them), so
that an equality of two programs over the same tensors is decided by comparing label arrays -- exact in real
arithmetic, the model every lemma states. One idea per module: layout (solving), replicas, counterparts,
propagate (through G_d), inputs (relayouts of inputs), movement, elementwise, rows, sums, poly, products.
"""
