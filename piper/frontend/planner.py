"""The planner behind ``python -m piper plan``: the best plan for a model on a cluster, searched
over the context-parallel size and the micro-batch size, for the plan a framework runs and for
Piper's free plan.

For every micro-batch size b (sequences per micro-batch; :data:`MICRO_BATCHES` that divide
the global batch, or the one the user fixed) the front end builds the workload of that b (its
costs depend on b) and the registered solver solves it twice: with ``Options.uniform`` (one
(d, t) in every stage: what Megatron-LM, DeepSpeed and torchtitan run) and without (Piper's
free plan). The best of each over all b wins, by the objective asked for (the batch time by
default: docs/problem.md §9). Every b solves the same global batch, so the numbers compare.
The search is exact when every solve it made is (status "optimal"): the best over a finite
set of exactly solved cases.

The context-parallel size c is searched the same way: one workload per (c, b)
(docs/problem.md §11: c is a property of the workload), over :func:`context_parallel_choices`:
c = 1, and for sequences of at least :data:`~piper.frontend.context.MIN_SEARCH_SEQ` tokens the
powers of two c >= 2 that Megatron-Core accepts (s a multiple of 2c, fused attention, some
tensor-parallel degree t with t x c <= the devices) and that leave each device at least
:data:`~piper.frontend.context.MIN_TOKENS_PER_DEVICE` tokens (s / c), up to ``max_cp``; a fixed c
replaces the list. A search over a subset of c is exact over that subset only.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from piper.core.options import BATCH_TIME, Options
from piper.core.problem import Problem
from piper.core.result import Result, Status
from piper.frontend import context
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.workload import (
    TrainingSetup,
    build_workload,
    tensor_parallel_degrees,
)
from piper.io.workload import load_problem
from piper.solvers.registry import SolverInfo

__all__ = ["MICRO_BATCHES", "Candidate", "PlanSearch", "context_parallel_choices", "micro_batch_choices",
           "search_plans"]

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
    #: the workload's context-parallel size c
    context_parallel: int = 1

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


def context_parallel_choices(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, fixed: int | None,
                             max_cp: int | None = None) -> tuple[int, ...]:
    """The context-parallel sizes to search (module docstring): ``fixed`` alone, else 1 and, for
    long sequences, the powers of two Megatron-Core accepts, up to ``max_cp``."""
    if fixed is not None:
        return (fixed,)
    out = [1]
    s = cfg.seq_length
    if s < context.MIN_SEARCH_SEQ or not setup.flash_attention:
        return tuple(out)
    devices = setup.nodes * hw.devices_per_node
    smallest = min(tensor_parallel_degrees(cfg, hw))
    c = 2
    while s // c >= context.MIN_TOKENS_PER_DEVICE and smallest * c <= devices and (max_cp is None or c <= max_cp):
        if s % (2 * c) == 0:
            out.append(c)
        c *= 2
    return tuple(out)


def search_plans(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, info: SolverInfo, options: Options, *,
                 micro_batches: tuple[int, ...], free: bool = True,
                 progress: Callable[[str], None] | None = None,
                 context_parallels: tuple[int, ...] = (1,)) -> PlanSearch:
    """Solve the model's workload for every context-parallel size c and micro-batch size b, uniform
    and (``free``) free; the time limit of ``options`` is for the whole search, shared out as it goes.

    The uniform plans are solved first, for every (c, b). The free searches then run in the order
    of the uniform plans' values; when the solver takes the ``upper_bound`` knob (Piper's DP), each
    after the first searches only for plans better than the best free plan found so far, and a
    search that proves none exists ("unknown" with a bound at least that plan's value) counts as
    exact: that (c, b) cannot hold the winner."""
    start = time.perf_counter()
    candidates: list[Candidate] = []
    keys = [(c, b) for c in context_parallels for b in micro_batches]
    total = len(keys) * (2 if free else 1)
    problems: dict[tuple[int, int], tuple[Problem, dict]] = {}

    def run(key: tuple[int, int], uniform: bool, params: dict) -> Candidate:
        problem, workload = problems[key]
        left = None
        if options.time_limit_s is not None:
            left = max(0.0, options.time_limit_s - (time.perf_counter() - start)) / (total - len(candidates))
        res = info(problem, replace(options, uniform=uniform, time_limit_s=left, params={**options.params, **params}))
        c, b = key
        cand = Candidate(b, uniform, problem, workload, res, c)
        candidates.append(cand)
        if progress is not None:
            what = "uniform" if uniform else "free"
            value = f"{res.value:.6g}" if math.isfinite(res.value) else f"no plan ({res.status.value})"
            where = f"context-parallel {c}, " if len(context_parallels) > 1 or c > 1 else ""
            progress(f"{where}micro-batch {b}, {what}: {res.status.value}, {options.objective} {value} "
                     f"({res.time_s:.2f} s)")
        return cand

    for c, b in keys:
        workload = build_workload(cfg.with_changes(micro_batch=b), hw, replace(setup, context_parallel=c))
        problems[c, b] = (load_problem(workload, strict=True), workload)
        run((c, b), True, {})
    cutoffs = free and "upper_bound" in (info.params or {}) and (options.objective == BATCH_TIME
                                                                 or max(options.virtual_stage_choices()) > 1)
    if free:
        uniform_value = {(x.context_parallel, x.micro_batch): x.value for x in candidates}
        order = sorted(keys, key=uniform_value.__getitem__)
        incumbent = math.inf
        for key in order:
            params = {"upper_bound": incumbent} if cutoffs and math.isfinite(incumbent) else {}
            cand = run(key, False, params)
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
