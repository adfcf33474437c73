"""Splitting a proof search over *option sequences* (``params["split"] = "sequences"``).

Both exact models look for a plan with T <= cutoff below a warm start. A plan in the
models' form (used slots 1..L first, none empty) has an option sequence
σ = (o_1, ..., o_L): slot i's (t, d). Fixing σ fixes every D_i = Σ_{j>=i} d_j and so
every y_i = ⌈D_i/d_i⌉: the memory rows lose their dependence on y, the slot's
devices become constants, and the subproblem is far easier than the disjunction over
all sequences that the whole model has to refute (measured on ResNet-50 k=8: 126
sequences refuted by CP-SAT in 21 s, where the whole model had no proof after 300 s).

Every sequence with Σ t_i d_i <= k, Σ d_i <= S and L <= the number of slots is a
subproblem (version 2: k is the model's part's device budget, min(k, G) for plans inside
a node, and a part of plans spanning nodes also needs Σ t_i d_i >= G + 1; with uniform
plans only constant sequences o_1 = ... = o_L are enumerated), except those that two bounds rule out, each implied by the model's own
rows at the cutoff C (in the model's units, so the pruning is exactly as strong as the
model and never removes a plan the model accepts):

* a layer needs a slot i with a choice at σ's option o_i whose κ <= C (a stage is at
  least as slow as each of its layers) and whose memory a·y_i + b fits in M;
* Σ_v min over such (slot, choice) of t d κ <= C · Σ_i t_i d_i (each stage's time is
  <= C, so its devices times C cover its layers' device-time).

The number of sequences grows like the compositions of k (287 for the 16-layer
branchy instance at k = 8, about 270,000 at k = 16), so the split is for small k;
``max_sequences`` refuses more.

The subproblems run on threads of this process (:func:`solve_sequences`, default), or
with ``params["split_backend"] = "ray"`` as Ray tasks on a cluster (``params["ray_address"]``
/ ``RAY_ADDRESS``, else a local Ray instance), the cutoff shared by a small actor
(:func:`solve_sequences_ray`).
"""

from __future__ import annotations

import math
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from baselines.exact.model_data import Choice, ModelData
from piper.core.errors import SolverError

__all__ = ["split_mode", "option_sequences", "checked_sequences", "sequence_y", "solve_sequences",
           "MAX_SEQUENCES", "SPLIT_MODES", "SPLIT_BACKENDS", "split_backend", "SequenceAnswer", "SplitRun",
           "solve_sequences_ray"]

#: default cap on the number of subproblems (``params["max_sequences"]``)
MAX_SEQUENCES = 20_000
SPLIT_MODES = ("none", "sequences")


