"""Solver options (ablations are options, never globals) and the candidate sets they imply.

Every solver reads its allowed degrees and TMPCs through :func:`candidates`, so an
ablation means the same thing to the DP, the MILP, CP-SAT, brute force and equi.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from piper.core.errors import SolverError
from piper.core.limits import MAX_COUNT, MAX_SECONDS, MAX_THREADS, MAX_VIRTUAL_STAGES
from piper.core.plan import INTERLEAVED, ONE_F_ONE_B, Plan
from piper.core.problem import ACTIVATION_RECOMP, TMPC, Problem

__all__ = ["Options", "Candidates", "candidates", "divisors_up_to", "NO_AR", "TPS", "BATCH_TIME", "OBJECTIVES", "SCHEDULE_CHOICES"]

#: the objectives a solver may be asked to minimize (``Options.objective``)
TPS = "tps"
BATCH_TIME = "batch-time"
OBJECTIVES = (TPS, BATCH_TIME)
#: ``Options.schedule``: which pipeline schedules a plan may use
SCHEDULE_CHOICES = (ONE_F_ONE_B, INTERLEAVED, "any")

#: the TMPC ids excluded by the paper's "no activation recomputation" ablation
NO_AR = frozenset({ACTIVATION_RECOMP})


@dataclass(frozen=True)
class Options:
    """What a solver may use and how long it may take.

    Fields that a solver does not understand are ignored by it (e.g. ``knapsack``
    by the MILP); every solver honours the ablations and the time limit.
    """

    #: allow d > 1 (the paper's "no DP" ablation sets this False)
    data_parallel: bool = True
    #: allow t > 1 (the paper's "no TP" ablation sets this False)
    tensor_parallel: bool = True
    #: TMPC ids that may not be used (``NO_AR`` for the paper's "no AR" ablation)
    exclude_tmpcs: frozenset[str] = frozenset()
    #: the DP's per-stage TMPC choice: "exact" (optimal) or "greedy" (the reference heuristic)
    knapsack: str = "exact"
    #: refuse graphs with more ideals (successor-closed sets) than this
    max_ideals: int = 200_000
    #: restrict stages to contiguous segments of one topological order (DP)
    linearize: bool = False
    #: uniform plans only: every stage has the same (d, t), as Megatron-LM and DeepSpeed
    #: require (docs/problem.md §2.5); honoured by the DP (one DP per (t, d)), brute force
    #: (a filter) and equi (whose plans are uniform already)
    uniform: bool = False
    #: wall-clock limit in seconds (None = no limit)
    time_limit_s: float | None = None
    #: worker threads for solvers that use them
    threads: int = 2
    #: a plan to start from; the MILP and CP-SAT then search only below its TPS and,
    #: if nothing is found there, prove it optimal (``params["cutoff"] = False`` (MILP) /
    #: ``params["strict_cutoff"] = False`` (CP-SAT): a plain MIP start / solution hint)
    warm_start: Plan | None = None
    #: show progress on stderr
    progress: bool = False
    #: random seed for solvers that use one
    seed: int = 0
    #: solver-specific knobs, e.g. {"backend": "highs"} for the MILP
    params: Mapping[str, Any] = field(default_factory=dict)
    #: what to minimize (docs/problem.md §9, version 3): "tps", the time per sample of the
    #: pipeline's steady state (Piper's objective, versions 1-2), or "batch-time", one
    #: iteration of N microbatches with the pipeline's fill and drain
    objective: str = "tps"
    #: the schedules a plan may use: "1f1b", "interleaved" (Megatron-LM's interleaved 1F1B with
    #: 2..max_virtual_stages chunks per device group) or "any" (either)
    schedule: str = "any"
    #: the most chunks per device group an interleaved plan may have (1: 1F1B plans only)
    max_virtual_stages: int = 1

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise SolverError(f"unknown objective {self.objective!r}; use one of {', '.join(OBJECTIVES)}")
        if self.schedule not in SCHEDULE_CHOICES:
            raise SolverError(f"unknown schedule {self.schedule!r}; use one of {', '.join(SCHEDULE_CHOICES)}")
        v = self.max_virtual_stages
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_VIRTUAL_STAGES:
            raise SolverError(f"max_virtual_stages must be an integer >= 1 and <= {MAX_VIRTUAL_STAGES}, got {v!r}")
        limit = self.time_limit_s
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                                  or not 0 <= limit <= MAX_SECONDS):
            raise SolverError(f"time_limit_s must be None or a number of seconds in 0..{MAX_SECONDS:g}, got {limit!r}")
        for name, top in (("threads", MAX_THREADS), ("max_ideals", MAX_COUNT)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise SolverError(f"{name} must be an integer >= 1 and <= {top}, got {value!r}")
        if self.schedule == INTERLEAVED and v < 2:
            raise SolverError("schedule 'interleaved' needs max_virtual_stages >= 2 (the chunks per device group)")

    def virtual_stage_choices(self) -> tuple[int, ...]:
        """The v a plan may have: 1 is 1F1B, v >= 2 interleaved with v chunks per group."""
        low = 2 if self.schedule == INTERLEAVED else 1
        high = 1 if self.schedule == ONE_F_ONE_B else self.max_virtual_stages
        return tuple(range(low, high + 1))

    def allows(self, tmpc: TMPC) -> bool:
        return tmpc.id not in self.exclude_tmpcs


@dataclass(frozen=True)
class Candidates:
    """The choices a solver may make on a problem under some options."""

    #: tensor-parallel degrees usable by some layer (t <= k), sorted
    ts: tuple[int, ...]
    #: data-parallel degrees: divisors of N that are <= min(N, k), sorted
    ds: tuple[int, ...]
    #: node id -> {t: ((index in the node's list at t, TMPC), ...)}, only allowed TMPCs,
    #: only degrees with at least one allowed TMPC
    tmpcs: Mapping[int, Mapping[int, tuple[tuple[int, TMPC], ...]]]
    #: None, or why no plan can exist (names the first layer left without a choice, or
    #: the first layer none of whose choices fits in memory even at y = 1)
    infeasible_reason: str | None


def divisors_up_to(n: int, limit: int) -> tuple[int, ...]:
    """The divisors of ``n`` that are <= ``limit``, ascending: trial division up to sqrt(n),
    so N = 2^31 - 1 takes 46,341 steps whatever k is (not a loop over 1..min(N, k))."""
    small, large = [], []
    i = 1
    while i * i <= n:
        if n % i == 0:
            small.append(i)
            if i != n // i:
                large.append(n // i)
        i += 1
    return tuple(d for d in (*small, *reversed(large)) if d <= limit)


def candidates(problem: Problem, options: Options | None = None) -> Candidates:
    """Allowed degrees and TMPCs of every layer under ``options``."""
    options = options or Options()
    k, n_mb = problem.devices, problem.microbatches
    s_max = min(n_mb, k)
    ds = divisors_up_to(n_mb, s_max) if options.data_parallel else (1,)
    per_node: dict[int, dict[int, tuple[tuple[int, TMPC], ...]]] = {}
    reason = None
    for nd in problem.nodes:
        allowed: dict[int, tuple[tuple[int, TMPC], ...]] = {}
        for t, lst in nd.tmpcs.items():
            if t > k or (t > 1 and not options.tensor_parallel):
                continue
            ok = tuple((i, c) for i, c in enumerate(lst) if options.allows(c))
            if ok:
                allowed[t] = ok
        per_node[nd.id] = allowed
        if not allowed and reason is None:
            why = []
            if not options.tensor_parallel:
                why.append("t > 1 not allowed")
            if options.exclude_tmpcs:
                why.append(f"excluded TMPCs {sorted(options.exclude_tmpcs)}")
            why.append(f"k={k}")
            reason = f"layer {nd.label} has no usable TMPC (degrees {sorted(nd.tmpcs)}; {', '.join(why)})"
        elif allowed and reason is None:
            # y >= 1 in every stage, and a stage's memory is a sum of non-negative terms:
            # a layer whose every allowed TMPC has a + b > M fits in no plan at all
            least = min(c.memory_a + c.memory_b for lst in allowed.values() for _, c in lst)
            if least > problem.memory_cap:
                reason = (f"layer {nd.label} does not fit in memory with any allowed TMPC: its least a + b (one "
                          f"microbatch in flight) is {least:.6g} bytes > M = {problem.memory_per_device:.6g} bytes")
    ts = tuple(sorted({t for a in per_node.values() for t in a}))
    return Candidates(ts=ts, ds=ds, tmpcs=per_node, infeasible_reason=reason)
