"""``python -m experiments.compare``: run every solver on every instance, score every
plan with the one evaluator, and prove or refute that the solvers agree.

    python -m experiments.compare                      # the default suite, every solver
    python -m experiments.compare --suite tiny,small --solvers dp,milp-highs,brute
    python -m experiments.compare FILE.json -k 4 -M 8GiB --slice 10 --time-limit 30
    python -m experiments.compare --list               # suites and solvers

Checks, per instance. Two numbers a, b "agree" when |a - b| <= max(rtol * max(|a|, |b|),
atol), with ``rtol`` = ``--rtol`` (default 1e-9: floating-point noise only) and ``atol``
the solver's own certificate tolerance ``Result.tolerance`` (time units; 0 for the DP
and brute force; CP-SAT's 2ε of its integer scaling; the MILP's, from its solvers'
feasibility tolerances and its cutoff, docs/formulations.md §7). The solvers state the
tolerance of each claim, and compare holds them to exactly that. Only evaluated TPS
values are compared (``Result.tps``, the evaluator's score of the returned plan), never
a solver's own claim, except in check 1 which compares the two:

1. ``claimed-tps``: a returned plan's claimed objective (``Result.objective``) agrees
   with its evaluated TPS, within the solver's tolerance.
2. ``plan``: a solver that reports a plan (optimal / feasible) returns one, and it
   fits in memory (an OOM plan has TPS +inf).
3. ``optimality``: no plan found by any solver (exact or heuristic) beats a proven
   optimum: an exact solver's "optimal" value is at most its tolerance above the best
   evaluated plan, and an exact "infeasible" holds only if nobody found a plan.
   Two exact solvers that disagree always trip this check (the worse one is
   named, the better one holds an evaluated plan that refutes it).
4. ``bound``: no exact solver's lower bound exceeds the best evaluated plan.
5. ``exception``: a solver raised something other than ``SolverError``, returned
   something other than a Result, or returned a structurally invalid plan.
6. ``result-tps``: ``Result.tps`` is the evaluator's score of the plan (compare
   re-scores every plan itself; a solver that bypasses ``make_result`` is caught).
7. ``result``: the one result check, :func:`piper.check_result` (status and bound
   consistent, an optimal plan within its tolerance of its bound, the options honoured:
   no d > 1 without data parallelism, no excluded TMPC, one (d, t) when uniform, ...).

A ``SolverError`` ("too large", missing backend, ...) marks the run ``skipped``
with the reason, as does a graph larger than the registry's ``max_nodes``; a
solver whose module does not import is ``unavailable``. An exact solver that
stops without a proof (status feasible / unknown: its time limit) is reported with
its incumbent and bound (``limit`` in the table) and never counted as disagreeing.
An exact solver that returns no proof long before its limit (< 90% of it) is shown
as ``(early)`` with its message: not a failed check, but worth a look. The gap of a
plan is TPS / optimum - 1 against the proven optimum, or against the best plan
found (marked ``~``) when nobody proved one.

Execution. By default every solve runs in a long-lived worker process (its own
process group) with a watchdog: a solve that has not answered after
``--hard-timeout`` seconds (default 2 x the time limit + 30) is killed, MILP
backend subprocesses included, and reported as ``killed`` (a limit, not a failed
check); a worker that dies (native crash) is a failed check. Each worker runs an
untimed warm-up solve per solver first, so that reported times exclude imports and
numba compilation. ``--jobs N`` drives N such workers from N threads (instances in
parallel); ``--hard-timeout 0`` solves in-process instead, and ``--jobs N`` then
uses a process pool. The backend is any ``concurrent.futures.Executor``
(:func:`make_executor`).

Exit status: 0 when every check passed and at least one instance was proven by an exact
solver; 1 when any check failed, or when nothing was proven (one line on stderr says so) (each offending
instance is written to ``OUT/failed/NAME.json`` so that
``python -m experiments.compare OUT/failed/NAME.json`` re-runs it alone); 2 for
usage errors; 130 when interrupted (the reports keep every finished instance:
they are rewritten, atomically, after each one).
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import multiprocessing
import os
import re
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

import baselines
from baselines import SolverInfo
from experiments.suites import Instance, build_suite, is_suite, problem_name, slice_problem, suite_names, unique_names
from piper.cli import (
    ArgumentParser,
    UsageError,
    add_ablation_args,
    add_cluster_args,
    apply_cluster_args,
    options_from_args,
    positive_int,
    run_main,
)
from piper.checks import check_result
from piper.evaluate import evaluate
from piper.options import Options
from piper.plan import Plan
from piper.problem import dump_problem, load_problem
from piper.result import Result, SolverError, Status

__all__ = [
    "RTOL",
    "SolverRun",
    "Failure",
    "InstanceReport",
    "run_solver",
    "check_instance",
    "compare_instance",
    "SerialExecutor",
    "make_executor",
    "run_compare",
    "write_reports",
    "render_table",
    "render_summary",
    "main",
]

#: default relative tolerance on TPS comparisons (see the module docstring)
RTOL = 1e-9
DEFAULT_OUT = Path("out/compare")
#: default per-solve time limit, seconds
DEFAULT_TIME_LIMIT = 10.0

#: statuses of a run that are not a Result status
SKIPPED, UNAVAILABLE, ERROR, KILLED = "skipped", "unavailable", "error", "killed"
#: statuses of a run that returned nothing to score
NOT_RUN = (SKIPPED, UNAVAILABLE, ERROR, KILLED)
PROOF_STATUSES = (Status.OPTIMAL.value, Status.INFEASIBLE.value)
PLAN_STATUSES = (Status.OPTIMAL.value, Status.FEASIBLE.value)


# ---------------------------------------------------------------------------------
# one solve
# ---------------------------------------------------------------------------------


@dataclass
class SolverRun:
    """What one solver did on one instance (a row of the report)."""

    solver: str
    exact: bool
    #: a Result status ("optimal", "feasible", "infeasible", "unknown") or
    #: "skipped" / "unavailable" / "error"
    status: str
    #: the evaluator's TPS of the returned plan (+inf without a plan or when OOM)
    tps: float = math.inf
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
    #: what piper.check_result found wrong with the Result (besides compare's own checks)
    result_issues: list[str] = field(default_factory=list)

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


#: runs one solve and returns its row: in this process, or in a worker process
Runner = Callable[[Any, SolverInfo, Options], "SolverRun"]


def run_solver(problem: Any, info: SolverInfo, options: Options, runner: Runner | None = None) -> SolverRun:
    """Run one registered solver; never raises (except KeyboardInterrupt).

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
    return (runner or solve_in_process)(problem, info, options)


