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

Version 3 (docs/problem.md §9), again by its own few lines:

* the ``batch-time`` objective, N max_i TPS_i + sum_i tau_i - max_i tau_i for 1F1B: a stage's
  TMPC choices are kept as the set of (TPS_i, tau_i) pairs no other choice beats in both
  (the batch time never decreases when one stage's TPS or tau grows), and the search tries
  each; a branch is cut when N max TPS + sum tau - max tau of the stages placed so far (a
  value later stages can only raise) is no better than the best plan;
* interleaved plans (``Options.max_virtual_stages`` >= 2): for every v allowed, every number
  of device groups L >= 2, every (t, d) with m = N / d a multiple of L and L d t <= k, every
  sequence of L v non-empty chunks in pipeline order; chunk j on group j mod L; per group
  every combination of TMPCs of its nodes that fits at y_g = min(m, (2 (L - g - 1) + (v - 1) L
  + 1) / v), kept as its (TPS_g, tau_g) pairs no other beats in both; then every
  combination of one pair per group, scored as max_g TPS_g or N max_g TPS_g + (sum_g tau_g -
  max_g tau_g) / v.

Expert parallelism (docs/problem.md §11), again by its own lines: a TMPC combination is
skipped at (d, t) when some TMPC's e e_t does not divide d t (rule 6); otherwise each TMPC
adds f (r - 1) w_x / (r N) to the resync bytes and s_x / r to the memory, r = d t / (e e_t),
in 1F1B stages and interleaved groups alike. With ``resyncOverlapWindow`` "schedule"
(docs/problem.md §10.1) an interleaved group's hidden time H is multiplied by
min(m, ((v - 1) L + 1) / v).
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from functools import lru_cache

from piper.core.errors import SolverError
from piper.core.evaluate import add_cut_bytes
from piper.core.options import Options, candidates
from piper.core.plan import INTERLEAVED, Plan, Schedule, Stage
from piper.core.problem import Problem
from piper.core.result import Result, Status, make_result
from piper.core.stopping import Interrupted, check, polled, signal_name

__all__ = ["solve_brute", "MAX_NODES"]

#: largest graph the brute force accepts
MAX_NODES = 8


@polled  # SIGINT / SIGTERM are seen at check() between search steps, never mid-update of the incumbent
def solve_brute(problem: Problem, options: Options | None = None) -> Result:
    """Exhaustive search; refuses graphs with more than :data:`MAX_NODES` layers."""
    options = options or Options()
    if problem.n > MAX_NODES:
        raise SolverError(f"brute force handles at most {MAX_NODES} layers; this graph has {problem.n}")
    start = time.perf_counter()
    batch = options.objective == "batch-time"
    cand = candidates(problem, options)
    if cand.infeasible_reason is not None:
        return make_result(problem, "brute", Status.INFEASIBLE, None, time_s=time.perf_counter() - start,
                           message=cand.infeasible_reason, objective_kind=options.objective)
    deadline = None if options.time_limit_s is None else start + options.time_limit_s

    ids = [nd.id for nd in problem.nodes]
    n = len(ids)
    pos = {v: i for i, v in enumerate(ids)}
    succ_mask = [0] * n
    for e in problem.edges:
        succ_mask[pos[e.u]] |= 1 << pos[e.v]
    k, n_mb, bw = problem.devices, problem.microbatches, problem.bandwidth
    memory_limit = problem.memory_cap  # docs/problem.md §3.3
    # version 2: G devices per node (default k), B_in inside a node (default B), f (default 4)
    node_g = k if problem.devices_per_node is None else problem.devices_per_node
    bw_in = bw if problem.intra_node_bandwidth is None else problem.intra_node_bandwidth
    factor = 4.0 if problem.allreduce_factor is None else problem.allreduce_factor

    def iteration_keys(combo, d: int) -> tuple[float, float]:
        """(H, O) of docs/problem.md §10: the hideable seconds and the per-iteration step time."""
        return (sum(c.resync_overlap_time for c in combo),
                sum(c.step_time + c.step_time_sharded / d for c in combo))

    def experts(combo, d: int, t: int) -> tuple[float, float] | None:
        """docs/problem.md §11 by its own lines: None when rule 6 fails (some e e_t does not
        divide d t), else the expert (resync bytes, memory bytes) with r = d t / (e e_t)."""
        resync = memory = 0.0
        for c in combo:
            width = c.expert_parallel * c.expert_tensor_parallel
            if (d * t) % width != 0:
                return None
            r = d * t // width
            resync += factor * (r - 1) * c.expert_parameter_size / (r * n_mb)
            memory += c.memory_sharded_expert / r
        return resync, memory

    def combos(members: list[int], t: int):
        choices = []
        for v in members:
            allowed = cand.tmpcs[v].get(t)
            if not allowed:
                return None
            choices.append([c for _, c in allowed])
        return itertools.product(*choices)

    def chunk_terms(members: list[int], combo) -> tuple[float, float]:
        """(compute P, cut-edge bytes X) of one stage or chunk with these TMPCs."""
        member_set = set(members)
        edge = 0.0
        for v, c in zip(members, combo):
            edge = add_cut_bytes(edge, problem, v, c, member_set)
        return sum(c.time_per_sample for c in combo), edge

    def front(points: list[tuple[float, float, tuple[str, ...]]]) -> list[tuple[float, float, tuple[str, ...]]]:
        """The (TPS, tau, names) that no other beats in both TPS and tau (first found on ties)."""
        out: list[tuple[float, float, tuple[str, ...]]] = []
        for p in sorted(points, key=lambda q: (q[0], q[1])):
            if not out or p[1] < out[-1][1]:
                out.append(p)
        return out

    @lru_cache(maxsize=None)
    def stage_options(mask: int, t: int, d: int, y: int, bw_edge: float) -> tuple[tuple[float, float, tuple[str, ...]], ...]:
        """The stage's TMPC choices that fit in memory at (t, d, y), its cut edges running at
        ``bw_edge`` bytes/s: with the TPS objective the fastest one, else every (TPS, tau)
        pair no other choice beats in both."""
        bw_resync = bw_in if d * t <= node_g else bw
        members = [ids[i] for i in range(n) if mask >> i & 1]
        every = combos(members, t)
        if every is None:
            return ()
        points = []
        best = None
        for combo in every:
            expert = experts(combo, d, t)
            if expert is None:
                continue
            memory = sum(c.memory_a * y + c.memory_b + c.memory_sharded / d for c in combo) + expert[1]
            if memory > memory_limit:
                continue
            compute, edge = chunk_terms(members, combo)
            resync = sum(factor * (d - 1) * c.parameter_size / (d * n_mb) for c in combo) + expert[0]
            hide, step = iteration_keys(combo, d)
            if hide > 0 or step > 0:
                # docs/problem.md §10, by its own lines
                exposed = max(0.0, n_mb * resync / bw_resync - hide) / n_mb if hide > 0 else resync / bw_resync
                tps = edge / (d * bw_edge) + exposed + compute / d + step / n_mb
            elif bw_edge == bw_resync:
                tps = (edge / d + resync) / bw_edge + compute / d
            else:
                tps = edge / (d * bw_edge) + resync / bw_resync + compute / d
            point = (tps, compute + edge / bw_edge, tuple(c.id for c in combo))
            if best is None or tps < best[0]:
                best = point
            points.append(point)
        if best is None:
            return ()
        return (best,) if not batch else tuple(front(points))

    def value(tpss: list[float], taus: list[float], v: int = 1) -> float:
        if not batch:
            return max(tpss)
        return n_mb * max(tpss) + (sum(taus) - max(taus)) / v

    def tail_sets(remaining: int):
        """Non-empty subsets S of ``remaining`` with no edge from S to remaining \\ S."""
        sub = remaining
        while sub:
            rest = remaining & ~sub
            if all(not (sub >> i & 1) or not (succ_mask[i] & rest) for i in range(n)):
                yield sub
            sub = (sub - 1) & remaining

    best_value = math.inf
    best_plan: Plan | None = None
    timed_out = False

    uniform = options.uniform

    def search(remaining: int, devices_left: int, d_left: int, suffix_d: int, tpss: list[float], taus: list[float],
               stages: list[tuple[int, int, int, tuple[str, ...]]]) -> None:
        nonlocal best_value, best_plan, timed_out
        if remaining == 0:
            if budget - devices_left < min_devices:
                return  # this pass is for plans that span nodes (sum d*t > G)
            got = value(tpss, taus)
            if got < best_value:
                best_value = got
                best_plan = Plan(tuple(Stage(tuple(ids[i] for i in range(n) if mask >> i & 1), d, t,
                                             dict(zip((ids[i] for i in range(n) if mask >> i & 1), names)))
                                       for mask, t, d, names in reversed(stages)))
            return
        check(None)  # SIGINT / SIGTERM (solve_brute is polled): the except below keeps the incumbent
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
                    for tps, tau, names in stage_options(mask, t, d, y, bw_edge):
                        tpss.append(tps)
                        taus.append(tau)
                        if value(tpss, taus) < best_value:  # later stages can only raise it
                            stages.append((mask, t, d, names))
                            search(remaining & ~mask, devices_left - d * t, d_left - d, total_d, tpss, taus, stages)
                            stages.pop()
                        tpss.pop()
                        taus.pop()

    def chunkings(remaining: int, count: int):
        """Sequences of ``count`` non-empty chunks covering ``remaining``, last chunk first."""
        if count == 1:  # the first chunk: what the later chunks (each a tail set) left
            if remaining:
                yield [remaining]
            return
        for mask in tail_sets(remaining):
            if mask == remaining:
                continue
            for rest in chunkings(remaining & ~mask, count - 1):
                yield rest + [mask]

    window_schedule = problem.resync_overlap_window == "schedule"

    def interleaved_search() -> None:
        """Every interleaved plan the options allow (module docstring)."""
        nonlocal best_value, best_plan, timed_out
        for v in options.virtual_stage_choices():
            if v < 2:
                continue
            for groups in range(2, n // v + 1):
                for t in cand.ts:
                    for d in cand.ds:
                        m = n_mb // d
                        if groups * d * t > k or m % groups:
                            continue
                        bw_edge = bw_in if groups * d * t <= node_g else bw
                        bw_resync = bw_in if d * t <= node_g else bw
                        for chunks in chunkings((1 << n) - 1, groups * v):
                            check(None)
                            if deadline is not None and time.perf_counter() > deadline:
                                timed_out = True
                                return
                            per_group = []
                            for g in range(groups):
                                y = min(m, (2 * (groups - g - 1) + (v - 1) * groups + 1) / v)
                                masks = chunks[g::groups]
                                members = [ids[i] for mk in masks for i in range(n) if mk >> i & 1]
                                every = combos(members, t)
                                points = []
                                for combo in every or ():
                                    expert = experts(combo, d, t)
                                    if expert is None:
                                        continue
                                    memory = sum(c.memory_a * y + c.memory_b + c.memory_sharded / d
                                                 for c in combo) + expert[1]
                                    if memory > memory_limit:
                                        continue
                                    tps = tau = 0.0
                                    at = 0
                                    for mk in masks:
                                        part = [ids[i] for i in range(n) if mk >> i & 1]
                                        compute, edge = chunk_terms(part, combo[at:at + len(part)])
                                        at += len(part)
                                        tps += edge / (d * bw_edge) + compute / d
                                        tau += compute + edge / bw_edge
                                    resync_t = (sum(factor * (d - 1) * c.parameter_size / (d * n_mb) for c in combo)
                                                + expert[0]) / bw_resync
                                    hide, step = iteration_keys(combo, d)
                                    if hide > 0:
                                        # docs/problem.md §10.1: the group's window of micro-batches
                                        if window_schedule:
                                            hide *= min(m, ((v - 1) * groups + 1) / v)
                                        resync_t = max(0.0, n_mb * resync_t - hide) / n_mb
                                    tps += resync_t + step / n_mb
                                    points.append((tps, tau, tuple(c.id for c in combo)))
                                if not points:
                                    break
                                per_group.append((members, front(points) if batch else [min(points, key=lambda q: q[0])]))
                            else:
                                for pick in itertools.product(*(opts for _, opts in per_group)):
                                    got = value([p[0] for p in pick], [p[1] for p in pick], v)
                                    if got < best_value:
                                        names = {}
                                        for (members, _), p in zip(per_group, pick):
                                            names.update(zip(members, p[2]))
                                        stages = []
                                        for mk in chunks:
                                            part = tuple(ids[i] for i in range(n) if mk >> i & 1)
                                            stages.append(Stage(part, d, t, {u: names[u] for u in part}))
                                        best_value = got
                                        best_plan = Plan(tuple(stages), Schedule(INTERLEAVED, v))

    # pass 1: plans inside one node (sum d*t <= min(G, k)), edges at B_in;
    # pass 2 (when G < k): plans spanning nodes (sum d*t > G), edges at B
    kind = options.objective
    if options.progress:
        print(f"[brute] searching the plans of {n} layers on up to {k} devices", file=sys.stderr, flush=True)
    try:
        if 1 in options.virtual_stage_choices():
            passes = [(min(node_g, k), 0, bw_in)]
            if node_g < k:
                passes.append((k, node_g + 1, bw))
            for budget, min_devices, bw_edge in passes:
                search((1 << n) - 1, budget, n_mb, 0, [], [], [])
        if not timed_out and max(options.virtual_stage_choices()) >= 2:
            interleaved_search()
    except Interrupted as exc:  # SIGINT / SIGTERM: the best plan so far, for the command to keep
        exc.result = make_result(problem, "brute", Status.FEASIBLE if best_plan else Status.UNKNOWN, best_plan,
                                 time_s=time.perf_counter() - start, objective=best_value if best_plan else None,
                                 message=f"interrupted ({signal_name(exc.signum)})", objective_kind=kind)
        raise
    elapsed = time.perf_counter() - start
    plan = best_plan
    if timed_out:
        status = Status.FEASIBLE if plan is not None else Status.UNKNOWN
        return make_result(problem, "brute", status, plan, time_s=elapsed, objective=best_value if plan else None,
                           message="time limit reached", objective_kind=kind)
    if plan is None:
        return make_result(problem, "brute", Status.INFEASIBLE, None, time_s=elapsed,
                           message="no plan fits in memory within the device and microbatch budgets", objective_kind=kind)
    return make_result(problem, "brute", Status.OPTIMAL, plan, time_s=elapsed, objective=best_value, objective_kind=kind)
