"""JAX programs captured as HLO (graphguard.jax) and verified with the hlo frontend and pack.

A few representative degree/pass combinations run here (the examples' run scripts run degree 2 forward with
--replay in test_examples.py); bench/verify_hlo.py runs every example at degrees 2, 4 and 8, forward and
forward+backward. Plus: relations derived from shardings (1-D and 2-D meshes, replication), mesh-axes replica
groups decoded from real XLA output (proto and text), and one must-not-prove case per way of partitioning.
"""
from __future__ import annotations

import graphguard.jax  # noqa: F401  (first: JAX must start with 8 host devices)

import importlib.util

import pytest

import graphguard
from conftest import EXAMPLES

jax = pytest.importorskip("jax")
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402


def model(name: str):
    path = EXAMPLES / name / "model.py"
    spec = importlib.util.spec_from_file_location(f"gg_test_{name.replace('-', '_').replace('/', '_')}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def mesh(world: int):
    return jax.make_mesh((world,), ("tp",), axis_types=(AxisType.Auto,), devices=jax.devices()[:world])


def capture_example(name: str, world: int, backward: bool):
    m = model(name)
    mh = mesh(world)
    impl = m.impl(mh) if hasattr(m, "impl") else None
    cap = graphguard.jax.capture(m.spec(), m.inputs(), mesh=mh, in_shardings=m.in_specs(world), impl=impl,
                                 backward=backward)
    return m, cap


def _line(path: str, text: str) -> int:
    """The line of an example file that holds ``text`` (failures are reported at source lines)."""
    return next(i for i, ln in enumerate((EXAMPLES / path).read_text().splitlines(), 1) if text in ln)


def test_host_devices():
    assert len(jax.devices()) >= 8, "graphguard.jax must be imported before jax (XLA_FLAGS host device count)"


# =================================================================================================
# The examples: certificates with the expected layout of every output
# =================================================================================================

@pytest.mark.parametrize("name,world,backward", [("jax-mlp-gspmd", 2, True), ("jax-mlp-gspmd", 8, False),
                                                 ("jax-block-shardmap", 2, True)])
def test_example_refines_with_expected_output_layout(name, world, backward):
    m, cap = capture_example(name, world, backward)
    cap.relation["expect"] = m.expect(world, backward)
    r = cap.verify(replay=True)
    assert r.verdict == "refines", r.render()
    assert r.expect["checked"] == len(m.expect(world, backward)) and not r.expect["missing"]
    assert r.replay["ok"]



def _collectives(proto: bytes) -> dict:
    import collections

    from graphguard.frontends.hlo.proto import HloModuleProto
    m = HloModuleProto.FromString(proto)
    c = collections.Counter(i.opcode for comp in m.computations for i in comp.instructions)
    return {k: v for k, v in c.items() if k in ("all-reduce", "all-gather", "reduce-scatter", "all-to-all",
                                                 "collective-permute")}


@pytest.mark.parametrize("name,world,backward,collectives", [
    # GSPMD inserts an all-reduce after each row-parallel projection, and (backward) one per gradient of a
    # replicated input (x, ln1, ln2)
    ("jax-block-gspmd", 2, True, {"all-reduce": 6}),
    ("jax-mlp-shardmap", 4, True, {"all-reduce": 2}),  # the psum, and its transpose for x's gradient
])
def test_block_by_gspmd_and_mlp_by_shard_map_refine(name, world, backward, collectives):
    """Both programs in both styles: the block partitioned by GSPMD, the MLP written with shard_map."""
    m, cap = capture_example(name, world, backward)
    assert _collectives(cap.impl) == collectives
    cap.relation["expect"] = m.expect(world, backward)
    r = cap.verify(replay=True)
    assert r.verdict == "refines", r.render()
    assert r.expect["checked"] == len(m.expect(world, backward)) and not r.expect["missing"]
    assert r.replay["ok"]

def test_capture_names_inputs_and_outputs_after_the_program():
    m, cap = capture_example("jax-block-shardmap", 2, backward=True)
    assert cap.inputs == ["x", "p.ln1", "p.ln2", "p.w1", "p.w2", "p.wk", "p.wo", "p.wq", "p.wv", "tangent.out"]
    assert cap.outputs[0] == "out0: forward output 0" and cap.outputs[4] == "out4: gradient of p.w1"
    assert cap.relation["inputs"]["p.wo"] == "concat(p.wo@0, p.wo@1, dim=0)"
    assert cap.relation["inputs"]["p.wq"] == "concat(p.wq@0, p.wq@1, dim=1)"
    assert cap.relation["inputs"]["x"] == ["x@0", "x@1"] and cap.relation["inputs"]["tangent.out"] == [
        "tangent.out@0", "tangent.out@1"]


# =================================================================================================
# Must not prove: one per way of partitioning
# =================================================================================================

def test_shard_map_block_missing_its_psum_does_not_refine_at_the_norm_that_reads_it():
    m = model("bugs/jax-block-missing-psum")
    mh = mesh(2)
    cap = graphguard.jax.capture(m.spec(), m.inputs(), mesh=mh, in_shardings=m.in_specs(2), impl=m.impl(mh))
    r = cap.verify(replay=True)
    assert r.verdict == "does-not-refine"
    f = r.failure
    # the residual add still has a meaning (x + the heads' partial outputs, a sum over ranks); the first
    # operator that cannot use a partial sum is the second RMSNorm's square, x * x
    assert (f.op, f.loc) == ("hlo.multiply", f"model.py:{_line('jax-block-shardmap/model.py', 'return x * jax.lax.rsqrt')}")
    assert any(e.startswith("sum(") for e in next(iter(f.input_relations.values())))
    assert f.replay["max_abs_diff"] > 1e-3


def test_gspmd_mlp_with_ranks_swapped_in_the_relation_does_not_refine_at_gelu():
    m, cap = capture_example("jax-mlp-gspmd", 2, backward=False)
    rel = dict(cap.relation["inputs"], w1="concat(w1@1, w1@0, dim=1)")  # w1's shards in the wrong device order
    cap.relation = {"inputs": rel}
    r = cap.verify(replay=True)
    assert r.verdict == "does-not-refine"
    f = r.failure
    # x @ w1 + b1 still has a clean meaning, each rank's product plus the other rank's bias; the GeLU
    # (its cube, x * x * x) does not
    assert (f.op, f.loc) == ("hlo.multiply", f"model.py:{_line('jax-mlp-gspmd/model.py', 'h = jax.nn.gelu(x @ w1 + b1)')}")
    assert f.input_relations == {"add.19": ["concat(sum(dot@1, add.32@0), sum(dot@0, add.32@1), dim=1)"]}
    assert f.replay["max_abs_diff"] > 1e-3



def test_gspmd_block_with_w2_shards_swapped_does_not_refine_at_the_down_projection():
    m, cap = capture_example("jax-block-gspmd", 2, backward=False)
    rel = dict(cap.relation["inputs"])
    rel["p.w2"] = "concat(p.w2@1, p.w2@0, dim=0)"  # w2's row shards in the wrong device order
    cap.relation = {"inputs": rel}
    r = cap.verify(replay=True)
    assert r.verdict == "does-not-refine"
    f = r.failure
    # each rank's hidden activations are its own column shard, w2's rows the other rank's: the dot has no meaning
    assert (f.op, f.loc) == ("hlo.dot", f"model.py:{_line('jax-block-shardmap/model.py', 'return x + h @ p')}")
    assert f.input_relations["p.w2"] == ["concat(p.w2@1, p.w2@0, dim=0)"]
    assert f.replay["max_abs_diff"] > 1e-3

# =================================================================================================
# Relations from shardings; collectives of a 2-D mesh
# =================================================================================================

def test_two_dimensional_mesh_relations_and_verification():
    import jax.numpy as jnp

    def f(x, w):
        return jnp.tanh(x @ w)
    mh = jax.make_mesh((2, 2), ("dp", "tp"), axis_types=(AxisType.Auto,) * 2, devices=jax.devices()[:4])
    x, w = jnp.ones((4, 6)), jnp.ones((6, 8))
    cap = graphguard.jax.capture(f, (x, w), mesh=mh, in_shardings=(P("dp", None), P(None, "tp")))
    # device (i, j) of the mesh is rank 2 i + j: x is cut by rows over dp and copied over tp, w the other way
    assert cap.relation["inputs"]["x"] == ["concat(x@0, x@2, dim=0)", "concat(x@1, x@3, dim=0)"]
    assert cap.relation["inputs"]["w"] == ["concat(w@0, w@1, dim=1)", "concat(w@2, w@3, dim=1)"]
    r = cap.verify(replay=True)
    assert r.verdict == "refines", r.render()
    assert [graphguard.ir.to_text(e) for e in r.r_o["out0"]][0] == \
        "concat(concat(out0@0, out0@1, dim=1), concat(out0@2, out0@3, dim=1), dim=0)"


def test_mesh_axes_replica_groups_from_xla_proto_and_text(tmp_path):
    """psum over each axis of a 2x4 mesh: XLA writes mesh-axes replica groups; both readers decode them."""
    import jax.numpy as jnp

    from graphguard.frontends.hlo.proto import read_proto
    from graphguard.frontends.hlo.text import read_text
    mh = jax.make_mesh((2, 4), ("a", "b"), axis_types=(AxisType.Auto,) * 2)

    def local(x):
        return jax.lax.psum(x, "b") * 2 + jax.lax.psum(x, "a")
    g = jax.shard_map(local, mesh=mh, in_specs=P("a", "b"), out_specs=P("a", "b"))
    lowered = jax.jit(g, in_shardings=NamedSharding(mh, P("a", "b"))).lower(jnp.ones((4, 8)))
    mod = lowered.compile().runtime_executable().hlo_modules()[0]
    devs = mh.devices
    by_b = sorted(sorted(int(devs[i, j].id) for j in range(4)) for i in range(2))
    by_a = sorted(sorted(int(devs[i, j].id) for i in range(2)) for j in range(4))
    for m in (read_proto(mod.as_serialized_hlo_module_proto(), "m.pb"), read_text(mod.to_string(), "m.hlo")):
        groups = [sorted(sorted(g) for g in i.attrs["replica_groups"]) for c in m.computations.values()
                  for i in c.instructions if i.opcode == "all-reduce"]
        assert sorted(groups) == sorted([by_b, by_a]), groups


def test_mesh_groups_with_sub_axes_and_device_order():
    from graphguard.frontends.hlo.module import mesh_groups
    assert mesh_groups([2, 4], None, None, [(1, None, None)], "m") == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert mesh_groups([2, 4], None, None, [(0, None, None)], "m") == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert mesh_groups([2, 4], None, None, [(1, 2, 2)], "m") == [[0, 1], [2, 3], [4, 5], [6, 7]]  # 'b':(2)2
    assert mesh_groups([2, 4], None, None, [(1, 1, 2)], "m") == [[0, 2], [1, 3], [4, 6], [5, 7]]  # 'b':(1)2
    assert mesh_groups([4], [3, 2, 1, 0], None, [(0, None, None)], "m") == [[3, 2, 1, 0]]


# =================================================================================================
# Frontend canonical forms that JAX's output needs (both sides of a pair must read alike)
# =================================================================================================

def _load(tmp_path, text: str, role="spec"):
    from graphguard.frontends import LoadRequest
    from graphguard.frontends.hlo.load import load
    from graphguard.ir.scalar import Constraints
    from graphguard.plugins import load_plugins
    p = tmp_path / "m.hlo"
    p.write_text(text)
    return load(LoadRequest([str(p)], role, load_plugins().registry, Constraints(), None))


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
MAX = "mx {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] maximum(a, b)\n}\n"


def test_reduce_over_unit_dims_from_the_identity_is_a_reshape(tmp_path):
    g = _load(tmp_path, f"""HloModule m
{ADD}{MAX}
ENTRY main {{
  x = f32[2,1,4,1] parameter(0)
  z = f32[] constant(0)
  r = f32[2,4] reduce(x, z), dimensions={{1,3}}, to_apply=add
  r2 = f32[2] reduce(x, z), dimensions={{1,2,3}}, to_apply=add
  m = f32[] constant(1)
  r3 = f32[2,4] reduce(x, m), dimensions={{1,3}}, to_apply=mx
  ROOT t = (f32[2,4], f32[2], f32[2,4]) tuple(r, r2, r3)
}}
""")
    nodes = {n.outputs[0]: n for n in g.nodes}
    assert nodes["r"].op == "core.reshape" and list(nodes["r"].attrs["shape"]) == [2, 4]
    # the unit dims dropped, the rest reduced: dim 2 of x is dim 1 of the reshaped x
    assert nodes["r2"].op == "hlo.reduce" and list(nodes["r2"].attrs["dims"]) == [1]
    assert nodes["r3"].op == "hlo.reduce"  # max from 1 is not the identity: it changes values


def test_broadcast_of_a_known_value_stays_a_broadcast(tmp_path):
    g = _load(tmp_path, """HloModule m
ENTRY main {
  x = f32[2,2,4,4] parameter(0)
  k = pred[4,4] constant({{1,0,0,0},{1,1,0,0},{1,1,1,0},{1,1,1,1}})
  b = pred[2,2,4,4] broadcast(k), dimensions={2,3}
  c = f32[] constant(-1)
  cb = f32[2,2,4,4] broadcast(c), dimensions={}
  ROOT s = f32[2,2,4,4] select(b, x, cb)
}
""")
    ops = {n.outputs[0]: n.op for n in g.nodes}
    assert ops["b"] == "hlo.broadcast" and ops["k"] == "hlo.literal" and ops["cb"] == "hlo.constant"


def test_text_with_stack_frame_tables_gives_locations(tmp_path):
    g = _load(tmp_path, """HloModule m, entry_computation_layout={(f32[4]{0})->f32[4]{0}}

FileNames
1 "/home/me/model.py"

FunctionNames
1 "f"

FileLocations
1 {file_name_id=1 function_name_id=1 line=12 end_line=12 column=3 end_column=9}

StackFrames
1 {file_location_id=1 parent_frame_id=1}


ENTRY main {
  x = f32[4]{0} parameter(0)
  ROOT t = f32[4]{0} tanh(x), metadata={op_name="jit(f)/tanh" stack_frame_id=1}
}
""")
    (t,) = [n for n in g.nodes if n.op == "hlo.tanh"]
    assert t.loc == "model.py:12"


# =================================================================================================
# Cross-framework: a PyTorch specification (fx), a JAX implementation (HLO)
# =================================================================================================

def _cross_capture():
    path = EXAMPLES / "cross-fx-hlo-llama" / "capture.py"
    spec = importlib.util.spec_from_file_location("gg_test_cross_capture", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.capture


def test_pytorch_llama_layer_is_refined_by_the_jax_tensor_parallel_layer(tmp_path):
    f = _cross_capture()(4, tmp_path)
    r = graphguard.verify(str(f["spec"]), str(f["impl"]), str(f["relation"]), spec_frontend="ir",
                          impl_frontend="hlo", replay=True)
    assert r.verdict == "refines", r.render()
    assert r.expect["checked"] == 1 and not r.expect["missing"] and r.replay["ok"]
    hits = r.stats["lemma_hits"]
    # ATen's products against XLA's dots on the pairs of entries they sum (relayout.products_first: the
    # attention's bmm of views against the batched dot, the projections' mm against the 2-D dot, no longer
    # through core's matmul / batched_matmul, hlo 800 / 807, aten 364), and the aten-hlo bridges (RMSNorm's
    # square, mean, broadcasts; softmax; silu; the causal mask, RoPE, GQA's expand)
    assert r.stats["labels_first"] > 0
    assert all(hits.get(f"aten-hlo:{n}") for n in (834, 838, 841, 842, 843, 1100, 1101, 1102, 1103)), hits


def test_jax_layer_missing_its_attention_psum_does_not_refine_the_pytorch_layer(tmp_path):
    f = _cross_capture()(2, tmp_path, skip_psum=True)
    r = graphguard.verify(str(f["spec"]), str(f["impl"]), str(f["relation"]), spec_frontend="ir",
                          impl_frontend="hlo", replay=True)
    assert r.verdict == "does-not-refine"
    # the residual is a sum over ranks; the post-attention RMSNorm's x ** 2 of the PyTorch model cannot use it
    where = f"torch_model.py:{_line('cross-fx-hlo-llama/torch_model.py', 'return self.weight * (x * torch.rsqrt')}"
    assert (r.failure.op, r.failure.loc) == ("aten.pow.Tensor_Scalar", where)
    assert r.failure.replay["max_abs_diff"] > 1e-3


def test_jax_layer_with_sin_and_cos_swapped_in_k_rope_does_not_refine_the_pytorch_layer(tmp_path):
    f = _cross_capture()(2, tmp_path, rope_bug=True)
    r = graphguard.verify(str(f["spec"]), str(f["impl"]), str(f["relation"]), spec_frontend="ir",
                          impl_frontend="hlo", replay=True)
    assert r.verdict == "does-not-refine"
    # q's rotation meets; k's first product, k * cos, has no counterpart (the JAX layer computes k * sin)
    where = f"torch_model.py:{_line('cross-fx-hlo-llama/torch_model.py', 'return x * cos + rotate_half(x) * sin')}"
    assert (r.failure.op, r.failure.loc) == ("aten.mul.Tensor", where)
    assert r.failure.replay["max_abs_diff"] > 1e-3
