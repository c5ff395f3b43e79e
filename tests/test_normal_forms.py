"""Normal forms (lemmas 1500-1507 and 1850-1860 of the aten pack, in its subject files): each passes the fuzzer
(what each proves, and its near misses it must not: lemma_packs/aten/proofs.py). Also: fresh strided buffers
(``new_empty_strided``, the backward of writes into views of an ``empty_like`` buffer) are read as the empty
buffers they are."""
import pytest

# what the normal forms prove, and must not: lemma_packs/aten/proofs.py (tests/test_pack_proofs.py)


def test_every_normal_form_passes_the_fuzzer(plugins):
    from graphguard.engine.fuzz import fuzz_rule
    rules = [r for r in plugins.lemmas if r.lemma.pack == "aten" and not r.lemma.variant and 1500 <= r.lemma.ref < 1600]
    assert {r.lemma.ref for r in rules} == {1500, 1501, 1502, 1503, 1504, 1505, 1506, 1507}
    bad = [(r.id, rep.why()) for r in rules if not (rep := fuzz_rule(r, plugins.registry)).ok]
    assert not bad


def test_every_normal_form_of_normal2_passes_the_fuzzer(plugins):
    from graphguard.engine.fuzz import fuzz_rule
    rules = [r for r in plugins.lemmas if r.lemma.pack == "aten" and not r.lemma.variant and 1850 <= r.lemma.ref < 1900]
    assert {r.lemma.ref for r in rules} == set(range(1850, 1861))
    bad = [(r.id, rep.why()) for r in rules if not (rep := fuzz_rule(r, plugins.registry)).ok]
    assert not bad


def _buffer_module(write_all: bool):
    import torch

    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 4))

        def forward(self, x):
            y = torch.nn.functional.gelu(x @ self.w)
            if not torch.distributed.is_initialized():
                return y
            b = torch.empty_like(y)  # written through two views; backward makes a new_empty_strided
            b[:2] = y[:2]
            if write_all:
                b[2:] = y[2:]
            return b
    return M


@pytest.mark.parametrize("write_all", [True, False])
def test_buffer_written_through_views(plugins, write_all):
    """Proving: an empty_like buffer whose rows are all written through views (the backward reads the
    gradient through a fresh new_empty_strided buffer) is the computed tensor. Must not prove: half of it is
    never written."""
    import torch

    import graphguard
    from graphguard.frontends.fx.capture import capture
    M = _buffer_module(write_all)
    s = capture(lambda r: M(), (torch.randn(4, 4),), world_size=1, backward=True, plugins=plugins)
    d = capture(lambda r: M(), (torch.randn(4, 4),), world_size=1, backward=True, plugins=plugins, distributed=True)
    ops = {n["op"] for n in d.doc["nodes"]}
    assert "aten.full" in ops  # the fresh buffers (empty_like, new_empty_strided)
    rel = {"inputs": {"x": "x@0", "w": "w@0", "tangent.out0": "tangent.out0@0"},
           "expect": {"out0": "out0@0", "grad.w": "grad.w@0"}}
    res = graphguard.verify(s.graph(plugins), d.graph(plugins), rel, plugins=plugins, replay=write_all)
    assert res.verdict == ("refines" if write_all else "does-not-refine")


# -- OpDef.biased: reshape(addmm(b, x, w)) -> add(reshape(mm(x, w)), b) before proving (graphguard/passes) ------------

def test_biased_declarations_are_fuzzed(plugins):
    """addmm's declaration passes the fuzzer; false ones (another alpha, a subtraction) are caught."""
    import dataclasses

    from graphguard.engine.fuzz import check_biased
    reg = plugins.registry
    op = reg.get("aten.addmm")
    assert op.biased and all(why is None and n >= 20 for _, n, why in check_biased(op, reg))
    for wrong in (("aten.mm", "aten.add.Tensor", {"beta": 1, "alpha": 2}),
                  ("aten.mm", "aten.sub.Tensor", {"beta": 1, "alpha": 1})):
        assert check_biased(dataclasses.replace(op, biased=wrong), reg)[0][2], wrong


