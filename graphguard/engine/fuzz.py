"""``graphguard lemmas check``: fuzz every lemma against the NumPy references.

For each rule (each direction of each lemma) random shapes, attribute values and tensor values are
drawn; instances where the left side is well-formed and the side condition holds are evaluated on both
sides. A lemma is unsound if, on such an instance, the right side is ill-formed, has another shape, or
computes different values. A lemma that cannot be instantiated at all is reported too: an untested
lemma is not a passed one.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from ..errors import ShapeError
from ..ir import scalar as S
from ..ir.expr import Leaf
from ..ir.ops import Registry
from ..ir.semantics import term_eval, term_shape
from .lemma import EvalContext, Rule, check_condition, evaluate, instantiate


@dataclass
class FuzzReport:
    rule: Rule
    trials: int = 0
    attempts: int = 0
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None and self.trials > 0


def _shape_like(rng: random.Random, shapes: list[tuple]) -> tuple:
    base = list(rng.choice(shapes)) if shapes else [rng.randint(1, 4)]
    r = rng.random()
    if r < 0.25 and len(base) > 1:  # a suffix (normalized_shape of a layer norm, ...)
        return tuple(base[rng.randrange(1, len(base)):])
    if r < 0.3 and len(base) >= 2:  # merge two adjacent dims
        i = rng.randrange(len(base) - 1)
        base[i:i + 2] = [base[i] * base[i + 1]]
    elif r < 0.6:  # split a dim
        i = rng.randrange(len(base))
        for f in (2, 3):
            if base[i] % f == 0 and base[i] > f:
                base[i:i + 1] = [f, base[i] // f]
                break
    return tuple(base)


def _draw_attr(rng: random.Random, kind: str, spec, rank: int, shapes: list[tuple]):
    if spec.optional and rng.random() < 0.3:
        return None
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "int":
        return rng.randrange(max(rank, 1))
    if kind == "scalar":
        return rng.randint(0, 6)
    if kind == "ints":
        p = list(range(rank))
        u = rng.random()
        if u < 0.4 and rank > 1:  # a proper subset of the dims (reductions)
            return tuple(sorted(rng.sample(p, rng.randint(1, rank - 1))))
        if u < 0.9:
            rng.shuffle(p)
        return tuple(p)
    if kind == "scalars":
        return _shape_like(rng, shapes)
    if kind == "str":
        if spec.choices:
            return rng.choice(spec.choices)
        if spec.name == "dtype":
            return rng.choice(["float64", "float32"])
        return spec.default if isinstance(spec.default, str) else "sum"
    if kind == "number":
        return Fraction(rng.choice([-2, -1, 1, 2, 3]), rng.choice([1, 2, 4]))
    raise AssertionError(kind)


def fuzz_rule(rule: Rule, reg: Registry, trials: int = 25, attempts: int = 4000, seed: int = 0) -> FuzzReport:
    rng = random.Random(seed * 7919 + rule.lemma.ref)
    nrng = np.random.default_rng(seed * 104729 + rule.lemma.ref)
    rep = FuzzReport(rule)
    cx = S.Constraints()
    seeds = list(rule.lemma.examples)
    for attempt in range(attempts):
        if rep.trials >= trials:
            break
        rep.attempts += 1
        # seeded shapes first, then every 4th attempt (fresh values each time): patterns whose random
        # shapes rarely fit (layer-norm backward over concats) still get their trials quickly
        seed = seeds[attempt % len(seeds)] if seeds and (attempt < 5 * len(seeds) or attempt % 4 == 0) else None
        rank = rng.randint(1, 3)
        base = [rng.randint(1, 4) for _ in range(rank)]
        shapes: dict[str, tuple] = {}
        for v in rule.tvars:
            s = list(base)
            u = rng.random()
            if seed is not None and v in seed:
                s = list(seed[v])
            elif u < 0.4:
                s[rng.randrange(rank)] = rng.randint(1, 5)
            elif u < 0.6 and rank > 1:
                s = s[rng.randrange(1, rank):]  # a lower-rank operand (broadcast, norm weights)
            shapes[v] = tuple(s)
        env: dict = {v: Leaf(v) for v in rule.tvars}
        pool = list(shapes.values())
        for x in list(pool):  # shapes a concat of two operands would have
            for y in list(pool):
                if len(x) == len(y):
                    for d in range(len(x)):
                        if all(x[i] == y[i] for i in range(len(x)) if i != d):
                            pool.append(tuple(x[i] + y[i] if i == d else x[i] for i in range(len(x))))
        for v, (op, attr) in rule.avars.items():
            spec = op.attr_spec(attr)
            if seed is not None and v in seed:
                env[v] = seed[v] if not isinstance(seed[v], list) else tuple(seed[v])
            else:
                env[v] = _draw_attr(rng, spec.kind, spec, rank, pool)
        ctx = EvalContext(lambda leaf: shapes[leaf.name], cx, reg.functions)
        try:
            lhs = instantiate(rule.lhs, env, ctx, reg)
            lshape = term_shape(lhs, shapes.__getitem__, reg, cx)
        except (ShapeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError):
            continue
        if not check_condition(rule, env, ctx):
            continue
        values = {v: nrng.standard_normal(shapes[v]) for v in rule.tvars}
        try:  # index tensors: integers where the left side is defined
            for v, bound in (rule.index or {}).items():
                values[v] = nrng.integers(0, max(int(evaluate(bound, env, ctx)), 1), shapes[v])
        except (ValueError, TypeError, KeyError, ZeroDivisionError):
            continue
        where = _describe(rule, shapes, env)
        try:
            rhs = instantiate(rule.rhs, env, ctx, reg)
            rshape = term_shape(rhs, shapes.__getitem__, reg, cx)
        except (ShapeError, ValueError, IndexError, TypeError, KeyError, ZeroDivisionError) as e:
            rep.failure = f"right side ill-formed where the left side is fine ({e}) at {where}"
            return rep
        if tuple(lshape) != tuple(rshape):
            rep.failure = f"shapes differ: left {list(lshape)} vs right {list(rshape)} at {where}"
            return rep
        try:
            with np.errstate(all="ignore"):
                a = term_eval(lhs, values.__getitem__, reg)
                b = term_eval(rhs, values.__getitem__, reg)
        except Exception as e:  # a reference implementation failing is a pack bug worth reporting
            rep.failure = f"reference evaluation failed ({type(e).__name__}: {e}) at {where}"
            return rep
        if a.shape != b.shape or not np.allclose(a, b, rtol=1e-7, atol=1e-9, equal_nan=True):
            diff = float(np.nanmax(np.abs(a - b))) if a.shape == b.shape else float("inf")
            rep.failure = f"values differ (max |diff| {diff:.3g}) at {where}"
            return rep
        rep.trials += 1
    return rep


def _describe(rule: Rule, shapes: dict, env: dict) -> str:
    parts = [f"?{v}: {list(s)}" for v, s in shapes.items()]
    parts += [f"?{v}={env[v]!s}" for v in rule.avars]
    return "{" + ", ".join(parts) + "}"


def check_all(rules: list[Rule], reg: Registry, trials: int = 25, seed: int = 0) -> list[FuzzReport]:
    return [fuzz_rule(r, reg, trials=trials, seed=seed) for r in rules]
