"""Reproduce the figures and tables of the Piper paper (NeurIPS 2021), with CSVs and PNG plots.

    python -m experiments.paper NAME [--quick] [--knapsack greedy|exact] [--out DIR]
                                     [--time-limit SECONDS] [--no-isolate] [--quiet]
                                     [--backend local|ray] [--address ADDR]

NAME is one of ``fig1``, ``fig2``, ``fig3``, ``gnmt``, ``resnet``, ``knapsack``
or ``all``. Each writes ``DIR/NAME.csv`` (default DIR ``out/paper``) (full float precision, no rounding)
and ``DIR/NAME.png``; progress goes to stderr. ``--quick`` runs a small slice
of each experiment (seconds; what the tests run). The default knapsack is the
reference's greedy heuristic, so the numbers are the paper's (the authors'
planner); ``--knapsack exact`` runs the exact DP instead.

The configurations follow the authors' driver (msr-fiddle/piper ``algo.cpp``,
``main``), which is where the paper's numbers come from:

* fig1 (``plots()``): BERT-32, N = 1920, B = 25 GiB/s, M in {1, 2, 8, 80} GiB,
  k in {8, 32, 64, 128, 512, 1024, 2048} (k > max t * N skipped); no DP, no TP,
  no AR, equi without TP and equi, as throughput relative to Piper's (TPS_piper /
  TPS_variant; 0 = no feasible plan). As in the driver, a k where Piper itself
  has no plan gets no bars (its rows say so).
* fig2 (``parallelizabilityExperiment(32, 8, N)``): BERT-32, M = 8 GiB, the
  file's bandwidth (25e9 B/s: the driver does not override it), k = 2048, N in
  {960, 512}: the best TPS for every device count from one DP run per variant
  (``Result.stats["curve"]``), the equi baselines at k in {8, 16, ..., 2048}
  and, at k = 2048, against N in {8, ..., 1024} (``runPD2BWAndWrite``).
* fig3 (``scalability()``): the planner's wall time against k in {8, 16, ...,
  2048} for BERT-32/48/64/96 (layer insertion) and N in {480, 512, 1920, 2048},
  with the file's memory (80e9 B) and bandwidth; one run per point, its wall
  time and its CPU time (on a shared machine the CPU time is the fairer one).
* gnmt / resnet (``runGNMT`` / ``runResnet``): the (k, memory GiB) pairs of the
  paper's tables, B = 25 GiB/s, the file's N; Piper's TPS, the equi baseline's
  (even split of a topological order, no TP: ``equi_nonTransformer``), their
  ratio TPS_piper / TPS_equi and Piper's running time. Every DP run honours
  ``--time-limit``; when the full DP hits it, the row is re-solved with
  ``Options.linearize`` (stages = segments of one topological order: fast, not
  exact) and says so (``linearize`` column, ``message`` with the full DP's
  status and time); a run that still hits the limit is a ``timeout`` row.
* knapsack (Appendix C): the reference greedy knapsack against the exact one
  (``piper.knapsack``) on stage problems of BERT-32: every contiguous segment
  (pair of nested ideals) x t x d at the driver's Appendix C setting (8 GiB,
  k = 512, y = 2), plus a seeded random sample over M and y; and the
  end-to-end TPS of the greedy-knapsack DP against the exact DP on fig1's grid.

DP runs are isolated in a worker process (``piper.execution``; ``--no-isolate`` runs
them in-process) so that a run past its time limit is stopped and recorded instead
of hanging the experiment; ``--backend ray`` runs them in a Ray actor (on the cluster
at ``--address`` / ``RAY_ADDRESS``, or a local Ray instance), one run at a time.
"""

from __future__ import annotations

import csv
import math
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import baselines
from experiments import _cli
from experiments.suites import GIB, GNMT_PAIRS, PAPER_BANDWIDTH, RESNET_PAIRS, paper_workload, slice_problem
from piper.execution import ExecutionOptions, WorkerPool, add_backend_args, execution_options
from piper.options import NO_AR, Options
from piper.problem import Problem
from piper.result import Result

__all__ = [
    "Config",
    "EXPERIMENTS",
    "VARIANTS",
    "DP_VARIANTS",
    "EQUI_VARIANTS",
    "GIB",
    "workload",
    "variant_solver",
    "run_variant",
    "write_csv",
    "read_csv",
    "main",
]

#: a paper workload by short name (bert, gnmt, resnet), BERT grown by layer insertion
workload = paper_workload

#: variant names used in every CSV, in plotting order
DP_VARIANTS = ("piper", "noDP", "noTP", "noAR")
EQUI_VARIANTS = ("equi_noTP", "equi")
VARIANTS = DP_VARIANTS + EQUI_VARIANTS + ("equi_nonTransformer",)
LABELS = {
    "piper": "Piper",
    "noDP": "no DP",
    "noTP": "no TP",
    "noAR": "no AR",
    "equi_noTP": "equi, no TP",
    "equi": "equi",
    "equi_nonTransformer": "equi (topological split)",
}
COLORS = {  # the driver's colours
    "piper": "#2b7bba",
    "noDP": "#DB7093",
    "noTP": "#FFD700",
    "noAR": "#008000",
    "equi_noTP": "#191970",
    "equi": "#FF4500",
    "equi_nonTransformer": "#FF4500",
}


