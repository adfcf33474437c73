"""``solve_aggregate``: the aggregated exact model for chains of identical layers (solver
``aggregate``; docs/formulations.md §11).

1. The chain is detected from the numbers (:func:`detect_chain`); any other graph is refused
   with one line (a :class:`SolverError`).
2. The plan space is cut into parts, each solved with CP-SAT models over layer counts
   (:class:`AggregateModel`): per edge bandwidth (plans inside a node / spanning nodes) and,
   for uniform plans, per option (t, d) and stage count L. Parts are taken in the order of a cheap lower bound
   (:func:`part_lower_bound`); a part whose bound is no better than the incumbent is refuted
   without a model, every other one is solved down to the incumbent (:func:`solve_part`).
3. Plans are expanded from the counts (:func:`expand_plan`) and scored by the evaluator
   (``make_result``). The status is "optimal" only when every part is refuted or solved with
   exact memory; ``Result.tolerance`` is then the certified gap, value - bound (at most rel_gap
   times the value plus twice the largest rounding error of a model, docs/formulations.md
   §11.4), or the model's error on its claim if larger.

Knobs (``Options.params``): ``rel_gap`` (default 7.5e-6: a part counts as refuted when it holds
no plan better than (1 - rel_gap) times the incumbent), ``precision_bits`` (default: the least
that keeps twice a model's rounding error within rel_gap / 4 of the value, at least 16 and at
most 30: docs/formulations.md §3.3, §11.4; a model's unit of time is the incumbent's value / 2^bits), ``slice_s`` (seconds a model is
optimized before it is cut off below its best plan and solved again; default 0: every model
stops at its first plan),
``num_workers`` (CP-SAT workers, default ``options.threads``), ``msg`` (CP-SAT's log),
``cp_params`` (any CP-SAT parameter), ``max_sequences`` (free plans: split the space by the
sequence of stage options (t, d) when there are at most this many, default 2000; else one
model chooses the options), ``probe_parts`` and ``probe_s`` (before the proofs, the 8 parts
of least cheap bound are each searched for a plan for at most 2 s, so that the proofs start
from a good incumbent). ``Options.warm_start``: a plan to beat (the first
incumbent).
"""

from __future__ import annotations

import math
import time
from typing import Any

from baselines.aggregate.bounds import part_lower_bound
from baselines.aggregate.chain import Chain, detect_chain
from baselines.aggregate.data import choices, free_spaces, uniform_spaces
from baselines.aggregate.search import DEFAULT_REL_GAP, PROBE_PARTS, PROBE_S, Incumbent, Part, probe_part, solve_part
from piper.core.errors import PlanError, SolverError
from piper.core.evaluate import evaluate
from piper.core.options import BATCH_TIME, Candidates, Options, candidates
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result

__all__ = ["solve_aggregate"]

NAME = "aggregate"
#: free plans are split by their sequence of stage options when there are at most this many
MAX_SEQUENCES = 2000


def _parts(problem: Problem, cand: Candidates, chain: Chain, uniform: bool, max_sequences: int) -> list[Part]:
    spaces = uniform_spaces(problem, cand, chain) if uniform else free_spaces(problem, cand, chain, max_sequences)
    inner_fw = chain.inner[1] if chain.n_inner >= 2 else chain.inner[0]
    inner_bw = chain.inner[-2] if chain.n_inner >= 2 else chain.inner[0]
    out = []
    for space in spaces:
        inner = choices(problem, cand, space, chain.inner[0], sync_nodes=(inner_fw, inner_bw))
        ends = {e: choices(problem, cand, space, chain.order[e]) for e in chain.ends}
        out.append(Part(space, inner, ends))
    return out


def _crude_bound(problem: Problem, chain: Chain, parts: list[Part], batch: bool) -> float:
    """A value no plan of any part exceeds (objective units): every node at its slowest
    choice in one stage with two cut edges at their dearest, and for the batch time N such
    TPS plus J such taus."""
    worst = 0.0
    syncs = [max(c.fw, c.bw) for p in parts for c in p.inner]
    syncs += [max(c.fw, c.bw) for p in parts for lst in p.ends.values() for c in lst]
    beta = 2.0 * (max(chain.edge_costs, default=0.0) + max(syncs, default=0.0))
    for p in parts:
        if not p.inner or any(not lst for lst in p.ends.values()):
            continue
        d_min = min(d for _, d in p.space.options)
        tps = (chain.n_inner * max(c.kappa for c in p.inner) + sum(max(c.kappa for c in lst) for lst in p.ends.values())
               + 2 * beta / (d_min * p.space.bw_edge)
               # the exposed resync (iteration keys): at most every positive rex
               + chain.n_inner * max(0.0, *(c.rex for c in p.inner))
               + sum(max(0.0, *(c.rex for c in lst)) for lst in p.ends.values()))
        tau = (chain.n_inner * max(c.p for c in p.inner) + sum(max(c.p for c in lst) for lst in p.ends.values())
               + 2 * beta / p.space.bw_edge)
        worst = max(worst, problem.microbatches * tps + p.space.slots * tau if batch else tps)
    return worst


