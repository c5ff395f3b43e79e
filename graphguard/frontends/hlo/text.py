"""Read HLO text (``HloModule ...``, as XLA prints it) into a :class:`Module`.

``hlo_text.lark`` splits the text into the module header, computations and instructions; attribute values,
shapes, operand lists and literals stay generic nested groups (:class:`Group` of items, each a list of
:class:`Atom`, :class:`Str`, ``=`` and groups) that this module interprets. Both spellings XLA has used are
read: operands with or without their shapes (``f32[8]{0} %x`` / ``x``), names with or without ``%``.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from graphguard.errors import InputError
from graphguard.inputfile import MAX_DEPTH, malformed, nesting

from .module import (DTYPES, ELIDED, Computation, Instruction, Module, Shape, iota_groups, loc_of, mesh_groups,
                     numpy_dtype, stored)


class Atom(str):
    """A bare token: a number, a name (``%x``), a type (``f32``), ``<=``..."""


class Str(str):
    """A quoted string, unescaped."""


@dataclass
class Group:
    kind: str  # "{", "[" or "("
    items: list  # each item: a list of pieces


class _Tree(Transformer):
    def atom(self, c):
        return Atom(c[0])

    def string(self, c):
        s = str(c[0])[1:-1]
        return Str(s.encode("utf-8").decode("unicode_escape") if "\\" in s else s)

    def _group(kind):
        def f(self, c):
            return Group(kind, c[0] or [])
        return f

    braces, brackets, parens = _group("{"), _group("["), _group("(")

    def items(self, c):
        return list(c)

    def item(self, c):
        return ["=" if isinstance(x, Token) and x.type == "EQ" else x for x in c]

    def attr(self, c):
        return (str(c[0]), list(c[2:]))

    def instruction(self, c):
        root = isinstance(c[0], Token) and c[0].type == "ROOT"
        c = c[1:] if root else c
        pieces = [x for x in c[2:] if not isinstance(x, tuple)]
        attrs = dict(x for x in c[2:] if isinstance(x, tuple))
        return {"root": root, "name": _name(c[0]), "pieces": pieces, "attrs": attrs, "line": c[0].line}

    def computation(self, c):
        entry = isinstance(c[0], Token) and c[0].type == "ENTRY"
        c = c[1:] if entry else c
        return {"entry": entry, "name": _name(c[0]), "instructions": [x for x in c[1:] if isinstance(x, dict)]}

    def start(self, c):
        attrs = dict(x for x in c[1:] if isinstance(x, tuple))
        return {"name": str(c[0]), "attrs": attrs, "computations": [x for x in c[1:] if isinstance(x, dict)]}


# the tree is transformed while parsing (LALR): about twice as fast as building it first
_PARSER = Lark(Path(__file__).with_name("hlo_text.lark").read_text(), parser="lalr", maybe_placeholders=True,
               transformer=_Tree())


def _name(tok) -> str:
    return str(tok).lstrip("%")


def looks_like_text(data: bytes) -> bool:
    return data.lstrip()[:9] == b"HloModule"


_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _stack_frames(text: str) -> tuple[str, dict]:
    """Cut the source-location tables newer XLA prints after the header (``FileNames``, ``FunctionNames``,
    ``FileLocations``, ``StackFrames``: numbered lines up to a blank one) out of the text, keeping its line
    numbers; return the text and ``{stack_frame_id: "file.py:line"}``."""
    if not any(f"\n{k}\n" in text for k in _SECTIONS):
        return text, {}
    lines = text.split("\n")
    tables: dict[str, dict[int, str]] = {}
    section = None
    for i, line in enumerate(lines):
        stripped = line.strip()
        if stripped in _SECTIONS:
            section = tables.setdefault(stripped, {})
            lines[i] = ""
        elif section is not None and stripped and stripped.split(" ", 1)[0].isdigit():
            k, _, rest = stripped.partition(" ")
            section[int(k)] = rest.strip()
            lines[i] = ""
        else:
            section = None
    def fields(s: str) -> dict:
        return dict(kv.split("=", 1) for kv in s.strip("{}").split() if "=" in kv)
    files = {k: v.strip('"') for k, v in tables.get("FileNames", {}).items()}
    locs = {k: fields(v) for k, v in tables.get("FileLocations", {}).items()}
    frames = {}
    for k, v in tables.get("StackFrames", {}).items():
        loc = locs.get(int(fields(v).get("file_location_id", 0)), {})
        where = loc_of(files.get(int(loc.get("file_name_id", 0)), ""), int(loc.get("line", 0) or 0))
        if where:
            frames[k] = where
    return "\n".join(lines), frames


def read_text(text: str, source: str) -> Module:
    if nesting(text, "()[]{}") > MAX_DEPTH:
        raise InputError(f"{source}: malformed HLO text (brackets nested more than {MAX_DEPTH} levels deep)")
    with malformed(source, "HLO text"):
        return _read_text(text, source)


def _read_text(text: str, source: str) -> Module:
    text, frames = _stack_frames(text)
    try:
        doc = _PARSER.parse(text)
    except UnexpectedInput as e:
        raise InputError(f"{source}:{e.line}:{e.column}: malformed HLO text ({_what(e)})") from None
    except VisitError as e:
        raise InputError(f"{source}: malformed HLO text ({e.orig_exc})") from None
    comps = {}
    for c in doc["computations"]:
        if c["name"] in comps:
            raise InputError(f"{source}: computation '{c['name']}' is defined twice")
        if not c["instructions"]:
            raise InputError(f"{source}: computation '{c['name']}' has no instructions")
        ins = [_instruction(i, source, frames) for i in c["instructions"]]
        seen = set()
        for i in ins:
            if i.name in seen:
                raise InputError(f"{source}: instruction '{i.name}' is defined twice in computation '{c['name']}'")
            seen.add(i.name)
        roots = [i["name"] for i in c["instructions"] if i["root"]]
        if len(roots) > 1:
            raise InputError(f"{source}: computation '{c['name']}' has {len(roots)} ROOT instructions")
        comps[c["name"]] = Computation(c["name"], ins, roots[-1] if roots else ins[-1].name)
    if not comps:
        raise InputError(f"{source}: the HLO module has no computations")
    entries = [c["name"] for c in doc["computations"] if c["entry"]]
    if len(entries) > 1:
        raise InputError(f"{source}: the HLO module has {len(entries)} ENTRY computations")
    header = doc["attrs"]
    return Module(doc["name"], comps, entries[-1] if entries else list(comps)[-1], source,
                  num_partitions=_opt_int(header.get("num_partitions"), source),
                  replica_count=_opt_int(header.get("replica_count"), source)).check()


def _what(e: UnexpectedInput) -> str:
    if isinstance(e, UnexpectedToken):
        tok = e.token
        return "unexpected end of text" if tok.type == "$END" else f"unexpected {str(tok)!r}"
    if isinstance(e, UnexpectedCharacters):
        return f"unexpected character {e.char!r}"
    if isinstance(e, UnexpectedEOF):
        return "unexpected end of text"
    return type(e).__name__


def _opt_int(pieces, source):
    if pieces is None:
        return None
    return _int(pieces, f"{source}: header")


# -- interpreting generic pieces ------------------------------------------------------------------

def _atom(pieces, where: str) -> str:
    if len(pieces) != 1 or not isinstance(pieces[0], str):
        raise InputError(f"{where}: expected one value, got {_show(pieces)}")
    return str(pieces[0])


def _int(pieces, where: str) -> int:
    s = _atom(pieces, where)
    try:
        return int(s)
    except ValueError:
        raise InputError(f"{where}: expected an integer, got {s!r}") from None


def _ints(pieces, where: str) -> list[int]:
    if len(pieces) != 1 or not isinstance(pieces[0], Group) or pieces[0].kind != "{":
        raise InputError(f"{where}: expected {{...}} of integers, got {_show(pieces)}")
    return [_int(it, where) for it in pieces[0].items]


def _show(pieces) -> str:
    def one(p):
        if isinstance(p, Group):
            close = {"{": "}", "[": "]", "(": ")"}[p.kind]
            return p.kind + ",".join(" ".join(map(one, it)) for it in p.items) + close
        return f'"{p}"' if isinstance(p, Str) else str(p)
    return " ".join(map(one, pieces))


def _shape(pieces, where: str) -> Shape:
    if len(pieces) == 1 and isinstance(pieces[0], Group) and pieces[0].kind == "(":
        return Shape("tuple", (), tuple(_shape(it, where) for it in pieces[0].items))
    if not pieces or not isinstance(pieces[0], Atom):
        raise InputError(f"{where}: expected a shape, got {_show(pieces)}")
    t = str(pieces[0]).lower()
    if t in ("token", "opaque"):
        return Shape(t)
    if t not in DTYPES or len(pieces) < 2 or not isinstance(pieces[1], Group) or pieces[1].kind != "[":
        raise InputError(f"{where}: expected a shape such as f32[8,16], got {_show(pieces)}")
    dims = []
    for it in pieces[1].items:
        d = _atom(it, where)
        if not (d.isascii() and d.isdigit()) or len(d) > 18:
            raise InputError(f"{where}: dimension {d!r} in {_show(pieces)} is not supported (dynamic shapes)")
        dims.append(_int([d], where))
    return Shape(DTYPES[t], tuple(dims))


def _number(s: str):
    if not s.isascii():
        raise ValueError(s)
    low = s.lower()
    if low in ("true", "false"):
        return low == "true"
    if low.lstrip("+-") in ("inf", "nan"):
        return float(low)
    if "0x" in low:
        return float.fromhex(low)
    try:
        return int(s)
    except ValueError:
        return float(s)


def _literal(pieces, shape: Shape, where: str):
    if shape.is_tuple:
        raise InputError(f"{where}: tuple constants are not supported")
    values: list = []

    def walk(p):
        if isinstance(p, Group):
            for it in p.items:
                for x in it:
                    walk(x)
        elif isinstance(p, str) and p != "=":
            values.append(str(p))
    for p in pieces:
        walk(p)
    if values == ["..."]:
        return ELIDED
    try:
        nums = [_number(v) for v in values]
    except ValueError:
        raise InputError(f"{where}: malformed constant {_show(pieces)}") from None
    n = int(np.prod(shape.dims)) if shape.dims else 1
    if len(nums) != n:
        raise InputError(f"{where}: constant holds {len(nums)} values for shape {shape}")
    return stored(np.asarray(nums, dtype=numpy_dtype(shape.dtype)), shape.dtype).reshape(shape.dims)


def _mesh_groups(pieces, where: str) -> list[list[int]]:
    """``mesh['x'=2,'y'=4] {'y'}`` (sub-axes ``'y':(2)2``; explicit device ids as a trailing ``(...)`` group of
    the mesh): see :func:`.module.mesh_groups`."""
    try:
        axes_group, rest = pieces[1], pieces[2:]
        names, sizes = [], []
        for it in axes_group.items:
            names.append(str(it[0]).strip("'\""))
            sizes.append(int(it[2]))
        device_ids = None
        if rest and isinstance(rest[0], Group) and rest[0].kind == "(":
            device_ids = [int(x) for it in rest[0].items for x in it if isinstance(x, Atom)]
            rest = rest[1:]
        (grouped,) = rest
        axes = []
        for it in grouped.items:
            name = str(it[0]).rstrip(":").strip("'\"")
            if len(it) == 3:  # 'y': (pre) size
                axes.append((names.index(name), int(it[1].items[0][0]), int(it[2])))
            else:
                axes.append((names.index(name), None, None))
    except (ValueError, IndexError, TypeError, AttributeError):
        raise InputError(f"{where}: cannot read replica_groups={_show(pieces)}") from None
    return mesh_groups(sizes, device_ids, None, axes, where)


def _replica_groups(pieces, where: str) -> list[list[int]]:
    if pieces and isinstance(pieces[0], Atom) and pieces[0].lstrip("@") == "mesh":
        return _mesh_groups(pieces, where)
    if len(pieces) == 1 and isinstance(pieces[0], Group) and pieces[0].kind == "{":
        return [_ints([it[0]], where) if len(it) == 1 else _ints(it, where) for it in pieces[0].items]
    # iota form: [G,S]<=[dims] optionally followed by T(perm)
    ok = (len(pieces) in (3, 5) and isinstance(pieces[0], Group) and pieces[0].kind == "["
          and pieces[1] == "<=" and isinstance(pieces[2], Group) and pieces[2].kind == "[")
    if ok and len(pieces) == 5:
        ok = pieces[3] == "T" and isinstance(pieces[4], Group) and pieces[4].kind == "("
    if not ok:
        raise InputError(f"{where}: cannot read replica_groups={_show(pieces)}")
    gs = [_int(it, where) for it in pieces[0].items]
    if len(gs) != 2:
        raise InputError(f"{where}: iota replica groups need [groups,size], got {_show(pieces)}")
    dims = [_int(it, where) for it in pieces[2].items]
    perm = [_int(it, where) for it in pieces[4].items] if len(pieces) == 5 else None
    return iota_groups(gs[0], gs[1], dims, perm, where)


def _pairs(pieces, where: str) -> list[tuple[int, int]]:
    if len(pieces) != 1 or not isinstance(pieces[0], Group):
        raise InputError(f"{where}: cannot read source_target_pairs={_show(pieces)}")
    out = []
    for it in pieces[0].items:
        p = _ints(it, where)
        if len(p) != 2:
            raise InputError(f"{where}: a source-target pair needs two ranks, got {_show(it)}")
        out.append((p[0], p[1]))
    return out


def _computations(pieces, where: str) -> list[str]:
    if len(pieces) == 1 and isinstance(pieces[0], Group) and pieces[0].kind == "{":
        return [_name(_atom(it, where)) for it in pieces[0].items]
    return [_name(_atom(pieces, where))]


def _metadata(pieces, where: str, frames: dict | None = None) -> str | None:
    if len(pieces) != 1 or not isinstance(pieces[0], Group) or not pieces[0].items:
        return None
    kv, item = {}, pieces[0].items[0]
    for k in range(len(item) - 2):
        if item[k + 1] == "=" and isinstance(item[k], Atom):
            kv[str(item[k])] = str(item[k + 2])
    line = kv.get("source_line", "0")
    loc = loc_of(kv.get("source_file", ""), int(line) if line.isdigit() else 0)
    frame = kv.get("stack_frame_id", "")
    if loc is None and frames and frame.isdigit():
        loc = frames.get(int(frame))
    return loc


GATHER_KEYS = ("offset_dims", "collapsed_slice_dims", "start_index_map", "operand_batching_dims",
               "start_indices_batching_dims", "slice_sizes")
CALLS = ("calls", "to_apply", "true_computation", "false_computation", "branch_computations", "condition", "body",
         "called_computations")


def _instruction(d: dict, source: str, frames: dict | None = None) -> Instruction:
    where = f"{source}:{d['line']}: instruction '{d['name']}'"
    pieces = d["pieces"]
    if len(pieces) < 3 or not isinstance(pieces[-1], Group) or pieces[-1].kind != "(" \
            or not isinstance(pieces[-2], Atom):
        raise InputError(f"{where}: expected 'SHAPE OPCODE(OPERANDS)', got {_show(pieces)}")
    opcode = str(pieces[-2])
    where = f"{source}:{d['line']}: instruction '{d['name']}' ({opcode})"
    shape = _shape(pieces[:-2], where)
    args = pieces[-1].items
    attrs: dict = {"dimensions": [], "replica_groups": [], "channel_id": None, "use_global_device_ids": False}
    operands: list[str] = []
    literal = None
    if opcode == "parameter":
        if len(args) != 1:
            raise InputError(f"{where}: a parameter takes one number, got ({_show([pieces[-1]])[1:-1]})")
        attrs["parameter_number"] = _int(args[0], where)
    elif opcode == "constant":
        literal = _literal(args[0] if len(args) == 1 else [Group("{", args)], shape, where)
    else:
        for it in args:
            names = [p for p in it if isinstance(p, Atom)]
            if not names:
                raise InputError(f"{where}: cannot read operand {_show(it)}")
            operands.append(_name(names[-1]))
    called: list[str] = []
    a = d["attrs"]
    for key in CALLS:
        if key in a:
            called += _computations(a[key], where)
    gather = {}
    for key, val in a.items():
        w = f"{where}: attribute {key}"
        if key == "dimensions":
            attrs["dimensions"] = _ints(val, w)
        elif key == "iota_dimension":
            attrs["dimensions"] = [_int(val, w)]
        elif key == "slice":
            attrs["slice"] = _slices(val, w)
        elif key == "dynamic_slice_sizes":
            attrs["dynamic_slice_sizes"] = _ints(val, w)
        elif key == "padding":
            attrs["padding"] = _padding(_atom(val, w), w)
        elif key in ("lhs_batch_dims", "rhs_batch_dims", "lhs_contracting_dims", "rhs_contracting_dims"):
            attrs.setdefault("dot", {"lhs_batch": [], "rhs_batch": [], "lhs_contracting": [], "rhs_contracting": []})
            attrs["dot"][key[:-5]] = _ints(val, w)
        elif key in GATHER_KEYS and opcode == "gather":
            gather[key] = _ints(val, w)
        elif key == "index_vector_dim" and opcode == "gather":
            gather[key] = _int(val, w)
        elif key == "direction":
            attrs["direction"] = _atom(val, w)
        elif key == "replica_groups":
            attrs["replica_groups"] = _replica_groups(val, w)
        elif key == "source_target_pairs":
            attrs["source_target_pairs"] = _pairs(val, w)
        elif key == "channel_id":
            attrs["channel_id"] = _int(val, w)
        elif key == "use_global_device_ids":
            attrs["use_global_device_ids"] = _atom(val, w) == "true"
        elif key == "custom_call_target":
            attrs["custom_call_target"] = _atom(val, w)
        elif key == "backend_config":
            attrs["backend_config"] = str(val[0]) if len(val) == 1 and isinstance(val[0], Str) else _show(val)
        elif key == "kind":
            attrs["fusion_kind"] = _atom(val, w)
        elif key == "tuple_index" or (key == "index" and opcode == "get-tuple-element"):
            attrs["tuple_index"] = _int(val, w)
    if opcode == "gather":
        gather.setdefault("operand_batching_dims", [])
        gather.setdefault("start_indices_batching_dims", [])
        missing = [k for k in GATHER_KEYS + ("index_vector_dim",) if k not in gather]
        if missing:
            raise InputError(f"{where}: gather needs {', '.join(missing)}")
        attrs["gather"] = gather
    if opcode == "get-tuple-element" and "tuple_index" not in attrs:
        raise InputError(f"{where}: get-tuple-element needs index=")
    loc = _metadata(a["metadata"], where, frames) if "metadata" in a else None
    return Instruction(d["name"], opcode, shape, operands, called, attrs, literal, loc)


def _slices(pieces, where: str) -> list[tuple[int, int, int]]:
    if len(pieces) != 1 or not isinstance(pieces[0], Group):
        raise InputError(f"{where}: cannot read slice={_show(pieces)}")
    out = []
    for it in pieces[0].items:
        try:
            (g,) = it
            parts = [int(x) for x in _atom(g.items[0], where).split(":")]
            if len(parts) not in (2, 3):
                raise ValueError
        except (ValueError, AttributeError, IndexError, TypeError):
            raise InputError(f"{where}: cannot read slice={_show(pieces)}") from None
        out.append((parts[0], parts[1], parts[2] if len(parts) == 3 else 1))
    return out


def _padding(s: str, where: str) -> list[tuple[int, int, int]]:
    out = []
    for dim in s.split("x"):
        try:
            parts = [int(x) for x in dim.split("_")]
            if len(parts) not in (2, 3):
                raise ValueError
        except ValueError:
            raise InputError(f"{where}: cannot read padding={s}") from None
        out.append((parts[0], parts[1], parts[2] if len(parts) == 3 else 0))
    return out
