"""The split proof on Ray (baselines.exact.split_ray.solve_sequences_ray): sequences as tasks, the
cutoff shared by an actor, stale tasks stopped and queued again, failures never a silent
gap; and the exact solvers' split on Ray gives the thread path's answers. A local Ray
instance (2 CPUs) is started once for the module; without Ray these tests skip."""

from __future__ import annotations

import time
from typing import Any

import pytest

from baselines.exact.answer import SequenceAnswer
from baselines.exact.split_ray import solve_sequences_ray
from piper.core.errors import SolverError

pytestmark = pytest.mark.usefixtures("ray_instance")

SEQS = [(i,) for i in range(12)]


def plans_below(context: dict[tuple[int, ...], float], seq: tuple[int, ...], cutoff: float, stale: Any,
                time_limit: float | None) -> SequenceAnswer:
    """A sequence holds the plan ``context[seq]`` (if any): found when below the cutoff
    (the cutoff below it: value - 0.5), else refuted."""
    value = context.get(seq)
    if value is not None and value < cutoff:
        return SequenceAnswer("found", "FEASIBLE", value, f"plan of {seq}", value - 0.5)
    return SequenceAnswer("refuted", "INFEASIBLE")


def slow_until_stale(context: Any, seq: tuple[int, ...], cutoff: float, stale: Any,
                     time_limit: float | None) -> SequenceAnswer:
    """(0,) runs until a better plan makes its cutoff stale; (1,) finds a plan of 5 after
    a moment; the rest refute."""
    if seq == (1,) and cutoff > 5:
        time.sleep(0.5)
        return SequenceAnswer("found", "FEASIBLE", 5.0, "plan of (1,)", 4.5)
    if seq == (0,) and cutoff > 5:
        end = time.perf_counter() + 60
        while time.perf_counter() < end:
            if stale():
                return SequenceAnswer("stale", "STOPPED")
            time.sleep(0.05)
        raise AssertionError("never told that its cutoff went stale")
    return SequenceAnswer("refuted", "INFEASIBLE")


def stop_on_4(context: Any, seq: tuple[int, ...], cutoff: float, stale: Any, time_limit: float | None) -> SequenceAnswer:
    return SequenceAnswer("stop", "UNKNOWN") if seq == (4,) else SequenceAnswer("refuted", "INFEASIBLE")


def crash_on_5(context: Any, seq: tuple[int, ...], cutoff: float, stale: Any, time_limit: float | None) -> SequenceAnswer:
    if seq == (5,):
        raise RuntimeError("solver crashed")
    return SequenceAnswer("refuted", "INFEASIBLE")


def test_every_sequence_refuted_is_a_complete_proof() -> None:
    run = solve_sequences_ray(SEQS, plans_below, {}, 10.0)
    assert run.best is None and run.refuted == set(SEQS) and not run.stopped
    assert run.codes == {"INFEASIBLE": len(SEQS)} and run.cutoff == 10.0


def test_plans_found_lower_the_shared_cutoff_and_the_best_wins() -> None:
    context = {(3,): 8.0, (7,): 6.0, (9,): 9.5}
    seen: list[float] = []
    run = solve_sequences_ray(SEQS, plans_below, context, 10.0,
                              sequences_at=lambda c: seen.append(c) or [s for s in SEQS if s != (11,)])
    assert run.best == (6.0, "plan of (7,)") and run.cutoff == 5.5 and not run.stopped
    assert run.refuted == set(SEQS) - {(11,)} or run.refuted == set(SEQS)
    assert run.improved >= 1 and seen and min(seen) == 5.5


def test_a_stale_task_stops_and_runs_again_below_the_new_cutoff() -> None:
    run = solve_sequences_ray(SEQS[:4], slow_until_stale, None, 10.0)
    assert run.best == (5.0, "plan of (1,)") and run.refuted == set(SEQS[:4])
    assert run.codes.get("STOPPED") == 1


