"""``python -m experiments.megatron [--out DIR] [--quick] [--json] [--quiet]``: the cost model against
published training runs (issue 21).

Sources (copied into ``experiments/data/``, see ``experiments/data/README.md``):

* [SC21] Narayanan et al., "Efficient Large-Scale Language Model Training on GPU Clusters
  Using Megatron-LM", SC'21: Table 1 (ten GPT models on DGX A100 80 GB nodes of 8 GPUs,
  their tensor/pipeline sizes, batch sizes and achieved TFLOP/s per GPU) and equation (3),
  the FLOPs of one iteration with full recomputation,
  F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)).
* [L3] "The Llama 3 Herd of Models" (2024), Table 4: Llama 3 405B on 16,384 H100 80 GB
  (TP 8, CP 1, PP 16, DP 128, sequence 8,192, 2,048 sequences per batch): 400 TFLOP/s per GPU.

What it computes, per row of [SC21] Table 1:

1. parameters and FLOPs per iteration of the front end's model against [SC21]'s parameter
   column and equation (3) (relative differences);
2. Megatron's own configuration scored by the one evaluator (``piper.evaluate``): the
   workload of ``piper.frontend.build_workload`` (A100 80 GB, nodes of 8, gpus / 8 nodes,
   the row's micro-batch and global batch, sequence 2,048, no distributed optimizer: it
   postdates SC'21), the uniform plan Megatron ran (p stages of l/p transformer layers, the
   embedding in the first stage, final norm and output head in the last, degree t,
   d = gpus / (t p), TMPC ``full`` on every transformer layer, ``none`` elsewhere), its
   fullest stage's memory, and its predicted TFLOP/s per GPU = equation (3)'s FLOPs /
   ``Score.batch_time`` / gpus. ONE compute efficiency (``TrainingSetup.efficiency``, the
   fraction of peak the layers' matrix multiplies reach) is calibrated on ONE row
   (:data:`CALIBRATION_ROW`) so that its prediction equals its published TFLOP/s (bisection:
   the prediction rises monotonically with the efficiency), and every row is then scored
   with it. Rows run with the interleaved schedule in [SC21] (``virtual_stage_layers``) are
   scored with the evaluator's plain 1F1B batch time (no interleaving is modelled);
3. the planner's best plan for the same workload and GPU count (Piper's DP through the
   registry, ``baselines.solve(..., "dp")``, uniform plans and free plans), under a time
   limit per solve; a row the DP cannot finish or refuses is recorded as ``not run: why``.

and for [L3] Table 4 (16,384 GPUs): Meta's layout (16 stages of 7, 8 x 14, 7 layers: the
first and last stages hold one layer fewer, [L3] Section 3.3.2; TP 8; DP 128; micro-batch 1;
distributed optimizer) scored with the least recomputation that fits, its predicted model
TFLOP/s per GPU (model FLOPs, no recomputation: [L3] reports BF16 MFU) against 400, and
the planner's plan if it finishes within the limit.

Outputs: ``OUT/megatron.csv`` (one row per model, units in the column names),
``OUT/megatron.png`` (predicted vs published TFLOP/s per GPU), ``OUT/MEGATRON.md`` (the
tables), and the tables on stdout (``--json``: one JSON object instead).
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from experiments import _cli
from piper.evaluate import Score, evaluate
from piper.frontend import hardware, preset
from piper.frontend.costs import (
    hardware_flops_per_iteration,
    model_flops_per_iteration,
    model_params,
    sc21_flops_per_iteration,
    sc21_params,
)
from piper.frontend.plan_cmd import plan_metrics
from piper.frontend.tmpc import parse_tmpc_id
from piper.frontend.workload import TrainingSetup, build_workload
from piper.options import Options
from piper.plan import Plan, Stage
from piper.problem import Problem, load_problem
from piper.result import SolverError

__all__ = [
    "DATA_DIR", "TABLE1_CSV", "LLAMA3_CSV", "CALIBRATION_ROW", "load_table1", "load_llama3", "Table1Row",
    "megatron_problem", "stage_plan", "megatron_plan", "score_megatron", "predicted_tflops_per_gpu",
    "calibrate_efficiency", "flops_check", "run_planner", "llama3_layout", "main",
]

DATA_DIR = Path(__file__).resolve().parent / "data"
TABLE1_CSV = DATA_DIR / "megatron_sc21_table1.csv"
LLAMA3_CSV = DATA_DIR / "llama3_table4.csv"
#: the one row the efficiency is calibrated on: one stage (p = 1), t = 8 inside a node, so
#: no pipeline fill/drain and no interleaving enters the calibration
CALIBRATION_ROW = "megatron-18b"
#: A100 80 GB in DGX A100 nodes of 8 ([SC21] Section 5: Selene)
SC21_GPU = "a100-80gb"
SC21_SEQ = 2048
#: H100 80 GB (SXM) in DGX H100 nodes of 8 ([L3] Section 3.3.1)
L3_GPU = "h100"
#: solve time limit per planner call, seconds
DEFAULT_TIME_LIMIT_S = 30.0
QUICK_ROWS = 3


# ---------------------------------------------------------------------------------
# the published tables
# ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Table1Row:
    """One row of [SC21] Table 1 (counts; TFLOP/s per GPU; PFLOP/s aggregate)."""

    model: str
    params_billion: float
    attention_heads: int
    hidden_size: int
    layers: int
    tensor_parallel: int
    pipeline_parallel: int
    gpus: int
    #: sequences per iteration
    global_batch: int
    #: sequences per micro-batch
    micro_batch: int
    #: layers per virtual stage of the interleaved schedule (None: not interleaved)
    virtual_stage_layers: int | None
    tflops_per_gpu: float
    percent_of_peak: float
    aggregate_pflops: float

    @property
    def data_parallel(self) -> int:
        return self.gpus // (self.tensor_parallel * self.pipeline_parallel)


def load_table1(path: str | Path = TABLE1_CSV) -> list[Table1Row]:
    """[SC21] Table 1 as typed rows, in the paper's order."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            out.append(Table1Row(
                model=r["model"], params_billion=float(r["params_billion"]),
                attention_heads=int(r["attention_heads"]), hidden_size=int(r["hidden_size"]), layers=int(r["layers"]),
                tensor_parallel=int(r["tensor_parallel"]), pipeline_parallel=int(r["pipeline_parallel"]),
                gpus=int(r["gpus"]), global_batch=int(r["global_batch"]), micro_batch=int(r["micro_batch"]),
                virtual_stage_layers=int(r["virtual_stage_layers"]) if r["virtual_stage_layers"].strip() else None,
                tflops_per_gpu=float(r["tflops_per_gpu"]), percent_of_peak=float(r["percent_of_peak"]),
                aggregate_pflops=float(r["aggregate_pflops"]),
            ))
    return out


