"""The one evaluator: scores any :class:`~piper.core.plan.Plan` against its :class:`~piper.core.problem.Problem`.

Score, for stage i with degrees d = d_i, t = t_i and its chosen TMPCs (``docs/problem.md`` §4 and §2,
including "Extensions (version 2)"; sizes in bytes, bandwidths in bytes/second, times in
the workload's time units):

* in flight  y_i   = ceil((d_i + d_{i+1} + ... + d_L) / d_i)
* memory     mem_i = sum_v (a_v * y_i + b_v + s_v / d)  bytes; OOM iff mem_i > M
* compute    P_i   = sum_v p_v
* edge bytes X_i   = sum_{(u,v): v in S_i, u not} 2 (c_uv + sfw_v[u])
                   + sum_{(v,x): v in S_i, x not} 2 (c_vx + sbw_v[x])
* resync     R_i   = sum_v f (d - 1) w_v / (d N)  bytes
* bandwidths the stage *fits in a node* when d t <= G: its resync runs at B_resync,i = B_in,
             else at B; the plan fits in a node when sum_i d_i t_i <= G: then every
             stage's edge bytes run at B_edge = B_in, else at B
* TPS_i = X_i / (d B_edge) + R_i / B_resync,i + P_i / d;   TPS = max_i TPS_i  (+inf when OOM)
* batch time = N TPS + sum_i tau_i - max_i tau_i, tau_i = P_i + X_i / B_edge (+inf when OOM)

Interleaved plans (docs/problem.md §9, version 3; ``plan.schedule.kind == "interleaved"``
with v virtual stages): ``plan.stages`` are L v chunks with one (d, t), chunk j on device group
g = j mod L; per group, over its chunks C_g (P_j, X_j as for a stage above, m = N / d):

* tau_g = sum_{j in C_g} (P_j + X_j / B_edge)
* TPS_g = sum_{j in C_g} (X_j / (d B_edge) + P_j / d) + R_g / B_resync,g  (R_g: the group's nodes)
* mem_g = sum over the group's nodes of (a y_g + b + s / d), y_g = min(m, (2 (L - g - 1) + (v - 1) L + 1) / v)
* TPS = max_g TPS_g;  batch time = N TPS + (sum_g tau_g - max_g tau_g) / v

and ``Score.stages`` holds one entry per device group (its chunks in ``StageScore.chunks``).

Placement is implied, not checked: a stage that fits in a node is taken to sit inside one.
With power-of-two stage sizes d t and G a power of two such a packing always exists (place
stages largest first: each fits in the free part of a node or starts a new one); for other
sizes it may not, and the evaluator does not enforce it.

Iteration keys (docs/problem.md §10; TMPC keys ``resyncOverlapTime`` h, ``stepTime`` o,
``stepTimeSharded`` o_s): per stage (device group) H = sum_v h_v, O = sum_v (o_v + o_s,v / d);
the resync term becomes max(0, N R_i / B_resync,i - H) / N and O / N is added to TPS_i
(``StageScore.step``). Without them every number is as above, bit for bit. With the top-level
``resyncOverlapWindow`` "schedule" (§10.1) a device group of an interleaved plan hides W H,
W = min(N // d, ((v - 1) L + 1) / v) (:func:`~piper.core.problem.overlap_window`); 1F1B stages W = 1.

Expert parallelism (docs/problem.md §11, rule 6; TMPC keys ``expertParallel`` e,
``expertTensorParallel`` e_t, ``expertParameterSize`` w_x, ``memoryUsageShardedExpertB`` s_x): a
TMPC with e e_t > 1 may sit in a stage (chunk) of degrees (d, t) only if e e_t divides d t
(:func:`check_plan` raises ``rule 6 ...`` naming the node, TMPC, e e_t and d t); with
r = d t / (e e_t), each TMPC adds f (r - 1) w_x / (r N) to R_i (R_g) and s_x / r to mem_i
(mem_g). A TMPC with e e_t = 1 has r = d t. Without the keys the added terms are skipped, so
every number is as above, bit for bit.

Defaults (no version-2 key): G = k, B_in = B, f = 4, s = 0. Then both bandwidths of every
stage are B and TPS_i is computed as ``(X_i / d + R_i) / B + P_i / d``, exactly the
version-1 expression, so every number is bit-for-bit the version-1 number.

Every solver's plan is scored here; no solver's own objective is reported as the TPS.
"""

from __future__ import annotations

import math
from collections.abc import Container
from dataclasses import dataclass

