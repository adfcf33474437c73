"""The MILP's split proof search below a warm start (docs/formulations.md §4.4): the cutoff
search over the stages' option sequences (:mod:`baselines.exact.sequences`), on threads
(:func:`baselines.exact.split_threads.split_on_threads`) or as Ray tasks
(:func:`baselines.exact.split_ray.solve_sequences_ray`, :func:`_ray_sequence`).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, replace
from typing import Any

from baselines.exact.answer import Answer, SequenceAnswer, SplitRun
from baselines.exact.model_data import ModelData, WarmStart
from baselines.exact.sequences import checked_sequences, split_backend
from baselines.exact.split_ray import solve_sequences_ray
from baselines.exact.split_threads import SplitRound, split_on_threads
from baselines.milp.model import CUTOFF_REL, MilpModel, build_model
from baselines.milp.solve_once import Backend, solve_once
from piper.core.options import Options
from piper.core.result import Status

__all__ = ["SPLIT_CBC_OPTIONS", "split_search"]

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


def _sequence_answer(data: ModelData, options: Options, backend: Backend, model: MilpModel,
                     seq: tuple[int, ...], deadline: float | None, cutoff: float) -> SequenceAnswer:
    """One sequence of the split: ``model`` (built below ``cutoff``, units of τ) with the
    sequence fixed (:meth:`MilpModel.fix_sequence`), solved to the end: the sequence's best
    plan below the cutoff, or its refutation."""
    model.fix_sequence(seq)
    answer = solve_once(data, options, backend, None, deadline, cutoff, model=model)
    if answer.status == Status.INFEASIBLE:
        return SequenceAnswer("refuted", answer.status.value)
    if answer.status == Status.OPTIMAL and answer.plan is not None:  # the sequence's best plan
        return SequenceAnswer("found", answer.status.value, answer.objective, answer.plan,
                              answer.objective / data.tau * (1.0 - CUTOFF_REL))  # type: ignore[operator]
    # time limit; a plan here is better than the cutoff but unproven
    return SequenceAnswer("stop", answer.status.value, answer.objective, answer.plan)


def split_search(data: ModelData, options: Options, backend: Backend, warm: WarmStart, deadline: float | None,
                 cutoff: float) -> Answer:
    """The cutoff search below ``warm`` split over option sequences (:mod:`baselines.exact.sequences`).

    One model per cutoff and worker (``params["split_workers"]``, default ``threads``: that
    many single-threaded solves at once); each sequence fixes its u bounds
    (:meth:`MilpModel.fix_sequence`) and is solved to the end. Infeasible: the sequence is
    ruled out. A plan: the sequence's best plan (the subproblem is minimised) becomes the
    incumbent, the cutoff moves below it and the model is rebuilt. The answer reads like
    :func:`baselines.milp.solve_once.solve_once`'s with the cutoff: INFEASIBLE when every
    sequence is ruled out and no plan was found below the warm start (``solve_milp`` then
    calls the warm start optimal), OPTIMAL with the best plan found when every sequence is
    done, else FEASIBLE / UNKNOWN.
    """
    t0 = time.perf_counter()
    if "cbc_options" not in options.params and backend.name == "cbc":
        options = replace(options, params={**options.params, "cbc_options": list(SPLIT_CBC_OPTIONS)})
    if "msg" not in options.params:  # the split's own progress lines replace the solver logs
        options = replace(options, params={**options.params, "msg": False})
    # one single-threaded solver per worker, each with its own copy of the model
    # (split_workers = 1: one solve at a time with options.threads threads, as in CP-SAT)
    workers = max(1, int(options.params.get("split_workers", options.threads)))
    sub_options = options if workers == 1 else replace(options, threads=1)
    if split_backend(options.params) == "ray":
        return _split_on_ray(data, options, backend, deadline, cutoff, t0)

    def open_round(at: float) -> SplitRound:
        models = [build_model(data, options, at) for _ in range(workers)]
        seqs = [] if models[0].unplaceable else checked_sequences(data, data.tps_cutoff(at), lambda c: c.kappa, options.params)

        def solve_one(worker: int, seq: tuple[int, ...]) -> SequenceAnswer:
            if deadline is not None and deadline - time.perf_counter() <= 0.5:
                return SequenceAnswer("stop", None)  # not started (not counted)
            return _sequence_answer(data, sub_options, backend, models[worker], seq, deadline, at)

        return SplitRound(at, seqs, solve_one, models[0])

    first = open_round(cutoff)
    run = split_on_threads(first, open_round, workers, retry_found=False,
                           label="milp split" if options.progress else None, since=t0)
    return _answer(run, data, options, backend, run.last_round.model, len(first.sequences), workers, "threads", t0)


def _answer(run: SplitRun, data: ModelData, options: Options, backend: Backend, model: MilpModel, total: int,
            workers: int | str, where: str, t0: float) -> Answer:
    """The split's answer from its run: ``model`` the last one built (the stats report its
    size), ``total`` the sequences at the first cutoff, ``workers`` and ``where`` (threads
    or ray) as the stats name them."""
    best_obj, best_plan = run.best if run.best is not None else (None, None)
    stats: dict[str, Any] = {
        "backend": backend.name, **model.size(), "tau": data.tau, "symmetry_rows": model.symmetry_rows,
        "split": {"mode": "sequences", "sequences": total, "done": len(run.settled), "improved": run.improved,
                  "subproblems": run.codes, "cbc_options": list(options.params.get("cbc_options", [])),
                  "workers": workers, "backend": where},
        "solve_s": time.perf_counter() - t0,
    }
    if run.stopped:
        return Answer(Status.FEASIBLE if best_plan is not None else Status.UNKNOWN, best_plan, None, 0.0,  # type: ignore[arg-type]
                      stats=stats)
    if best_plan is None:
        return Answer.infeasible(stats)
    return Answer(Status.OPTIMAL, best_plan, best_obj, best_obj * (1.0 - CUTOFF_REL), stats=stats)  # type: ignore[arg-type,operator]


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
    """One sequence of the split on a Ray worker (:func:`baselines.exact.split_ray.solve_sequences_ray`):
    the sequence's best plan below the shared ``cutoff`` (units of τ), as in the thread path.
    A MILP solve is not stopped when its cutoff goes stale (its answer still counts)."""
    if remaining is not None and remaining <= 0.5:
        return SequenceAnswer("stop", "not started")
    deadline = None if remaining is None else time.perf_counter() + remaining
    cached = _RAY_MODELS.get((ctx.key, cutoff))
    if cached is None:
        _RAY_MODELS.clear()
        cached = (build_model(ctx.data, ctx.options, cutoff), Backend(ctx.backend))
        _RAY_MODELS[(ctx.key, cutoff)] = cached
    model, backend = cached
    if model.unplaceable:
        return SequenceAnswer("refuted", "unplaceable")
    return _sequence_answer(ctx.data, ctx.options, backend, model, seq, deadline, cutoff)


def _split_on_ray(data: ModelData, options: Options, backend: Backend, deadline: float | None, cutoff: float,
                  t0: float) -> Answer:
    """:func:`split_search` with the sequences as Ray tasks (``params["split_backend"] =
    "ray"``, :func:`baselines.exact.split_ray.solve_sequences_ray`): one single-threaded solve per
    task, the cutoff shared; same answer as the thread path."""
    model = build_model(data, options, cutoff)

    def sequences(at: float) -> list[tuple[int, ...]]:
        return [] if model.unplaceable else checked_sequences(data, data.tps_cutoff(at), lambda c: c.kappa, options.params)

    seqs = sequences(cutoff)
    ctx = _RayContext(uuid.uuid4().hex, data, replace(options, threads=1), backend.name)
    run = solve_sequences_ray(seqs, _ray_sequence, ctx, cutoff, sequences_at=sequences, deadline=deadline,
                              address=options.params.get("ray_address"),
                              progress="milp split" if options.progress else None)
    return _answer(run, data, options, backend, model, len(seqs), "ray", "ray", t0)
