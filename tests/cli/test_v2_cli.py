"""The version-2 command line: cluster flags, warnings for unknown keys, --strict, info and evaluate output."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from piper.cli.common import run_main
from piper.cli.main import main
from tests.helpers import tmpc, workload

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "experiments" / "workloads" / "bert32a100.json")


def run(capsys, *argv):
    code = run_main(main, list(argv), prog="piper")
    out, err = capsys.readouterr()
    return code, out, err


def write(tmp_path, raw, name="w.json"):
    path = tmp_path / name
    path.write_text(json.dumps(raw))
    return str(path)


def small(**top):
    nodes = {0: {1: [tmpc(p=2.0, w=4.0, bw={"1": 0.0})], 2: [tmpc(p=1.5, w=2.0, bw={"1": 0.0})]},
             1: {1: [tmpc(p=3.0, w=4.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 8.0)], k=8, N=8, B=2.0)
    raw.update(top)
    return raw


PLAN = {"stages": [{"nodes": [0], "dataParallelDegree": 2, "tensorParallelDegree": 1, "TMPCids": {"0": "vanilla"}},
                   {"nodes": [1], "dataParallelDegree": 2, "tensorParallelDegree": 1, "TMPCids": {"1": "vanilla"}}]}


def test_info_shows_the_cluster_shape(capsys, tmp_path):
    path = write(tmp_path, small(devicesPerNode=4, intraNodeBandwidth=20.0, allReduceFactor=2))
    code, out, err = run(capsys, "info", path)
    assert code == 0 and err == ""
    assert "8 devices in nodes of 4, network 2 bytes/s, intra-node 20 bytes/s, all-reduce factor 2" in out
    assert "devicesPerNode (G=4 < k=8)" in out
    code, out, _ = run(capsys, "info", path, "--json")
    info = json.loads(out)
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"], info["allreduce_factor"]) == (4, 20.0, 2.0)
    assert info["version2_features"] == ["devicesPerNode", "intraNodeBandwidth", "allReduceFactor"]
    assert info["unknown_keys"] == []


def test_info_json_of_a_version1_workload_has_the_defaults(capsys):
    code, out, err = run(capsys, "info", BERT, "--json", "-k", "64")
    info = json.loads(out)
    assert code == 0 and err == ""
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"]) == (64, info["bandwidth_bytes_per_s"])
    assert info["allreduce_factor"] == 4.0 and info["version2_features"] == [] and info["unknown_keys"] == []


def test_cluster_flags_override_the_file(capsys, tmp_path):
    path = write(tmp_path, small())
    code, out, _ = run(capsys, "info", path, "--json", "--devices-per-node", "2", "--intra-node-bandwidth", "1KB",
                       "--allreduce-factor", "2.5")
    info = json.loads(out)
    assert code == 0
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"], info["allreduce_factor"]) == (2, 1000.0, 2.5)
    code, out, _ = run(capsys, "info", path, "--json", "-G", "8")
    assert json.loads(out)["version2_features"] == []  # G = k: one node


@pytest.mark.parametrize("flags, fragment", [
    (("--devices-per-node", "0"), "--devices-per-node/-G: must be >= 1"),
    (("--devices-per-node", "2.5"), "--devices-per-node/-G: expected a whole number"),
    (("-G", "x"), "expected a whole number"),
    (("--intra-node-bandwidth", "0"), "--intra-node-bandwidth: bad size '0': must be > 0"),
    (("--intra-node-bandwidth", "fast"), "--intra-node-bandwidth: bad size"),
    (("--allreduce-factor", "0"), "--allreduce-factor: must be a finite number > 0"),
    (("--allreduce-factor", "-4"), "--allreduce-factor"),
    (("--allreduce-factor", "nan"), "--allreduce-factor: must be a finite number > 0"),
    (("--allreduce-factor", "four"), "--allreduce-factor: expected a number"),
])
@pytest.mark.parametrize("command", ["info", "evaluate", "solve"])
def test_bad_flag_values_exit_2_with_one_line(capsys, tmp_path, flags, fragment, command):
    path = write(tmp_path, small())
    args = [command, path] + ([write(tmp_path, PLAN, "p.json")] if command == "evaluate" else []) + list(flags)
    code, out, err = run(capsys, *args)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err


def test_unknown_keys_warn_one_line_each_and_strict_makes_them_errors(capsys, tmp_path):
    raw = small(intraNodeBandwith=20.0)
    raw["nodes"][0]["flops"] = 3
    path = write(tmp_path, raw)
    plan = write(tmp_path, PLAN, "p.json")
    for args in (["info", path], ["evaluate", path, plan], ["solve", path, "-q"]):
        code, out, err = run(capsys, *args)
        assert code == 0, err
        lines = err.strip().splitlines()
        assert len(lines) == 2
        assert lines[0].startswith("piper: warning: unknown key 'intraNodeBandwith' at top level (known: ")
        assert lines[1].startswith("piper: warning: unknown key 'flops' at node 0 (known: ")
        code, out, err = run(capsys, *args, "--strict")
        assert code == 2 and out == ""
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("piper: error: unknown key 'intraNodeBandwith' at top level")
    # a clean file: no warnings, and --strict is fine
    clean = write(tmp_path, small(devicesPerNode=8), "clean.json")
    code, out, err = run(capsys, "info", clean, "--strict")
    assert code == 0 and err == ""


def test_slow_intra_node_bandwidth_warns(capsys, tmp_path):
    path = write(tmp_path, small(intraNodeBandwidth=1.0))
    code, _, err = run(capsys, "info", path)
    assert code == 0
    assert err.strip().splitlines() == [
        "piper: warning: intraNodeBandwidth 1 bytes/s is below bandwidth 2 bytes/s (inside a node is usually faster)"]
    code, _, err = run(capsys, "info", write(tmp_path, small(), "v1.json"), "--intra-node-bandwidth", "1")
    assert code == 0 and "below bandwidth" in err


def test_evaluate_json_carries_batch_time_and_the_flags_change_it(capsys, tmp_path):
    path = write(tmp_path, small())
    plan = write(tmp_path, PLAN, "p.json")
    code, out, _ = run(capsys, "evaluate", path, plan, "--json")
    v1 = json.loads(out)
    # each stage: X = 16, R = 4 (1) 4 / (2 * 8) = 1 byte: stage 1 (16 / 2 + 1) / 2 + 1 = 5.5, stage 2 6;
    # tau = 2 + 8 = 10 and 3 + 8 = 11: batch time 8 * 6 + 21 - 11 = 58
    assert code == 0 and v1["tps"] == 6.0 and v1["batch_time"] == 58.0 and v1["fits_in_node"] is True
    code, out, _ = run(capsys, "evaluate", path, plan, "--json", "-G", "2", "--intra-node-bandwidth", "4",
                       "--allreduce-factor", "2")
    v2 = json.loads(out)
    # 4 devices > G = 2: edges at B = 2; each stage (2 devices) resyncs 0.5 bytes at B_in = 4
    assert v2["fits_in_node"] is False and [s["fits_in_node"] for s in v2["stages"]] == [True, True]
    assert v2["stages"][0]["tps"] == 16 / (2 * 2) + 0.5 / 4 + 1 and v2["tps"] == 16 / 4 + 0.5 / 4 + 1.5
    code, out, _ = run(capsys, "evaluate", path, plan, "-G", "2", "--intra-node-bandwidth", "4")
    assert "batch time" in out.splitlines()[-1] and "spans" not in out


def test_solve_refuses_version2_for_a_solver_without_the_features(capsys, tmp_path):
    from piper.solvers.registry import SolverInfo, register, unregister

    register(SolverInfo("v1-only", "piper.dp:solve_dp", True, "the DP without features", {"knapsack": "exact"}))
    try:
        path = write(tmp_path, small(devicesPerNode=2, intraNodeBandwidth=4.0))
        code, out, err = run(capsys, "solve", path, "-q", "--solver", "v1-only")
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1
        assert lines[0].startswith("piper: error: solver 'v1-only' does not support devicesPerNode (G=2 < k=8)")
        # the flags make a version-1 file version 2 as well
        code, _, err = run(capsys, "solve", write(tmp_path, small(), "v1.json"), "-q", "--solver", "v1-only",
                           "--allreduce-factor", "2")
        assert code == 2 and "does not support allReduceFactor (f=2 != 4)" in err
    finally:
        unregister("v1-only")
    # every shipped solver honours version 2: dp and brute agree
    code, out, _ = run(capsys, "solve", path, "-q", "--solver", "brute", "--json")
    assert code == 0 and json.loads(out)["status"] == "optimal"
    code, out2, _ = run(capsys, "solve", path, "-q", "--json")
    assert code == 0 and json.loads(out2)["tps"] == json.loads(out)["tps"]


def test_python_dash_m_piper_end_to_end(tmp_path):
    path = write(tmp_path, small(intraNodeBandwith=1))
    r = subprocess.run([sys.executable, "-m", "piper", "info", path, "--strict"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "intraNodeBandwith" in r.stderr
    r = subprocess.run([sys.executable, "-m", "piper", "info", path, "-G", "0"], capture_output=True, text=True,
                       cwd=ROOT, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
