"""Graph passes: the rewrites both programs go through after loading and before proving, as data.

``PIPELINE`` is the ordered list of the engine's own passes -- normal forms every program is brought to, each
driven by what the ops declare (:class:`~graphguard.ir.ops.OpDef`'s ``biased``, ``fill``, ``fuses``,
``identity``, ``scalar_form``), none naming a dialect's op. Passes that move one dialect's program toward
another's live with the bridge pack between the two and join the pipeline through the ``graphguard_passes``
hook (each naming the pass it runs after): the ``aten-hlo`` pack's ``fold_constants``, ``masked_softmax`` and
``scale_into_product`` (``lemma_packs/aten_hlo/passes.py``). :func:`build_pipeline` checks that each pass's
``requires`` are ensured by an earlier pass; :func:`run_pipeline` runs it on G_s, then G_d, and validates the
program after each pass (:mod:`graphguard.passes.manager`); with ``GRAPHGUARD_CHECK_PASSES=1`` it also checks what
each pass ensures -- its normal form reached: run again on a copy, the pass changes nothing (:func:`check_ensures`).

=====================  =============================================  ===========================================
pass                   requires                                       ensures
=====================  =============================================  ===========================================
bias_after_rows        --                                             bias-after-rows
round_fills            --                                             fills-rounded
slices_of_concats      --                                             slices-read-parts
fuse_expressions       fills-rounded                                  expressions-fused
widen_fills            --                                             fills-widened
drop_identities        fills-widened                                  identities-dropped
scalar_forms           identities-dropped                             scalar-forms
=====================  =============================================  ===========================================
"""
from __future__ import annotations

from .bias import bias_after_rows, when_fused_ops_differ
from .fills import round_fills, widen_fills
from .fusion import fuse_expressions
from .identities import drop_identities
from .manager import (Pass, PassContext, PassError, build_pipeline, check_ensures, check_order, run_pass,
                      run_pipeline)
from .scalars import scalar_forms
from .slices import slices_of_concats

PIPELINE: tuple[Pass, ...] = (
    # reshape(addmm(b, x, w)) -> reshape(mm(x, w)) + b, where one program calls a fused op the other does not
    Pass("bias_after_rows", when_fused_ops_differ, ensures={"bias-after-rows"}),
    # a float32 fill of 1e-6 holds float32(1e-6)
    Pass("round_fills", lambda g, c: round_fills(g, c.reg, c.cx), ensures={"fills-rounded"}),
    # cat(a, b)[i:j] within a -> a[i:j]
    Pass("slices_of_concats", lambda g, c: slices_of_concats(g, c.reg, c.cx), ensures={"slices-read-parts"}),
    # an expression an op declares it computes (HF's RMSNorm in ATen ops) -> that op, where the other program
    # does not spell it out alike (reads the fills' values: rounded first)
    Pass("fuse_expressions", lambda g, c: fuse_expressions(g, c.reg, c.cx, other=c.other),
         requires={"fills-rounded"}, ensures={"expressions-fused"}),
    # where(m, full([], 0), ...) beside a program that does not broadcast (HLO's select): the fills widened
    Pass("widen_fills", lambda g, c: widen_fills(g, c.reg, c.cx, other=c.other), ensures={"fills-widened"}),
    # x + 0, x * 1 -> x (a widened fill is the operand's shape: dropped too)
    Pass("drop_identities", lambda g, c: drop_identities(g, c.reg, c.cx), requires={"fills-widened"},
         ensures={"identities-dropped"}),
    # x * c, x / c for a constant c -> mul.Scalar (x * 1 dropped before, not made a scalar form)
    Pass("scalar_forms", lambda g, c: scalar_forms(g, c.reg, c.cx), requires={"identities-dropped"},
         ensures={"scalar-forms"}),
)

__all__ = ["PIPELINE", "Pass", "PassContext", "PassError", "bias_after_rows", "build_pipeline", "check_ensures",
           "check_order",
           "drop_identities", "fuse_expressions", "round_fills", "run_pass", "run_pipeline", "scalar_forms",
           "slices_of_concats", "widen_fills"]
