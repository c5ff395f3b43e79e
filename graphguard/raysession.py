"""The Ray cluster graphguard's parallel commands run their tasks on (``graphguard sweep``, ``capture --workers``)."""
from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def ray_session(workers: int, address: str | None, missing: Exception):
    """Ray, initialised: a local cluster of ``workers`` CPUs started here (and shut down after), the running
    cluster at ``address``, or the one this process already joined. ``missing`` is raised where Ray is not
    installed."""
    try:
        import ray
    except ImportError:
        raise missing from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=address, num_cpus=None if address else workers, include_dashboard=False,
                 logging_level="ERROR", log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        if started:
            ray.shutdown()
