"""Time limit and progress reports of one DP run."""

from __future__ import annotations

import sys
import time


class TimeUp(Exception):
    pass


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