def solve_in_process(problem: Any, info: SolverInfo, options: Options) -> SolverRun:
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
    return _run_from_result(problem, info, result, wall, options)


def _worker_main(conn: Any) -> None:
    """A solve worker: its own process group (killed as a whole, MILP backend
    subprocesses included; deaf to the terminal's Ctrl-C), one solve at a time."""
    os.setpgrp()
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        kind, args = msg
        conn.send(solve_in_process(*args) if kind == "solve" else _warm_up(*args))


def _warm_up(info: SolverInfo, options: Options) -> float:
    """Solve a tiny instance, untimed, so that one-time costs (numba compilation or
    cache loading, backend start-up) stay out of the measured solve times. Same
    options as the real solves (HiGHS, for one, cannot change its thread count
    after its first solve in a process) but a generous time limit."""
    from experiments.instances import random_problem
    from experiments.suites import version2_variant

    problem = random_problem(3, n=4, shape="branchy", devices=4, microbatches=4, degrees=(1, 2), memory_tightness=4.0)
    # version 1, then nodes + sharded state (the DP compiles other kernel variants for those)
    start = time.perf_counter()
    for p in (problem, version2_variant(problem, 3, nodes=True, sharded=False),
              version2_variant(problem, 3, nodes=False, sharded=True), version2_variant(problem, 3)):
        try:
            info(p, replace(options, time_limit_s=max(options.time_limit_s or 0.0, 60.0)))
        except Exception:
            pass
    return time.perf_counter() - start


class SolveWorker:
    """A long-lived child process that runs solves one at a time, so that imports and
    compiled (numba) code stay warm between solves; before a solver's first solve in
    a process it gets an untimed warm-up solve. A solve that has not answered
    after ``hard_timeout`` seconds is killed with its whole process group (status
    ``killed``, not a failed check); a worker that dies without answering (a crash
    in native code) gives status ``error`` (a failed check). The next solve starts
    a fresh worker."""

    def __init__(self, hard_timeout: float, context: Any = None, warm_up: bool = True) -> None:
        self.hard_timeout = hard_timeout
        #: seconds allowed for a warm-up solve (JIT compilation can be slow)
        self.warm_timeout = 2 * hard_timeout
        self.warm_up = warm_up
        self._ctx = context or _worker_context()
        self._proc: Any = None
        self._conn: Any = None
        #: solvers warmed up in the current worker process; solvers whose warm-up failed
        self._warmed: set[str] = set()
        self._cold: set[str] = set()

    def _ensure(self) -> Any:
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._warmed = set()
            parent, child = self._ctx.Pipe()
            self._proc = self._ctx.Process(target=_worker_main, args=(child,), daemon=True, name="compare-solver")
            self._proc.start()
            child.close()
            self._conn = parent
        return self._conn

    def _warm(self, info: SolverInfo, options: Options) -> float:
        """One untimed warm-up solve per solver and worker process (see :func:`_warm_up`);
        a warm-up that hangs or crashes is not retried (the real solve reports it)."""
        conn = self._ensure()
        self._warmed.add(info.name)
        start = time.perf_counter()
        try:
            conn.send(("warm", (info, options)))
            if conn.poll(self.warm_timeout):
                conn.recv()
                return time.perf_counter() - start
        except (EOFError, OSError):
            pass
        self._cold.add(info.name)
        self.close()
        return time.perf_counter() - start

    def __call__(self, problem: Any, info: SolverInfo, options: Options) -> SolverRun:
        warmup = None
        if self.warm_up and info.name not in self._warmed and info.name not in self._cold:
            warmup = self._warm(info, options)
        run = self._solve(problem, info, options)
        run.warmup_s = warmup
        return run

    def _solve(self, problem: Any, info: SolverInfo, options: Options) -> SolverRun:
        conn = self._ensure()
        start = time.perf_counter()
        try:
            conn.send(("solve", (problem, info, options)))
            if conn.poll(self.hard_timeout):
                return conn.recv()
        except (EOFError, OSError):
            code = self.close(wait=2.0)
            run = SolverRun(info.name, info.exact, ERROR, time_s=time.perf_counter() - start)
            run.message = f"the solver process died without an answer (exit code {code})"
            return run
        self.close()
        run = SolverRun(info.name, info.exact, KILLED, time_s=time.perf_counter() - start)
        run.message = (
            f"killed after {self.hard_timeout:g}s without an answer (time limit {options.time_limit_s}s not honoured)"
        )
        return run

    def close(self, wait: float = 0.0) -> int | None:
        """Kill the worker and its process group (after waiting up to ``wait`` seconds
        for it to exit by itself); return its exit code (None if it was killed)."""
        proc, self._proc = self._proc, None
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if proc is None:
            return None
        if wait:
            proc.join(wait)
        code = proc.exitcode
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.is_alive():
            proc.kill()
        proc.join()
        return code


def _worker_context() -> Any:
    """forkserver where available (workers start from a clean single-threaded
    server, safe with the driving threads of --jobs), spawn otherwise."""
    methods = multiprocessing.get_all_start_methods()
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


class RunnerClosed(RuntimeError):
    """Raised by a closed :class:`IsolatedRunner` (the run was interrupted)."""


