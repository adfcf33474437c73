"""One instance of ``experiments.compare`` (every solver, then the checks), and the run over
all instances on a :class:`piper.solvers.execution.WorkerPool`."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from experiments.compare.cross_checks import InstanceReport, check_instance
from experiments.compare.solve import RTOL, Runner, run_solver
from experiments.lib.suites import Instance
from piper.core.options import Options
from piper.solvers.execution import WorkerPool
from piper.solvers.registry import SolverInfo

__all__ = ["Task", "compare_instance", "run_compare"]


# (alike in shape only to piper's dataclasses of annotated fields, e.g. evaluate.StageScore: nothing to share)
@dataclass(frozen=True)
class Task:
    """One instance to compare: its place in the run, the solvers, their options and ``rtol``."""

    index: int
    instance: Instance
    solvers: tuple[SolverInfo, ...]
    options: Options
    rtol: float


def compare_instance(task: Task, runner: Runner | None = None) -> tuple[int, InstanceReport]:
    """Run every solver on one instance (with ``runner``; default: in this process) and
    check the results."""
    inst = task.instance
    problem = inst.problem
    start = time.perf_counter()
    options = task.options
    if inst.uniform:
        options = replace(options, uniform=True)
    if inst.objective is not None:
        options = replace(options, objective=inst.objective)
    if inst.max_virtual_stages is not None:
        options = replace(options, max_virtual_stages=inst.max_virtual_stages)
    runs = [run_solver(problem, info, options, runner, task.rtol) for info in task.solvers]
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


def run_compare(
    instances: Sequence[Instance],
    solvers: Sequence[SolverInfo],
    options: Options,
    *,
    rtol: float = RTOL,
    pool: WorkerPool | None = None,
    runner: Runner | None = None,
    on_report: Callable[[InstanceReport, list[InstanceReport]], None] | None = None,
) -> list[InstanceReport]:
    """Compare ``solvers`` on ``instances``: instances run on ``pool``'s jobs (default: one
    at a time, here), each solve with ``runner`` (default: in the driving thread; an
    :class:`~.solve.IsolatedRunner` on the pool for isolated workers). After each
    instance, ``on_report`` gets its report and every finished report so far (in instance
    order)."""
    tasks = [Task(i, inst, tuple(solvers), options, rtol) for i, inst in enumerate(instances)]
    done: dict[int, InstanceReport] = {}

    def one(task: Task) -> tuple[int, InstanceReport]:
        return compare_instance(task, runner)

    results = pool.map_unordered(one, tasks) if pool is not None else ((t.index, one(t)) for t in tasks)
    for _, (index, report) in results:
        done[index] = report
        if on_report is not None:
            on_report(report, [done[i] for i in sorted(done)])
    return [done[i] for i in sorted(done)]
