"""``graphguard lemmas check``: fuzz every lemma against the NumPy references.

For each rule (each direction of each lemma) random instances are drawn: shapes (size-1 and empty dims,
unequal concatenation parts, a seed's concatenation boundary moved, lower-rank operands), attribute values (negative dims as an op accepts them,
extreme factors: 0, tiny, negative, huge, infinite), dtypes (every float width, integers, bool: the op's
dtype rule decides what a term computes in) and tensor values (normal draws, some with 0, -0.0, inf, -inf,
nan, 1e-30, 1e30 mixed in). The left side is built as a loaded graph would be -- dims normalised -- and
the rule is matched against it again, so the side condition sees what the e-graph would. Where the left
side is well-formed and defined, the condition holds and the term a ``when`` clause asks for is defined too
(the rule fires only beside that term: a value something computed), both sides are evaluated: a lemma is unsound if the right
side is ill-formed there, has another shape or dtype, or computes other values (integers exactly; NaN
where NaN is; infinities of the same sign).

A rule passes only after :data:`MIN_INSTANCES` *distinct* instances (shapes, attributes, dtypes -- not
merely fresh values) where its condition holds: an untested lemma is not a passed one.
"""
from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import ShapeError
from ..ir import scalar as S
from ..ir.expr import AConst, App, AVar, Leaf, PVar
from ..ir.ops import Registry
from ..ir.semantics import term_dtype, term_eval, term_shape
from .lemma import EvalContext, Rule, check_condition, evaluate, instantiate, match

MIN_INSTANCES = 20
#: instances drawn per rule by default, by ``graphguard lemmas check`` and the test suite alike (same seed too),
#: so that a rule the suite passes is one the command passes
CHECK_TRIALS = 25

FLOATS = ("float64", "float32", "float16", "bfloat16")
INTS = ("int64", "int32", "int8", "uint8")
DTYPES = FLOATS + INTS + ("bool",)
COMPLEX = ("complex128", "complex64")
SPECIAL = (0.0, -0.0, math.inf, -math.inf, math.nan, 1e-30, -1e-30, 1e30, -1e30)
# number attributes: exact values, as a graph holds them (a float is its binary value)
FACTORS = tuple(Fraction(x) for x in (0, 1, 2, 3, -1, -2, 0.5, 0.25, -0.75, 1.5, 3e-10, -3e-10, 1e-30, 1e30, 7))
NON_FINITE = (math.inf, -math.inf, math.nan)

_ERRORS = (ShapeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError, OverflowError)


@dataclass
class FuzzReport:
    rule: Rule
    instances: int = 0  # distinct instances where the condition held and both sides agreed
    attempts: int = 0
    failure: str | None = None
    needed: int = MIN_INSTANCES

    @property
    def trials(self) -> int:
        return self.instances

    @property
    def ok(self) -> bool:
        return self.failure is None and self.instances >= self.needed

    def why(self) -> str:
        return self.failure or (f"only {self.instances} distinct instance(s) where the condition holds in "
                                f"{self.attempts} attempts (needs {self.needed}; give examples= seeds)")


def _size(rng: random.Random) -> int:
    u = rng.random()
    return 0 if u < 0.06 else 1 if u < 0.3 else rng.randint(2, 4)