def _linear(bias_shape, beta=1, readers=1, view_to=(2, 3, 4)):
    from graphguard.ir.builder import GraphBuilder
    g = GraphBuilder("g")
    g.input("x", [6, 3])
    g.input("w", [3, 4])
    g.input("b", bias_shape)
    g.op("aten.addmm", ["b", "x", "w"], "y", name="fc", loc="model.py:7", beta=beta)
    g.op("core.reshape", ["y"], "z", shape=list(view_to))
    outs = ["z"]
    if readers > 1:
        g.op("aten.relu", ["y"], "r")
        outs.append("r")
    g.output(*outs)
    return g


@pytest.mark.parametrize("bias_shape,beta,readers,view_to,rewritten", [
    ([4], 1, 1, (2, 3, 4), True),
    ([1, 4], 1, 1, (2, 3, 4), True),
    ([6, 4], 1, 1, (2, 3, 4), False),  # a bias per row: not a row bias, moves with the rows
    ([4], 0.5, 1, (2, 3, 4), False),  # beta != 1: not add(mm)
    ([4], 1, 2, (2, 3, 4), False),  # the fused output read elsewhere too
    ([4], 1, 1, (3, 8), False),  # the reshape changes the last dim
])
def test_bias_after_rows(plugins, bias_shape, beta, readers, view_to, rewritten):
    """Rewritten only where exact: the same values (run_graph on both graphs), the bias add last, at the fused
    node's source line."""
    import numpy as np

    from graphguard.passes import bias_after_rows
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before = _linear(bias_shape, beta, readers, view_to).build(reg, cx)
    after = _linear(bias_shape, beta, readers, view_to).build(reg, cx)
    assert bias_after_rows(after, reg, cx) == int(rewritten)
    ops = [n.op for n in after.nodes]
    if rewritten:
        assert ops == ["aten.mm", "core.reshape", "aten.add.Tensor"]
        assert after.nodes[-1].outputs == ["z"] and after.nodes[-1].loc == "model.py:7"
    else:
        assert ops == [n.op for n in before.nodes]
    rng = np.random.default_rng(0)
    env = {"x": rng.standard_normal([6, 3]), "w": rng.standard_normal([3, 4]), "b": rng.standard_normal(bias_shape)}
    want, got = run_graph(before, env, reg, {}), run_graph(after, env, reg, {})
    for o in before.outputs:
        np.testing.assert_allclose(got[o], want[o], rtol=1e-12, atol=1e-12)


# -- round_fills: a float fill holds its number rounded to its dtype (graphguard/passes) ----------------------------

def _fill_graph(value, dtype):
    from graphguard.ir.builder import GraphBuilder
    g = GraphBuilder("g")
    g.input("x", [3], dtype)
    g.op("aten.scalar_tensor", [], "c", s=value, dtype=dtype)
    g.op("aten.add.Tensor", ["x", "c"], "y")
    g.output("y")
    return g


@pytest.mark.parametrize("value,dtype,rounded", [
    ("1e-6", "float32", True), ("1e-6", "float16", True), ("0.5", "float32", False), ("3", "float16", False),
    ("1e-6", "bfloat16", False),  # (left as written)
])
def test_round_fills_rounds_to_the_dtype(plugins, value, dtype, rounded):
    """The fill's number becomes the value its dtype holds -- the same whether a program wrote the decimal or the
    float32 -- and the graph computes the same."""
    from fractions import Fraction

    import numpy as np

    from graphguard.passes import round_fills
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before, after = (_fill_graph(value, dtype).build(reg, cx) for _ in range(2))
    assert round_fills(after, reg, cx) == int(rounded)
    got, written = after.nodes[0].attrs["s"], before.nodes[0].attrs["s"]
    if rounded:
        assert got == Fraction(float(np.asarray(float(value), dtype=dtype))) != written
    else:
        assert got == written
    env = {"x": np.arange(3.0)}
    # (the references compute in float64: the outputs are compared as replay stores the graph's dtype)
    from graphguard.engine.replay import _store
    y_after, y_before = (_store(run_graph(g, dict(env), reg, {})["y"], dtype, "graph") for g in (after, before))
    np.testing.assert_array_equal(y_after, y_before)


def test_round_fills_keeps_different_values_apart(plugins):
    """Two float32 constants one float32 step apart stay two values."""
    import numpy as np

    from graphguard.passes import round_fills
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    a = float(np.float32(1e-6))
    b = float(np.nextafter(np.float32(a), np.float32(1)))
    ga, gb = (_fill_graph(repr(v), "float32").build(reg, cx) for v in (a, b))
    round_fills(ga, reg, cx)
    round_fills(gb, reg, cx)
    assert ga.nodes[0].attrs["s"] != gb.nodes[0].attrs["s"]


