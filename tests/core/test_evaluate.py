"""The evaluator on hand-computed examples, one term at a time (clusters of nodes included:
docs/problem.md §2), and every structural rule."""

import json
import math

import pytest

from piper import PlanError, evaluate, problem_from_dict
from tests.evaluator_cases import (
    CLUSTER_KEYS,
    FITS,
    SPANS,
    cluster_chain,
    with_sharded_state,
)
from tests.helpers import plan, problem, tmpc, workload


def chain3(**kw):
    """0 -> 1 -> 2, one TMPC each at t = 1, compute 1, 2, 4."""
    nodes = {0: {1: [tmpc(p=1.0)]}, 1: {1: [tmpc(p=2.0)]}, 2: {1: [tmpc(p=4.0)]}}
    return problem(nodes, [(0, 1, 0.0), (1, 2, 0.0)], **kw)


def test_single_stage_is_sum_of_compute():
    s = evaluate(chain3(), plan(([0, 1, 2], 1, 1, "vanilla")))
    assert s.tps == 7.0 and not s.oom
    assert s.stages[0].compute == 7.0 and s.stages[0].edge == 0.0 and s.stages[0].resync == 0.0


def test_compute_is_divided_by_d():
    s = evaluate(chain3(), plan(([0, 1, 2], 4, 1, "vanilla")))
    assert s.stages[0].compute == pytest.approx(7.0 / 4)


def test_cut_edge_charged_twice_to_both_stages_with_their_own_sync_maps():
    # edge 0->1 carries c = 10 bytes; node 0's TMPC adds sbw = 5 on it, node 1's adds sfw = 3
    nodes = {
        0: {1: [tmpc(p=0.0, bw={"1": 5.0})]},
        1: {1: [tmpc(p=0.0, fw={"0": 3.0})]},
    }
    prob = problem(nodes, [(0, 1, 10.0)], B=2.0)
    s = evaluate(prob, plan(([0], 1, 1, "vanilla"), ([1], 1, 1, "vanilla")))
    # stage 1: 2 * (10 + 5) / B = 15; stage 2: 2 * (10 + 3) / B = 13
    assert s.stages[0].edge == 15.0 and s.stages[1].edge == 13.0
    assert s.tps == 15.0
    # edges inside a stage cost nothing
    assert evaluate(prob, plan(([0, 1], 1, 1, "vanilla"))).tps == 0.0


def test_edge_bytes_divided_by_d():
    nodes = {0: {1: [tmpc(p=0.0)]}, 1: {1: [tmpc(p=0.0)]}}
    prob = problem(nodes, [(0, 1, 8.0)], B=1.0, N=8)
    s = evaluate(prob, plan(([0], 2, 1, "vanilla"), ([1], 4, 1, "vanilla")))
    assert s.stages[0].edge == 2 * 8.0 / 2 and s.stages[1].edge == 2 * 8.0 / 4


def test_resync_is_4_d_minus_1_w_over_d_n():
    nodes = {0: {1: [tmpc(p=0.0, w=8.0)]}, 1: {1: [tmpc(p=0.0, w=16.0)]}}
    prob = problem(nodes, [(0, 1, 0.0)], N=4, B=2.0)
    s = evaluate(prob, plan(([0, 1], 2, 1, "vanilla")))
    # 4 * (2-1) * (8 + 16) / (2 * 4) = 12 bytes, / B = 6
    assert s.stages[0].resync == 6.0 and s.tps == 6.0
    assert evaluate(prob, plan(([0, 1], 1, 1, "vanilla"))).stages[0].resync == 0.0


def test_y_is_ceil_of_suffix_sum_over_d_and_memory_is_a_y_plus_b():
    nodes = {v: {1: [tmpc(p=1.0, a=10.0, b=1.0)]} for v in range(3)}
    prob = problem(nodes, [(0, 1, 0.0), (1, 2, 0.0)], N=4, k=8)
    s = evaluate(prob, plan(([0], 2, 1, "vanilla"), ([1], 1, 1, "vanilla"), ([2], 1, 1, "vanilla")))
    # suffix sums 4, 2, 1 -> y = ceil(4/2) = 2, ceil(2/1) = 2, 1
    assert [st.y for st in s.stages] == [2, 2, 1]
    assert [st.memory for st in s.stages] == [21.0, 21.0, 11.0]
    s = evaluate(prob, plan(([0], 1, 1, "vanilla"), ([1], 2, 1, "vanilla"), ([2], 1, 1, "vanilla")))
    assert [st.y for st in s.stages] == [4, 2, 1]  # ceil(3/2) = 2


