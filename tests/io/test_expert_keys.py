"""docs/problem.md §11: the four expert-parallelism TMPC keys in the loader and writer, and the
active-feature report (``expertParallel``)."""

import pytest

from piper import load_problem
from piper.core.errors import ProblemError
from piper.core.limits import MAX_COUNT
from piper.io.provenance import workload_hash
from piper.io.workload import KNOWN_KEYS

KEYS = ("expertParallel", "expertTensorParallel", "expertParameterSize", "memoryUsageShardedExpertB")


def _workload(**tmpc_keys):
    c = {"id": "moe", "timePerSample": 4.0, "parameterSize": 0.0, "memoryUsageA": 0.0, "memoryUsageB": 0.0,
         "syncTimeFw": {}, "syncTimeBw": {}, **tmpc_keys}
    return {"maxDevices": 4, "maxMemoryPerDevice": 100.0, "bandwidth": 1.0, "mbsInBatch": 4,
            "nodes": [{"id": 0, "TMPCs": {"1": [c]}}], "edges": []}


def test_known_and_defaults():
    assert set(KEYS) <= set(KNOWN_KEYS["TMPC"])
    p = load_problem(_workload())
    c = p.nodes[0].tmpcs[1][0]
    assert (c.expert_parallel, c.expert_tensor_parallel, c.expert_parameter_size, c.memory_sharded_expert) == (1, 1, 0.0, 0.0)
    assert "expertParallel" not in p.active_features()
    assert not p.unknown_keys
    # nothing written back when not given
    assert not set(KEYS) & set(p.to_dict()["nodes"][0]["TMPCs"]["1"][0])


def test_values_round_trip_and_feature():
    p = load_problem(_workload(expertParallel=2, expertTensorParallel=4.0, expertParameterSize=8,
                               memoryUsageShardedExpertB=16.5))
    c = p.nodes[0].tmpcs[1][0]
    assert (c.expert_parallel, c.expert_tensor_parallel, c.expert_parameter_size, c.memory_sharded_expert) == (2, 4, 8.0, 16.5)
    assert isinstance(c.expert_tensor_parallel, int)
    assert c.expert_width == 8
    assert c.expert_copies(4, 4) == 2 and c.expert_copies(2, 2) is None
    assert "expertParallel" in p.active_features()
    back = load_problem(p.to_dict())
    assert back.nodes[0].tmpcs[1][0] == c
    assert workload_hash(back) == workload_hash(p)
    assert workload_hash(p) != workload_hash(load_problem(_workload()))


@pytest.mark.parametrize("keys", [{"expertParallel": 2}, {"expertTensorParallel": 2}, {"expertParameterSize": 1.0},
                                  {"memoryUsageShardedExpertB": 1.0}])
def test_each_key_alone_is_active(keys):
    assert "expertParallel" in load_problem(_workload(**keys)).active_features()


def test_defaults_given_explicitly_are_not_active_and_hash_is_unchanged():
    p = load_problem(_workload(expertParallel=1, expertTensorParallel=1, expertParameterSize=0, memoryUsageShardedExpertB=0))
    assert "expertParallel" not in p.active_features()
    assert workload_hash(p) == workload_hash(load_problem(_workload()))


@pytest.mark.parametrize("key, value, message", [
    ("expertParallel", 0, "expertParallel: must be >= 1"),
    ("expertParallel", 1.5, "expertParallel: must be an integer"),
    ("expertParallel", True, "expertParallel: expected a number"),
    ("expertParallel", None, "expertParallel: expected a number"),
    ("expertTensorParallel", MAX_COUNT + 1, "expertTensorParallel: must be <= 2147483647"),
    ("expertParameterSize", -1.0, "expertParameterSize: must be >= 0"),
    ("expertParameterSize", 1e31, "expertParameterSize: must be <= 1e\\+30"),
    ("memoryUsageShardedExpertB", "8", "memoryUsageShardedExpertB: expected a number"),
])
def test_bad_values_name_node_tmpc_and_key(key, value, message):
    with pytest.raises(ProblemError, match=f"node 0 t=1 TMPCs\\[0\\] \\(TMPC 'moe'\\) {message}"):
        load_problem(_workload(**{key: value}))
