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

from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result, Status
from piper.frontend import context
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.workload import TrainingSetup, build_workload, tensor_parallel_degrees
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
    """Solve the model's workload for every context-parallel size and micro-batch size, uniform
    and (``free``) free; the time limit of ``options`` is for the whole search, shared out as it goes."""
    start = time.perf_counter()
    candidates: list[Candidate] = []
    kinds = (True, False) if free else (True,)
    total = len(context_parallels) * len(micro_batches) * len(kinds)
    for c in context_parallels:
        setup_c = replace(setup, context_parallel=c)
        for b in micro_batches:
            workload = build_workload(cfg.with_changes(micro_batch=b), hw, setup_c)
            problem = load_problem(workload, strict=True)
            for uniform in kinds:
                left = None
                if options.time_limit_s is not None:
                    done = len(candidates)
                    left = max(0.0, options.time_limit_s - (time.perf_counter() - start)) / (total - done)
                res = info(problem, replace(options, uniform=uniform, time_limit_s=left))
                candidates.append(Candidate(b, uniform, problem, workload, res, c))
                if progress is not None:
                    what = "uniform" if uniform else "free"
                    value = f"{res.value:.6g}" if math.isfinite(res.value) else "no plan"
                    where = f"context-parallel {c}, " if len(context_parallels) > 1 or c > 1 else ""
                    progress(f"{where}micro-batch {b}, {what}: {res.status.value}, {options.objective} {value} "
                             f"({res.time_s:.2f} s)")

    def best(uniform: bool) -> Candidate | None:
        found = [c for c in candidates if c.uniform == uniform and c.result.plan is not None]
        return min(found, key=lambda c: c.value) if found else None

    exact = all(c.result.status in (Status.OPTIMAL, Status.INFEASIBLE) for c in candidates)
    return PlanSearch(tuple(candidates), best(True), best(False) if free else None, exact,
                      time.perf_counter() - start)
