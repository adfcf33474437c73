"""SIGINT and SIGTERM stop every solver family within 2 s (issue 28; docs/errors.md,
"Interrupts"): the DP, the brute force, the MILP with CBC (a subprocess) and with HiGHS, and
CP-SAT, each run as ``python -m piper solve`` and signalled once its search has begun. The
command ends with exit status 130 (SIGINT) or 143 (SIGTERM) and one line on stderr, and
writes the best plan found so far to ``--out`` when it says so. Also: ``run_main`` and
``experiments.compare`` in this process, and the stop requests of :mod:`piper.core.stopping`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper.core import stopping
from piper.core.options import Options
from piper.core.problem import Problem
from piper.core.result import Result
from piper.io.workload import dump_problem
from tests.big_workloads import chain_workload

ROOT = Path(__file__).resolve().parents[2]
RESNET = str(ROOT / "experiments" / "workloads" / "resnet.json")
#: the promise of docs/errors.md: every solver stops within this many seconds of the signal
PROMISE_S = 2.0
#: what a loaded test machine adds (2 cores shared by several jobs: a process that stops in
#: 1.5 s alone took up to 3 s); a run longer than PROMISE_S + MARGIN_S fails
MARGIN_S = 4.0


def _children(pid: int) -> list[int]:
    try:
        return [int(x) for x in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


class Solve:
    """``python -m piper solve ARGS`` in a subprocess, its stderr read line by line."""

    def __init__(self, args: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "piper", "solve", *args], cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.lines: list[str] = []
        self.out = ""
        self._err = threading.Thread(target=self._read_err, daemon=True)
        self._out = threading.Thread(target=self._read_out, daemon=True)
        self._err.start()
        self._out.start()

    def _read_err(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.lines.append(line.rstrip("\n"))

    def _read_out(self) -> None:
        assert self.proc.stdout is not None
        self.out = self.proc.stdout.read()

    def wait_until(self, ready: Callable[[Solve], bool], timeout: float = 240.0) -> None:
        end = time.monotonic() + timeout
        while not ready(self):
            if self.proc.poll() is not None:
                pytest.fail(f"the solve ended before it was ready: {self.proc.returncode}; {self.lines[-5:]}")
            if time.monotonic() > end:
                self.proc.kill()
                pytest.fail(f"the solve was not ready after {timeout} s; stderr: {self.lines[-5:]}")
            time.sleep(0.05)

    def signal_and_wait(self, signum: int) -> float:
        """Send ``signum``; seconds until the process ended."""
        t0 = time.monotonic()
        self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=PROMISE_S + MARGIN_S + 30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        spent = time.monotonic() - t0
        self._err.join(5)
        self._out.join(5)
        return spent


def _line(text: str) -> Callable[[Solve], bool]:
    return lambda s: any(text in line for line in s.lines)


def _has_child(s: Solve) -> bool:
    return bool(_children(s.proc.pid))


def _cases(tmp: Path) -> dict[str, tuple[list[str], Callable[[Solve], bool]]]:
    """Per solver family: the command's arguments and when its search has begun."""
    chain = tmp / "chain1000.json"
    chain.write_text(json.dumps(chain_workload(1000)))
    brute = tmp / "brute.json"
    dump_problem(random_problem(2, n=8, shape="branchy", devices=32, microbatches=32, degrees=(1, 2, 4),
                                max_tmpcs=3), brute)
    resnet = [RESNET, "-k", "8", "-M", "16GiB", "-N", "7680", "--log"]
    return {
        "dp": ([str(chain), "--solver", "dp"], _line("[dp] ")),  # after ideal enumeration
        "brute": ([str(brute), "--solver", "brute"], _line("[brute] searching")),
        "milp": ([*resnet, "--solver", "milp"], _has_child),  # CBC runs
        "milp-highs": ([*resnet, "--solver", "milp-highs"], _line("Presolving model")),
        "cpsat": ([*resnet, "--solver", "cpsat"], _line("Starting presolve")),
    }


#: (family, signal): brute force under SIGINT (Python code: the handler raises) and CP-SAT under
#: SIGTERM (a native search stopped through its section) run in CI, about 2 s and 6 s here;
#: the other eight, 6-9 s each, are slow
_SIGNAL_CASES = [
    pytest.param(family, signum, id=f"{family}-{signal.Signals(signum).name}",
                 marks=() if (family, signum) in {("brute", signal.SIGINT), ("cpsat", signal.SIGTERM)}
                 else (pytest.mark.slow,))
    for family in ("dp", "brute", "milp", "milp-highs", "cpsat")
    for signum in (signal.SIGINT, signal.SIGTERM)
]


@pytest.mark.parametrize(("family", "signum"), _SIGNAL_CASES)
def test_a_signal_stops_the_solver_within_2_s(family: str, signum: int, tmp_path: Path) -> None:
    args, ready = _cases(tmp_path)[family]
    out = tmp_path / "plan.json"
    solve = Solve([*args, "--time-limit", "600", "--out", str(out)])
    solve.wait_until(ready)
    time.sleep(0.5)  # well inside the search
    spent = solve.signal_and_wait(signum)
    name = signal.Signals(signum).name
    assert solve.proc.returncode == 128 + signum, (solve.proc.returncode, solve.lines[-5:])
    assert spent <= PROMISE_S + MARGIN_S, f"{family} ended {spent:.1f} s after {name}"
    said = [line for line in solve.lines if line.startswith("piper: interrupted")]
    assert len(said) == 1 and said[0] == solve.lines[-1], solve.lines[-5:]
    assert said[0].startswith(f"piper: interrupted ({name})")
    if "best plan so far" in said[0]:
        doc = json.loads(out.read_text())
        assert doc["stages"] and "madeFor" in doc
    else:
        assert not out.exists()
    if family == "brute":  # its depth-first search holds a plan within a second
        assert "best plan so far" in said[0] and str(out) in said[0], said[0]
    assert solve.out == ""  # nothing on stdout (no --json)


