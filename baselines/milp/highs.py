"""HiGHS for the MILP (:mod:`baselines.milp.solver`), through PuLP's public HiGHS interface.

:class:`HighsSolver` is ``pulp.HiGHS`` plus a MIP start from the variables' initial
values, a time limit set from the deadline after PuLP has built the HiGHS model, and the
process-wide thread scheduler handled through a :class:`HighsContext` that one
``solve_milp`` call owns and passes to each of its runs (docs/formulations.md §2.4).

highspy prints its banner on fd 1 when the first ``Highs()`` of a process is made,
before PuLP can switch HiGHS's output off, which broke ``--json``. That first ``Highs()``
is made here, at import (serialised by Python's import lock), with fd 1 pointed at
/dev/null; later ones print nothing, so no run redirects fd 1.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import highspy
import pulp

from piper.core import stopping
from piper.core.errors import SolverError

__all__ = ["HighsContext", "HighsSolver"]

#: columns or rows loaded into HiGHS between two looks at the deadline
CHECK_EVERY = 2000


def _make_first_highs_silently() -> None:
    """Make the process's first ``Highs()`` (the one that prints the banner) with fd 1 on
    /dev/null (module docstring)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            highspy.Highs()
    finally:
        os.dup2(saved, 1)
        os.close(saved)


_make_first_highs_silently()


@dataclass
class HighsContext:
    """The HiGHS state shared by the runs of one ``solve_milp`` call (the split runs
    several at once, on worker threads).

    HiGHS keeps one global thread scheduler per process, and a run whose ``threads``
    differs from the scheduler's fails ("Not Solved"; seen after a 2-thread solve
    followed by a 1-thread one). Runs are counted under :attr:`lock`; the scheduler is
    reset to the new count when none is running, otherwise the run joins the running
    scheduler's count. It is also reset when a run starts on another Python thread than
    the one that last reset it and none is running: a scheduler made on a split worker
    thread that has since ended failed every later run of the same count on the main
    thread ("Not Solved" at once; this broke every HiGHS test after tests/baselines/test_split.py
    in one pytest process). A new context knows nothing of earlier solves, so its first
    run resets the scheduler.

    The scheduler belongs to the process: two solves with HiGHS on two Python threads of
    one process at the same time are not supported (run them in processes, as
    ``experiments.compare`` does).
    """

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: the scheduler's thread count and the token of the Python thread that made it
    threads: int | None = None
    owner: object | None = None
    #: runs in progress
    active: int = 0
    _local: threading.local = field(default_factory=threading.local)

    def _token(self) -> object:
        """One object per Python thread (thread idents are reused)."""
        token = getattr(self._local, "token", None)
        if token is None:
            token = self._local.token = object()
        return token

    @contextmanager
    def running(self, h: highspy.Highs) -> Iterator[None]:
        """Count a run of ``h`` and give it a scheduler it can use (class docstring)."""
        with self.lock:
            want = h.getOptionValue("threads")
            if isinstance(want, tuple):  # highspy 1.16 returns (status, value)
                want = want[-1]
            me = self._token()
            if self.threads != want or self.owner is not me:
                if self.active == 0:
                    highspy.Highs.resetGlobalScheduler(True)
                    self.threads, self.owner = want, me
                elif self.threads != want:
                    h.setOptionValue("threads", self.threads)
            self.active += 1
        try:
            yield
        finally:
            with self.lock:
                self.active -= 1