class IsolatedRunner:
    """A :data:`Runner` with a watchdog: each calling thread drives its own
    :class:`SolveWorker` (so ``--jobs N`` threads give N solver processes)."""

    def __init__(self, hard_timeout: float, preload: Sequence[str] = ()) -> None:
        """``preload``: modules that worker processes import up front (with the
        forkserver start method they are imported once, in the server)."""
        self.hard_timeout = hard_timeout
        self._context = _worker_context()
        if self._context.get_start_method() == "forkserver":
            self._context.set_forkserver_preload(["piper", "baselines", *preload])
        self._local = threading.local()
        self._lock = threading.Lock()
        self._workers: list[SolveWorker] = []
        self._closed = False

    def __call__(self, problem: Any, info: SolverInfo, options: Options) -> SolverRun:
        if self._closed:
            raise RunnerClosed("the run was stopped")
        worker = getattr(self._local, "worker", None)
        if worker is None:
            worker = SolveWorker(self.hard_timeout, self._context)
            self._local.worker = worker
            with self._lock:
                self._workers.append(worker)
        return worker(problem, info, options)

    def close(self) -> None:
        """Kill every worker; later solves raise :class:`RunnerClosed` (so that the
        instances in flight stop instead of starting new workers)."""
        with self._lock:
            self._closed = True
            workers, self._workers = self._workers, []
        for worker in workers:
            worker.close()

    def __enter__(self) -> "IsolatedRunner":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_from_result(problem: Any, info: SolverInfo, result: Result, wall: float,
                     options: Options | None = None) -> SolverRun:
    """The row of a returned Result. Its plan is scored here, by the evaluator, and
    that score is the TPS compared (``Result.tps`` is kept as ``reported_tps``);
    a structurally invalid plan makes the run an error."""
    status = result.status.value if isinstance(result.status, Status) else str(result.status)
    reported = math.inf if result.tps is None else float(result.tps)
    tps = math.inf
    if result.plan is not None:
        try:
            tps = evaluate(problem, result.plan).tps
        except Exception as exc:  # PlanError: a structurally invalid plan
            run = SolverRun(info.name, info.exact, ERROR, time_s=wall, solver_time_s=result.time_s)
            run.message = _one_line(f"invalid plan: {type(exc).__name__}: {exc}")
            run.plan = result.plan.to_dict() if isinstance(result.plan, Plan) else None
            return run
    # the one result check (piper.check_result); tps / objective / plan are compare's own
    # checks below (result-tps, claimed-tps, plan), the rest become "result" failures
    issues = [f"{i.check}: {i.message}" for i in check_result(problem, options, result, exact=info.exact)
              if i.check not in ("tps", "objective", "plan")]
    return SolverRun(
        result_issues=issues,
        solver=info.name,
        exact=info.exact,
        status=status,
        tps=tps,
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
# the checks
# ---------------------------------------------------------------------------------


def close(a: float, b: float, rtol: float, atol: float = 0.0) -> bool:
    """a and b agree within ``rtol`` relative or ``atol`` absolute (a certificate's own
    tolerance, ``Result.tolerance``); infinities agree only with themselves."""
    if a == b:
        return True
    if not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= max(rtol * max(abs(a), abs(b)), atol)


def exceeds(value: float, ref: float, rtol: float, atol: float = 0.0) -> bool:
    """value > ref beyond the tolerance."""
    return value > ref and not close(value, ref, rtol, atol)


@dataclass
class Failure:
    solver: str
    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.solver}: {self.check}: {self.message}"


@dataclass
class InstanceReport:
    name: str
    suite: str
    note: str
    layers: int
    edges: int
    devices: int
    microbatches: int
    memory: float
    runs: list[SolverRun]
    #: proven optimum (inf = proven infeasible; None = nothing proven)
    optimum: float | None = None
    #: the best evaluated plan's TPS (inf = no plan) and who found it
    best: float = math.inf
    best_by: str = ""
    #: "agree" (>= 2 exact proofs, all agree), "single" (one proof), "unproven", "FAIL"
    verdict: str = "unproven"
    failures: list[Failure] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def _check_run(run: SolverRun, rtol: float) -> list[Failure]:
    out = []
    if run.status == ERROR:
        out.append(Failure(run.solver, "exception", run.message))
    for text in run.result_issues:
        out.append(Failure(run.solver, "result", text))
    if run.status in PLAN_STATUSES and not run.has_plan:
        out.append(Failure(run.solver, "plan", f"status {run.status} but no plan returned"))
    if run.has_plan and run.status in PLAN_STATUSES and not math.isfinite(run.tps):
        out.append(Failure(run.solver, "plan", "the returned plan is out of memory (evaluated TPS = inf)"))
    if run.reported_tps is not None and not close(run.reported_tps, run.tps, rtol):
        out.append(
            Failure(run.solver, "result-tps", f"Result.tps is {run.reported_tps:.9g} but the evaluator scores its plan {run.tps:.9g}")
        )
    if (run.has_plan and run.objective is not None and math.isfinite(run.tps)
            and not close(run.objective, run.tps, rtol, run.tolerance)):
        rel = abs(run.objective - run.tps) / max(abs(run.tps), 1e-300)
        out.append(
            Failure(run.solver, "claimed-tps", f"claims {run.objective:.9g} but its plan evaluates to {run.tps:.9g} (rel {rel:.2g})")
        )
    return out


def _check_proofs(runs: Sequence[SolverRun], best: float, best_by: str, rtol: float) -> list[Failure]:
    out = []
    for run in runs:
        if not run.exact:
            continue
        if run.status == Status.OPTIMAL.value and run.has_plan and exceeds(run.tps, best, rtol, run.tolerance):
            out.append(Failure(run.solver, "optimality", f"claims optimal {run.tps:.9g} (tolerance {run.tolerance:.3g}) "
                                                         f"but {best_by} found {best:.9g}"))
        if run.status == Status.INFEASIBLE.value and math.isfinite(best):
            out.append(Failure(run.solver, "optimality", f"claims infeasible but {best_by} found a plan with TPS {best:.9g}"))
        if run.bound is not None and math.isfinite(best) and exceeds(run.bound, best, rtol):
            out.append(Failure(run.solver, "bound", f"lower bound {run.bound:.9g} exceeds the plan of {best_by} ({best:.9g})"))
    return out


