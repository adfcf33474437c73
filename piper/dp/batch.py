"""The batch-time objective over 1F1B plans on any graph: one front DP (:mod:`piper.dp.batch_run`)
per version-2 edge run, and per (t, d) for uniform plans; the best plan wins.

Edge runs (docs/problem.md §2.2, as for the TPS): with G < k, one run over plans on at most G
devices with cut edges at B_in and one over all plans with cut edges at B.  Each run's value is
exact for its own class (plans inside one node in the first, plans spanning nodes in the second)
and the second prices plans inside one node at B, so the least of the two runs' values bounds
the optimum from below whatever B_in is; the plan returned is the better one under the evaluator.
"""

from __future__ import annotations

import math

from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Candidates, Options, candidates
from piper.core.problem import Problem
from piper.dp.batch_run import batch_run
from piper.dp.chain import IdenticalChain, pair_classes
from piper.dp.ideals import enumerate_ideals, ideal_pairs
from piper.dp.knapsack import EXACT, GREEDY
from piper.dp.outcome import Outcome
from piper.dp.runs import UNIFORM_MAX_WORK, edge_runs, restrict

__all__ = ["solve_batch_1f1b"]


def _jobs(problem: Problem, options: Options, cand: Candidates,
          n_pairs: int) -> list[tuple[Problem, float, Candidates]]:
    """(run problem, its B_edge, its candidates) for every DP to run."""
    runs = edge_runs(problem)
    if not options.uniform:
        return [(prob, bw, candidates(prob, options)) for prob, bw in runs]
    k = problem.devices
    pairs_td = [(t, d) for t in cand.ts for d in cand.ds if t * d <= k
                and all(t in per_t for per_t in cand.tmpcs.values())]
    if len(pairs_td) * len(runs) * n_pairs > UNIFORM_MAX_WORK:
        raise SolverError(
            f"uniform plans need one DP per (t, d) pair: {len(pairs_td)} pairs x {len(runs)} edge-bandwidth run(s) "
            f"over {n_pairs} ideal pairs each, more than {UNIFORM_MAX_WORK:,} ideal-pair passes; use --linearize, "
            f"--no-dp / --no-tp, or fewer devices")
    out = []
    for t, d in pairs_td:
        for prob, bw in runs:
            c = candidates(prob, options)
            if c.infeasible_reason is None:
                c = restrict(c, t, d)
            if c is not None:
                out.append((prob, bw, c))
    return out


def solve_batch_1f1b(problem: Problem, options: Options, cand: Candidates, ub: float = math.inf,
                     deadline: float | None = None, chain: IdenticalChain | None = None) -> Outcome:
    """The least batch time over the 1F1B plans ``options`` allow (free or uniform), searching only
    below ``ub`` (a known plan's batch time; inf: none).  ``value`` is the evaluator's batch time
    of the plan found (none: nothing below ``ub``).  On an identical ``chain`` the stage tables
    are solved once per class of segments that cost the same."""
    mode = EXACT if options.knapsack == "exact" else GREEDY
    ideals = enumerate_ideals(problem, options.max_ideals, linearize=options.linearize)
    pairs = ideal_pairs(ideals)
    classes = None if chain is None else pair_classes(chain, ideals.sizes, pairs.ptr, pairs.sub)
    best_plan, best = None, ub
    lower = math.inf
    complete = True
    runs = []
    for prob, bw, c in _jobs(problem, options, cand, pairs.count):
        if c.infeasible_reason is not None:
            continue
        r = batch_run(prob, c, bw, ideals, pairs, mode, ub=best, deadline=deadline, classes=classes)
        complete = complete and r.complete
        lower = min(lower, r.lower)
        runs.append({"devices": prob.devices, "edge_bandwidth": bw, **r.stats})
        if r.plan is not None:
            got = evaluate(problem, r.plan).batch_time
            if got < best or best_plan is None and got <= best:
                best_plan, best = r.plan, got
        if not complete:
            break
    if not complete:
        lower = 0.0
    stats = {"ideals": len(ideals), "ideal_pairs": pairs.count, "runs": runs}
    if classes is not None:
        stats["pair_classes"] = int(classes[1].shape[0])
    if best_plan is None:
        return Outcome(None, math.inf, min(lower, ub), complete, stats)
    return Outcome(best_plan, best, min(lower, best), complete, stats)

