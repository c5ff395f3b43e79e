#!/usr/bin/env python3
"""Generate the NeuronX-style Llama-3 layer of this example as HLO -- no AWS software needed.

transformers-neuronx writes its models with a Python HLO builder and the Neuron compiler receives the
resulting ``HloModuleProto``; this script does the same with a small builder of its own (``Hlo`` below),
which prints HLO text and serialises the ``HloModuleProto`` with the ``hlo`` frontend's schema. The layer
follows transformers-neuronx's Llama decoder (``llama/hlo.py``, ``hlo.py``), manually partitioned for
tensor parallelism: the same module runs on every rank, its weights already sharded as parameters:

* hidden states hidden-major, ``f16[H, S, B]``; ``AwsNeuronRmsNorm`` over dim 0 on the ``f32`` copy
  (``backend_config="0"``, eps an ``f32[]`` operand, its result ``f16``); every weight through
  ``AwsNeuronTransferWithStaticRing``;
* the dtypes of transformers-neuronx's Llama: the projection, MLP and LM head weights in the model dtype
  (``amp``: ``f16``; ``llama/modules.py`` makes them ``LowMemoryLazyLinear(..., dtype=amp)``), the three RMSNorm
  weights ``f32[H]`` (``LlamaRMSNorm``'s ``UninitializedParameter()`` takes torch's default dtype, float32, and
  ``materialize`` copies the checkpoint's f16 weight into it: an exact upcast), passed to the kernel as they are
  (``hlo.rms_norm`` casts only the hidden states); its logits leave the module ``f16`` and are cast to ``f32`` on
  the host (``base._cast_logits``): here the cast is the module's last op;
* one fused QKV weight per rank ``f16[H, (q + 2 kv) * D]`` whose columns are this rank's q heads, then its
  KV heads' k, then their v; the projection sliced into q / k / v columns;
* RoPE: inverse frequencies from ``iota`` + ``exponential``, angles ``dot(positions, inv_freq)``,
  ``cosine`` / ``sine``, rotate-half with ``negate`` + ``concatenate``;
* KV cache parameters ``f16[T, B, kv, D]``: the new keys / values written at position P with
  ``dynamic-update-slice`` and returned; grouped-query attention repeats each KV head (``broadcast`` +
  ``reshape``); with tp > KV heads each KV head is replicated on tp / KV heads ranks (GQA.REPLICATED_HEADS);
* the attention mask of ``hlo.decoder_attention_mask``: ``start_ids`` ``s32[B]`` (left padding: each row's
  first valid position), key position ``<=`` query position (``cache_ids``) AND key position ``>=``
  ``start_ids[b]`` from ``iota`` / ``broadcast`` / ``compare`` / ``and`` as ``pred[B, S, T]``, applied as
  ``attention.mask`` does (``broadcast`` over the heads, ``select`` against -30000); softmax on the ``f32``
  copy of the scores (``attention.context``: "Upcast to f32 before computation") as ``reduce`` max,
  ``subtract``, ``exponential``, ``reduce`` add, ``divide``, the probabilities converted back to ``f16``;
* o_proj and down_proj row-parallel, each followed by ``all-reduce`` (``replica_groups={{0,1}}``); SwiGLU
  MLP with ``logistic``; then only the last position (``ln_lm_head``'s logits slice: with left padding every
  row's last token is at S - 1, a ``dynamic-slice`` at that constant), a final RmsNorm and the LM head
  sharded on the vocabulary: each rank returns its slice of the logits, vocab-major ``f32[V / tp, B]``.

``--tp 1`` is the sequential specification (same generator, no collective). ``--variant k-slice`` is the
bug: the K slice of the fused projection reads the Q columns.

    python3 make.py --tp 2 --out DIR            # DIR/spec.hlo, DIR/impl.hlo.pb, DIR/relation.yaml
    python3 make.py --tp 2 --print              # the implementation as HLO text
    python3 make.py --tp 8 --size llama-3.2-1b --out DIR   # Llama-3.2-1B's dimensions, one KV head per rank
"""
from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# model dimensions (Llama-3 proportions, tiny): 8 query heads share 4 KV heads
B, S, P = 2, 2, 4  # batch, new tokens, cached positions before them
T = P + S  # KV cache length
NH, NKV, D = 8, 4, 4  # query heads, KV heads, head dim
H, F, V = NH * D, 64, 64  # hidden, MLP intermediate, vocabulary
EPS, THETA = 1e-5, 500000.0  # Llama-3's rope_theta
ETYPES = {"pred": 1, "s32": 4, "f16": 10, "f32": 11}
NORM_DTYPE = "f32"  # transformers-neuronx's RMSNorm weights (llama/modules.py: LlamaRMSNorm, torch's default dtype)


