"""The commands and a plan's madeFor record (piper.io.provenance): ``solve --out`` and
``plan --plan-out`` write it, ``evaluate`` warns about each difference from the workload
and cluster given, and ``--strict`` refuses."""

from __future__ import annotations

import json
from pathlib import Path

from piper import load_problem
from piper.io.provenance import RECORD_KEY, plan_record, workload_hash
from tests.commands import RunCommand

ROOT = Path(__file__).resolve().parents[2]
SMALL = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"


def test_solve_writes_the_record_and_evaluate_warns_or_refuses(cli: RunCommand, tmp_path: Path) -> None:
    plan_path = tmp_path / "plan.json"
    proc = cli("piper", "solve", str(SMALL), "-G", "4", "--out", str(plan_path), "-q")
    assert proc.returncode == 0, proc.stderr[-400:]
    doc = json.loads(plan_path.read_text())
    problem = load_problem(SMALL).with_cluster(devices_per_node=4)
    assert doc[RECORD_KEY] == json.loads(json.dumps(plan_record(problem)))
    # the same workload and cluster: no warning
    same = cli("piper", "evaluate", str(SMALL), str(plan_path), "-G", "4", "--json", "--strict")
    assert same.returncode == 0 and same.stderr == "" and json.loads(same.stdout)["tps"] > 0
    # another cluster: one warning line per difference, the plan is still scored
    warn = cli("piper", "evaluate", str(SMALL), str(plan_path), "-G", "2", "--allreduce-factor", "2", "--json")
    assert warn.returncode == 0, warn.stderr
    lines = warn.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith("piper: warning: plan was made for") for line in lines)
    assert "G=4" in lines[0] and "G=2" in lines[0] and "f=4" in lines[1] and "f=2" in lines[1]
    assert json.loads(warn.stdout)["tps"] > 0
    # --strict: exit 2, one line, nothing on stdout
    strict = cli("piper", "evaluate", str(SMALL), str(plan_path), "-G", "2", "--allreduce-factor", "2", "--json", "--strict")
    assert strict.returncode == 2 and strict.stdout == ""
    assert strict.stderr.count("\n") == 1 and strict.stderr.startswith("piper: error:")
    assert "G=2" in strict.stderr and "f=2" in strict.stderr
    # the same plan without its record: accepted as before, even with --strict
    plan_path.write_text(json.dumps({"stages": doc["stages"]}))
    bare = cli("piper", "evaluate", str(SMALL), str(plan_path), "-G", "2", "--allreduce-factor", "2", "--json", "--strict")
    assert bare.returncode == 0 and bare.stderr == ""


def test_solve_out_unwritable_is_one_line_exit_2(cli: RunCommand, tmp_path: Path) -> None:
    proc = cli("piper", "solve", str(SMALL), "--out", str(tmp_path / "no" / "such" / "plan.json"), "-q")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--out" in proc.stderr and not proc.stdout
    proc = cli("piper", "solve", str(SMALL), "--out", str(tmp_path), "-q")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "is a directory" in proc.stderr


def test_frontend_plan_records_the_workload_it_wrote(cli: RunCommand, tmp_path: Path) -> None:
    work, plan_path = tmp_path / "w.json", tmp_path / "p.json"
    proc = cli("piper", "plan", "megatron-1.7b", "--nodes", "1", "--global-batch", "64", "--json",
               "--out", str(work), "--plan-out", str(plan_path))
    assert proc.returncode == 0, proc.stderr[-400:]
    doc = json.loads(plan_path.read_text())
    assert doc[RECORD_KEY]["workloadSha256"] == workload_hash(load_problem(work))
    ok = cli("piper", "evaluate", str(work), str(plan_path), "--strict", "--json")
    assert ok.returncode == 0 and ok.stderr == ""
    bad = cli("piper", "evaluate", str(work), str(plan_path), "--strict", "--json", "-M", "40GB")
    assert bad.returncode == 2 and "M=" in bad.stderr and bad.stderr.count("\n") == 1
