"""The one solve command (``python -m piper solve`` and its alias ``python -m baselines
solve``) and the one JSON form of a Result (issue 19)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper import Options, Status, load_problem, solve
from piper.core.result import Result
from tests.commands import run_python_module
from tests.helpers import two_layer_workload, write_json

ROOT = Path(__file__).resolve().parents[2]
REPRO = str(ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json")


@pytest.mark.parametrize("args, fragment", [
    (["--solver", "cpsat", "--linearize"], "--linearize applies to dp, dp-greedy"),
    (["--solver", "dp", "--warm-start", "x.json"], "--warm-start applies to milp, milp-highs, cpsat"),
    (["--solver", "equi", "--knapsack", "greedy"], "--knapsack applies to dp"),
    (["--solver", "dp", "--split", "sequences"], "--split applies to milp"),
    (["--solver", "cpsat", "--split", "sequences"], "--split needs --warm-start"),
    (["--solver", "nope"], "unknown solver 'nope'"),
    (["--solver", "cpsat", "--split-backend", "ray"], "--split-backend needs --split sequences"),
    (["--solver", "cpsat", "--split", "sequences", "--warm-start", "x.json", "--split-backend", "threads",
      "--ray-address", "h:6379"], "--ray-address needs --split-backend ray"),
    (["--solver", "dp", "--split-backend", "ray"], "--split-backend applies to milp"),
])
def test_flags_for_another_solver_exit_2_with_one_line(cli, args: list[str], fragment: str) -> None:
    proc = cli("piper", "solve", REPRO, *args)
    assert proc.returncode == 2
    assert fragment in proc.stderr and proc.stderr.count("\n") == 1 and not proc.stdout


def test_result_json_round_trip_with_infinities() -> None:
    problem = load_problem(REPRO)
    res = solve(problem, Options(), solver="cpsat")
    back = Result.from_dict(json.loads(json.dumps(res.to_dict())), problem)
    assert (back.status, back.tps, back.bound, back.tolerance, back.plan) == (
        res.status, res.tps, res.bound, res.tolerance, res.plan)
    # a proven-infeasible result: tps and bound are +inf, written as null and read back as inf
    infeasible = None
    for seed in range(200):
        r = solve(random_problem(seed), Options(), solver="dp")
        if r.status == Status.INFEASIBLE:
            infeasible = r
            break
    assert infeasible is not None
    raw = infeasible.to_dict()
    assert raw["tps"] is None and raw["bound"] is None and raw["plan"] is None
    text = json.dumps(raw, allow_nan=False)  # strict JSON: no Infinity anywhere
    back = Result.from_dict(json.loads(text))
    assert back.status == Status.INFEASIBLE and math.isinf(back.tps) and math.isinf(back.bound)


@pytest.mark.slow  # 15 s (a Ray instance); the split on Ray is covered in CI by tests/solvers/test_backends_split.py
def test_split_proof_on_ray_from_the_command_line(tmp_path: Path) -> None:
    """--split sequences --split-backend ray proves the DP's plan optimal, as the threads do
    (a local Ray instance, started by the command: a separate process each, so that the
    instance ends with it)."""
    pytest.importorskip("ray")  # the extra .[ray]; CI installs it
    from piper import dump_problem

    workload = tmp_path / "w.json"
    dump_problem(random_problem(3, n=6, devices=4), workload)
    plan = tmp_path / "dp.json"
    assert run_python_module("piper", "solve", str(workload), "--out", str(plan), "--quiet").returncode == 0
    answers = []
    for backend in ("threads", "ray"):
        proc = run_python_module("piper", "solve", str(workload), "--solver", "cpsat", "--warm-start", str(plan),
                                 "--split", "sequences", "--split-backend", backend, "--json", "--quiet")
        assert proc.returncode == 0, proc.stderr[-800:]
        answers.append(json.loads(proc.stdout))
    dp = load_problem(workload)
    best = solve(dp, Options(), solver="dp").tps
    for out in answers:
        assert out["status"] == "optimal" and out["tps"] == pytest.approx(best, rel=1e-9)
    assert answers[1]["stats"]["split"]["backend"] == "ray"


def test_solve_refuses_cluster_keys_for_a_solver_without_the_features(cli, tmp_path):
    from piper.solvers.registry import SolverInfo, register, unregister

    register(SolverInfo("v1-only", "piper.dp:solve_dp", True, "the DP without features", {"knapsack": "exact"}))
    try:
        path = write_json(tmp_path, two_layer_workload(devicesPerNode=2, intraNodeBandwidth=4.0))
        code, out, err = cli("piper", "solve", path, "-q", "--solver", "v1-only")
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1
        assert lines[0].startswith("piper: error: solver 'v1-only' does not support devicesPerNode (G=2 < k=8)")
        # the flags give a file without the cluster keys the features as well
        code, _, err = cli("piper", "solve", write_json(tmp_path, two_layer_workload(), "v1.json"), "-q",
                           "--solver", "v1-only", "--allreduce-factor", "2")
        assert code == 2 and "does not support allReduceFactor (f=2 != 4)" in err
    finally:
        unregister("v1-only")
    # every shipped solver honours the cluster keys: dp and brute agree
    code, out, _ = cli("piper", "solve", path, "-q", "--solver", "brute", "--json")
    assert code == 0 and json.loads(out)["status"] == "optimal"
    code, out2, _ = cli("piper", "solve", path, "-q", "--json")
    assert code == 0 and json.loads(out2)["tps"] == json.loads(out)["tps"]
