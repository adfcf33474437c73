"""A plan's predicted training speed in a model's terms (``python -m piper plan``): batch time,
tokens/s, TFLOP/s per device, MFU, memory per device and the bottleneck stage, all from the one
evaluator's :class:`~piper.core.evaluate.Score`.

* batch time (seconds per iteration): ``Score.batch_time`` (docs/problem.md §2.4);
* tokens/s = global batch x sequence length / batch time;
* TFLOP/s per device = hardware FLOPs per iteration (with the recomputation the plan
  chose, counted per layer) / batch time / devices used;
* MFU = model FLOPs per iteration (no recomputation) / batch time / (devices used x peak
  FLOP/s), as in the PaLM paper's definition (Chowdhery et al. 2022, appendix B).
"""

from __future__ import annotations

import math
from typing import Any

from piper.core.evaluate import Score, memory_terms
from piper.core.pass_order import schedule_order_memory
from piper.frontend.costs import (
    head_forward_flops,
    layer_train_flops,
    layer_train_flops_at,
    model_flops_per_iteration,
)
from piper.frontend.tmpc import parse_tmpc_id
from piper.frontend.workload import TrainingSetup

__all__ = ["memory_breakdown", "memory_breakdown_text", "plan_metrics"]


def memory_breakdown(problem: Any, plan: Any, score: Score) -> dict[str, Any]:
    """The fullest stage's (an interleaved plan's: device group's) memory per device by term, bytes
    (:func:`piper.core.evaluate.memory_terms`): its 1-based ``stage``, the activations of the
    ``microbatches_in_flight``, the state each device keeps whole, the state sharded over d, the
    expert terms; they add up to the stage's memory."""
    terms = memory_terms(problem, plan, score)
    i = max(range(len(terms)), key=lambda k: score.stages[k].memory)
    t = terms[i]
    return {"stage": i + 1, "activations_bytes": t.activations, "microbatches_in_flight": t.y,
            "state_bytes": t.state, "sharded_state_bytes": t.sharded_state, "expert_bytes": t.experts}


def memory_breakdown_text(b: dict[str, Any]) -> str:
    """:func:`memory_breakdown` in one line for people (GB)."""
    gb, y = 1e9, b["microbatches_in_flight"]
    return (f"stage {b['stage']}: activations {b['activations_bytes'] / gb:.2f} GB ({y:.4g} micro-batch"
            f"{'' if y == 1 else 'es'} in flight), weights, gradients and unsharded state {b['state_bytes'] / gb:.2f} "
            f"GB, sharded optimizer state {b['sharded_state_bytes'] / gb:.2f} GB"
            + (f", experts {b['expert_bytes'] / gb:.2f} GB" if b["expert_bytes"] else ""))


def plan_metrics(cfg: Any, hw: Any, setup: TrainingSetup, problem: Any, plan: Any, score: Score) -> dict[str, Any]:
    """Predicted speed of ``plan`` (units in the keys)."""
    devices = plan.devices_used
    batch_time = score.batch_time
    tokens = setup.global_batch * cfg.seq_length
    # hardware FLOPs with the recomputation each transformer layer's TMPC does (per sequence,
    # times the global batch), plus the output layer (never recomputed)
    node = {nd.id: nd for nd in problem.nodes}
    per_sequence = 3 * head_forward_flops(cfg)
    for st in plan.stages:
        for v in st.nodes:
            if node[v].kind == "transformer":
                recompute, _sequence_parallel = parse_tmpc_id(st.tmpcs[v])
                layer = node[v].layer_index
                per_sequence += (layer_train_flops(cfg, recompute, setup.recompute_modules) if layer is None
                                 else layer_train_flops_at(cfg, layer, recompute, setup.recompute_modules))
    hw_flops = per_sequence * setup.global_batch
    model_flops = model_flops_per_iteration(cfg, setup.global_batch)
    ok = math.isfinite(batch_time) and batch_time > 0
    return {
        "devices_used": devices,
        "devices": problem.devices,
        "stages": plan.groups,
        "virtual_stages": plan.schedule.virtual_stages,
        "batch_time_s": batch_time if ok else None,
        "tps_s": score.tps if math.isfinite(score.tps) else None,
        "tokens_per_s": tokens / batch_time if ok else None,
        "tflops_per_device": hw_flops / batch_time / devices / 1e12 if ok else None,
        "mfu": model_flops / batch_time / (devices * hw.peak_flops) if ok else None,
        "model_flops_per_iteration": model_flops,
        "hardware_flops_per_iteration": hw_flops,
        "max_memory_per_device_bytes": max(s.memory for s in score.stages),
        # a diagnostic: activations counted by the schedule's pass order (docs/problem.md §9.2's limit)
        "schedule_order_memory_bytes": max(schedule_order_memory(problem, plan, score)),
        "memory_limit_bytes": problem.memory_per_device,
        "memory_breakdown": memory_breakdown(problem, plan, score),
        "bottleneck_stage": None if score.bottleneck is None else score.bottleneck + 1,
    }
