"""graphguard: verify that a distributed model implementation refines its sequential specification.

    result = graphguard.verify("spec.gg.json", "impl.gg.json", "relation.yaml")
    result.verdict        # "refines" | "does-not-refine" | "inconclusive"
    result.r_o_lines()    # ["F = concat(F@0, F@1, dim=0)"]
"""
from .api import verify
from .engine.egraph import Budget
from .engine.result import Failure, VerifyResult
from .errors import GraphGuardError, InputError
from .hookspecs import hookimpl

__all__ = ["verify", "Budget", "VerifyResult", "Failure", "GraphGuardError", "InputError", "hookimpl"]
__version__ = "0.1.0"
