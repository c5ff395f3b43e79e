"""Dynamic dims of a capture: TorchDynamo's SymInt sizes as the user's symbols, with their constraints.

``capture(..., dynamic={"x": {0: "S"}})`` marks dim 0 of input ``x`` dynamic (``torch._dynamo.mark_dynamic``)
and names it: the text is that dim's size in the user's symbols on the rank being captured (``S`` in G_s,
``S/2`` for a sequence shard of 2 ranks). After tracing, every size TorchDynamo derived (``s77``, ``2*s77``,
``s77//2``) is rewritten over the user's symbols, and what its ShapeEnv knows about each symbol becomes
``symbols:`` constraints of the relation file: the value range (TorchDynamo starts at 2, as it specialises
sizes 0 and 1) and divisibility it guarded on. For ``s = c*S`` with ``s`` in ``[lo, hi]``, S is in
``[lo/c, hi/c]`` and a multiple of what makes ``c*S`` (and ``c*S/m`` when ``s`` is guarded a multiple of
m) an integer. The graph is the program only where TorchDynamo's guards hold, so every guard must follow
from those constraints (z3); a branch ``s != k`` keeps the side of k the example is on, and a guard that
fails for small sizes raises the minimum; any other guard, a marked dim TorchDynamo specialised to a
constant, or a size over symbols nobody named, is an :class:`InputError` saying so.
"""
from __future__ import annotations

import re
from fractions import Fraction
from math import gcd, lcm

import sympy as sp

from graphguard.errors import InputError
from graphguard.ir import scalar as S


