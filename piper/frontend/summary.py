"""Model-level numbers of a generated workload: parameters, FLOPs per iteration,
per-layer costs by tensor-parallel degree and TMPC (for reports and ``--json``)."""

from __future__ import annotations

from typing import Any

from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.moe_costs import layer_costs, layer_variant
from piper.frontend.workload import TrainingSetup, node_costs, tensor_parallel_degrees

__all__ = ["model_summary", "render_summary"]


def _last_layer_costs(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, t: int) -> list[Any]:
    """The TMPCs of the last transformer layer (an MoE layer in every MoE preset; MoE and MLA
    layers from piper/frontend/moe_costs.py)."""
    variant = layer_variant(cfg, "transformer", cfg.layers - 1)
    window = cfg.attention_window(cfg.layers - 1)
    if variant is None:
        return node_costs(cfg, hw, setup, "transformer", t, window)
    return layer_costs(cfg, hw, setup, t, variant, setup.nodes * hw.devices_per_node, window)


def model_summary(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup) -> dict[str, Any]:
    """A JSON-ready summary. FLOPs are for the whole global batch; ``layer`` maps
    t -> TMPC id -> one transformer layer's time (seconds) and memory (bytes per device)."""
    hw_flops = costs.hardware_flops_per_iteration(cfg, setup.global_batch, setup.recompute, setup.recompute_modules)
    devices = setup.nodes * hw.devices_per_node
    layer: dict[str, dict[str, dict[str, float]]] = {}
    for t in tensor_parallel_degrees(cfg, hw):
        layer[str(t)] = {
            c.tmpc_id: {
                "time_per_sample_s": c.time_per_sample_s,
                "communication_s": c.communication_s,
                "activation_bytes": c.activation_bytes,
                "state_bytes": c.state_bytes,
                "sharded_state_bytes": c.sharded_state_bytes,
            }
            for c in _last_layer_costs(cfg, hw, setup, t)
        }
    return {
        "model": cfg.name,
        "params": costs.model_params(cfg),
        "params_per_layer": costs.layer_params(cfg).total,
        "active_params": costs.active_params(cfg),
        "params_sc21_closed_form": costs.sc21_params(cfg),
        "model_flops_per_iteration": costs.model_flops_per_iteration(cfg, setup.global_batch),
        "hardware_flops_per_iteration": hw_flops,
        "hardware_flops_recompute": setup.recompute,
        # what the TMPC "selective" recomputes (piper/frontend/recompute.py)
        "recompute_modules": list(setup.recompute_modules),
        "sc21_flops_per_iteration": costs.sc21_flops_per_iteration(cfg, setup.global_batch),
        # the FLOPs at e_max of the peak on every device (no communication, no memory-bound kernels)
        "compute_bound_iteration_s": hw_flops / (devices * hw.peak_flops * (setup.efficiency or hw.gemm_efficiency)),
        "global_batch": setup.global_batch,
        "micro_batch": cfg.micro_batch,
        "microbatches": setup.global_batch // cfg.micro_batch,
        "seq_length": cfg.seq_length,
        "gpu": hw.name,
        "devices": devices,
        "devices_per_node": hw.devices_per_node,
        "tensor_parallel_degrees": tensor_parallel_degrees(cfg, hw),
        "layer": layer,
    }


def _gb(x: float) -> str:
    return f"{x / 1e9:.3f} GB"


def render_summary(s: dict[str, Any]) -> str:
    """Human-readable lines of :func:`model_summary`."""
    active = s.get("active_params", s["params"])
    active = f"; {active / 1e9:.4g} B active per token" if active != s["params"] else ""
    lines = [
        f"model         {s['model']}: {s['params'] / 1e9:.4g} B parameters ({s['params']:,}{active}), "
        f"sequence {s['seq_length']}, micro-batch {s['micro_batch']}",
        f"batch         {s['global_batch']} sequences = N {s['microbatches']} micro-batches (one Piper sample = one micro-batch)",
        f"FLOPs/iter    model {s['model_flops_per_iteration']:.4e}, hardware {s['hardware_flops_per_iteration']:.4e} "
        f"({s['hardware_flops_recompute']} recomputation"
        + (f" of {', '.join(s['recompute_modules'])}" if s["hardware_flops_recompute"] == "selective" else "")
        + f"); SC'21 eq. (3) {s['sc21_flops_per_iteration']:.4e}",
        f"cluster       {s['devices']} x {s['gpu']} ({s['devices_per_node']} per node); compute-bound iteration "
        f"{s['compute_bound_iteration_s']:.4g} s",
        "per transformer layer (the last), per device (time per micro-batch; activations per micro-batch in flight; weights+grads; sharded optimizer):",
        f"  {'t':>2}  {'TMPC':<16} {'time':>11} {'activations':>14} {'state':>12} {'sharded':>12}",
    ]
    for t, by_id in s["layer"].items():
        for tid, c in by_id.items():
            lines.append(
                f"  {t:>2}  {tid:<16} {c['time_per_sample_s'] * 1e3:>8.3f} ms {_gb(c['activation_bytes']):>14} "
                f"{_gb(c['state_bytes']):>12} {_gb(c['sharded_state_bytes']):>12}"
            )
    return "\n".join(lines)
