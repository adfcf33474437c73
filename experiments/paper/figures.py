"""Fig. 1 (ablations and equi relative to Piper), Fig. 2 (best TPS per device count; equi
against N) and Fig. 3 (the planner's running time): their rows and their plots."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib.paper_variants import DP_VARIANTS, EQUI_VARIANTS
from experiments.lib.suites import GIB, PAPER_BANDWIDTH, paper_workload
from experiments.paper.output import COLORS, LABELS, short_number
from experiments.paper.runs import Config, RunOutcome, run_variant
from piper.render.headless import headless_pyplot

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
    base = paper_workload("bert")
    max_t = max(base.degrees)
    rows: list[dict[str, Any]] = []
    for mem in mems:
        for k in ks:
            if max_t * n_mb < k:
                cfg.say(f"fig1: skip k={k} (> max t * N)")
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
                cfg.say(f"fig1: {mem} GiB k={k} {variant}: tps={short_number(out.tps)} rel={short_number(rel)} "
                          f"[{out.status}, {out.time_s:.2f} s]")
    return rows


def plot_fig1(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = headless_pyplot()
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


def curve_points(curve: Iterable[Sequence[Any]]) -> list[tuple[int, float | None]]:
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
    base = paper_workload("bert")
    bw = base.bandwidth  # the driver keeps the file's bandwidth here
    rows: list[dict[str, Any]] = []

    def row(series: str, n_mb: int, variant: str, k: int, tps: float | None, out: RunOutcome,
            message: str = "") -> dict[str, Any]:
        return {"series": series, "N": n_mb, "memory_gib": mem, "bandwidth": bw, "variant": variant, "k": k,
                "tps": tps, "status": out.status, "time_s": out.time_s, "message": message}

    for n_mb in ns:
        p = base.with_cluster(devices=k_max, memory=mem * GIB, microbatches=n_mb)
        for variant in DP_VARIANTS:
            out = run_variant(p, variant, cfg, params={"curve": True})
            curve = out.stats.get("curve")
            cfg.say(f"fig2: N={n_mb} {variant}: tps={short_number(out.tps)} [{out.status}, {out.time_s:.2f} s]")
            if curve is None:
                rows.append(row("devices", n_mb, variant, k_max, out.tps, out, out.message or "no curve in the result"))
                continue
            for k, tps in curve_points(curve):
                rows.append(row("devices", n_mb, variant, k, tps, out))
        for variant in EQUI_VARIANTS:
            for k in dev_grid:
                out = run_variant(p.with_cluster(devices=k), variant, cfg)
                rows.append(row("devices", n_mb, variant, k, out.tps, out))
            cfg.say(f"fig2: N={n_mb} {variant} at {len(dev_grid)} device counts done")
    p = base.with_cluster(devices=k_max, memory=mem * GIB)
    for variant in EQUI_VARIANTS:
        for n_mb in batch_grid:
            out = run_variant(p.with_cluster(microbatches=n_mb), variant, cfg)
            rows.append(row("batch", n_mb, variant, k_max, out.tps, out))
        cfg.say(f"fig2: {variant} against N done")
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
    plt = headless_pyplot()
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
        base = paper_workload("bert", L)
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
                cfg.say(f"fig3: BERT-{L} N={n_mb} k={k}: {out.time_s:.2f} s wall, "
                          f"{out.stats.get('cpu_s', float('nan')):.2f} s CPU [{out.status}]")
                stop = out.status.startswith("timeout")
    return rows


def plot_fig3(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    plt = headless_pyplot()
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
