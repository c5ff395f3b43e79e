#!/usr/bin/env python3
"""Capture the pair: HF's Llama modules (hf_model.py) as the specification, through the fx frontend, and the
NeuronX-style HLO of examples/neuronx-llama-tp/make.py at tensor-parallel degree N as the implementation; write
the relation between them.

    python3 capture.py --tp N --out DIR [--make PATH] [--variant ok|k-slice|rope-offset|rope-rotation] [--outputs all|cache]
                       [--size tiny|llama-3.2-1b]
        # DIR/spec.gg.json, DIR/impl.hlo.pb, DIR/relation.yaml

The relation is two steps composed: each HF input as an expression of the sequential NeuronX parameter it is
(``hidden = permute(hidden, dims=[2, 1, 0])``: HF's [B, S, H] is NeuronX's [H, S, B]; HF's q/k/v weights
are the q/k/v columns of the fused QKV weight, transposed: HF stores [out, in], NeuronX [in, out]; HF's float16
RMSNorm weights are NeuronX's float32 ones converted, exactly: ``convert(ln1_weight, dtype=float16)``), then
make.py's own relation: each sequential parameter as the ranks' shards (a list where KV heads are replicated:
one assembly per replica).
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent
MAKE = HERE.parent / "neuronx-llama-tp" / "make.py"
sys.path.insert(0, str(HERE))
import hf_model  # noqa: E402

# HF input -> expression over NeuronX's sequential parameters ({} is the parameter's sequential expression)
T2 = "permute({}, dims=[1, 0])"
# NeuronX keeps the RMSNorm weights in float32, the exact upcast of HF's float16 ones (make.py): HF's weight is
# NeuronX's converted back, exactly (a relation's convert: graphguard/ir/relation.py)
NORM = "convert({}, dtype=float16)"


def hf_of_neuronx() -> dict:
    """Each HF input as (NeuronX's sequential parameter, its expression), at hf_model's dimensions."""
    NH, NKV, D = hf_model.NH, hf_model.NKV, hf_model.D
    return {
        "hidden": ("hidden", "permute({}, dims=[2, 1, 0])"),  # [B, S, H] <- [H, S, B]
        "cache_ids": ("cache_ids", "{}"),
        "start_ids": ("start_ids", "{}"),
        "cache_k": ("cache_k", "permute({}, dims=[1, 2, 0, 3])"),  # [B, kv, T, D] <- [T, B, kv, D]
        "cache_v": ("cache_v", "permute({}, dims=[1, 2, 0, 3])"),
        "layer.input_layernorm.weight": ("ln1_weight", NORM),
        "layer.self_attn.q_proj.weight": ("qkv_weight", f"permute(slice({{}}, dim=1, start=0, end={NH * D}), dims=[1, 0])"),
        "layer.self_attn.k_proj.weight": ("qkv_weight", f"permute(slice({{}}, dim=1, start={NH * D}, "
                                                        f"end={(NH + NKV) * D}), dims=[1, 0])"),
        "layer.self_attn.v_proj.weight": ("qkv_weight", f"permute(slice({{}}, dim=1, start={(NH + NKV) * D}, "
                                                        f"end={(NH + 2 * NKV) * D}), dims=[1, 0])"),
        "layer.self_attn.o_proj.weight": ("o_weight", T2),
        "layer.post_attention_layernorm.weight": ("ln2_weight", NORM),
        "layer.mlp.gate_proj.weight": ("gate_weight", T2),
        "layer.mlp.up_proj.weight": ("up_weight", T2),
        "layer.mlp.down_proj.weight": ("down_weight", T2),
        "norm.weight": ("norm_weight", NORM),
        "lm_head.weight": ("lm_head_weight", T2),
    }


# --size: make.py's dimensions (tiny: its defaults, what the tests use; llama-3.2-1b: hidden 2048, 32 heads, 8 KV
# heads, MLP 8192, vocab 128256)
SIZES = {"tiny": dict(hidden=hf_model.H, heads=hf_model.NH, kv_heads=hf_model.NKV, mlp=hf_model.F, vocab=hf_model.V),
         "llama-3.2-1b": dict(hidden=2048, heads=32, kv_heads=8, mlp=8192, vocab=128256)}


def _load_make(path: Path, size: str = "tiny"):
    spec = importlib.util.spec_from_file_location("neuronx_make", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up)
    spec.loader.exec_module(mod)
    mod.set_dims(**SIZES[size])
    return mod


def rope_offset(m, offset: int = 1):
    """The bug twin ``rope-offset``: make.py's module with the RoPE angles computed at the positions
    ``cache_ids + offset`` (an off-by-one position in the rotary tables; the mask still reads ``cache_ids``)."""
    from dataclasses import replace

    import numpy as np
    at = next(k for k, i in enumerate(m.ins) if i.name == "rope.pos.f32")
    pos = m.ins[at]
    (ids,) = pos.operands
    n = pos.dims
    off = replace(pos, name="rope.offset", opcode="constant", dtype="s32", operands=[],
                  attrs={"literal": np.full(n, offset, dtype=np.int32)})
    shifted = replace(pos, name="rope.pos.shifted", opcode="add", dtype="s32", operands=[ids, "rope.offset"], attrs={})
    m.ins[at:at] = [off, shifted]
    pos.operands = ["rope.pos.shifted"]
    return m


def rope_rotation(m):
    """The bug twin ``rope-rotation``: make.py's module with rotate-half's halves in the wrong order,
    ``concatenate(x1, -x2)`` for ``concatenate(-x2, x1)`` (q and k alike)."""
    for i in m.ins:
        if i.opcode == "concatenate" and i.name.endswith(".rope.rot"):
            i.operands = i.operands[::-1]
    return m


BUGS = {"rope-offset": rope_offset, "rope-rotation": rope_rotation}


def relation(tp: int, make: Path = MAKE, kv_map=None, size: str = "tiny") -> dict:
    """The HF-to-NeuronX input relation at degree ``tp`` (``kv_map``: a bug twin's wrong K/V weight mapping)."""
    seq = yaml.safe_load(_load_make(make, size).relation(tp))["inputs"]
    out = {}
    for name, (param, form) in hf_of_neuronx().items():
        exprs = seq[param] if isinstance(seq[param], list) else [seq[param]]
        if kv_map and name in kv_map:
            form = kv_map[name]
        forms = [form.format(e) for e in exprs]
        out[name] = forms if len(forms) > 1 else forms[0]
    return {"inputs": out}


def capture(tp: int, out, make: Path = MAKE, variant: str = "ok", kv_map=None, outputs: str = "all",
            size: str = "tiny") -> dict:
    import graphguard.torch
    from graphguard.ir.relation import relation_yaml
    hf_model.set_dims(**SIZES[size])
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model = hf_model.build(outputs)
    spec = graphguard.torch.capture(lambda r: model, hf_model.example_inputs(), world_size=1, name="hf-llama-layer")
    spec.save(out / "spec.gg.json")
    if variant in BUGS:  # a bug of this example's own: make.py's module, post-processed
        (out / "impl.hlo.pb").write_bytes(BUGS[variant](_load_make(make, size).build(tp)).proto())
    else:
        hlo = out / "hlo"
        subprocess.run([sys.executable, str(make), "--tp", str(tp), "--out", str(hlo), "--size", size]
                       + (["--variant", variant] if variant != "ok" else []), check=True)
        (out / "impl.hlo.pb").write_bytes((hlo / "impl.hlo.pb").read_bytes())
    rel = relation(tp, make, kv_map, size)
    used = {i["name"] for i in json.loads((out / "spec.gg.json").read_text())["inputs"]}
    rel["inputs"] = {k: v for k, v in rel["inputs"].items() if k in used}  # (--outputs cache reads fewer inputs)
    # a decode step's positions: the new tokens at P.. (after the cache), every row's padding within the cache
    # (its first valid position at most P) -- so every query row keeps a key; and the attention scores within
    # +-14000, so NeuronX's -30000 underflows either way (the masked-softmax pass, lemma_packs/aten_hlo/passes.py)
    ranges = {"cache_ids": f"[{hf_model.P}, {hf_model.T})", "start_ids": f"[0, {hf_model.P}]"}
    rel["ranges"] = {k: v for k, v in ranges.items() if k in used}
    if "start_ids" in used:
        rel["assume"] = {"masked_scores_within": 14000}
    (out / "relation.yaml").write_text(relation_yaml(rel))
    return {k: out / v for k, v in (("spec", "spec.gg.json"), ("impl", "impl.hlo.pb"), ("relation", "relation.yaml"))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tp", "--world-size", type=int, default=2, dest="tp")
    ap.add_argument("--out", required=True)
    ap.add_argument("--make", type=Path, default=MAKE, help="the NeuronX generator (default: examples/neuronx-llama-tp/make.py)")
    ap.add_argument("--outputs", choices=["all", "cache"], default="all",
                    help="the specification's outputs: logits and caches, or the updated KV caches only")
    ap.add_argument("--variant", default="ok", help="ok, make.py's k-slice, rope-offset (RoPE angles at "
                    "cache_ids + 1) or rope-rotation (rotate-half's halves swapped): the last two make.py's module "
                    "post-processed here")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny", help="make.py's dimensions (both sides)")
    a = ap.parse_args()
    print(json.dumps({k: str(v) for k, v in capture(a.tp, a.out, a.make, a.variant, outputs=a.outputs,
                                                    size=a.size).items()}))


if __name__ == "__main__":
    main()
