"""One solve of ``experiments.compare``: a registered solver on one instance, as a row
(:class:`SolverRun`), in this process or in an isolated worker of a
:class:`piper.solvers.execution.WorkerPool` (local processes or Ray actors) with a hard timeout.

Each Result is scored by the evaluator and checked by :func:`piper.check_result` here, in
the process that solved it; the checks across solvers are in :mod:`.cross_checks`.
"""

from __future__ import annotations

import math
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from piper.core.checks import check_result
from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.plan import Plan
from piper.core.result import Result, Status
from piper.solvers.execution import Progress, WorkerPool
from piper.solvers.registry import SolverInfo

__all__ = [
    "RTOL", "SolverRun", "run_solver", "solve_in_process", "run_from_result", "IsolatedRunner", "TracedRunner",
    "SKIPPED", "UNAVAILABLE", "ERROR", "KILLED", "NOT_RUN", "PROOF_STATUSES", "PLAN_STATUSES",
]

#: default relative tolerance on TPS comparisons (see the package docstring)
RTOL = 1e-9

#: statuses of a run that are not a Result status
SKIPPED, UNAVAILABLE, ERROR, KILLED = "skipped", "unavailable", "error", "killed"
#: statuses of a run that returned nothing to score
NOT_RUN = (SKIPPED, UNAVAILABLE, ERROR, KILLED)
PROOF_STATUSES = (Status.OPTIMAL.value, Status.INFEASIBLE.value)
PLAN_STATUSES = (Status.OPTIMAL.value, Status.FEASIBLE.value)


@dataclass
class SolverRun:
    """What one solver did on one instance (a row of the report)."""

    solver: str
    exact: bool
    #: a Result status ("optimal", "feasible", "infeasible", "unknown") or
    #: "skipped" / "unavailable" / "error" / "killed"
    status: str
    #: the evaluator's TPS of the returned plan (+inf without a plan or when OOM)
    tps: float = math.inf
    #: what the run minimized (``Options.objective``: "tps" or "batch-time")
    objective_kind: str = "tps"
    #: the evaluator's value of the returned plan under ``objective_kind`` (its TPS or its batch
    #: time; +inf without a plan or when OOM): the number every check across solvers compares
    value: float = math.inf
    #: Result.tps as the solver returned it (must equal ``tps``)
    reported_tps: float | None = None
    #: the solver's own claim of the objective
    objective: float | None = None
    #: the solver's proven lower bound (None when not run)
    bound: float | None = None
    #: the certificate's tolerance (Result.tolerance, time units): an optimal claim and
    #: the solver's objective may be this far from the evaluated TPS
    tolerance: float = 0.0
    #: wall-clock seconds around the call (model building included)
    time_s: float = 0.0
    #: the solver's own time (Result.time_s)
    solver_time_s: float | None = None
    message: str = ""
    plan: dict[str, Any] | None = None
    devices_used: int | None = None
    #: filled by the checks
    gap: float | None = None
    gap_vs_proof: bool = False
    #: an exact solver that ended without a proof well before its time limit
    early: bool = False
    #: seconds of the untimed warm-up solve that preceded this one (None: none)
    warmup_s: float | None = None
    failures: list[str] = field(default_factory=list)
    #: what piper.check_result found wrong with the Result: (its check name, message)
    result_issues: list[tuple[str, str]] = field(default_factory=list)

    @property
    def has_plan(self) -> bool:
        return self.plan is not None

    @property
    def limit(self) -> bool:
        """An exact solver that stopped without a proof at its time limit (or was killed)."""
        return self.exact and not self.early and self.status in (Status.FEASIBLE.value, Status.UNKNOWN.value, KILLED)

    def mark_early(self, time_limit: float | None, fraction: float = 0.9) -> None:
        """Flag an exact solver that gave up without a proof before ``fraction`` of its limit."""
        if self.exact and self.status in (Status.FEASIBLE.value, Status.UNKNOWN.value):
            spent = self.solver_time_s if self.solver_time_s is not None else self.time_s
            self.early = time_limit is None or spent < fraction * time_limit

    @property
    def proof(self) -> bool:
        return self.exact and self.status in PROOF_STATUSES


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: runs one solve and returns its row: (problem, solver, options, rtol) -> SolverRun
Runner = Callable[[Any, SolverInfo, Options, float], SolverRun]