def test_memory_limit_equality_fits_and_above_is_oom():
    nodes = {0: {1: [tmpc(p=1.0, a=3.0, b=4.0)]}}
    fits = evaluate(problem(nodes, [], M=7.0), plan(([0], 1, 1, "vanilla")))
    assert not fits.oom and fits.tps == 1.0
    oom = evaluate(problem(nodes, [], M=6.999), plan(([0], 1, 1, "vanilla")))
    assert oom.oom and math.isinf(oom.tps) and oom.stages[0].oom
    assert oom.to_dict()["tps"] is None and oom.to_dict()["oom"] is True


def test_tps_is_max_over_stages_and_tmpc_choice_matters():
    nodes = {0: {1: [tmpc(p=3.0)]}, 1: {1: [tmpc(p=5.0), tmpc("activation recomp", p=9.0)]}}
    prob = problem(nodes, [(0, 1, 0.0)])
    s = evaluate(prob, plan(([0], 1, 1, "vanilla"), ([1], 1, 1, "activation recomp")))
    assert s.tps == 9.0 and s.bottleneck == 1


def test_tensor_parallel_tmpc_is_read_at_stage_t():
    nodes = {0: {1: [tmpc(p=8.0)], 2: [tmpc(p=5.0)]}}
    prob = problem(nodes, [])
    assert evaluate(prob, plan(([0], 1, 2, "vanilla"))).tps == 5.0
    assert evaluate(prob, plan(([0], 4, 2, "vanilla"))).devices_used == 8


# ---- structural rules -----------------------------------------------------------------

@pytest.mark.parametrize(
    "stages, rule",
    [
        ((), "rule 1"),
        ((([0, 1], 1, 1, "vanilla"),), "rule 1"),  # node 2 missing
        ((([0, 1, 2], 1, 1, "vanilla"), ([2], 1, 1, "vanilla")), "rule 1"),  # twice
        ((([0, 1, 2, 7], 1, 1, "vanilla"),), "rule 1"),  # unknown node
        ((([], 1, 1, "vanilla"), ([0, 1, 2], 1, 1, "vanilla")), "rule 1"),  # empty stage
        ((([1, 2], 1, 1, "vanilla"), ([0], 1, 1, "vanilla")), "rule 2"),  # edge 0->1 backwards
        ((([0, 1, 2], 0, 1, "vanilla"),), "rule 3"),  # d < 1
        ((([0, 1, 2], 3, 1, "vanilla"),), "rule 3"),  # 3 does not divide N = 8
        ((([0, 1, 2], 1, 0, "vanilla"),), "rule 3"),  # t < 1
        ((([0, 1, 2], 1, 2, "vanilla"),), "rule 3"),  # no TMPCs at t = 2
        ((([0, 1, 2], 1, 1, "nope"),), "rule 3"),  # unknown TMPC id
        ((([0, 1, 2], 1, 1, {0: "vanilla", 1: "vanilla"}),), "rule 3"),  # node 2 has no TMPC
        ((([0, 1], 1, 1, {0: "vanilla", 1: "vanilla", 2: "vanilla"}), ([2], 1, 1, "vanilla")), "rule 3"),
        ((([0], 4, 1, "vanilla"), ([1, 2], 8, 1, "vanilla")), "rule 4"),  # sum d = 12 > N = 8
    ],
)
def test_structural_rules_raise_plan_error_naming_the_rule(stages, rule):
    prob = chain3(k=100, N=8)
    with pytest.raises(PlanError, match=rule):
        evaluate(prob, plan(*stages))