from piper.core.errors import PlanError
from piper.core.options import OBJECTIVES, TPS
from piper.core.plan import Plan, Schedule
from piper.core.problem import TMPC, Problem, overlap_window

__all__ = ["MemoryTerms", "PlanError", "StageScore", "Score", "evaluate", "check_plan", "iteration_terms", "memory_terms"]


@dataclass(frozen=True)
class StageScore:
    """One stage's numbers. Times in the workload's time units per sample, memory in bytes."""

    #: stage time per sample, compute + edge + resync
    tps: float
    #: P_i / d: compute time per sample
    compute: float
    #: X_i / (d B_edge): cut-edge communication time per sample
    edge: float
    #: R_i / B_resync: data-parallel weight resync time per sample
    resync: float
    #: bytes used on each of the stage's devices
    memory: float
    #: microbatches in flight: an integer for 1F1B, a rational number (chunk-microbatches / v)
    #: for an interleaved device group
    y: int | float
    #: memory > the device's memory
    oom: bool
    d: int
    t: int
    #: B_edge, bytes/second its cut-edge bytes ran at (B_in when the whole plan fits in a node, else B)
    edge_bandwidth: float
    #: B_resync, bytes/second its data-parallel resync ran at (B_in when the stage fits in a node, else B)
    resync_bandwidth: float
    #: d * t <= G: the stage sits inside one node
    fits_in_node: bool
    #: tau_i = P_i + X_i / B_edge: time one replica spends on one microbatch (time units)
    tau: float
    #: an interleaved plan's device group: the 0-based indices of its chunks in ``plan.stages``
    #: (empty for a 1F1B stage)
    chunks: tuple[int, ...] = ()
    #: O / N: the per-iteration time of the stage's ``stepTime`` + ``stepTimeSharded`` / d, per
    #: sample (docs/problem.md §10; 0 without those keys)
    step: float = 0.0


@dataclass(frozen=True)
class Score:
    """The evaluator's verdict on a structurally valid plan."""

    #: time per sample of the whole pipeline (max over stages); +inf when OOM
    tps: float
    oom: bool
    stages: tuple[StageScore, ...]
    devices_used: int
    sum_d: int
    #: time of one batch of N microbatches (time units; no solver optimizes it):
    #: N * TPS + sum_i tau_i - max_i tau_i (1F1B steady state plus fill and drain); +inf when OOM
    batch_time: float
    #: sum_i d_i t_i <= G: the whole plan sits inside one node (its edges run at B_in)
    fits_in_node: bool
    #: the plan's pipeline schedule (``stages`` holds one entry per device group)
    schedule: Schedule = Schedule()

    def value(self, objective: str) -> float:
        """The number an objective minimizes (``Options.objective``): ``tps`` or ``batch_time``."""
        if objective not in OBJECTIVES:
            raise ValueError(f"unknown objective {objective!r}")
        return self.tps if objective == TPS else self.batch_time

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
        """The ``evaluate --json`` shape: tps and batch_time are null when OOM; bandwidths in bytes/s.
        An interleaved plan adds ``schedule`` and, per device group, its ``chunks``."""
        out = {
            "tps": None if self.oom else self.tps,
            "oom": self.oom,
            "batch_time": None if self.oom else self.batch_time,
            "fits_in_node": self.fits_in_node,
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
                    "fits_in_node": s.fits_in_node,
                    "edge_bandwidth": s.edge_bandwidth,
                    "resync_bandwidth": s.resync_bandwidth,
                    "tau": s.tau,
                    **({"chunks": list(s.chunks)} if self.schedule.interleaved else {}),
                    **({"step": s.step} if s.step else {}),
                }
                for s in self.stages
            ],
        }
        if self.schedule.interleaved:
            out["schedule"] = self.schedule.to_dict()
        return out


