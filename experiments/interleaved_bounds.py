"""How far the interleaved schedule's formulas are from the schedule played out, on random plans
with unequal chunks, and which closed forms bound it from above (evidence for the spec change that
docs/problem.md §9.2, "Limit of this formula", calls for).

    python -m experiments.interleaved_bounds [--cases 3000] [--seed 0] [--json]

Each case is a chain of 2-12 nodes (compute 0.1-3 per sample, activations 0-2 per micro-batch, no
edge or resync cost, d = t = 1) cut into L v chunks of 1-3 nodes (L = 2-4 device groups, v = 2-4,
m = L-4L micro-batches), an interleaved plan. With T_j the chunk's compute, T*_g the largest T_j of
group g's chunks and A_j the chunk's activations, it compares the simulated iteration
(:func:`piper.render.timeline.simulate_schedule`) and the pass order's activation peak
(:func:`piper.core.pass_order.activation_peaks`) with:

* ``formula``: the evaluator's batch time, m TPS + (sum_g tau_g - max_g tau_g) / v (§9.2);
* ``group_max_bubble``: m TPS + sum_g T*_g - max_g T*_g (the bubble of the largest chunks);
* ``padded_global``: (m v + L - 1) max_j T_j, every chunk padded to the largest: an upper bound
  (the simulation runs a fixed order per device, so its makespan cannot fall when a pass grows,
  and equal chunks take exactly this: tests/render/test_timeline.py);
* ``padded_groups``: m v max_j T_j + sum_g T*_g - max_g T*_g;
* memory ``y_v_max``: y_g v max_{j in C_g} A_j (an upper bound: the order holds at most y_g v
  chunk-micro-batches of group g at once, its warm-up count plus one, each at most max A_j).

It prints, per closed form, the largest and the least ratio played-out / closed form: above 1 means
the closed form is optimistic for some plan. Equal chunks make every form exact.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from dataclasses import dataclass

from piper import evaluate, plan_from_dict, problem_from_dict
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.core.pass_order import activation_peaks
from piper.render.timeline import simulate_schedule

__all__ = ["Case", "random_case", "ratios", "main"]


@dataclass(frozen=True)
class Case:
    problem: Problem
    plan: Plan
    groups: int
    virtual_stages: int
    microbatches: int
    #: per chunk, in pipeline order: compute per sample and activations per micro-batch
    chunk_time: tuple[float, ...]
    chunk_activations: tuple[float, ...]


def random_case(rng: random.Random) -> Case:
    """One random interleaved plan with unequal chunks (module docstring)."""
    groups, v = rng.choice((2, 3, 4)), rng.choice((2, 3, 4))
    m = groups * rng.choice((1, 2, 3, 4))
    sizes = [rng.choice((1, 1, 1, 2, 3)) for _ in range(groups * v)]
    n = sum(sizes)
    compute = [rng.choice((0.1, 0.5, 1.0, 2.0, 3.0)) for _ in range(n)]
    acts = [rng.choice((0.0, 0.5, 1.0, 2.0)) for _ in range(n)]

    def tmpc(i: int) -> dict:
        return {"id": "a", "timePerSample": compute[i], "parameterSize": 0, "memoryUsageA": acts[i],
                "memoryUsageB": 0, "syncTimeFw": {str(i - 1): 0} if i else {},
                "syncTimeBw": {str(i + 1): 0} if i < n - 1 else {}}

    problem = problem_from_dict({
        "maxDevices": groups, "maxMemoryPerDevice": 1e12, "bandwidth": 1, "mbsInBatch": m,
        "nodes": [{"id": i, "TMPCs": {"1": [tmpc(i)]}} for i in range(n)],
        "edges": [{"sourceId": i, "destId": i + 1, "communicationCost": 0} for i in range(n - 1)]})
    stages, start = [], 0
    for size in sizes:
        nodes = list(range(start, start + size))
        stages.append({"nodes": nodes, "dataParallelDegree": 1, "tensorParallelDegree": 1,
                       "TMPCids": {str(u): "a" for u in nodes}})
        start += size
    plan = plan_from_dict({"stages": stages, "schedule": {"kind": "interleaved", "virtualStages": v}})
    return Case(problem, plan, groups, v, m,
                tuple(sum(compute[u] for u in st["nodes"]) for st in stages),
                tuple(sum(acts[u] for u in st["nodes"]) for st in stages))


def ratios(case: Case) -> dict[str, float] | None:
    """Played out / closed form for each closed form (module docstring); None when the schedule is
    too large to play out."""
    score = evaluate(case.problem, case.plan)
    timeline = simulate_schedule(case.problem, case.plan, score)
    if timeline is None:
        return None
    L, v, m, T, A = case.groups, case.virtual_stages, case.microbatches, case.chunk_time, case.chunk_activations
    chunks = range(len(T))
    group_max = [max(T[j] for j in chunks if j % L == g) for g in range(L)]
    tps = max(sum(T[j] for j in chunks if j % L == g) for g in range(L))
    bubble = sum(group_max) - max(group_max)
    out = {
        "formula": timeline.makespan / score.batch_time,
        "group_max_bubble": timeline.makespan / (m * tps + bubble),
        "padded_global": timeline.makespan / ((m * v + L - 1) * max(T)),
        "padded_groups": timeline.makespan / (m * v * max(T) + bubble),
    }
    peaks = activation_peaks(case.problem, case.plan, score)
    memory = []
    for g, st in enumerate(score.stages):
        bound = st.y * v * max(A[j] for j in chunks if j % L == g)
        if bound > 0:
            memory.append(peaks[g] / bound)
        elif peaks[g] > 0:
            memory.append(float("inf"))
    if memory:
        out["memory_y_v_max"] = max(memory)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.interleaved_bounds", description=__doc__.split("\n")[0])
    parser.add_argument("--cases", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    args = parser.parse_args(argv)
    if args.cases < 1:
        parser.error("--cases must be >= 1")
    rng = random.Random(args.seed)
    worst: dict[str, float] = {}
    least: dict[str, float] = {}
    played = 0
    for i in range(args.cases):
        r = ratios(random_case(rng))
        if r is None:
            continue
        played += 1
        for key, value in r.items():
            worst[key] = max(worst.get(key, 0.0), value)
            least[key] = min(least.get(key, float("inf")), value)
        if not args.json and (i + 1) % 1000 == 0:
            print(f"interleaved_bounds: {i + 1} of {args.cases}", file=sys.stderr, flush=True)
    summary = {"cases": played, "seed": args.seed, "max_ratio": worst, "min_ratio": least}
    if args.json:
        print(json.dumps(summary))
        return 0
    print(f"{played} random interleaved plans (seed {args.seed}); played out / closed form:")
    for key in worst:
        print(f"  {key:<17} max {worst[key]:.4f}  min {least[key]:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
