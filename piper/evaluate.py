"""The one evaluator: scores any :class:`~piper.plan.Plan` against its :class:`~piper.problem.Problem`.

Score, for stage i with degrees d = d_i, t = t_i and its chosen TMPCs (``PROBLEM.md``):

* in flight  y_i   = ceil((d_i + d_{i+1} + ... + d_L) / d_i)
* memory     mem_i = sum_v (a_v * y_i + b_v)  bytes; OOM iff mem_i > M
* compute    P_i   = sum_v p_v
* edge bytes X_i   = sum_{(u,v): v in S_i, u not} 2 (c_uv + sfw_v[u])
                   + sum_{(v,x): v in S_i, x not} 2 (c_vx + sbw_v[x])
* resync     R_i   = sum_v 4 (d - 1) w_v / (d N)  bytes
* TPS_i = (X_i / d + R_i) / B + P_i / d;   TPS = max_i TPS_i  (+inf when any stage is OOM)

Every solver's plan is scored here; no solver's own objective is reported as the TPS.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .plan import Plan
from .problem import TMPC, Problem

__all__ = ["PlanError", "StageScore", "Score", "evaluate", "check_plan"]


class PlanError(ValueError):
    """A structurally invalid plan; the message names the broken rule and the stage."""


@dataclass(frozen=True)
class StageScore:
    """One stage's numbers. Times in the workload's time units per sample, memory in bytes."""

    #: stage time per sample, compute + edge + resync
    tps: float
    #: P_i / d: compute time per sample
    compute: float
    #: X_i / (d B): cut-edge communication time per sample
    edge: float
    #: R_i / B: data-parallel weight resync time per sample
    resync: float
    #: bytes used on each of the stage's devices
    memory: float
    #: microbatches in flight
    y: int
    #: memory > the device's memory
    oom: bool
    d: int
    t: int


@dataclass(frozen=True)
class Score:
    """The evaluator's verdict on a structurally valid plan."""

    #: time per sample of the whole pipeline (max over stages); +inf when OOM
    tps: float
    oom: bool
    stages: tuple[StageScore, ...]
    devices_used: int
    sum_d: int

    @property
    def throughput(self) -> float:
        """samples per time unit (1 / TPS); 0 when OOM."""
        return 0.0 if self.oom or self.tps <= 0 else 1.0 / self.tps

    @property
    def bottleneck(self) -> int | None:
        """0-based index of the slowest stage (the first OOM stage if any)."""
        if not self.stages:
            return None
        for i, s in enumerate(self.stages):
            if s.oom:
                return i
        return max(range(len(self.stages)), key=lambda i: self.stages[i].tps)

    def to_dict(self) -> dict:
        """The ``evaluate --json`` shape: tps is null when OOM."""
        return {
            "tps": None if self.oom else self.tps,
            "oom": self.oom,
            "devices_used": self.devices_used,
            "sum_d": self.sum_d,
            "stages": [
                {
                    "tps": s.tps,
                    "memory": s.memory,
                    "y": s.y,
                    "compute": s.compute,
                    "edge": s.edge,
                    "resync": s.resync,
                    "oom": s.oom,
                    "d": s.d,
                    "t": s.t,
                }
                for s in self.stages
            ],
        }