@dataclass
class Ref:
    name: str
    dtype: str
    dims: tuple

    def text(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.dims))}]{_layout(self.dims)}"


@dataclass
class Ins:
    name: str
    opcode: str
    dtype: str  # "tuple" for the root tuple
    dims: tuple
    operands: list
    attrs: dict = field(default_factory=dict)
    line: int = 0
    elements: list = field(default_factory=list)  # tuple result: the element Refs


def _layout(dims) -> str:
    return "{" + ",".join(map(str, reversed(range(len(dims))))) + "}" if dims else ""


def _ints(xs) -> str:
    return "{" + ",".join(map(str, xs)) + "}"


def _num(v: float) -> str:
    if math.isinf(v):
        return "-inf" if v < 0 else "inf"
    return repr(float(v)) if not float(v).is_integer() else str(int(v))


class Hlo:
    """A module under construction: one entry computation, plus the reducers it calls."""

    def __init__(self, name: str, source: str):
        self.name, self.source = name, source
        self.ins: list[Ins] = []
        self.reducers: dict[str, tuple[str, str]] = {}  # name -> (dtype, opcode)
        self.params = 0

    def _add(self, name, opcode, dtype, dims, operands=(), **attrs) -> Ref:
        assert all(i.name != name for i in self.ins), name
        line = sys._getframe(2).f_lineno  # the model line that asked for it (metadata: source_line)
        self.ins.append(Ins(name, opcode, dtype, tuple(dims), [o.name for o in operands], attrs, line))
        return Ref(name, dtype, tuple(dims))

    # -- instructions -------------------------------------------------------------------------
    def parameter(self, name, dtype, dims):
        self.params += 1
        return self._add(name, "parameter", dtype, dims, parameter_number=self.params - 1)

    def constant(self, name, dtype, value, dims=()):
        return self._add(name, "constant", dtype, dims, literal=np.asarray(value))

    def iota(self, name, dtype, dims, dim):
        return self._add(name, "iota", dtype, dims, iota_dimension=dim)

    def unary(self, opcode, name, x, dtype=None):
        return self._add(name, opcode, dtype or x.dtype, x.dims, [x])

    def binary(self, opcode, name, a, b):
        return self._add(name, opcode, a.dtype, a.dims, [a, b])

    def convert(self, name, x, dtype):
        return self._add(name, "convert", dtype, x.dims, [x])

    def compare(self, name, a, b, direction):
        return self._add(name, "compare", "pred", a.dims, [a, b], direction=direction)

    def select(self, name, p, a, b):
        return self._add(name, "select", a.dtype, a.dims, [p, a, b])

    def broadcast(self, name, x, dims, dimensions):
        return self._add(name, "broadcast", x.dtype, dims, [x], dimensions=list(dimensions))

    def reshape(self, name, x, dims):
        assert math.prod(dims) == math.prod(x.dims), (name, dims, x.dims)
        return self._add(name, "reshape", x.dtype, dims, [x])

    def transpose(self, name, x, perm):
        return self._add(name, "transpose", x.dtype, [x.dims[p] for p in perm], [x], dimensions=list(perm))

    def slice(self, name, x, bounds):
        dims = [b - a for a, b in bounds]
        return self._add(name, "slice", x.dtype, dims, [x], slice=list(bounds))

    def concatenate(self, name, xs, dim):
        dims = list(xs[0].dims)
        dims[dim] = sum(x.dims[dim] for x in xs)
        return self._add(name, "concatenate", xs[0].dtype, dims, xs, dimensions=[dim])

    def dynamic_slice(self, name, x, starts, sizes):
        return self._add(name, "dynamic-slice", x.dtype, sizes, [x, *starts], dynamic_slice_sizes=list(sizes))

    def dynamic_update_slice(self, name, x, u, starts):
        return self._add(name, "dynamic-update-slice", x.dtype, x.dims, [x, u, *starts])

    def dot(self, name, a, b, lc, rc, lb=(), rb=(), dtype=None):
        lf = [d for d in range(len(a.dims)) if d not in (*lb, *lc)]
        rf = [d for d in range(len(b.dims)) if d not in (*rb, *rc)]
        dims = [a.dims[d] for d in lb] + [a.dims[d] for d in lf] + [b.dims[d] for d in rf]
        return self._add(name, "dot", dtype or a.dtype, dims, [a, b],
                         dot={"lhs_batch": list(lb), "rhs_batch": list(rb), "lhs_contracting": list(lc),
                              "rhs_contracting": list(rc)})

    def reduce(self, name, x, init, dims, kind):
        reducer = f"{kind}_{x.dtype}"
        self.reducers[reducer] = (x.dtype, {"add": "add", "max": "maximum"}[kind])
        out = [n for d, n in enumerate(x.dims) if d not in dims]
        return self._add(name, "reduce", x.dtype, out, [x, init], dimensions=list(dims), to_apply=reducer)

    def custom_call(self, name, target, operands, dtype, dims, backend_config=None):
        attrs = {"custom_call_target": target}
        if backend_config is not None:
            attrs["backend_config"] = backend_config
        return self._add(name, "custom-call", dtype, dims, operands, **attrs)

    def all_reduce(self, name, x, groups, channel):
        reducer = f"add_{x.dtype}"
        self.reducers[reducer] = (x.dtype, "add")
        return self._add(name, "all-reduce", x.dtype, x.dims, [x], replica_groups=groups, channel_id=channel,
                         to_apply=reducer)

    def tuple(self, name, xs):
        self._add(name, "tuple", "tuple", (), xs)
        self.ins[-1].elements = list(xs)

    # -- HLO text -------------------------------------------------------------------------------
    def text(self) -> str:
        by = {i.name: i for i in self.ins}
        shape = lambda i: (f"({', '.join(e.text() for e in i.elements)})" if i.dtype == "tuple"  # noqa: E731
                           else Ref(i.name, i.dtype, i.dims).text())
        params = [i for i in self.ins if i.opcode == "parameter"]
        root = self.ins[-1]
        layout = f"({', '.join(shape(p) for p in params)})->{shape(root)}"
        out = [f"HloModule {self.name}, entry_computation_layout={{{layout}}}", ""]
        for r, (dt, op) in sorted(self.reducers.items()):
            out += [f"%{r} (x: {dt}[], y: {dt}[]) -> {dt}[] {{", f"  %x = {dt}[] parameter(0)",
                    f"  %y = {dt}[] parameter(1)", f"  ROOT %r = {dt}[] {op}({dt}[] %x, {dt}[] %y)", "}", ""]
        sig = ", ".join(f"{p.name}: {p.dtype}[{','.join(map(str, p.dims))}]" for p in params)
        ret = ", ".join(f"{e.dtype}[{','.join(map(str, e.dims))}]" for e in root.elements)
        out.append(f"ENTRY %{self.name} ({sig}) -> ({ret}) {{")
        for i in self.ins:
            ops = ", ".join(f"{shape(by[o])} %{o}" for o in i.operands)
            a = i.attrs
            if i.opcode == "parameter":
                args = str(a["parameter_number"])
            elif i.opcode == "constant":
                v = a["literal"]
                args = _num(float(v)) if v.ndim == 0 else "{" + ", ".join(_num(float(x)) for x in v.reshape(-1)) + "}"
            else:
                args = ops
            extra = []
            if i.opcode == "iota":
                extra.append(f"iota_dimension={a['iota_dimension']}")
            if "slice" in a:
                extra.append("slice={" + ", ".join(f"[{s}:{e}]" for s, e in a["slice"]) + "}")
            if "dimensions" in a:
                extra.append(f"dimensions={_ints(a['dimensions'])}")
            if "dynamic_slice_sizes" in a:
                extra.append(f"dynamic_slice_sizes={_ints(a['dynamic_slice_sizes'])}")
            if "dot" in a:
                d = a["dot"]
                for k in ("lhs_batch", "lhs_contracting", "rhs_batch", "rhs_contracting"):
                    if d[k]:
                        extra.append(f"{k}_dims={_ints(d[k])}")
            if "direction" in a:
                extra.append(f"direction={a['direction']}")
            if "channel_id" in a:
                extra.append(f"channel_id={a['channel_id']}")
            if "replica_groups" in a:
                extra.append("replica_groups={" + ",".join(_ints(g) for g in a["replica_groups"]) + "}")
            if "to_apply" in a:
                extra.append(f"to_apply=%{a['to_apply']}")
            if "custom_call_target" in a:
                extra.append(f"custom_call_target=\"{a['custom_call_target']}\"")
                extra.append("api_version=API_VERSION_UNSPECIFIED")
            if "backend_config" in a:
                extra.append(f"backend_config=\"{a['backend_config']}\"")
            if i.opcode not in ("parameter", "tuple"):
                extra.append(f"metadata={{op_type=\"{i.opcode}\" op_name=\"{self.name}/{i.name}\" "
                             f"source_file=\"{self.source}\" source_line={i.line}}}")
            head = "ROOT " if i is root else ""
            out.append(f"  {head}%{i.name} = {shape(i)} {i.opcode}({args}){''.join(', ' + e for e in extra)}")
        out.append("}")
        return "\n".join(out) + "\n"

    # -- HloModuleProto -------------------------------------------------------------------------
    def proto(self) -> bytes:
        from graphguard.frontends.hlo.proto import HloModuleProto

        m = HloModuleProto(name=self.name, entry_computation_name=self.name, id=1)

        def set_shape(msg, dtype, dims, elements=()):
            if dtype == "tuple":
                msg.element_type = 13
                for e in elements:
                    set_shape(msg.tuple_shapes.add(), e.dtype, e.dims)
                return
            msg.element_type = ETYPES[dtype]
            msg.dimensions.extend(dims)
            msg.layout.minor_to_major.extend(reversed(range(len(dims))))

        comp_ids, next_id = {}, [1]

        def new_id():
            next_id[0] += 1
            return next_id[0]
        for k, (r, (dt, op)) in enumerate(sorted(self.reducers.items())):
            c = m.computations.add(name=r, id=k + 2)
            comp_ids[r] = c.id
            ids = []
            for n in range(2):
                i = c.instructions.add(name="xy"[n], opcode="parameter", id=new_id(), parameter_number=n)
                set_shape(i.shape, dt, ())
                ids.append(i.id)
            root = c.instructions.add(name="r", opcode=op, id=new_id(), operand_ids=ids)
            set_shape(root.shape, dt, ())
            c.root_id = root.id
        entry = m.computations.add(name=self.name, id=len(self.reducers) + 2)
        m.entry_computation_id = entry.id
        names = {}
        for ins in self.ins:
            i = entry.instructions.add(name=ins.name, opcode=ins.opcode, id=new_id(),
                                       operand_ids=[names[o] for o in ins.operands])
            names[ins.name] = i.id
            set_shape(i.shape, ins.dtype, ins.dims, ins.elements)
            a = ins.attrs
            if ins.opcode not in ("parameter", "tuple"):
                i.metadata.op_type, i.metadata.op_name = ins.opcode, f"{self.name}/{ins.name}"
                i.metadata.source_file, i.metadata.source_line = self.source, ins.line
            if "parameter_number" in a:
                i.parameter_number = a["parameter_number"]
            if "literal" in a:
                lit = i.literal
                lit.shape.CopyFrom(i.shape)
                v = np.asarray(a["literal"]).reshape(-1)
                if ins.dtype == "f16":
                    lit.f16s = v.astype("<f2").tobytes()
                elif ins.dtype == "f32":
                    lit.f32s.extend(v.astype(np.float32).tolist())
                elif ins.dtype == "s32":
                    lit.s32s.extend(int(x) for x in v)
                else:
                    raise AssertionError(ins.dtype)
            if "iota_dimension" in a:
                i.dimensions.append(a["iota_dimension"])
            if "dimensions" in a:
                i.dimensions.extend(a["dimensions"])
            if "dynamic_slice_sizes" in a:
                i.dynamic_slice_sizes.extend(a["dynamic_slice_sizes"])
            for s, e in a.get("slice", ()):
                sd = i.slice_dimensions.add()
                sd.start, sd.limit, sd.stride = s, e, 1
            if "dot" in a:
                d, dn = a["dot"], i.dot_dimension_numbers
                dn.lhs_batch_dimensions.extend(d["lhs_batch"])
                dn.rhs_batch_dimensions.extend(d["rhs_batch"])
                dn.lhs_contracting_dimensions.extend(d["lhs_contracting"])
                dn.rhs_contracting_dimensions.extend(d["rhs_contracting"])
            if "direction" in a:
                i.comparison_direction = a["direction"]
            if "to_apply" in a:
                i.called_computation_ids.append(comp_ids[a["to_apply"]])
            if "replica_groups" in a:
                for g in a["replica_groups"]:
                    i.replica_groups.add().replica_ids.extend(g)
            if "channel_id" in a:
                i.channel_id = a["channel_id"]
            if "custom_call_target" in a:
                i.custom_call_target = a["custom_call_target"]
            if "backend_config" in a:
                i.backend_config = a["backend_config"].encode()
        entry.root_id = names[self.ins[-1].name]
        return m.SerializeToString()


