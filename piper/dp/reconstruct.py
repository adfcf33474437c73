"""Plan reconstruction: the stages behind a DP value, written once for both engines.

An engine's walk yields one :class:`StageStep` per stage, from the last stage (the one
holding the sinks of the full ideal) to the first; :func:`build_plan` solves each
stage's knapsack again and names its TMPCs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import NamedTuple

import numpy as np

from piper.core.errors import SolverError
from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.dp.arrays import Limits, RunArrays
from piper.dp.stage import stage_choice
from piper.dp.table_kernels import DegreePairs, IdealGraph, table_step
from piper.dp.threshold import Search


class StageStep(NamedTuple):
    """One stage of the plan: I \\ J (ideal indices) at degrees (t, d), with y microbatches in
    flight (y = ceil(s / d) for its budget s)."""

    ideal: int
    sub: int
    t: int
    d: int
    y: int


def build_plan(problem: Problem, run: RunArrays, lim: Limits, words: np.ndarray, mode: int,
               steps: Iterable[StageStep]) -> tuple[Plan, float]:
    """The plan of the stages ``steps`` (last stage first, as the walks yield them), each
    stage's TMPCs chosen by the knapsack ``mode``; and the largest stage value (time per sample)."""
    t_index = {int(t): i for i, t in enumerate(run.layers.ts)}
    stages: list[Stage] = []
    worst = 0.0
    for step in steps:
        nodes, chosen, val = stage_choice(run.layers, lim, words, step.ideal, step.sub, t_index[step.t], step.d,
                                           step.y, mode)
        worst = max(worst, float(val))
        ids = tuple(problem.nodes[int(v)].id for v in nodes)
        names = {problem.nodes[int(v)].id: run.labels[int(q)][2] for v, q in zip(nodes, chosen)}
        stages.append(Stage(ids, step.d, step.t, names))
    return Plan(tuple(stages)), worst


def threshold_steps(search: Search, idx: int) -> Iterator[StageStep]:
    """The threshold engine's walk: the stages behind m(cands[idx]) (re-running that test to
    fill the choice tables), following the entry that attained f[I, s] and the budget s that
    attained g[I, s]."""
    tab = search.tb.arrays
    search.run_test(idx, timed=False)
    walk = search.walk
    cur = search.tb.ideals.full
    s = int(walk.best_budget[cur, search.S])
    while cur != 0:
        e = int(walk.entry[cur, s])
        if e < 0:
            raise SolverError(f"internal error: DP reconstruction lost its way at ideal {cur}, budget {s}")
        J, t, d = int(tab.entries.sub[e]), int(tab.entries.t[e]), int(tab.entries.d[e])
        yield StageStep(cur, J, t, d, -(-s // d))
        cur = J
        if cur != 0:
            s = int(walk.best_budget[cur, s - d])


def table_steps(run: RunArrays, lim: Limits, graph: IdealGraph, opts: DegreePairs, mode: int, dpm: np.ndarray,
                full: int) -> Iterator[StageStep]:
    """The table engine's walk from dpm[full, k, S]: at each ideal, a sub-ideal and option whose
    term is no larger than the table's value there."""
    cur, kap, s = full, lim.devices, lim.budget
    target = float(dpm[full, kap, s])
    while cur != 0:
        J, o, kk, ss = table_step(run.layers, lim, graph, opts, mode, dpm, cur, kap, s, target)
        if J < 0:
            raise SolverError(f"internal error: DP reconstruction lost its way at ideal {cur}")
        t, d = int(opts.t[o]), int(opts.d[o])
        yield StageStep(cur, int(J), t, d, -(-int(ss) // d))
        cur, kap, s = int(J), int(kk) - t * d, int(ss) - d
        target = float(dpm[cur, kap, s])
