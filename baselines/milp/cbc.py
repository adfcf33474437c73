"""CBC for the MILP (:mod:`baselines.milp.solver`): the model's MPS file, the cbc binary run as a
subprocess with a hard deadline, and the solution read back with PuLP's public functions.

CBC does not look at its time limit while it solves the root LP (coin-or/Cbc#514, #506),
and its dual simplex can cycle there for good after presolve (seen on ResNet-50 at
k = 8: a 30 s limit ran 138 s, and a split subproblem ran for minutes), so
:func:`run_cbc` gives CBC its own ``-sec`` limit, computed after the files are written
(seconds on large models), and stops a CBC still running :data:`CBC_OVERRUN_S` after it
(docs/formulations.md §2.4, §6.3).

Only public PuLP is used: :meth:`pulp.LpProblem.writeMPS` writes the model,
``COIN_CMD.writesol`` the MIP start, ``COIN_CMD.readsol_MPS`` reads CBC's solution file
(with PuLP's mapping of CBC's "Stopped on time - objective value" to a feasible
incumbent) and :meth:`pulp.LpProblem.assignVarsVals` / ``assignStatus`` store it in the
model. The command line is CBC's own interface.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pulp

from piper.core import stopping
from piper.core.errors import SolverError

__all__ = ["CBC_OVERRUN_S", "CbcSettings", "CbcRun", "cbc_solver", "run_cbc", "cbc_log_numbers", "quiet_pulp"]

#: seconds a CBC run may go on past its time limit before :func:`run_cbc` stops it (part of
#: the margin of docs/errors.md, "Time limits")
CBC_OVERRUN_S = 2.0
#: seconds CBC has to stop and write its best plan after SIGINT (an interrupt) before it is killed
CBC_STOP_S = 1.0


@dataclass(frozen=True)
class CbcSettings:
    """What one CBC run is given (docs/formulations.md §2.4)."""

    #: CBC's ``-threads``
    threads: int = 1
    #: CBC's ``-ratio`` (relative gap) and ``-allow`` (absolute gap, model units)
    gap_rel: float = 0.0
    gap_abs: float = 1e-9
    #: further CBC options without the dash, in order, e.g. ``"randomSeed 1"``, ``"cuts off"``
    options: tuple[str, ...] = ()
    #: pass the variables' initial values as a MIP start (``-mips``)
    warm_start: bool = False
    #: copy CBC's log to ``sys.stdout`` after the run (it always goes to the log file)
    msg: bool = False
    #: seconds past CBC's ``-sec`` limit before the run is stopped
    overrun_s: float = CBC_OVERRUN_S
    #: the cbc binary; None: PuLP's (:func:`cbc_solver`)
    path: str | None = None


@dataclass
class CbcRun:
    """The outcome of :func:`run_cbc` (the values are in the model's variables)."""

    #: PuLP's status and solution status, also set on the problem
    status: int
    sol_status: int
    #: CBC was stopped :attr:`CbcSettings.overrun_s` after its time limit
    overran: bool
    #: the ``-sec`` limit given to CBC (None: no limit)
    time_limit: float | None
    #: CBC's log
    log: str
    argv: list[str] = field(default_factory=list)


@contextmanager
def quiet_pulp() -> Iterator[None]:
    """PuLP 3.3's deprecation warnings off: PULP_CBC_CMD (to go in PuLP 4) and its own v3
    API (which the MILP uses so that PuLP 2.8+ works)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        yield


def cbc_solver(path: str | None = None) -> pulp.COIN_CMD:
    """PuLP's CBC command object, for its public solution-file functions and its binary:
    ``path`` if given, else the CBC that PuLP bundles, else a ``cbc`` on the PATH. A
    SolverError names what was looked for when no binary can be run."""
    with quiet_pulp():
        if path is not None:
            solver = pulp.COIN_CMD(path=path, msg=False)
        else:
            solver = pulp.PULP_CBC_CMD(msg=False)  # deprecated in PuLP 3.3, still the bundled binary
            if not solver.available():
                solver = pulp.COIN_CMD(msg=False)
    if not solver.available():
        raise SolverError(f"cannot run CBC at {solver.path!r}: install PuLP with its CBC (pip install pulp) "
                          "or put a cbc binary on the PATH")
    return solver


def run_cbc(prob: pulp.LpProblem, settings: CbcSettings, deadline: float | None, workdir: str | Path) -> CbcRun:
    """Solve ``prob`` (a MIP, minimised) with CBC, its files in ``workdir``; ``deadline``
    (``time.perf_counter()`` time) sets CBC's ``-sec`` limit once the files are written.
    A CBC still running :attr:`CbcSettings.overrun_s` after that limit is killed: the
    problem reads as not solved (PuLP's NotSolved / NoSolutionFound) and
    :attr:`CbcRun.overran` is set. A CBC that fails (non-zero exit, no solution file) is
    a SolverError with its exit status and the end of its log.

    The deadline (or SIGINT / SIGTERM, :mod:`piper.core.stopping`) passing before CBC
    starts raises :class:`piper.core.stopping.TimeLimitReached` (resp.
    :class:`~piper.core.stopping.Interrupted`). While it runs, an interrupt sends CBC
    SIGINT (it stops and writes its best plan) and kills it :data:`CBC_STOP_S` later."""
    if prob.sense != pulp.LpMinimize:
        raise SolverError("run_cbc solves minimisation problems only")
    solver = cbc_solver(settings.path)
    work = Path(workdir)
    mps, sol, mst, log_path = (work / f"{prob.name}.{ext}" for ext in ("mps", "sol", "mst", "log"))
    stopping.check(deadline, "writing the MILP for CBC")
    with quiet_pulp():
        vs, var_names, con_names, _ = prob.writeMPS(str(mps), rename=1)
        if settings.warm_start:
            solver.writesol(str(mst), prob, vs, var_names, con_names)
    stopping.check(deadline, "writing the MILP for CBC")
    argv = [solver.path, str(mps)]
    if settings.warm_start:
        argv += ["-mips", str(mst)]
    left = stopping.remaining(deadline)
    limit = None if left is None else round(max(0.01, left), 2)
    if limit is not None:
        argv += ["-sec", str(limit)]
    options = list(settings.options) + [f"ratio {settings.gap_rel}", f"allow {settings.gap_abs}",
                                        f"threads {settings.threads}", "timeMode elapsed"]
    for option in options:
        argv += ("-" + option).split()
    argv += ["-solve", "-printingOptions", "all", "-solution", str(sol)]
    overran = False
    with open(log_path, "w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        stop_at: list[float] = []

        def cancel() -> None:  # an interrupt: CBC stops on SIGINT and writes its best plan
            if not stop_at:
                stop_at.append(time.perf_counter() + CBC_STOP_S)
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)

        give_up = None if limit is None else time.perf_counter() + limit + settings.overrun_s
        try:
            with stopping.stoppable(cancel, abandon=proc.kill):
                while True:
                    try:
                        code = proc.wait(timeout=0.1)
                        break
                    except subprocess.TimeoutExpired:
                        now = time.perf_counter()
                        if give_up is not None and now > give_up:
                            overran, code = True, None
                            break
                        if stop_at and now > stop_at[0]:
                            code = None
                            break
        finally:
            if proc.poll() is None:  # the watchdog, an interrupt, or an exception while waiting
                proc.kill()
                proc.wait()
    text = log_path.read_text(errors="replace")
    if settings.msg:
        sys.stdout.write(text)
        sys.stdout.flush()
    if overran:
        prob.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
        return CbcRun(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound, True, limit, text, argv)
    if stop_at and (code != 0 or not sol.exists()):  # interrupted before CBC wrote a plan
        prob.assignStatus(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound)
        return CbcRun(pulp.LpStatusNotSolved, pulp.LpSolutionNoSolutionFound, False, limit, text, argv)
    if code != 0 or not sol.exists():
        tail = " | ".join(text.strip().splitlines()[-5:])
        raise SolverError(f"CBC failed (exit status {code}, solution file {'written' if sol.exists() else 'missing'}):"
                          f" {' '.join(argv)}; log: {tail or '(empty)'}")
    status, values, _dj, _pi, _slack, sol_status = solver.readsol_MPS(str(sol), prob, vs, var_names, con_names)
    prob.assignVarsVals(values)
    prob.assignStatus(status, sol_status)
    return CbcRun(status, sol_status, False, limit, text, argv)


_FLOAT = r"([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)"


def cbc_log_numbers(text: str) -> dict[str, float]:
    """The numbers of a CBC log that the MILP reads: the last "Objective value", "Lower
    bound" and "Enumerated nodes", ``proven`` (1.0) for "Result - Optimal solution
    found", ``completed_objective`` for "Search completed - best objective" (branch and
    bound ran to the end) and ``infeasible`` (1.0) for a proven-infeasible problem."""
    out: dict[str, float] = {}
    for key, pat in (
        ("objective", r"Objective value:\s*" + _FLOAT),
        ("bound", r"Lower bound:\s*" + _FLOAT),
        ("nodes", r"Enumerated nodes:\s*([0-9]+)"),
        ("completed_objective", r"Search completed - best objective " + _FLOAT),
    ):
        m = re.findall(pat, text)
        if m:
            out[key] = float(m[-1])
    if "Result - Optimal solution found" in text:
        out["proven"] = 1.0
    if "Result - Problem proven infeasible" in text or "Problem is infeasible" in text:
        out["infeasible"] = 1.0
    return out
