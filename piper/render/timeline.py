"""One iteration of a plan's pipeline schedule, simulated for the picture's timeline panel.

The evaluator's batch time (docs/problem.md §2.4, §9) is a closed formula; this module plays
the schedule out, micro-batch by micro-batch, so that a user can see where the devices wait:

* every stage (1F1B) or device group (interleaved) has d replicas; replica r of a stage runs
  the micro-batches k with k mod d = r, m = N / d of them;
* one micro-batch on one chunk takes tau (``StageScore.tau``: P + X / B_edge, the time one
  replica spends on it), split as a forward pass of tau / 3 and a backward pass of 2 tau / 3
  (a display convention: backward is about twice the forward's FLOPs);
* each replica runs its passes in the order of :func:`piper.core.pass_order.pass_orders` (1F1B,
  PipeDream-Flush; Megatron-LM's interleaved 1F1B, SC'21 §2.2.2);
* a forward waits for the previous chunk's forward of the same micro-batch, a backward for
  the next chunk's backward and its own forward;
* after its last pass each replica resyncs its weights for N x ``StageScore.resync`` (the
  per-sample resync time of the score, once per iteration).

For equal stages with one d this reproduces the formula exactly ((m + L - 1) tau for 1F1B,
(m + (L - 1) / v) tau interleaved, plus the resync); for unequal stages it is the schedule's
own makespan, which the picture shows next to the evaluator's batch time. A schedule whose
replica orders deadlock (possible with very unequal d) has no timeline (``None``).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from piper.core.evaluate import Score, check_plan, chunk_terms
from piper.core.pass_order import pass_orders
from piper.core.plan import Plan
from piper.core.problem import Problem

__all__ = ["FORWARD_SHARE", "Pass", "Timeline", "simulate_schedule"]

#: the share of tau a forward pass takes (the backward takes the rest)
FORWARD_SHARE = 1.0 / 3.0
#: simulations with more passes than this are not played out (the picture says so)
MAX_PASSES = 400_000


@dataclass(frozen=True)
class Pass:
    """One pass of one micro-batch on one replica: times in the workload's time units."""

    #: 0-based device group (the stage, for 1F1B)
    group: int
    #: 0-based chunk index in ``plan.stages`` (= group for 1F1B)
    chunk: int
    #: the micro-batch (0-based, global)
    microbatch: int
    #: its index among the replica's micro-batches (0-based)
    local: int
    #: "F" forward, "B" backward, "R" the weight resync after the replica's last pass
    kind: str
    start: float
    end: float


@dataclass(frozen=True)
class Timeline:
    """Replica 0's passes of every group, in start order per group; the schedule's makespan."""

    groups: int
    #: micro-batches per replica of each group
    microbatches: tuple[int, ...]
    passes: tuple[Pass, ...]
    makespan: float


def _chunk_taus(problem: Problem, plan: Plan) -> list[float]:
    """tau of each entry of ``plan.stages`` (chunk or stage): P + X / B_edge."""
    chosen = check_plan(problem, plan)
    bw_edge = problem.bandwidth_intra if plan.devices_used <= problem.node_size else problem.bandwidth
    out = []
    for s in plan.stages:
        compute, edge_bytes = chunk_terms(problem, s.nodes, chosen)
        out.append(compute + edge_bytes / bw_edge)
    return out


