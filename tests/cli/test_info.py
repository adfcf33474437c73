"""``python -m piper info``: the workload's summary, its cluster shape, and the flags that override the file."""

import json
from pathlib import Path

from tests.helpers import two_layer_workload, write_json

ROOT = Path(__file__).resolve().parents[2]
BERT = str(ROOT / "experiments" / "workloads" / "bert32a100.json")


def test_info_lists_the_workload(cli):
    r = cli("piper", "info", BERT, "--devices", "64", "--json")
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["layers"] == 37 and info["edges"] == 67 and info["degrees"] == [1, 2, 4, 8]
    assert info["tmpc_ids"] == ["activation recomp", "vanilla"] and info["devices"] == 64
    assert info["ideals"] == 43  # the authors' planner reports 43 ideals for BERT-32


def test_info_shows_the_cluster_shape(cli, tmp_path):
    path = write_json(tmp_path, two_layer_workload(devicesPerNode=4, intraNodeBandwidth=20.0, allReduceFactor=2))
    code, out, err = cli("piper", "info", path)
    assert code == 0 and err == ""
    assert "8 devices in nodes of 4, network 2 bytes/s, intra-node 20 bytes/s, all-reduce factor 2" in out
    assert "devicesPerNode (G=4 < k=8)" in out
    code, out, _ = cli("piper", "info", path, "--json")
    info = json.loads(out)
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"], info["allreduce_factor"]) == (4, 20.0, 2.0)
    assert info["active_features"] == ["devicesPerNode", "intraNodeBandwidth", "allReduceFactor"]
    assert info["unknown_keys"] == []


def test_info_json_of_a_workload_without_cluster_keys_has_the_defaults(cli):
    code, out, err = cli("piper", "info", BERT, "--json", "-k", "64")
    info = json.loads(out)
    assert code == 0 and err == ""
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"]) == (64, info["bandwidth_bytes_per_s"])
    assert info["allreduce_factor"] == 4.0 and info["active_features"] == [] and info["unknown_keys"] == []


def test_cluster_flags_override_the_file(cli, tmp_path):
    path = write_json(tmp_path, two_layer_workload())
    code, out, _ = cli("piper", "info", path, "--json", "--devices-per-node", "2", "--intra-node-bandwidth", "1KB",
                       "--allreduce-factor", "2.5")
    info = json.loads(out)
    assert code == 0
    assert (info["devices_per_node"], info["intra_node_bandwidth_bytes_per_s"], info["allreduce_factor"]) == (2, 1000.0, 2.5)
    code, out, _ = cli("piper", "info", path, "--json", "-G", "8")
    assert json.loads(out)["active_features"] == []  # G = k: one node
