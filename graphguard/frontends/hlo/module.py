"""The HLO module both parsers produce (``text.py`` from HLO text, ``proto.py`` from ``HloModuleProto``).

A :class:`Module` owns its :class:`Computation` s, each owning its :class:`Instruction` s in dependency
order. An instruction names its operands and called computations; everything else the converter needs is
in ``attrs``, under the same keys whichever format it came from:

==========================  ============================================================================
key                         value
==========================  ============================================================================
``parameter_number``        int (parameter)
``tuple_index``             int (get-tuple-element)
``dimensions``              list[int] (broadcast, transpose, reduce, concatenate, reverse, all-gather,
                            reduce-scatter, all-to-all; iota's ``iota_dimension`` is ``[d]``)
``slice``                   list[(start, limit, stride)]
``dynamic_slice_sizes``     list[int]
``padding``                 list[(low, high, interior)]
``dot``                     dict: lhs_batch, rhs_batch, lhs_contracting, rhs_contracting (lists)
``gather``                  dict: offset_dims, collapsed_slice_dims, start_index_map, index_vector_dim,
                            operand_batching_dims, start_indices_batching_dims, slice_sizes
``direction``               str (compare: EQ, NE, LT, LE, GT, GE)
``replica_groups``          list[list[int]] (empty: every rank; decoded from any of the encodings)
``source_target_pairs``     list[(source, target)]
``channel_id``              int or None; ``use_global_device_ids``: bool
``custom_call_target``      str; ``backend_config``: str
==========================  ============================================================================

``Instruction.literal`` holds a constant's values (a NumPy array in row-major order), or :data:`ELIDED`
when a text dump printed ``{...}`` instead of them.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from graphguard.errors import InputError
from graphguard.frontends import MAX_WORLD_SIZE, check_world_size

# HLO element types -> IR dtype names (numpy-style, as the other frontends write them)
DTYPES = {"pred": "bool", "s8": "int8", "s16": "int16", "s32": "int32", "s64": "int64", "u8": "uint8",
          "u16": "uint16", "u32": "uint32", "u64": "uint64", "f16": "float16", "bf16": "bfloat16",
          "f32": "float32", "f64": "float64", "f8e4m3fn": "float8_e4m3fn", "f8e5m2": "float8_e5m2",
          "f8e4m3": "float8_e4m3", "f8e5m2fnuz": "float8_e5m2fnuz", "f8e4m3fnuz": "float8_e4m3fnuz",
          "s4": "int4", "u4": "uint4", "c64": "complex64", "c128": "complex128"}
NON_ARRAY = ("tuple", "token", "opaque")

ELIDED = object()  # a constant whose values the text dump left out ("{...}")


@dataclass(frozen=True)
class Shape:
    """An array shape (``dtype`` an IR dtype name), a tuple of shapes (``dtype == "tuple"``) or a token."""
    dtype: str
    dims: tuple[int, ...] = ()
    elements: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        return self.dtype == "tuple"

    @property
    def is_array(self) -> bool:
        return self.dtype not in NON_ARRAY

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(map(str, self.elements)) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"


@dataclass
class Instruction:
    name: str
    opcode: str
    shape: Shape
    operands: list[str] = field(default_factory=list)
    called: list[str] = field(default_factory=list)  # called computations (to_apply, calls, branches...)
    attrs: dict = field(default_factory=dict)
    literal: object = None  # np.ndarray, ELIDED, or None
    loc: str | None = None  # "file.py:12" from the op metadata


@dataclass
class Computation:
    name: str
    instructions: list[Instruction]
    root: str

    def __post_init__(self):
        self.by_name = {i.name: i for i in self.instructions}


@dataclass
class Module:
    name: str
    computations: dict[str, Computation]
    entry: str
    source: str
    num_partitions: int | None = None
    replica_count: int | None = None

    def check(self) -> Module:
        """Every operand and called computation exists; the entry and roots exist; parameter numbers are
        0..n-1 in each computation; the declared device counts are world sizes."""
        for key in ("num_partitions", "replica_count"):
            if getattr(self, key) is not None:
                check_world_size(getattr(self, key), f"{self.source}: {key}")
        if self.entry not in self.computations:
            raise InputError(f"{self.source}: HLO module '{self.name}' has no entry computation '{self.entry}'")
        for c in self.computations.values():
            if len(c.by_name) != len(c.instructions):
                seen: set[str] = set()
                for i in c.instructions:
                    if i.name in seen:
                        raise InputError(f"{self.source}: instruction '{i.name}' is defined twice in computation "
                                         f"'{c.name}'")
                    seen.add(i.name)
            if c.root not in c.by_name:
                raise InputError(f"{self.source}: computation '{c.name}' has no root instruction '{c.root}'")
            for ins in c.instructions:
                for o in ins.operands:
                    if o not in c.by_name:
                        raise InputError(f"{self.source}: instruction '{ins.name}' ({ins.opcode}) in computation "
                                         f"'{c.name}' uses '{o}', which the computation does not define")
                for k in ins.called:
                    if k not in self.computations:
                        raise InputError(f"{self.source}: instruction '{ins.name}' ({ins.opcode}) calls computation "
                                         f"'{k}', which the module does not define")
            params = [i for i in c.instructions if i.opcode == "parameter"]
            seen_numbers: set[int] = set()
            for i in params:
                k = i.attrs.get("parameter_number")
                if not isinstance(k, int) or not 0 <= k < len(params) or k in seen_numbers:
                    raise InputError(f"{self.source}: parameter '{i.name}' of computation '{c.name}' is number {k}; "
                                     f"its {len(params)} parameters are numbered 0..{len(params) - 1} once each")
                seen_numbers.add(k)
        return self


def iota_groups(num_groups: int, group_size: int, reshape_dims: list[int], perm: list[int] | None,
                where: str) -> list[list[int]]:
    """``[G,S]<=[dims]T(perm)``: iota(prod(dims)) reshaped to dims, transposed by perm, read as G groups of S."""
    if any(d < 1 for d in list(reshape_dims) + [num_groups, group_size]) or \
            num_groups * group_size > MAX_WORLD_SIZE:
        raise InputError(f"{where}: iota replica groups [{num_groups},{group_size}]<={list(reshape_dims)} do not "
                         f"describe at most {MAX_WORLD_SIZE} devices")
    total = int(np.prod(reshape_dims)) if reshape_dims else num_groups * group_size
    if not reshape_dims:
        reshape_dims = [total]
    if total != num_groups * group_size:
        raise InputError(f"{where}: iota replica groups [{num_groups},{group_size}] do not hold the "
                         f"{total} devices of {list(reshape_dims)}")
    perm = list(perm) if perm else list(range(len(reshape_dims)))
    if sorted(perm) != list(range(len(reshape_dims))):
        raise InputError(f"{where}: iota replica groups: T{tuple(perm)} is not a permutation of "
                         f"{len(reshape_dims)} dims")
    ids = np.transpose(np.arange(total).reshape(reshape_dims), perm).reshape(num_groups, group_size)
    return [[int(x) for x in row] for row in ids]


def mesh_groups(axis_sizes: list[int], device_ids: list[int] | None, iota: tuple | None,
                axes: list[tuple[int, int | None, int | None]], where: str) -> list[list[int]]:
    """Mesh-axes replica groups (Shardy; text ``mesh['x'=2,'y'=4] {'y'}``, proto field 93): the devices of a
    mesh whose coordinates differ only along the grouped ``axes`` -- each ``(mesh axis, pre_size, size)``,
    the sizes set for a sub-axis ``'y':(pre_size)size``. As XLA computes them: the device array (``device_ids``,
    or ``iota`` = (reshape_dims, transpose_perm), or 0..n-1) shaped like the mesh, each grouped axis reshaped to
    [pre_size, size, rest] for a sub-axis, transposed so the grouped dims come last (in mesh-axis order, the
    sub-axes of one axis in the order given), read as rows of the group size."""
    if any(d < 1 for d in axis_sizes) or int(np.prod(axis_sizes, dtype=object) if axis_sizes else 1) > MAX_WORLD_SIZE:
        raise InputError(f"{where}: a mesh of axes {list(axis_sizes)} is not one of at most {MAX_WORLD_SIZE} devices")
    n = int(np.prod(axis_sizes)) if axis_sizes else 1
    if device_ids:
        if len(device_ids) != n:
            raise InputError(f"{where}: mesh of {n} devices lists {len(device_ids)} device ids")
        devices = np.asarray(device_ids, dtype=np.int64)
    elif iota is not None and iota[0]:
        dims, perm = list(iota[0]), list(iota[1]) or list(range(len(iota[0])))
        if int(np.prod(dims)) != n or sorted(perm) != list(range(len(dims))):
            raise InputError(f"{where}: mesh iota transform {dims} T{tuple(perm)} does not hold {n} devices")
        devices = np.transpose(np.arange(n).reshape(dims), perm).reshape(-1)
    else:
        devices = np.arange(n)
    by_axis: dict[int, list[tuple[int, int, int]]] = {}
    for k, (a, pre, size) in enumerate(axes):
        if not 0 <= a < len(axis_sizes):
            raise InputError(f"{where}: mesh-axes replica groups name axis {a} of a {len(axis_sizes)}-axis mesh")
        full = axis_sizes[a]
        pre, size = (1, full) if size is None else (pre or 1, size)
        if size < 1 or full % (pre * size):
            raise InputError(f"{where}: sub-axis ({pre}){size} does not divide mesh axis {a} of size {full}")
        by_axis.setdefault(a, []).append((pre, size, k))
    reshape, grouped = [], []
    for a, full in enumerate(axis_sizes):
        subs = by_axis.get(a)
        if not subs:
            reshape.append(full)
            continue
        prefix, slots = 1, {}
        for pre, size, k in sorted(subs):
            if pre < prefix or pre % prefix:
                raise InputError(f"{where}: overlapping sub-axes of mesh axis {a}")
            if pre != prefix:
                reshape.append(pre // prefix)
                prefix = pre
            slots[k] = len(reshape)
            reshape.append(size)
            prefix *= size
        if prefix != full:
            reshape.append(full // prefix)
        grouped += [slots[k] for k in sorted(slots)]  # the order the sub-axes were given in
    rest = [d for d in range(len(reshape)) if d not in grouped]
    per_group = int(np.prod([reshape[d] for d in grouped])) if grouped else 1
    arr = np.transpose(devices.reshape(reshape), rest + grouped).reshape(-1, per_group)
    return [[int(x) for x in row] for row in arr]


def numpy_dtype(dtype: str):
    """How values of an IR dtype are held while converting (as the references compute): float64 for every
    floating type, exact integers, bool."""
    if dtype == "bool":
        return np.bool_
    if dtype.startswith(("int", "uint")) and dtype not in ("int4", "uint4"):
        return np.dtype(dtype)
    return np.float64


def stored(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float values rounded to what their type stores, held as float64 (:func:`numpy_dtype`): a printed constant
    (``f32[] constant(1e-05)`` holds the float32 nearest 1e-05, as a binary module does), and each folded op's
    result, as the program computes it in its type (``exponential(iota * c)`` in float32: the product rounded
    before the exponential). Other dtypes as they are."""
    if dtype in ("float16", "float32"):
        return np.asarray(x).astype(dtype).astype(np.float64)
    if dtype == "bfloat16":  # round to nearest even on the upper 16 bits of the float32
        u = np.asarray(x).astype(np.float32).view(np.uint32).astype(np.uint64)
        u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
        return u.astype(np.uint32).view(np.float32).astype(np.float64)
    return x


def loc_of(source_file: str, line: int) -> str | None:
    if not source_file:
        return None
    base = source_file.replace("\\", "/").rsplit("/", 1)[-1]
    return f"{base}:{line}" if line else base