def load_llama3(path: str | Path = LLAMA3_CSV) -> list[dict[str, Any]]:
    """[L3] Table 4 rows (numbers as int/float where they are numbers)."""
    out = []
    with open(path, newline="") as fh:
        for r in csv.DictReader(fh):
            row: dict[str, Any] = {}
            for k, v in r.items():
                try:
                    row[k] = int(v)
                except ValueError:
                    try:
                        row[k] = float(v)
                    except ValueError:
                        row[k] = v
            out.append(row)
    return out


# ---------------------------------------------------------------------------------
# workloads and plans
# ---------------------------------------------------------------------------------


def _config(row: Table1Row):
    cfg = preset(row.model).with_changes(micro_batch=row.micro_batch, seq_length=SC21_SEQ)
    if (cfg.attention_heads, cfg.hidden_size, cfg.layers) != (row.attention_heads, row.hidden_size, row.layers):
        raise ValueError(f"{row.model}: the preset disagrees with the published table")
    return cfg


def megatron_problem(row: Table1Row, efficiency: float):
    """(model config, hardware, setup, Problem) of a Table 1 row at ``efficiency`` (fraction of peak)."""
    cfg = _config(row)
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
    cfg = _config(row)
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


# ---------------------------------------------------------------------------------
# the planner
# ---------------------------------------------------------------------------------


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
    from baselines import solve  # the registry

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


