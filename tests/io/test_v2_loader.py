"""Version-2 loading (docs/problem.md §2): the new keys, their defaults and
validation, unknown-key warnings and strict mode, round trips, and version2_features()."""

import json
import math
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper import (
    ProblemError,
    dump_problem,
    insert_bert_layers,
    load_problem,
    problem_from_dict,
    problem_to_dict,
)
from piper.core.problem import VERSION2_FEATURES
from tests.helpers import tmpc, workload

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "experiments" / "workloads"
SHARED = Path("/work/shared")


def base(**kw):
    """0 -> 1 -> 2 on k = 8 devices, B = 1."""
    return workload({0: {1: [tmpc(p=1.0)]}, 1: {1: [tmpc(p=2.0), tmpc("activation recomp", p=3.0)]},
                     2: {1: [tmpc(p=1.0)], 2: [tmpc(p=0.5)]}}, [(0, 1, 4.0), (1, 2, 4.0)], **kw)


def v2(**top):
    raw = base()
    raw.update(top)
    return raw


# ---- defaults and the new fields --------------------------------------------------------

def test_defaults_without_the_new_keys():
    p = problem_from_dict(base())
    assert (p.devices_per_node, p.intra_node_bandwidth, p.allreduce_factor) == (None, None, None)
    assert p.node_size == 8 and p.bandwidth_intra == 1.0 and p.resync_factor == 4.0
    assert p.version2_features() == () and p.unknown_keys == ()
    assert all(c.memory_sharded == 0.0 for nd in p.nodes for lst in nd.tmpcs.values() for c in lst)
    assert all(nd.kind is None and nd.layer_index is None for nd in p.nodes)
    out = problem_to_dict(p)
    assert not {"devicesPerNode", "intraNodeBandwidth", "allReduceFactor"} & set(out)
    assert all("memoryUsageShardedB" not in c for nd in out["nodes"] for lst in nd["TMPCs"].values() for c in lst)


def test_new_keys_load_into_fields_and_effective_values():
    raw = v2(devicesPerNode=4, intraNodeBandwidth=300e9, allReduceFactor=2)
    raw["nodes"][1]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 12
    raw["nodes"][1]["kind"] = "transformer"
    raw["nodes"][1]["layerIndex"] = 0
    p = problem_from_dict(raw)
    assert p.devices_per_node == 4 and isinstance(p.devices_per_node, int) and p.node_size == 4
    assert p.intra_node_bandwidth == 300e9 and p.bandwidth_intra == 300e9
    assert p.allreduce_factor == 2.0 and isinstance(p.allreduce_factor, float) and p.resync_factor == 2.0
    n1 = p.node(1)
    assert n1.tmpc(1, "vanilla").memory_sharded == 12.0 and n1.tmpc(1, "activation recomp").memory_sharded == 0.0
    assert n1.kind == "transformer" and n1.layer_index == 0 and p.node(0).kind is None
    assert p.unknown_keys == ()
    assert p.version2_features() == VERSION2_FEATURES  # all four, in this order


def test_float_whole_devices_per_node_is_accepted():
    assert problem_from_dict(v2(devicesPerNode=4.0)).devices_per_node == 4


@pytest.mark.parametrize("top, active", [
    ({"devicesPerNode": 8}, ()),               # G = k: one node
    ({"devicesPerNode": 16}, ()),              # G > k: one node
    ({"devicesPerNode": 4}, ("devicesPerNode",)),
    ({"intraNodeBandwidth": 1.0}, ()),         # B_in = B
    ({"intraNodeBandwidth": 10.0}, ("intraNodeBandwidth",)),
    ({"intraNodeBandwidth": 0.5}, ("intraNodeBandwidth",)),
    ({"allReduceFactor": 4}, ()),              # f = 4 is version 1
    ({"allReduceFactor": 2}, ("allReduceFactor",)),
    ({"devicesPerNode": 2, "allReduceFactor": 3, "intraNodeBandwidth": 1.0}, ("devicesPerNode", "allReduceFactor")),
])
def test_a_feature_is_active_only_when_given_and_changing_a_score(top, active):
    p = problem_from_dict(v2(**top))
    assert p.version2_features() == active
    assert tuple(p.version2_feature_notes()) == active


