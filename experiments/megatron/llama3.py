"""Llama 3 405B ([L3] Table 4): Meta's layout scored with the least recomputation that fits, and
the planner's plan."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from experiments.megatron.model import predicted_tflops_per_gpu, stage_plan
from experiments.megatron.planner import planner_summary, run_planner
from piper.core.evaluate import evaluate
from piper.frontend import hardware, preset
from piper.frontend.costs import model_flops_per_iteration
from piper.frontend.metrics import plan_metrics
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem

#: H100 80 GB (SXM) in DGX H100 nodes of 8 ([L3] Section 3.3.1)
L3_GPU = "h100"


def llama3_layout(layers: int = 126, stages: int = 16) -> list[int]:
    """[L3] Section 3.3.2: the first and the last pipeline stage hold one layer fewer
    (126 layers over 16 stages: 7, 8 x 14, 7)."""
    inner = (layers + 2) // stages
    sizes = [inner - 1] + [inner] * (stages - 2) + [inner - 1]
    if sum(sizes) != layers:
        raise ValueError(f"{layers} layers do not fit the layout {sizes}")
    return sizes


def llama3_problem(row: dict[str, Any], efficiency: float):
    cfg = preset("llama3-405b").with_changes(seq_length=int(row["sequence_length"]), micro_batch=1)
    hw = hardware(L3_GPU)
    global_batch = int(row["data_parallel"]) * int(row["batch_size_per_dp"])
    setup = TrainingSetup(nodes=int(row["gpus"]) // hw.devices_per_node, global_batch=global_batch,
                          efficiency=efficiency, distributed_optimizer=True)
    return cfg, hw, setup, load_problem(build_workload(cfg, hw, setup), strict=True)


def score_llama3(row: dict[str, Any], efficiency: float, planner: bool, time_limit_s: float) -> dict[str, Any]:
    """Meta's layout of the Table 4 row (TP, PP, DP as published; micro-batch 1) scored with the
    least recomputation that fits (none+sp, selective+sp, full+sp, in that order); predicted
    model TFLOP/s per GPU = model FLOPs per iteration / batch time / gpus."""
    cfg, hw, setup, problem = llama3_problem(row, efficiency)
    gpus, t, p, d = (int(row[k]) for k in ("gpus", "tensor_parallel", "pipeline_parallel", "data_parallel"))
    if t * p * d != gpus or int(row["context_parallel"]) != 1:
        raise ValueError("only the context-parallel-free rows of [L3] Table 4 are modelled")
    model_flops = model_flops_per_iteration(cfg, setup.global_batch)
    out: dict[str, Any] = {"model": "llama3-405b", "gpus": gpus, "t": t, "p": p, "d": d,
                           "global_batch": setup.global_batch, "seq_length": cfg.seq_length,
                           "published_tflops_per_gpu": float(row["tflops_per_gpu"]),
                           "published_mfu_percent": float(row["bf16_mfu_percent"]),
                           "layout": llama3_layout(cfg.layers, p)}
    tried = []
    for tmpc in ("none+sp", "selective+sp", "full+sp"):
        plan = stage_plan(problem, out["layout"], d, t, tmpc)
        score = evaluate(problem, plan)
        mem = max(s.memory for s in score.stages) / 1e9
        if score.oom:
            # what the speed would be if it fitted: the same plan with the memory limit lifted
            free = evaluate(replace(problem, memory_per_device=math.inf), plan)
            what = predicted_tflops_per_gpu(model_flops, free, gpus)
            tried.append(f"{tmpc}: {mem:.1f} GB, OOM (would give {what:.0f} TFLOP/s)")
            continue
        tried.append(f"{tmpc}: {mem:.1f} GB")
        if "tmpc" not in out:
            m = plan_metrics(cfg, hw, setup, problem, plan, score)
            out.update(fits=True, tmpc=tmpc, max_memory_gb=mem, tps=score.tps,
                       memory_limit_gb=problem.memory_per_device / 1e9, batch_time_s=score.batch_time,
                       microbatches=problem.microbatches,
                       fill_drain_share=max(0.0, score.batch_time - problem.microbatches * score.tps) / score.batch_time,
                       tflops_per_gpu=predicted_tflops_per_gpu(model_flops, score, gpus),
                       tflops_hw_per_gpu=m["tflops_per_device"], mfu=m["mfu"])
            break
    if "tmpc" not in out:
        out.update(fits=False, tmpc=None, tflops_per_gpu=math.nan)
    out["memory_tried"] = "; ".join(tried)
    if out.get("fits"):
        out["error_percent"] = 100 * (out["tflops_per_gpu"] / out["published_tflops_per_gpu"] - 1)
    if planner:
        for uniform in (True, False):
            key = "planner_uniform" if uniform else "planner_free"
            found = run_planner(problem, uniform, time_limit_s)
            out[key] = planner_summary(found, problem, cfg, hw, setup, gpus, model_flops, out.get("batch_time_s"),
                                        None, ref_tps=out.get("tps"))
    return out
