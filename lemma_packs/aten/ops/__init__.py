"""Compute operators of the ``aten`` dialect: PyTorch ATen ops as the PyTorch frontend emits them.

Conventions shared with the frontend:

* name: ``aten.<op>`` plus ``.<overload>`` unless the overload is ``default`` (``aten.add.Tensor``);
* inputs: the schema's Tensor arguments in schema order (a ``Tensor[]`` contributes its elements);
  every other argument is an attribute named as in the schema -- int -> int, SymInt -> scalar,
  int[] -> ints, SymInt[] -> scalars, float/Scalar -> number, bool -> bool, str -> str,
  ScalarType -> str (a numpy-style dtype name such as ``float32``); bool[] (only ``output_mask``) -> ints
  of 0/1. Device, layout, memory-format, pin-memory, non-blocking and generator arguments are dropped;
* optional tensors (``Tensor?``, ``Tensor?[]``): only present ones are inputs, and the attribute
  ``absent`` lists the positions, in the flattened tensor-argument list, of the missing ones;
* ops with several outputs are defined with :func:`multi_output` (``aten.max.dim#0``, ``#1``).

References compute floating point in float64 whatever the declared float dtype (``float32``,
``bfloat16``...); integer and bool results keep their exact dtype.
One module per subject; ``helpers`` holds what they build their ops with:

* ``products``: matrix products, convolutions, triangular solves;
* ``elementwise``: arithmetic, comparisons, logical ops, unary maths and activations, ``where``, casts;
* ``complex_numbers``: ``polar``, ``view_as_complex``, ``view_as_real``, ``_conj``;
* ``normalisation``: softmax, log-softmax, layer norm (and their backward);
* ``dropout``: ``native_dropout`` and its backward;
* ``reductions``: sums, means, maxima, minima, ``topk``, cumulative sums, variances, norms;
* ``indexing``: embeddings, ``index``, ``gather``, scatters, ``one_hot``, ``nonzero``;
* ``factories``: ``arange``, ``zeros``, ``full``, ``*_like``;
* ``movement``: ``expand``, ``repeat``, ``flip``, ``roll``;
* ``attention``: scaled dot-product attention and the CPU flash kernel (forward and backward);
* ``losses``: ``mse_loss`` and its backward;
* ``mixture_of_experts``: grouped matrix products and the routing ops (``sort``, ``histc``, ``index_copy``,
  slices at bounds the data decides).
"""
from __future__ import annotations

from graphguard.ir.ops import OpDef

from .attention import OPS as ATTENTION
from .complex_numbers import OPS as COMPLEX_NUMBERS
from .dropout import OPS as DROPOUT
from .elementwise import OPS as ELEMENTWISE
from .factories import OPS as FACTORIES
from .indexing import OPS as INDEXING
from .losses import OPS as LOSSES
from .mixture_of_experts import OPS as MIXTURE_OF_EXPERTS
from .movement import OPS as MOVEMENT
from .normalisation import OPS as NORMALISATION
from .products import OPS as PRODUCTS
from .reductions import OPS as REDUCTIONS

OPS: list[OpDef] = (PRODUCTS + ELEMENTWISE + COMPLEX_NUMBERS + NORMALISATION + DROPOUT + REDUCTIONS + INDEXING
                    + FACTORIES + MOVEMENT + ATTENTION + LOSSES + MIXTURE_OF_EXPERTS)