def test_sharded_memory_is_active_only_when_positive():
    raw = base()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 0
    assert problem_from_dict(raw).version2_features() == ()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 1e-3
    p = problem_from_dict(raw)
    assert p.version2_features() == ("memoryUsageShardedB",)
    assert p.version2_feature_notes()["memoryUsageShardedB"] == "1 TMPC(s) with s > 0"


def test_feature_note_names_the_numbers():
    notes = problem_from_dict(v2(maxDevices=64, devicesPerNode=8)).version2_feature_notes()
    assert notes == {"devicesPerNode": "G=8 < k=64"}


# ---- validation: every message names the key --------------------------------------------

def _sharded(value):
    def f(r):
        r["nodes"][1]["TMPCs"]["1"][0]["memoryUsageShardedB"] = value
    return f


def _node(key, value):
    def f(r):
        r["nodes"][1][key] = value
    return f


BAD = [
    (lambda r: r.update(devicesPerNode=0), "devicesPerNode: must be >= 1"),
    (lambda r: r.update(devicesPerNode=-4), "devicesPerNode: must be >= 1"),
    (lambda r: r.update(devicesPerNode=2.5), "devicesPerNode: must be an integer"),
    (lambda r: r.update(devicesPerNode="8"), "devicesPerNode: expected a number"),
    (lambda r: r.update(devicesPerNode=True), "devicesPerNode: expected a number"),
    (lambda r: r.update(devicesPerNode=float("inf")), "devicesPerNode: must be finite"),
    (lambda r: r.update(intraNodeBandwidth=0), "intraNodeBandwidth: must be > 0"),
    (lambda r: r.update(intraNodeBandwidth=-1e9), "intraNodeBandwidth: must be > 0"),
    (lambda r: r.update(intraNodeBandwidth=float("nan")), "intraNodeBandwidth: must be finite"),
    (lambda r: r.update(intraNodeBandwidth=None), "intraNodeBandwidth: expected a number"),
    (lambda r: r.update(allReduceFactor=0), "allReduceFactor: must be > 0"),
    (lambda r: r.update(allReduceFactor=-2), "allReduceFactor: must be > 0"),
    (lambda r: r.update(allReduceFactor="4"), "allReduceFactor: expected a number"),
    (_sharded(-1.0), "node 1 t=1 TMPCs\\[0\\] \\(TMPC 'vanilla'\\) memoryUsageShardedB: must be >= 0"),
    (_sharded(float("inf")), "memoryUsageShardedB: must be finite"),
    (_sharded(float("nan")), "memoryUsageShardedB: must be finite"),
    (_sharded("big"), "memoryUsageShardedB: expected a number"),
    (_sharded(None), "memoryUsageShardedB: expected a number"),
    (lambda r: r.update(devicesPerNode=None), "devicesPerNode: expected a number"),
    (lambda r: r.update(allReduceFactor=None), "allReduceFactor: expected a number"),
    (_node("layerIndex", None), "node 1 layerIndex: must be an integer >= 0"),
    (_node("kind", 3), "node 1 kind: must be a string"),
    (_node("layerIndex", -1), "node 1 layerIndex: must be an integer >= 0"),
    (_node("layerIndex", 1.5), "node 1 layerIndex: must be an integer >= 0"),
    (_node("layerIndex", "2"), "node 1 layerIndex: must be an integer >= 0"),
    (_node("layerIndex", True), "node 1 layerIndex: must be an integer >= 0"),
]


@pytest.mark.parametrize("mutation, message", BAD)
def test_bad_version2_values_name_the_key(mutation, message):
    raw = base()
    mutation(raw)
    with pytest.raises(ProblemError, match=message):
        problem_from_dict(raw)


