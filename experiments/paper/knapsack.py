"""Appendix C: the reference greedy knapsack against the exact one (``piper.dp.knapsack``), on
BERT-32's stage problems and end to end, and its plot."""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiments.lib.suites import GIB, PAPER_BANDWIDTH, paper_workload
from experiments.paper.output import COLORS, short_number
from experiments.paper.runs import Config, run_variant
from piper.core.evaluate import add_cut_bytes
from piper.core.problem import Problem
from piper.render.headless import headless_pyplot

# ---------------------------------------------------------------------------------
# Appendix C: greedy against exact knapsack
# ---------------------------------------------------------------------------------

KNAPSACK_COLUMNS = (
    "part", "sample", "memory_gib", "k", "t", "d", "y", "segment", "instances", "greedy_optimal",
    "infeasible", "max_relative_gap", "mean_relative_gap_when_worse", "greedy", "exact", "relative_gap",
    "status", "time_s",
)


def knapsack_experiment(cfg: Config) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    rows.extend(_knapsack_stage_sample(cfg))
    rows.extend(_knapsack_end_to_end(cfg))
    return rows


@dataclass(frozen=True)
class _StageData:
    """One contiguous segment at one t: per node (file order) and option, the
    cut-edge bytes E, parameter bytes w, compute p and memory a, b."""

    label: str
    off: Any
    edge: Any
    w: Any
    p: Any
    a: Any
    b: Any


def _stage_data(problem: Problem, members: list[int], t: int) -> _StageData | None:
    import numpy as np

    inside = set(members)
    off = [0]
    edge, w, p, a, b = [], [], [], [], []
    for v in members:
        lst = problem.node(v).tmpcs.get(t)
        if not lst:
            return None
        for c in lst:
            edge.append(add_cut_bytes(0.0, problem, v, c, inside))
            w.append(c.parameter_size)
            p.append(c.time_per_sample)
            a.append(c.memory_a)
            b.append(c.memory_b)
        off.append(len(edge))
    lab = f"{members[0]}..{members[-1]} ({len(members)} layers)"
    f = np.asarray
    return _StageData(lab, f(off, dtype=np.int64), f(edge), f(w), f(p), f(a), f(b))


