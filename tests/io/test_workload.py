"""The workload loader (piper.io.workload): every validation rule of docs/problem.md §1.5
and §2, each naming the culprit; the cluster keys, their defaults and validation;
unknown-key warnings and strict mode; load errors; and round trips."""

import json
import math
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper import ProblemError, dump_problem, load_problem, problem_from_dict, problem_to_dict
from piper.core.problem import CLUSTER_FEATURES
from tests.helpers import assert_unreadable_and_invalid_json_refused, three_layer_chain, tmpc, workload

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "experiments" / "workloads"
SHARED = Path("/work/shared")


# ---- the rules of a workload ---------------------------------------------------------------

def test_valid_base_loads():
    p = problem_from_dict(three_layer_chain())
    assert p.n == 3 and len(p.edges) == 2 and p.degrees == (1, 2)
    assert p.topological_order == (0, 1, 2)


def test_single_node_without_edges_is_valid():
    p = problem_from_dict(workload({5: {1: [tmpc()]}}, []))
    assert p.n == 1 and p.edges == ()


def mutate(fn):
    raw = three_layer_chain()
    fn(raw)
    return raw


CASES = [
    # (mutation, text the message must contain)
    (lambda r: r.update(maxDevices=0), "maxDevices"),
    (lambda r: r.update(maxDevices=2.5), "maxDevices"),
    (lambda r: r.update(mbsInBatch=0), "mbsInBatch"),
    (lambda r: r.update(maxMemoryPerDevice=0), "maxMemoryPerDevice"),
    (lambda r: r.update(bandwidth=-1), "bandwidth"),
    (lambda r: r.update(bandwidth="fast"), "bandwidth"),
    (lambda r: r.pop("mbsInBatch"), "mbsInBatch"),
    (lambda r: r.pop("nodes"), "nodes"),
    (lambda r: r.update(maxBatchSize=7), "disagree"),
    (lambda r: r["nodes"][1].update(id=0), "node id 0 appears twice"),
    (lambda r: r["edges"].append({"sourceId": 0, "destId": 9, "communicationCost": 1.0}), "node 9 does not exist"),
    (lambda r: r["edges"].append({"sourceId": 7, "destId": 1, "communicationCost": 1.0}), "node 7 does not exist"),
    (lambda r: r["edges"].append(dict(r["edges"][0])), "edge 0->1: duplicate"),
    (lambda r: r["edges"].append({"sourceId": 2, "destId": 0, "communicationCost": 1.0}), "cycle"),
    (lambda r: r["edges"].append({"sourceId": 1, "destId": 1, "communicationCost": 1.0}), "self-loop"),
    (lambda r: r["edges"][0].update(communicationCost=-1.0), "edge 0->1 communicationCost"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0].update(timePerSample=-1.0), "node 1 t=1"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0].update(memoryUsageA=float("nan")), "memoryUsageA"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0].update(parameterSize=None), "parameterSize"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0].update(id=""), "non-empty"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][1].update(id="vanilla"), "'vanilla' appears twice"),
    (lambda r: r["nodes"][2]["TMPCs"].update({"0": r["nodes"][2]["TMPCs"]["1"]}), "t must be >= 1"),
    (lambda r: r["nodes"][2]["TMPCs"].update({"two": r["nodes"][2]["TMPCs"]["1"]}), "not an integer degree"),
    (lambda r: r["nodes"][2]["TMPCs"].update({"1": []}), "non-empty list"),
    (lambda r: r["nodes"][2].update(TMPCs={}), "empty"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0]["syncTimeFw"].pop("0"), "node 1 t=1 TMPC 'vanilla' syncTimeFw.*missing \\[0\\]"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0]["syncTimeFw"].update({"2": 0.0}), "syncTimeFw.*unexpected \\[2\\]"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0]["syncTimeBw"].pop("2"), "node 1 t=1 TMPC 'vanilla' syncTimeBw"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0].pop("syncTimeBw"), "missing key 'syncTimeBw'"),
    (lambda r: r["nodes"][1]["TMPCs"]["1"][0]["syncTimeBw"].update({"2": -3.0}), "syncTimeBw"),
    (lambda r: r["edges"][0].pop("destId"), "missing key 'destId'"),
    (lambda r: r["nodes"].append("node"), "must be an object"),
    (lambda r: r.update(nodes=[]), "at least one layer"),
]


@pytest.mark.parametrize("mutation, message", CASES)
def test_every_validation_rule_names_the_culprit(mutation, message):
    with pytest.raises(ProblemError, match=message):
        problem_from_dict(mutate(mutation))


def test_max_batch_size_alias_accepted_and_equal_values_ok():
    raw = three_layer_chain()
    raw["maxBatchSize"] = raw.pop("mbsInBatch")
    assert problem_from_dict(raw).microbatches == 8
    raw["mbsInBatch"] = 8
    assert problem_from_dict(raw).microbatches == 8


def test_load_errors_are_problem_errors(tmp_path):
    bad = assert_unreadable_and_invalid_json_refused(load_problem, ProblemError, tmp_path, "{ nope")
    bad.write_text("[1, 2]")
    with pytest.raises(ProblemError, match="JSON object"):
        load_problem(bad)


# ---- the cluster keys: defaults and fields -------------------------------------------------

