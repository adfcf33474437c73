"""The MILP's split proof search below a warm start (docs/formulations.md §4): the cutoff
search over the stages' option sequences (:mod:`baselines.exact.split`), on threads
(:func:`_split_search`) or as Ray tasks (:func:`_split_on_ray`, :func:`_ray_sequence`).
"""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from baselines.exact.model_data import ModelData, WarmStart
from baselines.exact.split import (
    SequenceAnswer,
    checked_sequences,
    solve_sequences,
    solve_sequences_ray,
    split_backend,
)
from baselines.milp.backend import Backend, _solve_once
from baselines.milp.model import CUTOFF_REL, MilpModel
from piper.core.options import Options
from piper.core.result import Status

#: CBC options of the split's subproblems unless ``params["cbc_options"]`` is given: the
#: subproblems are refutations, where heuristics find nothing and most cut generators cost
#: more than they save, but probing at every node (fixing x by implications from the
#: fixed sequence) pays. Measured on the 16-layer branchy bench row at k=8 (287
#: sequences, one run each): at da718df with one single-threaded CBC, 115 s with
#: heuristics and cuts off, 50.6 s adding ``probing on``, 46.4 and 50.9 s adding
#: ``probing forceOn``, 49.4 s with ``forceOnStrong``, 63.0 s with forceOn and heuristics
#: on; at an earlier revision, 103 s with CBC's defaults, 91 s heuristics off, 89 s cuts
#: off, 74 s both off.
SPLIT_CBC_OPTIONS = ("heur off", "cuts off", "probing forceOn")


def _split_search(data: ModelData, options: Options, backend: Backend, warm: WarmStart, deadline: float | None,
                  cutoff: float) -> tuple[Status, Any, float | None, float, dict[str, Any]]:
    """The cutoff search below ``warm`` split over option sequences (:mod:`baselines.exact.split`).

    One model per cutoff and worker (``params["split_workers"]``, default ``threads``: that
    many single-threaded solves at once); each sequence fixes its u bounds
    (:meth:`MilpModel.fix_sequence`) and is solved to the end. Infeasible: the sequence is ruled out. A plan: the sequence's
    best plan (the subproblem is minimised) becomes the incumbent, the cutoff moves below it
    and the model is rebuilt. The result reads like :func:`_solve_once`'s with the
    cutoff: INFEASIBLE when every sequence is ruled out and no plan was found below the
    warm start (``solve_milp`` then calls the warm start optimal), OPTIMAL with the best
    plan found when every sequence is done, else FEASIBLE / UNKNOWN.
    """
    t0 = time.perf_counter()
    if "cbc_options" not in options.params and backend.name == "cbc":
        options = replace(options, params={**options.params, "cbc_options": list(SPLIT_CBC_OPTIONS)})
    if "msg" not in options.params:  # the split's own progress lines replace the solver logs
        options = replace(options, params={**options.params, "msg": False})
    symmetry = bool(options.params.get("tmpc_symmetry", True))
    # one single-threaded solver per worker, each with its own copy of the model
    # (split_workers = 1: one solve at a time with options.threads threads, as in CP-SAT)
    workers = max(1, int(options.params.get("split_workers", options.threads)))
    sub_options = options if workers == 1 else replace(options, threads=1)
    done: set[tuple[int, ...]] = set()
    best_plan, best_obj, improved = None, None, 0
    counts: dict[str, int] = {}
    total = None
    split_on = split_backend(options.params)
    if split_on == "ray":
        return _split_on_ray(data, options, backend, deadline, cutoff, t0)
    while True:
        models = [MilpModel(data, cutoff, tmpc_symmetry=symmetry) for _ in range(workers)]
        model = models[0]
        seqs = [] if model.unplaceable else checked_sequences(data, cutoff, lambda c: c.kappa, options.params)
        total = len(seqs) if total is None else total

        def solve_one(worker: int, seq: tuple[int, ...]) -> tuple[str, Any]:
            if deadline is not None and deadline - time.perf_counter() <= 0.5:
                return "stop", (None, None)
            mdl = models[worker]
            mdl.fix_sequence(seq)
            status, plan, objective, _b, _s = _solve_once(data, sub_options, backend, None, deadline, cutoff, model=mdl)
            if status == Status.INFEASIBLE:
                return "refuted", (status, None)
            if status == Status.OPTIMAL and plan is not None:  # the sequence's best plan
                return "found", (status, (objective, plan))
            return "stop", (status, plan)  # time limit; a plan here is better but unproven

        def record(seq: tuple[int, ...], outcome: str, payload: Any) -> None:
            nonlocal best_plan
            status, extra = payload
            if status is not None:
                counts[status.value] = counts.get(status.value, 0) + 1
            if outcome in ("refuted", "found"):
                done.add(seq)  # found: nothing below the sequence's best plan in it
            elif extra is not None:
                best_plan = extra

        def line() -> str:
            return (f"milp split: {len(done)} sequences done ({len(seqs)} at the current cutoff), "
                    f"{time.perf_counter() - t0:.1f} s")

        found, timed_out = solve_sequences([s for s in seqs if s not in done], solve_one, record, workers,
                                           line if options.progress else None)
        if found:
            objective, plan = min((p[1] for p in found), key=lambda f: f[0])
            if best_obj is None or objective < best_obj:
                best_plan, best_obj = plan, objective
            improved += len(found)
            cutoff = best_obj / data.tau * (1.0 - CUTOFF_REL)
        if timed_out or not found:
            break
    stats: dict[str, Any] = {
        "backend": backend.name, **model.size(), "tau": data.tau, "symmetry_rows": model.symmetry_rows,
        "split": {"mode": "sequences", "sequences": total, "done": len(done), "improved": improved,
                  "subproblems": counts, "cbc_options": list(options.params.get("cbc_options", []))},
        "solve_s": time.perf_counter() - t0,
    }
    stats["split"]["workers"] = workers
    stats["split"]["backend"] = "threads"
    if timed_out:
        return (Status.FEASIBLE if best_plan is not None else Status.UNKNOWN), best_plan, None, 0.0, stats
    if best_plan is None:
        return Status.INFEASIBLE, None, None, math.inf, stats
    return Status.OPTIMAL, best_plan, best_obj, best_obj * (1.0 - CUTOFF_REL), stats


