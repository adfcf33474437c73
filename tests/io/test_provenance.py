"""Plan provenance (issue 22, piper.io.provenance): a saved plan records the workload hash
and the cluster it was made for; the check names each difference, and strict mode refuses.
The commands that write and check the record: tests/cli/test_plan_records.py."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest

from piper import load_plan, load_problem, plan_from_dict, problem_to_dict
from piper.core.errors import PlanRecordMismatch
from piper.core.options import Options
from piper.io.provenance import (
    RECORD_KEY,
    check_plan_record,
    plan_document,
    plan_record,
    workload_hash,
)
from piper.solvers.registry import get_solver

ROOT = Path(__file__).resolve().parents[2]
BERT = ROOT / "experiments" / "workloads" / "bert32a100.json"
SMALL = ROOT / "experiments" / "workloads" / "bert-op-slice-n10-k8.json"


def raw(path: Path = BERT) -> dict[str, Any]:
    return json.loads(path.read_text())


def reorder_keys(x: Any, rng: random.Random) -> Any:
    """The same JSON value with every object's keys in a shuffled order."""
    if isinstance(x, dict):
        keys = list(x)
        rng.shuffle(keys)
        return {k: reorder_keys(x[k], rng) for k in keys}
    if isinstance(x, list):
        return [reorder_keys(v, rng) for v in x]
    return x


def respell_numbers(x: Any) -> Any:
    """Whole floats written as ints and ints as floats (4.0 <-> 4): the same numbers."""
    if isinstance(x, dict):
        return {k: respell_numbers(v) for k, v in x.items()}
    if isinstance(x, list):
        return [respell_numbers(v) for v in x]
    if isinstance(x, bool):
        return x
    if isinstance(x, float) and x.is_integer():
        return int(x)
    if isinstance(x, int):
        return float(x)
    return x


# ---------------------------------------------------------------------------------
# the workload hash
# ---------------------------------------------------------------------------------


def test_hash_is_stable_under_key_order_list_order_and_reserialising() -> None:
    base = raw()
    h = workload_hash(load_problem(base))
    rng = random.Random(7)
    for _ in range(3):
        other = reorder_keys(base, rng)
        rng.shuffle(other["nodes"])
        rng.shuffle(other["edges"])
        text = json.dumps(respell_numbers(other), indent=rng.choice([None, 1, 4]))
        assert workload_hash(load_problem(json.loads(text))) == h
    # a round trip through the project's own writer, and a cluster change, keep it too
    p = load_problem(base)
    assert workload_hash(load_problem(problem_to_dict(p))) == h
    assert workload_hash(p.with_cluster(devices=2048, memory=1e9, microbatches=7, bandwidth=3.0,
                                        devices_per_node=8, intra_node_bandwidth=9.0, allreduce_factor=2.0)) == h


def _first_tmpc(doc: dict[str, Any]) -> dict[str, Any]:
    node = doc["nodes"][3]
    return node["TMPCs"][sorted(node["TMPCs"])[0]][0]


def _change_cost(doc: dict[str, Any]) -> None:
    _first_tmpc(doc)["timePerSample"] *= 1.000001


def _change_memory(doc: dict[str, Any]) -> None:
    _first_tmpc(doc)["memoryUsageA"] += 1


def _change_edge(doc: dict[str, Any]) -> None:
    doc["edges"][5]["communicationCost"] += 1


def _change_sync(doc: dict[str, Any]) -> None:
    c = _first_tmpc(doc)
    key = next(iter(c["syncTimeBw"]))
    c["syncTimeBw"][key] += 1


def _drop_degree(doc: dict[str, Any]) -> None:
    node = next(nd for nd in doc["nodes"] if len(nd["TMPCs"]) > 1)
    del node["TMPCs"][max(node["TMPCs"], key=int)]


def _rename_tmpc(doc: dict[str, Any]) -> None:
    _first_tmpc(doc)["id"] = "renamed"


def _add_sharded(doc: dict[str, Any]) -> None:
    _first_tmpc(doc)["memoryUsageShardedB"] = 5.0


def _swap_tmpc_order(doc: dict[str, Any]) -> None:
    node = next(nd for nd in doc["nodes"] if any(len(lst) > 1 for lst in nd["TMPCs"].values()))
    lst = next(lst for lst in node["TMPCs"].values() if len(lst) > 1)
    lst.reverse()


