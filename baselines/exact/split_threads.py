"""The split over option sequences on threads of this process (the default
``params["split_backend"]``): :func:`solve_sequences` runs one batch of subproblems,
:func:`split_on_threads` the rounds of a split, each at a lower cutoff, until a round finds
no plan (docs/formulations.md §4.4). The MILP and CP-SAT give their subproblems as
:class:`SplitRound` objects (:mod:`baselines.milp.split`, :mod:`baselines.cpsat.split`).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from baselines.exact.answer import SequenceAnswer, SplitRun

__all__ = ["SolvedSequences", "solve_sequences", "SplitRound", "split_on_threads"]

#: (worker, sequence) -> its subproblem's answer
SolveOne = Callable[[int, tuple[int, ...]], SequenceAnswer]


@dataclass(frozen=True)
class SolvedSequences:
    """The end of :func:`solve_sequences`."""

    #: the "found" answers, in the order they came
    found: list[SequenceAnswer]
    #: True when a subproblem answered "stop"
    stopped: bool


def solve_sequences(
    seqs: list[tuple[int, ...]],
    solve_one: SolveOne,
    record: Callable[[tuple[int, ...], SequenceAnswer], None],
    workers: int,
    progress: Callable[[], str] | None = None,
) -> SolvedSequences:
    """Run ``solve_one(worker, seq)`` over ``seqs`` (in order) on ``workers`` threads.

    Each answer's outcome is "refuted" (no plan below the cutoff in this sequence), "found"
    (a plan below it) or "stop" (time limit, or a plan not proven best in its sequence).
    ``record(seq, answer)`` is called under one lock for every answer. After a "found" or
    "stop" no new sequence is started (the ones running finish). An exception in a worker
    stops the others and is raised here, so a sequence is never silently left out.
    ``progress()``, if given, is a line printed on stderr at most every 5 s.
    """
    queue = list(reversed(seqs))  # pop() takes them in order
    lock = threading.Lock()
    halt = threading.Event()
    found: list[SequenceAnswer] = []
    stopped = False
    errors: list[BaseException] = []
    start = last_line = time.perf_counter()
    refuted = 0

    def work(worker: int) -> None:
        nonlocal stopped, last_line, refuted
        try:
            while not halt.is_set():
                with lock:
                    if not queue:
                        return
                    seq = queue.pop()
                answer = solve_one(worker, seq)
                with lock:
                    record(seq, answer)
                    if answer.outcome == "found":
                        found.append(answer)
                        halt.set()
                    elif answer.outcome == "stop":
                        stopped = True
                        halt.set()
                    elif answer.outcome == "refuted":
                        refuted += 1
                    else:
                        raise ValueError(f"unknown outcome {answer.outcome!r}")
                    if progress is not None and time.perf_counter() - last_line > 5:
                        last_line = time.perf_counter()
                        rate = refuted / max(last_line - start, 1e-9)
                        print(f"{progress()}; {rate:.1f} sequences refuted/s", file=sys.stderr, flush=True)
        except BaseException as exc:  # raised again in the caller's thread
            with lock:
                errors.append(exc)
            halt.set()

    threads = [threading.Thread(target=work, args=(w,), daemon=True) for w in range(max(1, workers))]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    if errors:
        raise errors[0]
    return SolvedSequences(found, stopped)


@dataclass(frozen=True)
class SplitRound:
    """The split's subproblems at one cutoff (in the model's units), as a model builds them."""

    cutoff: float
    #: the sequences that pass the bounds at the cutoff (:func:`baselines.exact.sequences.checked_sequences`)
    sequences: list[tuple[int, ...]]
    #: (worker, sequence) -> its answer below the cutoff
    solve: SolveOne
    #: the round's model (the stats report its size)
    model: Any


def split_on_threads(first: SplitRound, open_round: Callable[[float], SplitRound], workers: int, *,
                     retry_found: bool, label: str | None, since: float) -> SplitRun:
    """The split below ``first.cutoff`` on ``workers`` threads, round by round.

    A round solves its sequences that are not settled yet (:func:`solve_sequences`). When
    plans were found, the best (least value) becomes the incumbent if it beats the last
    one, and the next round is ``open_round`` at the cutoff below it; the run ends with the
    first round that finds nothing (every sequence refuted: the proof is complete) or
    stops (time limit). ``retry_found``: a sequence that gave a plan is searched again in
    the next round (CP-SAT's subproblem stops at its first plan below the cutoff);
    otherwise it is settled (the MILP's subproblem is its sequence's best plan). A "stop"
    with a plan makes that plan the run's ``best`` (unproven). ``label``: the progress
    line's name (None: no line; its count is the settled sequences, "done" or, with
    ``retry_found``, "refuted"), ``since``: the origin of its clock (``time.perf_counter()``).
    """
    run = SplitRun(None, set(), False, {}, 0, first.cutoff, last_round=first)
    best_value: float | None = None
    verb = "refuted" if retry_found else "done"

    def record(seq: tuple[int, ...], answer: SequenceAnswer) -> None:
        if answer.code is not None:
            run.codes[answer.code] = run.codes.get(answer.code, 0) + 1
        if answer.outcome == "refuted":
            run.refuted.add(seq)
            run.settled.add(seq)
        elif answer.outcome == "found":
            if not retry_found:
                run.settled.add(seq)  # nothing below the sequence's best plan in it
        elif answer.plan is not None:  # "stop": a plan here is better than the cutoff but unproven
            run.best = (answer.value, answer.plan)  # type: ignore[assignment]

    def line() -> str:
        return (f"{label}: {len(run.settled)} sequences {verb} ({len(run.last_round.sequences)} at the current "
                f"cutoff), {time.perf_counter() - since:.1f} s")

    while True:
        current = run.last_round
        batch = solve_sequences([s for s in current.sequences if s not in run.settled], current.solve, record,
                                workers, line if label is not None else None)
        if batch.found:
            best = min(batch.found, key=lambda a: a.value)  # type: ignore[arg-type,return-value]
            if best_value is None or best.value < best_value:  # type: ignore[operator]
                best_value = best.value
                run.best = (best.value, best.plan)  # type: ignore[assignment]
                run.cutoff = best.cutoff  # type: ignore[assignment]
            run.improved += len(batch.found)
        if batch.stopped or not batch.found:
            run.stopped = batch.stopped
            return run
        run.last_round = open_round(run.cutoff)
