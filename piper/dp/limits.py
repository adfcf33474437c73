"""Time limit and progress reports of one DP run."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from piper.core import stopping
from piper.dp.compile_clock import solve_clock

#: seconds one DP kernel call aims at between two checks of the deadline and of interrupts
#: (:func:`past`); a chunk grows at most twofold per call, since later ideal pairs cost more
CHUNK_S = 0.25


def next_chunk(chunk: int, seconds: float, low: int, high: int) -> int:
    """The size of the next chunk of a kernel whose last ``chunk`` items took ``seconds``:
    about :data:`CHUNK_S` seconds' worth, at most twice ``chunk``, within [low, high]."""
    return int(min(high, max(low, chunk * min(2.0, CHUNK_S / max(seconds, 1e-3)))))


class TimeUp(Exception):
    pass


def past(deadline: float | None) -> bool:
    """True once ``solve_clock()`` has passed ``deadline`` (None: no limit). Raises
    :class:`piper.core.stopping.Interrupted` after SIGINT / SIGTERM: the DP's loops call this
    between kernel calls, so an interrupt stops them there (:func:`piper.core.stopping.polled`)."""
    stopping.check(None)
    return deadline is not None and solve_clock() > deadline


class Progress:
    """Progress lines on stderr, at most one per ``every_s`` seconds unless forced. A line the
    same as the last one printed (by any Progress of the process) is not repeated: a uniform
    solve runs one DP per (t, d), and each would say the same "N ideals, P ideal pairs"."""

    _last_line: str | None = None

    def __init__(self, enabled: bool, every_s: float = 2.0) -> None:
        self.enabled = enabled
        self.every = every_s
        self.last = time.perf_counter()

    def say(self, msg: str, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if (force or now - self.last >= self.every) and msg != Progress._last_line:
            self.last = now
            Progress._last_line = msg
            print(f"[dp] {msg}", file=sys.stderr, flush=True)


def with_slack(value: float) -> float:
    """A bound from another computation of the same plan value, loosened by 1e-9
    (relative) before it prunes: the linearized DP and the heuristic table add a
    stage's terms in another order than the table being pruned, so the same plan
    can come out a few ulps higher there (random_problem seed 679 of the table-engine
    sweep in ``tests/dp/test_dp.py`` was declared infeasible when the bound was used as is)."""
    return value + 1e-9 * abs(value)


_R = TypeVar("_R")


def run_stoppable(kernel: Callable[[np.ndarray], _R], deadline: float | None) -> _R:
    """``kernel(stop)`` for a kernel that may run long within one call (its work grows with
    S = min(N, k): a million devices took minutes per call) and polls ``stop[0]``, a one-element
    int64 array, returning early once it is set. The flag is set when ``deadline`` (solve_clock
    seconds) passes, by a timer thread, or when a signal asks the command to stop (the section's
    ``cancel``, called from the signal watcher: the kernels run without the GIL, ``nogil=True``,
    so that thread runs meanwhile). An early return raises :class:`TimeUp` (its partial result
    is dropped) or, after a signal, :class:`piper.core.stopping.Interrupted` through :func:`past`.
    solve_clock stops while a kernel compiles, so a timer that fired early (wall time ran on
    during a compilation) is re-armed for what is left and the call made again."""
    stop = np.zeros(1, dtype=np.int64)

    def arm() -> threading.Timer | None:
        if deadline is None:
            return None
        timer = threading.Timer(max(0.0, deadline - solve_clock()), stop.fill, (1,))
        timer.daemon = True
        timer.start()
        return timer

    with stopping.stoppable(lambda: stop.fill(1)):
        while True:
            timer = arm()
            try:
                out = kernel(stop)
            finally:
                if timer is not None:
                    timer.cancel()
            if not stop[0]:
                return out
            if past(deadline):  # raises Interrupted after a signal
                raise TimeUp()
            stop.fill(0)