def _choice(params: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    """``params[key]`` checked against ``allowed`` (default: its first entry)."""
    value = str(params.get(key, allowed[0]))
    if value not in allowed:
        raise SolverError(f"params[{key!r}] must be one of {', '.join(allowed)}, not {value!r}")
    return value


def split_mode(params: Mapping[str, Any]) -> str:
    """``params["split"]`` checked: one of :data:`SPLIT_MODES` (default "none")."""
    return _choice(params, "split", SPLIT_MODES)


def checked_sequences(
    data: ModelData, cutoff: float, kappa: Callable[[Choice], float], params: Mapping[str, Any]
) -> list[tuple[int, ...]]:
    """:func:`option_sequences` with the cap ``params["max_sequences"]`` (default
    :data:`MAX_SEQUENCES`); more sequences than that is a :class:`SolverError`."""
    limit = int(params.get("max_sequences", MAX_SEQUENCES))
    seqs = option_sequences(data, cutoff, kappa, limit=limit)
    if seqs is None:
        raise SolverError(
            f"params['split'] = 'sequences': more than {limit} option sequences on this instance "
            f"(k = {data.problem.devices}); raise params['max_sequences'] or use split = 'none'"
        )
    return seqs


def option_sequences(
    data: ModelData, cutoff: float, kappa: Callable[[Choice], float], *, limit: int = MAX_SEQUENCES
) -> list[tuple[int, ...]] | None:
    """The option sequences (indices into ``data.opts``, slot 1 first) that pass both
    bounds at ``cutoff``, with ``kappa(choice)`` the node term in the same units; None
    when there are more than ``limit``. Shorter sequences come first."""
    # k: the part's device budget; a "spanning" part wants Σ t d >= min_devices, and a
    # uniform model only constant sequences (baselines.exact.model_data)
    opts, k, s_max = data.opts, data.devices, data.s_max
    # v -> (option, y) -> its cheapest device-time t·d·κ among the choices with κ <= cutoff
    # whose memory a·y + b fits (within 1e-9 of M: never stricter than the models)
    work: dict[int, dict[tuple[int, int], float]] = {}
    for v, choices in data.choices.items():
        best: dict[tuple[int, int], float] = {}
        for c in choices:
            kq = kappa(c)
            if kq > cutoff:
                continue
            o = opts[c.opt]
            for y in range(1, -(-s_max // o.d) + 1):
                if c.mem_a * y + c.mem_b > 1.0 + 1e-9:
                    break  # memory grows with y
                best[(c.opt, y)] = min(best.get((c.opt, y), math.inf), o.t * o.d * kq)
        if not best:
            return []  # a layer fits nowhere below the cutoff: nothing to refute
        work[v] = best
    out: list[tuple[int, ...]] = []

    def passes(seq: list[int], devices: int) -> bool:
        if devices < data.min_devices:
            return False
        ys = sequence_y(data, tuple(seq))
        slots = {(o, ys[i]) for i, o in enumerate(seq, 1)}
        need = 0.0
        for best in work.values():
            cheapest = min((w for key, w in best.items() if key in slots), default=None)
            if cheapest is None:
                return False
            need += cheapest
        return need <= devices * cutoff * (1 + 1e-9)  # slack for float sums; integers are exact

    def extend(seq: list[int], devices: int, dsum: int) -> bool:
        if seq and passes(seq, devices):
            out.append(tuple(seq))
            if len(out) > limit:
                return False
        if len(seq) == data.slots:
            return True
        for j, o in enumerate(opts):
            if data.uniform and seq and j != seq[0]:
                continue
            if devices + o.t * o.d <= k and dsum + o.d <= s_max:
                seq.append(j)
                ok = extend(seq, devices + o.t * o.d, dsum + o.d)
                seq.pop()
                if not ok:
                    return False
        return True

    if not extend([], 0, 0):
        return None
    out.sort(key=len)
    return out


def sequence_y(data: ModelData, seq: tuple[int, ...]) -> dict[int, int]:
    """Slot (1-based) -> y_i = ⌈D_i/d_i⌉ for the sequence ``seq``."""
    ys: dict[int, int] = {}
    suffix = 0
    for i in range(len(seq), 0, -1):
        d = data.opts[seq[i - 1]].d
        suffix += d
        ys[i] = -(-suffix // d)
    return ys


def solve_sequences(
    seqs: list[tuple[int, ...]],
    solve_one: Callable[[int, tuple[int, ...]], tuple[str, object]],
    record: Callable[[tuple[int, ...], str, object], None],
    workers: int,
    progress: Callable[[], str] | None = None,
) -> tuple[list[object], bool]:
    """Run ``solve_one(worker, seq)`` over ``seqs`` (in order) on ``workers`` threads.

    ``solve_one`` returns (outcome, payload): "refuted" (no plan below the cutoff in
    this sequence), "found" (a plan below it: payload) or "stop" (time limit, or a plan
    not proven best in its sequence). ``record(seq, outcome, payload)`` is called under
    one lock for every result. After a "found" or "stop" no new sequence is started (the
    ones running finish). An exception in a worker stops the others and is raised here,
    so a sequence is never silently left out. ``progress()``, if given, is a line printed
    on stderr at most every 5 s. Returns (found payloads, stopped).
    """
    queue = list(reversed(seqs))  # pop() takes them in order
    lock = threading.Lock()
    halt = threading.Event()
    found: list[object] = []
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
                outcome, payload = solve_one(worker, seq)
                with lock:
                    record(seq, outcome, payload)
                    if outcome == "found":
                        found.append(payload)
                        halt.set()
                    elif outcome == "stop":
                        stopped = True
                        halt.set()
                    elif outcome == "refuted":
                        refuted += 1
                    else:
                        raise ValueError(f"unknown outcome {outcome!r}")
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
    return found, stopped


# ---------------------------------------------------------------------------------
# the split on Ray: sequences as tasks, the cutoff shared by an actor
# ---------------------------------------------------------------------------------

SPLIT_BACKENDS = ("threads", "ray")


def split_backend(params: Mapping[str, Any]) -> str:
    """``params["split_backend"]`` checked: "threads" (default: this process) or "ray"."""
    return _choice(params, "split_backend", SPLIT_BACKENDS)


@dataclass(frozen=True)
class SequenceAnswer:
    """What a subproblem gave. ``outcome``: "refuted" (no plan at or below the cutoff in
    the sequence), "found" (a plan of ``value`` below it, ``plan``; ``cutoff`` is the cutoff
    below that plan), "stale" (stopped because a better plan was found elsewhere) or
    "stop" (time limit, or no answer). ``code``: the solver's status name (statistics)."""

    outcome: str
    code: str
    value: float | None = None
    plan: object = None
    cutoff: float | None = None


@dataclass
class SplitRun:
    """The end of :func:`solve_sequences_ray`."""

    #: the best plan found below the starting cutoff: (value, plan), None if none (with
    #: ``stopped``, it may come from a subproblem stopped before its proof)
    best: tuple[float, object] | None
    #: sequences refuted (at the cutoff they ran with, so at every lower one)
    refuted: set[tuple[int, ...]]
    #: True when the run stopped (time limit, a subproblem without an answer) before the proof
    stopped: bool
    #: solver status name -> subproblems
    codes: dict[str, int]
    #: plans found (improvements of the shared cutoff)
    improved: int
    #: the cutoff when the run ended
    cutoff: float
    #: sequences left out because the bounds rule them out at a lowered cutoff
    pruned: int = 0


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
        for ref in running:
            ray.cancel(ref, force=True)
        ray.kill(incumbent)
    return run
