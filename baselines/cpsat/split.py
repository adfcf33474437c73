"""CP-SAT's split proof search below a warm start (docs/formulations.md §4.4): the proof
search over the stages' option sequences (:mod:`baselines.exact.sequences`), one model copy
per sequence (:func:`solve_sequence`), on threads
(:func:`baselines.exact.split_threads.split_on_threads`) or as Ray tasks
(:func:`baselines.exact.split_ray.solve_sequences_ray`, :func:`_ray_sequence`).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ortools.sat.python import cp_model

from baselines.cpsat.model import CpsatModel, build_model
from baselines.cpsat.params import solver_parameters
from baselines.exact.answer import Answer, SequenceAnswer
from baselines.exact.model_data import ModelData, WarmStart
from baselines.exact.sequences import checked_sequences, split_backend
from baselines.exact.split_ray import solve_sequences_ray
from baselines.exact.split_threads import SplitRound, split_on_threads
from piper.core.errors import SolverError
from piper.core.options import Options
from piper.core.result import Status

__all__ = ["solve_sequence", "split_search"]


def solve_sequence(model: CpsatModel, sub: Options, msg: bool, seq: tuple[int, ...], worst: int,
                   remaining: float | None, stale: Callable[[], bool] | None = None) -> SequenceAnswer:
    """One sequence of the split: a copy of ``model`` (its cutoff ``worst - 1`` added) with
    z[i, o_i] = 1 for its slots and the next slot unused, solved as a proof search. With
    ``stale``, a watcher stops the search once it returns True (a better plan was found
    elsewhere: the answer is then "stale")."""
    if remaining is not None and remaining <= 0.01:
        return SequenceAnswer("stop", "not started")
    data = model.data
    m = model.m.Clone()
    for i, o in enumerate(seq, 1):
        m.Add(m.GetBoolVarFromProtoIndex(model.z[(i, o)].Index()) == 1)
    if len(seq) < data.slots:
        m.Add(m.GetBoolVarFromProtoIndex(model.used[len(seq) + 1].Index()) == 0)
    solver = solver_parameters(sub, remaining, proof=True)
    # the split's progress lines replace CP-SAT's log (one per subproblem) unless asked
    solver.parameters.log_search_progress = msg
    done, went_stale = threading.Event(), threading.Event()
    if stale is not None:
        def watch() -> None:
            while not done.wait(0.25):
                if stale():
                    went_stale.set()
                    solver.StopSearch()
                    return

        threading.Thread(target=watch, daemon=True).start()
    try:
        code = solver.Solve(m)
    finally:
        done.set()
    name = solver.StatusName(code)
    if code == cp_model.INFEASIBLE:
        return SequenceAnswer("refuted", name)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SequenceAnswer("stale" if went_stale.is_set() else "stop", name)
    assign = {v: (i, c) for (v, i, c), var in model.x.items()
              if solver.BooleanValue(m.GetBoolVarFromProtoIndex(var.Index()))}
    plan_found = data.slots_from_plan(data.plan_from_slots(assign))
    value = None if plan_found is None else model.objective_int(plan_found)
    if value is None or value >= worst:
        raise SolverError(f"CP-SAT found a plan at or above the cutoff in sequence {seq}: model bug")
    return SequenceAnswer("found", name, value, plan_found, value - 1)


@dataclass(frozen=True)
class _RayContext:
    """What a Ray worker needs to rebuild the model of the split (:func:`_ray_sequence`)."""

    key: str
    data: ModelData
    sub: Options
    msg: bool


#: the model of the split in this Ray worker process: (context key, cutoff) -> model
_RAY_MODELS: dict[tuple[str, int], CpsatModel] = {}


def _ray_sequence(ctx: _RayContext, seq: tuple[int, ...], cutoff: float, stale: Callable[[], bool],
                  remaining: float | None) -> SequenceAnswer:
    """One sequence on a Ray worker (:func:`baselines.exact.split_ray.solve_sequences_ray`), below
    the shared cutoff (T <= ``cutoff``); the model is built once per worker and cutoff."""
    cut = int(cutoff)
    model = _RAY_MODELS.get((ctx.key, cut))
    if model is None:
        _RAY_MODELS.clear()
        model = build_model(ctx.data, ctx.sub)
        model.add_cutoff(cut)
        _RAY_MODELS[(ctx.key, cut)] = model
    return solve_sequence(model, ctx.sub, ctx.msg, seq, cut + 1, remaining, stale)


def split_search(data: ModelData, options: Options, warm: WarmStart, deadline: float | None, model: CpsatModel,
                 start: float) -> Answer:
    """The proof search below ``warm`` split over option sequences (:mod:`baselines.exact.sequences`).

    Each sequence is a copy of the model with z[i, o_i] = 1 for its slots and the next
    slot unused, solved as a proof search (:func:`solve_sequence`). A refuted
    (infeasible) copy rules the sequence out; a copy that finds a plan below the cutoff
    makes it the incumbent, the cutoff moves below it (the model is rebuilt) and the same
    sequence is searched again. Every sequence refuted: the incumbent is optimal. On
    threads (default) or, with ``params["split_backend"] = "ray"``, as Ray tasks
    (:func:`baselines.exact.split_ray.solve_sequences_ray`). ``model``: the part's model,
    its cutoff below the warm start added here; ``start``: when the part's solve began
    (``time.perf_counter()``). The answer is in time units, its tolerance the model's 2ε.
    """
    unit = data.tau / model.unit
    eps = model.epsilon
    first_worst = model.objective_int(warm)
    model.add_cutoff(first_worst - 1)
    msg = bool(options.params.get("msg", False))

    def sequences(cutoff: float) -> list[tuple[int, ...]]:
        # T <= the cutoff (batch time: N·T <= it, so T <= cutoff // N)
        at = cutoff // data.problem.microbatches if data.batch else cutoff
        return checked_sequences(data, at, lambda c: model.q(c.kappa), options.params)

    # that many single-worker CP-SAT searches at once (split_workers = 1: one at a time,
    # each with options.threads workers)
    workers = max(1, int(options.params.get("split_workers", options.threads)))
    sub = options if workers == 1 else replace(options, threads=1, params={**options.params, "num_workers": 1})

    def open_round(cutoff: float, built: CpsatModel | None = None) -> SplitRound:
        current = built
        if current is None:
            current = build_model(data, options)
            current.add_cutoff(int(cutoff))

        def solve_one(_worker: int, seq: tuple[int, ...]) -> SequenceAnswer:
            remaining = None if deadline is None else deadline - time.perf_counter()
            return solve_sequence(current, sub, msg, seq, int(cutoff) + 1, remaining)

        return SplitRound(cutoff, sequences(cutoff), solve_one, current)

    first = open_round(first_worst - 1, model)
    build_s = time.perf_counter() - start
    backend = split_backend(options.params)
    if backend == "ray":
        ctx = _RayContext(uuid.uuid4().hex, data, replace(options, threads=1, params={**options.params, "num_workers": 1}),
                          msg)
        run = solve_sequences_ray(first.sequences, _ray_sequence, ctx, first.cutoff, sequences_at=sequences,
                                  deadline=deadline, address=options.params.get("ray_address"),
                                  progress="cpsat split" if options.progress else None)
        last_model, remaining_seqs = model, sequences(run.best[0] - 1 if run.best is not None else first.cutoff)
    else:
        run = split_on_threads(first, open_round, workers, retry_found=True,
                               label="cpsat split" if options.progress else None, since=start)
        last = run.last_round
        if last.cutoff != run.cutoff:  # the last round found a plan and stopped: report the model below it
            last = open_round(run.cutoff)
        last_model, remaining_seqs = last.model, last.sequences
    worst, best = run.best if run.best is not None else (first_worst, warm)
    stats: dict[str, Any] = {
        **last_model.stats(),
        "build_s": build_s,
        "num_workers": int(options.params.get("num_workers", max(1, int(options.threads)))),
        "warm_start": f"split proof search below the warm start ({'batch time' if data.batch else 'TPS'} "
                      f"{warm.value!r})",
        "split": {"mode": "sequences", "sequences": len(first.sequences), "remaining_at_cutoff": len(remaining_seqs),
                  "refuted": len(run.refuted), "improved": run.improved, "cp_status": run.codes,
                  "workers": workers if backend == "threads" else "ray", "backend": backend},
    }
    objective = worst * unit
    if not run.stopped:
        return Answer(Status.OPTIMAL, best.plan, objective, max(0.0, objective - eps), 2 * eps, stats)
    return Answer(Status.FEASIBLE, best.plan, objective, 0.0, 2 * eps, stats)