def test_intra_node_bandwidth_below_bandwidth_is_allowed():
    p = problem_from_dict(v2(intraNodeBandwidth=0.25))
    assert p.bandwidth_intra == 0.25 and p.unknown_keys == ()


def test_with_cluster_sets_and_validates_the_new_numbers():
    p = problem_from_dict(base())
    q = p.with_cluster(devices_per_node=2, intra_node_bandwidth=16.0, allreduce_factor=2)
    assert (q.devices_per_node, q.intra_node_bandwidth, q.allreduce_factor) == (2, 16.0, 2.0)
    assert (q.node_size, q.bandwidth_intra, q.resync_factor) == (2, 16.0, 2.0)
    assert p.devices_per_node is None  # unchanged
    r = q.with_cluster(devices=4)  # None keeps the version-2 values
    assert (r.devices, r.devices_per_node, r.intra_node_bandwidth, r.allreduce_factor) == (4, 2, 16.0, 2.0)
    for kw, key in [({"devices_per_node": 0}, "devicesPerNode"), ({"intra_node_bandwidth": -1.0}, "intraNodeBandwidth"),
                    ({"allreduce_factor": 0.0}, "allReduceFactor"), ({"devices_per_node": 1.5}, "devicesPerNode")]:
        with pytest.raises(ProblemError, match=key):
            p.with_cluster(**kw)


# ---- unknown keys: warnings and strict mode ----------------------------------------------

def test_unknown_keys_are_recorded_with_where_they_are_and_kept():
    raw = v2(intraNodeBandwith=300e9)  # typo
    raw["nodes"][0]["flops"] = 12
    raw["nodes"][1]["TMPCs"]["1"][1]["memoryUsageSharded"] = 3.0
    raw["edges"][0]["note"] = "x"
    p = problem_from_dict(raw)
    assert len(p.unknown_keys) == 4
    top, node, tm, edge = p.unknown_keys
    assert top.startswith("unknown key 'intraNodeBandwith' at top level (known: maxDevices, ")
    assert "intraNodeBandwidth" in top  # the list of known keys shows the right spelling
    assert node.startswith("unknown key 'flops' at node 0 (known: id, TMPCs, name, kind, layerIndex)")
    assert tm.startswith("unknown key 'memoryUsageSharded' at node 1 t=1 TMPCs[1] (TMPC 'activation recomp') (known:")
    assert edge.startswith("unknown key 'note' at edge 0->1 (known: sourceId, destId, communicationCost)")
    # still kept for round trips, and not read as the version-2 numbers
    assert p.extra["intraNodeBandwith"] == 300e9 and p.intra_node_bandwidth is None
    assert p.node(1).tmpc(1, "activation recomp").memory_sharded == 0.0
    out = problem_to_dict(p)
    assert out["intraNodeBandwith"] == 300e9 and out["nodes"][0]["flops"] == 12 and out["edges"][0]["note"] == "x"
    assert problem_from_dict(out).unknown_keys == p.unknown_keys


