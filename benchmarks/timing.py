"""Timing helpers shared by the benchmark scripts (run them as scripts: this folder is
then on ``sys.path``)."""

from __future__ import annotations

import time
from collections.abc import Callable


def best_of(fn: Callable[[], object], rounds: int) -> float:
    """The shortest wall time in seconds of ``rounds`` calls of ``fn``, after one
    untimed call (compilation, caches)."""
    fn()
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