def run_solver(problem: Any, info: SolverInfo, options: Options, runner: Runner | None = None,
               rtol: float = RTOL) -> SolverRun:
    """Run one registered solver; never raises (except KeyboardInterrupt and
    :class:`piper.solvers.execution.PoolClosed`).

    ``runner`` does the solve itself (default: :func:`solve_in_process`; see
    :class:`IsolatedRunner` for the watchdog). The size check and the import check
    happen here, in the caller's process.
    """
    base = SolverRun(info.name, info.exact, SKIPPED)
    if info.max_nodes is not None and problem.n > info.max_nodes:
        base.message = f"graph has {problem.n} layers > {info.max_nodes} (the solver's max_nodes)"
        return base
    try:
        info.load()
    except Exception as exc:  # ImportError, SyntaxError of a module being written, ...
        base.status, base.message = UNAVAILABLE, _one_line(f"{type(exc).__name__}: {exc}")
        return base
    return (runner or solve_in_process)(problem, info, options, rtol)


def solve_in_process(problem: Any, info: SolverInfo, options: Options, rtol: float = RTOL) -> SolverRun:
    """Call the solver here; SolverError -> skipped, any other exception -> error."""
    base = SolverRun(info.name, info.exact, SKIPPED)
    try:
        info.load()  # imports happen before the clock starts (run_solver checked that they work)
    except Exception:
        pass
    start = time.perf_counter()
    try:
        result = info(problem, options)
    except SolverError as exc:
        base.message = _one_line(str(exc))
        base.time_s = time.perf_counter() - start
        return base
    except Exception as exc:
        base.status, base.time_s = ERROR, time.perf_counter() - start
        where = traceback.extract_tb(exc.__traceback__)[-1]
        base.message = _one_line(f"{type(exc).__name__}: {exc} (at {Path(where.filename).name}:{where.lineno})")
        return base
    wall = time.perf_counter() - start
    if not isinstance(result, Result):
        base.status, base.time_s = ERROR, wall
        base.message = f"returned {type(result).__name__}, not a Result"
        return base
    return run_from_result(problem, info.name, info.exact, result, wall, options, rtol)


def run_from_result(problem: Any, solver: str, exact: bool, result: Result, wall: float = 0.0,
                    options: Options | None = None, rtol: float = RTOL) -> SolverRun:
    """The row of a returned Result. Its plan is scored here, by the evaluator, and that
    score is the TPS compared (``Result.tps`` is kept as ``reported_tps``); a structurally
    invalid plan makes the run an error. The per-run invariants are
    :func:`piper.check_result`'s, under its check names."""
    status = result.status.value if isinstance(result.status, Status) else str(result.status)
    reported = math.inf if result.tps is None else float(result.tps)
    objective = options.objective if options is not None else "tps"
    tps = value = math.inf
    if result.plan is not None:
        try:
            score = evaluate(problem, result.plan)
            tps, value = score.tps, score.value(objective)
        except Exception as exc:  # PlanError: a structurally invalid plan
            run = SolverRun(solver, exact, ERROR, time_s=wall, solver_time_s=result.time_s)
            run.message = _one_line(f"invalid plan: {type(exc).__name__}: {exc}")
            run.plan = result.plan.to_dict() if isinstance(result.plan, Plan) else None
            return run
    issues = [(i.check, i.message) for i in check_result(problem, options, result, exact=exact, rtol=rtol)]
    return SolverRun(
        result_issues=issues,
        solver=solver,
        exact=exact,
        status=status,
        tps=tps,
        objective_kind=objective,
        value=value,
        reported_tps=reported,
        objective=None if result.objective is None else float(result.objective),
        bound=None if result.bound is None else float(result.bound),
        tolerance=float(getattr(result, "tolerance", 0.0) or 0.0),
        time_s=wall,
        solver_time_s=result.time_s,
        message=_one_line(result.message),
        plan=None if result.plan is None else result.plan.to_dict(),
        devices_used=result.devices_used,
    )


