"""The planner on a published workload: Piper's DP through the registry, its plan in Megatron's
terms, and what it changes against Megatron's configuration."""

from __future__ import annotations

import math
import time
from collections import Counter
from typing import Any

from experiments.megatron.data import Table1Row
from experiments.megatron.model import predicted_tflops_per_gpu
from piper.core.errors import SolverError
from piper.core.evaluate import evaluate
from piper.core.options import Options
from piper.core.plan import Plan
from piper.core.problem import Problem
from piper.frontend.metrics import plan_metrics
from piper.frontend.tmpc import parse_tmpc_id


def describe_plan(problem: Problem, plan: Plan) -> dict[str, Any]:
    """A plan in Megatron's terms: stages, per-stage transformer layers, d, t, the TMPCs of
    the transformer layers (counts) and micro-batches per replica (N / d)."""
    kinds = {nd.id: nd.kind for nd in problem.nodes}
    layers = [sum(1 for v in s.nodes if kinds[v] == "transformer") for s in plan.stages]
    tm = Counter(s.tmpcs[v] for s in plan.stages for v in s.nodes if kinds[v] == "transformer")
    ds = sorted({s.d for s in plan.stages})
    ts = sorted({s.t for s in plan.stages})
    runs: list[list] = []  # runs of identical consecutive stages: [count, text]
    for n, st in zip(layers, plan.stages):
        text = f"{n}L d{st.d} t{st.t}"
        if runs and runs[-1][1] == text:
            runs[-1][0] += 1
        else:
            runs.append([1, text])
    stages = ", ".join(text if k == 1 else f"{k}x ({text})" for k, text in runs)
    recompute = Counter(parse_tmpc_id(k)[0] for k in tm.elements())
    sp = sum(n for k, n in tm.items() if parse_tmpc_id(k)[1])
    return {
        "stages": len(plan.stages),
        "layers_per_stage": layers,
        "d": ds, "t": ts,
        "tmpcs": dict(tm),
        "recompute": dict(recompute),
        "sequence_parallel_layers": sp,
        "microbatches_per_replica": sorted({problem.microbatches // s.d for s in plan.stages}),
        "text": f"{len(plan.stages)} stage(s) [{stages}]; layers " + ", ".join(f"{n}x {k}" for k, n in sorted(tm.items())),
    }


def changes_vs(megatron: dict[str, Any], found: dict[str, Any], row_t: int, row_p: int, row_d: int) -> str:
    """What the planner's plan changes against Megatron's (t, p, d, micro-batches per replica, recomputation)."""
    out = []
    if found["t"] != [row_t]:
        out.append(f"t {row_t}->{'/'.join(map(str, found['t']))}")
    if found["stages"] != row_p:
        out.append(f"p {row_p}->{found['stages']}")
    if found["d"] != [row_d]:
        out.append(f"d {row_d}->{'/'.join(map(str, found['d']))}")
    mb = megatron["microbatches"] // row_d
    if found["microbatches_per_replica"] != [mb]:
        out.append(f"micro-batches/replica {mb}->{'/'.join(map(str, found['microbatches_per_replica']))}")
    rec = found["recompute"]
    if rec != {"full": sum(rec.values())} or found["sequence_parallel_layers"]:
        parts = [f"{k} {n}" for k, n in sorted(rec.items())]
        sp = found["sequence_parallel_layers"]
        out.append("recompute full-> " + ", ".join(parts) + (f" (+sp on {sp})" if sp else ""))
    return "; ".join(out) or "same as Megatron"


def run_planner(problem: Problem, uniform: bool, time_limit_s: float) -> dict[str, Any]:
    """Piper's DP (exact knapsack) through the registry on ``problem``; ``{"ran": False, "why": ...}``
    when it refuses (SolverError) or finds no plan within the limit."""
    from piper import solve  # the registry

    start = time.perf_counter()
    try:
        res = solve(problem, Options(uniform=uniform, time_limit_s=time_limit_s), "dp")
    except SolverError as exc:
        return {"ran": False, "why": f"refused: {exc}", "time_s": time.perf_counter() - start}
    elapsed = time.perf_counter() - start
    if res.plan is None:
        return {"ran": False, "why": f"{res.status.value}: {res.message or 'no plan'}", "time_s": elapsed}
    return {"ran": True, "result": res, "plan": res.plan, "score": res.score or evaluate(problem, res.plan),
            "status": res.status.value, "time_s": elapsed, "message": res.message}


def planner_summary(found: dict[str, Any], problem: Problem, cfg, hw, setup, gpus: int, flops_ref: float,
                     ref_batch_time_s: float | None, megatron: dict[str, Any] | None,
                     row: Table1Row | None = None, ref_tps: float | None = None) -> dict[str, Any]:
    """What a report keeps of a planner run (:func:`run_planner`): its plan in Megatron's terms, its
    speed (TFLOP/s per GPU by ``flops_ref``, the plan's own hardware FLOPs), its memory, its speed-up
    over the reference batch time and TPS, and (with ``megatron`` and ``row``) what it changes."""
    if not found["ran"]:
        return {"ran": False, "why": found["why"], "time_s": found["time_s"]}
    plan, score = found["plan"], found["score"]
    m = plan_metrics(cfg, hw, setup, problem, plan, score)
    desc = describe_plan(problem, plan)
    out = {
        "ran": True, "status": found["status"], "time_s": found["time_s"], "plan": desc["text"],
        "devices_used": plan.devices_used,
        "batch_time_s": score.batch_time,
        # the speed as the reference's FLOP count would report it (eq. (3) / model FLOPs), on all GPUs
        "tflops_ref_per_gpu": predicted_tflops_per_gpu(flops_ref, score, gpus),
        # the plan's own hardware FLOPs (its recomputation) per device it uses (plan_metrics)
        "tflops_hw_per_gpu": m["tflops_per_device"],
        "max_memory_gb": m["max_memory_per_device_bytes"] / 1e9,
        "speedup": (ref_batch_time_s / score.batch_time) if ref_batch_time_s else math.nan,
        # the DP's own objective: steady-state time per micro-batch (TPS) of the reference over the plan's
        "tps_speedup": (ref_tps / score.tps) if ref_tps else math.nan,
        "message": found.get("message", ""),
    }
    if megatron is not None and row is not None:
        out["changes"] = changes_vs(megatron, desc, row.tensor_parallel, row.pipeline_parallel, row.data_parallel)
    return out
