"""Growth checks for the bounded-time tests: how much longer does a function take on a longer input?

Not an absolute wall-clock threshold (a loaded 2-core CI machine makes any fixed number flaky) but a
ratio: the input grows by ``factor`` and the time may grow by at most ``bound`` (linear gives about
``factor``, quadratic ``factor**2``). Times are the calling thread's CPU time, the best of several
runs, so neither other processes nor a spike during one run decide; a large-input run under ``floor_s`` passes whatever the ratio, because at that scale
no input is a denial of service and timer noise dominates. Helpers, not tests (no ``test_`` prefix).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

FACTOR = 8  # the input grows 8x between the two sizes
BOUND = 20.0  # ... and the time may grow 20x: linear ~8x (allocation adds a little); quadratic ~64x fails
FLOOR_S = 0.005  # a large run this fast passes whatever the ratio


def best_of(fn: Callable[[Any], object], arg: Any, runs: int) -> float:
    """The least CPU time of ``runs`` calls, in this thread: time spent waiting for a core on a loaded
    machine is not the function's. The cyclic garbage collector is paused: its full collections cost in
    proportion to every live object, not to this input, and make a linear function look worse."""
    best = float("inf")
    enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            started = time.thread_time()
            fn(arg)
            best = min(best, time.thread_time() - started)
    finally:
        if enabled:
            gc.enable()
    return best


def growth_problem(
    fn: Callable[[Any], object],
    make: Callable[[int], Any],
    n: int,
    *,
    factor: int = FACTOR,
    bound: float = BOUND,
    floor_s: float = FLOOR_S,
) -> str | None:
    """``None`` when ``fn`` on ``make(n * factor)`` takes at most ``bound`` times its time on
    ``make(n)`` (or under ``floor_s``); else a message with the input and both times. The large input
    runs once first, and again only if that run looked too slow, so a super-linear function fails after
    one slow run instead of several."""
    small, large = make(n), make(n * factor)
    fn(small)  # warm caches (lru_cache'd stems, compiled patterns) outside the timing
    t_small = best_of(fn, small, 5)
    t_large = best_of(fn, large, 1)
    if t_large <= max(floor_s, bound * t_small):
        return None
    t_small = min(t_small, best_of(fn, small, 5))
    t_large = min(t_large, best_of(fn, large, 3))
    if t_large <= max(floor_s, bound * t_small):
        return None
    sample = repr(large[:60]) if isinstance(large, str | bytes) else type(large).__name__
    return (
        f"{getattr(fn, '__name__', fn)}: {factor}x the input took {t_large / max(t_small, 1e-9):.1f}x the "
        f"time ({t_small * 1000:.2f} ms -> {t_large * 1000:.2f} ms, bound {bound}x); input {sample}..."
    )
