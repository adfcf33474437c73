"""Exhaustive optimal solver for tiny graphs: the test oracle.

Written independently of the DP and the models, to be obviously right:

* every ordered partition of the layers into non-empty stages whose order
  respects the edges (stage(u) <= stage(v)) is enumerated, built from the last
  stage backwards (the last stage is a non-empty set with no successor outside
  it among the layers still unplaced);
* for every stage every (t, d) with t usable by all its layers, N mod d = 0,
  within the remaining device budget (sum d*t <= k) and microbatch budget
  (sum d <= N); building backwards, the suffix sum D of d is known, so the
  stage's y = ceil(D / d) is known too;
* within a stage, every combination of one allowed TMPC per layer is tried,
  keeping the fastest that fits in memory (the stages' choices are
  independent once the partition and all (t, d) are fixed);
* the search keeps the plan with the smallest max stage time; a branch is cut
  only when a stage already placed is at least as slow as the best complete
  plan found (so cutting never loses a better plan).

Empty stages are never needed (docs/problem.md, fact F2). The stage time is
computed here from the formula, not by the evaluator; the returned plan is
then scored by the evaluator like every other solver's (``make_result``).

Version 2 (docs/problem.md §2) is honoured in full, again
by its own few lines: memory a*y + b + s/d, resync f (d-1) w / (d N) at B_in
when the stage fits in a node (d t <= G) else at B, and edge bytes at B_in
when the whole plan fits in a node (sum d t <= G) else at B. The last is a
property of the whole plan, so the search runs twice: over plans with
sum d t <= min(G, k) (edges at B_in), then, when G < k, over plans with
sum d t > G (edges at B); the better of the two is the optimum.

Uniform plans (``Options.uniform``, docs/problem.md §2.5): every stage has the same
(d, t); the search then fixes them at the last stage (the first one built) and
filters every earlier stage to the same pair.
"""

from __future__ import annotations

import itertools
import math
import time
from functools import lru_cache

from piper.core.errors import SolverError
from piper.core.options import Options, candidates
from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result

__all__ = ["solve_brute", "MAX_NODES"]

#: largest graph the brute force accepts
MAX_NODES = 8


