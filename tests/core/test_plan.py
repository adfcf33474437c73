"""Plan JSON in and out (both TMPCids forms) and the readable table."""

import json

import pytest

from piper import PlanFormatError, evaluate, load_plan, plan_from_dict, render_plan
from tests.helpers import plan, problem, tmpc


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


def test_render_shows_ranges_degrees_tps_and_memory():
    nodes = {v: {1: [tmpc(p=1.0, a=2.0 ** 30)]} for v in range(5)}
    prob = problem(nodes, [(v, v + 1, 0.0) for v in range(4)], M=2.0 ** 33)
    p = plan(([0, 1, 2], 1, 1, "vanilla"), ([3, 4], 1, 1, "vanilla"))
    text = render_plan(prob, p, evaluate(prob, p))
    assert "0-2" in text and "3-4" in text and "3x vanilla" in text
    # stage 1: y = ceil(2/1) = 2, 3 layers x 1 GiB x 2
    assert "6.00 GiB / 8.00 GiB" in text and "TPS 3" in text and "bottleneck stage 1" in text
