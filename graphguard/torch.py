"""PyTorch entry points: ``graphguard.torch.capture(build, example_inputs, world_size=W, backward=False)``,
``graphguard.torch.input_relation(spec, impl, user)`` (the relation DTensor placements state, completed
with the tangents and overridden by the user's) and ``assert_refines`` (for users' test suites, also
:mod:`graphguard.testing`).

See :mod:`graphguard.frontends.fx.capture` and :mod:`graphguard.frontends.fx.relations`.
"""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from .engine.result import VerifyResult
from .errors import ForwardVerdict
from .frontends.fx.capture import Captured, capture
from .frontends.fx.relations import input_relation
from .frontends.fx.torchtitan import on_cpu as torchtitan_on_cpu

__all__ = ["capture", "Captured", "input_relation", "torchtitan_on_cpu", "assert_refines"]


def assert_refines(model=None, *, world_size: int = 2, backward: bool = False, spec=None, impl=None, inputs=None,
                   relation=None, expect=None, allow_partial=False, replay: bool = False, budget=None,
                   plugins=None) -> VerifyResult:
    """Capture ``model``'s sequential and distributed programs at ``world_size`` ranks (forward, or forward and
    backward), verify, and fail with the report unless the distributed program refines the sequential one.
    ``relation`` / ``expect`` (dicts as a model file's functions return) override the model's own."""
    __tracebackhide__ = True  # (pytest shows the assertion, not this frame)
    from .api import verify
    from .frontends.fx.model_file import _impl, _user_relation, capture_programs, load_model_file
    from .plugins import load_plugins
    if model is None:
        if not (callable(spec) and callable(impl) and callable(inputs)):
            raise TypeError("assert_refines needs a model file, an object with spec/impl/inputs, or spec=, impl= "
                            "and inputs= functions")
        model = SimpleNamespace(spec=spec, impl=impl, inputs=inputs)
        path = Path("<assert_refines>")
    elif isinstance(model, (str, Path)):
        path = Path(model)
        model = load_model_file(path)
    else:
        path = Path(getattr(model, "__file__", None) or f"<{type(model).__name__}>")
    pl = plugins or load_plugins()
    progs = capture_programs(model, path, world_size, backward, [None, *range(world_size)], pl)
    s, d = progs[None], _impl(model, path, backward, [progs[r] for r in range(world_size)])
    user = _user_relation(model, path, world_size, backward) if relation is None else dict(relation)
    if expect is not None:
        user["expect"] = expect
    try:
        rel = input_relation(s, d, user, pl, str(path))
    except ForwardVerdict as e:  # (a backward whose forward does not refine: the forward's report)
        raise AssertionError(f"{e}\n{e.result.render()}") from None
    kw = {"budget": budget} if budget is not None else {}
    result = verify(s.graph(), d.graph(), rel, replay=replay, allow_partial=allow_partial, plugins=pl, **kw)
    if result.verdict != "refines":
        raise AssertionError(f"{path}: the distributed program does not refine the sequential one at world size "
                             f"{world_size}{' (forward + backward)' if backward else ''}\n{result.render()}")
    if replay and result.replay is not None and not result.replay["ok"]:
        raise AssertionError(f"{path}: a relation graphguard found does not hold numerically\n{result.render()}")
    return result