def _fill_gaps(runs: Sequence[SolverRun], ref: float, proven: bool) -> None:
    for run in runs:
        if run.status in NOT_RUN or not math.isfinite(ref):
            continue
        run.gap_vs_proof = proven
        if not math.isfinite(run.tps):
            run.gap = math.inf
        elif ref > 0:
            run.gap = run.tps / ref - 1.0
        else:
            run.gap = 0.0 if run.tps == 0 else math.inf


def check_instance(report: InstanceReport, rtol: float = RTOL) -> InstanceReport:
    """Run every check on ``report.runs``; fill optimum, best, verdict, gaps, failures."""
    runs = report.runs
    failures: list[Failure] = []
    for run in runs:
        failures += _check_run(run, rtol)
    plans = [r for r in runs if r.has_plan and math.isfinite(r.tps)]
    if plans:
        top = min(plans, key=lambda r: r.tps)
        report.best, report.best_by = top.tps, top.solver
    failures += _check_proofs(runs, report.best, report.best_by, rtol)
    proofs = [r for r in runs if r.proof]
    if proofs:
        values = [r.tps if r.status == Status.OPTIMAL.value else math.inf for r in proofs]
        report.optimum = min(min(values), report.best)
    _fill_gaps(runs, report.optimum if report.optimum is not None else report.best, report.optimum is not None)
    for f in failures:
        runs_by_name = [r for r in runs if r.solver == f.solver]
        for r in runs_by_name:
            r.failures.append(f"{f.check}: {f.message}")
    report.failures = failures
    if failures:
        report.verdict = "FAIL"
    else:
        report.verdict = {0: "unproven", 1: "single"}.get(len(proofs), "agree")
    return report


# ---------------------------------------------------------------------------------
# one instance (the unit of work handed to an executor)
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Task:
    index: int
    instance: Instance
    solvers: tuple[SolverInfo, ...]
    options: Options
    rtol: float


def compare_instance(task: Task, runner: Runner | None = None) -> tuple[int, InstanceReport]:
    """Run every solver on one instance and check the results. Picklable with
    ``runner=None`` (solves in the calling process), for process pools."""
    inst = task.instance
    problem = inst.problem
    start = time.perf_counter()
    options = replace(task.options, uniform=True) if inst.uniform else task.options
    runs = [run_solver(problem, info, options, runner) for info in task.solvers]
    for run in runs:
        run.mark_early(options.time_limit_s)
    report = InstanceReport(
        name=inst.name,
        suite=inst.suite,
        note=inst.note,
        layers=problem.n,
        edges=len(problem.edges),
        devices=problem.devices,
        microbatches=problem.microbatches,
        memory=problem.memory_per_device,
        runs=runs,
    )
    check_instance(report, task.rtol)
    report.wall_s = time.perf_counter() - start
    return task.index, report


# ---------------------------------------------------------------------------------
# execution backends: anything with the concurrent.futures.Executor interface
# ---------------------------------------------------------------------------------


class SerialExecutor(Executor):
    """Runs each task in this process when it is submitted (the ``--jobs 1`` backend).
    Like ProcessPoolExecutor, an optional ``initializer(*initargs)`` runs first."""

    def __init__(self, initializer: Callable[..., Any] | None = None, initargs: tuple[Any, ...] = ()) -> None:
        if initializer is not None:
            initializer(*initargs)

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # KeyboardInterrupt must stop the run
            if not isinstance(exc, Exception):
                raise
            future.set_exception(exc)
        return future


def make_executor(jobs: int, isolated: bool) -> Executor:
    """The backend for ``--jobs``: serial for one job; with isolated solves (the work
    happens in solver processes) a thread pool driving ``jobs`` of them; otherwise a
    process pool running whole instances."""
    if jobs <= 1:
        return SerialExecutor()
    if isolated:
        return ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="compare")
    return ProcessPoolExecutor(max_workers=jobs)


def _results_lazily(
    executor: Executor, tasks: Sequence[Task], runner: Runner | None
) -> Iterator[tuple[int, InstanceReport]]:
    """Reports as they finish. A serial executor runs each task only when asked for
    its result, so that progress and partial reports follow every instance."""
    if isinstance(executor, SerialExecutor):
        for task in tasks:
            yield executor.submit(compare_instance, task, runner).result()
        return
    futures = [executor.submit(compare_instance, task, runner) for task in tasks]
    try:
        for future in as_completed(futures):
            yield future.result()
    finally:
        for future in futures:
            future.cancel()


def run_compare(
    instances: Sequence[Instance],
    solvers: Sequence[SolverInfo],
    options: Options,
    *,
    rtol: float = RTOL,
    executor: Executor | None = None,
    runner: Runner | None = None,
    on_report: Callable[[InstanceReport, list[InstanceReport]], None] | None = None,
) -> list[InstanceReport]:
    """Compare ``solvers`` on ``instances``. After each instance, ``on_report`` gets
    its report and every finished report so far (in instance order). ``runner``
    (default: in-process) must be None with a process pool."""
    executor = executor or SerialExecutor()
    if runner is not None and isinstance(executor, ProcessPoolExecutor):
        raise ValueError("a process pool runs instances in-process: pass runner=None")
    tasks = [Task(i, inst, tuple(solvers), options, rtol) for i, inst in enumerate(instances)]
    done: dict[int, InstanceReport] = {}
    for index, report in _results_lazily(executor, tasks, runner):
        done[index] = report
        if on_report is not None:
            on_report(report, [done[i] for i in sorted(done)])
    return [done[i] for i in sorted(done)]


# ---------------------------------------------------------------------------------
# output: table, summary, reports, plots
# ---------------------------------------------------------------------------------

