"""The search over the parts of the plan space (docs/formulations.md §11.4): an incumbent, the
time unit of each model, and the loop that solves one part down to the incumbent.

Per part: a model without a cutoff (or with the incumbent's) is optimized for a time slice; a
plan it finds becomes the incumbent when the evaluator scores it better; then the part is
solved again with the objective cut off at (1 - rel_gap) times the incumbent's value, until
CP-SAT proves the cut-off model infeasible (the part holds no plan better by more than
rel_gap) or optimal, or time runs out. Each model's unit of time is the incumbent's value
over 2^precision_bits (the crude bound's before there is one): cut-off models need no larger
domain, and the rounding error stays a fixed fraction of the value.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

from ortools.sat.python import cp_model

from baselines.aggregate.chain import Chain
from baselines.aggregate.data import Choice, Space
from baselines.aggregate.expand import expand_plan
from baselines.aggregate.model import AggregateModel
from baselines.cpsat.params import GUARD_PARAMETERS, MAX_PRECISION_BITS
from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["AGGREGATE_PARAMETERS", "CRUDE_BITS", "MIN_PRECISION_BITS", "PROBE_S", "PROBE_PARTS", "default_bits", "probe_part", "DEFAULT_REL_GAP", "SLICE_S", "Incumbent", "Part", "solve_part"]

#: the unit of time of a model is (the incumbent's value) / 2^bits; by default bits is the least
#: that keeps twice the model's rounding error (epsilon) within a quarter of rel_gap times the value
#: (:func:`default_bits`), and at least this
MIN_PRECISION_BITS = 16
#: without an incumbent, the unit is (the crude bound) / 2^this (was 40: OR-Tools 9.15 refuted a
#: feasible part at 40 and 42 bits, docs/formulations.md §11.4)
CRUDE_BITS = MAX_PRECISION_BITS
#: a part is refuted when it holds no plan better than (1 - this) times the incumbent
DEFAULT_REL_GAP = 7.5e-6
#: before the proving pass, the PROBE_PARTS parts of least cheap bound are each searched for a
#: plan for at most PROBE_S seconds (:func:`probe_part`; params ``probe_parts``, ``probe_s``)
PROBE_PARTS = 8
PROBE_S = 2.0
#: seconds a model is optimized before it is cut off below its best plan and solved again
#: (0: every model stops at its first plan)
SLICE_S = 0.0


@dataclass
class Part:
    """One part of the plan space and what became of it."""

    space: Space
    inner: list[Choice]
    ends: dict[int, list[Choice]]
    #: the cheap lower bound of every plan of the part (objective units)
    cheap: float = 0.0
    #: "refuted by bound", "optimal", "refuted", "infeasible", "time limit", ...
    verdict: str = "not solved"
    #: a lower bound on the value of every plan of the part (objective units)
    bound: float = 0.0
    proven: bool = False
    seconds: float = 0.0
    solves: int = 0
    #: the evaluator's value of the best plan the part gave
    value: float | None = None


@dataclass
class Incumbent:
    """The best plan so far (its evaluator value) and what the models claimed."""

    value: float = math.inf
    plan: Plan | None = None
    #: the model's own value of ``plan`` (None: a warm start)
    claim: float | None = None
    #: the largest rounding error (epsilon) of a model that gave a plan or a proof
    eps_max: float = 0.0
    notes: list[str] = field(default_factory=list)


#: the CP-SAT parameters of every aggregated model: the per-layer model's guard against the inclusion
#: step (baselines/cpsat/params.py) but with presolve's probing on. Probing refuted a feasible part only
#: at 40 and 42 bits, which MAX_PRECISION_BITS now rules out, and without it the free batch-time models
#: of tiny chains took up to 10x longer (tests/baselines/test_aggregate.py seed 60: 140 s against 13 s;
#: docs/formulations.md §11.4)
AGGREGATE_PARAMETERS: dict[str, Any] = {k: v for k, v in GUARD_PARAMETERS.items() if k != "cp_model_probing_level"}


def _solver(options: Options, time_limit: float | None, stop_first: bool) -> cp_model.CpSolver:
    solver = cp_model.CpSolver()
    p = solver.parameters
    params = dict(options.params)
    p.num_workers = int(params.get("num_workers", max(1, int(options.threads))))
    p.random_seed = int(options.seed)
    p.relative_gap_limit = 0.0
    p.absolute_gap_limit = 0.0
    p.stop_after_first_solution = stop_first
    p.log_search_progress = bool(params.get("msg", False))
    if time_limit is not None:
        p.max_time_in_seconds = max(0.01, float(time_limit))
    for key, val in {**AGGREGATE_PARAMETERS, **dict(params.get("cp_params", {}))}.items():
        if val is None:
            continue
        try:
            setattr(p, key, val)
        except (AttributeError, TypeError, ValueError):
            raise SolverError(f"CP-SAT parameter {key!r} cannot be {val!r}") from None
    return solver


def _unit(value: float, bits: int) -> float:
    """value / 2^bits; 1 when the value is 0 (every time coefficient is then 0 too) or too
    small for a positive unit."""
    unit = value / 2.0**bits
    return unit if unit > 1e-300 else 1.0


def probe_part(problem: Problem, chain: Chain, part: Part, inc: Incumbent, options: Options, crude: float,
               limit: float, seconds: float, deadline: float | None = None) -> None:
    """Look for a plan of ``part`` better than the incumbent for at most ``seconds`` (CP-SAT
    optimizing, no proof asked): a plan found becomes the incumbent when the evaluator scores it
    better. Proves nothing and changes no verdict; it only gives the proving pass
    (:func:`solve_part`) a good incumbent early, so that parts are refuted against the best
    plan rather than climbed down to their own optimum."""
    rel_gap = float(dict(options.params).get("rel_gap", DEFAULT_REL_GAP))
    kind = options.objective
    fine = math.isfinite(inc.value)
    bits = _bits(options, chain, part.space, kind, rel_gap)
    unit = _unit(inc.value if fine else crude, bits if fine else CRUDE_BITS)
    eps = AggregateModel.epsilon_for(chain, part.space, kind, unit)
    cutoff = math.floor((inc.value + eps) / unit) if fine else None
    model = AggregateModel(problem.microbatches, limit, chain, part.space, part.inner, part.ends, kind, unit, cutoff)
    if deadline is not None:
        seconds = min(seconds, deadline - time.perf_counter())
        if seconds <= 0:
            return
    solver = _solver(options, max(0.01, seconds), False)
    code = solver.Solve(model.model)
    if code not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return
    plan = expand_plan(chain, part.space, part.inner, model.read(solver))
    score = evaluate(problem, plan)
    if score.oom:
        return
    value = score.value(kind)
    part.value = value if part.value is None else min(part.value, value)
    if value < inc.value:
        inc.value, inc.plan, inc.claim = value, plan, model.tight_objective(solver) * unit
        inc.eps_max = max(inc.eps_max, eps)


def _bits(options: Options, chain: Chain, space: Space, objective: str, rel_gap: float) -> int:
    """``params["precision_bits"]`` (at most MAX_PRECISION_BITS, else a SolverError), or
    :func:`default_bits` capped there (a gap too tight for it is then refused by the caller)."""
    given = options.params.get("precision_bits")
    if given is None:
        return min(MAX_PRECISION_BITS, default_bits(chain, space, objective, rel_gap))
    if not MIN_PRECISION_BITS <= int(given) <= MAX_PRECISION_BITS:
        raise SolverError(f"aggregate: params['precision_bits'] must lie in {MIN_PRECISION_BITS}..{MAX_PRECISION_BITS}, "
                          f"got {given} (above it OR-Tools 9.15's presolve gave wrong certificates: "
                          "docs/formulations.md §3.3)")
    return int(given)


def default_bits(chain: Chain, space: Space, objective: str, rel_gap: float) -> int:
    """The least bits b >= MIN_PRECISION_BITS with 2 epsilon <= rel_gap value / 4 when the unit
    is value / 2^b (epsilon is linear in the unit). Finer units make CP-SAT's proofs slower
    (measured: 30 bits with rel_gap 1e-5 leave Llama 3 405B unproven after 300 s)."""
    eps_units = AggregateModel.epsilon_for(chain, space, objective, 1.0)
    return max(MIN_PRECISION_BITS, math.ceil(math.log2(8 * eps_units / rel_gap)))


def solve_part(problem: Problem, chain: Chain, part: Part, inc: Incumbent, options: Options, crude: float,
               limit: float, deadline: float | None) -> None:
    """Solve ``part`` down to the incumbent (module docstring); updates ``part`` and ``inc``.
    ``limit``: the memory limit the models use (bytes); ``crude``: a value no plan exceeds."""
    params: dict[str, Any] = dict(options.params)
    rel_gap = float(params.get("rel_gap", DEFAULT_REL_GAP))
    if not 0 < rel_gap < 1:
        raise SolverError(f"aggregate: rel_gap must lie in (0, 1), got {rel_gap!r}")
    bits = _bits(options, chain, part.space, options.objective, rel_gap)
    slice_s = float(params.get("slice_s", SLICE_S))
    kind = options.objective
    start = time.perf_counter()
    exact = True
    while True:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            part.verdict = "time limit"
            break
        fine = math.isfinite(inc.value)
        unit = _unit(inc.value if fine else crude, bits if fine else CRUDE_BITS)
        eps = AggregateModel.epsilon_for(chain, part.space, kind, unit)
        cutoff = None
        if fine:
            if 2 * eps >= rel_gap * inc.value:
                raise SolverError(f"aggregate: precision_bits={bits} is too coarse for rel_gap={rel_gap:g} "
                                  f"(rounding {eps:.3g} per model)")
            cutoff = math.floor((inc.value * (1 - rel_gap) + eps) / unit)
        model = AggregateModel(problem.microbatches, limit, chain, part.space, part.inner, part.ends, kind, unit,
                               cutoff)
        exact = exact and model.memory_exact
        if deadline is not None:  # building a large model takes time too
            left = deadline - time.perf_counter()
            if left <= 0:
                part.verdict = "time limit"
                break
        # stop at the first plan (then cut off below it) unless asked to optimize for a slice
        stop_first = slice_s <= 0
        budget = left if stop_first else (slice_s if left is None else min(left, slice_s))
        solver = _solver(options, budget, stop_first)
        code = solver.Solve(model.model)
        part.solves += 1
        if code == cp_model.MODEL_INVALID:
            raise SolverError(f"aggregate: CP-SAT says the model of {part.space.label()} is invalid: "
                              f"{model.model.Validate()}")
        if code in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            obj = model.tight_objective(solver)
            plan = expand_plan(chain, part.space, part.inner, model.read(solver))
            score = evaluate(problem, plan)
            if score.oom:
                inc.notes.append(f"{part.space.label()}: the evaluator calls the model's plan out of memory "
                                 "(rounding); no proof for this part")
                part.verdict = "plan out of memory"
                break
            value = score.value(kind)
            part.value = value if part.value is None else min(part.value, value)
            if value < inc.value:
                inc.value, inc.plan, inc.claim = value, plan, obj * unit
                inc.eps_max = max(inc.eps_max, eps)
            if code == cp_model.OPTIMAL and fine:
                # proven: no plan of the part is below the bound (model units), i.e. below bound u - eps
                proof = math.ceil(solver.BestObjectiveBound() - 1e-6)
                part.verdict, part.proven, part.bound = "optimal", True, proof * unit - eps
                inc.eps_max = max(inc.eps_max, eps)
                break
            continue  # cut off below the (new) incumbent and solve again
        if code == cp_model.INFEASIBLE:
            part.verdict, part.proven = ("refuted" if cutoff is not None else "infeasible"), True
            part.bound = math.inf if cutoff is None else (cutoff + 1) * unit - eps
            inc.eps_max = max(inc.eps_max, eps)
            break
        part.verdict = "time limit"  # UNKNOWN: the slice or the time limit ran out without a plan
        part.bound = max(part.cheap, solver.BestObjectiveBound() * unit - eps)
        if stop_first or (left is not None and left <= slice_s):
            break
        part.verdict = "slice without a plan"
        slice_s *= 2
    if not exact:
        part.verdict += " (memory on a grid, rounded down)"
    if not part.proven:
        part.bound = max(part.bound, part.cheap) if part.verdict == "time limit" else part.cheap
    part.seconds = time.perf_counter() - start
