"""Interleaved plans of a graph that is not an identical chain: a heuristic with a proven bound.

The exact search by counts (:mod:`piper.dp.groups`) needs interchangeable layers.  On any other
graph the DP returns the best of a few interleaved plans: for each layout (t, d, L, v) in the order
of its lower bound, a few topological orders (the graph's own and :data:`RANDOM_ORDERS` random
ones) cut into L v chunks (every way when there are at most
:data:`ALL_CUTS` ways, else near-equal sizes and :data:`RANDOM_CUTS` random ways), each device
group's TMPCs chosen by the knapsack over its layers at its y_g (exact for that chunking).  Its
bound is the least layout bound (:func:`piper.dp.groups.layouts`), which holds for every
interleaved plan of any graph; the status is therefore "feasible" unless the plan meets it.
"""

from __future__ import annotations

import itertools
import math
import random

import numpy as np

from piper.core.evaluate import add_cut_bytes, evaluate
from piper.core.options import Candidates
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.problem import Problem
from piper.dp.arrays import option_resync_memory
from piper.dp.compile_clock import solve_clock
from piper.dp.groups import Layout, layouts
from piper.dp.knapsack import knapsack
from piper.dp.limits import past
from piper.dp.outcome import Outcome

__all__ = ["interleaved_heuristic", "MAX_LAYOUTS", "ALL_CUTS", "RANDOM_CUTS"]

#: layouts tried at most
MAX_LAYOUTS = 400
#: every way of cutting the order into chunks is tried when there are at most this many
ALL_CUTS = 64
#: otherwise the near-equal cut and this many random ones
RANDOM_CUTS = 8
#: random topological orders tried besides the graph's own (a DAG's chunks need not follow one order)
RANDOM_ORDERS = 3


def _orders(problem: Problem, rng: random.Random) -> list[list[int]]:
    """The graph's topological order and up to :data:`RANDOM_ORDERS` other random ones (node ids)."""
    out = [list(problem.topological_order)]
    for _ in range(RANDOM_ORDERS):
        indeg = {nd.id: len(problem.in_edges[nd.id]) for nd in problem.nodes}
        ready = sorted(v for v, c in indeg.items() if c == 0)
        order = []
        while ready:
            v = ready.pop(rng.randrange(len(ready)))
            order.append(v)
            for e in problem.out_edges[v]:
                indeg[e.v] -= 1
                if indeg[e.v] == 0:
                    ready.append(e.v)
        if order not in out:
            out.append(order)
    return out


def _cuttings(n: int, parts: int, rng: random.Random) -> list[list[int]]:
    """Chunk boundaries [0, ..., n] of ``parts`` non-empty chunks of n layers (see the module docstring)."""
    if math.comb(n - 1, parts - 1) <= ALL_CUTS:
        return [[0, *inner, n] for inner in itertools.combinations(range(1, n), parts - 1)]
    out = [[round(j * n / parts) for j in range(parts + 1)]]
    for _ in range(RANDOM_CUTS):
        out.append([0, *sorted(rng.sample(range(1, n), parts - 1)), n])
    return out


def _plan_of(problem: Problem, cand: Candidates, order: list[int], lay: Layout, cuts: list[int],
             mode: int) -> Plan | None:
    """The layout's plan with the chunks ``order[cuts[j]:cuts[j + 1]]`` (node ids) and each group's
    TMPCs by the knapsack; None when some group fits no choice."""
    L, v, d, t = lay.groups, lay.v, lay.d, lay.t
    n_mb, f = problem.microbatches, problem.resync_factor
    chunks = [order[cuts[j]:cuts[j + 1]] for j in range(L * v)]
    names: dict[int, str] = {}
    for g in range(L):
        y = lay.y(g, n_mb)
        off, cost, mem, labels = [0], [], [], []
        for chunk in chunks[g::L]:
            members = set(chunk)
            for u in chunk:
                for _, c in cand.tmpcs[u][t]:
                    edge = add_cut_bytes(0.0, problem, u, c, members)
                    resync, memory = option_resync_memory(c, d, t, f, n_mb, y, problem.memory_cap)
                    cost.append(edge / (d * lay.bw_edge) + resync / lay.bw_resync + c.time_per_sample / d)
                    mem.append(memory)
                    labels.append((u, c.id))
                off.append(len(cost))
        choice = np.empty(len(off) - 1, dtype=np.int64)
        val = knapsack(mode, np.array(off, dtype=np.int64), np.array(cost), np.array(mem),
                       problem.memory_cap, choice)
        if math.isinf(val):
            return None
        for q in choice:
            u, name = labels[int(q)]
            names[u] = name
    stages = tuple(Stage(tuple(ch), d, t, {u: names[u] for u in ch}) for ch in chunks)
    return Plan(stages, Schedule(INTERLEAVED, v))


def interleaved_heuristic(problem: Problem, cand: Candidates, kinds: tuple[int, ...], batch: bool, mode: int,
                          deadline: float | None = None, linearize: bool = False) -> Outcome:
    """The best plan of the heuristic (module docstring) with v in ``kinds`` (all >= 2); ``lower``
    bounds every interleaved plan with those v.  ``linearize``: chunks of the graph's own
    topological order only (``Options.linearize``)."""
    t0 = solve_clock()
    order = list(problem.topological_order)
    positions = tuple(problem.index[v] for v in order)
    lays = layouts(problem, cand, positions, kinds, batch)
    if not lays:
        return Outcome(None, math.inf, math.inf, True, {"layouts": 0})
    objective = "batch-time" if batch else "tps"
    best, plan = math.inf, None
    tried = 0
    rng = random.Random(0)
    orders = _orders(problem, rng)[:1] if linearize else _orders(problem, rng)
    for lay in lays[:MAX_LAYOUTS]:
        if lay.lower >= best or past(deadline):
            break
        tried += 1
        for order in orders:
            for cuts in _cuttings(len(order), lay.groups * lay.v, rng):
                got = _plan_of(problem, cand, order, lay, cuts, mode)
                if got is None:
                    continue
                score = evaluate(problem, got)
                if not score.oom and score.value(objective) < best:
                    best, plan = score.value(objective), got
    return Outcome(plan, best, min(lays[0].lower, best), True,
                   {"layouts": len(lays), "layouts_tried": tried, "heuristic": True, "groups_s": solve_clock() - t0})