class HighsSolver(pulp.HiGHS):  # type: ignore[misc,valid-type]
    """PuLP's HiGHS interface plus a MIP start from the variables' initial values
    (``warm``), a time limit set from ``deadline`` (``time.perf_counter()`` time) after
    PuLP has built the HiGHS model, and the scheduler handling of ``context``. After the
    run :attr:`info` holds HiGHS's dual bound, objective and node count, and
    :attr:`time_limit_hit` whether the time limit ended it."""

    def __init__(self, *args: Any, context: HighsContext, warm: bool = False, deadline: float | None = None,
                 **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.context = context
        self.use_warm = warm
        self.deadline = deadline
        self.info: dict[str, float] = {}
        #: the run ended at its time limit (HiGHS's model status kTimeLimit)
        self.time_limit_hit = False

    def buildSolverModel(self, lp: pulp.LpProblem) -> None:  # noqa: N802 (PuLP's name)
        """PuLP's loading of the model into HiGHS (the same calls, in the same order), with
        the deadline checked every :data:`CHECK_EVERY` columns and rows
        (:func:`piper.core.stopping.checkpoint`): loading a large model takes seconds."""
        inf = highspy.kHighsInf
        h = lp.solverModel
        sign = -1 if lp.sense == pulp.LpMaximize else 1
        for i, var in enumerate(lp.variables()):
            if i % CHECK_EVERY == 0:
                stopping.checkpoint("loading the MILP into HiGHS")
            lb, ub = var.lowBound, var.upBound
            h.addCol(sign * lp.objective.get(var, 0.0), -inf if lb is None else lb, inf if ub is None else ub, 0, [], [])
            var.index = i
            if var.cat == pulp.LpInteger and self.mip:
                h.changeColIntegrality(var.index, highspy.HighsVarType.kInteger)
        for i, constraint in enumerate(lp._constraints.values()):
            if i % CHECK_EVERY == 0:
                stopping.checkpoint("loading the MILP into HiGHS")
            items = [(var.index, coef) for var, coef in constraint.items() if coef != 0]
            indices, coefficients = zip(*items) if items else ((), ())
            constraint.index = i
            lb, ub = constraint.getLb(), constraint.getUb()
            h.addRow(-inf if lb is None else lb, inf if ub is None else ub, len(indices), indices, coefficients)

    def findSolutionValues(self, lp: pulp.LpProblem) -> tuple[int, int]:  # noqa: N802 (PuLP's name)
        """PuLP's reading of the solution, except that a run interrupted (an interrupt,
        :meth:`Highs.cancelSolve`) before it had a feasible solution has none (PuLP reads
        HiGHS's kInterrupt as an integer-feasible solution whatever the values)."""
        status = super().findSolutionValues(lp)
        h = lp.solverModel
        if h.getModelStatus() == highspy.HighsModelStatus.kInterrupt and \
                h.getInfo().primal_solution_status != highspy.SolutionStatus.kSolutionStatusFeasible:
            return pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound
        return status

    def callSolver(self, lp: pulp.LpProblem) -> None:  # noqa: N802 (PuLP's name)
        h = lp.solverModel
        if self.use_warm:
            sol = highspy.HighsSolution()
            sol.col_value = [float(v.varValue or 0.0) for v in lp.variables()]
            sol.value_valid = True
            status = h.setSolution(sol)
            if status == highspy.HighsStatus.kError:
                raise SolverError(f"HiGHS rejected the warm start ({len(sol.col_value)} values for "
                                  f"{h.getNumCol()} columns): setSolution returned {status}")
        if self.deadline is not None:
            stopping.check(self.deadline, "loading the MILP into HiGHS")
            h.setOptionValue("time_limit", max(0.01, self.deadline - time.perf_counter()))
        # SIGINT / SIGTERM: HiGHS stops where it looks at its interrupt callbacks (not
        # everywhere: docs/errors.md, "Interrupts")
        h.HandleUserInterrupt = True
        with self.context.running(h), stopping.stoppable(h.cancelSolve):
            h.run()
        self.time_limit_hit = h.getModelStatus() == highspy.HighsModelStatus.kTimeLimit
        info = h.getInfo()
        self.info = {
            "mip_dual_bound": float(info.mip_dual_bound),
            "objective": float(info.objective_function_value),
            "mip_node_count": float(info.mip_node_count),
        }
