"""Plan JSON in and out (both TMPCids forms)."""

import json

import pytest

from piper import PlanFormatError, load_plan, plan_from_dict
from tests.helpers import plan


def test_round_trip_reference_shape(tmp_path):
    p = plan(([3, 4], 2, 4, {3: "vanilla", 4: "activation recomp"}), ([5], 1, 1, "vanilla"))
    d = p.to_dict()
    assert d["stages"][0] == {"nodes": [3, 4], "dataParallelDegree": 2, "tensorParallelDegree": 4,
                              "TMPCids": {"3": "vanilla", "4": "activation recomp"}}
    assert plan_from_dict(json.loads(p.to_json())) == p
    path = tmp_path / "p.json"
    p.dump(path)
    assert load_plan(path) == p


def test_tmpcids_as_list_of_pairs_like_the_authors_code():
    raw = {"stages": [{"nodes": [1, 2], "dataParallelDegree": 1, "tensorParallelDegree": 2,
                       "TMPCids": [[2, "activation recomp"], [1, "vanilla"]]}]}
    p = plan_from_dict(raw)
    assert dict(p.stages[0].tmpcs) == {1: "vanilla", 2: "activation recomp"}


@pytest.mark.parametrize("raw, message", [
    ({}, "stages"),
    ({"stages": {}}, "list"),
    ({"stages": [{"nodes": [1]}]}, "missing key"),
    ({"stages": [{"nodes": [1], "dataParallelDegree": "x", "tensorParallelDegree": 1, "TMPCids": {}}]}, "integer"),
    ({"stages": [{"nodes": [1], "dataParallelDegree": 1, "tensorParallelDegree": 1, "TMPCids": [[1]]}]}, "pair"),
    ({"stages": [{"nodes": [1], "dataParallelDegree": 1, "tensorParallelDegree": 1,
                  "TMPCids": [[1, "a"], [1, "b"]]}]}, "twice"),
])
def test_malformed_plans_raise_plan_format_error(raw, message):
    with pytest.raises(PlanFormatError, match=message):
        plan_from_dict(raw)
