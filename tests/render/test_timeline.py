"""The schedule's timeline (piper/render/timeline.py): the simulation against the closed
formulas of docs/problem.md §2.4 and §9 for equal stages, its own invariants (no two passes at
once on a replica, every dependency respected), and the picture's panel."""

from __future__ import annotations

import itertools

import pytest

from piper import evaluate, plan_from_dict, problem_from_dict
from piper.core.pass_order import activation_peaks, schedule_order_memory
from piper.render.picture import draw_plan
from piper.render.timeline import simulate_schedule, steady_state_cut


def chain(n: int, k: int, N: int, p=lambda i: 1.0, a=lambda i: 0.0, memory: float = 1.0):
    def tmpc(i: int) -> dict:
        return {"id": "a", "timePerSample": p(i), "parameterSize": 0, "memoryUsageA": a(i), "memoryUsageB": 0,
                "syncTimeFw": {str(i - 1): 0} if i else {}, "syncTimeBw": {str(i + 1): 0} if i < n - 1 else {}}

    return problem_from_dict({"maxDevices": k, "maxMemoryPerDevice": memory, "bandwidth": 1, "mbsInBatch": N,
                              "nodes": [{"id": i, "TMPCs": {"1": [tmpc(i)]}} for i in range(n)],
                              "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0} for i in range(n - 1)]})


def stage(nodes, d: int = 1) -> dict:
    return {"nodes": list(nodes), "dataParallelDegree": d, "tensorParallelDegree": 1,
            "TMPCids": {str(v): "a" for v in nodes}}


@pytest.mark.parametrize("L, N", [(1, 3), (2, 4), (3, 9), (4, 4), (4, 8), (8, 16)])
def test_equal_1f1b_stages_take_m_plus_l_minus_1_taus(L: int, N: int) -> None:
    problem = chain(L, L, N)
    plan = plan_from_dict({"stages": [stage([i]) for i in range(L)]})
    timeline = simulate_schedule(problem, plan, evaluate(problem, plan))
    assert timeline.makespan == pytest.approx((N + L - 1) * 1.0)
    assert timeline.makespan == pytest.approx(evaluate(problem, plan).batch_time)


@pytest.mark.parametrize("L, v, m", [(2, 2, 2), (2, 2, 4), (4, 2, 8), (4, 4, 8), (2, 3, 6), (3, 2, 3)])
def test_equal_interleaved_groups_take_the_interleaved_bubble(L: int, v: int, m: int) -> None:
    """(m + (L - 1) / v) tau_g with tau_g = v chunks of 1."""
    problem = chain(L * v, L, m)
    plan = plan_from_dict({"stages": [stage([i]) for i in range(L * v)],
                           "schedule": {"kind": "interleaved", "virtualStages": v}})
    timeline = simulate_schedule(problem, plan, evaluate(problem, plan))
    assert timeline.makespan == pytest.approx((m + (L - 1) / v) * v)
    assert timeline.makespan == pytest.approx(evaluate(problem, plan).batch_time)


def test_data_parallel_replicas_share_the_micro_batches() -> None:
    problem = chain(2, 4, 8)
    plan = plan_from_dict({"stages": [stage([0], 2), stage([1], 2)]})
    timeline = simulate_schedule(problem, plan, evaluate(problem, plan))
    assert timeline.microbatches == (4, 4)
    assert {p.microbatch for p in timeline.passes} == {0, 2, 4, 6}  # replica 0's
    assert timeline.makespan == pytest.approx(5.0)  # m = 4 per replica: (4 + 2 - 1) tau


@pytest.mark.parametrize("interleaved", [False, True])
def test_passes_never_overlap_on_a_replica_and_respect_their_dependencies(interleaved: bool) -> None:
    times = [1.0, 2.5, 0.5, 1.5, 3.0, 1.0, 2.0, 0.75]
    problem = chain(8, 4, 8, p=lambda i: times[i])
    if interleaved:
        plan = plan_from_dict({"stages": [stage([i]) for i in range(8)],
                               "schedule": {"kind": "interleaved", "virtualStages": 2}})
    else:
        plan = plan_from_dict({"stages": [stage([0, 1]), stage([2, 3]), stage([4, 5]), stage([6, 7])]})
    timeline = simulate_schedule(problem, plan, evaluate(problem, plan))
    for g in range(4):
        mine = sorted((p for p in timeline.passes if p.group == g), key=lambda p: p.start)
        for a, b in itertools.pairwise(mine):
            assert a.end <= b.start + 1e-12
    by_key = {(p.kind, p.chunk, p.microbatch): p for p in timeline.passes}
    chunks = len(plan.stages)
    for (kind, j, k), p in by_key.items():
        if kind == "F" and ("F", j - 1, k) in by_key:
            assert by_key["F", j - 1, k].end <= p.start + 1e-12
        if kind == "B":
            assert by_key["F", j, k].end <= p.start + 1e-12
            if ("B", j + 1, k) in by_key:
                assert by_key["B", j + 1, k].end <= p.start + 1e-12
    assert max(p.end for p in timeline.passes) == pytest.approx(timeline.makespan)
    assert chunks == (8 if interleaved else 4)


def test_a_long_steady_state_is_cut_and_the_picture_has_a_timeline(tmp_path) -> None:
    problem = chain(4, 4, 200)
    plan = plan_from_dict({"stages": [stage([i]) for i in range(4)]})
    score = evaluate(problem, plan)
    timeline = simulate_schedule(problem, plan, score)
    cut = steady_state_cut(timeline)
    assert cut is not None and cut.elided == 200 - 2 * 5
    assert cut.x(cut.start) == cut.start and cut.x(cut.end) == pytest.approx(cut.start + cut.gap)
    picture = draw_plan(problem, plan, tmp_path / "p.png", score=score)
    assert picture.timeline and picture.timeline_cut
    few = chain(4, 4, 6)  # 6 micro-batches: every one is drawn
    short = draw_plan(few, plan, tmp_path / "q.png")
    assert short.timeline and not short.timeline_cut


@pytest.mark.parametrize("L, v, m", [(2, 1, 4), (4, 1, 8), (2, 2, 2), (2, 2, 4), (4, 2, 8), (4, 4, 8), (2, 3, 6),
                                     (4, 2, 16)])
def test_activation_peaks_of_equal_chunks_are_the_evaluators(L: int, v: int, m: int) -> None:
    """Equal chunks: replica 0's most activations held at once, played out in the schedule's order,
    is y_g x the group's activations (docs/problem.md §2, §9.2), an independent check of y_g."""
    problem = chain(L * v, L, m, a=lambda i: 3.0, memory=1e9)
    body = {"stages": [stage([i]) for i in range(L * v)]}
    if v > 1:
        body["schedule"] = {"kind": "interleaved", "virtualStages": v}
    plan = plan_from_dict(body)
    score = evaluate(problem, plan)
    assert activation_peaks(problem, plan, score) == pytest.approx([st.y * 3.0 * v for st in score.stages])


def test_activation_peaks_of_unequal_chunks_by_hand() -> None:
    """L = 2, v = 2, m = 4, group 0 holds chunks 0 (a = 2) and 2 (a = 1). Its order (Megatron-LM's
    interleaved 1F1B: 4 warm-up forwards) is F0c0 F1c0 F0c1 F1c1 | F2c0 B0c1 F3c0 B1c1 F2c1 B0c0
    F3c1 B1c0 | B2c1 B3c1 B2c0 B3c0: after F3c0 it holds micro-batches 0-3 of chunk 0 and 3 of chunk
    2: 4 x 2 + 1 x 1 = 9. The evaluator's y_0 = min(4, (2 + 2 + 1) / 2) = 2.5 charges 2.5 x 3 = 7.5:
    with unequal chunks the schedule can hold more than the spec's formula (the docstring's caveat)."""
    weights = {0: 2.0, 1: 1.0, 2: 1.0, 3: 1.0}
    problem = chain(4, 2, 4, a=lambda i: weights[i], memory=1e9)
    plan = plan_from_dict({"stages": [stage([i]) for i in range(4)],
                           "schedule": {"kind": "interleaved", "virtualStages": 2}})
    score = evaluate(problem, plan)
    peaks = activation_peaks(problem, plan, score)
    assert peaks[0] == pytest.approx(9.0)
    assert score.stages[0].y * 3.0 == pytest.approx(7.5) == pytest.approx(score.stages[0].memory)
    assert schedule_order_memory(problem, plan, score)[0] == pytest.approx(9.0)
    # group 1 (chunks 1 and 3, equal): y_1 = min(4, (0 + 2 + 1) / 2) = 1.5, 1.5 x 2 = 3
    assert peaks[1] == pytest.approx(3.0) == pytest.approx(score.stages[1].y * 2.0)


@pytest.mark.parametrize("seed", range(6))
def test_replica_zero_alone_plays_out_as_every_replica(seed: int) -> None:
    """One d in every stage, N a multiple of d: the simulation plays replica 0 only; playing every
    replica gives the same makespan and the same passes of replica 0 (random unequal chunks, 1F1B
    and interleaved)."""
    import random

    rng = random.Random(seed)
    d = rng.choice((2, 3, 4))
    L, v = rng.choice((2, 3)), rng.choice((1, 2, 3))
    m = L * rng.choice((1, 2, 3))
    sizes = [rng.choice((1, 2)) for _ in range(L * v)]
    n = sum(sizes)
    times = [rng.choice((0.5, 1.0, 2.0)) for _ in range(n)]
    problem = chain(n, L * d, m * d, p=lambda i: times[i], memory=1e9)
    stages, start = [], 0
    for size in sizes:
        stages.append(stage(range(start, start + size), d))
        start += size
    body = {"stages": stages}
    if v > 1:
        body["schedule"] = {"kind": "interleaved", "virtualStages": v}
    plan = plan_from_dict(body)
    score = evaluate(problem, plan)
    one, every = simulate_schedule(problem, plan, score), simulate_schedule(problem, plan, score, all_replicas=True)
    assert one.makespan == pytest.approx(every.makespan, rel=1e-12)
    assert one.passes == every.passes