def solve_brute(problem: Problem, options: Options | None = None) -> Result:
    """Exhaustive search; refuses graphs with more than :data:`MAX_NODES` layers."""
    options = options or Options()
    if problem.n > MAX_NODES:
        raise SolverError(f"brute force handles at most {MAX_NODES} layers; this graph has {problem.n}")
    start = time.perf_counter()
    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return make_result(problem, "brute", Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           message=cand.infeasible_reason)
    deadline = None if options.time_limit_s is None else start + options.time_limit_s

    ids = [nd.id for nd in problem.nodes]
    n = len(ids)
    pos = {v: i for i, v in enumerate(ids)}
    succ_mask = [0] * n
    for e in problem.edges:
        succ_mask[pos[e.u]] |= 1 << pos[e.v]
    k, n_mb, bw = problem.devices, problem.microbatches, problem.bandwidth
    memory_limit = problem.memory_per_device
    # version 2: G devices per node (default k), B_in inside a node (default B), f (default 4)
    node_g = k if problem.devices_per_node is None else problem.devices_per_node
    bw_in = bw if problem.intra_node_bandwidth is None else problem.intra_node_bandwidth
    factor = 4.0 if problem.allreduce_factor is None else problem.allreduce_factor

    @lru_cache(maxsize=None)
    def stage_best(mask: int, t: int, d: int, y: int, bw_edge: float) -> tuple[float, tuple[str, ...]] | None:
        """Fastest TMPC choice for the stage (bitmask) at (t, d, y) that fits in memory,
        its cut edges running at ``bw_edge`` bytes/s."""
        bw_resync = bw_in if d * t <= node_g else bw
        members = [ids[i] for i in range(n) if mask >> i & 1]
        member_set = set(members)
        choices = []
        for v in members:
            allowed = cand.tmpcs[v].get(t)
            if not allowed:
                return None
            choices.append([c for _, c in allowed])
        best: tuple[float, tuple[str, ...]] | None = None
        for combo in itertools.product(*choices):
            memory = sum(c.memory_a * y + c.memory_b + c.memory_sharded / d for c in combo)
            if memory > memory_limit:
                continue
            compute = sum(c.time_per_sample for c in combo)
            resync = sum(factor * (d - 1) * c.parameter_size / (d * n_mb) for c in combo)
            edge = 0.0
            for v, c in zip(members, combo):
                for e in problem.in_edges[v]:
                    if e.u not in member_set:
                        edge += 2.0 * (e.communication_cost + c.sync_fw[e.u])
                for e in problem.out_edges[v]:
                    if e.v not in member_set:
                        edge += 2.0 * (e.communication_cost + c.sync_bw[e.v])
            if bw_edge == bw_resync:
                tps = (edge / d + resync) / bw_edge + compute / d
            else:
                tps = edge / (d * bw_edge) + resync / bw_resync + compute / d
            if best is None or tps < best[0]:
                best = (tps, tuple(c.id for c in combo))
        return best

    def tail_sets(remaining: int):
        """Non-empty subsets S of ``remaining`` with no edge from S to remaining \\ S."""
        sub = remaining
        while sub:
            rest = remaining & ~sub
            if all(not (sub >> i & 1) or not (succ_mask[i] & rest) for i in range(n)):
                yield sub
            sub = (sub - 1) & remaining

    best_value = math.inf
    best_stages: list[tuple[int, int, int, tuple[str, ...]]] | None = None
    timed_out = False

    uniform = options.uniform

    def search(remaining: int, devices_left: int, d_left: int, suffix_d: int, worst: float,
               stages: list[tuple[int, int, int, tuple[str, ...]]]) -> None:
        nonlocal best_value, best_stages, timed_out
        if remaining == 0:
            if budget - devices_left < min_devices:
                return  # this pass is for plans that span nodes (sum d*t > G)
            if worst < best_value:
                best_value, best_stages = worst, list(stages)
            return
        if deadline is not None and time.perf_counter() > deadline:
            timed_out = True
            return
        for mask in tail_sets(remaining):
            for t in cand.ts:
                for d in cand.ds:
                    if d * t > devices_left or d > d_left:
                        continue
                    if uniform and stages and (stages[0][1], stages[0][2]) != (t, d):
                        continue  # uniform plans: every stage has the last stage's (t, d)
                    total_d = suffix_d + d
                    y = -(-total_d // d)
                    got = stage_best(mask, t, d, y, bw_edge)
                    if got is None:
                        continue
                    new_worst = max(worst, got[0])
                    if new_worst >= best_value:
                        continue
                    stages.append((mask, t, d, got[1]))
                    search(remaining & ~mask, devices_left - d * t, d_left - d, total_d, new_worst, stages)
                    stages.pop()

    # pass 1: plans inside one node (sum d*t <= min(G, k)), edges at B_in;
    # pass 2 (when G < k): plans spanning nodes (sum d*t > G), edges at B
    passes = [(min(node_g, k), 0, bw_in)]
    if node_g < k:
        passes.append((k, node_g + 1, bw))
    for budget, min_devices, bw_edge in passes:
        search((1 << n) - 1, budget, n_mb, 0, 0.0, [])
    elapsed = time.perf_counter() - start
    plan = None
    if best_stages is not None:
        stages = []
        for mask, t, d, names in reversed(best_stages):
            members = tuple(ids[i] for i in range(n) if mask >> i & 1)
            stages.append(Stage(members, d, t, dict(zip(members, names))))
        plan = Plan(tuple(stages))
    if timed_out:
        status = Status.FEASIBLE if plan is not None else Status.UNKNOWN
        return make_result(problem, "brute", status, plan, time_s=elapsed, objective=best_value if plan else None,
                           message="time limit reached")
    if plan is None:
        return make_result(problem, "brute", Status.INFEASIBLE, None, time_s=elapsed,
                           message="no plan fits in memory within the device and microbatch budgets")
    return make_result(problem, "brute", Status.OPTIMAL, plan, time_s=elapsed, objective=best_value)