@pytest.mark.parametrize("change", [_change_cost, _change_memory, _change_edge, _change_sync, _drop_degree,
                                    _rename_tmpc, _add_sharded, _swap_tmpc_order])
def test_hash_changes_with_any_change_of_the_graph(change) -> None:
    base = raw()
    other = copy.deepcopy(base)
    change(other)
    assert other != base
    assert workload_hash(load_problem(other)) != workload_hash(load_problem(base))


def test_hash_follows_the_front_ends_model_record_but_not_the_name() -> None:
    base = raw(SMALL)
    with_model = {**base, "model": {"layers": 32, "microBatch": 1}}
    other_model = {**base, "model": {"layers": 32, "microBatch": 2}}
    renamed = {**base, "name": "another label"}
    h = workload_hash(load_problem(base))
    assert workload_hash(load_problem(with_model)) != h
    assert workload_hash(load_problem(other_model)) != workload_hash(load_problem(with_model))
    assert workload_hash(load_problem(renamed)) == h


def test_hash_changes_when_an_edge_is_added() -> None:
    base = raw(SMALL)
    p = load_problem(base)
    have = {(e.u, e.v) for e in p.edges}
    order = p.topological_order
    u, v = next((a, b) for i, a in enumerate(order) for b in order[i + 1:] if (a, b) not in have)
    other = copy.deepcopy(base)
    other["edges"].append({"sourceId": u, "destId": v, "communicationCost": 0.0})
    for nd in other["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                if nd["id"] == u:
                    c["syncTimeBw"][str(v)] = 0.0
                if nd["id"] == v:
                    c["syncTimeFw"][str(u)] = 0.0
    h = workload_hash(load_problem(other))
    assert len(h) == 64 and h != workload_hash(p)


# ---------------------------------------------------------------------------------
# the record and its check
# ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def solved() -> tuple[Any, dict[str, Any]]:
    """A plan of the small workload (k=8, nodes of 4), with its record."""
    problem = load_problem(SMALL).with_cluster(devices_per_node=4, intra_node_bandwidth=1e11)
    result = get_solver("dp")(problem, Options(progress=False))
    assert result.plan is not None
    return problem, plan_document(result.plan, problem)


def test_plan_document_is_the_plan_plus_one_key(solved) -> None:
    problem, doc = solved
    plan = load_plan(doc)
    assert set(doc) == {"stages", RECORD_KEY}
    assert {k: v for k, v in doc.items() if k != RECORD_KEY} == plan.to_dict()
    assert plan_from_dict(json.loads(json.dumps(doc))) == plan
    record = doc[RECORD_KEY]
    assert record["workloadSha256"] == workload_hash(problem)
    assert record["cluster"]["maxDevices"] == problem.devices == 8
    assert record["cluster"]["devicesPerNode"] == 4 and record["cluster"]["intraNodeBandwidth"] == 1e11
    assert check_plan_record(doc, problem, strict=True) == []


# (with_cluster argument, new value, symbol in the message, flag in the message)
CLUSTER_CHANGES = [
    ("devices", 16, "k", "--devices"),
    ("memory", 12345678.0, "M", "--memory"),
    ("microbatches", 16, "N", "--microbatches"),
    ("bandwidth", 2e9, "B", "--bandwidth"),
    ("devices_per_node", 2, "G", "--devices-per-node"),
    ("intra_node_bandwidth", 3e11, "B_in", "--intra-node-bandwidth"),
    ("allreduce_factor", 2.0, "f", "--allreduce-factor"),
]


@pytest.mark.parametrize("field, value, symbol, flag", CLUSTER_CHANGES)
def test_every_cluster_field_difference_is_named(solved, field: str, value: float, symbol: str, flag: str) -> None:
    problem, doc = solved
    other = problem.with_cluster(**{field: value})
    warnings = check_plan_record(doc, other, strict=False)
    assert len(warnings) == 1, warnings
    (line,) = warnings
    was = doc[RECORD_KEY]["cluster"]
    key = {"devices": "maxDevices", "memory": "maxMemoryPerDevice", "microbatches": "mbsInBatch",
           "bandwidth": "bandwidth", "devices_per_node": "devicesPerNode",
           "intra_node_bandwidth": "intraNodeBandwidth", "allreduce_factor": "allReduceFactor"}[field]
    assert was[key] != value
    assert f"plan was made for {symbol}=" in line and f"the cluster given has {symbol}=" in line
    assert flag in line and key in line and "\n" not in line
    with pytest.raises(PlanRecordMismatch) as exc:
        check_plan_record(doc, other, strict=True)
    assert isinstance(exc.value, ValueError) and line in str(exc.value)


def test_message_numbers_tell_close_values_apart(solved) -> None:
    problem, doc = solved
    m = doc[RECORD_KEY]["cluster"]["maxMemoryPerDevice"]
    (line,) = check_plan_record(doc, problem.with_cluster(memory=m + 1), strict=False)
    was, now = line.split("plan was made for M=")[1].split(" ")[0], line.split("has M=")[1].split(" ")[0]
    assert float(was) == m and float(now) == m + 1


def test_a_changed_workload_is_named_with_both_hashes(solved) -> None:
    problem, doc = solved
    other_doc = raw(SMALL)
    _change_edge(other_doc)
    other = load_problem(other_doc).with_cluster(devices_per_node=4, intra_node_bandwidth=1e11)
    (line,) = check_plan_record(doc, other, strict=False)
    assert "workload sha256" in line
    assert workload_hash(problem)[:12] in line and workload_hash(other)[:12] in line


def test_several_differences_one_line_each_and_strict_lists_all(solved) -> None:
    problem, doc = solved
    other = problem.with_cluster(devices=16, microbatches=16, allreduce_factor=3.0)
    warnings = check_plan_record(doc, other, strict=False)
    assert len(warnings) == 3
    with pytest.raises(PlanRecordMismatch) as exc:
        check_plan_record(doc, other, strict=True)
    assert all(w in str(exc.value) for w in warnings) and "\n" not in str(exc.value)


def test_k_change_on_a_one_node_cluster_is_named_once() -> None:
    """Without devicesPerNode, G = k: a new k is one difference, not also a new G."""
    problem = load_problem(SMALL)
    doc = {"stages": [], RECORD_KEY: plan_record(problem)}
    warnings = check_plan_record(doc, problem.with_cluster(devices=16), strict=False)
    assert len(warnings) == 1 and "k=8" in warnings[0] and "k=16" in warnings[0]
    # but nodes of 8 on 16 devices are not one node of 8: both differences count
    warnings = check_plan_record(doc, problem.with_cluster(devices=16, devices_per_node=8), strict=False)
    assert len(warnings) == 1 and "k=16" in warnings[0]
    warnings = check_plan_record(doc, problem.with_cluster(devices=16, devices_per_node=4), strict=False)
    assert len(warnings) == 2 and "G=4" in warnings[1]


def test_plans_without_a_record_are_accepted(solved, tmp_path: Path) -> None:
    problem, doc = solved
    bare = {k: v for k, v in doc.items() if k != RECORD_KEY}
    other = problem.with_cluster(devices=16)
    for form in (bare, bare["stages"], {"plan": bare}):
        assert check_plan_record(form, other, strict=True) == []
    path = tmp_path / "p.json"
    path.write_text(json.dumps(bare))
    assert check_plan_record(path, other, strict=True) == []
    assert check_plan_record(str(path), problem, strict=False) == []


def test_a_broken_record_names_the_field(solved) -> None:
    problem, doc = solved
    broken = copy.deepcopy(doc)
    broken[RECORD_KEY]["cluster"]["maxDevices"] = "eight"
    del broken[RECORD_KEY]["cluster"]["bandwidth"]
    warnings = check_plan_record(broken, problem, strict=False)
    assert len(warnings) == 2
    assert any("cluster.maxDevices" in w and "'eight'" in w for w in warnings)
    assert any("cluster.bandwidth is missing" in w for w in warnings)
    assert check_plan_record({**doc, RECORD_KEY: [1, 2]}, problem, strict=False)[0].startswith("the plan's 'madeFor'")
    with pytest.raises(PlanRecordMismatch):
        check_plan_record(broken, problem, strict=True)
