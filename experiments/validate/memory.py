"""The planner's memory against Korthikanti et al. 2022 ([K22], "Reducing Activation Recomputation
in Large Transformer Models"), Figure 1: per GPU of the first pipeline stage, weights + optimizer
state and activations, for the four models of its Table 3 (22B, 175B, 530B, 1T; sequence 2,048,
vocabulary 51,200, t = 8; micro-batch 1 here), without recomputation and with sequence
parallelism + selective recomputation.

The paper's numbers are its formulas: weights + optimizer state = 16 bytes per parameter of the
stage (mixed-precision Adam, [ZeRO] 2 + 2 + 12) and activations = the first stage's p
micro-batches in flight x l/p layers = l layers' worth: s b h l (10 + 24/t + 5as/(ht)) and
s b h l 34/t ([K22] Section 4.2.3, eq. (5) and Table 2), plus [K22] Section 4.3's embedding
dropout mask (p s b h / t with p in flight... counted by the planner, not in the paper's total).
The planner's numbers are the evaluator's memory of the first stage of the uniform plan (its
a y + b + s/d: docs/problem.md §2.2) split into its y-proportional and constant parts.
"""

from __future__ import annotations

from typing import Any

from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import hardware
from piper.frontend.workload import TrainingSetup, node_costs

__all__ = ["K22_MODELS", "memory_rows"]

#: [K22] Table 3: name -> (attention heads, hidden size, layers, t, p)
K22_MODELS: dict[str, tuple[int, int, int, int, int]] = {
    "22B": (64, 6144, 48, 8, 1),
    "175B": (96, 12288, 96, 8, 8),
    "530B": (128, 20480, 105, 8, 35),
    "1T": (160, 25600, 128, 8, 64),
}


def _cfg(name: str) -> TransformerConfig:
    a, h, l, _, _ = K22_MODELS[name]
    return TransformerConfig(name=f"k22-{name}", layers=l, hidden_size=h, attention_heads=a, kv_heads=a,
                             ffn_hidden_size=4 * h, vocab_size=51_200, seq_length=2_048, micro_batch=1)


def paper_numbers(name: str) -> dict[str, float]:
    """[K22]'s formulas for the first stage, bytes per GPU."""
    a, h, l, t, p = K22_MODELS[name]
    cfg = _cfg(name)
    s, b = cfg.seq_length, cfg.micro_batch
    stage_params = l // p * costs.layer_params(cfg).total / t + cfg.vocab_size * h / t
    return {
        "weights_optimizer_bytes": 16 * stage_params,
        "activations_none_bytes": s * b * h * l * (10 + 24 / t + 5 * a * s / (h * t)),
        "activations_sp_selective_bytes": s * b * h * l * 34 / t,
    }


def planner_numbers(name: str) -> dict[str, float]:
    """The front end's first stage: l/p layers + the embedding, y = p micro-batches in flight."""
    a, h, l, t, p = K22_MODELS[name]
    cfg = _cfg(name)
    hw = hardware("a100-80gb")
    setup = TrainingSetup(distributed_optimizer=False, grad_bytes=2, flash_attention=False)
    layer = {c.tmpc_id: c for c in node_costs(cfg, hw, setup, "transformer", t)}
    emb = {c.tmpc_id: c for c in node_costs(cfg, hw, setup, "embedding", t)}
    n = l // p
    state = n * layer["none"].state_bytes + emb["none"].state_bytes
    return {
        "weights_optimizer_bytes": state,
        "activations_none_bytes": p * (n * layer["none"].activation_bytes + emb["none"].activation_bytes),
        "activations_sp_selective_bytes": p * (n * layer["selective+sp"].activation_bytes
                                               + emb["none+sp"].activation_bytes),
    }


def memory_rows() -> list[dict[str, Any]]:
    out = []
    for name in K22_MODELS:
        paper, ours = paper_numbers(name), planner_numbers(name)
        for key in paper:
            out.append({"model": name, "quantity": key.replace("_bytes", ""), "paper_gb": paper[key] / 1e9,
                        "planner_gb": ours[key] / 1e9, "difference_percent": 100 * (ours[key] / paper[key] - 1)})
    return out
