"""The plots of ``experiments.compare``: times.png and gaps.png (matplotlib, optional)."""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from experiments.compare.cross_checks import InstanceReport
from experiments.compare.report import atomic_write
from experiments.compare.solve import SKIPPED, UNAVAILABLE
from piper.render.headless import headless_pyplot

__all__ = ["write_plots"]


def write_plots(out: Path, reports: Sequence[InstanceReport]) -> list[Path]:
    """times.png (solve time vs layers per solver, log scale) and gaps.png (heuristic
    gaps to the proven optimum). Needs matplotlib; returns the files written."""
    try:
        plt = headless_pyplot()
    except ImportError:
        return []
    written = []
    solvers = list(dict.fromkeys(run.solver for rep in reports for run in rep.runs))
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for j, name in enumerate(solvers):
        pts = [
            (rep.layers + 0.08 * (j - len(solvers) / 2), max(run.time_s, 1e-4), run.limit)
            for rep in reports
            for run in rep.runs
            if run.solver == name and run.status not in (SKIPPED, UNAVAILABLE)
        ]
        if not pts:
            continue
        xs, ys, lim = zip(*pts)
        line = ax.scatter(xs, ys, s=18, label=name)
        hit = [(x, y) for x, y, l in pts if l]
        if hit:
            ax.scatter(*zip(*hit), s=60, facecolors="none", edgecolors=line.get_facecolor(), linewidths=1.2)
    ax.set_yscale("log")
    ax.set_xlabel("layers")
    ax.set_ylabel("wall time per solve (s)")
    ax.set_title("solve time vs graph size (circled: time limit hit)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    written.append(_save_fig(fig, out / "times.png"))
    plt.close(fig)

    gaps: dict[str, list[float]] = {}
    for rep in reports:
        for run in rep.runs:
            if not run.exact and run.gap is not None and run.gap_vs_proof and math.isfinite(run.gap):
                gaps.setdefault(run.solver, []).append(100 * run.gap)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if gaps:
        ax.boxplot(list(gaps.values()), showmeans=True)
        ax.set_xticks(range(1, len(gaps) + 1), list(gaps))
        for i, vals in enumerate(gaps.values(), start=1):
            ax.scatter([i + 0.15] * len(vals), vals, s=10, alpha=0.6)
    else:
        ax.text(0.5, 0.5, "no heuristic gap measured", ha="center", va="center", transform=ax.transAxes)
    ax.set_yscale("symlog", linthresh=1.0)
    ax.set_ylabel("gap to proven optimum (%, log above 1%)")
    counts = ", ".join(f"{name}: {len(vals)}" for name, vals in gaps.items())
    ax.set_title(f"heuristic gap distribution ({counts or 'none'} instances)")
    ax.grid(True, axis="y", alpha=0.3)
    written.append(_save_fig(fig, out / "gaps.png"))
    plt.close(fig)
    return written


def _save_fig(fig: Any, path: Path) -> Path:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    atomic_write(path, buf.getvalue())
    return path
