"""The evaluator without the cluster keys (or with them at their default values) gives
exactly (``==``) the numbers of its single-node formulas, frozen here verbatim, on the
reference plans, the paper workloads and random instances."""

import random
from pathlib import Path

import pytest

from experiments.lib.instances import random_problem
from piper import Plan, Problem, Stage, evaluate, load_plan, load_problem, problem_from_dict, problem_to_dict
from tests.reference import plan_of, problem_of, rows

ROOT = Path(__file__).resolve().parents[2]
WORKLOADS = ROOT / "experiments" / "workloads"
PLANS = ROOT / "experiments" / "plans"


def single_node_evaluate(problem: Problem, plan_: Plan) -> list[tuple[float, float, float, float, float, int]]:
    """The single-node evaluator's arithmetic, frozen here verbatim (piper/core/evaluate.py before
    the cluster keys):
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


def assert_single_node_numbers(problem: Problem, plan_: Plan) -> None:
    score = evaluate(problem, plan_)
    want = single_node_evaluate(problem, plan_)
    got = [(s.tps, s.compute, s.edge, s.resync, s.memory, s.y) for s in score.stages]
    assert got == want  # ==, not approx
    if not score.oom:
        assert score.tps == max(w[0] for w in want)
    # the cluster keys given at their default values change nothing either
    raw = problem_to_dict(problem)
    raw.update(devicesPerNode=problem.devices, intraNodeBandwidth=problem.bandwidth, allReduceFactor=4)
    for nd in raw["nodes"]:
        for lst in nd["TMPCs"].values():
            for c in lst:
                c["memoryUsageShardedB"] = 0.0
    same = problem_from_dict(raw)
    assert same.active_features() == ()
    again = evaluate(same, plan_)
    assert [(s.tps, s.compute, s.edge, s.resync, s.memory, s.y) for s in again.stages] == want
    assert again.tps == score.tps and again.batch_time == score.batch_time and again.oom == score.oom


REF_ROWS = [r for r in rows() if r.get("stages")]


@pytest.mark.parametrize("row", REF_ROWS, ids=[f"{r['config_id']}-{r['variant']}" for r in REF_ROWS])
def test_defaults_give_the_single_node_numbers_on_the_reference_plans(row):
    assert_single_node_numbers(problem_of(row), plan_of(row))


@pytest.mark.parametrize("name, plan_file", [
    ("bert32a100.json", "bert32-4stages-d4-t4-ar.json"),
    ("gnmt.json", "gnmt-2stages-d2.json"),
    ("resnet.json", "resnet-3stages-d4.json"),
])
def test_defaults_give_the_single_node_numbers_on_the_paper_workloads(name, plan_file):
    problem = load_problem(WORKLOADS / name)
    pl = load_plan(PLANS / plan_file)
    problem = problem.with_cluster(devices=max(problem.devices, pl.devices_used),
                                   microbatches=max(problem.microbatches, 64))
    assert_single_node_numbers(problem, pl)


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


def test_defaults_give_the_single_node_numbers_on_random_instances():
    rng = random.Random(2021)
    checked = 0
    for seed in range(150):
        problem = random_problem(seed)
        pl = random_plan(problem, rng)
        if pl is None:
            continue
        assert_single_node_numbers(problem.with_cluster(devices=max(problem.devices, pl.devices_used)), pl)
        checked += 1
    assert checked >= 100
