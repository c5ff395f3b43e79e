"""graphguard in a user's own test suite::

    from graphguard.testing import assert_refines

    def test_my_tp_plan():
        assert_refines("models/my_tp.py", world_size=2, backward=True)

    def test_inline():
        assert_refines(spec=lambda: Seq(), impl=lambda rank, world: TP(rank, world),
                       inputs=lambda rank, world: (torch.randn(4, 8),), world_size=2)

The model is a model file (as ``graphguard capture`` reads: ``spec()``, ``impl(rank, world)``,
``inputs(rank, world)``, optionally ``relation(world, backward)``, ``expect``, ``repeat`` ...), any object with
those attributes (a module you imported), or the functions given by keyword. Both programs are captured with
the fx frontend, verified, and a verdict other than "refines" fails the test with graphguard's report as the
assertion message (the operator, its source line and module, the hint). Returns the :class:`VerifyResult`.
"""
from __future__ import annotations

from .torch import assert_refines

__all__ = ["assert_refines"]