def test_rule4_devices():
    with pytest.raises(PlanError, match="rule 4.*devices"):
        evaluate(chain3(k=3, N=8), plan(([0], 2, 1, "vanilla"), ([1, 2], 2, 1, "vanilla")))


# ---- what mutation testing showed missing: messages name the right stage and node, ------
# ---- every Score / StageScore field, the JSON form ------------------------------------------

@pytest.mark.parametrize(
    "stages, message",
    [
        ((), r"^rule 1 \(every node in exactly one stage\): the plan has no stages$"),
        ((([0, 1, 2], 1, 1, "vanilla"), ([], 1, 1, "vanilla")), r"rule 1 \(no empty stage\): stage 2 has no nodes$"),
        ((([0, 1, 2, 7], 1, 1, "vanilla"),), r"^rule 1: stage 1 names node 7, which is not in the graph$"),
        ((([0], 1, 1, "vanilla"), ([1, 2, 9], 1, 1, "vanilla")), r"^rule 1: stage 2 names node 9,"),
        ((([0, 1, 2, 2], 1, 1, "vanilla"),), r"node 2 appears twice$"),
        ((([0, 1], 1, 1, "vanilla"), ([1, 2], 1, 1, "vanilla")), r"node 1 appears in stages 1 and 2$"),
        ((([0], 1, 1, "vanilla"), ([1], 1, 1, "vanilla"), ([2, 0], 1, 1, "vanilla")),
         r"node 0 appears in stages 1 and 3$"),
        ((([0], 1, 1, "vanilla"), ([2], 1, 1, "vanilla"), ([1], 1, 1, "vanilla")),
         r"^rule 2 \(stages in pipeline order\): edge 1->2 goes from stage 3 back to stage 2$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 0, 1, "vanilla")), r"^rule 3: stage 2 has data-parallel degree d=0 < 1$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 3, 1, "vanilla")), r"^rule 3: stage 2 has d=3, which does not divide N=8$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 1, 0, "vanilla")), r"^rule 3: stage 2 has tensor-parallel degree t=0 < 1$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 1, 1, {1: "vanilla", 2: "vanilla", 0: "vanilla"})),
         r"^rule 3: stage 2 names TMPCs for node\(s\) \[0\] that are not in the stage$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 1, 1, {1: "vanilla"})), r"^rule 3: stage 2 names no TMPC for node 2$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 1, 2, "vanilla")),
         r"^rule 3: node 1 in stage 2 has no TMPCs at degree t=2 \(has \[1\]\)$"),
        ((([0], 1, 1, "vanilla"), ([1, 2], 1, 1, {1: "vanilla", 2: "nope"})),
         r"^rule 3: node 2 in stage 2 has no TMPC 'nope' at t=1 \(has \['vanilla'\]\)$"),
        ((([0], 4, 1, "vanilla"), ([1, 2], 8, 1, "vanilla")), r"^rule 4: the plan's sum of d = 12 exceeds N=8 microbatches$"),
    ],
)
def test_plan_errors_name_the_stage_and_node(stages, message):
    with pytest.raises(PlanError, match=message):
        evaluate(chain3(k=100, N=8), plan(*stages))


def test_rule4_devices_message():
    with pytest.raises(PlanError, match=r"^rule 4: the plan uses sum d\*t = 4 devices, more than k=3$"):
        evaluate(chain3(k=3, N=8), plan(([0], 2, 1, "vanilla"), ([1, 2], 2, 1, "vanilla")))


def test_missing_nodes_message_lists_the_first_ten():
    nodes = {v: {1: [tmpc(p=1.0)]} for v in range(13)}
    prob = problem(nodes, [(v, v + 1, 0.0) for v in range(12)])
    with pytest.raises(PlanError, match=r"node\(s\) \[1, 2, 3, 4, 5, 6, 7, 8, 9, 10\] are in no stage$"):
        evaluate(prob, plan(([0], 1, 1, "vanilla")))


def two_stage():
    """0 -> 1, edge c = 1 byte, B = 1, N = 4, k = 8: node 0 at t = 1 (p = 4, w = 2, a = 1,
    b = 3), node 1 at t = 2 (p = 6, a = 2, b = 1)."""
    nodes = {0: {1: [tmpc(p=4.0, w=2.0, a=1.0, b=3.0)]}, 1: {2: [tmpc(p=6.0, a=2.0, b=1.0)]}}
    return problem(nodes, [(0, 1, 1.0)], k=8, N=4, B=1.0, M=100.0)