def simulate_schedule(problem: Problem, plan: Plan, score: Score, *, all_replicas: bool = False) -> Timeline | None:
    """Play one iteration of ``plan``'s schedule out (module docstring); None when it is too
    large to play out (more than :data:`MAX_PASSES` passes), out of memory, or deadlocks.
    With one d in every stage and N a multiple of it only replica 0 is played (the replicas play
    out alike); ``all_replicas`` plays every one (tests/render/test_timeline.py compares the two)."""
    if score.oom:
        return None
    n_mb = problem.microbatches
    groups = plan.groups
    chunks = len(plan.stages)
    taus = _chunk_taus(problem, plan)
    d_of = [score.stages[j % groups].d for j in range(chunks)]
    # one d everywhere and N a multiple of it: replica r of every stage runs the micro-batches
    # k = r mod d, and a pass waits only on passes of its own micro-batch or replica, so the d
    # replicas play out alike: replica 0's passes alone give the makespan (and the drawing)
    alike = not all_replicas and len(set(d_of)) == 1 and n_mb % d_of[0] == 0
    played = n_mb // d_of[0] if alike else n_mb
    if 2 * played * chunks > MAX_PASSES:
        return None
    orders = pass_orders(plan, score, n_mb, replicas=1 if alike else None)
    mbs = range(0, n_mb, d_of[0]) if alike else range(n_mb)
    # a pass is (kind, chunk, micro-batch); its replica is (group, micro-batch mod d)
    deps: dict[tuple[str, int, int], list[tuple[str, int, int]]] = {}
    after: dict[tuple[str, int, int], list[tuple[str, int, int]]] = {}
    for seq in orders.values():
        for a, b in zip(seq, seq[1:]):
            deps.setdefault(b, []).append(a)
            after.setdefault(a, []).append(b)
    for j in range(chunks):
        for k in mbs:
            f, b = ("F", j, k), ("B", j, k)
            cross = [("F", j - 1, k)] if j > 0 else []
            cross_b = [f] + ([("B", j + 1, k)] if j + 1 < chunks else [])
            for x, ds in ((f, cross), (b, cross_b)):
                for dep in ds:
                    deps.setdefault(x, []).append(dep)
                    after.setdefault(dep, []).append(x)
    waiting = {x: len(deps.get(x, ())) for seq in orders.values() for x in seq}
    finish: dict[tuple[str, int, int], float] = {}
    start_of: dict[tuple[str, int, int], float] = {}
    ready = deque(x for x, n in waiting.items() if n == 0)
    while ready:
        x = ready.popleft()
        kind, j, _k = x
        begin = max((finish[p] for p in deps.get(x, ())), default=0.0)
        share = FORWARD_SHARE if kind == "F" else 1.0 - FORWARD_SHARE
        start_of[x] = begin
        finish[x] = begin + taus[j] * share
        for y in after.get(x, ()):
            waiting[y] -= 1
            if waiting[y] == 0:
                ready.append(y)
    if len(finish) != len(waiting):
        return None  # the replica orders deadlock
    passes: list[Pass] = []
    makespan = 0.0
    local_index = {}
    for (g, r), seq in orders.items():
        end = max(finish[x] for x in seq) if seq else 0.0
        resync = n_mb * score.stages[g].resync
        makespan = max(makespan, end + resync)
        if r != 0:
            continue
        mine = list(range(0, n_mb, d_of[g]))
        local_index = {k: i for i, k in enumerate(mine)}
        for x in seq:
            kind, j, k = x
            passes.append(Pass(g, j, k, local_index[k], kind, start_of[x], finish[x]))
        if resync > 0:
            passes.append(Pass(g, g, -1, len(mine), "R", end, end + resync))
    passes.sort(key=lambda p: (p.group, p.start))
    return Timeline(groups, tuple(math.ceil(n_mb / d_of[g]) for g in range(groups)), tuple(passes), makespan)


@dataclass(frozen=True)
class TimelineCut:
    """The steady state left out of the drawing: times in (``start``, ``end``) are drawn as a
    gap of ``gap`` (time units), ``elided`` micro-batches per replica of the first group."""

    start: float
    end: float
    gap: float
    elided: int

    def x(self, t: float) -> float:
        """Where time ``t`` is drawn."""
        return t if t <= self.start else t - (self.end - self.start) + self.gap


def steady_state_cut(timeline: Timeline, keep: int | None = None) -> TimelineCut | None:
    """The cut that keeps the first and last ``keep`` micro-batches of every replica (default:
    the number of groups + 1) when the steady state between them is long; None when every
    micro-batch fits in the picture."""
    keep = timeline.groups + 1 if keep is None else keep
    m = min(timeline.microbatches)
    if m <= 2 * keep + 2:
        return None
    first_end = max(p.end for p in timeline.passes if p.kind != "R" and p.local < keep)
    late = [p.start for p in timeline.passes if p.kind != "R" and p.local >= timeline.microbatches[p.group] - keep]
    last_start = min(late) if late else first_end
    if last_start - first_end <= 0.1 * timeline.makespan:
        return None
    drawn = timeline.makespan - (last_start - first_end)
    return TimelineCut(first_end, last_start, 0.05 * drawn, m - 2 * keep)