def test_a_stop_ends_the_run_and_a_crash_is_an_error() -> None:
    run = solve_sequences_ray(SEQS, stop_on_4, None, 10.0)
    assert run.stopped and (4,) not in run.refuted
    with pytest.raises(SolverError, match=r"sequence \(5,\) failed"):
        solve_sequences_ray(SEQS, crash_on_5, None, 10.0)


def test_the_deadline_stops_the_run() -> None:
    start = time.perf_counter()
    run = solve_sequences_ray([(0,)], slow_until_stale, None, 10.0, deadline=time.perf_counter() + 2.0)
    assert run.stopped and run.refuted == set() and time.perf_counter() - start < 15


def _split_both_ways(solver: str, problem: Any, warm: Any) -> list[Any]:
    """The solver's split proof below ``warm`` on threads and on Ray (the solver function is
    called directly: the registry's parameter check is piper.solvers.params')."""
    from piper import Options
    from piper.solvers.registry import get_solver

    func = get_solver(solver).load()
    return [func(problem, Options(threads=2, warm_start=warm, params={"split": "sequences", "split_backend": b}))
            for b in ("threads", "ray")]


@pytest.mark.slow  # 1-3 minutes each on 2 cores; the split on Ray is covered in CI by the tests above
@pytest.mark.parametrize("solver, n", [("cpsat", 12), ("milp-highs", 8)])
def test_the_split_proof_on_ray_gives_the_thread_answer(solver: str, n: int) -> None:
    """From the DP's plan (every sequence refuted: the same plan) and from a worse plan
    (plans found, the cutoff shared and lowered: the same optimum)."""
    import random

    from experiments.lib.instances import bench_instance
    from piper import Options, Status, evaluate, solve
    from tests.exact_oracle import random_plans

    problem = bench_instance(n, "branchy", 8)
    dp = solve(problem, Options(), solver="dp")
    threads, ray = _split_both_ways(solver, problem, dp.plan)
    assert threads.status == ray.status == Status.OPTIMAL and threads.plan == ray.plan == dp.plan
    done = "refuted" if solver == "cpsat" else "done"  # CP-SAT's and the MILP's name of it
    assert ray.stats["split"]["backend"] == "ray" and ray.stats["split"][done] == threads.stats["split"][done] > 0

    data, plans = random_plans(problem, random.Random(3), tries=40)
    worse = max((data.plan_from_slots(a) for a in plans), key=lambda p: evaluate(problem, p).tps)
    assert evaluate(problem, worse).tps > dp.tps * 1.05
    threads, ray = _split_both_ways(solver, problem, worse)
    assert threads.status == ray.status == Status.OPTIMAL
    assert threads.tps == ray.tps == pytest.approx(dp.tps, rel=1e-9)
    assert ray.stats["split"]["improved"] >= 1


def _sleep_then(value: int) -> int:
    time.sleep(30)
    return value


def test_a_cancelled_task_has_ended_and_a_finished_one_is_left_alone() -> None:
    """What a run leaves behind when it stops (baselines.exact.split_ray._cancel_and_settle):
    the running task killed and ended before the next run can start (a late kill had landed
    on a worker that already ran the next run's task, in CI), the finished one not cancelled."""
    import ray

    from baselines.exact.split_ray import _cancel_and_settle

    done = ray.remote(num_cpus=1, max_retries=0)(lambda: 7).remote()
    assert ray.get(done) == 7
    slow = ray.remote(num_cpus=1, max_retries=0)(_sleep_then).remote(1)
    time.sleep(1.0)  # running
    start = time.perf_counter()
    _cancel_and_settle(ray, [done, slow])
    ready, _ = ray.wait([slow], timeout=0)
    assert ready and time.perf_counter() - start < 20
    with pytest.raises(ray.exceptions.RayError):
        ray.get(slow)
    assert ray.get(done) == 7
