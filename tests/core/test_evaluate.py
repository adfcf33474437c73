"""The evaluator on hand-computed examples, one term at a time, and every structural rule."""

import math

import pytest

from piper import PlanError, evaluate
from tests.helpers import plan, problem, tmpc


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