# ---------------------------------------------------------------------------------
# Llama 3 405B ([L3] Table 4)
# ---------------------------------------------------------------------------------


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
            out[key] = _planner_summary(found, problem, cfg, hw, setup, gpus, model_flops, out.get("batch_time_s"),
                                        None, ref_tps=out.get("tps"))
    return out


# ---------------------------------------------------------------------------------
# the experiment
# ---------------------------------------------------------------------------------


def _planner_summary(found: dict[str, Any], problem: Problem, cfg, hw, setup, gpus: int, flops_ref: float,
                     ref_batch_time_s: float | None, megatron: dict[str, Any] | None,
                     row: Table1Row | None = None, ref_tps: float | None = None) -> dict[str, Any]:
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


def run(rows: list[Table1Row], calibration: Table1Row, planner: bool, time_limit_s: float,
        llama_rows: list[dict[str, Any]], log=None, llama_planner: bool | None = None) -> dict[str, Any]:
    """Sections 1-4 for ``rows`` (efficiency calibrated on ``calibration``) and ``llama_rows``."""
    t0 = time.perf_counter()
    efficiency = calibrate_efficiency(calibration)
    if log:
        log(f"efficiency {efficiency:.6f} (calibrated on {calibration.model}: {calibration.tflops_per_gpu} TFLOP/s)")
    out_rows = []
    for row in rows:
        rec: dict[str, Any] = {
            "model": row.model, "gpus": row.gpus, "t": row.tensor_parallel, "p": row.pipeline_parallel,
            "d": row.data_parallel, "micro_batch": row.micro_batch, "global_batch": row.global_batch,
            "virtual_stage_layers": row.virtual_stage_layers, "interleaved": row.virtual_stage_layers is not None,
            "calibration_row": row.model == calibration.model,
        }
        rec.update(flops_check(row))
        meg = score_megatron(row, efficiency)
        rec.update({k: meg[k] for k in ("fits", "max_memory_gb", "memory_limit_gb", "batch_time_s", "microbatches",
                                        "fill_drain_s", "fill_drain_share", "interleaved_tflops_per_gpu",
                                        "bottleneck_compute_s", "bottleneck_edge_s", "bottleneck_resync_s")})
        rec["published_tflops_per_gpu"] = row.tflops_per_gpu
        rec["predicted_tflops_per_gpu"] = meg["tflops_per_gpu"]
        rec["error_percent"] = 100 * (meg["tflops_per_gpu"] / row.tflops_per_gpu - 1)
        if planner:
            for uniform in (True, False):
                key = "planner_uniform" if uniform else "planner_free"
                found = run_planner(meg["problem"], uniform, time_limit_s)
                rec[key] = _planner_summary(found, meg["problem"], meg["cfg"], meg["hw"], meg["setup"], row.gpus,
                                            rec["flops_eq3_per_iteration"], meg["batch_time_s"], meg, row,
                                            ref_tps=meg["score"].tps)
                if log:
                    p = rec[key]
                    what = (f"{p['tflops_ref_per_gpu']:.1f} TFLOP/s (eq. 3), {p['time_s']:.1f} s"
                            if p["ran"] else p["why"][:100])
                    log(f"  {row.model} {key}: {what}")
        out_rows.append(rec)
        if log:
            log(f"{row.model}: predicted {rec['predicted_tflops_per_gpu']:.1f} vs published {row.tflops_per_gpu} "
                f"({rec['error_percent']:+.1f}%)")
    errors = [abs(r["error_percent"]) for r in out_rows if not r["calibration_row"]]
    llama_planner = planner if llama_planner is None else llama_planner
    llama = [score_llama3(r, efficiency, llama_planner, time_limit_s) for r in llama_rows]
    return {
        "efficiency": efficiency, "calibration_row": calibration.model,
        "calibration_tflops_per_gpu": calibration.tflops_per_gpu,
        "mean_abs_error_percent": sum(errors) / len(errors) if errors else math.nan,
        "mean_abs_error_rows": len(errors),
        "time_limit_s": time_limit_s, "planner": planner,
        "rows": out_rows, "llama3": llama, "elapsed_s": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------
# reports
# ---------------------------------------------------------------------------------


def _fmt(x: Any, spec: str = ".1f") -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, spec)


