"""The Problem (piper.core.problem): cluster overrides (with_cluster), which cluster
features are active, equality, and the layer graph's topological order (ties by file
order) and the cycle error, which names the cycle."""

import pytest

from piper import ProblemError, problem_from_dict
from tests.helpers import three_layer_chain, tmpc, workload


def test_with_cluster_overrides_and_validates():
    p = problem_from_dict(three_layer_chain())
    q = p.with_cluster(devices=64, memory=2**33, microbatches=1920, bandwidth=25 * 2**30)
    assert (q.devices, q.memory_per_device, q.microbatches, q.bandwidth) == (64, 2**33, 1920, 25 * 2**30)
    assert p.devices == 8  # unchanged
    with pytest.raises(ProblemError, match="maxDevices"):
        p.with_cluster(devices=0)


def test_with_cluster_sets_and_validates_the_new_numbers():
    p = problem_from_dict(three_layer_chain())
    q = p.with_cluster(devices_per_node=2, intra_node_bandwidth=16.0, allreduce_factor=2)
    assert (q.devices_per_node, q.intra_node_bandwidth, q.allreduce_factor) == (2, 16.0, 2.0)
    assert (q.node_size, q.bandwidth_intra, q.resync_factor) == (2, 16.0, 2.0)
    assert p.devices_per_node is None  # unchanged
    r = q.with_cluster(devices=4)  # None keeps the cluster values
    assert (r.devices, r.devices_per_node, r.intra_node_bandwidth, r.allreduce_factor) == (4, 2, 16.0, 2.0)
    for kw, key in [({"devices_per_node": 0}, "devicesPerNode"), ({"intra_node_bandwidth": -1.0}, "intraNodeBandwidth"),
                    ({"allreduce_factor": 0.0}, "allReduceFactor"), ({"devices_per_node": 1.5}, "devicesPerNode")]:
        with pytest.raises(ProblemError, match=key):
            p.with_cluster(**kw)


@pytest.mark.parametrize("top, active", [
    ({"devicesPerNode": 8}, ()),               # G = k: one node
    ({"devicesPerNode": 16}, ()),              # G > k: one node
    ({"devicesPerNode": 4}, ("devicesPerNode",)),
    ({"intraNodeBandwidth": 1.0}, ()),         # B_in = B
    ({"intraNodeBandwidth": 10.0}, ("intraNodeBandwidth",)),
    ({"intraNodeBandwidth": 0.5}, ("intraNodeBandwidth",)),
    ({"allReduceFactor": 4}, ()),              # f = 4 is the default
    ({"allReduceFactor": 2}, ("allReduceFactor",)),
    ({"devicesPerNode": 2, "allReduceFactor": 3, "intraNodeBandwidth": 1.0}, ("devicesPerNode", "allReduceFactor")),
])
def test_a_feature_is_active_only_when_given_and_changing_a_score(top, active):
    p = problem_from_dict(three_layer_chain(**top))
    assert p.active_features() == active
    assert tuple(p.active_feature_notes()) == active


def test_sharded_memory_is_active_only_when_positive():
    raw = three_layer_chain()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 0
    assert problem_from_dict(raw).active_features() == ()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 1e-3
    p = problem_from_dict(raw)
    assert p.active_features() == ("memoryUsageShardedB",)
    assert p.active_feature_notes()["memoryUsageShardedB"] == "1 TMPC(s) with s > 0"


def test_feature_note_names_the_numbers():
    notes = problem_from_dict(three_layer_chain(maxDevices=64, devicesPerNode=8)).active_feature_notes()
    assert notes == {"devicesPerNode": "G=8 < k=64"}


def test_equality_sees_the_cluster_fields():
    p = problem_from_dict(three_layer_chain())
    assert p != problem_from_dict(three_layer_chain(devicesPerNode=8))  # given vs not given
    raw = three_layer_chain()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 1.0
    assert p != problem_from_dict(raw)


# ---- the layer graph's order ---------------------------------------------------------------

def _graph(node_ids, edges):
    """A workload over ``node_ids`` (file order) with one TMPC per node and the given edges."""
    return workload({v: {1: [tmpc(p=1.0)]} for v in node_ids}, [(u, v, 1.0) for u, v in edges])


def test_ties_follow_file_order_not_id_order():
    # 7 and 3 are both sources; 7 comes first in the file, so it comes first in the order
    p = problem_from_dict(_graph([7, 3, 5, 1], [(3, 5), (7, 1)]))
    assert p.topological_order == (7, 3, 5, 1)


def test_a_successor_waits_for_all_its_predecessors():
    # file order 2, 0, 1 with 0 -> 2 and 1 -> 2: 2 must come after both
    p = problem_from_dict(_graph([2, 0, 1], [(0, 2), (1, 2)]))
    assert p.topological_order == (0, 1, 2)


def test_cycle_error_names_the_cycle():
    raw = _graph([0, 1, 2, 3], [(0, 1), (1, 2), (2, 3), (3, 1)])
    with pytest.raises(ProblemError) as err:
        problem_from_dict(raw)
    msg = str(err.value)
    assert "cycle" in msg
    # the cycle is 1 -> 2 -> 3 -> 1 (node 0 is not on it); networkx may start it anywhere on the loop
    assert any(f"{a} -> {b} -> {c} -> {a}" in msg for a, b, c in [(1, 2, 3), (2, 3, 1), (3, 1, 2)]), msg
    assert "0 ->" not in msg