# --------------------------------------------------------------------------- in this process


def test_run_main_turns_sigterm_into_exit_143_and_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    from piper.cli.common import run_main

    previous = signal.getsignal(signal.SIGTERM)

    def command(argv: object) -> int:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)  # the handler raises here
        return 0

    t0 = time.monotonic()
    assert run_main(command, [], prog="demo") == 143
    assert time.monotonic() - t0 < 10
    assert capsys.readouterr().err == "demo: interrupted (SIGTERM)\n"
    assert signal.getsignal(signal.SIGTERM) is previous and stopping.requested() is None
    assert not stopping.installed()


def test_run_main_keeps_plain_ctrl_c_as_exit_130(capsys: pytest.CaptureFixture[str]) -> None:
    from piper.cli.common import run_main

    def command(argv: object) -> int:
        raise KeyboardInterrupt

    assert run_main(command, [], prog="demo") == 130
    assert capsys.readouterr().err == "demo: interrupted (SIGINT)\n"


def solve_sigterm_on_second(problem: Problem, options: Options) -> Result:
    """Solves the first instance; SIGTERM arrives during the second."""
    from piper import solve

    if problem.extra.get("name") == "second":
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    return solve(problem, options, solver="brute")


def test_compare_keeps_its_rows_on_sigterm_and_exits_143(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from experiments.compare.cli import cli
    from piper.solvers.registry import SolverInfo, register, unregister

    register(SolverInfo("fake-sigterm", "tests.solvers.test_interrupts:solve_sigterm_on_second", True, "test fake"))
    try:
        paths = []
        for name in ("first", "second"):
            raw = chain_workload(3, devices=2)
            raw["name"] = name
            path = tmp_path / f"{name}.json"
            path.write_text(json.dumps(raw))
            paths.append(str(path))
        out = tmp_path / "out"
        code = cli([*paths, "--solvers", "fake-sigterm", "--hard-timeout", "0", "--out", str(out), "--no-plots"])
    finally:
        unregister("fake-sigterm")
    err = capsys.readouterr().err
    assert code == 143 and "interrupted: 1/2 instances kept" in err
    doc = json.loads((out / "report.json").read_text())
    assert doc["meta"]["interrupted"] is True
    assert [row["instance"] for row in doc["rows"]] == ["first"]


def test_a_stop_reaches_running_sections_and_ones_that_start_later() -> None:
    stopping.reset()
    calls: list[str] = []
    try:
        with stopping.stoppable(lambda: calls.append("running")):
            assert stopping.request_stop(signal.SIGTERM) is True  # cooperative: nothing raised
        assert stopping.requested() == signal.SIGTERM and stopping.expired(None)
        with stopping.stoppable(lambda: calls.append("later")):
            pass
        assert calls == ["running", "later"]
        with pytest.raises(stopping.Interrupted) as info:
            stopping.check(None)
        assert info.value.exit_code == 143 and isinstance(info.value, KeyboardInterrupt)
    finally:
        stopping.reset()
    assert not stopping.expired(None) and stopping.remaining(None) is None


def test_deadlines_nest_and_checkpoints_read_the_innermost() -> None:
    now = time.perf_counter()
    assert stopping.current_deadline() is None
    with stopping.deadline_scope(now + 100):
        with stopping.deadline_scope(now - 1):
            with pytest.raises(stopping.TimeLimitReached, match="while building rows"):
                stopping.checkpoint("building rows")
        with stopping.deadline_scope(None):
            assert stopping.current_deadline() == now + 100
        stopping.checkpoint("in time")
    assert stopping.current_deadline() is None


@pytest.mark.parametrize(("solver", "warm"), [("milp-highs", False), ("cpsat", True)])
def test_a_signal_during_a_model_build_stops_it_at_a_checkpoint(solver: str, warm: bool) -> None:
    """The exact models' driver is polled: a signal raised into a pybind11 call while building
    or loading the model came out as a TypeError and a traceback (HiGHS's addRow); now the next
    checkpoint raises Interrupted carrying the part's result: the warm start, when there is
    one, as the best plan so far ("feasible")."""
    from piper.core.plan import Plan, Stage
    from piper.io.workload import problem_from_dict
    from piper.solvers.registry import get_solver

    info = get_solver(solver)
    info.load()
    problem = problem_from_dict(chain_workload(400))  # 2-4 s to build here
    ids = tuple(node.id for node in problem.nodes)
    one_stage = Plan((Stage(ids, 1, 1, {v: "vanilla" for v in ids}),))
    timer = threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM))
    with stopping.handling("demo"):
        timer.start()
        t0 = time.monotonic()
        with pytest.raises(stopping.Interrupted) as caught:
            info(problem, Options(threads=1, progress=False, warm_start=one_stage if warm else None))
        spent = time.monotonic() - t0
    timer.join()
    result = caught.value.result
    assert caught.value.signum == signal.SIGTERM and isinstance(result, Result)
    assert "interrupted (SIGTERM)" in result.message
    if warm:
        assert result.status.value == "feasible" and result.plan == one_stage
    else:
        assert result.status.value == "unknown" and result.plan is None
    assert spent <= 0.5 + PROMISE_S + MARGIN_S, spent


def test_exit_promptly_passes_other_codes_through() -> None:
    """After 130 / 143 it ends the process (os._exit, seen in the subprocess tests above);
    every other exit status is returned for sys.exit."""
    assert [stopping.exit_promptly(code) for code in (0, 1, 2, 131)] == [0, 1, 2, 131]
