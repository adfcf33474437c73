"""``python -m piper show`` and ``solve --png``: the picture of a saved plan, its layout as
--json, the plan's madeFor record checked, and one line with exit 2 for a bad plan or an
--out that cannot be written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from piper import Plan, load_problem
from piper.io.provenance import plan_document
from tests.commands import RunCommand
from tests.picture_cases import chain_workload, one_layer_per_stage, png_size

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"


@pytest.fixture()
def saved(tmp_path: Path) -> tuple[Path, Path, Plan]:
    """A 4-stage workload file and its plan file, with the plan's madeFor record."""
    raw = chain_workload(4, k=64, G=8, N=64, hot=1)
    work = tmp_path / "w.json"
    work.write_text(json.dumps(raw))
    plan = one_layer_per_stage(4, d=2, t=8)
    plan_path = tmp_path / "p.json"
    plan_path.write_text(json.dumps(plan_document(plan, load_problem(raw))))
    return work, plan_path, plan


def test_show_cli_writes_the_png_and_reports_the_layout(cli: RunCommand, saved, tmp_path: Path) -> None:
    work, plan_path, plan = saved
    out = tmp_path / "plan.png"
    proc = cli("piper", "show", str(plan_path), str(work), "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "" and proc.stdout.count("\n") == 1
    summary = json.loads(proc.stdout)
    assert summary["stages"] == 4 and summary["bottleneck_stage"] == 2 and summary["nodes"] == 8
    assert summary["devices_per_stage"] == [s.d * s.t for s in plan.stages]
    assert png_size(out) == (1320, 1298)
    text = cli("piper", "show", str(plan_path), str(work), "--out", str(out))
    assert text.returncode == 0 and "bottleneck stage 2" in text.stdout


def test_show_cli_warns_on_a_record_mismatch_and_strict_refuses(cli: RunCommand, saved, tmp_path: Path) -> None:
    work, plan_path, _ = saved
    out = tmp_path / "plan.png"
    warn = cli("piper", "show", str(plan_path), str(work), "--out", str(out), "-G", "4")
    assert warn.returncode == 0 and out.exists()
    assert warn.stderr.count("\n") == 1 and "G=8" in warn.stderr and "G=4" in warn.stderr
    out.unlink()
    strict = cli("piper", "show", str(plan_path), str(work), "--out", str(out), "-G", "4", "--strict")
    assert strict.returncode == 2 and strict.stderr.count("\n") == 1 and not out.exists() and not strict.stdout


def test_show_cli_bad_plan_or_unwritable_out_is_one_line_exit_2(cli: RunCommand, saved, tmp_path: Path) -> None:
    work, plan_path, plan = saved
    out = tmp_path / "plan.png"
    # rule 1: a layer in no stage
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": [s.to_dict() for s in plan.stages[:3]]}))
    proc = cli("piper", "show", str(bad), str(work), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "rule 1" in proc.stderr and not out.exists()
    # not a plan at all
    bad.write_text("{")
    proc = cli("piper", "show", str(bad), str(work), "--out", str(out))
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    # an --out that cannot be written
    for target in (tmp_path / "missing" / "p.png", tmp_path):
        proc = cli("piper", "show", str(plan_path), str(work), "--out", str(target))
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--out" in proc.stderr


def test_solve_png(cli: RunCommand, tmp_path: Path) -> None:
    out, plan_path = tmp_path / "solve.png", tmp_path / "plan.json"
    proc = cli("piper", "solve", str(SMALL), "--png", str(out), "--out", str(plan_path), "--json")
    assert proc.returncode == 0, proc.stderr[-400:]
    result = json.loads(proc.stdout)
    assert png_size(out) == (1320, 1298) and len(result["plan"]["stages"]) >= 1
    again = cli("piper", "show", str(plan_path), str(SMALL), "--out", str(tmp_path / "again.png"), "--json", "--strict")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["stages"] == len(result["plan"]["stages"])
    bad = cli("piper", "solve", str(SMALL), "--png", str(tmp_path / "missing" / "x.png"), "-q")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--png" in bad.stderr


@pytest.mark.parametrize("args, words", [
    # the picture's image grows with the devices: 10^8 asked for 26.8 GiB, 2^31 - 1 was killed for memory
    (["--devices", "2147483647"], "--out: the picture draws each device, and 2,147,483,647 devices"),
    # bytes that are not UTF-8 reach Python as lone surrogates: matplotlib raised a TypeError
    (["--title", "\udcff"], "--title \\udcff: not UTF-8 text"),
    (["--time-unit", "\udcff"], "--time-unit \\udcff: not UTF-8 text"),
])
def test_show_refuses_before_drawing(cli: RunCommand, saved, tmp_path: Path, args, words) -> None:
    work, plan_path, _ = saved
    proc = cli("piper", "show", str(plan_path), str(work), "--out", str(tmp_path / "x.png"), *args)
    assert proc.returncode == 2 and words in proc.stderr and proc.stderr.count("\n") == 1
    assert not (tmp_path / "x.png").exists()


def test_png_paths_are_checked_before_the_solve(cli: RunCommand, tmp_path: Path) -> None:
    """A path ending in '/' passed the up-front check (pathlib drops the slash) and failed after the
    solve; a cluster too large to draw is refused before it too."""
    out = tmp_path / "o.json"
    for args, words in ((["--png", f"{tmp_path}/d.png/"], "ends with '/'"),
                        (["-k", "100000000", "--png", str(tmp_path / "b.png")], "--png: the picture draws each device")):
        proc = cli("piper", "solve", str(SMALL), "--out", str(out), *args, "--json")
        assert proc.returncode == 2 and words in proc.stderr and proc.stdout == ""
        assert not out.exists()
