"""The window check: whether ``python -m piper plan``'s answer stays optimal where ``score``'s pricing
and the search's differ.

The search prices each plan's resync overlap over its own schedule's window, as ``score`` does
(``resyncOverlapWindow`` "schedule", docs/problem.md §10.1; :func:`piper.frontend.planner.search_setup`).
Two searches still differ from ``score``:

* with per-layer recomputation (``--recompute-per-layer``) a layer's TMPCs share the least overlap of
  theirs (:func:`piper.frontend.workload.build_workload`; Piper's DP needs them to share it), so every
  plan's value is an upper bound of its ``score``;
* a search whose solver does not take the iteration keys
  (:func:`piper.frontend.planner.takes_iteration_keys`) leaves out the optimizer step and the overlap
  altogether, so its proof says nothing of ``score``'s pricing.

(Until 2026-12-04 the search used 1F1B's window of one micro-batch for every plan, and the check
also covered the interleaved plans of every search with the overlap: it caught a wrong "optimal",
tests/frontend/test_window_check.py.)

The check bounds those plans from below. Each workload the search solved for the answer's kind
(uniform or free) is solved once more **without the resync**: every TMPC's ``parameterSize`` and
``expertParameterSize`` set to 0 and its ``resyncOverlapTime`` dropped, everything else as it was
(memory, compute, the pipeline's sends, the optimizer step). A plan's exposed resync,
max(0, N R / B_resync - H) / N in its stage's time (docs/problem.md §10), is at least 0 whatever the
window H hides it behind, so each plan's value there is at most its value under any window, its
``score`` included, and the least over the workloads is a lower bound on every plan the check covers:
every plan (the options' schedules; a step is >= 0 too), or only the interleaved ones (v >= 2) when
the search's workloads offer one recomputation setting and price one micro-batch's window (the 1F1B
plans then keep the search's own proof). Each solve runs under the cutoff of the answer's own
``score`` value, so a workload that cannot hold a better plan is pruned by the DP's bound, as in the
search.

The answer's "optimal" stands when that bound is at least its ``score`` value; else its status is
"feasible" and the bound is reported. The bound ignores the whole resync, so it is loose for plans
whose resync cannot be hidden; it never claims what it has not proved.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from piper.core.options import BATCH_TIME, INTERLEAVED, ONE_F_ONE_B, Options
from piper.core.result import Result, Status, make_result
from piper.frontend.planner import Candidate, PlanSearch, proves_none_below, time_share_s
from piper.frontend.schedule_check import check_schedule
from piper.frontend.workload import TrainingSetup
from piper.io.workload import load_problem
from piper.solvers.registry import SolverInfo

__all__ = ["WindowCheck", "needs_window_check", "window_check", "without_resync"]

#: relative slack of "the bound is at least the answer's value" (the DP's own on a cutoff, 1e-9)
RTOL = 1e-9


@dataclass(frozen=True)
class WindowCheck:
    """The check's outcome for one answer (module docstring); values in the objective's units."""

    #: the answer's value as ``score`` prices it (its own window and the optimizer step)
    value: float
    #: a proven lower bound on every plan the check covers, as ``score`` prices it (+inf: none fits)
    bound: float
    #: "interleaved" (the 1F1B plans keep the search's proof) or "any" (every plan: per-layer recomputation)
    schedules: str
    solves: int
    #: solves that proved, under the cutoff of :attr:`value`, that their workload holds no better plan
    pruned: int
    #: workloads left without a proof (a solve cut by the time limit, or none made once it was spent):
    #: the bound is then 0
    unproven: int
    time_s: float
    #: a plan the check found (a solve's plan without the resync, on its real workload) that ``score``
    #: prices below the answer it was given, the best such (:attr:`value` is then its value); None: none
    better: Candidate | None = None

    @property
    def proven(self) -> bool:
        """No plan the check covers beats the answer as ``score`` prices them."""
        return self.bound >= self.value * (1 - RTOL)

    def to_dict(self) -> dict[str, Any]:
        return {"proven": self.proven, "value": self.value, "found_better": self.better is not None,
                "bound": self.bound if math.isfinite(self.bound) else None,
                "schedules": self.schedules, "solves": self.solves, "pruned": self.pruned,
                "unproven": self.unproven, "time_s": self.time_s}


def needs_window_check(setup: TrainingSetup, options: Options, search: PlanSearch, free: bool) -> bool:
    """Whether the answer's proof covers less than ``score``'s pricing (module docstring): the search's
    workloads went without the iteration keys (``score`` always prices the optimizer step), or they
    carried the resync's overlap and some plan of the answer's kind may have a wider window
    (interleaved plans allowed) or some layer chooses its recomputation."""
    if not search.iteration_keys:
        return True
    if not (setup.overlap_grad_reduce or setup.overlap_param_gather):
        return False
    # the search's workloads price each plan's own window (resyncOverlapWindow "schedule",
    # piper.frontend.planner.search_setup); only a layer choosing its recomputation shares the least h
    return any(c.recompute is None or len(c.recompute) > 1 for c in search.candidates if c.uniform != free)


def without_resync(workload: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``workload`` without the data-parallel resync: every TMPC's ``parameterSize`` and
    ``expertParameterSize`` 0, no ``resyncOverlapTime``; every other key as it was."""
    out = copy.deepcopy(workload)
    for node in out["nodes"]:
        for entries in node["TMPCs"].values():
            for entry in entries:
                entry["parameterSize"] = 0.0
                if "expertParameterSize" in entry:
                    entry["expertParameterSize"] = 0.0
                entry.pop("resyncOverlapTime", None)
    return out


