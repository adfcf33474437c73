"""The experiments by name (:data:`EXPERIMENTS`: rows, CSV columns, plot) and
:func:`run_experiment`, which runs one and writes its CSV and PNG."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.paper.figures import (
    FIG1_COLUMNS,
    FIG2_COLUMNS,
    FIG3_COLUMNS,
    fig1,
    fig2,
    fig3,
    plot_fig1,
    plot_fig2,
    plot_fig3,
)
from experiments.paper.knapsack import (
    KNAPSACK_COLUMNS,
    knapsack_experiment,
    plot_knapsack,
)
from experiments.paper.output import read_csv, write_csv
from experiments.paper.runs import Config, warm_process
from experiments.paper.tables import TABLE_COLUMNS, plot_table, table

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
        warm_process(kn)


def run_experiment(name: str, cfg: Config) -> tuple[Path, Path]:
    """Run one experiment; write and return its CSV and PNG paths."""
    exp = EXPERIMENTS[name]
    t0 = time.perf_counter()
    cfg.say(f"{name}: start ({'quick' if cfg.quick else 'full'}, knapsack {cfg.knapsack})")
    warm_up(cfg)
    rows = exp.run(cfg)
    cfg.out.mkdir(parents=True, exist_ok=True)
    csv_path = cfg.out / f"{name}.csv"
    png_path = cfg.out / f"{name}.png"
    write_csv(csv_path, rows, exp.columns)
    exp.plot(read_csv(csv_path), png_path)
    cfg.say(f"{name}: wrote {csv_path} and {png_path} in {time.perf_counter() - t0:.1f} s")
    return csv_path, png_path
