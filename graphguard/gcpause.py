"""Pausing Python's cyclic garbage collector while a large structure is built."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def collector_paused():
    """Reading or building a graph makes millions of objects and no cyclic garbage; the cyclic collector would
    scan the growing graph again and again (half the time of loading 300 000 nodes)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
