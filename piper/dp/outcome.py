"""What one part of the DP's search returns before the parts are combined into a Result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from piper.core.plan import Plan

__all__ = ["Outcome"]


@dataclass(frozen=True)
class Outcome:
    """The best plan a part of the search found and what it proved, in the units of the objective
    asked for (time per sample for "tps", time units per batch for "batch-time").

    ``value`` is the search's own number for ``plan`` (+inf without a plan); ``lower`` a proven
    lower bound on every plan of the part's space (+inf: the space holds no plan; 0: nothing
    proven); ``complete`` is False when a time limit stopped the search."""

    plan: Plan | None = None
    value: float = math.inf
    lower: float = 0.0
    complete: bool = True
    stats: dict = field(default_factory=dict)
    message: str = ""
