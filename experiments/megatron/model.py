"""Megatron's own configuration of a [SC21] Table 1 row scored by the one evaluator: its workload,
its uniform plan, its predicted TFLOP/s per GPU, the efficiency calibrated on one row, and the
front end's parameters and FLOPs against [SC21]."""

from __future__ import annotations

import math
from typing import Any

from experiments.megatron.data import Table1Row
from piper.core.evaluate import Score, evaluate
from piper.core.plan import Plan, Stage
from piper.core.problem import Problem
from piper.frontend import hardware, preset
from piper.frontend.costs import (
    hardware_flops_per_iteration,
    model_params,
    sc21_flops_per_iteration,
    sc21_params,
)
from piper.frontend.workload import TrainingSetup, build_workload
from piper.io.workload import load_problem

#: the one row the efficiency is calibrated on: one stage (p = 1), t = 8 inside a node, so
#: no pipeline fill/drain and no interleaving enters the calibration
CALIBRATION_ROW = "megatron-18b"
#: A100 80 GB in DGX A100 nodes of 8 ([SC21] Section 5: Selene)
SC21_GPU = "a100-80gb"
SC21_SEQ = 2048


def row_config(row: Table1Row):
    """The model config of a Table 1 row: its preset at the row's micro-batch and [SC21]'s
    sequence length; ValueError when the preset's shape disagrees with the table."""
    cfg = preset(row.model).with_changes(micro_batch=row.micro_batch, seq_length=SC21_SEQ)
    if (cfg.attention_heads, cfg.hidden_size, cfg.layers) != (row.attention_heads, row.hidden_size, row.layers):
        raise ValueError(f"{row.model}: the preset disagrees with the published table")
    return cfg


def megatron_problem(row: Table1Row, efficiency: float):
    """(model config, hardware, setup, Problem) of a Table 1 row at ``efficiency`` (fraction of peak)."""
    cfg = row_config(row)
    hw = hardware(SC21_GPU)
    if row.gpus % hw.devices_per_node:
        raise ValueError(f"{row.model}: {row.gpus} GPUs are not whole nodes of {hw.devices_per_node}")
    # SC'21's Megatron-LM kept the optimizer state on every data-parallel replica (the
    # distributed optimizer came later) and all-reduced the gradients
    setup = TrainingSetup(nodes=row.gpus // hw.devices_per_node, global_batch=row.global_batch,
                          efficiency=efficiency, distributed_optimizer=False)
    problem = load_problem(build_workload(cfg, hw, setup), strict=True)
    return cfg, hw, setup, problem


def stage_plan(problem: Problem, stage_layers: list[int], d: int, t: int, layer_tmpc: str) -> Plan:
    """A uniform plan over the front end's chain: stage i holds ``stage_layers[i]`` transformer
    layers in order, the embedding sits in the first stage, the final norm and output head in
    the last; every transformer layer uses ``layer_tmpc``, every other node ``none``."""
    kinds = {nd.id: nd.kind for nd in problem.nodes}
    layer_ids = sorted(v for v, k in kinds.items() if k == "transformer")
    if sum(stage_layers) != len(layer_ids) or min(stage_layers) < 1:
        raise ValueError(f"stage sizes {stage_layers} do not split {len(layer_ids)} layers")
    first = [v for v, k in kinds.items() if k == "embedding"]
    last = sorted(v for v, k in kinds.items() if k in ("final_norm", "output_head"))
    stages = []
    at = 0
    for i, n in enumerate(stage_layers):
        nodes = layer_ids[at:at + n]
        at += n
        if i == 0:
            nodes = first + nodes
        if i == len(stage_layers) - 1:
            nodes = nodes + last
        tm = {v: (layer_tmpc if kinds[v] == "transformer" else "none") for v in nodes}
        stages.append(Stage(tuple(nodes), d, t, tm))
    return Plan(tuple(stages))


