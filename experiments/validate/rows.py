"""The published rows as cases to score: each row's own model, hardware, training setup and
layout (the settings a row does not state are the assumptions listed in :data:`ASSUMPTIONS`),
and its published iteration time derived from its TFLOP/s with the source's own FLOP count."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware, hardware
from piper.frontend.presets import preset
from piper.frontend.score import Layout
from piper.frontend.workload import TrainingSetup

__all__ = [
    "ASSUMPTIONS",
    "DATA_DIR",
    "Case",
    "all_cases",
    "llama3_cases",
    "llama3_layout",
    "readme_cases",
    "readme_flops_per_iteration",
    "sc21_cases",
]

#: experiments/data/ (this package is experiments/validate/)
DATA_DIR = Path(__file__).resolve().parent.parent / "data"

#: what each table's rows do not state, and what is assumed instead (reported with the results)
ASSUMPTIONS: dict[str, list[str]] = {
    "sc21": [
        "A100 80 GB in DGX A100 nodes (Selene); FP16 mixed precision: 2-byte gradients, optimizer state on every "
        "replica (no distributed optimizer: it postdates SC'21), gradient all-reduce after the backward pass (no overlap)",
        "full recomputation on every layer, no sequence parallelism, no flash attention (the paper's kernels: "
        "fused scale-mask-softmax), dropout 0.1, [SC21] Section 4.1's scatter/gather of pipeline sends",
        "the interleaved rows with the paper's layers per virtual stage (v = layers per stage / that)",
    ],
    "readme": [
        "the README does not state them: micro-batch 1, no recomputation, sequence parallelism (t > 1; "
        "--tp-comm-overlap needs it), the distributed optimizer (--overlap-param-gather needs it), flash "
        "attention (Transformer Engine), fp32 gradient reduction (Megatron's default for --bf16), BF16",
        "Megatron-LM's GPT defaults: LayerNorm, biases, learned positions, tied embeddings, dropout 0.1, FFN 4h",
        "no interleaving (v = 1): the README does not state it",
    ],
    "llama3": [
        "Meta's layout of [L3] Section 3.3.2: 16 stages of 7, 8 x 14, 7 layers, micro-batch 1, BF16, "
        "sequence parallelism, flash attention, optimizer state and gradients sharded over data parallelism "
        "([L3] Section 3.3.2: FSDP without resharding the weights after the forward pass, i.e. ZeRO-2), "
        "gradient reduce and weight gather overlapped, fp32 gradients",
        "no recomputation when it fits, else selective, else full (the paper does not say); no interleaving "
        "(the paper's interleaved variant is not Megatron's: its v is not stated)",
        "published iteration time from the row's TFLOP/s with Megatron's FLOP count (full attention); "
        "the paper does not give its count",
    ],
}


@dataclass(frozen=True)
class Case:
    """One published row, ready to score."""

    table: str
    name: str
    cfg: TransformerConfig
    hw: Hardware
    setup: TrainingSetup
    layout: Layout
    #: seconds per iteration derived from the published TFLOP/s (or tokens/s)
    published_time_s: float
    published_tflops_per_gpu: float
    #: the catalog GPU whose fitted constants price this row
    gpu: str
    notes: str = ""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)


def _read(name: str) -> list[dict[str, str]]:
    with open(DATA_DIR / name, newline="") as fh:
        return list(csv.DictReader(fh))


def sc21_cases() -> list[Case]:
    """[SC21] Table 1: the published time = eq. (3)'s FLOPs / (TFLOP/s x GPUs)."""
    out = []
    hw = hardware("a100-80gb")
    for r in _read("megatron_sc21_table1.csv"):
        t, p, gpus = int(r["tensor_parallel"]), int(r["pipeline_parallel"]), int(r["gpus"])
        layers, mb, gb = int(r["layers"]), int(r["micro_batch"]), int(r["global_batch"])
        cfg = preset(r["model"]).with_changes(micro_batch=mb, seq_length=2048)
        vsl = r["virtual_stage_layers"].strip()
        vp = (layers // p) // int(vsl) if vsl else 1
        setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=False,
                              grad_bytes=2, flash_attention=False, pipeline_scatter_gather=True)
        layout = Layout(tp=t, pp=p, dp=gpus // (t * p), recompute="full", sequence_parallel=False, vp=vp)
        tflops = float(r["tflops_per_gpu"])
        time_s = costs.sc21_flops_per_iteration(cfg, gb) / (tflops * 1e12 * gpus)
        out.append(Case("sc21", r["model"], cfg, hw, setup, layout, time_s, tflops, "a100-80gb"))
    return out


def readme_flops_per_iteration(cfg: TransformerConfig, global_batch: int) -> float:
    """The Megatron-LM README's count (2024): 12 B s l h^2 [(1 + g/a + s/h) + f/h + V/(2 l h)]."""
    b, s, l, h = global_batch, cfg.seq_length, cfg.layers, cfg.hidden_size
    g_over_a = cfg.kv_heads / cfg.attention_heads
    return 12 * b * s * l * h * h * ((1 + g_over_a + s / h) + cfg.ffn_hidden_size / h + cfg.vocab_size / (2 * l * h))


def readme_cases() -> list[Case]:
    """The Megatron-LM README's H100 weak-scaling rows."""
    out = []
    hw = hardware("h100")
    for r in _read("megatron_lm_readme_h100.csv"):
        if r["table"] != "weak":
            continue
        layers, h, a = int(r["layers"]), int(r["hidden"]), int(r["heads"])
        t, p, d, gpus = (int(r[k]) for k in ("tensor_parallel", "pipeline_parallel", "data_parallel", "gpus"))
        gb = int(r["global_batch"])
        cfg = TransformerConfig(
            name=f"gpt-{r['params_label'].lower()}", layers=layers, hidden_size=h, attention_heads=a, kv_heads=a,
            ffn_hidden_size=4 * h, vocab_size=int(r["vocab"]), seq_length=int(r["seq"]), micro_batch=1)
        setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=True,
                              grad_bytes=4, flash_attention=True, tp_comm_overlap=True, overlap_grad_reduce=True,
                              overlap_param_gather=True)
        layout = Layout(tp=t, pp=p, dp=d, recompute="none", sequence_parallel=t > 1, vp=1)
        tflops = float(r["tflops_per_gpu"])
        time_s = readme_flops_per_iteration(cfg, gb) / (tflops * 1e12 * gpus)
        out.append(Case("readme", cfg.name, cfg, hw, setup, layout, time_s, tflops, "h100-sxm-80gb"))
    return out


