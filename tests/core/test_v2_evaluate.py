"""The version-2 evaluator (docs/problem.md §2): hand-computed numbers for
each new formula, and defaults that give exactly (``==``) the version-1 numbers."""

import json
import math
import random
import re
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper import (
    Plan,
    Problem,
    Stage,
    evaluate,
    load_plan,
    load_problem,
    problem_from_dict,
    problem_to_dict,
    render_plan,
)
from tests.helpers import plan, tmpc, workload
from tests.reference import plan_of, problem_of, rows

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "experiments" / "workloads"
PLANS = ROOT / "experiments" / "plans"


def chain(**top):
    """0 -> 1 -> 2 (k = 8, N = 4, B = 2); node 2 also has a t = 2 TMPC.

    edge 0->1: c = 3, node 0 adds sbw = 1, node 1 adds sfw = 2
    edge 1->2: c = 5, node 1 adds sbw = 0, node 2 adds sfw = 0 at t = 1 and 1 at t = 2
    """
    nodes = {
        0: {1: [tmpc(p=4.0, w=8.0, a=1.0, b=2.0, bw={"1": 1.0})]},
        1: {1: [tmpc(p=6.0, w=4.0, a=2.0, b=1.0, fw={"0": 2.0}, bw={"2": 0.0})]},
        2: {1: [tmpc(p=5.0, w=2.0, a=1.0, b=0.0, fw={"1": 0.0})],
            2: [tmpc(p=3.0, w=2.0, a=1.0, b=0.0, fw={"1": 1.0})]},
    }
    raw = workload(nodes, [(0, 1, 3.0), (1, 2, 5.0)], k=8, N=4, B=2.0)
    raw.update(top)
    return raw


def sharded(raw, s0=16.0, s1=8.0, s2=4.0):
    raw["nodes"][0]["TMPCs"]["1"][0]["memoryUsageShardedB"] = s0
    raw["nodes"][1]["TMPCs"]["1"][0]["memoryUsageShardedB"] = s1
    raw["nodes"][2]["TMPCs"]["2"][0]["memoryUsageShardedB"] = s2
    return raw


V2 = dict(devicesPerNode=4, intraNodeBandwidth=10.0, allReduceFactor=2)

# three stages, 2 + 1 + 2 = 5 devices > G = 4: the plan spans nodes
SPANS = plan(([0], 2, 1, "vanilla"), ([1], 1, 1, "vanilla"), ([2], 1, 2, "vanilla"))
# two stages, 2 + 2 = 4 devices <= G = 4: the plan fits in one node
FITS = plan(([0, 1], 2, 1, "vanilla"), ([2], 1, 2, "vanilla"))


def test_plan_spanning_nodes_by_hand():
    p = problem_from_dict(sharded(chain(**V2)))
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
    p = problem_from_dict(sharded(chain(**V2)))
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
    p = problem_from_dict(sharded(chain(**V2))).with_cluster(devices_per_node=2)
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
    p = problem_from_dict(sharded(chain(**V2)))
    d = evaluate(p, SPANS).to_dict()
    assert d["batch_time"] == 81.0 and d["fits_in_node"] is False
    st = d["stages"][0]
    assert (st["fits_in_node"], st["edge_bandwidth"], st["resync_bandwidth"], st["tau"]) == (True, 2.0, 10.0, 8.0)
    json.dumps(d)


def test_render_plan_shows_node_column_and_batch_time():
    p = problem_from_dict(sharded(chain(**V2))).with_cluster(devices_per_node=1)
    text = render_plan(p, FITS, evaluate(p, FITS))
    header, _, row1, row2, footer = text.splitlines()
    assert "node" in header.split()
    assert " spans " in row1 and " spans " in row2
    assert "batch time 45" in footer
    q = p.with_cluster(devices_per_node=4)
    text = render_plan(q, FITS, evaluate(q, FITS))
    assert re.search(r"\s+in\s+", text.splitlines()[2]) and "fits in one node" in text.splitlines()[-1]


# ---- defaults: exactly the version-1 numbers -----------------------------------------------

