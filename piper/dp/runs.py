"""The DP's runs: version 2's edge-bandwidth runs and the (t, d) restriction of uniform plans."""

from __future__ import annotations

from dataclasses import replace

from piper.core.options import Candidates
from piper.core.problem import Problem

__all__ = ["UNIFORM_MAX_WORK", "edge_runs", "restrict"]

#: uniform plans: refuse when (DPs to run) x (ideal pairs of one DP) exceeds this. GNMT (k = 10,
#: 15.5 M ideal pairs, 4 (t, d) pairs: 62 M) took 336 s uniform (2 cores, under load) against
#: seconds for its ordinary DP: one (t, d) at a time defeats the table engine's pruning.
#: BERT-32 (k = 512: 68 DPs x 890 pairs) takes ~8 s.
UNIFORM_MAX_WORK = 20_000_000


def edge_runs(problem: Problem) -> list[tuple[Problem, float]]:
    """(the run's problem, its B_edge in bytes/s): [(problem, B_in)] when G >= k; else
    [(problem with k = G, B_in), (problem, B)] (docs/problem.md §2.2)."""
    g, k = problem.node_size, problem.devices
    if g >= k:
        return [(problem, problem.bandwidth_intra)]
    return [(replace(problem, devices=g), problem.bandwidth_intra), (problem, problem.bandwidth)]


def restrict(cand: Candidates, t: int, d: int) -> Candidates | None:
    """``cand`` with only the pair (t, d) allowed (None when some layer lacks t or d is not allowed)."""
    if t not in cand.ts or d not in cand.ds:
        return None
    tmpcs = {}
    for v, per_t in cand.tmpcs.items():
        if t not in per_t:
            return None
        tmpcs[v] = {t: per_t[t]}
    return Candidates(ts=(t,), ds=(d,), tmpcs=tmpcs, infeasible_reason=cand.infeasible_reason)