def _planner_cell(p: dict[str, Any] | None) -> str:
    if p is None:
        return "not run: --no-planner"
    if not p["ran"]:
        return "not run: " + p["why"].replace("|", "/")[:160]
    return (f"{p['tflops_ref_per_gpu']:.1f} (batch {p['speedup']:.2f}x, TPS {p['tps_speedup']:.2f}x, "
            f"{p['status']}, {p['time_s']:.0f} s)")


def mg_layers(r: dict[str, Any]) -> int:
    """Transformer layers of a result row (from the preset)."""
    return preset(r["model"]).layers


def markdown(res: dict[str, Any]) -> str:
    """The tables, as Markdown."""
    lines = []
    eff = res["efficiency"]
    lines.append(f"Efficiency (fraction of peak of the layers' compute) calibrated on **{res['calibration_row']}** "
                 f"({res['calibration_tflops_per_gpu']:g} TFLOP/s per GPU published): **{eff:.4f}** "
                 f"({100 * eff:.2f}% of 312 TFLOP/s).")
    lines.append("")
    lines.append("### 1. Parameters and FLOPs per iteration ([SC21] Table 1 and eq. (3))")
    lines.append("")
    lines.append("| model | params published (B) | params front end (B) | diff vs published | diff vs [SC21] formula "
                 "| FLOPs/iteration eq. (3) | front end (full recompute) | diff |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        lines.append(f"| {r['model']} | {r['params_published_billion']:g} | {r['params_frontend_billion']:.2f} | "
                     f"{100 * r['params_rel_diff_published']:+.2f}% | {r['params_rel_diff_formula']:+.1e} | "
                     f"{r['flops_eq3_per_iteration']:.4e} | {r['flops_frontend_per_iteration']:.4e} | "
                     f"{r['flops_rel_diff']:+.1e} |")
    lines.append("")
    lines.append("### 2. Megatron's configuration scored by the evaluator (A100 80 GB, full recomputation)")
    lines.append("")
    lines.append("| model | GPUs | t | p | d | b | N | interleaved | fullest stage GB / 80 | batch time (s) "
                 "| fill/drain share | predicted TFLOP/s/GPU | published | error | what-if: bubble / v |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for r in res["rows"]:
        if r["interleaved"]:
            v = (mg_layers(r) // r["p"]) / r["virtual_stage_layers"]
            inter = f"yes, v = {v:g} (scored as plain 1F1B)"
            whatif = f"{r['interleaved_tflops_per_gpu']:.1f} ({100 * (r['interleaved_tflops_per_gpu'] / r['published_tflops_per_gpu'] - 1):+.1f}%)"
        else:
            inter, whatif = "no", "-"
        err = f"{r['error_percent']:+.1f}%" + (" (calibrated)" if r["calibration_row"] else "")
        lines.append(f"| {r['model']} | {r['gpus']} | {r['t']} | {r['p']} | {r['d']} | {r['micro_batch']} | "
                     f"{r['microbatches']} | {inter} | {r['max_memory_gb']:.1f}{'' if r['fits'] else ' OOM'} | "
                     f"{_fmt(r['batch_time_s'], '.3f')} | {100 * r['fill_drain_share']:.1f}% | "
                     f"{_fmt(r['predicted_tflops_per_gpu'])} | {r['published_tflops_per_gpu']:g} | {err} | {whatif} |")
    lines.append("")
    lines.append(f"Mean absolute error over the {res['mean_abs_error_rows']} uncalibrated rows: "
                 f"**{res['mean_abs_error_percent']:.1f}%**. \"fill/drain share\" = (batch time - N TPS) / batch "
                 "time, the 1F1B pipeline's fill and drain in the evaluator's batch time. \"what-if: bubble / v\" is "
                 "NOT the evaluator: the same numbers with that fill and drain divided by v = (layers per stage) / "
                 "(layers per virtual stage), the interleaved schedule's bubble ([SC21] Section 2.2.2).")
    lines.append("")
    if res["planner"]:
        lines.append(f"### 3. The planner (Piper's DP, exact knapsack, registry `dp`, {res['time_limit_s']:g} s per solve)")
        lines.append("")
        lines.append("TFLOP/s per GPU here is eq. (3)'s FLOP count / the plan's batch time / all GPUs (the number "
                     "Megatron would report for a run this fast); in brackets the speed-up over Megatron's "
                     "configuration in batch time (what TFLOP/s measure) and in TPS (the steady-state time per "
                     "micro-batch, the DP's objective: no pipeline fill and drain), the DP's status and its time. \"hw\" = the plan's own hardware FLOPs "
                     "(its recomputation) per device it uses.")
        lines.append("")
        lines.append("| model | Megatron (predicted) | DP uniform | its plan | changes vs Megatron | DP free | its plan "
                     "| changes vs Megatron |")
        lines.append("|---|---:|---|---|---|---|---|---|")
        for r in res["rows"]:
            u, f = r.get("planner_uniform"), r.get("planner_free")

            def plan_cells(p):
                if p is None or not p["ran"]:
                    return ["-", "-"]
                return [f"{p['plan']} (hw {p['tflops_hw_per_gpu']:.0f}, {p['max_memory_gb']:.0f} GB)", p["changes"]]

            lines.append("| " + " | ".join([r["model"], _fmt(r["predicted_tflops_per_gpu"]), _planner_cell(u),
                                            *plan_cells(u), _planner_cell(f), *plan_cells(f)]) + " |")
        lines.append("")
    for l3 in res["llama3"]:
        lines.append(f"### 4. Llama 3 405B on {l3['gpus']:,} H100 ([L3] Table 4)")
        lines.append("")
        lines.append(f"Meta's layout: TP {l3['t']}, PP {l3['p']} (layers per stage {l3['layout']}), DP {l3['d']}, "
                     f"micro-batch 1, global batch {l3['global_batch']} x {l3['seq_length']} tokens, distributed "
                     f"optimizer, efficiency {eff:.4f} (calibrated on A100; the same constant).")
        lines.append("")
        if l3.get("fits"):
            lines.append(f"- fits with TMPC `{l3['tmpc']}` on every layer (memory tried: {l3['memory_tried']}; "
                         f"limit {l3['memory_limit_gb']:.0f} GB)")
            lines.append(f"- 1F1B fill/drain share of the batch time {100 * l3['fill_drain_share']:.1f}% "
                         f"({l3['microbatches'] // l3['d']} micro-batches per replica over {l3['p']} stages)")
            lines.append(f"- batch time {l3['batch_time_s']:.2f} s; predicted model TFLOP/s per GPU "
                         f"{l3['tflops_per_gpu']:.1f} (MFU {100 * l3['mfu']:.1f}%) vs published "
                         f"{l3['published_tflops_per_gpu']:g} ({l3['published_mfu_percent']:g}% MFU): "
                         f"error {l3['error_percent']:+.1f}%")
        else:
            lines.append(f"- does not fit in memory with any recomputation ({l3['memory_tried']})")
        for key, name in (("planner_uniform", "DP uniform"), ("planner_free", "DP free")):
            p = l3.get(key)
            if p is None:
                continue
            if p["ran"]:
                lines.append(f"- {name}: {p['tflops_ref_per_gpu']:.1f} model TFLOP/s per GPU ({p['speedup']:.2f}x, "
                             f"{p['status']}, {p['time_s']:.0f} s): {p['plan']}")
            else:
                lines.append(f"- {name}: not run: {p['why'][:300]}")
        lines.append("")
    return "\n".join(lines)


CSV_FIELDS = [
    "model", "gpus", "t", "p", "d", "micro_batch", "global_batch", "microbatches", "virtual_stage_layers",
    "interleaved", "params_published_billion", "params_frontend_billion", "params_sc21_formula_billion",
    "params_rel_diff_published", "params_rel_diff_formula", "flops_eq3_per_iteration", "flops_frontend_per_iteration",
    "flops_rel_diff", "efficiency", "calibration_row", "fits", "max_memory_gb", "memory_limit_gb", "batch_time_s",
    "bottleneck_compute_s", "bottleneck_edge_s", "bottleneck_resync_s", "fill_drain_s", "fill_drain_share",
    "interleaved_tflops_per_gpu", "published_tflops_per_gpu", "predicted_tflops_per_gpu", "error_percent",
]
PLANNER_FIELDS = ["ran", "why", "status", "time_s", "plan", "changes", "devices_used", "batch_time_s",
                  "tflops_ref_per_gpu", "tflops_hw_per_gpu", "max_memory_gb", "speedup", "tps_speedup"]


def write_csv(res: dict[str, Any], path: Path) -> None:
    fields = CSV_FIELDS + [f"{k}_{f}" for k in ("planner_uniform", "planner_free") for f in PLANNER_FIELDS]
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        rows = list(res["rows"])
        for l3 in res["llama3"]:
            rows.append({"model": f"{l3['model']} (L3 Table 4)", "gpus": l3["gpus"], "t": l3["t"], "p": l3["p"],
                         "d": l3["d"], "micro_batch": 1, "global_batch": l3["global_batch"],
                         "microbatches": l3["global_batch"], "fits": l3.get("fits"),
                         "fill_drain_share": l3.get("fill_drain_share"),
                         "max_memory_gb": l3.get("max_memory_gb"), "memory_limit_gb": l3.get("memory_limit_gb"),
                         "batch_time_s": l3.get("batch_time_s"),
                         "published_tflops_per_gpu": l3["published_tflops_per_gpu"],
                         "predicted_tflops_per_gpu": l3.get("tflops_per_gpu"), "error_percent": l3.get("error_percent"),
                         "planner_uniform": l3.get("planner_uniform"), "planner_free": l3.get("planner_free")})
        for r in rows:
            flat = {k: r.get(k) for k in CSV_FIELDS}
            flat["efficiency"] = res["efficiency"]
            for key in ("planner_uniform", "planner_free"):
                p = r.get(key) or {}
                for f in PLANNER_FIELDS:
                    flat[f"{key}_{f}"] = p.get(f)
            w.writerow(flat)


def write_png(res: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    names = [r["model"].replace("megatron-", "") + ("*" if r["interleaved"] else "") for r in rows] + [f"Llama3\n{l['gpus'] // 1024}k H100"
                                                                    for l in res["llama3"]]
    published = [r["published_tflops_per_gpu"] for r in rows] + [l["published_tflops_per_gpu"] for l in res["llama3"]]
    predicted = [r["predicted_tflops_per_gpu"] for r in rows] + [l.get("tflops_per_gpu", math.nan) for l in res["llama3"]]
    planner = []
    for r in rows + res["llama3"]:
        best = [p["tflops_ref_per_gpu"] for p in (r.get("planner_uniform"), r.get("planner_free")) if p and p["ran"]]
        planner.append(max(best) if best else math.nan)
    fig, (ax, ax2) = plt.subplots(2, 1, figsize=(11, 8), gridspec_kw={"height_ratios": [3, 1.4]}, sharex=True)
    x = list(range(len(names)))
    w = 0.27
    ax.bar([i - w for i in x], published, w, label="published ([SC21] Table 1 / [L3] Table 4)", color="#444444")
    ax.bar(x, predicted, w, label="evaluator, published configuration", color="#1f77b4")
    if res["planner"]:
        ax.bar([i + w for i in x], [0 if math.isnan(v) else v for v in planner], w,
               label="evaluator, planner's best plan (DP)", color="#ff7f0e")
        for i, v in enumerate(planner):
            if math.isnan(v):
                ax.text(i + w, 5, "not run", rotation=90, ha="center", va="bottom", fontsize=8)
    ci = next((i for i, r in enumerate(rows) if r["calibration_row"]), None)
    if ci is not None:
        ax.annotate("calibrated", (ci, predicted[ci]), xytext=(ci, predicted[ci] * 1.25), ha="center", fontsize=9,
                    arrowprops={"arrowstyle": "->"})
    ax.set_ylabel("TFLOP/s per GPU\n(eq. (3) FLOPs; Llama 3: model FLOPs)")
    ax.set_title(f"Cost model vs published runs; one efficiency {res['efficiency']:.3f} "
                 f"calibrated on {res['calibration_row']}")
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(axis="y", alpha=0.3)
    err = [100 * (p / q - 1) for p, q in zip(predicted, published)]
    colors = ["#2ca02c" if i == ci else "#1f77b4" for i in x]
    ax2.bar(x, [0 if math.isnan(e) else e for e in err], 0.6, color=colors)
    for i, e in enumerate(err):
        if math.isfinite(e):
            ax2.text(i, e + (1 if e >= 0 else -1), f"{e:+.0f}%", ha="center", va="bottom" if e >= 0 else "top",
                     fontsize=8)
    ax2.axhline(0, color="black", lw=0.8)
    ax2.set_ylabel("error of the\nprediction (%)")
    lo = min([e for e in err if math.isfinite(e)] + [0])
    hi = max([e for e in err if math.isfinite(e)] + [0])
    ax2.set_ylim(lo - 12, hi + 10)
    ax2.set_xlabel("* interleaved schedule in [SC21], scored here as plain 1F1B")
    ax2.set_xticks(x)
    ax2.set_xticklabels(names, fontsize=9)
    ax2.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {k: _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


PROG = "python -m experiments.megatron"


def build_parser() -> _cli.ArgumentParser:
    ap = _cli.make_parser(PROG, __doc__)
    _cli.add_out(ap, "out/megatron", "megatron.csv, megatron.png and MEGATRON.md")
    ap.add_argument("--quick", action="store_true", help=f"only the {QUICK_ROWS} smallest rows (and no Llama 3 planner)")
    ap.add_argument("--json", action="store_true", help="print one JSON object instead of the tables (no progress)")
    _cli.add_time_limit(ap, DEFAULT_TIME_LIMIT_S, "one DP solve (two solves per row)")
    ap.add_argument("--no-planner", action="store_true", help="skip the DP (sections 1, 2 and 4 only)")
    ap.add_argument("--calibrate-on", default=CALIBRATION_ROW, metavar="MODEL",
                    help=f"the row of [SC21] Table 1 to calibrate the efficiency on (default {CALIBRATION_ROW})")
    _cli.add_quiet(ap)
    _cli.add_jobs(ap, 1, "the rows run one after the other")
    return ap


def _main(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    table = load_table1()
    by_name = {r.model: r for r in table}
    if args.calibrate_on not in by_name:
        raise _cli.UsageError(f"--calibrate-on: unknown row {args.calibrate_on!r}; rows: {', '.join(by_name)}")
    rows = sorted(table, key=lambda r: r.params_billion)[:QUICK_ROWS] if args.quick else table
    llama = [r for r in load_llama3() if int(r["gpus"]) == 16384 and int(r["context_parallel"]) == 1]
    log = None if args.json or args.quiet else (lambda msg: print(msg, file=sys.stderr, flush=True))
    out = _cli.out_dir(args.out)
    res = run(rows, by_name[args.calibrate_on], not args.no_planner, args.time_limit, llama, log=log,
              llama_planner=not args.no_planner and not args.quick)
    write_csv(res, out / "megatron.csv")
    write_png(res, out / "megatron.png")
    md = markdown(res)
    (out / "MEGATRON.md").write_text(md + "\n")
    if args.json:
        print(json.dumps(_jsonable(res)))
    else:
        print(md)
        print(f"wrote {out / 'megatron.csv'}, {out / 'megatron.png'}, {out / 'MEGATRON.md'} "
              f"({res['elapsed_s']:.0f} s)")
    return 0


def main(argv: list[str] | None = None) -> int:
    return _cli.run(_main, argv, PROG)


if __name__ == "__main__":
    sys.exit(main())