def test_round_fills_rounds_the_terms_too(plugins):
    """The rounded value is what the engine reads: the node's term, not only its attribute (a fill's term
    keeping the decimal left two programs' eps constants apart when nothing else re-inferred the graph)."""
    from graphguard.passes import round_fills
    from graphguard.ir.expr import to_text
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    g = _fill_graph("1e-06", "float32").build(reg, cx)
    assert round_fills(g, reg, cx) == 1
    assert "8796093/8796093022208" in to_text(g.node_terms(g.nodes[0])[0])


# -- widen_fills: a fill read by broadcasting ops of one shape takes that shape (graphguard/passes) -------------

def _where_graph(extra_reader: bool = False):
    from graphguard.ir.builder import GraphBuilder
    g = GraphBuilder("g")
    g.input("m", [2, 1, 3], "bool")
    g.op("aten.full", [], "zero", size=[], fill_value=0, dtype="float16")
    g.op("aten.full", [], "low", size=[], fill_value=-30000, dtype="float16")
    g.op("aten.where.self", ["m", "zero", "low"], "y")
    outs = ["y"]
    if extra_reader:  # the fill read by an op that does not broadcast it to y's shape
        g.op("aten.sum", ["low"], "s")
        outs.append("s")
    g.output(*outs)
    return g


def _hlo_beside():
    from graphguard.ir.builder import GraphBuilder
    h = GraphBuilder("h")
    h.input("m", [2, 1, 3], "bool")
    h.op("hlo.constant", [], "zero", shape=[2, 1, 3], value=0, dtype="float16")
    h.op("hlo.constant", [], "low", shape=[2, 1, 3], value=-30000, dtype="float16")
    h.op("hlo.select", ["m", "zero", "low"], "y")
    h.output("y")
    return h


@pytest.mark.parametrize("beside,extra_reader,widened", [
    ("hlo", False, 2),  # beside HLO's select of fills of the mask's shape: both widened
    ("aten", False, 0),  # beside a program that broadcasts implicitly: left as written
    ("hlo", True, 1),  # 'low' read by a sum too: only 'zero'
])
def test_widen_fills(plugins, beside, extra_reader, widened):
    import numpy as np

    from graphguard.passes import widen_fills
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before = _where_graph(extra_reader).build(reg, cx)
    after = _where_graph(extra_reader).build(reg, cx)
    other = (_hlo_beside() if beside == "hlo" else _where_graph()).build(reg, cx)
    assert widen_fills(after, reg, cx, other=other) == widened
    shapes = {n.outputs[0]: after.shape(n.outputs[0]) for n in after.nodes if n.op == "aten.full"}
    assert sum(s == (2, 1, 3) for s in shapes.values()) == widened
    env = {"m": np.random.default_rng(0).random([2, 1, 3]) < 0.5}
    want, got = run_graph(before, env, reg, {}), run_graph(after, env, reg, {})
    for o in before.outputs:  # the same values
        np.testing.assert_array_equal(got[o], want[o])
        assert got[o].dtype == want[o].dtype


# -- masked_softmax: a mask added to the scores, or selected in their place (graphguard/passes) ----------------------