class Symbols:
    """The ShapeEnv symbols of one capture, mapped to the user's symbols."""

    def __init__(self, where: str, rank: int | None = None, data_ops: dict | None = None):
        self.where = where
        self.rank = rank
        self.data_ops = data_ops or {}  # IR op -> its data_sizes ((attr, output dim), ...)
        self.data: set[str] = set()  # symbols of sizes the data decides (see data_size)
        self.items: dict = {}  # an unbacked symbol read with .item() -> the 0-d tensor it came from
        self.lengths: dict = {}  # (dim, bounds, sliced length) -> the symbol of a slice's length there
        self.data_env = None
        self.bound: list[tuple[str, int, sp.Expr, sp.Expr]] = []  # (input, dim, ShapeEnv expr, user expr)
        self.subs: dict[sp.Symbol, sp.Expr] = {}
        self.shape_env = None
        self.constraints: dict[str, dict] = {}

    def bind(self, name: str, dim: int, size, text: str) -> None:
        """Input ``name``'s dim ``dim`` traced as ``size`` (a SymInt) is ``text`` in the user's symbols."""
        import torch
        if not isinstance(size, torch.SymInt) or not isinstance(size.node.expr, sp.Symbol):
            raise InputError(f"{self.where}: TorchDynamo specialised dim {dim} of input '{name}' to {size} although "
                             f"it was marked dynamic (the program depends on its value)")
        try:
            user = S.parse(str(text))
        except ValueError:
            raise InputError(f"{self.where}: dynamic dim {dim} of '{name}': bad size expression {text!r}") from None
        self.shape_env = size.node.shape_env
        self.bound.append((name, dim, size.node.expr, S.sym(user)))

    def finish(self) -> None:
        """After tracing: the substitution for every ShapeEnv symbol, and the user's symbols' constraints."""
        env = self.shape_env
        if env is None:
            return
        for name, dim, e, user in self.bound:
            r = env.replace(e)  # the ShapeEnv may have rewritten s77 as 2*s12 while tracing
            syms = list(r.free_symbols)
            coeff = sp.simplify(r / syms[0]) if len(syms) == 1 else None
            if coeff is None or not coeff.is_Rational or coeff <= 0:
                raise InputError(f"{self.where}: TorchDynamo turned dynamic dim {dim} of '{name}' into {r}; "
                                 f"only a multiple of one symbol is supported")
            self.subs[syms[0]] = user / coeff
        scale = {}  # ShapeEnv symbol s -> (c, U): s = c*U
        for s, user in self.subs.items():
            ufree = list(user.free_symbols)
            c = sp.simplify(user / ufree[0]) if len(ufree) == 1 else None
            if c is None or not c.is_Rational or c <= 0:
                raise InputError(f"{self.where}: dynamic size {S.text(S.norm(user))} must be a positive multiple "
                                 f"of one symbol (like S or S/2)")
            scale[s] = (Fraction(int(c.p), int(c.q)), ufree[0].name)
        guards = [g.expr for g in env.guards if g.expr.free_symbols]
        for s, (c, u) in scale.items():
            info = self.constraints.setdefault(u, {"min": 1})
            vr = env.var_to_range.get(s)
            lo = vr.lower if vr is not None and vr.lower.is_Integer else 0
            hi = vr.upper if vr is not None and vr.upper.is_Integer else None
            for g in guards:  # a branch on a size (s != k): keep the side of k the example is on
                if isinstance(g, sp.Ne) and set(g.args) - {s} and s in g.args:
                    k = next(a for a in g.args if a != s)
                    if k.is_Integer:
                        if env.backed_var_to_val[s] > k:
                            lo = max(lo, int(k) + 1)
                        else:
                            hi = int(k) - 1 if hi is None else min(hi, int(k) - 1)
            info["min"] = max(info["min"], -(-int(lo) * c.denominator // c.numerator))
            if hi is not None:
                top = int(hi) * c.denominator // c.numerator
                info["max"] = min(info.get("max", top), top)
            mult = c.denominator
            for m in self._divisors(s, guards):
                mult = lcm(mult, m * c.denominator // gcd(c.numerator, m * c.denominator))
            if mult > 1:
                info["multiple_of"] = lcm(info.get("multiple_of", 1), mult)
        self._check(guards, scale)

    def _divisors(self, s: sp.Symbol, guards: list) -> list[int]:
        """Divisibility TorchDynamo guarded on: ``Eq(Mod(a*s, m), 0)`` makes s a multiple of m / gcd(a, m)."""
        out = []
        for g in list(getattr(self.shape_env, "divisible", ())) + guards:
            for mod in g.atoms(sp.Function):
                if type(mod).__name__ not in ("Mod", "PythonMod") or not mod.args[1].is_Integer:
                    continue
                a = sp.simplify(mod.args[0] / s)
                if (g == mod or (isinstance(g, sp.Eq) and 0 in g.args)) and a.is_Integer:
                    m = int(mod.args[1])
                    out.append(m // gcd(int(a), m))
        return out

    def _check(self, guards: list, scale: dict) -> None:
        """Every guard TorchDynamo recorded must hold for all values the constraints allow (z3), else the
        captured graph is not the program for all of them. A guard on one symbol that fails for small values
        (``Ne(B//2, 1)``: sizes 0 and 1 are specialised) raises that symbol's minimum, up to the example's
        value (implication is monotone in the minimum: binary search); any other failing guard is an error."""
        for g in guards:
            if self._implied(g, scale):
                continue
            users = {scale[x][1] for x in g.free_symbols if x in scale}
            if len(users) == 1:
                u = users.pop()
                s = next(x for x in g.free_symbols if x in scale)
                info, c = self.constraints[u], scale[s][0]
                lo, hi = info["min"], int(Fraction(int(self.shape_env.backed_var_to_val[s])) / c)
                while lo < hi:
                    info["min"] = mid = (lo + hi) // 2
                    lo, hi = (lo, mid) if self._implied(g, scale) else (mid + 1, hi)
                info["min"] = lo
                if self._implied(g, scale):
                    continue
            cons = ", ".join(f"{u} {info}" for u, info in self.constraints.items())
            raise InputError(f"{self.where}: TorchDynamo specialised the graph to sizes where {g.xreplace(self.subs)} "
                             f"holds, which the symbols' constraints ({cons}) do not imply; the program depends on "
                             f"the size (mark fewer dims dynamic or give sizes it does not branch on)")

    def _implied(self, g, scale: dict) -> bool:
        import z3
        solver = z3.Solver()
        solver.set("timeout", 2000)
        users = {}
        for u, info in self.constraints.items():
            v = users[u] = z3.Int(u)
            solver.add(v >= info["min"], *([v <= info["max"]] if "max" in info else []),
                       *([v % info["multiple_of"] == 0] if "multiple_of" in info else []))
        var = {}
        for x, (c, u) in scale.items():
            var[x] = z3.Int(str(x))
            solver.add(var[x] * c.denominator == users[u] * c.numerator)
        facts: list = []
        try:
            goal = _z3(g, var, facts)
        except ValueError:
            return False
        solver.add(*facts, z3.Not(goal))
        return solver.check() == z3.unsat

    def data_size(self, size, node: str, bound: int | None, prefix: str = "nnz_", same: str | None = None) -> str:
        """A size the data decides (``nonzero``'s row count, an unbacked ``u0``) becomes a symbol named
        after its node (``nnz_nonzero_1``; ``_r<k>`` on rank k, so ranks' sizes stay apart) with the range
        0..``bound`` -- or the symbol ``same`` named before (a slice's length at bounds already read). Returns
        the symbol's name."""
        import torch
        e = size.node.expr if isinstance(size, torch.SymInt) else None
        env = size.node.shape_env if e is not None else None
        if env is not None:
            self.data_env = env
            e = env.replace(e)
        if not isinstance(e, sp.Symbol):
            raise InputError(f"{self.where}: node '{node}': its data-dependent size is {size}, not a fresh symbol")
        if not same and e in self.subs:  # (the ShapeEnv had already equated it with a size named before)
            return str(self.subs[e])
        name = same or prefix + re.sub(r"\W", "_", node) + (f"_r{self.rank}" if self.rank is not None else "")
        self.subs[e] = S.symbol(name)
        if same:
            return name
        self.constraints[name] = {"min": 0, **({"max": int(bound)} if bound is not None else {})}
        self.data.add(name)
        return name

    def read_item(self, v, source: str) -> None:
        """``t.item()`` traced as the unbacked ``v``: a value the data decides, read from the 0-d tensor
        ``source`` (a slice at that bound keeps the tensor as its operand, see aten.slice_at)."""
        import torch
        if isinstance(v, torch.SymInt) and isinstance(v.node.expr, sp.Symbol):
            self.data_env = v.node.shape_env
            self.items[self.data_env.replace(v.node.expr)] = source

    def item_source(self, v) -> str | None:
        """The 0-d tensor a value read with ``.item()`` came from (None for any other value)."""
        import torch
        if not self.items or not isinstance(v, torch.SymInt):
            return None
        e = v.node.expr
        return self.items.get(v.node.shape_env.replace(e) if isinstance(e, sp.Symbol) else e)

    def scalar(self, v):
        """A traced size (int or SymInt) as an IR scalar over the user's symbols."""
        import torch
        if isinstance(v, bool) or not isinstance(v, (torch.SymInt, sp.Basic)):
            return v
        e = v.node.expr if isinstance(v, torch.SymInt) else v
        if e.is_Integer:
            return int(e)
        env = self.shape_env or self.data_env
        if env is not None:
            e = env.replace(e)
        e = e.xreplace(self.subs)
        unknown = {x.name for x in e.free_symbols} - set(self.constraints)
        if unknown and all(re.fullmatch(r"u\d+", u) for u in unknown):  # unbacked: a size the data decides
            err = InputError(f"{self.where}: size {e} is decided by the data")
            err.data_size = True
            raise err
        if unknown:
            raise InputError(f"{self.where}: symbolic size {e} over {sorted(unknown)}, which no dynamic input dim "
                             f"names (mark it dynamic with a name)")
        from torch.utils._sympy.functions import CleanDiv, FloorDiv
        e = e.replace(FloorDiv, lambda a, b: sp.floor(a / b)).replace(CleanDiv, lambda a, b: a / b)
        try:
            return S.parse(str(e))
        except ValueError:
            raise InputError(f"{self.where}: unsupported symbolic size {e}") from None


def merge_symbols(*groups: dict) -> dict:
    """Symbols' constraints from several sources together (a symbol must satisfy all of them)."""
    out: dict[str, dict] = {}
    for g in groups:
        for name, spec in g.items():
            o = out.setdefault(name, {})
            for k, v in spec.items():
                o[k] = v if k not in o else max(o[k], v) if k == "min" else min(o[k], v) if k == "max" else lcm(o[k], v)
    return out


def _z3(e, var: dict, facts: list):
    """A ShapeEnv guard or size expression in z3 (integers; floor division and modulo exactly, by fresh
    variables whose defining facts go to ``facts``)."""
    import z3
    name = type(e).__name__
    args = [_z3(a, var, facts) for a in e.args] if e.args else []
    if e.is_Integer:
        return z3.IntVal(int(e))
    if e.is_Symbol:
        if e not in var:
            raise ValueError(e)
        return var[e]
    if isinstance(e, sp.Add):
        return z3.Sum(args)
    if isinstance(e, sp.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if name in ("FloorDiv", "CleanDiv", "Mod", "PythonMod"):
        a, b = args
        q = z3.FreshInt("q")
        facts.append(b != 0)
        facts.append(z3.If(b > 0, z3.And(b * q <= a, a < b * q + b), z3.And(b * q >= a, a > b * q + b)))
        return q if name in ("FloorDiv", "CleanDiv") else a - b * q
    ops = {"Equality": lambda a, b: a == b, "Unequality": lambda a, b: a != b, "StrictLessThan": lambda a, b: a < b,
           "LessThan": lambda a, b: a <= b, "StrictGreaterThan": lambda a, b: a > b,
           "GreaterThan": lambda a, b: a >= b, "And": z3.And, "Or": z3.Or, "Not": z3.Not}
    if name in ops:
        return ops[name](*args)
    if e is sp.true or e is sp.false:
        return z3.BoolVal(bool(e))
    raise ValueError(f"cannot translate {e}")