def _knapsack_stage_sample(cfg: Config) -> list[dict[str, Any]]:
    """Greedy vs exact on the stage problems of BERT-32 that the DP solves.

    Sample "paper": the Appendix C run (``single()`` in the driver: M = 8 GiB,
    k = 512, N = 1920, B = 25 GiB/s, y = 2), every contiguous segment (pair of
    nested ideals) x t x d (d | N, d t <= k). Sample "wide": a seeded random
    sample over M in {1, 2, 8, 80} GiB and y in 1..32 as well. One aggregate
    row per (sample, M, y) and one row per instance where greedy is not optimal.
    """
    try:
        from piper.dp.knapsack import exact_knapsack, greedy_knapsack
    except ImportError as exc:
        cfg.say(f"knapsack: piper.dp.knapsack is not available ({exc}); stage sample skipped")
        return [{"part": "stage_summary", "status": "skipped", "segment": f"piper.dp.knapsack not available: {exc}"}]
    import random

    import numpy as np

    n_mb, k = 1920, 512
    bw = float(PAPER_BANDWIDTH)
    problem = paper_workload("bert").with_cluster(devices=k, microbatches=n_mb, bandwidth=bw)
    order = [nd.id for nd in problem.nodes]
    from piper.dp.ideals import enumerate_ideals

    # every ideal as a bitmask over node positions, by size then mask value (the order
    # the seeded sample below draws from)
    masks = sorted(enumerate_ideals(problem).masks, key=lambda m: (bin(m).count("1"), m))
    pairs = [(big, small) for big in masks for small in masks if small != big and small & ~big == 0]
    if cfg.quick:
        pairs = random.Random(1).sample(pairs, 40)
    ts = problem.degrees
    ds = [d for d in range(1, min(n_mb, k) + 1) if n_mb % d == 0]
    t0 = time.perf_counter()
    jobs: list[tuple[str, int, int, float, int]] = []  # (sample, pair index, t, M, y) -> d loop inside
    cache: dict[tuple[int, int], _StageData | None] = {}

    def data(pi: int, t: int) -> _StageData | None:
        if (pi, t) not in cache:
            big, small = pairs[pi]
            diff = big & ~small
            cache[(pi, t)] = _stage_data(problem, [order[i] for i in range(len(order)) if diff >> i & 1], t)
        return cache[(pi, t)]

    for pi in range(len(pairs)):
        for t in ts:
            jobs.append(("paper", pi, t, 8.0 * GIB, 2))
    rng = random.Random(7)
    n_wide = 300 if cfg.quick else 12000
    for _ in range(n_wide):
        jobs.append(("wide", rng.randrange(len(pairs)), rng.choice(ts), rng.choice((1, 2, 8, 80)) * float(GIB),
                     rng.randint(1, 32)))
    agg: dict[tuple[str, float, int], list[float]] = {}
    infeasible: dict[tuple[str, float, int], int] = {}
    detail: list[dict[str, Any]] = []
    for sample, pi, t, mem, y in jobs:
        sd = data(pi, t)
        if sd is None:
            continue
        n_nodes = sd.off.shape[0] - 1
        choice = np.zeros(n_nodes, dtype=np.int64)
        memv = sd.a * y + sd.b
        d_list = [d for d in ds if d * t <= k] if sample == "paper" else [rng.choice([d for d in ds if d * t <= k])]
        for d in d_list:
            cost = (sd.edge / d + 4.0 * (d - 1) * sd.w / (d * n_mb)) / bw + sd.p / d
            g = float(greedy_knapsack(sd.off, cost, memv, mem, choice))
            e = float(exact_knapsack(sd.off, cost, memv, mem, choice))
            key = (sample, mem, y)
            if math.isinf(e) or math.isinf(g):
                infeasible[key] = infeasible.get(key, 0) + 1
                if math.isinf(g) != math.isinf(e):
                    detail.append({"part": "stage", "sample": sample, "memory_gib": mem / GIB, "k": k, "t": t,
                                   "d": d, "y": y, "segment": sd.label, "greedy": g, "exact": e,
                                   "status": "feasibility differs"})
                continue
            gap = g / e - 1.0 if e > 0 else 0.0
            agg.setdefault(key, []).append(gap)
            if gap > 1e-12:
                detail.append({"part": "stage", "sample": sample, "memory_gib": mem / GIB, "k": k, "t": t, "d": d,
                               "y": y, "segment": sd.label, "greedy": g, "exact": e, "relative_gap": gap,
                               "status": "greedy worse"})
            elif gap < -1e-12:
                detail.append({"part": "stage", "sample": sample, "memory_gib": mem / GIB, "k": k, "t": t, "d": d,
                               "y": y, "segment": sd.label, "greedy": g, "exact": e, "relative_gap": gap,
                               "status": "greedy better than exact?!"})
    elapsed = time.perf_counter() - t0
    rows: list[dict[str, Any]] = []
    for key in sorted(set(agg) | set(infeasible)):
        sample, mem, y = key
        gaps = agg.get(key, [])
        worse = [x for x in gaps if x > 1e-12]
        rows.append({
            "part": "stage_summary", "sample": sample, "memory_gib": mem / GIB, "k": k, "y": y,
            "instances": len(gaps) + infeasible.get(key, 0), "greedy_optimal": len(gaps) - len(worse),
            "infeasible": infeasible.get(key, 0), "max_relative_gap": max(gaps) if gaps else None,
            "mean_relative_gap_when_worse": sum(worse) / len(worse) if worse else 0.0, "status": "ok",
            "time_s": elapsed,
        })
    for sample in ("paper", "wide"):
        gaps = [x for key, v in agg.items() if key[0] == sample for x in v]
        worse = [x for x in gaps if x > 1e-12]
        cfg.say(f"knapsack: {sample} sample: {len(gaps)} feasible stage problems, greedy optimal in "
                  f"{len(gaps) - len(worse)}, worst gap {max(gaps, default=0.0):.3g}")
    return rows + detail