def test_strict_mode_raises_on_the_first_unknown_key(tmp_path):
    raw = v2(intraNodeBandwith=300e9)
    raw["edges"][0]["note"] = "x"
    with pytest.raises(ProblemError, match="unknown key 'intraNodeBandwith' at top level"):
        problem_from_dict(raw, strict=True)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ProblemError, match="unknown key 'intraNodeBandwith' at top level.*strict"):
        load_problem(path, strict=True)
    assert len(load_problem(path).unknown_keys) == 2
    # strict accepts every known key, the version-2 ones and the generators' "name" included
    ok = v2(name="tiny", devicesPerNode=2, intraNodeBandwidth=4.0, allReduceFactor=2)
    ok["nodes"][0].update(name="embed", kind="embedding", layerIndex=0)
    ok["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 5.0
    p = problem_from_dict(ok, strict=True)
    assert p.unknown_keys == () and p.extra == {"name": "tiny"}


def _project_files():
    files = sorted(WORKLOADS.glob("*.json"))
    files += sorted((SHARED / "workloads").glob("*.json")) + sorted((SHARED / "repro").glob("*.json"))
    return files


@pytest.mark.parametrize("path", _project_files(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_projects_own_workloads_have_no_unknown_keys(path):
    p = load_problem(path, strict=True)
    assert p.unknown_keys == () and p.version2_features() == ()


def test_generated_instances_have_no_unknown_keys():
    from experiments.lib.suites import build_suite

    for seed in range(20):
        p = random_problem(seed)
        assert p.unknown_keys == () and p.extra["name"].startswith("random-")
        problem_from_dict(problem_to_dict(p), strict=True)
    for inst in build_suite("default"):
        assert inst.problem.unknown_keys == (), inst.name


# ---- round trips ------------------------------------------------------------------------

def test_round_trip_of_every_version2_key(tmp_path):
    raw = v2(name="v2", devicesPerNode=2, intraNodeBandwidth=40.0, allReduceFactor=2.5)
    raw["nodes"][2]["TMPCs"]["2"][0]["memoryUsageShardedB"] = 7.5
    raw["nodes"][2].update(kind="transformer", layerIndex=3)
    p = problem_from_dict(raw)
    out = problem_to_dict(p)
    assert (out["devicesPerNode"], out["intraNodeBandwidth"], out["allReduceFactor"]) == (2, 40.0, 2.5)
    assert out["nodes"][2]["kind"] == "transformer" and out["nodes"][2]["layerIndex"] == 3
    assert out["nodes"][2]["TMPCs"]["2"][0]["memoryUsageShardedB"] == 7.5
    assert "kind" not in out["nodes"][0] and "layerIndex" not in out["nodes"][0]
    path = tmp_path / "w.json"
    dump_problem(p, path)
    q = load_problem(path, strict=True)
    assert q == p
    assert (q.devices_per_node, q.intra_node_bandwidth, q.allreduce_factor) == (2, 40.0, 2.5)
    assert q.node(2).tmpc(2, "vanilla").memory_sharded == 7.5 and q.node(2).layer_index == 3
    # given at their default values: still written back (given), still inactive
    d = problem_to_dict(problem_from_dict(v2(devicesPerNode=8, intraNodeBandwidth=1.0, allReduceFactor=4)))
    assert (d["devicesPerNode"], d["intraNodeBandwidth"], d["allReduceFactor"]) == (8, 1.0, 4.0)


def test_equality_sees_the_version2_fields():
    p = problem_from_dict(base())
    assert p != problem_from_dict(v2(devicesPerNode=8))  # given vs not given
    raw = base()
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = 1.0
    assert p != problem_from_dict(raw)


def test_bert_insertion_keeps_the_cluster_keys_and_kinds():
    raw = json.loads((WORKLOADS / "bert32a100.json").read_text())
    raw.update(devicesPerNode=8, intraNodeBandwidth=300e9, allReduceFactor=2)
    for nd in raw["nodes"]:
        if nd["name"] == "ParallelTransformerLayer":
            nd["kind"] = "transformer"
    b48 = insert_bert_layers(problem_from_dict(raw), 48)
    assert (b48.devices_per_node, b48.intra_node_bandwidth, b48.allreduce_factor) == (8, 300e9, 2.0)
    assert b48.node(123456790).kind == "transformer" and b48.node(123456790).layer_index is None


def test_paper_workloads_round_trip_writes_no_new_keys():
    for name in ("bert32a100.json", "gnmt.json", "resnet.json"):
        raw = json.loads((WORKLOADS / name).read_text())
        out = problem_to_dict(load_problem(WORKLOADS / name))
        assert set(out) == set(raw)
        assert math.isclose(out["bandwidth"], raw["bandwidth"])
        assert [set(nd) for nd in out["nodes"]] == [set(nd) for nd in raw["nodes"]]
