"""The split over option sequences on Ray (``params["split_backend"] = "ray"``): each
sequence a Ray task on a cluster (``params["ray_address"]`` / ``RAY_ADDRESS``, else a local
Ray instance), the cutoff shared by a small actor (:func:`solve_sequences_ray`).
"""

from __future__ import annotations

import sys
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from baselines.exact.answer import SequenceAnswer, SplitRun
from piper.core.errors import SolverError

__all__ = ["solve_sequences_ray"]


class _Incumbent:
    """A Ray actor holding the shared cutoff: tasks read it when they start, offer the
    cutoff below each plan they find, and poll it to stop when theirs is stale."""

    def __init__(self, cutoff: float) -> None:
        self.cutoff = cutoff

    def get(self) -> float:
        return self.cutoff

    def offer(self, cutoff: float) -> float:
        self.cutoff = min(self.cutoff, cutoff)
        return self.cutoff


def _ray_sequence_task(subproblem: Callable[..., SequenceAnswer], context: Any, seq: tuple[int, ...],
                       incumbent: Any, deadline: float | None) -> tuple[SequenceAnswer, float]:
    """One sequence on a Ray worker, below the shared cutoff at its start; ``stale()`` (for
    the subproblem to poll) is True once a better plan was found anywhere."""
    import ray

    cutoff = ray.get(incumbent.get.remote())
    remaining = None if deadline is None else deadline - time.time()
    if remaining is not None and remaining <= 0.01:
        return SequenceAnswer("stop", "not started"), cutoff
    last = [0.0, False]

    def stale() -> bool:
        now = time.perf_counter()
        if not last[1] and now - last[0] >= 0.5:
            last[0] = now
            last[1] = ray.get(incumbent.get.remote()) < cutoff
        return bool(last[1])

    answer = subproblem(context, seq, cutoff, stale, remaining)
    if answer.outcome == "found" and answer.cutoff is not None:
        ray.get(incumbent.offer.remote(answer.cutoff))  # every task started from now on prunes with it
    return answer, cutoff


def solve_sequences_ray(
    seqs: list[tuple[int, ...]],
    subproblem: Callable[..., SequenceAnswer],
    context: Any,
    cutoff: float,
    *,
    sequences_at: Callable[[float], list[tuple[int, ...]]] | None = None,
    deadline: float | None = None,
    address: str | None = None,
    progress: str | None = None,
) -> SplitRun:
    """The proof below ``cutoff`` over ``seqs``, each sequence a Ray task (on the cluster
    at ``address`` / ``RAY_ADDRESS``, else a local Ray instance).

    ``subproblem(context, seq, cutoff, stale, time_limit) -> SequenceAnswer`` is a
    module-level (picklable) function; ``context`` goes to the object store once. The
    cutoff lives in a small actor: a task reads it when it starts, so that every worker
    prunes with the best plan found anywhere, and a task that finds a plan lowers it at
    once; a running task whose cutoff has gone stale may stop (``stale()``) and is
    queued again. A sequence that gave a plan is searched again below the new cutoff, and
    ``sequences_at(cutoff)`` (the sequences that pass the bounds there) drops the queued
    ones the bounds now rule out. At most as many tasks as the cluster has CPUs run at
    once, in the order of ``seqs``. The run ends when every sequence is refuted (the proof
    is complete), or at ``deadline`` (``time.perf_counter()`` seconds) or a "stop" answer:
    the tasks still running are cancelled (their workers killed). A task that fails raises
    :class:`SolverError`: a sequence is never silently left out. ``progress``: a label for
    a line on stderr every 5 s (sequences refuted per second).
    """
    from piper.solvers.execution import RAY_MISSING, init_ray

    try:
        ray = init_ray(address)
    except ValueError:  # piper.cli.common.UsageError: Ray is not installed
        raise SolverError(f"params['split_backend'] = 'ray': {RAY_MISSING}") from None
    task = ray.remote(num_cpus=1, max_retries=0)(_ray_sequence_task)
    incumbent = ray.remote(num_cpus=0)(_Incumbent).remote(cutoff)
    context_ref = ray.put(context)
    wall_deadline = None if deadline is None else time.time() + (deadline - time.perf_counter())
    window = max(1, int(ray.cluster_resources().get("CPU", 1)))
    queue = deque(seqs)
    running: dict[Any, tuple[int, ...]] = {}
    run = SplitRun(None, set(), False, {}, 0, cutoff)
    total = len(seqs)
    start = last_line = time.perf_counter()
    try:
        while queue or running:
            if deadline is not None and time.perf_counter() >= deadline:
                run.stopped = True
                break
            while queue and len(running) < window:
                seq = queue.popleft()
                running[task.remote(subproblem, context_ref, seq, incumbent, wall_deadline)] = seq
            wait = 1.0 if deadline is None else max(0.01, min(1.0, deadline - time.perf_counter()))
            ready, _ = ray.wait(list(running), num_returns=1, timeout=wait)
            for ref in ready:
                seq = running.pop(ref)
                try:
                    answer, used = ray.get(ref)
                except ray.exceptions.RayError as exc:
                    why = " ".join(str(exc).split())[:300]
                    raise SolverError(f"split on Ray: the subproblem of sequence {seq} failed: {why}") from None
                run.codes[answer.code] = run.codes.get(answer.code, 0) + 1
                if answer.outcome == "refuted":
                    run.refuted.add(seq)
                    run.settled.add(seq)
                elif answer.outcome in ("found", "stale"):
                    queue.append(seq)
                    if answer.outcome == "found":
                        run.improved += 1
                        if run.best is None or answer.value < run.best[0]:  # type: ignore[operator]
                            run.best = (answer.value, answer.plan)  # type: ignore[assignment]
                        if answer.cutoff is not None and answer.cutoff < run.cutoff:
                            run.cutoff = answer.cutoff
                            if sequences_at is not None:
                                keep = set(sequences_at(run.cutoff))
                                before = len(queue)
                                queue = deque(s for s in queue if s in keep)
                                run.pruned += before - len(queue)
                elif answer.outcome == "stop":  # a plan here is better than the cutoff but unproven
                    run.stopped = True
                    if answer.plan is not None and (run.best is None or answer.value < run.best[0]):  # type: ignore[operator]
                        run.best = (answer.value, answer.plan)  # type: ignore[assignment]
                else:
                    raise ValueError(f"unknown outcome {answer.outcome!r}")
            if run.stopped:
                break
            if progress is not None and time.perf_counter() - last_line > 5:
                last_line = time.perf_counter()
                rate = len(run.refuted) / max(last_line - start, 1e-9)
                print(f"{progress} (ray): {len(run.refuted)} of {total} sequences refuted ({rate:.1f}/s), "
                      f"{len(running)} running, {len(queue)} queued, {last_line - start:.0f} s",
                      file=sys.stderr, flush=True)
    finally:
        _cancel_and_settle(ray, list(running))
        ray.kill(incumbent)
    return run


def _cancel_and_settle(ray: Any, refs: list[Any], settle_s: float = 30.0) -> None:
    """Force-cancel the tasks of ``refs`` that are still running and wait (at most
    ``settle_s`` seconds) until each has ended. A task that already finished is not
    cancelled: a late kill could land on its worker after Ray gave that worker a task of
    the next run ("the worker died unexpectedly", seen in CI when one run followed a
    stopped one)."""
    if not refs:
        return
    _, pending = ray.wait(refs, num_returns=len(refs), timeout=0)
    for ref in pending:
        ray.cancel(ref, force=True)
    if pending:
        ray.wait(pending, num_returns=len(pending), timeout=settle_s)
