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