def check_plan(problem: Problem, plan: Plan) -> dict[int, TMPC]:
    """Check the structural rules 1-4 of ``docs/problem.md`` §3.2, rule 5 for an interleaved
    plan (docs/problem.md §9.2) and rule 6 (§11: a chosen TMPC's e e_t divides its stage's d t);
    return node id -> chosen TMPC.

    Raises :class:`PlanError` naming the rule (1-6) and the stage (the chunk, when interleaved).
    """
    unit = "chunk" if plan.schedule.interleaved else "stage"
    if not plan.stages:
        raise PlanError("rule 1 (every node in exactly one stage): the plan has no stages")
    stage_of: dict[int, int] = {}
    for i, s in enumerate(plan.stages):
        if not s.nodes:
            raise PlanError(f"rule 1 (no empty {unit}): {unit} {i + 1} has no nodes")
        for v in s.nodes:
            if v not in problem.node_by_id:
                raise PlanError(f"rule 1: {unit} {i + 1} names node {v}, which is not in the graph")
            if v in stage_of:
                where = "twice" if stage_of[v] == i else f"in {unit}s {stage_of[v] + 1} and {i + 1}"
                raise PlanError(f"rule 1 (every node in exactly one {unit}): node {v} appears {where}")
            stage_of[v] = i
    missing = [nd.id for nd in problem.nodes if nd.id not in stage_of]
    if missing:
        raise PlanError(f"rule 1 (every node in exactly one {unit}): node(s) {missing[:10]} are in no {unit}")
    for e in problem.edges:
        if stage_of[e.u] > stage_of[e.v]:
            raise PlanError(
                f"rule 2 ({unit}s in pipeline order): edge {e.u}->{e.v} goes from {unit} "
                f"{stage_of[e.u] + 1} back to {unit} {stage_of[e.v] + 1}"
            )
    chosen: dict[int, TMPC] = {}
    n_mb = problem.microbatches
    for i, s in enumerate(plan.stages):
        where = f"{unit} {i + 1}"
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
            if c.expert_width > 1 and (s.d * s.t) % c.expert_width:
                raise PlanError(f"rule 6 (expert parallelism): node {v} in {where} has TMPC {c.id!r} with "
                                f"e*e_t = {c.expert_parallel}*{c.expert_tensor_parallel} = {c.expert_width}, which "
                                f"does not divide the {unit}'s d*t = {s.d}*{s.t} = {s.d * s.t}")
            chosen[v] = c
    if plan.schedule.interleaved:
        _check_interleaved(problem, plan)
    if plan.devices_used > problem.devices:
        raise PlanError(f"rule 4: the plan uses sum d*t = {plan.devices_used} devices, more than k={problem.devices}")
    if plan.sum_d > n_mb:
        raise PlanError(f"rule 4: the plan's sum of d = {plan.sum_d} exceeds N={n_mb} microbatches")
    return chosen


def _check_interleaved(problem: Problem, plan: Plan) -> None:
    """Rule 5 (docs/problem.md §9): L >= 2 device groups of v chunks each, one (d, t) in
    every chunk, and the microbatches per replica m = N / d a multiple of L."""
    v = plan.schedule.virtual_stages
    n = len(plan.stages)
    if n % v != 0:
        raise PlanError(f"rule 5 (interleaved): {n} chunks are not a multiple of virtualStages v={v}")
    groups = n // v
    if groups < 2:
        raise PlanError(f"rule 5 (interleaved): {n} chunks with v={v} make {groups} device group; at least 2 needed")
    d, t = plan.stages[0].d, plan.stages[0].t
    for j, s in enumerate(plan.stages):
        if (s.d, s.t) != (d, t):
            raise PlanError(f"rule 5 (interleaved): chunk {j + 1} has (d, t) = ({s.d}, {s.t}), chunk 1 has ({d}, {t}); "
                            "every chunk has the same (d, t)")
    m = problem.microbatches // d
    if m % groups != 0:
        raise PlanError(f"rule 5 (interleaved): the microbatches per replica m = N / d = {m} are not a multiple "
                        f"of the {groups} device groups")


def add_cut_bytes(total: float, problem: Problem, v: int, choice: TMPC, members: Container[int]) -> float:
    """``total`` plus the edge bytes of layer ``v`` with TMPC ``choice`` in the stage ``members``
    (X_i's terms of ``v``: 2 (c_e + sync) per edge that crosses the stage's boundary, in and out),
    added one edge at a time in edge order: :func:`evaluate`'s sum, term by term."""
    for e in problem.in_edges[v]:
        if e.u not in members:
            total += 2.0 * (e.communication_cost + choice.sync_fw[e.u])
    for e in problem.out_edges[v]:
        if e.v not in members:
            total += 2.0 * (e.communication_cost + choice.sync_bw[e.v])
    return total


def iteration_terms(resync_t: float, hide: float, step: float, n_mb: int) -> tuple[float, float]:
    """docs/problem.md §10: (exposed resync, step), each per sample. ``resync_t`` = R / B_resync
    (per sample), ``hide`` = H = the stage's sum of ``resyncOverlapTime``, ``step`` = O = its sum
    of ``stepTime`` + ``stepTimeSharded`` / d (per iteration): the resync runs N R / B_resync
    per iteration, of which H hides behind compute."""
    if hide > 0:
        resync_t = max(0.0, n_mb * resync_t - hide) / n_mb
    return resync_t, step / n_mb


