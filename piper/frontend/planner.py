"""The planner behind ``python -m piper plan``: the best plan for a model on a cluster, searched
over the micro-batch size, for the plan a framework runs and for Piper's free plan.

For every micro-batch size b (sequences per micro-batch; :data:`MICRO_BATCHES` that divide
the global batch, or the one the user fixed) the front end builds the workload of that b (its
costs depend on b) and the registered solver solves it twice: with ``Options.uniform`` (one
(d, t) in every stage: what Megatron-LM, DeepSpeed and torchtitan run) and without (Piper's
free plan). The best of each over all b wins, by the objective asked for (the batch time by
default: docs/problem.md §9). Every b solves the same global batch, so the numbers compare.
The search is exact when every solve it made is (status "optimal"): the best over a finite
set of exactly solved cases.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem
from piper.solvers.registry import SolverInfo

__all__ = ["MICRO_BATCHES", "Candidate", "PlanSearch", "micro_batch_choices", "search_plans"]

#: the micro-batch sizes searched when the user fixes none (sequences per micro-batch)
MICRO_BATCHES = (1, 2, 4, 8, 16)


@dataclass(frozen=True)
class Candidate:
    """One solve of the search: a micro-batch size, uniform or free, and its result."""

    micro_batch: int
    uniform: bool
    problem: Problem
    workload: dict
    result: Result

    @property
    def value(self) -> float:
        """The result's plan under its objective (+inf without a plan)."""
        return self.result.value


@dataclass(frozen=True)
class PlanSearch:
    """Every solve made, and the best runnable (uniform) and free plans over the micro-batch sizes."""

    candidates: tuple[Candidate, ...]
    #: the best uniform plan (None: no b has one)
    runnable: Candidate | None
    #: the best free plan (None when not searched or no b has one)
    free: Candidate | None
    #: every solve was proven optimal: the search's winners are exact
    exact: bool
    #: wall-clock seconds of the whole search
    time_s: float

    @property
    def gain(self) -> float | None:
        """How much faster the free plan is than the runnable one (runnable / free - 1), by the
        objective; None when either is missing."""
        if self.runnable is None or self.free is None or not math.isfinite(self.free.value) or self.free.value <= 0:
            return None
        return self.runnable.value / self.free.value - 1.0


def micro_batch_choices(global_batch: int, fixed: int | None) -> tuple[int, ...]:
    """The micro-batch sizes to search: ``fixed`` alone, else those of :data:`MICRO_BATCHES`
    that divide the global batch."""
    if fixed is not None:
        return (fixed,)
    return tuple(b for b in MICRO_BATCHES if global_batch % b == 0)


def search_plans(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, info: SolverInfo, options: Options, *,
                 micro_batches: tuple[int, ...], free: bool = True,
                 progress: Callable[[str], None] | None = None) -> PlanSearch:
    """Solve the model's workload for every micro-batch size, uniform and (``free``) free; the
    time limit of ``options`` is for the whole search, shared out as it goes."""
    start = time.perf_counter()
    candidates: list[Candidate] = []
    kinds = (True, False) if free else (True,)
    total = len(micro_batches) * len(kinds)
    for b in micro_batches:
        workload = build_workload(cfg.with_changes(micro_batch=b), hw, setup)
        problem = load_problem(workload, strict=True)
        for uniform in kinds:
            left = None
            if options.time_limit_s is not None:
                done = len(candidates)
                left = max(0.0, options.time_limit_s - (time.perf_counter() - start)) / (total - done)
            res = info(problem, replace(options, uniform=uniform, time_limit_s=left))
            candidates.append(Candidate(b, uniform, problem, workload, res))
            if progress is not None:
                what = "uniform" if uniform else "free"
                value = f"{res.value:.6g}" if math.isfinite(res.value) else "no plan"
                progress(f"micro-batch {b}, {what}: {res.status.value}, {options.objective} {value} "
                         f"({res.time_s:.2f} s)")

    def best(uniform: bool) -> Candidate | None:
        found = [c for c in candidates if c.uniform == uniform and c.result.plan is not None]
        return min(found, key=lambda c: c.value) if found else None

    exact = all(c.result.status in (Status.OPTIMAL, Status.INFEASIBLE) for c in candidates)
    return PlanSearch(tuple(candidates), best(True), best(False) if free else None, exact,
                      time.perf_counter() - start)