def megatron_plan(problem: Problem, row: Table1Row) -> Plan:
    """The plan Megatron ran ([SC21] Table 1): p stages of l/p layers, degree t, d = gpus/(t p), full recomputation."""
    p = row.pipeline_parallel
    if row.layers % p:
        raise ValueError(f"{row.model}: {row.layers} layers do not split into {p} equal stages")
    return stage_plan(problem, [row.layers // p] * p, row.data_parallel, row.tensor_parallel, "full")


def predicted_tflops_per_gpu(flops_per_iteration: float, score: Score, gpus: int) -> float:
    """FLOPs per iteration / batch time (s) / gpus, in TFLOP/s per GPU (nan when OOM)."""
    if score.oom or not math.isfinite(score.batch_time) or score.batch_time <= 0:
        return math.nan
    return flops_per_iteration / score.batch_time / gpus / 1e12


def _interleaved_tflops(row: Table1Row, problem: Problem, score: Score, flops: float) -> float:
    """A what-if outside the evaluator: TFLOP/s per GPU with the fill and drain divided by v =
    (l / p) / virtual_stage_layers, the interleaved schedule's bubble ([SC21] Section 2.2.2);
    nan for rows run without interleaving."""
    if row.virtual_stage_layers is None or score.oom:
        return math.nan
    v = (row.layers // row.pipeline_parallel) / row.virtual_stage_layers
    n_tps = problem.microbatches * score.tps
    return flops / (n_tps + (score.batch_time - n_tps) / v) / row.gpus / 1e12


def score_megatron(row: Table1Row, efficiency: float) -> dict[str, Any]:
    """Megatron's configuration of ``row`` scored by the evaluator at ``efficiency``."""
    cfg, hw, setup, problem = megatron_problem(row, efficiency)
    plan = megatron_plan(problem, row)
    score = evaluate(problem, plan)
    flops = sc21_flops_per_iteration(cfg, row.global_batch)
    bottleneck = score.stages[score.bottleneck] if score.bottleneck is not None else None
    return {
        "problem": problem, "plan": plan, "score": score, "cfg": cfg, "hw": hw, "setup": setup,
        "fits": not score.oom,
        "max_memory_gb": max(s.memory for s in score.stages) / 1e9,
        "memory_limit_gb": problem.memory_per_device / 1e9,
        "batch_time_s": score.batch_time,
        "tflops_per_gpu": predicted_tflops_per_gpu(flops, score, row.gpus),
        "microbatches": problem.microbatches,
        # the pipeline's fill and drain: batch time - N TPS = sum tau - max tau (s)
        "fill_drain_s": max(0.0, score.batch_time - problem.microbatches * score.tps),
        "fill_drain_share": max(0.0, score.batch_time - problem.microbatches * score.tps) / score.batch_time,
        # NOT the evaluator: the interleaved schedule's fill and drain, [SC21] Section 2.2.2: the
        # bubble divided by v = (layers per stage) / (layers per virtual stage)
        "interleaved_tflops_per_gpu": _interleaved_tflops(row, problem, score, flops),
        # where the time goes, on the bottleneck stage (seconds per micro-batch, per replica)
        "bottleneck_compute_s": bottleneck.compute if bottleneck else math.nan,
        "bottleneck_edge_s": bottleneck.edge if bottleneck else math.nan,
        "bottleneck_resync_s": bottleneck.resync if bottleneck else math.nan,
    }


def calibrate_efficiency(row: Table1Row, target_tflops: float | None = None, rtol: float = 1e-12) -> float:
    """The efficiency in (0, 1] at which Megatron's configuration of ``row`` is predicted at
    ``target_tflops`` (default: its published TFLOP/s per GPU), by bisection (the prediction
    rises monotonically with the efficiency). ValueError when even efficiency 1 is too slow."""
    target = row.tflops_per_gpu if target_tflops is None else target_tflops
    lo, hi = 1e-3, 1.0
    if score_megatron(row, hi)["tflops_per_gpu"] < target:
        raise ValueError(f"{row.model}: even at 100% of peak the model predicts less than {target} TFLOP/s per GPU")
    if score_megatron(row, lo)["tflops_per_gpu"] > target:
        raise ValueError(f"{row.model}: the prediction exceeds {target} TFLOP/s per GPU even at 0.1% of peak")
    while hi - lo > rtol * hi:
        mid = 0.5 * (lo + hi)
        if score_megatron(row, mid)["tflops_per_gpu"] < target:
            lo = mid
        else:
            hi = mid
    return 0.5 * (lo + hi)


def flops_check(row: Table1Row) -> dict[str, float]:
    """Parameters (billions) and FLOPs per iteration of the front end against [SC21]."""
    cfg = row_config(row)
    eq3 = sc21_flops_per_iteration(cfg, row.global_batch)
    fe = hardware_flops_per_iteration(cfg, row.global_batch, "full")
    params = model_params(cfg)
    return {
        "params_published_billion": row.params_billion,
        "params_frontend_billion": params / 1e9,
        "params_sc21_formula_billion": sc21_params(cfg) / 1e9,
        "params_rel_diff_published": params / (row.params_billion * 1e9) - 1,
        "params_rel_diff_formula": params / sc21_params(cfg) - 1,
        "flops_eq3_per_iteration": eq3,
        "flops_frontend_per_iteration": fe,
        "flops_rel_diff": fe / eq3 - 1,
    }