def _knapsack_end_to_end(cfg: Config) -> list[dict[str, Any]]:
    mems = (8,) if cfg.quick else (1, 2, 8, 80)
    ks = (8, 32) if cfg.quick else (8, 32, 64, 128, 512, 1024, 2048)
    base = paper_workload("bert")
    rows: list[dict[str, Any]] = []
    for mem in mems:
        for k in ks:
            p = base.with_cluster(devices=k, memory=mem * GIB, microbatches=1920, bandwidth=PAPER_BANDWIDTH)
            g = run_variant(p, "piper", replace(cfg, knapsack="greedy"))
            e = run_variant(p, "piper", replace(cfg, knapsack="exact"))
            gap = None if g.tps is None or e.tps is None else g.tps / e.tps - 1.0
            rows.append({"part": "end_to_end", "memory_gib": mem, "k": k, "greedy": g.tps, "exact": e.tps,
                         "relative_gap": gap, "status": f"{g.status}/{e.status}", "time_s": g.time_s + e.time_s})
            cfg.say(f"knapsack: {mem} GiB k={k}: greedy={short_number(g.tps)} exact={short_number(e.tps)} gap={short_number(gap)}")
    return rows


def plot_knapsack(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = headless_pyplot()
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.6))
    summ = [r for r in rows if r["part"] == "stage_summary" and r.get("instances") not in (None, "")]
    worse = sorted((float(r["relative_gap"]), r) for r in rows if r["part"] == "stage"
                   and r.get("relative_gap") not in (None, "") and float(r["relative_gap"]) > 0)
    n_inst = sum(int(r["instances"]) - int(r["infeasible"]) for r in summ)
    n_opt = sum(int(r["greedy_optimal"]) for r in summ)
    if worse:
        gaps = [100 * g for g, _ in worse]
        ax1.plot(gaps, range(len(gaps)), "o", color=COLORS["noAR"])
        for i, (g, r) in enumerate(worse[:25]):
            ax1.annotate(f"{r['sample']}: M={float(r['memory_gib']):g} GiB t={r['t']} d={r['d']} y={r['y']}",
                         (100 * g, i), fontsize=6, xytext=(4, 0), textcoords="offset points", va="center")
        ax1.set_xscale("log")
        ax1.set_xlim(min(gaps) / 2, max(gaps) * 30)  # room for the labels
        ax1.set_yticks([])
        ax1.set_ylim(-1, len(gaps))
    else:
        ax1.text(0.5, 0.5, "greedy optimal on every sampled stage problem", ha="center", transform=ax1.transAxes)
    ax1.set_title(f"stage problems: greedy optimal in {n_opt} of {n_inst} feasible", fontsize=10)
    ax1.set_xlabel("greedy stage TPS over exact stage TPS - 1 (%), non-optimal cases")
    ax1.set_ylabel("non-optimal stage problems")
    e2e = [r for r in rows if r["part"] == "end_to_end"]
    mems = sorted({float(r["memory_gib"]) for r in e2e})
    allzero = True
    for j, mem in enumerate(mems):
        pts = sorted((int(r["k"]), float(r["relative_gap"])) for r in e2e
                     if float(r["memory_gib"]) == mem and r.get("relative_gap") not in (None, ""))
        if pts:
            xs, ys = zip(*pts)
            allzero = allzero and all(y == 0.0 for y in ys)
            ax2.plot(xs, [100 * y for y in ys], "osD^v"[j % 5] + "-", label=f"{mem:g} GiB",
                     markersize=10 - 2 * j, fillstyle="none", linewidth=1)
    if e2e and allzero:
        ax2.text(0.5, 0.8, "greedy-knapsack DP = exact DP on every configuration", ha="center",
                 transform=ax2.transAxes, fontsize=9)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("number of devices k")
    ax2.set_ylabel("greedy DP TPS over exact DP TPS - 1 (%)")
    ax2.set_title("end to end, BERT-32, N = 1920, B = 25 GiB/s (both feasible)", fontsize=10)
    ax2.grid(True, which="both", alpha=0.3)
    if mems:
        ax2.legend(fontsize=7)
    fig.suptitle("Appendix C: the reference greedy knapsack against an exact one")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