def window_check(search: PlanSearch, value: float, info: SolverInfo, options: Options, *, free: bool,
                 time_limit_s: float | None = None,
                 progress: Callable[[str], None] | None = None,
                 rescore: Callable[[Candidate], float] | None = None,
                 resolve: Callable[[Candidate], Candidate | None] | None = None) -> WindowCheck:
    """Bound every plan of the answer's kind (``free``: Piper's free plans, else the uniform ones) that
    the search's pricing may overvalue, below ``value`` (the answer's ``score`` value, the objective's
    units: :func:`piper.frontend.planner.as_scored`); ``time_limit_s`` for all the check's solves
    (None: none). Solvers that take the ``upper_bound`` knob (Piper's DP) solve under the cutoff
    ``value``, the others each workload in full.

    ``rescore`` (optional: a candidate's plan as ``score`` prices it, the objective's units, inf when
    it does not fit): in each workload the check cannot prune, the solve's plan (a plan of the real
    workload too: only the resync's numbers differ) and, when the search kept no plan of that workload
    and ``resolve`` is given, the search's own solve of it without a cutoff (``resolve``: one more
    solve, with the schedule check's fallbacks); a plan that passes the schedule check and that
    ``rescore`` prices below the best so far becomes :attr:`WindowCheck.better`, and the later solves
    run under its value."""
    start = time.perf_counter()
    kind = [c for c in search.candidates if c.uniform != free]
    per_layer = any(c.recompute is None or len(c.recompute) > 1 for c in kind)
    allowed = options.virtual_stage_choices()
    if per_layer or not search.iteration_keys:
        schedule = options.schedule
    elif max(allowed) > 1:
        schedule = INTERLEAVED
    else:
        return WindowCheck(value, math.inf, ONE_F_ONE_B, 0, 0, 0, 0.0)
    # as in the search: the DP takes the cutoff for the batch time and for interleaved-only searches
    cutoffs = "upper_bound" in (info.params or {}) and (options.objective == BATCH_TIME or schedule == INTERLEAVED)
    seen: set[int] = set()
    bound, solves, pruned, unproven = math.inf, 0, 0, 0
    better: Candidate | None = None
    for i, cand in enumerate(kind):
        if cand.workload is not None and id(cand.workload) in seen:
            continue
        seen.add(id(cand.workload))
        if cand.workload is None or (time_limit_s is not None and time.perf_counter() - start >= time_limit_s):
            # the time limit is spent (or was before the search built this workload): the workloads
            # left are not bounded (the check proves nothing more)
            unproven += 1
            bound = 0.0
            continue
        left = None if time_limit_s is None else time_share_s(time_limit_s - (time.perf_counter() - start),
                                                                len(kind) - i)
        params = {**options.params, **({"upper_bound": value} if cutoffs and math.isfinite(value) else {})}
        problem = load_problem(without_resync(cand.workload), strict=True)
        res = info(problem, replace(options, schedule=schedule, uniform=not free, time_limit_s=left, params=params))
        solves += 1
        if rescore is not None and not proves_none_below(res, value):
            # plans this workload may hold below the answer: the solve's own (without the resync) and,
            # when the search kept none of this workload (cut off by its cutoff), its best as the
            # search prices it, each scored as `score` prices it
            tries = [_as_candidate(cand, res, options)] if res.plan is not None else []
            if cand.result.plan is None and resolve is not None and (
                    time_limit_s is None or time.perf_counter() - start < time_limit_s):
                tries.append(resolve(cand))
                solves += 1
            for found in tries:
                found_value = rescore(found) if found is not None and found.result.plan is not None else math.inf
                if found_value < value * (1 - RTOL):
                    value, better = found_value, found
        own = _lower_bound(res)
        if own is None:
            unproven += 1
            own = 0.0
        elif proves_none_below(res, value):
            pruned += 1
        bound = min(bound, own)
        if progress is not None:
            progress(f"window check {solves}: {_label(cand)}: {res.status.value}, lower bound "
                     f"{own:.6g} ({'pruned' if proves_none_below(res, value) else 'solved'}, {res.time_s:.2f} s)")
    return WindowCheck(value, bound, schedule, solves, pruned, unproven, time.perf_counter() - start, better)