@dataclass(frozen=True)
class Config:
    """How to run an experiment."""

    out: Path = Path("out/paper")
    quick: bool = False
    #: the DP's knapsack: "greedy" (the paper's numbers) or "exact"
    knapsack: str = "greedy"
    #: wall-clock limit of one DP run, seconds
    time_limit_s: float = 300.0
    #: run DP solves in an isolated worker (killed past the limit): piper.execution
    isolate: bool = True
    #: progress lines on stderr
    progress: bool = True
    #: where isolated runs execute: "local" (a worker process) or "ray" (a Ray actor)
    backend: str = "local"
    #: the Ray cluster (None: RAY_ADDRESS, else a local Ray instance)
    address: str | None = None
    #: the workers of isolated runs (None: one started per run); the command makes one
    pool: WorkerPool | None = field(default=None, compare=False, repr=False)


# ---------------------------------------------------------------------------------
# running one configuration
# ---------------------------------------------------------------------------------


def variant_solver(
    variant: str,
    knapsack: str = "greedy",
    time_limit_s: float | None = None,
    params: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
) -> tuple[str, Options]:
    """The registry solver and the Options of a paper variant (the one mapping every figure uses).

    ``overrides`` replace Options fields (e.g. ``{"linearize": True}``).

    ``params`` are merged into ``Options.params`` (e.g. ``{"curve": True}`` for
    the DP's best-TPS-per-device-count curve). DP runs get ``{"curve": False}``
    unless asked: the figures that need no curve should not pay for it.
    """
    if knapsack not in ("greedy", "exact"):
        raise ValueError(f"knapsack must be 'greedy' or 'exact', not {knapsack!r}")
    dp = "dp-greedy" if knapsack == "greedy" else "dp"
    base = Options(knapsack=knapsack, time_limit_s=time_limit_s)
    table: dict[str, tuple[str, Options]] = {
        "piper": (dp, base),
        "noDP": (dp, replace(base, data_parallel=False)),
        "noTP": (dp, replace(base, tensor_parallel=False)),
        "noAR": (dp, replace(base, exclude_tmpcs=NO_AR)),
        "equi": ("equi", base),
        "equi_noTP": ("equi", replace(base, tensor_parallel=False)),
        "equi_nonTransformer": ("equi", replace(base, tensor_parallel=False, params={"equi_mode": "topological"})),
    }
    try:
        solver, opts = table[variant]
    except KeyError:
        raise ValueError(f"unknown variant {variant!r}; known: {', '.join(table)}") from None
    merged = dict(opts.params)
    if solver.startswith("dp"):
        merged.setdefault("curve", False)
    merged.update(params or {})
    return solver, replace(opts, params=merged, **dict(overrides or {}))


@dataclass
class RunOutcome:
    """What an experiment keeps of one solver run."""

    tps: float | None
    #: the Result status, or "timeout" / "error"
    status: str
    time_s: float
    devices_used: int | None = None
    sum_d: int | None = None
    num_stages: int | None = None
    stats: dict[str, Any] = field(default_factory=dict)
    message: str = ""


def _outcome(res: Result, keep_stats: Sequence[str]) -> RunOutcome:
    tps = res.tps if res.plan is not None and math.isfinite(res.tps) else None
    return RunOutcome(
        tps=tps,
        status=str(res.status),
        time_s=res.time_s,
        devices_used=res.devices_used,
        sum_d=None if res.plan is None else res.plan.sum_d,
        num_stages=None if res.plan is None else len(res.plan.stages),
        stats={k: res.stats[k] for k in keep_stats if k in res.stats},
        message=res.message,
    )