def draw_timeline(ax, timeline: Timeline, colours, *, batch_time: float, time_unit: str) -> TimelineCut | None:
    """Draw ``timeline`` on the matplotlib axes ``ax``: one row per group (group 1 on top), replica
    0's forward (light) and backward (dark) passes, idle time blank, the resync hatched; the
    schedule's end and the evaluator's batch time as vertical lines. Returns the cut used."""
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    cut = steady_state_cut(timeline)
    x = cut.x if cut is not None else (lambda t: t)
    rows = timeline.groups
    labelled = rows <= 16
    half = 0.82 / 2
    # one collection per kind of pass (thousands of bars: one barh call each took minutes)
    boxes: dict[str, tuple[list, list]] = {"F": ([], []), "B": ([], []), "R": ([], [])}
    for p in timeline.passes:
        if cut is not None and p.end > cut.start and p.start < cut.end:
            continue  # in the steady state that is cut out
        y = rows - 1 - p.group
        base = colours[p.group]
        if p.kind == "F":
            face = tuple(0.55 + 0.45 * c for c in base[:3]) + (1.0,)
        elif p.kind == "B":
            face = tuple(base[:3]) + (1.0,)
        else:
            face = (0.33, 0.66, 0.41, 0.5)
        left, right = x(p.start), x(p.end)
        verts, faces = boxes[p.kind]
        verts.append([(left, y - half), (right, y - half), (right, y + half), (left, y + half)])
        faces.append(face)
        if labelled and p.kind != "R" and (right - left) > 0.018 * x(timeline.makespan):
            ax.text((left + right) / 2, y, str(p.microbatch + 1), ha="center", va="center", fontsize=6,
                    color="black" if p.kind == "F" else "white")
    for kind, (verts, faces) in boxes.items():
        if verts:
            ax.add_collection(PolyCollection(verts, facecolors=faces, edgecolors="white" if kind != "R" else "none",
                                             linewidths=0.3, hatch="//" if kind == "R" else None))
    end = x(timeline.makespan)
    ax.axvline(end, color="black", linewidth=1.0, label=f"schedule's end {timeline.makespan:.4g}")
    if math.isfinite(batch_time):
        ax.axvline(x(batch_time), color="black", linestyle="--", linewidth=1.0,
                   label=f"batch time (evaluator) {batch_time:.4g}")
    if cut is not None:
        ax.axvspan(cut.start, cut.start + cut.gap, color="#EEEEEE", zorder=0)
        ax.text(cut.start + cut.gap / 2, (rows - 1) / 2, f"≈ {cut.elided} micro-batches per replica", ha="center",
                va="center", rotation=90, fontsize=7)
    step = max(1, -(-rows // 16))
    ticks = list(range(0, rows, step))
    ax.set_yticks([rows - 1 - g for g in ticks], [str(g + 1) for g in ticks], fontsize=7.5)
    ax.set_ylim(-0.6, rows - 0.4 + max(0.9, 0.12 * rows))  # room above the rows for the legend
    ax.set_xlim(0, end * 1.01)
    ax.set_xlabel(f"time in one iteration ({time_unit}; replica 0 of each group; numbers: micro-batches)"
                  + ("; the steady state is cut" if cut is not None else ""), fontsize=9)
    handles = [Patch(facecolor=(0.8, 0.8, 0.8), label="forward"), Patch(facecolor=(0.35, 0.35, 0.35), label="backward"),
               Patch(facecolor=(0.33, 0.66, 0.41, 0.5), hatch="//", label="weight resync")]
    lines, labels = ax.get_legend_handles_labels()
    ax.legend(handles=handles + lines, loc="upper right", fontsize=7.5, ncol=5, frameon=False)
    return cut