# =================================================================================================
# The model
# =================================================================================================

def rms_norm(m: Hlo, name: str, x: Ref, weight: Ref) -> Ref:
    """transformers-neuronx ``hlo.rms_norm``: the custom call on the f32 copy, over dim 0 (hidden-major), the weight
    as it is (f32), the result in the hidden states' dtype."""
    eps = m.constant(f"{name}.eps", "f32", EPS)
    x32 = m.convert(f"{name}.f32", x, "f32")
    return m.custom_call(name, "AwsNeuronRmsNorm", [x32, weight, eps], x.dtype, x.dims, backend_config="0")


def weight(m: Hlo, name: str, dims, dtype: str = "f16") -> Ref:
    """A (sharded) weight parameter, moved by the static ring as NeuronX does with every weight."""
    p = m.parameter(name, dtype, dims)
    return m.custom_call(f"{name}.ring", "AwsNeuronTransferWithStaticRing", [p], dtype, dims)


def rope(m: Hlo, name: str, x: Ref, cos: Ref, sin: Ref) -> Ref:
    """x * cos + rotate_half(x) * sin on [S, B, heads, D] (cos, sin: [S, D])."""
    half = D // 2
    s, b, n, d = x.dims
    x1 = m.slice(f"{name}.x1", x, [(0, s), (0, b), (0, n), (0, half)])
    x2 = m.slice(f"{name}.x2", x, [(0, s), (0, b), (0, n), (half, d)])
    rot = m.concatenate(f"{name}.rot", [m.unary("negate", f"{name}.neg", x2), x1], 3)
    cb = m.broadcast(f"{name}.cos", cos, x.dims, [0, 3])
    sb = m.broadcast(f"{name}.sin", sin, x.dims, [0, 3])
    return m.binary("add", name, m.binary("multiply", f"{name}.xcos", x, cb),
                    m.binary("multiply", f"{name}.rsin", rot, sb))