def v1_evaluate(problem: Problem, plan_: Plan) -> list[tuple[float, float, float, float, float, int]]:
    """The version-1 evaluator's arithmetic, frozen here verbatim (piper/core/evaluate.py before v2):
    per stage (tps, compute, edge, resync, memory, y)."""
    n_mb, bw = problem.microbatches, problem.bandwidth
    chosen = {v: problem.node(v).tmpc(s.t, s.tmpcs[v]) for s in plan_.stages for v in s.nodes}
    suffix, suffix_d = 0, [0] * len(plan_.stages)
    for i in range(len(plan_.stages) - 1, -1, -1):
        suffix += plan_.stages[i].d
        suffix_d[i] = suffix
    out = []
    for i, s in enumerate(plan_.stages):
        d, members = s.d, set(s.nodes)
        y = -(-suffix_d[i] // d)
        memory = compute = edge_bytes = resync_bytes = 0.0
        for v in s.nodes:
            c = chosen[v]
            memory += c.memory_a * y + c.memory_b
            compute += c.time_per_sample
            resync_bytes += 4.0 * (d - 1) * c.parameter_size / (d * n_mb)
            for e in problem.in_edges[v]:
                if e.u not in members:
                    edge_bytes += 2.0 * (e.communication_cost + c.sync_fw[e.u])
            for e in problem.out_edges[v]:
                if e.v not in members:
                    edge_bytes += 2.0 * (e.communication_cost + c.sync_bw[e.v])
        tps = (edge_bytes / d + resync_bytes) / bw + compute / d
        out.append((tps, compute / d, edge_bytes / d / bw, resync_bytes / bw, memory, y))
    return out


def assert_v1(problem: Problem, plan_: Plan) -> None:
    score = evaluate(problem, plan_)
    want = v1_evaluate(problem, plan_)
    got = [(s.tps, s.compute, s.edge, s.resync, s.memory, s.y) for s in score.stages]
    assert got == want  # ==, not approx
    if not score.oom:
        assert score.tps == max(w[0] for w in want)
    # the version-2 keys given at their default values change nothing either
    raw = problem_to_dict(problem)
    raw.update(devicesPerNode=problem.devices, intraNodeBandwidth=problem.bandwidth, allReduceFactor=4)
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["memoryUsageShardedB"] = 0.0
    same = problem_from_dict(raw)
    assert same.version2_features() == ()
    again = evaluate(same, plan_)
    assert [(s.tps, s.compute, s.edge, s.resync, s.memory, s.y) for s in again.stages] == want
    assert again.tps == score.tps and again.batch_time == score.batch_time and again.oom == score.oom


REF_ROWS = [r for r in rows() if r.get("stages")]


@pytest.mark.parametrize("row", REF_ROWS, ids=[f"{r['config_id']}-{r['variant']}" for r in REF_ROWS])
def test_defaults_give_the_v1_numbers_on_the_reference_plans(row):
    assert_v1(problem_of(row), plan_of(row))


@pytest.mark.parametrize("name, plan_file", [
    ("bert32a100.json", "bert32-4stages-d4-t4-ar.json"),
    ("gnmt.json", "gnmt-2stages-d2.json"),
    ("resnet.json", "resnet-3stages-d4.json"),
])
def test_defaults_give_the_v1_numbers_on_the_paper_workloads(name, plan_file):
    problem = load_problem(WORKLOADS / name)
    pl = load_plan(PLANS / plan_file)
    problem = problem.with_cluster(devices=max(problem.devices, pl.devices_used),
                                   microbatches=max(problem.microbatches, 64))
    assert_v1(problem, pl)


def random_plan(problem: Problem, rng: random.Random) -> Plan | None:
    """Contiguous segments of the topological order with random (t, d) and TMPCs; None if no t fits."""
    order = list(problem.topological_order)
    cuts = sorted(rng.sample(range(1, len(order)), rng.randint(0, min(3, len(order) - 1, problem.microbatches - 1))))
    n_mb, parts = problem.microbatches, len(cuts) + 1
    divisors = [d for d in range(1, n_mb // parts + 1) if n_mb % d == 0]  # so that sum d <= N
    stages = []
    for a, b in zip([0, *cuts], [*cuts, len(order)]):
        seg = order[a:b]
        ts = set.intersection(*(set(problem.node(v).tmpcs) for v in seg))
        if not ts:
            return None
        t = rng.choice(sorted(ts))
        d = rng.choice(divisors)
        stages.append(Stage(tuple(seg), d, t, {v: rng.choice(problem.node(v).tmpcs[t]).id for v in seg}))
    return Plan(tuple(stages))


def test_defaults_give_the_v1_numbers_on_random_instances():
    rng = random.Random(2021)
    checked = 0
    for seed in range(150):
        problem = random_problem(seed)
        pl = random_plan(problem, rng)
        if pl is None:
            continue
        assert_v1(problem.with_cluster(devices=max(problem.devices, pl.devices_used)), pl)
        checked += 1
    assert checked >= 100
