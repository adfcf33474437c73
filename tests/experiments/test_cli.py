"""The experiments commands share flag names and behaviour (``experiments/lib/flags.py``): every
flag has help text, bad values are exit 2 with one line, and ``bench_exact`` reuses rows
only from a run with the same flags at the same revision."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

import experiments.megatron.cli
import experiments.paper.cli
from experiments import bench, bench_exact, bench_exact_workloads
from experiments.lib import flags
from experiments.lib.revision import revision
from experiments.lib.suites import GNMT_PAIRS, PAPER_PAIRS, RESNET_PAIRS, paper_workload
from experiments.paper import figures
from piper.cli.common import ArgumentParser

ROOT = Path(__file__).resolve().parents[2]

COMMANDS: dict[str, ModuleType] = {
    "paper": experiments.paper.cli, "bench": bench, "bench_exact": bench_exact,
    "bench_exact_workloads": bench_exact_workloads, "megatron": experiments.megatron.cli,
}


def _command_parser(module: ModuleType) -> argparse.ArgumentParser:
    """The parser holding the command's flags (``bench``: its ``dp`` subcommand)."""
    parser = module.build_parser()
    if module is bench:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return sub.choices["dp"]
    return parser


@pytest.mark.parametrize("name", COMMANDS)
def test_every_flag_has_help_and_the_shared_flags_are_spelt_alike(name: str) -> None:
    parser = _command_parser(COMMANDS[name])
    assert isinstance(parser, ArgumentParser)
    by_dest = {a.dest: a for a in parser._actions}
    for action in parser._actions:
        assert action.help and action.help.strip(), f"{name}: {action.option_strings or action.dest} has no help"
    assert by_dest["time_limit"].option_strings == ["--time-limit"] and by_dest["time_limit"].metavar == "SECONDS"
    assert by_dest["out"].option_strings == ["--out", "-o"] and by_dest["out"].metavar == "DIR"
    assert by_dest["quiet"].option_strings == ["--quiet", "-q"]
    assert by_dest["jobs"].option_strings == ["--jobs", "-j"] and by_dest["jobs"].default == 1