def _expert_terms(c: TMPC, d: int, t: int, f: float, n_mb: int) -> tuple[float, float]:
    """docs/problem.md §11: (resync bytes per sample, memory bytes) that TMPC ``c`` adds to a
    stage of degrees (d, t) for which rule 6 holds (:func:`check_plan` checked it)."""
    terms = c.expert_terms(d, t, f, n_mb)
    assert terms is not None, "rule 6 is checked by check_plan"
    return terms


@dataclass(frozen=True)
class MemoryTerms:
    """One stage's (an interleaved plan's: one device group's) memory per device by term, bytes:
    what :func:`evaluate` sums into ``StageScore.memory`` (docs/problem.md §2, §9.2, §11)."""

    #: sum of memoryUsageA x y: the activations of the y micro-batches in flight
    activations: float
    #: sum of memoryUsageB: what each device keeps whole (weights, unsharded gradients and state)
    state: float
    #: sum of memoryUsageShardedB / d: the state sharded over the d replicas
    sharded_state: float
    #: the expert keys' memory (§11; 0 without them)
    experts: float
    #: y, the micro-batches in flight (chunk-micro-batches / v for an interleaved group)
    y: int | float

    @property
    def total(self) -> float:
        return self.activations + self.state + self.sharded_state + self.experts


def memory_terms(problem: Problem, plan: Plan, score: Score) -> list[MemoryTerms]:
    """The memory of each of ``score.stages`` (``evaluate(problem, plan)``) split by term: their
    totals are the stages' ``memory`` (a diagnostic for people: what fills a device)."""
    chosen = check_plan(problem, plan)
    f, n_mb = problem.resync_factor, problem.microbatches
    out = []
    for i, st in enumerate(score.stages):
        chunks = st.chunks if plan.schedule.interleaved else (i,)
        act = state = sharded = experts = 0.0
        for j in chunks:
            for u in plan.stages[j].nodes:
                c = chosen[u]
                act += c.memory_a * st.y
                state += c.memory_b
                sharded += c.memory_sharded / st.d
                if c.has_expert_terms:
                    experts += _expert_terms(c, st.d, st.t, f, n_mb)[1]
        out.append(MemoryTerms(act, state, sharded, experts, st.y))
    return out


def evaluate(problem: Problem, plan: Plan) -> Score:
    """Score a plan: per-stage TPS, memory, y and the compute / edge / resync split.

    Raises :class:`PlanError` if the plan breaks a structural rule; an
    out-of-memory plan is a valid result with ``tps = inf`` and ``oom = True``.
    """
    chosen = check_plan(problem, plan)
    if plan.schedule.interleaved:
        return _evaluate_interleaved(problem, plan, chosen)
    n_mb = problem.microbatches
    f = problem.resync_factor
    g = problem.node_size
    bw_out, bw_in = problem.bandwidth, problem.bandwidth_intra
    plan_fits = plan.devices_used <= g
    bw_edge = bw_in if plan_fits else bw_out
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
        stage_fits = d * s.t <= g
        bw_resync = bw_in if stage_fits else bw_out
        memory = 0.0
        compute = 0.0
        edge_bytes = 0.0
        resync_bytes = 0.0
        hide = 0.0
        step = 0.0
        for v in s.nodes:
            c = chosen[v]
            # s = 0 adds exactly 0.0: the version-1 sum
            memory += c.memory_a * y + c.memory_b + c.memory_sharded / d
            compute += c.time_per_sample
            resync_bytes += f * (d - 1) * c.parameter_size / (d * n_mb)
            if c.has_expert_terms:  # docs/problem.md §11 (rule 6 holds: check_plan)
                resync_x, memory_x = _expert_terms(c, d, s.t, f, n_mb)
                resync_bytes += resync_x
                memory += memory_x
            edge_bytes = add_cut_bytes(edge_bytes, problem, v, c, members)
            hide += c.resync_overlap_time
            step += c.step_time + c.step_time_sharded / d
        edge_t = edge_bytes / d / bw_edge
        resync_t = resync_bytes / bw_resync
        compute_t = compute / d
        step_t = 0.0
        if hide > 0 or step > 0:
            # docs/problem.md §10
            resync_t, step_t = iteration_terms(resync_t, hide, step, n_mb)
            tps = edge_bytes / (d * bw_edge) + resync_t + compute / d + step_t
        elif bw_edge == bw_resync:
            # the version-1 expression, kept verbatim so that defaults give bit-identical numbers
            tps = (edge_bytes / d + resync_bytes) / bw_edge + compute / d
        else:
            tps = edge_bytes / (d * bw_edge) + resync_bytes / bw_resync + compute / d
        stages.append(
            StageScore(
                tps=tps,
                compute=compute_t,
                edge=edge_t,
                resync=resync_t,
                memory=memory,
                y=y,
                oom=memory > problem.memory_cap,
                d=d,
                t=s.t,
                edge_bandwidth=bw_edge,
                resync_bandwidth=bw_resync,
                fits_in_node=stage_fits,
                tau=compute + edge_bytes / bw_edge,
                step=step_t,
            )
        )
    oom = any(st.oom for st in stages)
    total = math.inf if oom else max(st.tps for st in stages)
    taus = [st.tau for st in stages]
    batch_time = math.inf if oom else n_mb * total + sum(taus) - max(taus)
    return Score(tps=total, oom=oom, stages=tuple(stages), devices_used=plan.devices_used, sum_d=plan.sum_d,
                 batch_time=batch_time, fits_in_node=plan_fits)