def _masked_softmax_graph(fill=-30000, mask="interval"):
    """HF's eager attention over a causal and left-padding mask: softmax(S + where(key <= q & key >= start, 0,
    fill)) in float32 of float16 scores S [B, H, Sq, T]."""
    from graphguard.ir.builder import GraphBuilder
    B, H, Sq, T = 2, 2, 2, 6
    g = GraphBuilder("g")
    g.input("S", [B, H, Sq, T], "float16")
    g.input("q", [Sq], "int32")
    g.input("start", [B], "int32")
    g.op("aten.arange", [], "k", end=T, dtype="int32")
    g.op("core.reshape", ["k"], "k3", shape=[1, 1, T])
    g.op("core.reshape", ["q"], "q3", shape=[1, Sq, 1])
    g.op("core.reshape", ["start"], "s3", shape=[B, 1, 1])
    g.op("aten.le.Tensor", ["k3", "q3"], "causal")
    if mask == "interval":
        g.op("aten.ge.Tensor", ["k3", "s3"], "started")
    else:  # the padding read from a tensor of the data: no bound on the key index known
        g.input("pad", [B, 1, T], "bool")
        g.op("core.identity", ["pad"], "started")
    g.op("aten.bitwise_and.Tensor", ["causal", "started"], "allowed")
    g.op("core.reshape", ["allowed"], "m", shape=[B, 1, Sq, T])
    g.op("aten.full", [], "zero", size=[], fill_value=0, dtype="float16")
    g.op("aten.full", [], "low", size=[], fill_value=fill, dtype="float16")
    g.op("aten.where.self", ["m", "zero", "low"], "mask")
    g.op("aten.add.Tensor", ["S", "mask"], "scores", alpha=1)
    g.op("aten._to_copy", ["scores"], "s32", dtype="float32")
    g.op("aten._softmax", ["s32"], "p", dim=-1, half_to_float=False)
    g.output("p")
    return g


@pytest.mark.parametrize("bound,ranges,fill,mask,rewritten", [
    (14000, {"q": (4, 6), "start": (0, 5)}, -30000, "interval", True),  # every row keeps a key (start <= 4 <= q)
    (None, {"q": (4, 6), "start": (0, 5)}, -30000, "interval", False),  # no assumption on the scores
    (14000, {"q": (4, 6), "start": (0, 6)}, -30000, "interval", False),  # start 5 > q 4: a padding row keeps none
    (14000, {"q": (4, 6)}, -30000, "interval", False),  # start's range unknown
    (14000, {"q": (4, 6), "start": (0, 5)}, -20000, "interval", False),  # -20000: a masked exp need not vanish
    (20000, {"q": (4, 6), "start": (0, 5)}, -30000, "interval", False),  # scores up to 20000: idem
    (14000, {"q": (4, 6), "start": (0, 5)}, -30000, "data", False),  # part of the mask is data: unknown rows
])
def test_masked_softmax(plugins, bound, ranges, fill, mask, rewritten):
    """Rewritten only where exact: then the same probabilities bit for bit (run_graph on both graphs, scores
    within the bound, positions within the ranges), the additive mask's where gone, the site reported."""
    import numpy as np

    from graphguard.api import value_ranges
    from lemma_packs.aten_hlo.passes import masked_softmax
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before = _masked_softmax_graph(fill, mask).build(reg, cx)
    after = _masked_softmax_graph(fill, mask).build(reg, cx)
    done = masked_softmax(after, reg, cx, value_ranges(after, ranges, reg), bound)
    assert len(done) == int(rewritten), done
    ops = [n.op for n in after.nodes]
    if not rewritten:
        assert ops == [n.op for n in before.nodes]
        return
    assert ops.count("aten.where.self") == 1 and "aten.add.Tensor" not in ops
    assert "scores within [-14000, 14000]" in done[0]
    rng = np.random.default_rng(0)
    for _ in range(20):
        env = {"S": (rng.uniform(-1, 1, [2, 2, 2, 6]) * rng.choice([1, 100, 14000])).astype(np.float16),
               "q": np.array([4, 5], dtype=np.int32), "start": rng.integers(0, 5, [2]).astype(np.int32)}
        want, got = run_graph(before, env, reg, {}), run_graph(after, env, reg, {})
        np.testing.assert_array_equal(got["p"], want["p"])


def test_masked_softmax_differs_on_a_padding_row_without_a_key(plugins):
    """Why the ranges matter: a row whose padding start is past its query position keeps no key -- HF's added
    mask gives softmax(S - 30000) there, the selected one a uniform row. The rewrite would be wrong: it is not
    made (above), and here is the difference it would hide."""
    import numpy as np

    from lemma_packs.aten_hlo.passes import masked_softmax
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before = _masked_softmax_graph().build(reg, cx)
    forced = _masked_softmax_graph().build(reg, cx)
    assert masked_softmax(forced, reg, cx, {"q3": (4, 6), "s3": (0, 5)}, 14000)  # (told a range that is false)
    env = {"S": np.random.default_rng(1).uniform(-3, 3, [2, 2, 2, 6]).astype(np.float16),
           "q": np.array([4, 5], dtype=np.int32), "start": np.array([0, 5], dtype=np.int32)}
    want, got = run_graph(before, env, reg, {})["p"], run_graph(forced, env, reg, {})["p"]
    assert np.array_equal(want[0], got[0]) and np.array_equal(want[1, :, 1], got[1, :, 1])  # rows keeping a key
    assert not np.allclose(want[1, :, 0], got[1, :, 0])  # batch row 1, query 0 (position 4 < start 5): none