@pytest.mark.parametrize("name", COMMANDS)
def test_help_exits_0(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["dp", "--help"] if name == "bench" else ["--help"]
    with pytest.raises(SystemExit) as exc:
        COMMANDS[name].main(argv)
    assert exc.value.code == 0
    assert "--time-limit SECONDS" in capsys.readouterr().out


BAD = [
    ("bench_exact", ["--sizes", "x"], "--sizes"),
    ("bench_exact", ["--sizes", "8,,12"], "--sizes"),
    ("bench_exact", ["--ks", "0"], "--ks"),
    ("bench_exact", ["--shapes", "ring"], "--shapes"),
    ("bench_exact", ["--solvers", "dp,nope"], "--solvers"),
    ("bench_exact", ["--threads", "two"], "--threads"),
    ("bench_exact", ["--cp-workers", "0"], "--cp-workers"),
    ("bench_exact", ["--time-limit", "0"], "--time-limit"),
    ("bench_exact", ["--jobs", "2"], "--jobs"),
    ("paper", ["fig9"], "NAME"),
    ("paper", ["fig1", "--time-limit", "x"], "--time-limit"),
    ("paper", ["fig1", "--jobs", "0"], "--jobs"),
    ("bench", ["dp", "--cases", "bert,x"], "--cases"),
    ("bench", ["dp", "--modes", "fast"], "--modes"),
    ("bench", ["dp", "--gnmt-ks", "9"], "--gnmt-ks"),
    ("bench", ["dp", "--time-limit", "-5"], "--time-limit"),
    ("bench", ["nope"], "COMMAND"),
    ("bench_exact_workloads", ["--cases", "9"], "--cases"),
    ("bench_exact_workloads", ["--cases", "x"], "--cases"),
    ("megatron", ["--quick", "--loo"], "--loo"),
]


@pytest.mark.parametrize("name,argv,flag", BAD, ids=[f"{n}-{' '.join(a)}" for n, a, _ in BAD])
def test_bad_values_are_exit_2_with_one_line(name: str, argv: list[str], flag: str,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    assert COMMANDS[name].main(argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"python -m experiments.{name}: error: ") and flag in lines[0], lines[0]


@pytest.mark.parametrize("name", ["paper", "bench_exact", "megatron"])
def test_an_out_that_cannot_be_a_directory_is_exit_2(name: str, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    argv = {"paper": ["fig1"], "bench_exact": [], "megatron": ["--quick", "--no-loo"]}[name]
    assert COMMANDS[name].main([*argv, "--out", str(blocker / "sub")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0], err


def test_bench_exact_sizes_x_from_the_shell() -> None:
    """The issue's example, through ``python -m``: one line, exit 2, no traceback."""
    proc = subprocess.run([sys.executable, "-m", "experiments.bench_exact", "--sizes", "x"], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


def test_list_types() -> None:
    assert flags.int_list("8, 12,8") == (8, 12)
    for bad in ("", "x", "8,", "1.5", "0"):
        with pytest.raises(argparse.ArgumentTypeError):
            flags.int_list(bad)
    assert flags.int_list("0", minimum=0) == (0,)
    shapes = flags.name_list(("chain", "branchy"), "shape")
    assert shapes("branchy,chain,branchy") == ("branchy", "chain")
    with pytest.raises(argparse.ArgumentTypeError, match="known: chain, branchy"):
        shapes("ring")
    with pytest.raises(argparse.ArgumentTypeError):
        shapes(",")


def test_revision_names_the_commit_and_marks_a_dirty_tree() -> None:
    rev = revision()
    assert re.fullmatch(r"[0-9a-f]{4,40}(\+dirty-([0-9a-f]{12}|unknown))?", rev), rev
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout
    assert rev.split("+")[0] == head.strip()
    dirty = subprocess.run(["git", "diff", "HEAD", "--quiet"], cwd=ROOT).returncode != 0
    assert ("+dirty-" in rev) == dirty


# ---------------------------------------------------------------------------------
# bench_exact: rows are reused only from the same flags at the same revision
# ---------------------------------------------------------------------------------

SMALL = ["--sizes", "6", "--ks", "2", "--shapes", "chain", "--solvers", "dp", "--time-limit", "20", "--quiet"]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_bench_exact_config_id_covers_every_flag_and_the_revision() -> None:
    args = bench_exact.build_parser().parse_args(SMALL)
    base = bench_exact.run_config(args, "abc1234")
    assert set(bench_exact.CONFIG_FLAGS) | {"revision"} == set(base)
    ids = {bench_exact.config_id(base), bench_exact.config_id(bench_exact.run_config(args, "abc1234+dirty-0123456789ab"))}
    for argv in (["--time-limit", "21"], ["--solvers", "dp,cpsat"], ["--sizes", "6,8"], ["--ks", "2,4"],
                 ["--shapes", "chain,branchy"], ["--threads", "1"], ["--cp-workers", "1"], ["--no-warm"], ["--split"],
                 ["--quick"]):
        ids.add(bench_exact.config_id(bench_exact.run_config(bench_exact.build_parser().parse_args(SMALL + argv), "abc1234")))
    assert len(ids) == 12  # every flag and the revision change the key
    same = bench_exact.build_parser().parse_args(SMALL + ["--out", "/elsewhere", "--jobs", "1"])
    assert bench_exact.config_id(bench_exact.run_config(same, "abc1234")) == bench_exact.config_id(base)


def test_bench_exact_reuses_rows_only_from_the_same_configuration(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(bench_exact, "revision", lambda: "abc1234")
    runs = tmp_path / "runs.jsonl"
    seed = 1000 + 100 * 6 + 2
    stale = {"n": 6, "shape": "chain", "k": 2, "seed": seed, "solver": "dp", "status": "optimal", "tps": 1e-9,
             "time_s": 0.0, "m": 0, "ideals": 0}
    other = dict(stale, config_id="000000000000", config={"revision": "abc1234", "time_limit": 99.0})
    runs.write_text(json.dumps(stale) + "\n" + json.dumps(other) + "\n")
    assert bench_exact.main([*SMALL, "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = _lines(runs)
    assert len(rows) == 3  # neither the old-format row nor the other configuration's row was reused
    fresh = rows[-1]
    assert fresh["config"]["revision"] == "abc1234" and fresh["tps"] != 1e-9 and fresh["status"] == "optimal"
    assert "1e-09" not in out and "| 6 | chain | 2 |" in out
    # the same flags at the same revision: resumed, nothing run again
    assert bench_exact.main([*SMALL, "--out", str(tmp_path)]) == 0
    assert len(_lines(runs)) == 3
    # another revision: run again
    monkeypatch.setattr(bench_exact, "revision", lambda: "abc1234+dirty-0123456789ab")
    assert bench_exact.main([*SMALL, "--out", str(tmp_path)]) == 0
    assert len(_lines(runs)) == 4
    capsys.readouterr()
    assert bench_exact.main(["--table-only", "--out", str(tmp_path)]) == 0
    assert "abc1234+dirty-0123456789ab" in capsys.readouterr().out.splitlines()[0]


# ---------------------------------------------------------------------------------
# one table of the paper's pairs, one workload loader, one C++ reference
# ---------------------------------------------------------------------------------


def test_one_table_of_the_papers_pairs() -> None:
    assert PAPER_PAIRS == {"gnmt": GNMT_PAIRS, "resnet": RESNET_PAIRS}
    assert len(GNMT_PAIRS) == 13 and len(RESNET_PAIRS) == 25
    assert set(bench.GNMT_BENCH_PAIRS) <= set(GNMT_PAIRS)
    args = bench.build_parser().parse_args(["dp", "--cases", "resnet,gnmt", "--modes", "greedy"])
    args.gnmt_ks = tuple(int(k) for k in args.gnmt_ks)
    specs = bench.cases(args)
    resnet = [(s["k"], s["memory"] / 2**30) for s in specs if s["workload"] == "resnet"]
    assert resnet == [(k, float(m)) for k, m in RESNET_PAIRS]
    gnmt = {(s["k"], round(s["memory"] / 2**30, 6)) for s in specs if s["workload"] == "gnmt"}
    assert gnmt == set(bench.GNMT_BENCH_PAIRS)
    assert figures.paper_workload is paper_workload


def test_bench_compares_with_the_later_cpp_figures() -> None:
    args = bench.build_parser().parse_args(["dp", "--cases", "bert"])
    specs = {(s.get("layers"), s["N"], s["k"]): s["cpp_s"] for s in bench.cases(args)}
    assert specs[(32, 1920, 2048)] == 36.3 and specs[(48, 1920, 2048)] == 71.4
    assert specs[(32, 512, 512)] == 1.79 and specs[(32, 512, 2048)] == 6.96
    by_cpu, by_wall = bench.ratios({"cpp_s": 36.3, "cpu_s": 3.63, "time_s": 1.21, "status": "optimal"})
    assert by_cpu == pytest.approx(10.0) and by_wall == pytest.approx(30.0)
    assert bench.ratios({"cpp_s": 36.3, "cpu_s": 1.0, "time_s": 1.0, "status": "timeout"}) == (None, None)
    assert bench.ratios({"cpp_s": None, "cpu_s": 1.0, "time_s": 1.0, "status": "optimal"}) == (None, None)


def test_count_ideals() -> None:
    from piper.dp.ideals import count_ideals, enumerate_ideals

    gnmt = paper_workload("gnmt")
    bert = paper_workload("bert")
    assert count_ideals(bert) == len(enumerate_ideals(bert))
    assert count_ideals(gnmt, limit=1000) is None