# ---------------------------------------------------------------------------------
# isolated solves: the warm-up, then the solve, in a worker with a hard timeout
# ---------------------------------------------------------------------------------

#: solvers warmed up in this (worker) process
_WARMED: set[str] = set()


def warm_up(info: SolverInfo, options: Options) -> float | None:
    """Solve tiny instances, untimed, so that one-time costs (numba compilation or cache
    loading, backend start-up) stay out of the measured solve times; once per solver and
    process (None when this process is warm already). Same options as the real solves
    (HiGHS, for one, cannot change its thread count after its first solve in a process)
    but a generous time limit. Runs in the worker."""
    if info.name in _WARMED:
        return None
    _WARMED.add(info.name)
    from experiments.lib.instances import random_problem
    from experiments.lib.suites import cluster_variant

    problem = random_problem(3, n=4, shape="branchy", devices=4, microbatches=4, degrees=(1, 2), memory_tightness=4.0)
    # version 1, then nodes + sharded state (the DP compiles other kernel variants for those)
    start = time.perf_counter()
    for p in (problem, cluster_variant(problem, 3, nodes=True, sharded=False),
              cluster_variant(problem, 3, nodes=False, sharded=True), cluster_variant(problem, 3)):
        try:
            info(p, replace(options, time_limit_s=max(options.time_limit_s or 0.0, 60.0)))
        except Exception:
            pass
    return time.perf_counter() - start


class IsolatedRunner:
    """A :data:`Runner` on a :class:`~piper.solvers.execution.WorkerPool`: before a solver's first
    solve in a worker process, an untimed warm-up (:func:`warm_up`, allowed twice the hard
    timeout; one that hangs or crashes is not retried: the real solve reports it); then the
    solve, killed at the pool's hard timeout (status ``killed``, not a failed check). A
    worker that dies without answering (a crash in native code) gives status ``error`` (a
    failed check); the next solve starts a fresh worker."""

    def __init__(self, pool: WorkerPool, warm: bool = True) -> None:
        self.pool, self.warm = pool, warm
        #: solvers whose warm-up hung or crashed (not retried)
        self._cold: set[str] = set()
        #: (worker process, solver) pairs known to be warm: no warm-up call (one round trip less)
        self._warmed: set[tuple[tuple[int, int], str]] = set()

    def __call__(self, problem: Any, info: SolverInfo, options: Options, rtol: float = RTOL) -> SolverRun:
        hard = self.pool.options.hard_timeout
        warmup = None
        if self.warm and info.name not in self._cold and (self.pool.generation(), info.name) not in self._warmed:
            out = self.pool.call(warm_up, info, options, timeout=None if hard is None else 2 * hard)
            if out.ok:
                warmup = out.value
                self._warmed.add((self.pool.generation(), info.name))
            else:
                self._cold.add(info.name)
        out = self.pool.call(solve_in_process, problem, info, options, rtol)
        if out.ok:
            run = out.value
        elif out.error == "timeout":
            run = SolverRun(info.name, info.exact, KILLED, time_s=out.seconds)
            run.message = f"{out.message} (time limit {options.time_limit_s}s not honoured)"
        else:  # died, or raised outside the solver (solve_in_process catches the solver's own)
            run = SolverRun(info.name, info.exact, ERROR, time_s=out.seconds, message=_one_line(out.message))
        run.warmup_s = warmup
        return run


class TracedRunner:
    """A :data:`Runner` that tells a :class:`~piper.solvers.execution.Progress` which solve is running."""

    def __init__(self, runner: Runner, progress: Progress) -> None:
        self.runner, self.progress = runner, progress

    def __call__(self, problem: Any, info: SolverInfo, options: Options, rtol: float = RTOL) -> SolverRun:
        from experiments.lib.suites import problem_name

        self.progress.running(f"{info.name} on {problem_name(problem, f'{problem.n} layers')}")
        return self.runner(problem, info, options, rtol)