CSV_FIELDS = [
    "instance", "suite", "layers", "edges", "k", "N", "solver", "exact", "status", "limit", "early", "tps", "reported_tps",
    "objective",
    "bound", "tolerance", "gap", "gap_vs", "time_s", "solver_time_s", "warmup_s", "devices_used", "check", "message",
]  # fmt: skip


def _num(x: float | None) -> float | str | None:
    """JSON/CSV-safe number: inf -> "inf"."""
    if x is None:
        return None
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def run_row(report: InstanceReport, run: SolverRun) -> dict[str, Any]:
    return {
        "instance": report.name,
        "suite": report.suite,
        "layers": report.layers,
        "edges": report.edges,
        "k": report.devices,
        "N": report.microbatches,
        "solver": run.solver,
        "exact": run.exact,
        "status": run.status,
        "limit": run.limit,
        "early": run.early,
        "tps": _num(run.tps) if run.status not in NOT_RUN else None,
        "reported_tps": _num(run.reported_tps),
        "objective": _num(run.objective),
        "bound": _num(run.bound),
        "tolerance": run.tolerance,
        "gap": _num(run.gap),
        "gap_vs": None if run.gap is None else ("optimum" if run.gap_vs_proof else "best"),
        "time_s": run.time_s,
        "solver_time_s": run.solver_time_s,
        "warmup_s": run.warmup_s,
        "devices_used": run.devices_used,
        "check": "FAIL" if run.failures else "ok",
        "message": "; ".join([*run.failures, run.message] if run.message else run.failures),
    }


def instance_dict(report: InstanceReport) -> dict[str, Any]:
    return {
        "name": report.name,
        "suite": report.suite,
        "note": report.note,
        "layers": report.layers,
        "edges": report.edges,
        "k": report.devices,
        "N": report.microbatches,
        "memory": report.memory,
        "verdict": report.verdict,
        "optimum": _num(report.optimum),
        "best": _num(report.best),
        "best_by": report.best_by,
        "failures": [asdict(f) for f in report.failures],
        "wall_s": report.wall_s,
    }


def _fmt_tps(run: SolverRun) -> str:
    if run.status in NOT_RUN:
        return "-"
    if not run.has_plan:
        return "inf" if run.status == Status.INFEASIBLE.value else "-"
    return f"{run.tps:.6g}" if math.isfinite(run.tps) else "OOM"


def _fmt_gap(run: SolverRun) -> str:
    if run.gap is None:
        return ""
    mark = "" if run.gap_vs_proof else "~"
    if math.isinf(run.gap):
        return f"{mark}inf"
    return f"{mark}{100 * run.gap:+.2f}%" if abs(run.gap) > 1e-12 else f"{mark}0"


def _fmt_time(seconds: float) -> str:
    return f"{1000 * seconds:.1f}ms" if seconds < 0.1 else f"{seconds:.2f}s"


def _fmt_status(run: SolverRun) -> str:
    if run.limit:
        return f"{run.status} (limit)"
    if run.early:
        return f"{run.status} (early)"
    return run.status


def _fmt_note(run: SolverRun) -> str:
    if run.failures:
        return "FAIL " + run.failures[0]
    if run.limit and run.bound is not None:
        return f"bound {run.bound:.6g}"
    if run.early:
        return f"no proof, stopped before the time limit: {run.message or 'no reason given'}"
    if run.status in (SKIPPED, UNAVAILABLE, KILLED):
        return run.message
    return ""


def render_table(reports: Sequence[InstanceReport], note_width: int = 70) -> str:
    header = ["instance", "layers", "k", "solver", "status", "TPS", "gap", "time", "note"]
    rows = [header]
    for rep in reports:
        for run in rep.runs:
            note = _fmt_note(run)
            if len(note) > note_width:
                note = note[: note_width - 3] + "..."
            rows.append(
                [rep.name, str(rep.layers), str(rep.devices), run.solver, _fmt_status(run), _fmt_tps(run),
                 _fmt_gap(run), _fmt_time(run.time_s), note]  # fmt: skip
            )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header) - 1)]
    right = {1, 2, 5, 6, 7}
    lines = []
    for j, r in enumerate(rows):
        cells = [c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths))]
        lines.append("  ".join([*cells, r[-1]]).rstrip())
        if j == 0:
            lines.append("  ".join("-" * w for w in widths) + "  ----")
    return "\n".join(lines)


def summarize(reports: Sequence[InstanceReport]) -> dict[str, Any]:
    verdicts: dict[str, int] = {}
    for rep in reports:
        verdicts[rep.verdict] = verdicts.get(rep.verdict, 0) + 1
    infeasible = sum(1 for r in reports if r.optimum is not None and math.isinf(r.optimum))
    per_solver: dict[str, dict[str, Any]] = {}
    for rep in reports:
        for run in rep.runs:
            s = per_solver.setdefault(
                run.solver,
                {"exact": run.exact, "runs": 0, "statuses": {}, "limit": 0, "early": 0, "failed": 0, "time_s": 0.0,
                 "gaps": []},  # fmt: skip
            )
            s["runs"] += 1
            s["statuses"][run.status] = s["statuses"].get(run.status, 0) + 1
            s["limit"] += run.limit
            s["early"] += run.early
            s["failed"] += bool(run.failures)
            s["time_s"] += run.time_s
            if run.gap is not None and run.gap_vs_proof and rep.optimum is not None and math.isfinite(rep.optimum):
                s["gaps"].append(run.gap)
    for s in per_solver.values():
        gaps = s.pop("gaps")
        finite = [g for g in gaps if math.isfinite(g)]
        s["gap"] = {
            "instances": len(gaps),
            "optimal": sum(1 for g in gaps if abs(g) <= 1e-9),
            "no_plan": len(gaps) - len(finite),
            "mean": sum(finite) / len(finite) if finite else None,
            "max": max(finite) if finite else None,
        }
    return {
        "instances": len(reports),
        "verdicts": verdicts,
        "proven_infeasible": infeasible,
        "failed_instances": [r.name for r in reports if not r.ok],
        "failures": [str(f) for r in reports for f in r.failures],
        "solvers": per_solver,
    }


