"""The GNMT and ResNet tables: Piper against the topological-split equi baseline, and their plot."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from experiments.lib.suites import (
    GIB,
    GNMT_PAIRS,
    PAPER_BANDWIDTH,
    RESNET_PAIRS,
    paper_workload,
    slice_problem,
)
from experiments.paper.output import COLORS, short_number
from experiments.paper.runs import Config, run_variant
from piper.render.headless import headless_pyplot

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
    base = paper_workload(name)
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
            cfg.say(f"{name}: k={k} {mem} GiB: full DP {full.status} after {full.time_s:.0f} s; linearized DP")
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
        cfg.say(f"{name}: k={k} {mem} GiB: piper={short_number(pip.tps)} [{pip.status}{', linearized' if linearized else ''}, "
                  f"{pip.time_s:.1f} s] "
                  f"equi={short_number(eq.tps)} [{eq.status}] ratio={short_number(ratio)}")
    return rows


def plot_table(rows: Sequence[Mapping[str, Any]], path: Path, title: str) -> None:
    plt = headless_pyplot()
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