def test_every_stage_score_field_by_hand():
    s = evaluate(two_stage(), plan(([0], 2, 1, "vanilla"), ([1], 1, 2, "vanilla")))
    a, b = s.stages
    # stage 1: d = 2, t = 1; y = ceil(3 / 2) = 2; compute 4 / 2; edge 2 * 1 / 2 / B = 1;
    # resync 4 * (2 - 1) * 2 / (2 * 4) = 1; memory 1 * 2 + 3 = 5; tau = 4 + 2 = 6
    assert (a.d, a.t, a.y, a.compute, a.edge, a.resync, a.memory, a.tps, a.tau) == (2, 1, 2, 2.0, 1.0, 1.0, 5.0, 4.0, 6.0)
    # stage 2: d = 1, t = 2; y = 1; compute 6; edge 2; memory 2 + 1 = 3; tau = 6 + 2 = 8
    assert (b.d, b.t, b.y, b.compute, b.edge, b.resync, b.memory, b.tps, b.tau) == (1, 2, 1, 6.0, 2.0, 0.0, 3.0, 8.0, 8.0)
    assert not a.oom and not b.oom and a.fits_in_node and b.fits_in_node
    assert (a.edge_bandwidth, a.resync_bandwidth) == (1.0, 1.0)
    assert (s.tps, s.devices_used, s.sum_d, s.oom, s.fits_in_node) == (8.0, 4, 3, False, True)
    assert s.batch_time == 4 * 8.0 + 6.0 + 8.0 - 8.0
    assert s.bottleneck == 1 and s.throughput == 1 / 8.0


def test_score_to_dict_by_hand():
    s = evaluate(two_stage(), plan(([0], 2, 1, "vanilla"), ([1], 1, 2, "vanilla")))
    assert s.to_dict() == {
        "tps": 8.0, "oom": False, "batch_time": 38.0, "fits_in_node": True, "devices_used": 4, "sum_d": 3,
        "stages": [
            {"tps": 4.0, "memory": 5.0, "y": 2, "compute": 2.0, "edge": 1.0, "resync": 1.0, "oom": False, "d": 2,
             "t": 1, "fits_in_node": True, "edge_bandwidth": 1.0, "resync_bandwidth": 1.0, "tau": 6.0},
            {"tps": 8.0, "memory": 3.0, "y": 1, "compute": 6.0, "edge": 2.0, "resync": 0.0, "oom": False, "d": 1,
             "t": 2, "fits_in_node": True, "edge_bandwidth": 1.0, "resync_bandwidth": 1.0, "tau": 8.0},
        ],
    }


def test_oom_score_fields():
    s = evaluate(two_stage().with_cluster(memory=4.0), plan(([0], 2, 1, "vanilla"), ([1], 1, 2, "vanilla")))
    assert s.oom and [st.oom for st in s.stages] == [True, False]  # 5 > 4 >= 3
    assert math.isinf(s.tps) and math.isinf(s.batch_time) and s.throughput == 0.0 and s.bottleneck == 0
    d = s.to_dict()
    assert d["tps"] is None and d["batch_time"] is None and d["stages"][0]["tps"] == 4.0


# ---- nodes of devices, intra-node bandwidth, all-reduce factor, sharded state (docs/problem.md §2) --

