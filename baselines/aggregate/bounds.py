"""A cheap lower bound on every plan of a uniform part (docs/formulations.md §11.4): parts
whose bound is no better than the best plan known are refuted without a model.

For one option (t, d), L stages and B_edge, with kappa_min(v) the least stage-time share of
node v over its choices, W = sum_v kappa_min(v), P = sum_v (least p of v), and c_min the
cheapest edge of the chain (each of the L - 1 cut edges adds at least 2 c_min bytes to the
two stages it joins):

* TPS >= TPS_lb(L) = max(max_v kappa_min(v), (W + (L - 1) 4 c_min / (d B_edge)) / L)
  (the slowest stage is at least the average of the L stages);
* batch time = N TPS + sum tau - max tau >= max(N TPS_lb(L),
  (N - d) TPS_lb(L) + P + (L - 1) 4 c_min / B_edge), because max_j tau_j <= d TPS
  (d TPS_j = tau_j + d R_j / B_resync >= tau_j) and sum_j tau_j >= P + the cut edges.

The bound of the part is the least over its L. A part with a fixed sequence of options (a
free part split by sequence) takes kappa_min over its options and d the largest d of them.
"""

from __future__ import annotations

from baselines.aggregate.chain import Chain
from baselines.aggregate.data import Choice, Space
from piper.core.options import BATCH_TIME

__all__ = ["part_lower_bound"]


def part_lower_bound(chain: Chain, space: Space, inner: list[Choice], ends: dict[int, list[Choice]],
                     n_mb: int, objective: str) -> float:
    """The bound of the module docstring for a part with one option or a fixed sequence of
    options (kappa_min over the part's options, d the largest d); +inf when some node has no choice in it (no plan);
    else 0 for a free part."""
    if not inner or any(not lst for lst in ends.values()):
        return float("inf")
    if space.free:
        return 0.0
    d = max(d for _, d in space.options)
    k_in = min(c.kappa for c in inner)
    k_ends = [min(c.kappa for c in lst) for lst in ends.values()]
    w = chain.n_inner * k_in + sum(k_ends)
    single = max([k_in, *k_ends])
    p = chain.n_inner * min(c.p for c in inner) + sum(min(c.p for c in lst) for lst in ends.values())
    cut = 4.0 * min(chain.edge_costs, default=0.0) / space.bw_edge
    least, most = space.stage_range()
    best = float("inf")
    for stages in range(least, most + 1):
        tps = max(single, (w + (stages - 1) * cut / d) / stages)
        value = tps
        if objective == BATCH_TIME:
            value = max(n_mb * tps, (n_mb - d) * tps + p + (stages - 1) * cut)
        best = min(best, value)
    return best
