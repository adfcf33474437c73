"""What the exact models' searches give back: :class:`Answer` (one solver run, the split, a
second proof, a whole part of the plan space), :class:`SequenceAnswer` (one subproblem of
the split over option sequences) and :class:`SplitRun` (the end of a split).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from piper.core.plan import Plan
from piper.core.result import Status

__all__ = ["Answer", "SequenceAnswer", "SplitRun"]


@dataclass(frozen=True)
class Answer:
    """An exact model's answer, before the guards (:func:`baselines.exact.guards.guarded_result`).

    Times are in the problem's time units (those of the profile, seconds)."""

    status: Status
    #: the plan found, or None
    plan: Plan | None = None
    #: the model's objective for ``plan`` (time units); None when none is claimed
    objective: float | None = None
    #: a proven lower bound on the optimum (time units; +inf when infeasible, 0 for none)
    bound: float = 0.0
    #: how far (time units) ``objective`` may be from the evaluator's TPS of ``plan``, and
    #: ``bound`` from the optimum: CP-SAT's 2ε; the MILP's stated tolerance
    #: (docs/formulations.md §7) once its part is solved, 0 for one solver run
    tolerance: float = 0.0
    #: what the search reports (``Result.stats``); the slots add to it in place
    stats: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def infeasible(cls, stats: dict[str, Any]) -> Answer:
        """No plan exists: the bound is +inf."""
        return cls(Status.INFEASIBLE, bound=math.inf, stats=stats)


@dataclass(frozen=True)
class SequenceAnswer:
    """What a subproblem of the split gave. ``outcome``: "refuted" (no plan at or below the
    cutoff in the sequence), "found" (a plan of ``value`` below it, ``plan``; ``cutoff`` is
    the cutoff below that plan), "stale" (stopped because a better plan was found
    elsewhere) or "stop" (time limit, or no answer; a ``plan`` here is better than the
    cutoff but unproven). ``code``: the solver's status name (statistics; None: not counted)."""

    outcome: str
    code: str | None
    value: float | None = None
    plan: object = None
    cutoff: float | None = None


@dataclass
class SplitRun:
    """The end of a split (:func:`baselines.exact.split_threads.split_on_threads`,
    :func:`baselines.exact.split_ray.solve_sequences_ray`)."""

    #: the best plan found below the starting cutoff: (value, plan), None if none (with
    #: ``stopped``, it may come from a subproblem stopped before its proof)
    best: tuple[float, object] | None
    #: sequences refuted (at the cutoff they ran with, so at every lower one)
    refuted: set[tuple[int, ...]]
    #: True when the run stopped (time limit, a subproblem without an answer) before the proof
    stopped: bool
    #: solver status name -> subproblems
    codes: dict[str, int]
    #: plans found (improvements of the shared cutoff)
    improved: int
    #: the cutoff when the run ended
    cutoff: float
    #: sequences left out because the bounds rule them out at a lowered cutoff
    pruned: int = 0
    #: sequences that need no more search: the refuted ones, and on threads those whose
    #: subproblem found its own best plan (``retry_found`` off)
    settled: set[tuple[int, ...]] = field(default_factory=set)
    #: on threads: the last round that ran (:class:`baselines.exact.split_threads.SplitRound`)
    last_round: Any = None
