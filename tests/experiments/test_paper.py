"""experiments.paper: the paper's configurations reproduce the golden sample, and
every quick experiment writes a parseable CSV and a PNG."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from experiments.lib.paper_variants import DP_VARIANTS, EQUI_VARIANTS, variant_solver
from experiments.lib.suites import paper_workload
from experiments.paper.driver import EXPERIMENTS, run_experiment
from experiments.paper.figures import FIG1_COLUMNS, curve_points, plot_fig1
from experiments.paper.output import read_csv, write_csv
from experiments.paper.runs import Config, run_variant
from piper.core.options import NO_AR

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "reference_sample.jsonl"

def _rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines() if line.strip()]


def _problem(row: dict[str, Any]):
    name = {"bert32a100.json": "bert", "gnmt.json": "gnmt", "resnet.json": "resnet"}[row["instance_file"]]
    p = paper_workload(name, row["transformer_layers"])
    return p.with_cluster(devices=row["k"], memory=row["max_memory_per_device_bytes"], microbatches=row["N"],
                          bandwidth=row["bandwidth_bytes_per_s"])


def test_variant_mapping() -> None:
    assert variant_solver("piper")[0] == "dp-greedy"
    assert variant_solver("piper", "exact")[0] == "dp"
    assert variant_solver("noDP")[1].data_parallel is False
    assert variant_solver("noTP")[1].tensor_parallel is False
    assert variant_solver("noAR")[1].exclude_tmpcs == NO_AR
    assert variant_solver("equi")[0] == "equi"
    assert variant_solver("equi_noTP")[1].tensor_parallel is False
    assert variant_solver("equi_nonTransformer")[1].params["equi_mode"] == "topological"
    assert variant_solver("piper", time_limit_s=5.0)[1].time_limit_s == 5.0
    with pytest.raises(ValueError):
        variant_solver("nope")
    with pytest.raises(ValueError):
        variant_solver("piper", "fast")


EQUI_ROWS = [r for r in _rows() if r["variant"].startswith("equi")]
DP_ROWS = [r for r in _rows() if not r["variant"].startswith("equi")]


@pytest.mark.parametrize("row", EQUI_ROWS, ids=[f"{r['config_id']}-{r['variant']}" for r in EQUI_ROWS])
def test_paper_equi_configurations_reproduce_sample(row: dict[str, Any]) -> None:
    out = run_variant(_problem(row), row["variant"], Config(progress=False))
    if row["tps"] is None:
        assert out.tps is None and out.status == "unknown"  # equi: no fitting plan in its family
    else:
        assert out.tps == pytest.approx(row["tps"], rel=1e-9)
        assert out.devices_used == row["devices_used"] and out.num_stages == row["num_stages"]


def _dp_param(row: dict[str, Any]) -> Any:
    return pytest.param(row, id=f"{row['config_id']}-{row['variant']}")


@pytest.mark.parametrize("row", [_dp_param(r) for r in DP_ROWS])
def test_paper_dp_configurations_reproduce_sample(row: dict[str, Any]) -> None:
    """Greedy-knapsack DP through the paper's plumbing gives the authors' TPS."""
    out = run_variant(_problem(row), row["variant"], Config(progress=False, isolate=False, time_limit_s=600))
    assert out.status in ("optimal", "feasible"), out.message
    assert out.tps == pytest.approx(row["tps"], rel=1e-9)


def test_csv_keeps_full_precision(tmp_path: Path) -> None:
    x = 0.1 + 0.2
    write_csv(tmp_path / "a.csv", [{"a": x, "b": None, "c": math.inf, "d": 3}], ("a", "b", "c", "d"))
    row = read_csv(tmp_path / "a.csv")[0]
    assert float(row["a"]) == x and row["b"] == "" and row["c"] == "" and row["d"] == "3"


def test_curve_points_are_monotone() -> None:
    pts = curve_points([[1, None], [2, 5.0], [3, 6.0], [4, 4.0], [5, None]])
    assert pts == [(1, None), (2, 5.0), (3, 5.0), (4, 4.0), (5, 4.0)]


def _check_outputs(csv_path: Path, png_path: Path, columns: tuple[str, ...]) -> list[dict[str, str]]:
    rows = read_csv(csv_path)
    assert rows, f"{csv_path} is empty"
    assert tuple(rows[0].keys()) == tuple(columns)
    assert png_path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png_path.stat().st_size > 5000
    return rows


#: fig1 and fig3 take 20-50 s each on 2 cores: with the slow sweeps (fig2 runs the same code in CI)
@pytest.mark.parametrize("name", [pytest.param("fig1", marks=pytest.mark.slow), "fig2",
                                  pytest.param("fig3", marks=pytest.mark.slow), "gnmt", "resnet", "knapsack"])
def test_quick_experiments_write_csv_and_png(name: str, tmp_path: Path) -> None:
    cfg = Config(out=tmp_path, quick=True, progress=False, time_limit_s=3600)  # never binds: no timed asserts
    csv_path, png_path = run_experiment(name, cfg)
    rows = _check_outputs(csv_path, png_path, tuple(EXPERIMENTS[name].columns))
    assert not [r for r in rows if r.get("status") == "error" or r.get("piper_status") == "error"], rows
    if name == "fig1":
        # the quick grid holds the sample's 8 GiB, k = 128 configuration: every variant matches
        golden = [r for r in _rows() if r["family"] == "plots" and r["k"] == 128
                  and r["max_memory_per_device_bytes"] == 8 * 2**30]
        assert len(golden) == 6
        for g in golden:
            mine = next(r for r in rows if r["variant"] == g["variant"] and int(r["k"]) == 128)
            assert float(mine["tps"]) == pytest.approx(g["tps"], rel=1e-9), g["variant"]
            assert int(mine["devices_used"]) == g["devices_used"]
        piper_rows = [r for r in rows if r["variant"] == "piper"]
        assert piper_rows and all(float(r["relative_throughput"]) == 1.0 for r in piper_rows)
        for r in rows:
            if r["relative_throughput"]:
                assert 0.0 <= float(r["relative_throughput"]) <= 1.0 + 1e-9
    if name == "fig2":
        assert {r["series"] for r in rows} == {"devices", "batch"}
        assert {r["variant"] for r in rows} >= set(DP_VARIANTS + EQUI_VARIANTS)


def test_quick_equi_only_parts_without_dp(tmp_path: Path) -> None:
    """The plots render from CSVs with missing values (e.g. failed / infeasible runs)."""
    rows = [
        {"memory_gib": 8, "k": 8, "variant": "piper", "tps": 0.1, "relative_throughput": 1.0},
        {"memory_gib": 8, "k": 8, "variant": "equi", "tps": 0.2, "relative_throughput": 0.5},
        {"memory_gib": 8, "k": 8, "variant": "noDP", "tps": None, "relative_throughput": None},
    ]
    write_csv(tmp_path / "fig1.csv", rows, FIG1_COLUMNS)
    plot_fig1(read_csv(tmp_path / "fig1.csv"), tmp_path / "fig1.png")
    assert (tmp_path / "fig1.png").read_bytes()[:4] == b"\x89PNG"
