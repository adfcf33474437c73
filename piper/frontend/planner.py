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

from piper.core.options import BATCH_TIME, Options
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
    time limit of ``options`` is for the whole search, shared out as it goes.

    The uniform plans are solved first, for every size. The free searches then run in the order
    of the uniform plans' values; when the solver takes the ``upper_bound`` knob (Piper's DP), each
    after the first searches only for plans better than the best free plan found so far, and a
    search that proves none exists ("unknown" with a bound at least that plan's value) counts as
    exact: that size cannot hold the winner."""
    start = time.perf_counter()
    candidates: list[Candidate] = []
    total = len(micro_batches) * (2 if free else 1)
    problems: dict[int, tuple[Problem, dict]] = {}

    def run(b: int, uniform: bool, params: dict) -> Candidate:
        problem, workload = problems[b]
        left = None
        if options.time_limit_s is not None:
            left = max(0.0, options.time_limit_s - (time.perf_counter() - start)) / (total - len(candidates))
        res = info(problem, replace(options, uniform=uniform, time_limit_s=left, params={**options.params, **params}))
        cand = Candidate(b, uniform, problem, workload, res)
        candidates.append(cand)
        if progress is not None:
            what = "uniform" if uniform else "free"
            value = f"{res.value:.6g}" if math.isfinite(res.value) else f"no plan ({res.status.value})"
            progress(f"micro-batch {b}, {what}: {res.status.value}, {options.objective} {value} ({res.time_s:.2f} s)")
        return cand

    for b in micro_batches:
        workload = build_workload(cfg.with_changes(micro_batch=b), hw, setup)
        problems[b] = (load_problem(workload, strict=True), workload)
        run(b, True, {})
    cutoffs = free and "upper_bound" in (info.params or {}) and (options.objective == BATCH_TIME
                                                                 or max(options.virtual_stage_choices()) > 1)
    if free:
        order = sorted(micro_batches, key=lambda b: next(c.value for c in candidates if c.micro_batch == b))
        incumbent = math.inf
        for b in order:
            params = {"upper_bound": incumbent} if cutoffs and math.isfinite(incumbent) else {}
            cand = run(b, False, params)
            if cand.result.plan is not None:
                incumbent = min(incumbent, cand.value)

    def best(uniform: bool) -> Candidate | None:
        found = [c for c in candidates if c.uniform == uniform and c.result.plan is not None]
        return min(found, key=lambda c: c.value) if found else None

    winner = best(False) if free else None

    def proven(c: Candidate) -> bool:
        if c.result.status in (Status.OPTIMAL, Status.INFEASIBLE):
            return True
        # a free search cut off below the winner: no plan of this size beats it
        return (not c.uniform and c.result.plan is None and c.result.status == Status.UNKNOWN and winner is not None
                and c.result.bound >= winner.value * (1 - 1e-9))

    return PlanSearch(tuple(candidates), best(True), winner, all(proven(c) for c in candidates),
                      time.perf_counter() - start)