def test_the_relation_states_assumptions_by_name(plugins):
    from graphguard.errors import InputError
    from graphguard.ir.relation import parse_relation_text
    rel = parse_relation_text("inputs:\n  x: x@0\nassume:\n  masked_scores_within: 14000\n", "r", plugins.registry)
    assert rel.assume == {"masked_scores_within": 14000}
    for bad in ("assume:\n  scores_are_small: 1\n", "assume:\n  masked_scores_within: -3\n",
                "assume:\n  masked_scores_within: big\n", "assume: [masked_scores_within]\n"):
        with pytest.raises(InputError, match="assum"):
            parse_relation_text("inputs:\n  x: x@0\n" + bad, "r", plugins.registry)


# -- scale_into_product: (x @ y) * c -> (x * c) @ y beside another framework's program (graphguard/passes) ------------

def _scaled_scores(read_product_too=False):
    from graphguard.ir.builder import GraphBuilder
    g = GraphBuilder("g")
    g.input("q", [4, 2, 3], "float16")
    g.input("k", [4, 3, 5], "float16")
    g.op("aten.bmm", ["q", "k"], "qk")
    g.op("core.reshape", ["qk"], "v", shape=[2, 2, 2, 5])
    g.op("aten.mul.Scalar", ["v"], "s", other=0.5)
    outs = ["s"]
    if read_product_too:
        g.op("aten.relu", ["qk"], "r")
        outs.append("r")
    g.output(*outs)
    return g


def _hlo_program(scaled=True):
    """XLA's side: q scaled by a splat constant before its dot with k (NeuronX's attention), or not scaled."""
    from graphguard.ir.builder import GraphBuilder
    h = GraphBuilder("h")
    h.input("q", [4, 2, 3], "float16")
    h.input("k", [4, 3, 5], "float16")
    x = "q"
    if scaled:
        h.op("hlo.constant", [], "c", shape=[4, 2, 3], value=0.5, dtype="float16")
        h.op("hlo.multiply", ["q", "c"], "qs")
        x = "qs"
    h.op("hlo.dot", [x, "k"], "s", lhs_batch=[0], rhs_batch=[0], lhs_contracting=[2], rhs_contracting=[1])
    h.output("s")
    return h


@pytest.mark.parametrize("beside,read_product_too,moved", [
    ("hlo", False, 1),  # HF's scores scaled after q @ k.T, beside XLA's scaling q first: the factor moves onto q
    ("aten", False, 0),  # beside a program of the same framework: left as written
    ("hlo", True, 0),  # the product read elsewhere too: left as written
    ("hlo-unscaled", False, 0),  # beside a program that does not scale before its products: left as written
])
def test_scale_into_product(plugins, beside, read_product_too, moved):
    import numpy as np

    from lemma_packs.aten_hlo.passes import scale_into_product
    from graphguard.engine.replay import run_graph
    from graphguard.ir.scalar import Constraints
    reg, cx = plugins.registry, Constraints()
    before = _scaled_scores(read_product_too).build(reg, cx)
    after = _scaled_scores(read_product_too).build(reg, cx)
    other = (_hlo_program(beside == "hlo") if beside.startswith("hlo") else _scaled_scores()).build(reg, cx)
    assert scale_into_product(after, reg, cx, other=other) == moved
    if moved:
        bmm = next(n for n in after.nodes if n.op == "aten.bmm")
        assert after.producer[bmm.inputs[0]].op == "aten.mul.Scalar"
        assert after.producer["s"].op == "core.identity"
    rng = np.random.default_rng(0)
    env = {"q": rng.standard_normal([4, 2, 3]).astype(np.float16), "k": rng.standard_normal([4, 3, 5]).astype(np.float16)}
    want, got = run_graph(before, env, reg, {}), run_graph(after, env, reg, {})
    for o in before.outputs:  # 0.5: a power of two, exact in float16 either way
        np.testing.assert_array_equal(got[o], want[o])