def _shape_like(rng: random.Random, shapes: list[tuple]) -> tuple:
    base = list(rng.choice(shapes)) if shapes else [rng.randint(1, 4)]
    r = rng.random()
    if r < 0.25 and len(base) > 1:  # a suffix (normalized_shape of a layer norm, ...)
        return tuple(base[rng.randrange(1, len(base)):])
    if r < 0.3 and len(base) >= 2:  # merge two adjacent dims
        i = rng.randrange(len(base) - 1)
        base[i:i + 2] = [base[i] * base[i + 1]]
    elif r < 0.6 and base:  # split a dim
        i = rng.randrange(len(base))
        for f in (2, 3):
            if base[i] % f == 0 and base[i] > f:
                base[i:i + 1] = [f, base[i] // f]
                break
    return tuple(base)


def _number(rng: random.Random):
    u = rng.random()
    if u < 0.04:
        return rng.choice(NON_FINITE)
    return rng.choice(FACTORS)


def _draw_attr(rng: random.Random, spec, rank: int, shapes: list[tuple]):
    kind = spec.kind
    if spec.optional and rng.random() < 0.3:
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        d = rng.randrange(max(rank, 1))
        # a dim as the op accepts it: counted from the end, too (normalised when the term is built)
        return d - max(rank, 1) if spec.dim_of is not None and rng.random() < 0.35 else d
    if kind == "scalar":
        return rng.randint(0, 6)
    if kind == "ints":
        p = list(range(rank))
        u = rng.random()
        if u < 0.4 and rank > 1:  # a proper subset of the dims (reductions)
            p = sorted(rng.sample(p, rng.randint(1, rank - 1)))
        elif u < 0.9:
            rng.shuffle(p)
        if spec.dim_of is not None and rng.random() < 0.35:
            p = [d - rank if rng.random() < 0.5 else d for d in p]
        return tuple(p)
    if kind == "scalars":
        return _shape_like(rng, shapes)
    if kind == "str":
        if spec.choices:
            return rng.choice(spec.choices)
        if spec.name.endswith("dtype"):
            return rng.choice(DTYPES)
        return spec.default if isinstance(spec.default, str) else "sum"
    if kind == "number":
        return _number(rng)
    raise AssertionError(kind)


def _vary_seed(rng: random.Random, seed: dict, rule: Rule) -> dict:
    """A seed with one of its sizes replaced everywhere (tensor shapes and shape attributes) by another."""
    sizes = sorted({d for v, s in seed.items() if v in rule.tvars for d in s if isinstance(d, int) and d > 1})
    if not sizes or rng.random() < 0.4:
        return seed
    old = rng.choice(sizes)
    new = rng.choice([old + 1, old * 2, old + 2])
    out = {}
    for v, x in seed.items():
        shape_like = v in rule.tvars or (v in rule.avars and rule.avars[v][0].attr_spec(rule.avars[v][1]).kind
                                          == "scalars")
        out[v] = [new if d == old else d for d in x] if shape_like and isinstance(x, (list, tuple)) else x
    return out


def _concat_pairs(t, out: list) -> list:
    """(left part, right part, dim) of every ``concat(?a, ?b, dim=d)`` in a pattern (d a constant or a variable)."""
    if isinstance(t, App):
        if t.op == "core.concat" and len(t.args) == 2 and all(isinstance(a, PVar) for a in t.args):
            d = t.attr("dim")
            if isinstance(d, (AConst, AVar)):
                out.append((t.args[0].name, t.args[1].name, d))
        for a in t.args:
            _concat_pairs(a, out)
    return out


def _move_split(rng: random.Random, seed: dict, pairs: list) -> dict:
    """A seed with the boundary of one concatenation moved (one part a row longer, the other a row shorter, the
    same total): where two concatenations of a pattern meet (a product of two concats, an elementwise op of
    two), parts that line up only by their totals are what a lemma's condition must rule out."""
    a, b, d = rng.choice([(a, b, d) for a, b, d in pairs if a in seed and b in seed])
    d = d.value if isinstance(d, AConst) else seed.get(d.name)
    sa, sb = list(seed[a]), list(seed[b])
    if not isinstance(d, int) or not -len(sa) <= d < len(sa) or len(sa) != len(sb):
        return seed
    d %= len(sa)
    if rng.random() < 0.5:
        sa, sb = sb, sa
        a, b = b, a
    if sb[d] < 1:
        return seed
    sa[d], sb[d] = sa[d] + 1, sb[d] - 1
    return {**seed, a: sa, b: sb}


def _draw_dtypes(rng: random.Random, names: list[str], complex_too: bool = False) -> dict[str, str]:
    """One dtype for every tensor (any of them), or float widths mixed (references compute every float dtype
    in float64, so a lemma may not rely on a width; integer and bool operands come from the op's rule).
    ``complex_too``: also complex dtypes (for patterns no real dtype makes well-formed: ``view_as_real(?a)``)."""
    if complex_too and rng.random() < 0.5:
        d = rng.choice(COMPLEX)
        return {v: d for v in names}
    u = rng.random()
    if u < 0.45:
        return {v: "float64" for v in names}
    if u < 0.8:
        d = rng.choice(DTYPES)
        return {v: d for v in names}
    return {v: rng.choice(FLOATS) for v in names}


def _same_dtype(a: str, b: str) -> bool:
    """Equal dtypes; float widths are not told apart (the references compute them all in float64)."""
    return a == b or (a in FLOATS and b in FLOATS)


def _round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Float64 values representable in ``dtype`` (references compute every float dtype in float64)."""
    if dtype == "float32":
        return x.astype(np.float32).astype(np.float64)
    if dtype == "float16":
        return x.astype(np.float16).astype(np.float64)
    if dtype == "bfloat16":  # NumPy has no bfloat16: float32 with the low 16 mantissa bits cleared
        f = x.astype(np.float32)
        return (f.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)
    return x


def _values(nrng: np.random.Generator, shape: tuple, dtype: str, special: bool = False) -> np.ndarray:
    if dtype in COMPLEX:
        return _values(nrng, shape, "float64", special) + 1j * _values(nrng, shape, "float64", special)
    if dtype == "bool":
        return nrng.random(shape) < 0.5
    if dtype in INTS:
        lo = 0 if dtype == "uint8" else -4
        return nrng.integers(lo, 6, shape).astype(dtype)
    x = nrng.standard_normal(shape)
    if special and x.size:
        mask = nrng.random(shape) < 0.25
        x = np.where(mask, nrng.choice(np.array(SPECIAL), shape), x)
    return _round_to(x, dtype)


def _magnitude(values: dict) -> float:
    """The largest finite input magnitude: rounding of intermediate results is relative to it."""
    m = 0.0
    for x in values.values():
        x = np.asarray(x)
        if x.size and x.dtype.kind == "f":
            f = np.abs(x[np.isfinite(x)])
            m = max(m, float(f.max()) if f.size else 0.0)
    return m


def _compare(a, b, special: bool = False, scale: float = 0.0) -> str | None:
    """None if ``a`` and ``b`` agree: integer/bool results exactly, floats to rounding (NaN where NaN is,
    infinities of the same sign); else what differs. With ``special`` (inputs with inf/NaN mixed in) a NaN on
    either side is an indeterminate form of the real-number model the lemmas state (``(2 - 1) * inf`` is
    ``inf`` where ``2 * inf - inf`` is NaN) and is not compared; every other entry is."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"value shapes differ ({list(a.shape)} vs {list(b.shape)})"
    if "c" in (a.dtype.kind, b.dtype.kind):  # complex: real and imaginary parts, each compared
        a, b = (np.stack([np.real(v), np.imag(v)], -1) for v in (a, b))
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        if not np.array_equal(a, b):
            return f"integer values differ (max |diff| {np.max(np.abs(a.astype(np.int64) - b.astype(np.int64)))})"
        return None
    try:
        x, y = a.astype(np.float64), b.astype(np.float64)
    except (TypeError, ValueError):
        return f"values of dtypes {a.dtype} and {b.dtype} do not compare"
    nx, ny = np.isnan(x), np.isnan(y)
    if special:
        keep = ~(nx | ny)
        x, y, nx, ny = x[keep], y[keep], nx[keep], ny[keep]
    if (nx != ny).any():
        return "NaN on one side only"
    ix, iy = np.isinf(x), np.isinf(y)
    if (ix != iy).any() or (np.sign(x[ix]) != np.sign(y[iy])).any():
        return "infinite on one side only (or of another sign)"
    fin = ~(nx | ix)
    if not fin.any():
        return None
    x, y = x[fin], y[fin]
    scale = max(scale, float(np.max(np.abs(x))), float(np.max(np.abs(y))))
    diff = np.abs(x - y)
    if (diff > 1e-7 * np.abs(y) + 1e-9 * scale).any():
        return f"values differ (max |diff| {float(np.max(diff)):.3g})"
    return None


def fuzz_rule(rule: Rule, reg: Registry, trials: int = CHECK_TRIALS, attempts: int = 6000,
              seed: int = 0) -> FuzzReport:
    """Fuzz one rule until ``trials`` (at least :data:`MIN_INSTANCES`) distinct instances pass, or a failure."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # overflow, mean of empty...: values, not news
        warnings.simplefilter("ignore", RuntimeWarning)
        return _fuzz(rule, reg, trials, attempts, seed)


def _fuzz(rule: Rule, reg: Registry, trials: int, attempts: int, seed: int) -> FuzzReport:
    want = max(trials, MIN_INSTANCES)
    rng = random.Random(seed * 7919 + rule.lemma.ref)
    nrng = np.random.default_rng(seed * 104729 + rule.lemma.ref)
    rep = FuzzReport(rule)
    cx = S.Constraints()
    seeds = list(rule.lemma.examples)
    pairs = _concat_pairs(rule.lhs, [])
    split_seeds = [sd for sd in seeds if any(a in sd and b in sd for a, b, _ in pairs)]
    seen: set = set()
    index = dict(rule.index or {})
    complex_too = False
    for attempt in range(attempts):
        if rep.instances >= want:
            break
        rep.attempts += 1
        # seeded shapes first, then every 4th attempt (varied: one size replaced, other dtypes): patterns whose
        # random shapes rarely fit (layer-norm backward over concats) still get their instances
        sd = None
        if seeds and attempt < 5 * len(seeds):
            sd = seeds[attempt % len(seeds)]
        elif seeds and attempt % 4 == 0:
            sd = _vary_seed(rng, rng.choice(seeds), rule)
        elif split_seeds and attempt % 4 == 2:
            sd = _move_split(rng, rng.choice(split_seeds), pairs)
        rank = 0 if rng.random() < 0.04 else rng.randint(1, 3)
        base = [_size(rng) for _ in range(rank)]
        shapes: dict[str, tuple] = {}
        for v in rule.tvars:
            s = list(base)
            u = rng.random()
            if sd is not None and v in sd:
                s = list(sd[v])
            elif u < 0.4 and rank:
                s[rng.randrange(rank)] = _size(rng) if rng.random() < 0.5 else rng.randint(0, 5)
            elif u < 0.6 and rank > 1:
                s = s[rng.randrange(1, rank):]  # a lower-rank operand (broadcast, norm weights)
            shapes[v] = tuple(s)
        env: dict = {v: Leaf(v) for v in rule.tvars}
        pool = list(dict.fromkeys(shapes.values()))  # each shape once: many operands share one
        for x in list(pool):  # shapes a concat of two operands would have
            for y in list(pool):
                if len(x) == len(y):
                    for d in range(len(x)):
                        if all(x[i] == y[i] for i in range(len(x)) if i != d):
                            c = tuple(x[i] + y[i] if i == d else x[i] for i in range(len(x)))
                            if c not in pool:
                                pool.append(c)
        for v, (op, attr) in rule.avars.items():
            if sd is not None and v in sd:
                env[v] = sd[v] if not isinstance(sd[v], list) else tuple(sd[v])
            else:
                env[v] = _draw_attr(rng, op.attr_spec(attr), rank, pool)
        complex_too = complex_too or (attempt == 300 and not rep.instances)  # no real instance in 300 tries
        dtypes = _draw_dtypes(rng, rule.tvars, complex_too)
        dtypes.update({v: "int64" for v in index})
        if sd is not None:  # a seed's "m:dtype": a boolean mask beside float operands, say
            dtypes.update({v: sd[f"{v}:dtype"] for v in rule.tvars if f"{v}:dtype" in sd})
        ranges = _draw_ranges(rng, rule, sd, dtypes)
        ctx = EvalContext(lambda leaf: shapes[leaf.name], cx, reg.functions, lambda leaf: dtypes[leaf.name],
                          lambda leaf: ranges.get(leaf.name))
        try:
            # built as a loaded graph is (dims normalised), then matched again: the condition sees what the
            # e-graph would bind
            lhs = instantiate(rule.lhs, env, ctx, reg)
            lshape = term_shape(lhs, shapes.__getitem__, reg, cx)
            when = instantiate(rule.when, env, ctx, reg) if rule.when is not None else None
            if when is not None:
                term_shape(when, shapes.__getitem__, reg, cx)
            lenv: dict = {v: Leaf(v) for v in rule.tvars}
            if not match(rule.lhs, lhs, lenv) or (when is not None and not match(rule.when, when, lenv)):
                continue
            ldtype = term_dtype(lhs, dtypes.__getitem__, reg)
        except _ERRORS:
            continue
        if not check_condition(rule, lenv, ctx):
            continue
        key = (tuple(shapes[v] for v in rule.tvars), tuple(repr(lenv[v]) for v in rule.avars),
               tuple(dtypes[v] for v in rule.tvars), tuple(sorted(ranges.items())))
        if key in seen:
            continue
        values = {v: _values(nrng, shapes[v], dtypes[v]) for v in rule.tvars}
        try:  # index tensors: integers where the left side is defined (and in their range, if drawn one)
            for v, bound in index.items():
                end = max(int(evaluate(bound, lenv, ctx)), 1)
                lo, hi = ranges.get(v, (0, end))
                values[v] = nrng.integers(max(lo, 0), min(hi, end), shapes[v])  # (ValueError where empty)
        except _ERRORS:
            continue
        for v, (lo, hi) in ranges.items():  # values in the range the condition was told
            if v not in index:
                values[v] = nrng.integers(max(lo, 0) if dtypes[v] == "uint8" else lo, hi, shapes[v]).astype(dtypes[v])
        try:
            with np.errstate(all="ignore"):
                a = term_eval(lhs, values.__getitem__, reg)
                if when is not None:  # a rule that fires only where a term exists: where that term is a value
                    term_eval(when, values.__getitem__, reg)
        except Exception:  # noqa: BLE001 -- the left side is not defined here (torch raises too): no instance
            continue
        # a third of the instances also with 0, -0.0, inf, -inf, NaN, 1e-30, 1e30 mixed into the float inputs
        special = None
        if rng.random() < 0.35:
            special = dict(values)
            special.update({v: _values(nrng, shapes[v], dtypes[v], True) for v in rule.tvars
                            if v not in index and v not in ranges})
        where = _describe(rule, shapes, lenv, dtypes, ranges)
        try:
            rhs = instantiate(rule.rhs, lenv, ctx, reg)
            rshape = term_shape(rhs, shapes.__getitem__, reg, cx)
            rdtype = term_dtype(rhs, dtypes.__getitem__, reg)
        except _ERRORS as e:
            rep.failure = f"right side ill-formed where the left side is fine ({type(e).__name__}: {e}) at {where}"
            return rep
        if tuple(lshape) != tuple(rshape):
            rep.failure = f"shapes differ: left {list(lshape)} vs right {list(rshape)} at {where}"
            return rep
        if ldtype is not None and rdtype is not None and not _same_dtype(ldtype, rdtype):  # (None: an op whose
            # result takes the dtype its program declares, a custom call's; the lemma's condition states it)
            rep.failure = f"dtypes differ: left {ldtype} vs right {rdtype} at {where}"
            return rep
        try:
            with np.errstate(all="ignore"):
                b = term_eval(rhs, values.__getitem__, reg)
        except Exception as e:  # a reference failing where the left side is defined: a pack bug worth reporting
            rep.failure = f"right side fails where the left side is defined ({type(e).__name__}: {e}) at {where}"
            return rep
        bad = _compare(a, b)
        if bad is None and special is not None:
            try:
                with np.errstate(all="ignore"):
                    a2 = term_eval(lhs, special.__getitem__, reg)
                    if when is not None:
                        term_eval(when, special.__getitem__, reg)
            except Exception:  # noqa: BLE001 -- not defined on these values
                a2 = None
            if a2 is not None:
                try:
                    with np.errstate(all="ignore"):
                        b2 = term_eval(rhs, special.__getitem__, reg)
                except Exception as e:  # noqa: BLE001
                    rep.failure = (f"right side fails on special values where the left side is defined "
                                   f"({type(e).__name__}: {e}) at {where}")
                    return rep
                m = _magnitude(special)  # (with 1e30 among the inputs, products of two reach 1e60: their rounding)
                bad = _compare(a2, b2, special=True, scale=m if m < 1e20 else m * m)
                where += " with inf/NaN/0/1e±30 inputs"
        if bad:
            rep.failure = f"{bad} at {where}"
            return rep
        seen.add(key)
        rep.instances += 1
    return rep


def _draw_ranges(rng: random.Random, rule: Rule, sd: dict | None, dtypes: dict) -> dict[str, tuple[int, int]]:
    """For a rule whose condition reads value ranges (vmin/vend): a [lo, hi) for most of its integer tensor
    variables (a seed's ``"t:range": (lo, hi)`` first), which their values are then drawn in; float variables
    become int64 more often than not, so that the condition can hold."""
    if not rule.reads_range:
        return {}
    out = {}
    for v in rule.tvars:
        seeded = sd.get(f"{v}:range") if sd is not None else None
        if seeded is None and rng.random() < 0.15:
            continue
        if dtypes[v] not in INTS and dtypes[v] != "bool" and (seeded is not None or rng.random() < 0.7):
            dtypes[v] = rng.choice(("int64", "int64", "int32"))
        if dtypes[v] not in INTS:
            continue
        if seeded is not None:
            out[v] = (int(seeded[0]), int(seeded[1]))
        else:
            lo = rng.randint(-3, 6)
            out[v] = (lo, lo + rng.randint(1, 8))
        if dtypes[v] == "uint8" and out[v][1] <= 0:
            del out[v]
    return out


def _describe(rule: Rule, shapes: dict, env: dict, dtypes: dict, ranges: dict | None = None) -> str:
    parts = [f"?{v}: {dtypes[v]}{list(s)}" + (f" in [{ranges[v][0]}, {ranges[v][1]})" if ranges and v in ranges else "")
             for v, s in shapes.items()]
    parts += [f"?{v}={env[v]!s}" for v in rule.avars if not v.startswith("__")]
    return "{" + ", ".join(parts) + "}"


def check_all(rules: list[Rule], reg: Registry, trials: int = CHECK_TRIALS, seed: int = 0) -> list[FuzzReport]:
    return [fuzz_rule(r, reg, trials=trials, seed=seed) for r in rules]


def _declaration_rngs(seed: int, k: int, name: str) -> tuple[random.Random, np.random.Generator]:
    """The draws of an op's k-th declaration: shapes and dtypes, and values."""
    return (random.Random(seed * 7919 + k + sum(map(ord, name))),
            np.random.default_rng(seed * 104729 + k + sum(map(ord, name))))


def check_identity(op, reg: Registry, seed: int = 0, trials: int = CHECK_TRIALS) -> list[tuple[str, int, str | None]]:
    """Each ``identity`` declaration of ``op`` (:mod:`graphguard.passes.identities` drops the op where it holds)
    fuzzed: ``op`` of x and a constant of the identity value -- of x's shape, 0-dim or broadcast to x's shape, in
    x's dtype or another
    -- equals x wherever the result keeps x's shape and dtype, over every dtype, empty and size-1 dims, and
    0, -0.0, inf, NaN mixed into x. Returns ``(name, instances, failure or None)`` per declaration."""
    from ..ir.ops import normalize_attrs
    out = []
    for k, (pos, value, fixed) in enumerate(op.identity):
        name = f"identity[{op.name}#{k}]"
        rng, nrng = _declaration_rngs(seed, k, op.name)
        seen, failure = set(), None
        for _ in range(40 * trials):
            if len(seen) >= trials or failure:
                break
            shape = tuple(_size(rng) for _ in range(rng.randint(0, 3)))
            dt = rng.choice(DTYPES)
            cdt = dt if rng.random() < 0.7 else rng.choice(DTYPES)
            r = rng.random()  # x's shape, 0-dim, or one broadcast to x's (fewer dims, size-1 dims)
            cshape = shape if r < 0.5 else () if r < 0.7 else tuple(
                1 if rng.random() < 0.5 else d for d in shape[rng.randint(0, len(shape)):])
            attrs = dict(normalize_attrs(op, dict(fixed), op.name))
            out_dtype = op.dtype([dt, cdt] if pos == 1 else [cdt, dt], attrs) if op.dtype else dt
            if out_dtype != dt:
                continue  # promoted: the op is not dropped there
            x = _values(nrng, shape, dt, special=rng.random() < 0.35)
            c = np.full(cshape, float(value)).astype(np.float64 if cdt in FLOATS else cdt)
            try:
                with np.errstate(all="ignore"):
                    got = op.ref([x, c] if pos == 1 else [c, x], attrs)
            except Exception:  # noqa: BLE001 -- not defined for this dtype (torch raises too)
                continue
            seen.add((shape, cshape, dt, cdt))
            why = _compare(got, x)
            if why:
                failure = f"{op.name} of x {list(shape)} {dt} and {value} {list(cshape)} {cdt}: {why}"
        out.append((name, len(seen), failure or (None if len(seen) >= MIN_INSTANCES else
                                                 f"only {len(seen)} instances (needs {MIN_INSTANCES})")))
    return out


def check_rows(op, reg: Registry, seed: int = 0, trials: int = CHECK_TRIALS) -> list[tuple[str, int, str | None]]:
    """The ``rows`` declaration of ``op`` (``(input, trailing)``; :func:`graphguard.engine.labels.rows.rows_through`
    carries row layouts through the op by it) fuzzed: the op of that input's rows picked by any index list
    (repeats, drops, none at all) equals the op's output rows picked by the same list, over every dtype, empty
    and size-1 dims and special values; the other inputs' shapes are drawn until the op accepts them."""
    if not op.rows:
        return []
    with warnings.catch_warnings():  # (overflow of float16 casts: values, not news)
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_rows(op, seed, trials)


def _check_rows(op, seed: int, trials: int) -> list[tuple[str, int, str | None]]:
    from ..ir.ops import normalize_attrs
    p, trailing = op.rows
    name = f"rows[{op.name}]"
    rng, nrng = _declaration_rngs(seed, 97, op.name)
    attrs = dict(normalize_attrs(op, {}, op.name))
    seen, failure, n, cx = set(), None, op.arity or p + 1, S.Constraints()
    for _ in range(200 * trials):
        if len(seen) >= trials or failure:
            break
        shapes = [tuple(_size(rng) for _ in range(rng.randint(0, 3))) for _ in range(n)]
        shapes[p] = tuple(_size(rng) for _ in range(rng.randint(trailing + 1, trailing + 2)))
        try:
            op.shape(shapes, attrs, cx)
        except ShapeError:
            continue
        dt = rng.choice(DTYPES)
        special = rng.random() < 0.3
        xs = [_values(nrng, s, dt, special=special) for s in shapes]
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(op.ref(xs, attrs))
        except Exception:  # noqa: BLE001 -- shapes (or a dtype) the op does not take
            continue
        x = xs[p]
        rows = x.shape[:x.ndim - trailing]
        if out.ndim != x.ndim or out.shape[:len(rows)] != rows:
            failure = f"{op.name}: output {list(out.shape)} does not keep the rows {list(rows)} of input {p}"
            break
        k = int(np.prod(rows, dtype=np.int64))
        idx = nrng.integers(0, max(k, 1), size=rng.randint(0, 5)) if k else np.zeros(0, dtype=np.int64)
        picked = x.reshape((k,) + x.shape[len(rows):])[idx]
        try:
            with np.errstate(all="ignore"):
                got = np.asarray(op.ref([picked if i == p else a for i, a in enumerate(xs)], attrs))
        except Exception as e:  # noqa: BLE001
            failure = f"{op.name} of rows {list(picked.shape)} fails ({type(e).__name__}: {e}) where the whole works"
            break
        want = out.reshape((k,) + out.shape[len(rows):])[idx]
        seen.add((tuple(shapes), dt, len(idx)))
        why = _compare(got, want, special=special)
        if why:
            failure = f"{op.name} of rows {idx.tolist()} of {dt}{list(x.shape)}: {why}"
    return [(name, len(seen), failure or (None if len(seen) >= MIN_INSTANCES else
                                          f"only {len(seen)} instances (needs {MIN_INSTANCES})"))]


SCALAR_FORM_VALUES = (2, -3, Fraction(1, 2), Fraction(-1, 4), 8, 1, 0, 12, Fraction(3, 8), 1024)


def check_scalar_form(op, reg: Registry, seed: int = 0, trials: int = CHECK_TRIALS) -> list[tuple[str, int, str | None]]:
    """Each ``scalar_form`` declaration of ``op`` (:mod:`graphguard.passes.scalars` rewrites the op where it
    holds) fuzzed: ``op`` of x and a constant c -- of x's shape or 0-dim, in a float or integer dtype that holds
    it -- equals the scalar op of x with its attribute c ** power, wherever neither result changes x's floating
    dtype (as the rewrite requires), over empty and size-1 dims and 0, -0.0, inf, NaN mixed into x. Returns
    ``(name, instances, failure or None)`` per declaration."""
    with warnings.catch_warnings(), np.errstate(all="ignore"):  # overflow of float16 casts: values, not news
        warnings.simplefilter("ignore", RuntimeWarning)
        return _check_scalar_form(op, reg, seed, trials)


def _check_scalar_form(op, reg: Registry, seed: int, trials: int) -> list[tuple[str, int, str | None]]:
    from ..ir.ops import normalize_attrs
    from ..ir.values import holds
    out = []
    for k, (pos, name, attr, power) in enumerate(op.scalar_form):
        label = f"scalar-form[{op.name}#{k}]"
        sop = reg.get(name)
        if sop is None or sop.attr_spec(attr) is None:
            out.append((label, 0, f"{op.name}: its scalar form names {name}({attr}=...), which is not registered"))
            continue
        rng, nrng = _declaration_rngs(seed, 31 * k, op.name)
        seen, failure = set(), None
        for _ in range(60 * trials):
            if len(seen) >= trials or failure:
                break
            shape = tuple(_size(rng) for _ in range(rng.randint(0, 3)))
            dt = rng.choice(FLOATS)
            cdt = rng.choice(FLOATS + ("int64", "int32"))
            value = Fraction(rng.choice(SCALAR_FORM_VALUES))
            if not holds(cdt, value) or (power < 0 and value == 0):
                continue
            cshape = shape if rng.random() < 0.5 else ()
            attrs = dict(normalize_attrs(sop, {attr: value ** power}, name))
            out_dtype = op.dtype([dt, cdt] if pos == 1 else [cdt, dt], {}) if op.dtype else dt
            if out_dtype != dt or (sop.dtype([dt], attrs) if sop.dtype else dt) != dt:
                continue  # promoted: the op is not rewritten there
            special = rng.random() < 0.35
            x = _values(nrng, shape, dt, special=special)
            c = np.full(cshape, float(value)).astype(np.float64 if cdt in FLOATS else cdt)
            try:
                with np.errstate(all="ignore"):
                    want = op.ref([x, c] if pos == 1 else [c, x], dict(normalize_attrs(op, {}, op.name)))
            except Exception:  # noqa: BLE001 -- not defined here (torch raises too)
                continue
            try:
                with np.errstate(all="ignore"):
                    got = sop.ref([x], attrs)
            except Exception as e:  # noqa: BLE001 -- the scalar form fails where the op is defined
                failure = f"{name} fails on x {list(shape)} {dt} where {op.name} is defined ({type(e).__name__}: {e})"
                break
            seen.add((shape, cshape, dt, cdt, value, special))
            why = _compare(got, want, special=special, scale=_magnitude({"x": x}))
            if why:
                failure = f"{op.name} of x {list(shape)} {dt} and {value} {list(cshape)} {cdt}: {why}"
        out.append((label, len(seen), failure or (None if len(seen) >= MIN_INSTANCES else
                                                  f"only {len(seen)} instances (needs {MIN_INSTANCES})")))
    return out


def check_biased(op, reg: Registry, seed: int = 0, trials: int = CHECK_TRIALS) -> list[tuple[str, int, str | None]]:
    """The ``biased`` declaration of ``op`` (``(product, add, attrs)``; :func:`graphguard.passes.bias.bias_after_rows`
    rewrites the op where it holds) fuzzed: under those attributes, ``op(c, a, b)`` equals ``add(product(a, b), c)``
    for a row bias c (``[n]``, ``[1, n]``), matrices with empty and size-1 dims, every float dtype, 0, -0.0, inf,
    NaN mixed in. Returns ``[(name, instances, failure or None)]``."""
    from ..ir.ops import normalize_attrs
    if not op.biased:
        return []
    prod, add, fixed = op.biased
    name = f"biased[{op.name}]"
    pop, aop = reg.get(prod), reg.get(add)
    if pop is None or aop is None:
        return [(name, 0, f"{op.name}: its biased form names {prod} / {add}, which are not registered")]
    rng, nrng = _declaration_rngs(seed, 0, op.name)
    attrs = dict(normalize_attrs(op, dict(fixed), op.name))
    aattrs = dict(normalize_attrs(aop, {}, add))
    seen, failure = set(), None
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        for _ in range(40 * trials):
            if len(seen) >= trials or failure:
                break
            m, k, n = _size(rng), _size(rng), _size(rng)
            dt = rng.choice(FLOATS)
            bshape = (n,) if rng.random() < 0.5 else (1, n)
            special = rng.random() < 0.35
            a, b = _values(nrng, (m, k), dt, special), _values(nrng, (k, n), dt, special)
            c = _values(nrng, bshape, dt, special)
            try:
                want = op.ref([c, a, b], attrs)
            except Exception:  # noqa: BLE001 -- not defined for this dtype (torch raises too)
                continue
            try:
                got = aop.ref([pop.ref([a, b], {}), c], aattrs)
            except Exception as e:  # noqa: BLE001 -- the pieces fail where the fused op is defined
                failure = f"{add}({prod}) fails on [{m}, {k}] @ [{k}, {n}] + {list(bshape)} {dt} ({type(e).__name__})"
                break
            seen.add((m, k, n, bshape, dt, special))
            why = _compare(got, want, special=special, scale=_magnitude({"a": a, "b": b, "c": c}) ** 2 * max(k, 1))
            if why:
                failure = f"{op.name} of [{m}, {k}] @ [{k}, {n}] + {list(bshape)} {dt}: {why}"
    return [(name, len(seen), failure or (None if len(seen) >= MIN_INSTANCES else
                                          f"only {len(seen)} instances (needs {MIN_INSTANCES})"))]
