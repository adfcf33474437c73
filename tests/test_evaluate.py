"""The evaluator on hand-computed examples, one term at a time, and every structural rule."""

import math

import pytest

from piper import PlanError, evaluate

from .helpers import plan, problem, tmpc


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
