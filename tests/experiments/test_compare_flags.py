"""Flags of the experiments commands a fuzz pass found accepted (docs/errors.md §3): compare's
empty ``--suite`` / ``--solvers`` names (they ran the default suite / every solver), a
``random:COUNT`` that built every instance before any run, ``--max-virtual-stages`` above the
workload's layers (``solve`` refuses it), and validate's ``--table`` without ``--planner``.
Each is exit 2 with one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest

from experiments.lib.suites import MAX_SUITE_INSTANCES, build_suite, suite_count
from experiments.validate.cli import main as validate_main
from tests.commands import RunCommand

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"  # 10 layers


def one_line(run, *words: str) -> str:
    assert run.returncode == 2, (run.returncode, run.stderr[-2000:])
    assert run.stdout == ""
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1, run.stderr
    assert lines[0].startswith("python -m experiments.compare: error: ") and all(w in lines[0] for w in words), lines[0]
    return lines[0]


@pytest.mark.parametrize("argv, flag", [
    (["--suite", ""], "--suite"),
    (["--suite", " , "], "--suite"),
    (["--suite", "tiny,,small"], "--suite"),
    (["--suite", "tiny", "--suite", ""], "--suite"),
    (["--solvers", ""], "--solvers"),
    (["--solvers", "dp,"], "--solvers"),
    ([str(SMALL), "--solvers", ""], "--solvers"),
])
def test_an_empty_name_is_refused_naming_the_flag(cli: RunCommand, tmp_path: Path, argv: list[str], flag: str) -> None:
    line = one_line(cli("experiments.compare", *argv, "--out", str(tmp_path / "out"), "--no-plots"), flag,
                    "an empty name")
    assert not (tmp_path / "out" / "report.json").exists(), line


@pytest.mark.parametrize("suite", ["random:1000000000", f"random:{MAX_SUITE_INSTANCES + 1}:5",
                                   "real-magnitudes:20000:0:24"])
def test_a_suite_count_over_the_cap_is_refused_before_building(cli: RunCommand, tmp_path: Path, suite: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def no_build(name: str) -> None:
        raise AssertionError(f"suite {name} was built")

    monkeypatch.setattr("experiments.compare.cli.build_suite", no_build)  # refused before any instance is built
    one_line(cli("experiments.compare", "--suite", suite, "--solvers", "dp", "--out", str(tmp_path)),
             f"--suite {suite}", f"{MAX_SUITE_INSTANCES:,}")


def test_the_cap_counts_every_suite_of_the_run(cli: RunCommand, tmp_path: Path) -> None:
    half = MAX_SUITE_INSTANCES // 2 + 1
    one_line(cli("experiments.compare", "--suite", f"random:{half}", "--suite", f"random:{half}:{half}",
                 "--solvers", "dp", "--out", str(tmp_path)), "--suite", f"{2 * half:,} instances")
    one_line(cli("experiments.compare", "--suite", f"random:{half},random:{half}", "--solvers", "dp",
                 "--out", str(tmp_path)), f"{2 * half:,} instances")  # the same suite twice is built twice


def test_suite_count_reads_the_parametric_suites() -> None:
    assert suite_count("random:320") == 320 and suite_count("random:3:7") == 3
    assert suite_count("real-magnitudes:200:100:12") == 200
    assert suite_count("tiny") is None and suite_count("random:x") is None
    assert len(build_suite("random:3:7")) == 3


def test_max_virtual_stages_above_the_layers_is_refused_as_solve_does(cli: RunCommand, tmp_path: Path) -> None:
    solve = cli("piper", "solve", str(SMALL), "--max-virtual-stages", "11")
    assert solve.returncode == 2 and "--max-virtual-stages 11" in solve.stderr
    one_line(cli("experiments.compare", str(SMALL), "--max-virtual-stages", "11", "--solvers", "dp",
                 "--out", str(tmp_path)), "--max-virtual-stages 11", "10 layers")
    # with --slice the sliced workload's layers count
    one_line(cli("experiments.compare", str(SMALL), "--slice", "4", "--max-virtual-stages", "5", "--solvers", "dp",
                 "--out", str(tmp_path)), "--max-virtual-stages 5", "4 layers")
    # several files: the one at fault is named
    line = one_line(cli("experiments.compare", str(SMALL), str(ROOT / "experiments" / "workloads" / "resnet.json"),
                        "--max-virtual-stages", "11", "--solvers", "dp", "--out", str(tmp_path)))
    assert str(SMALL) in line


@pytest.mark.parametrize("table", ["sc21", "published"])
def test_validate_refuses_a_table_without_planner(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  table: str) -> None:
    assert validate_main(["--table", table, "--out", str(tmp_path / "v")]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1, err
    assert lines[0].startswith("python -m experiments.validate: error: --table") and "--planner" in lines[0]
    assert not (tmp_path / "v").exists()  # refused before any work (the output directory is made first)
    # --rows still needs --planner, and --planner alone means --table sc21
    assert validate_main(["--rows", "megatron-1.7b", "--out", str(tmp_path / "v")]) == 2
    assert "--rows" in capsys.readouterr().err
    assert validate_main(["--planner", "--table", "published", "--rows", "megatron-1.7b",
                          "--out", str(tmp_path / "v")]) == 2
    assert "--rows" in capsys.readouterr().err