def test_plan_spanning_nodes_by_hand():
    p = problem_from_dict(with_sharded_state(cluster_chain(**CLUSTER_KEYS)))
    s = evaluate(p, SPANS)
    assert not s.fits_in_node and not s.oom
    s1, s2, s3 = s.stages
    # stage 1: d = 2, y = ceil(4 / 2) = 2; fits in a node (2 * 1 <= 4): resync at B_in = 10,
    # edges at B = 2 (the plan spans nodes)
    assert (s1.y, s1.fits_in_node, s1.edge_bandwidth, s1.resync_bandwidth) == (2, True, 2.0, 10.0)
    assert s1.memory == 1 * 2 + 2 + 16 / 2                       # a y + b + s / d = 12
    x1, r1 = 2 * (3 + 1), 2 * (2 - 1) * 8 / (2 * 4)              # X = 8, R = f (d-1) w / (d N) = 2
    assert s1.edge == x1 / (2 * 2) and s1.resync == r1 / 10 and s1.compute == 4 / 2
    assert s1.tps == pytest.approx(8 / 4 + 2 / 10 + 4 / 2)      # 4.2
    assert s1.tau == 4 + 8 / 2                                   # P + X / B_edge = 8
    # stage 2: d = 1, y = 2; in-edge 2 (3 + 2), out-edge 2 (5 + 0): X = 20; R = 0
    assert s2.memory == 2 * 2 + 1 + 8 / 1 and s2.tps == 20 / 2 + 0 + 6 == 16.0 and s2.tau == 6 + 20 / 2
    # stage 3: d = 1, t = 2, y = 1; 2 * 1 <= 4 fits; X = 2 (5 + 1) = 12
    assert s3.memory == 1 + 0 + 4 and s3.tps == 12 / 2 + 3 == 9.0 and s3.tau == 3 + 12 / 2
    assert s.tps == 16.0
    # batch time: N TPS + sum tau - max tau = 4 * 16 + (8 + 16 + 9) - 16 = 81
    assert s.batch_time == 81.0


def test_plan_inside_one_node_by_hand():
    p = problem_from_dict(with_sharded_state(cluster_chain(**CLUSTER_KEYS)))
    s = evaluate(p, FITS)
    assert s.fits_in_node and s.devices_used == 4
    s1, s2 = s.stages
    # stage 1: {0, 1}, d = 2, y = ceil(3 / 2) = 2; edges and resync both at B_in = 10
    assert (s1.edge_bandwidth, s1.resync_bandwidth, s1.fits_in_node) == (10.0, 10.0, True)
    assert s1.memory == (1 * 2 + 2 + 16 / 2) + (2 * 2 + 1 + 8 / 2)  # 21
    x1, r1 = 2 * (5 + 0), 2 * (2 - 1) * (8 + 4) / (2 * 4)           # X = 10, R = 3
    assert s1.tps == pytest.approx(x1 / (2 * 10) + r1 / 10 + 10 / 2)  # 5.8
    assert s1.tau == 10 + 10 / 10
    assert s2.tps == pytest.approx(12 / 10 + 3) and s2.tau == pytest.approx(3 + 12 / 10)
    assert s.tps == pytest.approx(5.8)
    assert s.batch_time == pytest.approx(4 * 5.8 + (11 + 4.2) - 11)  # 27.4


def test_stage_fits_but_plan_spans_and_stage_spans():
    p = problem_from_dict(with_sharded_state(cluster_chain(**CLUSTER_KEYS))).with_cluster(devices_per_node=2)
    s = evaluate(p, FITS)  # 4 devices > G = 2; each stage has 2 <= 2 devices
    assert not s.fits_in_node and [st.fits_in_node for st in s.stages] == [True, True]
    assert s.stages[0].tps == pytest.approx(10 / (2 * 2) + 3 / 10 + 5)  # 7.8: edges at B, resync at B_in
    assert s.stages[1].tps == 12 / 2 + 3 == s.tps == 9.0
    assert s.batch_time == 4 * 9 + (10 + 10 / 2) + (3 + 12 / 2) - 15  # 45
    q = p.with_cluster(devices_per_node=1)  # every stage spans nodes: all at B = 2
    s = evaluate(q, FITS)
    assert [st.fits_in_node for st in s.stages] == [False, False]
    assert [st.resync_bandwidth for st in s.stages] == [2.0, 2.0]
    assert s.stages[0].tps == (10 / 2 + 3) / 2 + 10 / 2 == 9.0