def check_plan(problem: Problem, plan: Plan) -> dict[int, TMPC]:
    """Check the structural rules of ``PROBLEM.md``; return node id -> chosen TMPC.

    Raises :class:`PlanError` naming the rule (1-4) and the stage.
    """
    if not plan.stages:
        raise PlanError("rule 1 (every node in exactly one stage): the plan has no stages")
    stage_of: dict[int, int] = {}
    for i, s in enumerate(plan.stages):
        if not s.nodes:
            raise PlanError(f"rule 1 (no empty stage): stage {i + 1} has no nodes")
        for v in s.nodes:
            if v not in problem.node_by_id:
                raise PlanError(f"rule 1: stage {i + 1} names node {v}, which is not in the graph")
            if v in stage_of:
                where = "twice" if stage_of[v] == i else f"in stages {stage_of[v] + 1} and {i + 1}"
                raise PlanError(f"rule 1 (every node in exactly one stage): node {v} appears {where}")
            stage_of[v] = i
    missing = [nd.id for nd in problem.nodes if nd.id not in stage_of]
    if missing:
        raise PlanError(f"rule 1 (every node in exactly one stage): node(s) {missing[:10]} are in no stage")
    for e in problem.edges:
        if stage_of[e.u] > stage_of[e.v]:
            raise PlanError(
                f"rule 2 (stages in pipeline order): edge {e.u}->{e.v} goes from stage "
                f"{stage_of[e.u] + 1} back to stage {stage_of[e.v] + 1}"
            )
    chosen: dict[int, TMPC] = {}
    n_mb = problem.microbatches
    for i, s in enumerate(plan.stages):
        where = f"stage {i + 1}"
        if s.d < 1:
            raise PlanError(f"rule 3: {where} has data-parallel degree d={s.d} < 1")
        if n_mb % s.d != 0:
            raise PlanError(f"rule 3: {where} has d={s.d}, which does not divide N={n_mb}")
        if s.t < 1:
            raise PlanError(f"rule 3: {where} has tensor-parallel degree t={s.t} < 1")
        extra = set(s.tmpcs) - set(s.nodes)
        if extra:
            raise PlanError(f"rule 3: {where} names TMPCs for node(s) {sorted(extra)} that are not in the stage")
        for v in s.nodes:
            if v not in s.tmpcs:
                raise PlanError(f"rule 3: {where} names no TMPC for node {v}")
            node = problem.node_by_id[v]
            if s.t not in node.tmpcs:
                raise PlanError(f"rule 3: node {v} in {where} has no TMPCs at degree t={s.t} (has {sorted(node.tmpcs)})")
            c = node.tmpc(s.t, s.tmpcs[v])
            if c is None:
                have = [x.id for x in node.tmpcs[s.t]]
                raise PlanError(f"rule 3: node {v} in {where} has no TMPC {s.tmpcs[v]!r} at t={s.t} (has {have})")
            chosen[v] = c
    if plan.devices_used > problem.devices:
        raise PlanError(f"rule 4: the plan uses sum d*t = {plan.devices_used} devices, more than k={problem.devices}")
    if plan.sum_d > n_mb:
        raise PlanError(f"rule 4: the plan's sum of d = {plan.sum_d} exceeds N={n_mb} microbatches")
    return chosen


def evaluate(problem: Problem, plan: Plan) -> Score:
    """Score a plan: per-stage TPS, memory, y and the compute / edge / resync split.

    Raises :class:`PlanError` if the plan breaks a structural rule; an
    out-of-memory plan is a valid result with ``tps = inf`` and ``oom = True``.
    """
    chosen = check_plan(problem, plan)
    n_mb = problem.microbatches
    bw = problem.bandwidth
    suffix = 0
    suffix_d = [0] * len(plan.stages)
    for i in range(len(plan.stages) - 1, -1, -1):
        suffix += plan.stages[i].d
        suffix_d[i] = suffix
    stages = []
    for i, s in enumerate(plan.stages):
        d = s.d
        members = set(s.nodes)
        y = -(-suffix_d[i] // d)
        memory = 0.0
        compute = 0.0
        edge_bytes = 0.0
        resync_bytes = 0.0
        for v in s.nodes:
            c = chosen[v]
            memory += c.memory_a * y + c.memory_b
            compute += c.time_per_sample
            resync_bytes += 4.0 * (d - 1) * c.parameter_size / (d * n_mb)
            for e in problem.in_edges[v]:
                if e.u not in members:
                    edge_bytes += 2.0 * (e.communication_cost + c.sync_fw[e.u])
            for e in problem.out_edges[v]:
                if e.v not in members:
                    edge_bytes += 2.0 * (e.communication_cost + c.sync_bw[e.v])
        edge_t = edge_bytes / d / bw
        resync_t = resync_bytes / bw
        compute_t = compute / d
        tps = (edge_bytes / d + resync_bytes) / bw + compute / d
        stages.append(
            StageScore(
                tps=tps,
                compute=compute_t,
                edge=edge_t,
                resync=resync_t,
                memory=memory,
                y=y,
                oom=memory > problem.memory_per_device,
                d=d,
                t=s.t,
            )
        )
    oom = any(st.oom for st in stages)
    total = math.inf if oom else max(st.tps for st in stages)
    return Score(tps=total, oom=oom, stages=tuple(stages), devices_used=plan.devices_used, sum_d=plan.sum_d)
