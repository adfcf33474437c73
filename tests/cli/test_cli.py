"""The command-line contract: outputs, --json shapes, and exit status 2 with one line for user errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from piper.cli.common import parse_size
from piper.core.errors import UsageError
from tests.reference import plan_of, rows

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "experiments" / "workloads" / "bert32a100.json")


def run(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


@pytest.mark.parametrize("text, value", [
    ("8GiB", 8 * 2**30), ("8 GiB", 8 * 2**30), ("25GiB/s", 25 * 2**30), ("80e9", 80e9), ("1.5GB", 1.5e9),
    ("512MiB", 512 * 2**20), ("1024", 1024.0), ("2KB", 2000.0), ("3kib", 3072.0),
])
def test_parse_size(text, value):
    assert parse_size(text) == value


@pytest.mark.parametrize("text", ["", "GiB", "8XB", "-1GiB", "0", "8 G i B"])
def test_parse_size_rejects(text):
    with pytest.raises(UsageError):
        parse_size(text)


def test_info_lists_the_workload():
    r = run("piper", "info", BERT, "--devices", "64", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["layers"] == 37 and info["edges"] == 67 and info["degrees"] == [1, 2, 4, 8]
    assert info["tmpc_ids"] == ["activation recomp", "vanilla"] and info["devices"] == 64
    assert info["ideals"] == 43  # the authors' planner reports 43 ideals for BERT-32


def test_evaluate_json_matches_reference(tmp_path):
    row = next(r for r in rows() if r["variant"] == "piper" and r["config_id"] == "plots-8GB-k128")
    path = tmp_path / "plan.json"
    plan_of(row).dump(path)
    r = run("piper", "evaluate", BERT, str(path), "--devices", "128", "--memory", "8GiB", "--microbatches", "1920",
            "--bandwidth", "25GiB", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tps"] == pytest.approx(row["tps"], rel=1e-9) and out["oom"] is False
    assert len(out["stages"]) == row["num_stages"]
    assert set(out["stages"][0]) >= {"tps", "memory", "y", "compute", "edge", "resync"}
    table = run("piper", "evaluate", BERT, str(path), "-k", "128", "-M", "8GiB", "-N", "1920", "-B", "25GiB")
    assert table.returncode == 0 and "bottleneck stage" in table.stdout
    # the same plan with 1 GiB per device is out of memory: a result, not an error
    oom = run("piper", "evaluate", BERT, str(path), "-k", "128", "-M", "1GiB", "-N", "1920", "--json")
    assert oom.returncode == 0 and json.loads(oom.stdout)["tps"] is None and json.loads(oom.stdout)["oom"] is True


@pytest.mark.parametrize("args, fragment", [
    (("piper", "info", "missing.json"), "cannot read"),
    (("piper", "info", BERT, "--memory", "lots"), "bad size"),
    (("piper", "info", BERT, "--devices", "0"), "must be >= 1"),
    (("piper", "frobnicate"), "invalid choice"),
    (("piper", "evaluate", BERT, "missing-plan.json"), "cannot read plan"),
    (("piper", "solve", BERT, "--solver", "nonesuch"), "unknown solver"),
])
def test_user_errors_exit_2_with_one_line(args, fragment):
    r = run(*args)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0] and "Traceback" not in r.stderr


def test_invalid_problem_and_plan_exit_2(tmp_path):
    bad = tmp_path / "w.json"
    raw = json.loads(Path(BERT).read_text())
    raw["edges"].append({"sourceId": 36, "destId": 0, "communicationCost": 1.0})
    bad.write_text(json.dumps(raw))
    r = run("piper", "info", str(bad))
    assert r.returncode == 2 and "cycle" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    plan = tmp_path / "p.json"
    plan.write_text(json.dumps({"stages": [{"nodes": [0], "dataParallelDegree": 1, "tensorParallelDegree": 1,
                                            "TMPCids": {"0": "vanilla"}}]}))
    r = run("piper", "evaluate", BERT, str(plan))
    assert r.returncode == 2 and "rule 1" in r.stderr and len(r.stderr.strip().splitlines()) == 1