def chunk_terms(problem: Problem, nodes: tuple[int, ...], chosen: dict[int, TMPC]) -> tuple[float, float]:
    """(P, X) of one chunk: its compute and its cut-edge bytes, as for a stage."""
    members = set(nodes)
    compute = 0.0
    edge_bytes = 0.0
    for v in nodes:
        compute += chosen[v].time_per_sample
        edge_bytes = add_cut_bytes(edge_bytes, problem, v, chosen[v], members)
    return compute, edge_bytes


def _evaluate_interleaved(problem: Problem, plan: Plan, chosen: dict[int, TMPC]) -> Score:
    """The interleaved schedule's score (module docstring; docs/problem.md §9)."""
    n_mb = problem.microbatches
    f = problem.resync_factor
    g_size = problem.node_size
    v = plan.schedule.virtual_stages
    groups = plan.groups
    d, t = plan.stages[0].d, plan.stages[0].t
    m = n_mb // d
    plan_fits = plan.devices_used <= g_size
    bw_edge = problem.bandwidth_intra if plan_fits else problem.bandwidth
    group_fits = d * t <= g_size
    bw_resync = problem.bandwidth_intra if group_fits else problem.bandwidth
    terms = [chunk_terms(problem, s.nodes, chosen) for s in plan.stages]
    window = overlap_window(problem, groups, v, d)
    stages = []
    for g in range(groups):
        chunks = tuple(range(g, len(plan.stages), groups))
        y = min(m, (2 * (groups - g - 1) + (v - 1) * groups + 1) / v)
        memory = 0.0
        resync_bytes = 0.0
        hide = 0.0
        step = 0.0
        for j in chunks:
            for u in plan.stages[j].nodes:
                c = chosen[u]
                memory += c.memory_a * y + c.memory_b + c.memory_sharded / d
                resync_bytes += f * (d - 1) * c.parameter_size / (d * n_mb)
                if c.has_expert_terms:  # docs/problem.md §11
                    resync_x, memory_x = _expert_terms(c, d, t, f, n_mb)
                    resync_bytes += resync_x
                    memory += memory_x
                hide += c.resync_overlap_time
                step += c.step_time + c.step_time_sharded / d
        edge_bytes_t = sum(terms[j][1] / (d * bw_edge) for j in chunks)
        tau = sum(terms[j][0] + terms[j][1] / bw_edge for j in chunks)
        compute_t = sum(terms[j][0] / d for j in chunks)
        resync_t = resync_bytes / bw_resync
        step_t = 0.0
        if hide > 0 or step > 0:
            # docs/problem.md §10.1: with resyncOverlapWindow "schedule" the group hides behind its window
            resync_t, step_t = iteration_terms(resync_t, hide * window, step, n_mb)
        stages.append(StageScore(
            tps=edge_bytes_t + compute_t + resync_t + step_t, compute=compute_t, edge=edge_bytes_t, resync=resync_t,
            memory=memory, y=y, oom=memory > problem.memory_cap, d=d, t=t, edge_bandwidth=bw_edge,
            resync_bandwidth=bw_resync, fits_in_node=group_fits, tau=tau, chunks=chunks, step=step_t,
        ))
    oom = any(st.oom for st in stages)
    total = math.inf if oom else max(st.tps for st in stages)
    taus = [st.tau for st in stages]
    batch_time = math.inf if oom else n_mb * total + (sum(taus) - max(taus)) / v
    return Score(tps=total, oom=oom, stages=tuple(stages), devices_used=plan.devices_used, sum_d=plan.sum_d,
                 batch_time=batch_time, fits_in_node=plan_fits, schedule=plan.schedule)