def render_summary(summary: dict[str, Any], wall_s: float | None = None, max_failures: int = 20) -> str:
    v = summary["verdicts"]
    lines = [
        f"instances: {summary['instances']} (proven infeasible: {summary['proven_infeasible']})",
        "exact solvers: "
        f"{v.get('agree', 0)} instances with >= 2 proofs, all agreeing; {v.get('single', 0)} with one proof; "
        f"{v.get('unproven', 0)} unproven; {v.get('FAIL', 0)} with failed checks",
    ]
    for name, s in summary["solvers"].items():
        statuses = ", ".join(f"{k} {n}" for k, n in sorted(s["statuses"].items()))
        line = f"  {name:<11} {'exact' if s['exact'] else 'heur.'}  {statuses}; {s['time_s']:.1f}s total"
        if s["limit"]:
            line += f"; hit the time limit {s['limit']}x"
        if s["early"]:
            line += f"; stopped early without a proof {s['early']}x"
        g = s["gap"]
        if not s["exact"] and g["instances"]:
            mean = "-" if g["mean"] is None else f"{100 * g['mean']:+.2f}%"
            worst = "-" if g["max"] is None else f"{100 * g['max']:+.2f}%"
            line += f"; gap vs optimum on {g['instances']}: {g['optimal']} optimal, mean {mean}, max {worst}"
            if g["no_plan"]:
                line += f", no plan on {g['no_plan']}"
        if s["failed"]:
            line += f"; FAILED {s['failed']}"
        lines.append(line)
    shown = summary["failures"][:max_failures]
    lines += [f"FAIL {f}" for f in shown]
    if len(summary["failures"]) > len(shown):
        lines.append(f"... and {len(summary['failures']) - len(shown)} more failures (see the JSON report)")
    if wall_s is not None:
        lines.append(f"wall time: {wall_s:.1f}s")
    return "\n".join(lines)