def test_allreduce_factor_scales_the_resync_only():
    nodes = {0: {1: [tmpc(p=0.0, w=8.0)]}, 1: {1: [tmpc(p=0.0, w=16.0)]}}
    raw = workload(nodes, [(0, 1, 0.0)], N=4, B=2.0)
    one = plan(([0, 1], 2, 1, "vanilla"))
    for f in (1, 2, 4, 6.5):
        p = problem_from_dict({**raw, "allReduceFactor": f})
        # f (2 - 1) (8 + 16) / (2 * 4) = 3 f bytes, / B
        assert evaluate(p, one).stages[0].resync == 3 * f / 2.0
    assert evaluate(problem_from_dict(raw), one).stages[0].resync == 6.0


def test_sharded_state_is_split_over_d_replicas():
    nodes = {0: {1: [{**tmpc(p=1.0, a=1.0, b=2.0), "memoryUsageShardedB": 24.0}]}}
    raw = workload(nodes, [], N=8, k=8, M=100.0)
    p = problem_from_dict(raw)
    for d in (1, 2, 4, 8):
        # a y + b + s / d with y = 1
        assert evaluate(p, plan(([0], d, 1, "vanilla"))).stages[0].memory == 1 + 2 + 24 / d
    # the memory limit sees s / d: 27 bytes at d = 1 are OOM under M = 10, 6 at d = 8 fit
    tight = problem_from_dict({**raw, "maxMemoryPerDevice": 10.0})
    assert evaluate(tight, plan(([0], 1, 1, "vanilla"))).oom
    assert not evaluate(tight, plan(([0], 8, 1, "vanilla"))).oom


def test_intra_node_bandwidth_is_used_by_a_one_node_cluster():
    # G not given: one node of k devices, so every plan fits: edges and resync at B_in
    nodes = {0: {1: [tmpc(p=2.0, w=4.0, bw={"1": 0.0})]}, 1: {1: [tmpc(p=2.0, w=4.0, fw={"0": 0.0})]}}
    raw = workload(nodes, [(0, 1, 6.0)], N=4, B=1.0)
    p = problem_from_dict({**raw, "intraNodeBandwidth": 4.0})
    s = evaluate(p, plan(([0], 2, 1, "vanilla"), ([1], 1, 1, "vanilla")))
    # stage 1: X = 12, R = 4 (1) 4 / (2 * 4) = 2: (12 / 2 + 2) / 4 + 2 / 2 = 3
    assert s.stages[0].tps == 3.0 and s.stages[0].edge_bandwidth == 4.0 == s.stages[0].resync_bandwidth
    assert s.stages[1].tps == 12 / 4 + 2 == 5.0 and s.tps == 5.0


def test_batch_time_of_equal_stages_is_the_1f1b_formula():
    # L = 3 equal stages with one d: batch time = (N / d + L - 1) tau
    nodes = {v: {1: [tmpc(p=6.0)]} for v in range(3)}
    prob = problem_from_dict(workload(nodes, [(0, 1, 0.0), (1, 2, 0.0)], N=8, k=8))
    s = evaluate(prob, plan(([0], 2, 1, "vanilla"), ([1], 2, 1, "vanilla"), ([2], 2, 1, "vanilla")))
    assert s.tps == 3.0 and all(st.tau == 6.0 for st in s.stages)
    assert s.batch_time == (8 / 2 + 3 - 1) * 6.0


def test_batch_time_is_inf_and_null_when_oom():
    nodes = {0: {1: [tmpc(p=1.0, a=3.0, b=4.0)]}}
    oom = evaluate(problem_from_dict(workload(nodes, [], M=6.0)), plan(([0], 1, 1, "vanilla")))
    assert oom.oom and math.isinf(oom.batch_time)
    d = oom.to_dict()
    assert d["batch_time"] is None and d["tps"] is None


def test_to_dict_carries_the_new_fields():
    p = problem_from_dict(with_sharded_state(cluster_chain(**CLUSTER_KEYS)))
    d = evaluate(p, SPANS).to_dict()
    assert d["batch_time"] == 81.0 and d["fits_in_node"] is False
    st = d["stages"][0]
    assert (st["fits_in_node"], st["edge_bandwidth"], st["resync_bandwidth"], st["tau"]) == (True, 2.0, 10.0, 8.0)
    json.dumps(d)