def _warm_value(problem: Problem, options: Options, cand: Candidates, plan: Plan | None) -> tuple[float, str]:
    """The warm start's value under the objective, or +inf with why it is not used."""
    if plan is None:
        return math.inf, ""
    if plan.schedule.interleaved:
        return math.inf, "warm start ignored: an interleaved plan"
    try:
        score = evaluate(problem, plan)
    except PlanError as exc:
        return math.inf, f"warm start ignored: {exc}"
    if score.oom:
        return math.inf, "warm start ignored: out of memory"
    if options.uniform and len({(s.d, s.t) for s in plan.stages}) > 1:
        return math.inf, "warm start ignored: not uniform"
    for s in plan.stages:
        if s.t not in cand.ts or s.d not in cand.ds or any(x in options.exclude_tmpcs for x in s.tmpcs.values()):
            return math.inf, "warm start ignored: it uses a degree or TMPC the options exclude"
    return score.value(options.objective), ""


def _model_limit(problem: Problem, chain: Chain) -> float:
    """The memory cap M (1 + MEMORY_RTOL) (docs/problem.md §3.3) plus a power of two above the
    floating-point error of the evaluator's memory sum
    (about (2 n + 8) 2^-53 M): the models are then a relaxation of the evaluator's memory test,
    so their bounds hold; a plan one accepts that the evaluator calls out of memory is dropped
    (and its part is not proven)."""
    m = problem.memory_cap
    slack = m * (2 * chain.n + 8) * 2.0**-53
    return m + 2.0 ** math.ceil(math.log2(slack)) if slack > 0 else m


def solve_aggregate(problem: Problem, options: Options | None = None) -> Result:
    """Solve a chain of identical layers exactly (module docstring); refuse any other graph."""
    options = options or Options()
    start = time.perf_counter()
    if max(options.virtual_stage_choices()) > 1:
        raise SolverError("solver 'aggregate' plans 1F1B schedules only; use --max-virtual-stages 1")
    chain = detect_chain(problem)
    kind = options.objective
    cand = candidates(problem, options)
    stats: dict[str, Any] = {"chain": chain.describe(), "uniform": options.uniform}
    if cand.infeasible_reason is not None:
        return make_result(problem, NAME, Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           message=cand.infeasible_reason, stats=stats, objective_kind=kind)
    deadline = None if options.time_limit_s is None else start + options.time_limit_s
    max_sequences = int(options.params.get("max_sequences", MAX_SEQUENCES))
    parts = _parts(problem, cand, chain, options.uniform, max_sequences)
    crude = _crude_bound(problem, chain, parts, kind == BATCH_TIME)
    for p in parts:
        p.cheap = part_lower_bound(chain, p.space, p.inner, p.ends, problem.microbatches, kind)
    parts.sort(key=lambda p: p.cheap)
    inc = Incumbent()
    inc.value, why = _warm_value(problem, options, cand, options.warm_start)
    if math.isfinite(inc.value):
        inc.plan = options.warm_start
    elif why:
        inc.notes.append(why)
    limit = _model_limit(problem, chain)
    probe_s = float(options.params.get("probe_s", PROBE_S))
    for p in [p for p in parts if math.isfinite(p.cheap)][:int(options.params.get("probe_parts", PROBE_PARTS))]:
        left = None if deadline is None else deadline - time.perf_counter()
        if left is not None and left <= 0:
            break
        if p.cheap * (1 - 1e-12) < inc.value and probe_s > 0:
            probe_part(problem, chain, p, inc, options, crude, limit, probe_s, deadline)
    for p in parts:
        if math.isinf(p.cheap) or p.cheap * (1 - 1e-12) >= inc.value:
            p.verdict, p.bound, p.proven = "refuted by bound", p.cheap, True
            continue
        solve_part(problem, chain, p, inc, options, crude, limit, deadline)

    elapsed = time.perf_counter() - start
    proven = all(p.proven for p in parts)
    bound = min((p.bound for p in parts), default=math.inf)
    stats["parts"] = [{"part": p.space.label(), "cheap_bound": p.cheap, "verdict": p.verdict, "bound": p.bound,
                       "value": p.value, "solves": p.solves, "seconds": round(p.seconds, 3)} for p in parts]
    stats["models"] = sum(p.solves for p in parts)
    rel_gap = float(options.params.get("rel_gap", DEFAULT_REL_GAP))
    if inc.plan is None:
        status = Status.INFEASIBLE if proven else Status.UNKNOWN
        return make_result(problem, NAME, status, None, time_s=elapsed, bound=math.inf if proven else max(0.0, bound),
                           stats=stats, objective_kind=kind,
                           message="; ".join(inc.notes + ([] if proven else ["time limit"])))
    bound = max(0.0, min(bound, inc.value))
    # the claim's own error (a model's value of its plan is within its epsilon of the evaluator's)
    claim_error = 0.0 if inc.claim is None else abs(inc.claim - inc.value)
    if proven:
        # certified: the optimum lies in [bound, value]; the tolerance is that gap (at most
        # rel_gap value + 2 epsilon by docs/formulations.md §11.4), or the claim's error if larger
        tolerance = max(inc.value - bound, claim_error)
    else:
        tolerance = max(rel_gap * inc.value + 2 * inc.eps_max, claim_error)
    status = Status.OPTIMAL if proven else Status.FEASIBLE
    if not proven:
        inc.notes.append("time limit: not every part is refuted")
    return make_result(problem, NAME, status, inc.plan, time_s=elapsed, objective=inc.claim, bound=bound,
                       stats=stats, objective_kind=kind, tolerance=tolerance, message="; ".join(inc.notes))
