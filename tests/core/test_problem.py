"""Loading and validating workloads: every rule of docs/problem.md §1.5, round trips, overrides, BERT insertion."""

import json
from pathlib import Path

import pytest

from piper import (
    ProblemError,
    dump_problem,
    insert_bert_layers,
    load_problem,
    problem_from_dict,
    problem_to_dict,
)
from tests.helpers import tmpc, workload

WORKLOADS = Path(__file__).resolve().parents[2] / "experiments" / "workloads"


def base():
    return workload({0: {1: [tmpc(p=1.0)]}, 1: {1: [tmpc(p=2.0), tmpc("activation recomp", p=3.0)]},
                     2: {1: [tmpc(p=1.0)], 2: [tmpc(p=0.5)]}}, [(0, 1, 4.0), (1, 2, 4.0)])


def test_valid_base_loads():
    p = problem_from_dict(base())
    assert p.n == 3 and len(p.edges) == 2 and p.degrees == (1, 2)
    assert p.topological_order == (0, 1, 2)


def test_single_node_without_edges_is_valid():
    p = problem_from_dict(workload({5: {1: [tmpc()]}}, []))
    assert p.n == 1 and p.edges == ()


def mutate(fn):
    raw = base()
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
    raw = base()
    raw["maxBatchSize"] = raw.pop("mbsInBatch")
    assert problem_from_dict(raw).microbatches == 8
    raw["mbsInBatch"] = 8
    assert problem_from_dict(raw).microbatches == 8


def test_unknown_keys_are_kept_and_round_trip(tmp_path):
    raw = base()
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


def test_with_cluster_overrides_and_validates():
    p = problem_from_dict(base())
    q = p.with_cluster(devices=64, memory=2**33, microbatches=1920, bandwidth=25 * 2**30)
    assert (q.devices, q.memory_per_device, q.microbatches, q.bandwidth) == (64, 2**33, 1920, 25 * 2**30)
    assert p.devices == 8  # unchanged
    with pytest.raises(ProblemError, match="maxDevices"):
        p.with_cluster(devices=0)


def test_load_errors_are_problem_errors(tmp_path):
    with pytest.raises(ProblemError, match="cannot read"):
        load_problem(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{ nope")
    with pytest.raises(ProblemError, match="not valid JSON"):
        load_problem(bad)
    bad.write_text("[1, 2]")
    with pytest.raises(ProblemError, match="JSON object"):
        load_problem(bad)


def test_bert_insertion_builds_a_chain_of_copies():
    bert = load_problem(WORKLOADS / "bert32a100.json")
    b48 = insert_bert_layers(bert, 48)
    assert b48.n == bert.n + 16 and len(b48.edges) == len(bert.edges) + 16
    copies = [123456790 + i for i in range(16)]
    chain = [34, *copies, 35]
    for a, b in zip(chain, chain[1:]):
        assert any(e.u == a and e.v == b for e in b48.out_edges[a])
    assert not any(e.v == 35 for e in b48.out_edges[34])
    c = b48.node(copies[3])
    for t, lst in c.tmpcs.items():
        src = bert.node(34).tmpcs[t]
        for cc, s in zip(lst, src):
            assert cc.time_per_sample == s.time_per_sample and cc.memory_a == s.memory_a
            assert dict(cc.sync_fw) == {copies[2]: s.sync_fw[33]}
            assert dict(cc.sync_bw) == {copies[4]: s.sync_bw[35]}
    assert insert_bert_layers(bert, 32) is bert
    with pytest.raises(ProblemError, match="already has 32"):
        insert_bert_layers(bert, 16)