def llama3_layout(layers: int = 126, stages: int = 16) -> tuple[int, ...]:
    """[L3] Section 3.3.2: the first and the last pipeline stage hold one layer fewer (7, 8 x 14, 7)."""
    inner = (layers + 2) // stages
    sizes = (inner - 1,) + (inner,) * (stages - 2) + (inner - 1,)
    if sum(sizes) != layers:
        raise ValueError(f"{layers} layers do not fit the layout {sizes}")
    return sizes


def llama3_cases() -> list[Case]:
    """[L3] Table 4's rows without context parallelism (8,192 and 16,384 GPUs)."""
    from piper.frontend.score import check_layout

    out = []
    hw = hardware("h100")
    for r in _read("llama3_table4.csv"):
        if int(r["context_parallel"]) != 1:
            continue
        gpus, t, p, d = (int(r[k]) for k in ("gpus", "tensor_parallel", "pipeline_parallel", "data_parallel"))
        seq = int(r["sequence_length"])
        gb = d * int(r["batch_size_per_dp"])
        cfg = preset("llama3-405b").with_changes(seq_length=seq, micro_batch=1)
        setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=True,
                              grad_bytes=4, flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True,
                              shard_gradients=True)
        tflops = float(r["tflops_per_gpu"])
        time_s = costs.model_flops_per_iteration(cfg, gb) / (tflops * 1e12 * gpus)
        base = Layout(tp=t, pp=p, dp=d, recompute="none", sequence_parallel=True, stage_layers=llama3_layout(cfg.layers, p))
        check_layout(cfg, hw, setup, base)
        out.append(Case("llama3", f"llama3-405b-{gpus}", cfg, hw, setup, base, time_s, tflops, "h100-sxm-80gb"))
    return out


def all_cases() -> list[Case]:
    return sc21_cases() + readme_cases() + llama3_cases()


def with_gemm_efficiency(case: Case, e_max: float) -> Case:
    """``case`` with the matrix products' e_max replaced."""
    return replace(case, setup=replace(case.setup, efficiency=e_max))