def _solve_outcome(problem: Problem, solver: str, options: Options, keep: Sequence[str]) -> RunOutcome:
    """One run, in the process it is called in (a worker of ``Config.pool`` when isolated)."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        res = baselines.solve(problem, options, solver=solver)
    except Exception as exc:  # noqa: BLE001 - one failed run is a row, not a crash
        return RunOutcome(None, "error", time.perf_counter() - t0, message=f"{type(exc).__name__}: {exc}")
    out = _outcome(res, keep)
    out.stats["wall_s"] = time.perf_counter() - t0
    out.stats["cpu_s"] = time.process_time() - c0
    return out


#: knapsacks whose DP code is compiled in this (worker) process
_WARM: set[str] = set()


def _warm_process(knapsack: str) -> None:
    """Compile the DP's numba code of ``knapsack`` in this process, once (untimed), so that
    no timed run includes compilation; a fresh worker (after a kill) compiles again."""
    if knapsack in _WARM:
        return
    _WARM.add(knapsack)
    tiny = workload("bert").with_cluster(devices=2, microbatches=2)
    solver, options = variant_solver("piper", knapsack, None, {"curve": True})
    _solve_outcome(tiny, solver, options, ())


def hard_timeout(cfg: Config) -> float:
    """Seconds after which an isolated DP run is killed: 1.5x the time limit + 30 s."""
    return cfg.time_limit_s * 1.5 + 30.0


def run_variant(
    problem: Problem,
    variant: str,
    cfg: Config,
    *,
    params: Mapping[str, Any] | None = None,
    overrides: Mapping[str, Any] | None = None,
    keep_stats: Sequence[str] = ("curve", "ideals", "ideal_pairs", "linearize"),
) -> RunOutcome:
    """Solve ``problem`` as ``variant``; DP runs obey ``cfg.time_limit_s``. With
    ``cfg.isolate`` a DP run goes to a worker of ``cfg.pool`` (:mod:`piper.execution`;
    without one, a worker process started for this run) and is killed at
    :func:`hard_timeout` if it does not stop by itself."""
    solver, options = variant_solver(variant, cfg.knapsack, cfg.time_limit_s, params, overrides)
    if not (solver.startswith("dp") and cfg.isolate):
        return _timeout_status(_solve_outcome(problem, solver, options, keep_stats), cfg)
    hard = hard_timeout(cfg)
    pool = cfg.pool or WorkerPool(ExecutionOptions(cfg.backend, 1, hard, cfg.address, ("baselines",)))
    try:
        warm = pool.call(_warm_process, cfg.knapsack, timeout=max(hard, 600.0))
        if not warm.ok:
            return RunOutcome(None, "error", warm.seconds, message=f"warm-up: {warm.message}")
        out = pool.call(_solve_outcome, problem, solver, options, tuple(keep_stats), timeout=hard)
    finally:
        if cfg.pool is None:
            pool.close()
    if out.error == "timeout":
        return RunOutcome(None, "timeout", out.seconds,
                          message=f"killed after {out.seconds:.0f} s (limit {cfg.time_limit_s} s)")
    if not out.ok:
        return RunOutcome(None, "error", out.seconds, message=out.message)
    return _timeout_status(out.value, cfg)


def _timeout_status(out: RunOutcome, cfg: Config) -> RunOutcome:
    """A run that hit its time limit without a proven answer is a 'timeout' row."""
    hit_limit = "time limit" in out.message.lower()
    if (out.status == "unknown" or out.status == "feasible") and hit_limit:
        out.status = "timeout" if out.tps is None else "timeout-feasible"
    return out


# ---------------------------------------------------------------------------------
# CSV helpers
# ---------------------------------------------------------------------------------


def _cell(x: Any) -> Any:
    if x is None:
        return ""
    if isinstance(x, float):
        return repr(x) if math.isfinite(x) else ""
    return x


def write_csv(path: Path, rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> None:
    """Write rows with full float precision (``repr``); None / inf become empty cells."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in columns])


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def _say(cfg: Config, msg: str) -> None:
    if cfg.progress:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.6g}"


def _plt() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


# ---------------------------------------------------------------------------------
# Fig. 1: ablations and equi relative to Piper
# ---------------------------------------------------------------------------------

FIG1_COLUMNS = (
    "memory_gib", "k", "N", "bandwidth", "variant", "tps", "relative_throughput", "status",
    "devices_used", "sum_d", "num_stages", "time_s", "message",
)


def fig1(cfg: Config) -> list[dict[str, Any]]:
    """Fig. 1 rows: every (memory, k, variant)."""
    n_mb = 1920
    mems = (8,) if cfg.quick else (1, 2, 8, 80)
    # the quick grid holds k = 128, a configuration of the golden sample
    ks = (8, 128) if cfg.quick else (8, 32, 64, 128, 512, 1024, 2048)
    base = workload("bert")
    max_t = max(base.degrees)
    rows: list[dict[str, Any]] = []
    for mem in mems:
        for k in ks:
            if max_t * n_mb < k:
                _say(cfg, f"fig1: skip k={k} (> max t * N)")
                continue
            p = base.with_cluster(devices=k, memory=mem * GIB, microbatches=n_mb, bandwidth=PAPER_BANDWIDTH)
            ref: float | None = None
            for variant in DP_VARIANTS + EQUI_VARIANTS:
                out = run_variant(p, variant, cfg)
                if variant == "piper":
                    ref = out.tps
                rel = None
                if ref is not None:
                    rel = 0.0 if out.tps is None else ref / out.tps
                rows.append({
                    "memory_gib": mem, "k": k, "N": n_mb, "bandwidth": PAPER_BANDWIDTH, "variant": variant,
                    "tps": out.tps, "relative_throughput": rel, "status": out.status,
                    "devices_used": out.devices_used, "sum_d": out.sum_d, "num_stages": out.num_stages,
                    "time_s": out.time_s, "message": out.message,
                })
                _say(cfg, f"fig1: {mem} GiB k={k} {variant}: tps={_fmt(out.tps)} rel={_fmt(rel)} "
                          f"[{out.status}, {out.time_s:.2f} s]")
    return rows