def _as_candidate(cand: Candidate, res: Result, options: Options) -> Candidate | None:
    """``res``'s plan (solved without the resync) as a candidate of ``cand``'s real workload, scored
    there by the evaluator; None when it is an interleaved plan that fails the schedule check (the
    answers ``plan`` gives pass it)."""
    result = make_result(cand.problem, res.solver, Status.FEASIBLE, res.plan, time_s=res.time_s,
                         objective_kind=options.objective,
                         message="found by the window check (solved without the resync, scored with it)")
    if result.score is None or not math.isfinite(result.value):
        return None
    if res.plan.schedule.interleaved and not check_schedule(cand.problem, res.plan, result.score).ok:
        return None
    return replace(cand, result=result, cutoff=None, rejected=None, rejected_check=None)


def _lower_bound(res: Result) -> float | None:
    """What one solve proves about its workload's best plan (the objective's units): its value when
    optimal, +inf when infeasible, its bound when it has one (a pruned solve's is at least its
    cutoff); None when it proved nothing (no bound, or 0: a time limit, the greedy knapsack)."""
    if res.status == Status.OPTIMAL:
        return res.value
    if res.status == Status.INFEASIBLE:
        return math.inf
    if res.bound is not None and res.bound > 0:
        return res.bound
    return None


def _label(cand: Candidate) -> str:
    parts = [f"micro-batch {cand.micro_batch}"]
    if cand.context_parallel > 1:
        parts.append(f"c={cand.context_parallel}")
    if cand.expert_parallel > 1:
        parts.append(f"e={cand.expert_parallel}")
    if cand.recompute is not None:
        parts.append("recompute " + "/".join(cand.recompute))
    if cand.degrees is not None and len(cand.degrees) == 1:
        parts.append(f"degree {cand.degrees[0]}")
    return ", ".join(parts)
