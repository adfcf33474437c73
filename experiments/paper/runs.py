"""One run of a paper configuration: :class:`Config` (how to run) and :func:`run_variant` (one
paper variant, :func:`experiments.lib.paper_variants.variant_solver`, solved in a worker of
:mod:`piper.solvers.execution` or in this process, after :func:`warm_process`)."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from experiments.lib.flags import progress_line
from experiments.lib.paper_variants import variant_solver
from experiments.lib.suites import paper_workload
from piper import solve
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result
from piper.solvers.execution import ExecutionOptions, WorkerPool


@dataclass(frozen=True)
class Config:
    """How to run an experiment."""

    out: Path = Path("out/paper")
    quick: bool = False
    #: the DP's knapsack: "greedy" (the paper's numbers) or "exact"
    knapsack: str = "greedy"
    #: wall-clock limit of one DP run, seconds
    time_limit_s: float = 300.0
    #: run DP solves in an isolated worker (killed past the limit): piper.solvers.execution
    isolate: bool = True
    #: progress lines on stderr
    progress: bool = True
    #: where isolated runs execute: "local" (a worker process) or "ray" (a Ray actor)
    backend: str = "local"
    #: the Ray cluster (None: RAY_ADDRESS, else a local Ray instance)
    address: str | None = None
    #: the workers of isolated runs (None: one started per run); the command makes one
    pool: WorkerPool | None = field(default=None, compare=False, repr=False)

    def say(self, msg: str) -> None:
        """A progress line of the experiment on stderr (unless ``progress`` is off)."""
        if self.progress:
            progress_line(msg)


# ---------------------------------------------------------------------------------
# running one configuration
# ---------------------------------------------------------------------------------


@dataclass
class RunOutcome:
    """What an experiment keeps of one solver run."""

    tps: float | None
    #: the Result status, or "timeout" / "error"
    status: str
    time_s: float
    devices_used: int | None = None
    sum_d: int | None = None
    num_stages: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""


def _outcome(res: Result, keep_stats: Sequence[str]) -> RunOutcome:
    tps = res.tps if res.plan is not None and math.isfinite(res.tps) else None
    return RunOutcome(
        tps=tps,
        status=str(res.status),
        time_s=res.time_s,
        devices_used=res.devices_used,
        sum_d=None if res.plan is None else res.plan.sum_d,
        num_stages=None if res.plan is None else len(res.plan.stages),
        stats={k: res.stats[k] for k in keep_stats if k in res.stats},
        message=res.message,
    )


def _solve_outcome(problem: Problem, solver: str, options: Options, keep: Sequence[str]) -> RunOutcome:
    """One run, in the process it is called in (a worker of ``Config.pool`` when isolated)."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        res = solve(problem, options, solver=solver)
    except Exception as exc:  # noqa: BLE001 - one failed run is a row, not a crash
        return RunOutcome(None, "error", time.perf_counter() - t0, message=f"{type(exc).__name__}: {exc}")
    out = _outcome(res, keep)
    out.stats["wall_s"] = time.perf_counter() - t0
    out.stats["cpu_s"] = time.process_time() - c0
    return out


#: knapsacks whose DP code is compiled in this (worker) process
_WARM: set[str] = set()


def warm_process(knapsack: str) -> None:
    """Compile the DP's numba code of ``knapsack`` in this process, once (untimed), so that
    no timed run includes compilation; a fresh worker (after a kill) compiles again."""
    if knapsack in _WARM:
        return
    _WARM.add(knapsack)
    tiny = paper_workload("bert").with_cluster(devices=2, microbatches=2)
    solver, options = variant_solver("piper", knapsack, None, {"curve": True})
    _solve_outcome(tiny, solver, options, ())


def hard_timeout(cfg: Config) -> float:
    """Seconds after which an isolated DP run is killed: 1.5x the time limit + 30 s."""
    return cfg.time_limit_s * 1.5 + 30.0


def run_variant(
    problem: Problem,
    variant: str,
    cfg: Config,
    *,
    params: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    keep_stats: Sequence[str] = ("curve", "ideals", "ideal_pairs", "linearize"),
) -> RunOutcome:
    """Solve ``problem`` as ``variant``; DP runs obey ``cfg.time_limit_s``. With
    ``cfg.isolate`` a DP run goes to a worker of ``cfg.pool`` (:mod:`piper.solvers.execution`;
    without one, a worker process started for this run) and is killed at
    :func:`hard_timeout` if it does not stop by itself."""
    solver, options = variant_solver(variant, cfg.knapsack, cfg.time_limit_s, params, overrides)
    if not (solver.startswith("dp") and cfg.isolate):
        return _timeout_status(_solve_outcome(problem, solver, options, keep_stats), cfg)
    hard = hard_timeout(cfg)
    pool = cfg.pool or WorkerPool(ExecutionOptions(cfg.backend, 1, hard, cfg.address, ("baselines",)))
    try:
        warm = pool.call(warm_process, cfg.knapsack, timeout=max(hard, 600.0))
        if not warm.ok:
            return RunOutcome(None, "error", warm.seconds, message=f"warm-up: {warm.message}")
        out = pool.call(_solve_outcome, problem, solver, options, tuple(keep_stats), timeout=hard)
    finally:
        if cfg.pool is None:
            pool.close()
    if out.error == "timeout":
        return RunOutcome(None, "timeout", out.seconds,
                          message=f"killed after {out.seconds:.0f} s (limit {cfg.time_limit_s} s)")
    if not out.ok:
        return RunOutcome(None, "error", out.seconds, message=out.message)
    return _timeout_status(out.value, cfg)


def _timeout_status(out: RunOutcome, cfg: Config) -> RunOutcome:
    """A run that hit its time limit without a proven answer is a 'timeout' row."""
    hit_limit = "time limit" in out.message.lower()
    if (out.status == "unknown" or out.status == "feasible") and hit_limit:
        out.status = "timeout" if out.tps is None else "timeout-feasible"
    return out