def plot_fig1(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = _plt()
    mems = sorted({float(r["memory_gib"]) for r in rows})
    fig, axes = plt.subplots(1, len(mems), figsize=(4.4 * len(mems) + 0.6, 4.4), squeeze=False, sharey=True)
    variants = [v for v in DP_VARIANTS[1:] + EQUI_VARIANTS]
    width = 0.8 / len(variants)
    for ax, mem in zip(axes[0], mems):
        sub = [r for r in rows if float(r["memory_gib"]) == mem]
        ks = sorted({int(r["k"]) for r in sub})
        for j, v in enumerate(variants):
            xs, ys = [], []
            for i, k in enumerate(ks):
                r = next((r for r in sub if int(r["k"]) == k and r["variant"] == v), None)
                val = None if r is None else r["relative_throughput"]
                if val in (None, ""):
                    continue
                xs.append(i - 0.4 + width * (j + 0.5))
                ys.append(float(val))
            ax.bar(xs, ys, width=width, color=COLORS[v], label=LABELS[v], edgecolor="black", linewidth=0.3)
            zero = [x for x, y in zip(xs, ys) if y == 0.0]  # no feasible plan: a cross on the axis
            ax.plot(zero, [0.015] * len(zero), "x", color=COLORS[v], markersize=5, markeredgewidth=1.5)
        for i, k in enumerate(ks):
            pr = next((r for r in sub if int(r["k"]) == k and r["variant"] == "piper"), None)
            if pr is None or pr["tps"] in (None, ""):
                ax.text(i, 0.5, "no Piper plan", rotation=90, ha="center", va="center", fontsize=7)
        ax.axhline(1.0, color=COLORS["piper"], linewidth=1.5, label="Piper (= 1)")
        ax.set_xticks(range(len(ks)))
        ax.set_xticklabels([str(k) for k in ks])
        ax.set_xlabel("number of devices k")
        ax.set_title(f"{mem:g} GiB per device")
        ax.set_ylim(0, 1.08)
        ax.grid(True, axis="y", alpha=0.3)
    axes[0][0].set_ylabel("throughput relative to Piper (Piper = 1)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    ncol = len(labels) if len(mems) > 1 else 3
    fig.legend(handles, labels, loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    fig.suptitle("Fig. 1: BERT-32, N = 1920, B = 25 GiB/s (a cross on the axis = no feasible plan)", fontsize=10)
    fig.tight_layout(rect=(0, 0.07 if ncol == len(labels) else 0.12, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------
# Fig. 2: best TPS per device count; equi against N
# ---------------------------------------------------------------------------------

FIG2_COLUMNS = ("series", "N", "memory_gib", "bandwidth", "variant", "k", "tps", "status", "time_s", "message")
FIG2_DEVICE_GRID = (8, 16, 32, 64, 128, 256, 512, 768, 1024, 1280, 1536, 1792, 2048)
FIG2_BATCH_GRID = (8, 16, 32, 64, 128, 256, 384, 512, 640, 768, 896, 1024)


def _curve_points(curve: Iterable[Sequence[Any]]) -> list[tuple[int, float | None]]:
    """[(k', best TPS with at most k' devices)], made monotone (the curve may be
    per exact device count)."""
    pts = sorted((int(k), None if v is None or not math.isfinite(float(v)) else float(v)) for k, v in curve)
    best: float | None = None
    out = []
    for k, v in pts:
        if v is not None and (best is None or v < best):
            best = v
        out.append((k, best))
    return out


def fig2(cfg: Config) -> list[dict[str, Any]]:
    mem = 8
    k_max = 64 if cfg.quick else 2048
    ns = (512,) if cfg.quick else (960, 512)
    dev_grid = tuple(k for k in FIG2_DEVICE_GRID if k <= k_max)
    batch_grid = (8, 16, 32) if cfg.quick else FIG2_BATCH_GRID
    base = workload("bert")
    bw = base.bandwidth  # the driver keeps the file's bandwidth here
    rows: list[dict[str, Any]] = []
    for n_mb in ns:
        p = base.with_cluster(devices=k_max, memory=mem * GIB, microbatches=n_mb)
        for variant in DP_VARIANTS:
            out = run_variant(p, variant, cfg, params={"curve": True})
            curve = out.stats.get("curve")
            _say(cfg, f"fig2: N={n_mb} {variant}: tps={_fmt(out.tps)} [{out.status}, {out.time_s:.2f} s]")
            if curve is None:
                rows.append({"series": "devices", "N": n_mb, "memory_gib": mem, "bandwidth": bw, "variant": variant,
                             "k": k_max, "tps": out.tps, "status": out.status, "time_s": out.time_s,
                             "message": out.message or "no curve in the result"})
                continue
            for k, tps in _curve_points(curve):
                rows.append({"series": "devices", "N": n_mb, "memory_gib": mem, "bandwidth": bw, "variant": variant,
                             "k": k, "tps": tps, "status": out.status, "time_s": out.time_s, "message": ""})
        for variant in EQUI_VARIANTS:
            for k in dev_grid:
                out = run_variant(p.with_cluster(devices=k), variant, cfg)
                rows.append({"series": "devices", "N": n_mb, "memory_gib": mem, "bandwidth": bw, "variant": variant,
                             "k": k, "tps": out.tps, "status": out.status, "time_s": out.time_s, "message": ""})
            _say(cfg, f"fig2: N={n_mb} {variant} at {len(dev_grid)} device counts done")
    p = base.with_cluster(devices=k_max, memory=mem * GIB)
    for variant in EQUI_VARIANTS:
        for n_mb in batch_grid:
            out = run_variant(p.with_cluster(microbatches=n_mb), variant, cfg)
            rows.append({"series": "batch", "N": n_mb, "memory_gib": mem, "bandwidth": bw, "variant": variant,
                         "k": k_max, "tps": out.tps, "status": out.status, "time_s": out.time_s, "message": ""})
        _say(cfg, f"fig2: {variant} against N done")
    return rows


def _fig2_style(ax: Any, v: str, xs: Sequence[float], ys: Sequence[float]) -> None:
    if v == "piper":  # drawn wide and light so ablations that coincide with it stay visible
        ax.step(xs, ys, where="post", color=COLORS[v], label=LABELS[v], linewidth=4.5, alpha=0.45)
    elif v in DP_VARIANTS:
        ax.step(xs, ys, where="post", color=COLORS[v], label=LABELS[v], linewidth=1.3)
    else:
        ax.plot(xs, ys, "s:" if v == "equi_noTP" else "o--", color=COLORS[v], label=LABELS[v],
                markersize=6 if v == "equi_noTP" else 4, fillstyle="none" if v == "equi_noTP" else "full")


def plot_fig2(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Top row: best TPS against devices (and equi against N); bottom row: each
    variant's TPS over Piper's at the same device count (how much slower)."""
    plt = _plt()
    ns = sorted({int(r["N"]) for r in rows if r["series"] == "devices"}, reverse=True)
    fig, axes = plt.subplots(2, len(ns) + 1, figsize=(5.2 * (len(ns) + 1), 8.0), squeeze=False)
    for col, n_mb in enumerate(ns):
        ax, axr = axes[0][col], axes[1][col]
        series: dict[str, list[tuple[int, float]]] = {}
        for v in DP_VARIANTS + EQUI_VARIANTS:
            pts = sorted((int(r["k"]), float(r["tps"])) for r in rows if r["series"] == "devices"
                         and int(r["N"]) == n_mb and r["variant"] == v and r["tps"] not in (None, ""))
            if pts:
                series[v] = pts
                xs, ys = zip(*pts)
                _fig2_style(ax, v, xs, ys)
        piper = dict(series.get("piper", []))
        for v, pts in series.items():
            rel = [(k, tps / piper[k]) for k, tps in pts if k in piper and piper[k] > 0]
            if rel:
                xs, ys = zip(*rel)
                _fig2_style(axr, v, xs, ys)
        for a in (ax, axr):
            a.set_xscale("log", base=2)
            a.set_yscale("log")
            a.set_xlabel("number of devices")
            a.grid(True, which="both", alpha=0.3)
        ax.set_ylabel("best time per sample (s)")
        ax.set_title(f"BERT-32, 8 GiB, N = {n_mb}")
        ax.legend(fontsize=7)
        axr.set_ylabel("time per sample / Piper's (x)")
        axr.set_title(f"slowdown against Piper, N = {n_mb}")
    ax = axes[0][-1]
    for v in EQUI_VARIANTS:
        pts = sorted((int(r["N"]), float(r["tps"])) for r in rows
                     if r["series"] == "batch" and r["variant"] == v and r["tps"] not in (None, ""))
        if pts:
            xs, ys = zip(*pts)
            _fig2_style(ax, v, xs, ys)
    kb = sorted({int(r["k"]) for r in rows if r["series"] == "batch"})
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("microbatches per batch N")
    ax.set_ylabel("time per sample (s)")
    ax.set_title(f"equi baselines against N (k = {kb[0] if kb else '?'})")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7)
    axes[1][-1].axis("off")
    fig.suptitle("Fig. 2: best time per sample (lower is better); Piper and ablations: one DP run each")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------
# Fig. 3: the planner's running time
# ---------------------------------------------------------------------------------

FIG3_COLUMNS = ("layers", "N", "k", "time_s", "cpu_s", "wall_s", "tps", "status", "ideals", "ideal_pairs", "message")
FIG3_DEVICE_GRID = (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048)


def fig3(cfg: Config) -> list[dict[str, Any]]:
    layers = (32,) if cfg.quick else (32, 48, 64, 96)
    ns = (480, 512) if cfg.quick else (480, 512, 1920, 2048)
    ks = (8, 16, 32) if cfg.quick else FIG3_DEVICE_GRID
    rows: list[dict[str, Any]] = []
    for L in layers:
        base = workload("bert", L)
        for n_mb in ns:
            stop = False
            for k in ks:
                if stop:
                    rows.append({"layers": L, "N": n_mb, "k": k, "status": "skipped",
                                 "message": "a smaller k already hit the time limit"})
                    continue
                out = run_variant(base.with_cluster(devices=k, microbatches=n_mb), "piper", cfg)
                rows.append({"layers": L, "N": n_mb, "k": k, "time_s": out.time_s, "cpu_s": out.stats.get("cpu_s"),
                             "wall_s": out.stats.get("wall_s"),
                             "tps": out.tps, "status": out.status, "ideals": out.stats.get("ideals"),
                             "ideal_pairs": out.stats.get("ideal_pairs"), "message": out.message})
                _say(cfg, f"fig3: BERT-{L} N={n_mb} k={k}: {out.time_s:.2f} s wall, "
                          f"{out.stats.get('cpu_s', float('nan')):.2f} s CPU [{out.status}]")
                stop = out.status.startswith("timeout")
    return rows


def plot_fig3(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = _plt()
    layers = sorted({int(r["layers"]) for r in rows})
    fig, axes = plt.subplots(1, len(layers), figsize=(4.2 * len(layers), 3.8), squeeze=False, sharey=True)
    markers = "osD^v"
    for ax, L in zip(axes[0], layers):
        ns = sorted({int(r["N"]) for r in rows if int(r["layers"]) == L})
        for j, n_mb in enumerate(ns):
            ok = [r for r in rows if int(r["layers"]) == L and int(r["N"]) == n_mb and r["time_s"] not in (None, "")
                  and not str(r["status"]).startswith(("timeout", "error", "skipped"))]
            pts = sorted((int(r["k"]), float(r["time_s"])) for r in ok)
            if pts:
                xs, ys = zip(*pts)
                line = ax.plot(xs, ys, marker=markers[j % len(markers)], label=f"N = {n_mb} (wall)", markersize=4)
                cpu = sorted((int(r["k"]), float(r["cpu_s"])) for r in ok if r.get("cpu_s") not in (None, ""))
                if cpu:
                    xc, yc = zip(*cpu)
                    ax.plot(xc, yc, linestyle=":", color=line[0].get_color(), linewidth=1,
                            label=f"N = {n_mb} (CPU)")
            outs = [int(r["k"]) for r in rows if int(r["layers"]) == L and int(r["N"]) == n_mb
                    and str(r["status"]).startswith("timeout")]
            for k in outs:
                ax.annotate("timeout", (k, ax.get_ylim()[1]), fontsize=6, rotation=90)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("number of devices k")
        ax.set_title(f"BERT-{L}")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("planner running time (s)")
    fig.suptitle("Fig. 3: Piper's running time, one run per point\n(M = 80e9 B, B = 25e9 B/s; "
                 "dotted: CPU time of the run)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------------------------
# GNMT and ResNet tables
# ---------------------------------------------------------------------------------

TABLE_COLUMNS = (
    "workload", "k", "memory_gib", "N", "bandwidth", "piper_tps", "piper_status", "piper_time_s", "equi_tps",
    "equi_status", "ratio", "linearize", "ideals", "message",
)


def table(name: str, cfg: Config) -> list[dict[str, Any]]:
    """The GNMT or ResNet table: Piper against the topological-split equi baseline."""
    pairs: Sequence[tuple[int, float]]
    if name == "gnmt":
        pairs = ((2, 2.5), (2, 3.5)) if cfg.quick else GNMT_PAIRS
    elif name == "resnet":
        pairs = ((8, 16),) if cfg.quick else RESNET_PAIRS
    else:
        raise ValueError(name)
    base = workload(name)
    if cfg.quick and name == "gnmt":
        # a slice of GNMT small enough for CI: its first 24 layers in topological order (fewer ideals)
        base = slice_problem(base, 24)
    rows: list[dict[str, Any]] = []
    for k, mem in pairs:
        p = base.with_cluster(devices=k, memory=mem * GIB, bandwidth=PAPER_BANDWIDTH)
        pip = run_variant(p, "piper", cfg)
        linearized = False
        note = pip.message
        if pip.status.startswith("timeout"):
            # the full DP did not finish: fall back to stages that are contiguous
            # segments of one topological order (Options.linearize; not exact)
            full = pip
            _say(cfg, f"{name}: k={k} {mem} GiB: full DP {full.status} after {full.time_s:.0f} s; linearized DP")
            pip = run_variant(p, "piper", cfg, overrides={"linearize": True})
            linearized = True
            note = (f"full DP: {full.status} after {full.time_s:.1f} s"
                    + (f" (best found {full.tps!r})" if full.tps is not None else "")
                    + f"; linearized DP: {pip.status} in {pip.time_s:.1f} s")
        eq = run_variant(p, "equi_nonTransformer", cfg)
        ratio = None if pip.tps is None or eq.tps is None else pip.tps / eq.tps
        rows.append({
            "workload": name + ("-slice24" if cfg.quick and name == "gnmt" else ""), "k": k, "memory_gib": mem,
            "N": p.microbatches, "bandwidth": PAPER_BANDWIDTH, "piper_tps": pip.tps, "piper_status": pip.status,
            "piper_time_s": pip.time_s, "equi_tps": eq.tps, "equi_status": eq.status, "ratio": ratio,
            "linearize": linearized, "ideals": pip.stats.get("ideals"),
            "message": note,
        })
        _say(cfg, f"{name}: k={k} {mem} GiB: piper={_fmt(pip.tps)} [{pip.status}{', linearized' if linearized else ''}, "
                  f"{pip.time_s:.1f} s] "
                  f"equi={_fmt(eq.tps)} [{eq.status}] ratio={_fmt(ratio)}")
    return rows


def plot_table(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    plt = _plt()
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(max(7.0, 0.45 * len(rows) + 2.0), 8.0))
    lin = [str(r.get("linearize")) == "True" for r in rows]
    labels = [f"{r['k']}/{float(r['memory_gib']):g}" + (" (lin.)" if li else "") for r, li in zip(rows, lin)]
    if any(lin):
        title += "\n(lin. = the full DP hit the time limit: Piper's numbers there are the linearized DP's, not exact)"
    xs = list(range(len(rows)))
    w = 0.4

    def val(r: Mapping[str, Any], key: str) -> float | None:
        x = r.get(key)
        return None if x in (None, "") else float(x)

    piper = [val(r, "piper_tps") for r in rows]
    equi = [val(r, "equi_tps") for r in rows]
    ax1.bar([x - w / 2 for x, v in zip(xs, piper) if v is not None], [v for v in piper if v is not None], w,
            color=COLORS["piper"], label="Piper")
    ax1.bar([x + w / 2 for x, v in zip(xs, equi) if v is not None], [v for v in equi if v is not None], w,
            color=COLORS["equi"], label="equi (topological split)")
    finite = [v for v in piper + equi if v is not None]
    top = max(finite) if finite else 1.0
    for x, r, pv, ev in zip(xs, rows, piper, equi):
        if ev is None:
            ax1.text(x + w / 2, top, "OOM" if r.get("equi_status") in ("infeasible", "unknown") else str(r.get("equi_status")),
                     rotation=90, fontsize=6, ha="center", va="top")
        if pv is None:
            ax1.text(x - w / 2, top, "no plan" if r.get("piper_status") == "infeasible" else str(r.get("piper_status")),
                     rotation=90, fontsize=6, ha="center", va="top")
    ax1.set_yscale("log")
    ax1.set_xticks(xs)
    ax1.set_xticklabels(labels, rotation=60, fontsize=7)
    ax1.set_xlabel("devices k / memory per device (GiB)")
    ax1.set_ylabel("time per sample (profiler units: ms)")
    ax1.legend(fontsize=7)
    ax1.grid(True, axis="y", which="both", alpha=0.3)
    times = [val(r, "piper_time_s") for r in rows]
    ax2.bar(xs, [t or 0.0 for t in times], color=COLORS["piper"])
    for x, r in zip(xs, rows):
        if str(r.get("piper_status")).startswith("timeout"):
            ax2.text(x, (times[x] or 0.0), "timeout", rotation=90, fontsize=6, ha="center", va="bottom")
    ax2.set_yscale("log")
    ax2.set_xticks(xs)
    ax2.set_xticklabels(labels, rotation=60, fontsize=7)
    ax2.set_xlabel("devices k / memory per device (GiB)")
    ax2.set_ylabel("Piper running time (s)")
    ax2.grid(True, axis="y", which="both", alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
            e_bytes = 0.0
            for e in problem.in_edges[v]:
                if e.u not in inside:
                    e_bytes += 2 * (e.communication_cost + c.sync_fw[e.u])
            for e in problem.out_edges[v]:
                if e.v not in inside:
                    e_bytes += 2 * (e.communication_cost + c.sync_bw[e.v])
            edge.append(e_bytes)
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
        from piper.knapsack import exact_knapsack, greedy_knapsack
    except ImportError as exc:
        _say(cfg, f"knapsack: piper.knapsack is not available ({exc}); stage sample skipped")
        return [{"part": "stage_summary", "status": "skipped", "segment": f"piper.knapsack not available: {exc}"}]
    import random

    import numpy as np

    n_mb, k = 1920, 512
    bw = float(PAPER_BANDWIDTH)
    problem = workload("bert").with_cluster(devices=k, microbatches=n_mb, bandwidth=bw)
    order = [nd.id for nd in problem.nodes]
    from piper.ideals import enumerate_ideals

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
        _say(cfg, f"knapsack: {sample} sample: {len(gaps)} feasible stage problems, greedy optimal in "
                  f"{len(gaps) - len(worse)}, worst gap {max(gaps, default=0.0):.3g}")
    return rows + detail


def _knapsack_end_to_end(cfg: Config) -> list[dict[str, Any]]:
    mems = (8,) if cfg.quick else (1, 2, 8, 80)
    ks = (8, 32) if cfg.quick else (8, 32, 64, 128, 512, 1024, 2048)
    base = workload("bert")
    rows: list[dict[str, Any]] = []
    for mem in mems:
        for k in ks:
            p = base.with_cluster(devices=k, memory=mem * GIB, microbatches=1920, bandwidth=PAPER_BANDWIDTH)
            g = run_variant(p, "piper", replace(cfg, knapsack="greedy"))
            e = run_variant(p, "piper", replace(cfg, knapsack="exact"))
            gap = None if g.tps is None or e.tps is None else g.tps / e.tps - 1.0
            rows.append({"part": "end_to_end", "memory_gib": mem, "k": k, "greedy": g.tps, "exact": e.tps,
                         "relative_gap": gap, "status": f"{g.status}/{e.status}", "time_s": g.time_s + e.time_s})
            _say(cfg, f"knapsack: {mem} GiB k={k}: greedy={_fmt(g.tps)} exact={_fmt(e.tps)} gap={_fmt(gap)}")
    return rows


def plot_knapsack(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = _plt()
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


# ---------------------------------------------------------------------------------
# driver
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Experiment:
    run: Callable[[Config], list[dict[str, Any]]]
    columns: Sequence[str]
    plot: Callable[[Sequence[Mapping[str, Any]], Path], None]


EXPERIMENTS: Mapping[str, Experiment] = {
    "fig1": Experiment(fig1, FIG1_COLUMNS, plot_fig1),
    "fig2": Experiment(fig2, FIG2_COLUMNS, plot_fig2),
    "fig3": Experiment(fig3, FIG3_COLUMNS, plot_fig3),
    "gnmt": Experiment(lambda c: table("gnmt", c), TABLE_COLUMNS,
                       lambda r, p: plot_table(r, p, "GNMT: Piper against the equi baseline")),
    "resnet": Experiment(lambda c: table("resnet", c), TABLE_COLUMNS,
                         lambda r, p: plot_table(r, p, "ResNet-50: Piper against the equi baseline")),
    "knapsack": Experiment(knapsack_experiment, KNAPSACK_COLUMNS, plot_knapsack),
}


def warm_up(cfg: Config) -> None:
    """Compile the DP's numba code in this process (both knapsacks) before any timed run
    here, so that no run's time includes compilation (isolated runs warm their worker
    first: ``run_variant``)."""
    for kn in ("greedy", "exact"):
        _warm_process(kn)


def run_experiment(name: str, cfg: Config) -> tuple[Path, Path]:
    """Run one experiment; write and return its CSV and PNG paths."""
    exp = EXPERIMENTS[name]
    t0 = time.perf_counter()
    _say(cfg, f"{name}: start ({'quick' if cfg.quick else 'full'}, knapsack {cfg.knapsack})")
    warm_up(cfg)
    rows = exp.run(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    csv_path = cfg.out / f"{name}.csv"
    png_path = cfg.out / f"{name}.png"
    write_csv(csv_path, rows, exp.columns)
    exp.plot(read_csv(csv_path), png_path)
    _say(cfg, f"{name}: wrote {csv_path} and {png_path} in {time.perf_counter() - t0:.1f} s")
    return csv_path, png_path


PROG = "python -m experiments.paper"


def build_parser() -> _cli.ArgumentParser:
    ap = _cli.make_parser(PROG, __doc__)
    ap.add_argument("name", choices=[*EXPERIMENTS, "all"], metavar="NAME",
                    help=f"the experiment: {', '.join(EXPERIMENTS)} or all")
    ap.add_argument("--quick", action="store_true", help="a small slice, seconds (what CI runs)")
    ap.add_argument("--knapsack", choices=("greedy", "exact"), default="greedy",
                    help="the DP's per-stage knapsack (default greedy: the paper's numbers)")
    _cli.add_out(ap, Config.out, "NAME.csv and NAME.png per experiment")
    _cli.add_time_limit(ap, Config.time_limit_s, "one DP run")
    ap.add_argument("--no-isolate", action="store_true",
                    help="run DP solves in this process (no hard kill past the time limit)")
    add_backend_args(ap)
    _cli.add_quiet(ap)
    _cli.add_jobs(ap, 1, "fig3 and the tables time every run")
    return ap


def _main(argv: Sequence[str] | None) -> int:
    args = build_parser().parse_args(argv)
    if args.no_isolate and args.backend != "local":
        raise _cli.UsageError("--no-isolate runs the DP in this process: not with --backend ray")
    cfg = Config(out=_cli.out_dir(args.out), quick=args.quick, knapsack=args.knapsack, time_limit_s=args.time_limit,
                 isolate=not args.no_isolate, progress=not args.quiet, backend=args.backend, address=args.address)
    execution = execution_options(args, hard_timeout(cfg), ("baselines",))
    names = list(EXPERIMENTS) if args.name == "all" else [args.name]
    with WorkerPool(execution) as pool:
        for name in names:
            run_experiment(name, replace(cfg, pool=pool))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    return _cli.run(_main, argv, PROG)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