def atomic_write(path: Path, data: str | bytes) -> None:
    """Write via a temporary file in the same directory and os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, mode) as fh:
            fh.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _csv_text(reports: Sequence[InstanceReport]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=CSV_FIELDS)
    writer.writeheader()
    for rep in reports:
        for run in rep.runs:
            writer.writerow({k: ("" if v is None else v) for k, v in run_row(rep, run).items()})
    return buf.getvalue()


def write_reports(out: Path, reports: Sequence[InstanceReport], meta: dict[str, Any]) -> None:
    """report.json (meta, summary, instances, one row per (instance, solver) with its
    plan) and report.csv (the rows), both atomically."""
    rows = []
    for rep in reports:
        for run in rep.runs:
            rows.append({**run_row(rep, run), "plan": run.plan})
    doc = {"meta": meta, "summary": summarize(reports), "instances": [instance_dict(r) for r in reports], "rows": rows}
    atomic_write(out / "report.json", json.dumps(doc, indent=1) + "\n")
    atomic_write(out / "report.csv", _csv_text(reports))


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "instance"


def write_failed(out: Path, reports: Sequence[InstanceReport], instances: dict[str, Instance]) -> list[Path]:
    """Each instance with a failed check, as a workload JSON under OUT/failed/."""
    paths = []
    for rep in reports:
        if rep.ok or rep.name not in instances:
            continue
        problem = instances[rep.name].problem
        if problem_name(problem, "") != rep.name:
            problem = replace(problem, extra={**problem.extra, "name": rep.name})
        path = out / "failed" / f"{_safe_name(rep.name)}.json"
        atomic_write(path, dump_problem(problem) + "\n")
        paths.append(path)
    return paths


def write_plots(out: Path, reports: Sequence[InstanceReport]) -> list[Path]:
    """times.png (solve time vs layers per solver, log scale) and gaps.png (heuristic
    gaps to the proven optimum). Needs matplotlib; returns the files written."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    solvers = list(dict.fromkeys(run.solver for rep in reports for run in rep.runs))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for j, name in enumerate(solvers):
        pts = [
            (rep.layers + 0.08 * (j - len(solvers) / 2), max(run.time_s, 1e-4), run.limit)
            for rep in reports
            for run in rep.runs
            if run.solver == name and run.status not in (SKIPPED, UNAVAILABLE)
        ]
        if not pts:
            continue
        xs, ys, lim = zip(*pts)
        line = ax.scatter(xs, ys, s=18, label=name)
        hit = [(x, y) for x, y, l in pts if l]
        if hit:
            ax.scatter(*zip(*hit), s=60, facecolors="none", edgecolors=line.get_facecolor(), linewidths=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("layers")
    ax.set_ylabel("wall time per solve (s)")
    ax.set_title("solve time vs graph size (circled: time limit hit)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save_fig(fig, out / "times.png"))
    plt.close(fig)

    gaps: dict[str, list[float]] = {}
    for rep in reports:
        for run in rep.runs:
            if not run.exact and run.gap is not None and run.gap_vs_proof and math.isfinite(run.gap):
                gaps.setdefault(run.solver, []).append(100 * run.gap)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if gaps:
        ax.boxplot(list(gaps.values()), showmeans=True)
        ax.set_xticks(range(1, len(gaps) + 1), list(gaps))
        for i, vals in enumerate(gaps.values(), start=1):
            ax.scatter([i + 0.15] * len(vals), vals, s=10, alpha=0.6)
    else:
        ax.text(0.5, 0.5, "no heuristic gap measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylabel("gap to proven optimum (%, log above 1%)")
    counts = ", ".join(f"{name}: {len(vals)}" for name, vals in gaps.items())
    ax.set_title(f"heuristic gap distribution ({counts or 'none'} instances)")
    ax.grid(True, axis="y", alpha=0.3)
    written.append(_save_fig(fig, out / "gaps.png"))
    plt.close(fig)
    return written


def _save_fig(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, buf.getvalue())
    return path


class Progress:
    """A one-line progress bar on a terminal (finished instances, elapsed time, the
    solve running now); one line per finished instance otherwise. Thread-safe."""

    def __init__(self, total: int, stream: TextIO, enabled: bool = True, width: int = 24) -> None:
        self.total, self.stream, self.enabled, self.width = total, stream, enabled, width
        self.done = 0
        self.start = time.perf_counter()
        self.tty = enabled and hasattr(stream, "isatty") and stream.isatty()
        self._last = ""
        self._lock = threading.Lock()

    def _bar(self, text: str) -> None:
        filled = int(self.width * self.done / max(self.total, 1))
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = time.perf_counter() - self.start
        line = f"[{bar}] {self.done}/{self.total} {elapsed:4.0f}s  {text}"
        self.stream.write("\r" + line[:99].ljust(99))
        self.stream.flush()

    def update(self, report: InstanceReport) -> None:
        with self._lock:
            self.done += 1
            if not self.enabled:
                return
            if self.tty:
                self._last = f"{report.name} {'ok' if report.ok else 'FAIL'}"
                self._bar(self._last)
            else:
                elapsed = time.perf_counter() - self.start
                self.stream.write(f"[{self.done}/{self.total}] {elapsed:.0f}s {report.name} {report.verdict}\n")
                self.stream.flush()

    def running(self, instance: str, solver: str) -> None:
        with self._lock:
            if self.tty:
                self._bar(f"running {solver} on {instance}")

    def close(self) -> None:
        with self._lock:
            if self.tty and self.done:
                self._bar(self._last)
                self.stream.write("\n")
                self.stream.flush()


class TracedRunner:
    """A :data:`Runner` that tells a :class:`Progress` which solve is running."""

    def __init__(self, runner: Runner, progress: Progress) -> None:
        self.runner, self.progress = runner, progress

    def __call__(self, problem: Any, info: SolverInfo, options: Options) -> SolverRun:
        self.progress.running(problem_name(problem, f"{problem.n} layers"), info.name)
        return self.runner(problem, info, options)


# ---------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------


def build_parser() -> ArgumentParser:
    p = ArgumentParser(
        prog="python -m experiments.compare",
        description="Run solvers on instances, score every plan with the evaluator, and check that they agree.",
        epilog=f"Default time limit: {DEFAULT_TIME_LIMIT:g} s per solve. "
        "Exit status: 0 all checks passed, 1 a check failed (the instance is written to OUT/failed/) or no instance was proven by an exact solver, "
        "2 usage error, 130 interrupted.",
    )
    p.add_argument("files", nargs="*", metavar="FILE", help="workload JSON files (cluster overrides apply to these)")
    p.add_argument("--suite", action="append", default=[], metavar="NAME",
                   help=f"instance suite(s), comma-separated: {', '.join(suite_names())}, random:COUNT[:FIRST_SEED], real-magnitudes:COUNT[:FIRST[:MAXN]] "
                   "(default: 'default' when no FILE is given)")  # fmt: skip
    p.add_argument("--solvers", action="append", default=[], metavar="A,B",
                   help="solvers to run, comma-separated (default: every registered one)")  # fmt: skip
    p.add_argument("--slice", type=positive_int, metavar="L", help="keep only the first L layers of each FILE")
    p.add_argument("--jobs", "-j", type=positive_int, default=1, metavar="N",
                   help="instances in parallel (N solver processes; default 1)")  # fmt: skip
    p.add_argument("--out", "-o", type=Path, default=DEFAULT_OUT, metavar="DIR", help=f"report directory ({DEFAULT_OUT})")
    p.add_argument("--hard-timeout", type=float, metavar="S",
                   help="kill a solve (run in a worker process) after S seconds; 0 = solve in-process "
                   "without a watchdog (default: 2 x the time limit + 30)")  # fmt: skip
    p.add_argument("--rtol", type=float, default=RTOL, help=f"relative tolerance on TPS checks ({RTOL:g})")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr")
    p.add_argument("--list", action="store_true", help="list suites and solvers, then exit")
    add_cluster_args(p)
    add_ablation_args(p)
    p.set_defaults(time_limit=DEFAULT_TIME_LIMIT)
    return p


def _split(values: Iterable[str]) -> list[str]:
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def select_solvers(names: Sequence[str]) -> list[SolverInfo]:
    if not names:
        return list(baselines.SOLVERS.values())
    out = []
    for name in dict.fromkeys(names):
        if name not in baselines.SOLVERS:
            raise UsageError(f"unknown solver {name!r}; known: {', '.join(baselines.SOLVERS)}")
        out.append(baselines.SOLVERS[name])
    return out


def select_instances(args: argparse.Namespace) -> list[Instance]:
    suites = _split(args.suite) or ([] if args.files else ["default"])
    instances: list[Instance] = []
    for name in suites:
        if not is_suite(name):
            raise UsageError(f"unknown suite {name!r}; known: {', '.join(suite_names())}, random:COUNT[:FIRST_SEED], real-magnitudes:COUNT[:FIRST[:MAXN]] (MAXN 6..24)")
        instances += build_suite(name)
    cluster_given = any(getattr(args, k) is not None for k in ("devices", "memory", "microbatches", "bandwidth"))
    if (cluster_given or args.slice) and not args.files:
        raise UsageError("--devices/--memory/--microbatches/--bandwidth/--slice apply to FILE arguments; none given")
    for path in args.files:
        problem = load_problem(path)
        name = Path(path).stem
        if args.slice:
            problem = slice_problem(problem, args.slice)
            name = f"{name}[:{args.slice}]"
        problem = apply_cluster_args(problem, args)
        instances.append(Instance(name, problem, "file", str(path)))
    return unique_names(instances)


def _list_text() -> str:
    from experiments.suites import SUITES

    lines = ["suites:"]
    lines += [f"  {name:<13} {desc}" for name, (desc, _) in SUITES.items()]
    lines.append(f"  {'random:C[:F]':<13} random_problem(seed) for C seeds from F (e.g. random:320)")
    lines.append("solvers:")
    for info in baselines.SOLVERS.values():
        extra = f" (<= {info.max_nodes} layers)" if info.max_nodes else ""
        lines.append(f"  {info.name:<13} {'exact' if info.exact else 'heuristic':<9} {info.description}{extra}")
    return "\n".join(lines)


def _rerun_flags(args: argparse.Namespace, solvers: Sequence[SolverInfo]) -> list[str]:
    """The flags that make a re-run of a dumped instance solve the same problem."""
    flags = []
    if args.solvers:
        flags += ["--solvers", ",".join(s.name for s in solvers)]
    if args.time_limit != DEFAULT_TIME_LIMIT:
        flags += ["--time-limit", f"{args.time_limit:g}"]
    flags += [flag for flag, on in (("--no-dp", args.no_dp), ("--no-tp", args.no_tp), ("--no-ar", args.no_ar)) if on]
    for tmpc in args.exclude_tmpc:
        flags += ["--exclude-tmpc", repr(tmpc) if " " in tmpc else tmpc]
    return flags


def _hard_timeout(given: float | None, time_limit: float | None) -> float | None:
    if given is not None:
        if given < 0:
            raise UsageError(f"--hard-timeout must be >= 0 seconds, got {given:g}")
        return given or None
    return None if time_limit is None else 2 * time_limit + 30


def _versions() -> dict[str, str | None]:
    from importlib import metadata

    out: dict[str, str | None] = {"python": sys.version.split()[0]}
    for dist in ("ortools", "PuLP", "highspy", "numpy", "numba"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        print(_list_text())
        return 0
    if not args.rtol >= 0:
        raise UsageError(f"--rtol must be >= 0, got {args.rtol}")
    solvers = select_solvers(_split(args.solvers))
    instances = select_instances(args)
    options = options_from_args(args)
    hard_timeout = _hard_timeout(args.hard_timeout, options.time_limit_s)
    out: Path = args.out
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the report directory {str(out)!r}: {exc.strerror or exc}") from None
    meta = {
        "command": ["python", "-m", "experiments.compare", *(sys.argv[1:] if argv is None else argv)],
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "solvers": [s.name for s in solvers],
        "time_limit_s": options.time_limit_s,
        "threads": options.threads,
        "data_parallel": options.data_parallel,
        "tensor_parallel": options.tensor_parallel,
        "exclude_tmpcs": sorted(options.exclude_tmpcs),
        "jobs": args.jobs,
        "rtol": args.rtol,
        "hard_timeout_s": hard_timeout,
        "instances": len(instances),
        "versions": _versions(),
    }
    by_name = {inst.name: inst for inst in instances}
    progress = Progress(len(instances), sys.stderr, enabled=not args.no_progress)
    start = time.perf_counter()
    finished: list[InstanceReport] = []

    def on_report(report: InstanceReport, reports: list[InstanceReport]) -> None:
        finished[:] = reports
        progress.update(report)
        write_reports(out, reports, {**meta, "complete": False, "wall_s": time.perf_counter() - start})

    runner = IsolatedRunner(hard_timeout, _importable_modules(solvers)) if hard_timeout else None
    executor = make_executor(args.jobs, isolated=runner is not None)
    traced = None if isinstance(executor, ProcessPoolExecutor) else TracedRunner(runner or solve_in_process, progress)
    try:
        reports = run_compare(
            instances, solvers, options, rtol=args.rtol, executor=executor, runner=traced, on_report=on_report
        )
    except KeyboardInterrupt:
        executor.shutdown(wait=False, cancel_futures=True)
        if runner is not None:
            runner.close()
        progress.close()
        meta.update(complete=False, interrupted=True, wall_s=time.perf_counter() - start)
        write_reports(out, finished, meta)
        write_failed(out, finished, by_name)
        print(f"interrupted: {len(finished)}/{len(instances)} instances kept in {out}", file=sys.stderr)
        raise
    finally:
        if runner is not None:
            runner.close()
    executor.shutdown()
    progress.close()
    wall = time.perf_counter() - start
    write_reports(out, reports, {**meta, "complete": True, "wall_s": wall})
    if not args.no_plots:
        write_plots(out, reports)
    failed = write_failed(out, reports, by_name)
    print(render_table(reports))
    print()
    print(render_summary(summarize(reports), wall))
    print(f"reports: {out / 'report.json'}, {out / 'report.csv'}")
    if failed:
        target = str(failed[0]) if len(failed) == 1 else str(out / "failed" / "NAME.json")
        hint = " ".join(["python -m experiments.compare", target, *_rerun_flags(args, solvers)])
        print(f"{len(failed)} failed instance(s) written to {out / 'failed'}; re-run one alone: {hint}", file=sys.stderr)
    if not all(r.ok for r in reports):
        return 1
    if reports and not any(any(run.proof for run in r.runs) for r in reports):
        # nothing was checked: no exact solver proved any instance (e.g. --solvers dp-greedy,equi)
        print("compare: no instance was proven by an exact solver, so nothing was cross-checked", file=sys.stderr)
        return 1
    return 0


def _importable_modules(solvers: Sequence[SolverInfo]) -> list[str]:
    """The solvers' modules that import here (worth preloading in worker processes)."""
    out = []
    for info in solvers:
        try:
            info.load()
        except Exception:
            continue
        out.append(info.target.split(":")[0])
    return list(dict.fromkeys(out))


def _terminate(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def cli(argv: Sequence[str] | None = None) -> int:
    """The command: SIGTERM stops it like Ctrl-C (reports kept, solver processes killed)."""
    if threading.current_thread() is not threading.main_thread():
        return run_main(main, argv, prog="python -m experiments.compare")
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return run_main(main, argv, prog="python -m experiments.compare")
    finally:
        signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(cli())
