"""The order in which each replica of a plan runs its passes, and the activation memory that order holds.

The schedules of docs/problem.md §2.4 (1F1B, PipeDream-Flush) and §9 (Megatron-LM's interleaved 1F1B,
Narayanan et al. SC'21 §2.2.2), pass by pass:

* 1F1B: stage i's replica runs y_i - 1 warm-up forwards (y_i its micro-batches in flight,
  ``StageScore.y``), then one forward and one backward alternately, then the remaining backwards;
* interleaved: the forward of virtual micro-batch q runs chunk (q div L) mod v of micro-batch
  (q div L v) L + q mod L; backwards visit the chunks in reverse; warm-up 2 (L - g - 1) + (v - 1) L
  passes on group g.

:mod:`piper.render.timeline` plays the order out in time; :func:`activation_peaks` counts the
activations it holds.
"""

from __future__ import annotations

from piper.core.evaluate import Score, check_plan
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["activation_peaks", "pass_orders", "schedule_order_memory"]


def pass_orders(plan: Plan, score: Score, n_mb: int,
                replicas: int | None = None) -> dict[tuple[int, int], list[tuple[str, int, int]]]:
    """(group, replica) -> its passes in order: (kind, chunk, micro-batch); only the first
    ``replicas`` replicas of each group when given."""
    orders: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
    groups = plan.groups
    if not plan.schedule.interleaved:
        for i, st in enumerate(score.stages):
            for r in range(min(st.d, replicas or st.d)):
                mine = list(range(r, n_mb, st.d))
                m = len(mine)
                warm = min(int(st.y) - 1, m)
                seq = [("F", i, k) for k in mine[:warm]]
                for j in range(m - warm):
                    seq += [("F", i, mine[warm + j]), ("B", i, mine[j])]
                seq += [("B", i, k) for k in mine[m - warm:]]
                orders[i, r] = seq
        return orders
    v = plan.schedule.virtual_stages
    for g, st in enumerate(score.stages):
        for r in range(min(st.d, replicas or st.d)):
            mine = list(range(r, n_mb, st.d))
            m = len(mine)
            total = m * v

            def forward(q: int, g: int = g, mine: list[int] = mine) -> tuple[str, int, int]:
                c = (q // groups) % v
                return "F", c * groups + g, mine[(q // (groups * v)) * groups + q % groups]

            def backward(q: int, g: int = g, mine: list[int] = mine) -> tuple[str, int, int]:
                c = v - 1 - (q // groups) % v
                return "B", c * groups + g, mine[(q // (groups * v)) * groups + q % groups]

            warm = min(2 * (groups - g - 1) + (v - 1) * groups, total)
            seq = [forward(q) for q in range(warm)]
            for j in range(total - warm):
                seq += [forward(warm + j), backward(j)]
            seq += [backward(q) for q in range(total - warm, total)]
            orders[g, r] = seq
    return orders


def activation_peaks(problem: Problem, plan: Plan, score: Score) -> tuple[float, ...]:
    """Per device group (stage, for 1F1B): the most activation bytes (``memoryUsageA`` of each
    chunk's chosen TMPCs, per micro-batch) replica 0 holds at once when its passes run in the
    schedule's order (:func:`pass_orders`): a chunk's activations of a micro-batch are held from its
    forward pass to its backward pass, and the peak is taken after each forward pass.

    The evaluator charges y_g x (the group's activation bytes) (docs/problem.md §9.2), which is this
    peak when the group's chunks hold equal activations: then only the number of chunk-micro-batches
    in flight matters. With unequal chunks the schedule holds more micro-batches of its first chunks
    at times (a group's first chunk keeps up to m micro-batches while the later chunks drain), so the
    true peak can lie above or below the evaluator's figure; this is a diagnostic, not the spec."""
    chosen = check_plan(problem, plan)
    per_chunk = [sum(chosen[u].memory_a for u in s.nodes) for s in plan.stages]
    orders = pass_orders(plan, score, problem.microbatches, replicas=1)
    peaks = []
    for g in range(plan.groups):
        total = best = 0.0
        for kind, chunk, _mb in orders[g, 0]:
            if kind == "F":
                total += per_chunk[chunk]
                best = max(best, total)
            else:
                total -= per_chunk[chunk]
        peaks.append(best)
    return tuple(peaks)


def schedule_order_memory(problem: Problem, plan: Plan, score: Score) -> tuple[float, ...]:
    """Per device group: its memory with the activations counted by the schedule's pass order
    (:func:`activation_peaks`) instead of the evaluator's y_g x activations, bytes per device; the
    rest of the group's memory (weights, state, expert terms) as the evaluator counts it."""
    chosen = check_plan(problem, plan)
    peaks = activation_peaks(problem, plan, score)
    out = []
    for g, st in enumerate(score.stages):
        chunks = st.chunks or (g,)
        held = sum(chosen[u].memory_a for j in chunks for u in plan.stages[j].nodes)
        out.append(st.memory - st.y * held + peaks[g])
    return tuple(out)
