"""Inserting BERT layers (piper.io.bert_layers): a chain of copies of the last transformer
layer, keeping the cluster keys and the layers' kinds."""

import json
from pathlib import Path

import pytest

from piper import ProblemError, insert_bert_layers, load_problem, problem_from_dict

WORKLOADS = Path(__file__).resolve().parents[2] / "experiments" / "workloads"


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


def test_bert_insertion_keeps_the_cluster_keys_and_kinds():
    raw = json.loads((WORKLOADS / "bert32a100.json").read_text())
    raw.update(devicesPerNode=8, intraNodeBandwidth=300e9, allReduceFactor=2)
    for nd in raw["nodes"]:
        if nd["name"] == "ParallelTransformerLayer":
            nd["kind"] = "transformer"
    b48 = insert_bert_layers(problem_from_dict(raw), 48)
    assert (b48.devices_per_node, b48.intra_node_bandwidth, b48.allreduce_factor) == (8, 300e9, 2.0)
    assert b48.node(123456790).kind == "transformer" and b48.node(123456790).layer_index is None
