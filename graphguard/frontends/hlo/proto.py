"""Read ``HloModuleProto`` binaries (bare, or inside ``HloProto`` / ``HloSnapshot``) into a :class:`Module`.

The schema is ``hlo.proto`` beside this file: a subset of XLA's with XLA's field numbers. It is read with
a small grammar (messages, nested messages, scalar and message fields -- all the subset uses) into a
``FileDescriptorProto`` and message classes are made from it at import time: no protoc, no generated code,
no TensorFlow. The classes live in a private descriptor pool, so they never clash with another copy of the
XLA schema (jaxlib's) in the same process.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError
from lark import Lark

from graphguard.errors import InputError
from graphguard.inputfile import malformed

from .module import DTYPES, ELIDED, Computation, Instruction, Module, Shape, iota_groups, loc_of, mesh_groups

SCHEMA = Path(__file__).with_name("hlo.proto")

_PROTO_GRAMMAR = r"""
start: (syntax | package | message)*
syntax: "syntax" "=" STRING ";"
package: "package" NAME ";"
message: "message" NAME "{" (field | message)* "}"
field: REPEATED? NAME NAME "=" INT ";"
REPEATED: "repeated"
NAME: /[A-Za-z_][A-Za-z0-9_.]*/
STRING: /"[^"]*"/
COMMENT: /\/\/[^\n]*/
%import common.INT
%import common.WS
%ignore WS
%ignore COMMENT
"""

_SCALARS = {"int64": "TYPE_INT64", "int32": "TYPE_INT32", "uint64": "TYPE_UINT64", "uint32": "TYPE_UINT32",
            "bool": "TYPE_BOOL", "string": "TYPE_STRING", "bytes": "TYPE_BYTES", "float": "TYPE_FLOAT",
            "double": "TYPE_DOUBLE"}


def _file_descriptor(text: str) -> descriptor_pb2.FileDescriptorProto:
    """The ``FileDescriptorProto`` of a proto3 file written in the subset the grammar accepts."""
    tree = Lark(_PROTO_GRAMMAR, parser="lalr").parse(text)
    fdp = descriptor_pb2.FileDescriptorProto(name="graphguard/frontends/hlo/hlo.proto", syntax="proto3")
    declared: set[str] = set()

    def collect(node, scope: str) -> None:
        name = f"{scope}.{node.children[0]}"
        declared.add(name)
        for ch in node.children[1:]:
            if ch.data == "message":
                collect(ch, name)

    def build(node, scope: str, out) -> None:
        out.name = str(node.children[0])
        here = f"{scope}.{out.name}"
        for ch in node.children[1:]:
            if ch.data == "message":
                build(ch, here, out.nested_type.add())
                continue
            *label, ftype, fname, number = ch.children
            f = out.field.add(name=str(fname), number=int(number), json_name=str(fname))
            f.label = f.LABEL_REPEATED if label else f.LABEL_OPTIONAL
            if str(ftype) in _SCALARS:
                f.type = getattr(f, _SCALARS[str(ftype)])
                continue
            for s in [here] + [here.rsplit(".", k)[0] for k in range(1, here.count("."))]:  # innermost first
                if f"{s}.{ftype}" in declared:
                    f.type, f.type_name = f.TYPE_MESSAGE, f"{s}.{ftype}"
                    break
            else:
                raise ValueError(f"{SCHEMA}: unknown type {ftype} of field {fname} in {here}")

    package = ""
    for ch in tree.children:
        if ch.data == "package":
            package = str(ch.children[0])
    fdp.package = package
    for ch in tree.children:
        if ch.data == "message":
            collect(ch, "." + package)
    for ch in tree.children:
        if ch.data == "message":
            build(ch, "." + package, fdp.message_type.add())
    return fdp


def _classes() -> dict:
    pool = descriptor_pool.DescriptorPool()
    fdp = _file_descriptor(SCHEMA.read_text())
    pool.Add(fdp)
    return {m.name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{fdp.package}.{m.name}"))
            for m in fdp.message_type}


MESSAGES = _classes()
HloModuleProto = MESSAGES["HloModuleProto"]
HloProto = MESSAGES["HloProto"]
HloSnapshot = MESSAGES["HloSnapshot"]

# xla_data.proto PrimitiveType
PRIMITIVE = {1: "pred", 2: "s8", 3: "s16", 4: "s32", 5: "s64", 6: "u8", 7: "u16", 8: "u32", 9: "u64", 10: "f16",
             11: "f32", 12: "f64", 13: "tuple", 14: "opaque", 15: "c64", 16: "bf16", 17: "token", 18: "c128",
             19: "f8e5m2", 20: "f8e4m3fn", 21: "s4", 22: "u4", 24: "f8e5m2fnuz", 25: "f8e4m3fnuz", 28: "f8e4m3"}


# =================================================================================================
# Reading
# =================================================================================================

def read_proto(data: bytes, source: str) -> Module:
    """A module from serialized ``HloSnapshot``, ``HloProto`` or bare ``HloModuleProto`` bytes (tried in that
    order: the three share field 1, so the first reading that holds a well-formed module wins)."""
    readings = []
    for kind, cls, get in (("HloSnapshot", HloSnapshot, lambda m: m.hlo.hlo_module),
                           ("HloProto", HloProto, lambda m: m.hlo_module),
                           ("HloModuleProto", HloModuleProto, lambda m: m)):
        try:
            msg = cls.FromString(data)
        except (DecodeError, RuntimeError, ValueError) as e:
            readings.append(f"not an {kind} ({e})" if str(e) else f"not an {kind}")
            continue
        mod = get(msg)
        problem = _plausible(mod)
        if problem is None:
            return _module(mod, source)
        readings.append(f"as an {kind}: {problem}")
    raise InputError(f"{source}: not a readable HLO module (truncated or not HLO?): {readings[-1]}")


def _plausible(m) -> str | None:
    if not m.computations:
        return "no computations"
    for c in m.computations:
        if not c.instructions:
            return f"computation '{c.name}' has no instructions"
        for i in c.instructions:
            if not i.opcode or not i.name:
                return f"an instruction of '{c.name}' has no name or opcode"
    return None


def _shape(s, where: str) -> Shape:
    t = PRIMITIVE.get(s.element_type)
    if t is None:
        raise InputError(f"{where}: unsupported element type {s.element_type}")
    if t == "tuple":
        return Shape("tuple", (), tuple(_shape(e, where) for e in s.tuple_shapes))
    if t in ("token", "opaque"):
        return Shape(t)
    if any(s.is_dynamic_dimension):
        raise InputError(f"{where}: dynamic dimensions are not supported")
    return Shape(DTYPES[t], tuple(int(d) for d in s.dimensions))


_BYTES = {"f16s": "<f2", "u16s": "<u2", "s16s": "<i2", "u8s": "u1", "s8s": "i1"}
_FIELD = {"bool": "preds", "int8": "s8s", "uint8": "u8s", "int16": "s16s", "uint16": "u16s", "int32": "s32s",
          "int64": "s64s", "uint32": "u32s", "uint64": "u64s", "float16": "f16s", "bfloat16": "bf16s",
          "float32": "f32s", "float64": "f64s"}


def _literal(lit, shape: Shape, layout, where: str):
    field = _FIELD.get(shape.dtype)
    if field is None:
        raise InputError(f"{where}: constants of type {shape.dtype} are not supported")
    raw = getattr(lit, field)
    if field == "bf16s":
        vals = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
    elif field in _BYTES:
        vals = np.frombuffer(raw, _BYTES[field])
    else:
        vals = np.asarray(list(raw))
    n = int(np.prod(shape.dims)) if shape.dims else 1
    if vals.size != n:
        raise InputError(f"{where}: constant holds {vals.size} values for shape {shape}")
    m2m = list(layout.minor_to_major) if layout is not None else []
    if len(m2m) == len(shape.dims) and m2m != list(range(len(shape.dims)))[::-1]:
        major = m2m[::-1]  # values are stored in the layout's order: major to minor
        vals = np.transpose(vals.reshape([shape.dims[d] for d in major]), np.argsort(major))
    return np.asarray(vals).reshape(shape.dims)


def _groups(i, where: str) -> list[list[int]]:
    cdl = i.collective_device_list
    if i.HasField("iota_collective_device_list"):
        return _iota(i.iota_collective_device_list, where)
    if cdl.HasField("iota_replica_group_list"):
        return _iota(cdl.iota_replica_group_list, where)
    if cdl.replica_groups:
        return [list(g.replica_ids) for g in cdl.replica_groups]
    if i.replica_groups:
        return [list(g.replica_ids) for g in i.replica_groups]
    if i.HasField("mesh_axes_replica_group_list"):
        g = i.mesh_axes_replica_group_list
        it = g.mesh.iota_transform if g.mesh.HasField("iota_transform") else None
        axes = [(int(a.mesh_axis_index), int(a.sub_axis_info.pre_size) if a.HasField("sub_axis_info") else None,
                 int(a.sub_axis_info.size) if a.HasField("sub_axis_info") else None) for a in g.axes]
        return mesh_groups([int(a.size) for a in g.mesh.axes], [int(d) for d in g.mesh.device_ids],
                           (list(it.reshape_dims), list(it.transpose_perm)) if it is not None else None, axes, where)
    return []


def _iota(p, where: str) -> list[list[int]]:
    return iota_groups(int(p.num_replica_groups), int(p.num_devices_per_group), list(p.iota_reshape_dims),
                       list(p.iota_transpose_perm), where)


def _instruction(i, names: dict[int, str], comps: dict[int, str], source: str, frames=None) -> Instruction:
    where = f"{source}: instruction '{i.name}' ({i.opcode})"
    shape = _shape(i.shape, where)
    attrs: dict = {}
    op = i.opcode
    for o in i.operand_ids:
        if o not in names:
            raise InputError(f"{where}: operand id {o} names no instruction of its computation")
    for c in i.called_computation_ids:
        if c not in comps:
            raise InputError(f"{where}: called computation id {c} names no computation of the module")
    if op == "parameter":
        attrs["parameter_number"] = int(i.parameter_number)
    if op == "get-tuple-element":
        attrs["tuple_index"] = int(i.tuple_index)
    attrs["dimensions"] = [int(d) for d in i.dimensions]
    if i.slice_dimensions:
        attrs["slice"] = [(int(s.start), int(s.limit), int(s.stride) or 1) for s in i.slice_dimensions]
    if i.dynamic_slice_sizes:
        attrs["dynamic_slice_sizes"] = [int(d) for d in i.dynamic_slice_sizes]
    if i.HasField("padding_config"):
        attrs["padding"] = [(int(d.edge_padding_low), int(d.edge_padding_high), int(d.interior_padding))
                            for d in i.padding_config.dimensions]
    if i.HasField("dot_dimension_numbers"):
        d = i.dot_dimension_numbers
        attrs["dot"] = {"lhs_batch": list(d.lhs_batch_dimensions), "rhs_batch": list(d.rhs_batch_dimensions),
                        "lhs_contracting": list(d.lhs_contracting_dimensions),
                        "rhs_contracting": list(d.rhs_contracting_dimensions)}
    if i.HasField("gather_dimension_numbers"):
        g = i.gather_dimension_numbers
        attrs["gather"] = {"offset_dims": list(g.offset_dims), "collapsed_slice_dims": list(g.collapsed_slice_dims),
                           "start_index_map": list(g.start_index_map), "index_vector_dim": int(g.index_vector_dim),
                           "operand_batching_dims": list(g.operand_batching_dims),
                           "start_indices_batching_dims": list(g.start_indices_batching_dims),
                           "slice_sizes": [int(s) for s in i.gather_slice_sizes]}
    if i.comparison_direction:
        attrs["direction"] = i.comparison_direction
    attrs["replica_groups"] = _groups(i, where)
    if i.source_target_pairs:
        attrs["source_target_pairs"] = [(int(p.source), int(p.target)) for p in i.source_target_pairs]
    attrs["channel_id"] = int(i.channel_id) if i.channel_id > 0 else None
    attrs["use_global_device_ids"] = bool(i.use_global_device_ids)
    if i.custom_call_target:
        attrs["custom_call_target"] = i.custom_call_target
    if i.backend_config:
        attrs["backend_config"] = i.backend_config.decode("utf-8", "replace")
    if i.fusion_kind:
        attrs["fusion_kind"] = i.fusion_kind
    literal = None
    if op == "constant":
        if not i.HasField("literal"):
            literal = ELIDED
        elif shape.is_tuple:
            raise InputError(f"{where}: tuple constants are not supported")
        else:
            own = i.literal.shape if i.literal.HasField("shape") and i.literal.shape.HasField("layout") else None
            layout = own.layout if own is not None else i.shape.layout if i.shape.HasField("layout") else None
            literal = _literal(i.literal, shape, layout, where)
    loc = None
    if i.HasField("metadata"):
        loc = loc_of(i.metadata.source_file, i.metadata.source_line)
        if loc is None and i.metadata.stack_frame_id and frames is not None:
            loc = _frame_loc(frames, int(i.metadata.stack_frame_id))
    return Instruction(i.name, op, shape, [names[o] for o in i.operand_ids],
                       [comps[c] for c in i.called_computation_ids], attrs, literal, loc)


def _frame_loc(index, frame_id: int) -> str | None:
    """``file.py:line`` of a stack frame (1-based ids, JAX's innermost user frame), or None."""
    try:
        loc = index.file_locations[index.stack_frames[frame_id - 1].file_location_id - 1]
        return loc_of(index.file_names[loc.file_name_id - 1], int(loc.line))
    except IndexError:
        return None


def _module(m, source: str) -> Module:
    comps = {int(c.id): c.name for c in m.computations}
    frames = m.stack_frame_index if m.HasField("stack_frame_index") else None
    out = {}
    for c in m.computations:
        names = {int(i.id): i.name for i in c.instructions}
        if len(names) != len(c.instructions):
            raise InputError(f"{source}: computation '{c.name}' gives two instructions the same id")
        ins = []
        for i in c.instructions:
            with malformed(f"{source}: instruction '{i.name}' ({i.opcode})", "instruction"):
                ins.append(_instruction(i, names, comps, source, frames))
        root = names.get(int(c.root_id), ins[-1].name)
        out[c.name] = Computation(c.name, ins, root)
    entry = m.entry_computation_name or comps.get(int(m.entry_computation_id)) or m.computations[-1].name
    da = m.device_assignment if m.HasField("device_assignment") else None
    return Module(m.name, out, entry, source, num_partitions=(da.computation_count or None) if da else None,
                  replica_count=(da.replica_count or None) if da else None).check()
