"""Time spent compiling the DP's kernels, kept apart from the solve's own time, and said.

Numba compiles a kernel on its first call with new argument types and keeps the machine code
in its on-disk cache (``piper/dp/__pycache__``, or ``NUMBA_CACHE_DIR``); later runs load it in
milliseconds. The first solve after an install (or after the DP's sources change) compiles
for about a minute on a 2-core machine. A listener on numba's ``numba:compile`` event (which
fires only for real compilation, not for a cache load) measures that time, so that

* the DP's clock (:func:`solve_clock`) stops while a kernel compiles: a time limit, the
  DP's ``time_s`` and its progress timings count solving only, and ``stats["compile_s"]``
  says how long compiling took;
* a compilation still running after :data:`NOTICE_AFTER_S` seconds prints
  :data:`COMPILE_NOTICE` once per process on stderr (unless :func:`set_notice` turned it
  off, as ``--quiet`` does), so a first run never looks like a hang.

``python -m piper warmup`` compiles every kernel ahead (:mod:`piper.dp.warmup`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable

from numba.core import event

__all__ = ["NOTICE_AFTER_S", "COMPILE_NOTICE", "compile_seconds", "solve_clock", "set_notice"]

#: a compilation running this long (seconds) prints the notice
NOTICE_AFTER_S = 1.0
#: what the notice says
COMPILE_NOTICE = ("compiling the DP's kernels with numba: the first run after an install only, about a minute on "
                  "2 cores (not counted in time limits); later runs load them from numba's cache "
                  "(python -m piper warmup compiles them ahead)")


def _stderr(line: str) -> None:
    print(f"piper: {line}", file=sys.stderr, flush=True)


class _CompileWatch(event.Listener):
    """Outermost ``numba:compile`` events per thread: their total time and the notice."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.lock = threading.Lock()
        self.done_s = 0.0
        self.say: Callable[[str], None] | None = _stderr
        self.noticed = False

    def on_start(self, ev: event.Event) -> None:
        depth = getattr(self.local, "depth", 0)
        if depth == 0:
            self.local.started = time.perf_counter()
            timer = threading.Timer(NOTICE_AFTER_S, self.notice)
            timer.daemon = True
            timer.start()
            self.local.timer = timer
        self.local.depth = depth + 1

    def on_end(self, ev: event.Event) -> None:
        self.local.depth -= 1
        if self.local.depth == 0:
            self.local.timer.cancel()
            with self.lock:
                self.done_s += time.perf_counter() - self.local.started

    def notice(self) -> None:
        with self.lock:
            if self.noticed or self.say is None:
                return
            self.noticed = True
        self.say(COMPILE_NOTICE)

    def seconds(self) -> float:
        running = time.perf_counter() - self.local.started if getattr(self.local, "depth", 0) else 0.0
        return self.done_s + running


_WATCH = _CompileWatch()
event.register("numba:compile", _WATCH)


def compile_seconds() -> float:
    """Seconds this process has spent compiling numba kernels (a compilation in progress in
    this thread included)."""
    return _WATCH.seconds()


def solve_clock() -> float:
    """A monotonic clock in seconds that stands still while numba compiles: the DP's deadlines
    and timings read it instead of ``time.perf_counter``."""
    return time.perf_counter() - compile_seconds()


def set_notice(say: Callable[[str], None] | None) -> None:
    """Where the compile notice goes: a function taking the line, or None for nowhere (``--quiet``)."""
    _WATCH.say = say