def test_defaults_without_the_cluster_keys():
    p = problem_from_dict(three_layer_chain())
    assert (p.devices_per_node, p.intra_node_bandwidth, p.allreduce_factor) == (None, None, None)
    assert p.node_size == 8 and p.bandwidth_intra == 1.0 and p.resync_factor == 4.0
    assert p.active_features() == () and p.unknown_keys == ()
    assert all(c.memory_sharded == 0.0 for nd in p.nodes for lst in nd.tmpcs.values() for c in lst)
    assert all(nd.kind is None and nd.layer_index is None for nd in p.nodes)
    out = problem_to_dict(p)
    assert not {"devicesPerNode", "intraNodeBandwidth", "allReduceFactor"} & set(out)
    assert all("memoryUsageShardedB" not in c for nd in out["nodes"] for lst in nd["TMPCs"].values() for c in lst)


def test_cluster_keys_load_into_fields_and_effective_values():
    raw = three_layer_chain(devicesPerNode=4, intraNodeBandwidth=300e9, allReduceFactor=2)
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
    assert p.active_features() == CLUSTER_FEATURES  # all four, in this order


def test_float_whole_devices_per_node_is_accepted():
    assert problem_from_dict(three_layer_chain(devicesPerNode=4.0)).devices_per_node == 4


# ---- the cluster keys: every message names the key -----------------------------------------

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
def test_bad_cluster_values_name_the_key(mutation, message):
    raw = three_layer_chain()
    mutation(raw)
    with pytest.raises(ProblemError, match=message):
        problem_from_dict(raw)


def test_intra_node_bandwidth_below_bandwidth_is_allowed():
    p = problem_from_dict(three_layer_chain(intraNodeBandwidth=0.25))
    assert p.bandwidth_intra == 0.25 and p.unknown_keys == ()


# ---- unknown keys: warnings and strict mode ------------------------------------------------

def test_unknown_keys_are_recorded_with_where_they_are_and_kept():
    raw = three_layer_chain(intraNodeBandwith=300e9)  # typo
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
    # still kept for round trips, and not read as the cluster numbers
    assert p.extra["intraNodeBandwith"] == 300e9 and p.intra_node_bandwidth is None
    assert p.node(1).tmpc(1, "activation recomp").memory_sharded == 0.0
    out = problem_to_dict(p)
    assert out["intraNodeBandwith"] == 300e9 and out["nodes"][0]["flops"] == 12 and out["edges"][0]["note"] == "x"
    assert problem_from_dict(out).unknown_keys == p.unknown_keys


def test_strict_mode_raises_on_the_first_unknown_key(tmp_path):
    raw = three_layer_chain(intraNodeBandwith=300e9)
    raw["edges"][0]["note"] = "x"
    with pytest.raises(ProblemError, match="unknown key 'intraNodeBandwith' at top level"):
        problem_from_dict(raw, strict=True)
    path = tmp_path / "w.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(ProblemError, match="unknown key 'intraNodeBandwith' at top level.*strict"):
        load_problem(path, strict=True)
    assert len(load_problem(path).unknown_keys) == 2
    # strict accepts every known key, the cluster keys and the generators' "name" included
    ok = three_layer_chain(name="tiny", devicesPerNode=2, intraNodeBandwidth=4.0, allReduceFactor=2)
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
    assert p.unknown_keys == () and p.active_features() == ()


def test_generated_instances_have_no_unknown_keys():
    from experiments.lib.suites import build_suite

    for seed in range(20):
        p = random_problem(seed)
        assert p.unknown_keys == () and p.extra["name"].startswith("random-")
        problem_from_dict(problem_to_dict(p), strict=True)
    for inst in build_suite("default"):
        assert inst.problem.unknown_keys == (), inst.name


# ---- round trips ---------------------------------------------------------------------------

def test_unknown_keys_are_kept_and_round_trip(tmp_path):
    raw = three_layer_chain()
    raw["name"] = "tiny"
    raw["nodes"][0]["name"] = "embed"
    raw["nodes"][0]["flops"] = 12
    raw["edges"][0]["note"] = "x"
    p = problem_from_dict(raw)
    assert p.extra["name"] == "tiny"
    out = tmp_path / "w.json"
    dump_problem(p, out)
    q = load_problem(out)
    assert q == p
    assert problem_to_dict(q)["nodes"][0]["flops"] == 12 and problem_to_dict(q)["edges"][0]["note"] == "x"


@pytest.mark.parametrize("name", ["bert32a100.json", "gnmt.json", "resnet.json"])
def test_paper_workloads_load_and_round_trip(name):
    p = load_problem(WORKLOADS / name)
    assert problem_from_dict(json.loads(dump_problem(p))) == p


def test_round_trip_of_every_cluster_key(tmp_path):
    raw = three_layer_chain(name="v2", devicesPerNode=2, intraNodeBandwidth=40.0, allReduceFactor=2.5)
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
    d = problem_to_dict(problem_from_dict(three_layer_chain(devicesPerNode=8, intraNodeBandwidth=1.0, allReduceFactor=4)))
    assert (d["devicesPerNode"], d["intraNodeBandwidth"], d["allReduceFactor"]) == (8, 1.0, 4.0)


def test_paper_workloads_round_trip_writes_no_cluster_keys():
    for name in ("bert32a100.json", "gnmt.json", "resnet.json"):
        raw = json.loads((WORKLOADS / name).read_text())
        out = problem_to_dict(load_problem(WORKLOADS / name))
        assert set(out) == set(raw)
        assert math.isclose(out["bandwidth"], raw["bandwidth"])
        assert [set(nd) for nd in out["nodes"]] == [set(nd) for nd in raw["nodes"]]