@dataclass(frozen=True)
class _RayContext:
    """What a Ray worker needs to rebuild the split's model (:func:`_ray_sequence`)."""

    key: str
    data: ModelData
    options: Options
    backend: str


#: the split's model in this Ray worker process: (context key, cutoff) -> (model, backend)
_RAY_MODELS: dict[tuple[str, float], tuple[MilpModel, Backend]] = {}


def _ray_sequence(ctx: _RayContext, seq: tuple[int, ...], cutoff: float, stale: Any,
                  remaining: float | None) -> SequenceAnswer:
    """One sequence of the split on a Ray worker (:func:`baselines.exact.split.solve_sequences_ray`):
    the sequence's best plan below the shared ``cutoff`` (units of τ), as in the thread path.
    A MILP solve is not stopped when its cutoff goes stale (its answer still counts)."""
    if remaining is not None and remaining <= 0.5:
        return SequenceAnswer("stop", "not started")
    deadline = None if remaining is None else time.perf_counter() + remaining
    cached = _RAY_MODELS.get((ctx.key, cutoff))
    if cached is None:
        _RAY_MODELS.clear()
        cached = (MilpModel(ctx.data, cutoff, tmpc_symmetry=bool(ctx.options.params.get("tmpc_symmetry", True))),
                  Backend(ctx.backend))
        _RAY_MODELS[(ctx.key, cutoff)] = cached
    model, backend = cached
    if model.unplaceable:
        return SequenceAnswer("refuted", "unplaceable")
    model.fix_sequence(seq)
    status, plan, objective, _b, _s = _solve_once(ctx.data, ctx.options, backend, None, deadline, cutoff, model=model)
    if status == Status.INFEASIBLE:
        return SequenceAnswer("refuted", status.value)
    if status == Status.OPTIMAL and plan is not None:  # the sequence's best plan
        return SequenceAnswer("found", status.value, objective, plan, objective / ctx.data.tau * (1.0 - CUTOFF_REL))
    return SequenceAnswer("stop", status.value, objective, plan)  # time limit; a plan here is unproven


def _split_on_ray(data: ModelData, options: Options, backend: Backend, deadline: float | None, cutoff: float,
                  t0: float) -> tuple[Status, Any, float | None, float, dict[str, Any]]:
    """:func:`_split_search` with the sequences as Ray tasks (``params["split_backend"] =
    "ray"``, :func:`baselines.exact.split.solve_sequences_ray`): one single-threaded solve per
    task, the cutoff shared; same result as the thread path."""
    model = MilpModel(data, cutoff, tmpc_symmetry=bool(options.params.get("tmpc_symmetry", True)))

    def sequences(at: float) -> list[tuple[int, ...]]:
        return [] if model.unplaceable else checked_sequences(data, at, lambda c: c.kappa, options.params)

    seqs = sequences(cutoff)
    ctx = _RayContext(uuid.uuid4().hex, data, replace(options, threads=1), backend.name)
    run = solve_sequences_ray(seqs, _ray_sequence, ctx, cutoff, sequences_at=sequences, deadline=deadline,
                              address=options.params.get("ray_address"),
                              progress="milp split" if options.progress else None)
    best_obj, best_plan = run.best if run.best is not None else (None, None)
    stats: dict[str, Any] = {
        "backend": backend.name, **model.size(), "tau": data.tau, "symmetry_rows": model.symmetry_rows,
        "split": {"mode": "sequences", "sequences": len(seqs), "done": len(run.refuted), "improved": run.improved,
                  "subproblems": run.codes, "cbc_options": list(options.params.get("cbc_options", [])),
                  "workers": "ray", "backend": "ray"},
        "solve_s": time.perf_counter() - t0,
    }
    if run.stopped:
        return (Status.FEASIBLE if best_plan is not None else Status.UNKNOWN), best_plan, None, 0.0, stats
    if best_plan is None:
        return Status.INFEASIBLE, None, None, math.inf, stats
    return Status.OPTIMAL, best_plan, best_obj, best_obj * (1.0 - CUTOFF_REL), stats  # type: ignore[operator]