def repeat_kv(m: Hlo, name: str, x: Ref, groups: int) -> Ref:
    """[T, B, kv, D] -> [T, B, kv * groups, D]: each KV head serves `groups` query heads."""
    t, b, kv, d = x.dims
    wide = m.broadcast(f"{name}.wide", x, (t, b, kv, groups, d), [0, 1, 2, 4])
    return m.reshape(name, wide, (t, b, kv * groups, d))


def kv_layout(tp: int) -> tuple[int, int]:
    """(KV heads per rank, ranks per KV head). With tp > KV heads transformers-neuronx replicates each KV head
    on tp / KV heads ranks (GQA.REPLICATED_HEADS): rank r holds KV head r // (tp / KV heads)."""
    if NH % tp or F % tp or V % tp or (NKV % tp and tp % NKV):
        raise SystemExit(f"make.py: tp={tp} does not divide the heads / MLP / vocabulary, nor divides or is a "
                         f"multiple of the {NKV} KV heads")
    return (NKV // tp, 1) if NKV >= tp else (1, tp // NKV)


def build(tp: int, variant: str = "ok") -> Hlo:
    nkv, _ = kv_layout(tp)
    nh, f, v = NH // tp, F // tp, V // tp
    m = Hlo(f"neuronx_llama_tp{tp}" + ("" if variant == "ok" else "_" + variant.replace("-", "_")), "make.py")
    hidden = m.parameter("hidden", "f16", (H, S, B))
    cache_ids = m.parameter("cache_ids", "s32", (S,))  # the new tokens' positions
    start_ids = m.parameter("start_ids", "s32", (B,))  # left padding: each row's first valid position
    cache_k = m.parameter("cache_k", "f16", (T, B, nkv, D))
    cache_v = m.parameter("cache_v", "f16", (T, B, nkv, D))
    ln1_w = weight(m, "ln1_weight", (H,), NORM_DTYPE)  # RMSNorm weights: float32 (see the docstring)
    qkv_w = weight(m, "qkv_weight", (H, (nh + 2 * nkv) * D))
    o_w = weight(m, "o_weight", (nh * D, H))
    ln2_w = weight(m, "ln2_weight", (H,), NORM_DTYPE)
    gate_w = weight(m, "gate_weight", (H, f))
    up_w = weight(m, "up_weight", (H, f))
    down_w = weight(m, "down_weight", (f, H))
    norm_w = weight(m, "norm_weight", (H,), NORM_DTYPE)
    lm_w = weight(m, "lm_head_weight", (H, v))
    groups = [list(range(tp))]

    # -- rotary tables: inv_freq = theta^(-2i/D), angles = positions x inv_freq ----------------------
    i = m.iota("rope.i", "f32", (D // 2,), 0)
    k = m.broadcast("rope.k", m.constant("rope.log_theta", "f32", -2.0 * math.log(THETA) / D), (D // 2,), [])
    inv = m.reshape("rope.inv_freq", m.unary("exponential", "rope.exp", m.binary("multiply", "rope.e", i, k)),
                    (1, D // 2))
    pos = m.reshape("rope.pos", m.convert("rope.pos.f32", cache_ids, "f32"), (S, 1))
    ang = m.dot("rope.angles", pos, inv, [1], [0])
    cos = m.convert("rope.cos.f16", m.unary("cosine", "rope.cos1", ang), "f16")
    sin = m.convert("rope.sin.f16", m.unary("sine", "rope.sin1", ang), "f16")
    cos = m.concatenate("rope.cos", [cos, cos], 1)
    sin = m.concatenate("rope.sin", [sin, sin], 1)

    # -- attention mask (hlo.decoder_attention_mask): causal AND not left padding, [B, S, T] ----------
    key_pos = m.iota("mask.key_pos", "s32", (T,), 0)
    causal = m.compare("mask.causal", m.broadcast("mask.key_pos.st", key_pos, (S, T), [1]),
                       m.broadcast("mask.q_pos", cache_ids, (S, T), [0]), "LE")
    started = m.compare("mask.started", m.broadcast("mask.key_pos.bt", key_pos, (B, T), [1]),
                        m.broadcast("mask.start", start_ids, (B, T), [0]), "GE")
    mask = m.binary("and", "mask", m.broadcast("mask.causal.b", causal, (B, S, T), [1, 2]),
                    m.broadcast("mask.started.b", started, (B, S, T), [0, 2]))

    # -- attention --------------------------------------------------------------------------------
    ln1 = rms_norm(m, "ln1", hidden, ln1_w)
    x = m.reshape("ln1.2d", ln1, (H, S * B))
    qkv = m.dot("qkv", x, qkv_w, [0], [0])  # [S*B, (nh + 2 nkv) D]: this rank's q | k | v columns
    q_end, k_end = nh * D, nh * D + nkv * D
    k_cols = (0, nkv * D) if variant == "k-slice" else (q_end, k_end)  # the bug: K read from the Q columns
    q = m.reshape("q", m.slice("q.cols", qkv, [(0, S * B), (0, q_end)]), (S, B, nh, D))
    k = m.reshape("k", m.slice("k.cols", qkv, [(0, S * B), k_cols]), (S, B, nkv, D))
    v_ = m.reshape("v", m.slice("v.cols", qkv, [(0, S * B), (k_end, k_end + nkv * D)]), (S, B, nkv, D))
    q = rope(m, "q.rope", q, cos, sin)
    k = rope(m, "k.rope", k, cos, sin)
    scale = m.broadcast("q.scale", m.constant("q.scale.c", "f16", 1.0 / math.sqrt(D)), q.dims, [])
    q = m.binary("multiply", "q.scaled", q, scale)
    at = [m.constant("cache.at", "s32", P)] + [m.constant(f"cache.at{d}", "s32", 0) for d in (1, 2, 3)]
    k_cache = m.dynamic_update_slice("k_cache", cache_k, k, at)  # [T, B, nkv, D]
    v_cache = m.dynamic_update_slice("v_cache", cache_v, v_, at)
    keys = repeat_kv(m, "keys", k_cache, nh // nkv)  # [T, B, nh, D]
    values = repeat_kv(m, "values", v_cache, nh // nkv)
    scores = m.dot("scores", q, keys, [3], [3], [1, 2], [1, 2])  # [B, nh, S, T]
    low = m.broadcast("scores.low", m.constant("scores.low.c", "f16", -30000.0), scores.dims, [])
    scores = m.select("scores.masked", m.broadcast("mask.b", mask, scores.dims, [0, 2, 3]), scores, low)
    # softmax on the f32 copy of the scores, the probabilities cast back to f16 for the dot with the values
    s32 = m.convert("scores.f32", scores, "f32")
    top = m.reduce("probs.max", s32, m.constant("probs.max.init", "f32", -math.inf), [3], "max")
    shifted = m.binary("subtract", "probs.shifted", s32, m.broadcast("probs.max.b", top, s32.dims, [0, 1, 2]))
    e = m.unary("exponential", "probs.exp", shifted)
    total = m.reduce("probs.sum", e, m.constant("probs.sum.init", "f32", 0.0), [3], "add")
    probs = m.binary("divide", "probs.f32", e, m.broadcast("probs.sum.b", total, s32.dims, [0, 1, 2]))
    probs = m.convert("probs", probs, "f16")
    ctx = m.dot("context", probs, values, [3], [0], [0, 1], [1, 2])  # [B, nh, S, D]
    ctx = m.reshape("context.2d", m.transpose("context.t", ctx, [2, 0, 1, 3]), (S * B, nh * D))
    attn = m.dot("o_proj", o_w, ctx, [0], [1])  # [H, S*B]: this rank's partial sum
    if tp > 1:
        attn = m.all_reduce("o_proj.all_reduce", attn, groups, 1)
    h1 = m.binary("add", "residual1", hidden, m.reshape("o_proj.3d", attn, (H, S, B)))

    # -- MLP (SwiGLU) -------------------------------------------------------------------------------
    x = m.reshape("ln2.2d", rms_norm(m, "ln2", h1, ln2_w), (H, S * B))
    gate = m.dot("gate", x, gate_w, [0], [0])  # [S*B, f]
    up = m.dot("up", x, up_w, [0], [0])
    act = m.binary("multiply", "swiglu", m.binary("multiply", "silu", gate, m.unary("logistic", "gate.sigmoid", gate)),
                   up)
    mlp = m.dot("down_proj", down_w, act, [0], [1])  # [H, S*B]: partial sum
    if tp > 1:
        mlp = m.all_reduce("down_proj.all_reduce", mlp, groups, 2)
    h2 = m.binary("add", "residual2", h1, m.reshape("down_proj.3d", mlp, (H, S, B)))

    # -- the last position only (left padding: every row's last token is at S - 1), final norm, LM head
    #    sharded on the vocabulary: logits [V / tp, B] ---------------------------------------------------
    zero = m.constant("last.zero", "s32", 0)
    last = m.dynamic_slice("last", h2, [zero, m.constant("last.at", "s32", S - 1), zero], (H, 1, B))
    x = m.reshape("norm.2d", rms_norm(m, "norm", last, norm_w), (H, B))
    logits = m.convert("logits.f32", m.dot("lm_head", lm_w, x, [0], [0]), "f32")  # [v, B]
    m.tuple("outputs", [logits, k_cache, v_cache])
    return m


def relation(tp: int) -> str:
    """How the sequential (tp=1) parameters are assembled from the ranks' shards (workloads.md). With KV heads
    replicated (tp > KV heads) the KV caches and the fused QKV weight have one assembly per choice of replica:
    listing them all states that the replicas are equal."""
    nkv, per_kv = kv_layout(tp)
    nh = NH // tp
    rep = lambda n: "[" + ", ".join(f"{n}@{r}" for r in range(tp)) + "]"  # noqa: E731

    def cat(n, d, ranks=range(tp)):
        ranks = list(ranks)
        return f"concat({', '.join(f'{n}@{r}' for r in ranks)}, dim={d})" if len(ranks) > 1 else f"{n}@{ranks[0]}"

    def kv(n, d):  # one assembly per replica choice j: ranks j, j + per_kv, ...
        forms = [cat(n, d, range(j, tp, per_kv)) for j in range(per_kv)]
        return forms[0] if per_kv == 1 else "[" + ", ".join(f'"{f}"' for f in forms) + "]"

    def cols(lo, hi, ranks):
        return [f"slice(qkv_weight@{r}, dim=1, start={lo}, end={hi})" for r in ranks]
    q_end, k_end = nh * D, (nh + nkv) * D
    qkv = []
    for j in range(per_kv):  # the k and v columns of the replicas j, j + per_kv, ...
        kv_ranks = range(j, tp, per_kv)
        parts = cols(0, q_end, range(tp)) + cols(q_end, k_end, kv_ranks) + cols(k_end, k_end + nkv * D, kv_ranks)
        qkv.append(f"concat({', '.join(parts)}, dim=1)")
    qkv = qkv[0] if per_kv == 1 else "[" + ", ".join(f'"{f}"' for f in qkv) + "]"
    lines = ["# NeuronX Llama-3 layer: sequential = the tp=1 module; G_d = the same module on every rank",
             "inputs:",
             f"  hidden: {rep('hidden')}",
             f"  cache_ids: {rep('cache_ids')}",
             f"  start_ids: {rep('start_ids')}",
             f"  cache_k: {kv('cache_k', 2)}          # KV heads sharded" + (
                 f" (each on {per_kv} ranks: one assembly per replica)" if per_kv > 1 else ""),
             f"  cache_v: {kv('cache_v', 2)}",
             f"  ln1_weight: {rep('ln1_weight')}",
             "  # fused QKV: all ranks' q columns, then all k columns, then all v columns",
             f"  qkv_weight: {qkv}",
             f"  o_weight: {cat('o_weight', 0)}",
             f"  ln2_weight: {rep('ln2_weight')}",
             f"  gate_weight: {cat('gate_weight', 1)}",
             f"  up_weight: {cat('up_weight', 1)}",
             f"  down_weight: {cat('down_weight', 0)}",
             f"  norm_weight: {rep('norm_weight')}",
             f"  lm_head_weight: {cat('lm_head_weight', 1)}",
             "expect:",
             f"  out0: {cat('out0', 0)}   # logits of the last position, vocab-major, sharded on the vocabulary",
             # (replicated KV heads: R_o holds the updated caches as one assembly, that of the first replicas;
             # the other replicas' caches feed their ranks' attention, which the logits check)
             f"  out1: {cat('out1', 2, range(0, tp, per_kv))}",
             f"  out2: {cat('out2', 2, range(0, tp, per_kv))}"]
    return "\n".join(lines) + "\n"


# Llama-3.2-1B's dimensions (--size llama-3.2-1b; set_dims changes the tiny ones above, which the shipped files use)
LLAMA_3_2_1B = dict(hidden=2048, heads=32, kv_heads=8, mlp=8192, vocab=128256)


def set_dims(hidden: int = H, heads: int = NH, kv_heads: int = NKV, mlp: int = F, vocab: int = V, batch: int = B,
             new_tokens: int = S, cached: int = P) -> None:
    """Set the model dimensions every function below reads (the defaults keep the current ones)."""
    global B, S, P, T, NH, NKV, D, H, F, V
    if hidden % heads or heads % kv_heads or (hidden // heads) % 2:
        raise SystemExit(f"make.py: hidden={hidden} over heads={heads} (KV heads {kv_heads}) is not an even head dim")
    B, S, P, T = batch, new_tokens, cached, cached + new_tokens
    NH, NKV, D, H, F, V = heads, kv_heads, hidden // heads, hidden, mlp, vocab


def write(out: Path, tp: int, variant: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "spec.hlo").write_text(build(1).text())
    (out / "impl.hlo.pb").write_bytes(build(tp, variant).proto())
    (out / "relation.yaml").write_text(relation(tp))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tp", "--world-size", type=int, default=2, dest="tp")
    ap.add_argument("--variant", choices=["ok", "k-slice"], default="ok")
    ap.add_argument("--out", type=Path, help="write spec.hlo, impl.hlo.pb and relation.yaml here")
    ap.add_argument("--print", action="store_true", help="print the implementation as HLO text")
    ap.add_argument("--size", choices=["tiny", "llama-3.2-1b"], default="tiny",
                    help="model dimensions: this example's tiny ones, or Llama-3.2-1B's (hidden 2048, 32 heads, "
                         "8 KV heads, MLP 8192, vocabulary 128256)")
    ap.add_argument("--batch", type=int, default=B, help="batch size")
    ap.add_argument("--new-tokens", type=int, default=S, help="tokens computed by the layer")
    ap.add_argument("--cached", type=int, default=P, help="positions already in the KV cache")
    a = ap.parse_args(argv)
    set_dims(**(LLAMA_3_2_1B if a.size == "llama-3.2-1b" else {}),
             batch=a.batch, new_tokens=a.new_tokens, cached=a.cached)
    if a.print:
        sys.stdout.write(build(a.tp, a.variant).text())
    if a.out is not None:
        write(a.out, a.tp, a.variant)


if __name__ == "__main__":
    main()
