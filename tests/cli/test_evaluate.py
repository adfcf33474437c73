"""``python -m piper evaluate``: the reference's numbers, the table and --json, an
out-of-memory plan as a result, and the cluster flags changing the batch time."""

import json
from pathlib import Path

import pytest

from tests.helpers import TWO_STAGE_PLAN, two_layer_workload, write_json
from tests.reference import plan_of, rows

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "experiments" / "workloads" / "bert32a100.json")


def test_evaluate_json_matches_reference(cli, tmp_path):
    row = next(r for r in rows() if r["variant"] == "piper" and r["config_id"] == "plots-8GB-k128")
    path = tmp_path / "plan.json"
    plan_of(row).dump(path)
    r = cli("piper", "evaluate", BERT, str(path), "--devices", "128", "--memory", "8GiB", "--microbatches", "1920",
            "--bandwidth", "25GiB", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["tps"] == pytest.approx(row["tps"], rel=1e-9) and out["oom"] is False
    assert len(out["stages"]) == row["num_stages"]
    assert set(out["stages"][0]) >= {"tps", "memory", "y", "compute", "edge", "resync"}
    table = cli("piper", "evaluate", BERT, str(path), "-k", "128", "-M", "8GiB", "-N", "1920", "-B", "25GiB")
    assert table.returncode == 0 and "bottleneck stage" in table.stdout
    # the same plan with 1 GiB per device is out of memory: a result, not an error
    oom = cli("piper", "evaluate", BERT, str(path), "-k", "128", "-M", "1GiB", "-N", "1920", "--json")
    assert oom.returncode == 0 and json.loads(oom.stdout)["tps"] is None and json.loads(oom.stdout)["oom"] is True


def test_evaluate_json_carries_batch_time_and_the_flags_change_it(cli, tmp_path):
    path = write_json(tmp_path, two_layer_workload())
    plan = write_json(tmp_path, TWO_STAGE_PLAN, "p.json")
    code, out, _ = cli("piper", "evaluate", path, plan, "--json")
    one_node = json.loads(out)
    # each stage: X = 16, R = 4 (1) 4 / (2 * 8) = 1 byte: stage 1 (16 / 2 + 1) / 2 + 1 = 5.5, stage 2 6;
    # tau = 2 + 8 = 10 and 3 + 8 = 11: batch time 8 * 6 + 21 - 11 = 58
    assert code == 0 and one_node["tps"] == 6.0 and one_node["batch_time"] == 58.0 and one_node["fits_in_node"] is True
    code, out, _ = cli("piper", "evaluate", path, plan, "--json", "-G", "2", "--intra-node-bandwidth", "4",
                       "--allreduce-factor", "2")
    nodes = json.loads(out)
    # 4 devices > G = 2: edges at B = 2; each stage (2 devices) resyncs 0.5 bytes at B_in = 4
    assert nodes["fits_in_node"] is False and [s["fits_in_node"] for s in nodes["stages"]] == [True, True]
    assert nodes["stages"][0]["tps"] == 16 / (2 * 2) + 0.5 / 4 + 1 and nodes["tps"] == 16 / 4 + 0.5 / 4 + 1.5
    code, out, _ = cli("piper", "evaluate", path, plan, "-G", "2", "--intra-node-bandwidth", "4")
    assert "batch time" in out.splitlines()[-1] and "spans" not in out


def test_evaluate_expert_parallel_plan_and_rule_6_error(cli, tmp_path):
    """docs/problem.md §11's worked check through the command (d = 4: TPS 5, memory 8 bytes), and
    a plan breaking rule 6 (d = 1) is exit 2 with one line naming the rule, node and degrees."""
    moe = {"id": "moe", "timePerSample": 4.0, "parameterSize": 0.0, "memoryUsageA": 0.0, "memoryUsageB": 0.0,
           "syncTimeFw": {}, "syncTimeBw": {}, "expertParallel": 2, "expertParameterSize": 8.0,
           "memoryUsageShardedExpertB": 16.0}
    path = write_json(tmp_path, {"maxDevices": 4, "maxMemoryPerDevice": 100.0, "bandwidth": 1.0, "mbsInBatch": 4,
                                 "nodes": [{"id": 0, "TMPCs": {"1": [moe]}}], "edges": []})

    def plan(d):
        return write_json(tmp_path, {"stages": [{"nodes": [0], "dataParallelDegree": d, "tensorParallelDegree": 1,
                                                 "TMPCids": {"0": "moe"}}]}, f"p{d}.json")

    code, out, _ = cli("piper", "evaluate", path, plan(4), "--json")
    got = json.loads(out)
    assert code == 0 and got["tps"] == 5.0 and got["stages"][0]["memory"] == 8.0
    code, _, err = cli("piper", "evaluate", path, plan(1))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "rule 6" in err and "node 0" in err and "e*e_t = 2*1 = 2" in err and "d*t = 1*1 = 1" in err
