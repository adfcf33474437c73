"""The published rows as cases to score: each row's own model, hardware, training setup and
layout (the settings a row does not state are the assumptions listed in :data:`ASSUMPTIONS`),
and its published iteration time derived from its TFLOP/s with the source's own FLOP count."""

from __future__ import annotations

import csv
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from experiments.validate.fit import score_case
from piper.frontend import costs
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware, hardware
from piper.frontend.presets import preset
from piper.frontend.score import Layout
from piper.frontend.workload import TrainingSetup

__all__ = [
    "ASSUMPTIONS",
    "DATA_DIR",
    "LLAMA3_STATED_VP",
    "LLAMA3_VIRTUAL_STAGES",
    "Case",
    "all_cases",
    "llama3_cases",
    "llama3_case",
    "llama3_layout",
    "llama3_reserve_reading",
    "llama3_row",
    "readme_cases",
    "readme_flops_per_iteration",
    "readme_variants",
    "readme_virtual_stages",
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
        "the README does not state them: no recomputation, sequence parallelism (t > 1; "
        "--tp-comm-overlap needs it), the distributed optimizer (--overlap-param-gather needs it), flash "
        "attention (Transformer Engine), fp32 gradient reduction (Megatron's default for --bf16), BF16",
        "Megatron-LM's GPT defaults: LayerNorm, biases, learned positions, tied embeddings, dropout 0.1, FFN 4h",
        "the interleaved schedule on the rows with p > 1: the README says pipeline-parallel communication is "
        "overlapped with computation (\"enabled by default\"), which Megatron-LM does only with the interleaved "
        "schedule (megatron/training/arguments.py: overlap_p2p_comm is switched off without it); v is not stated: "
        "the score's choice under the catalog's H100 constants, over the v > 1 Megatron allows (v divides the layers "
        "per stage) up to 8 or one layer per virtual stage",
        "the micro-batch is not stated either: the score's choice (b from 1, 2, 4, 8, 16 dividing the sequences per "
        "replica, each with its v, those that fit in memory; the fastest under the constants being evaluated, in "
        "every fit and LOO fit too): the runs are taken to be tuned, as a planner would tune them",
    ],
    "llama3": [
        "Meta's layout of [L3] Section 3.3.2: 16 stages of 7, 8 x 14, 7 layers, micro-batch 1, BF16, "
        "sequence parallelism, flash attention, optimizer state and gradients sharded over data parallelism "
        "([L3] Section 3.3.2: FSDP without resharding the weights after the forward pass, i.e. ZeRO-2), "
        "gradient reduce and weight gather overlapped, fp32 gradients",
        "the layout the paper states: no recomputation ([L3] Section 3.3.2: \"we could pretrain Llama 3 on "
        "sequences of 8K tokens without activation checkpointing\"; the long-context row likewise when it fits, "
        "else selective, else full) and the interleaved schedule with v = 8 (Meta's variant of it modelled as "
        "Megatron's; [L3] Section 3.3.2: after one layer fewer in the first and the last stage \"the first model "
        "chunk on the first stage has only the embedding\", which with 126 + 2 layers on 16 ranks only chunks "
        "of one layer give; Megatron's split with the embedding and the loss counted as a layer each)",
        "memory checked against the device's whole memory (the run proves the layout ran): the planner's "
        "default reserve (7.5%) is a margin for the plans it recommends, not a measurement of Meta's stack; "
        "each row also lists its memory against that default limit and the score's choice of v (1, 2, 4, 8) "
        "under it. Changed after the results were known: until this revision the rows were scored with that "
        "choice only (8,192 GPUs: v = 1, +32.7%; docs/results/validation.md)",
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
        layout = Layout(tp=t, pp=p, dp=d, recompute="none", sequence_parallel=t > 1)
        variants = readme_variants(cfg, hw, setup, layout)
        tflops = float(r["tflops_per_gpu"])
        time_s = readme_flops_per_iteration(cfg, gb) / (tflops * 1e12 * gpus)
        out.append(Case("readme", cfg.name, variants[0][0], hw, setup, variants[0][1], time_s, tflops,
                        "h100-sxm-80gb", extra={"variants": variants}))
    return out


def readme_variants(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup,
                    layout: Layout) -> tuple[tuple[TransformerConfig, Layout], ...]:
    """The (micro-batch, v) a README row may have run, which the README does not state: b from 1, 2, 4,
    8, 16 dividing the sequences per replica (with p > 1 only those leaving a multiple of p micro-batches,
    which the interleaved schedule needs), each with v by :func:`readme_virtual_stages` under ``hw``,
    keeping those that fit in memory (memory does not depend on the fitted constants). The row is scored
    with the fastest of them under the constants being evaluated (``fit.score_case``): the score's
    choice, as if NVIDIA tuned both (see ASSUMPTIONS)."""
    from piper.frontend.score import score_layout

    per_replica = setup.global_batch // layout.dp
    out = []
    for b in (1, 2, 4, 8, 16):
        if per_replica % b or (layout.pp > 1 and (per_replica // b) % layout.pp):
            continue
        c = cfg.with_changes(micro_batch=b)
        lay = replace(layout, vp=readme_virtual_stages(c, hw, setup, layout))
        if score_layout(c, hw, setup, lay)["fits"]:
            out.append((c, lay))
    return tuple(out) or ((cfg, replace(layout, vp=readme_virtual_stages(cfg, hw, setup, layout))),)


def llama3_layout(layers: int = 126, stages: int = 16, vp: int = 1) -> tuple[int, ...]:
    """[L3] Section 3.3.2: "we reduce one Transformer layer each from the first and the last stages",
    i.e. Megatron-Core's split with the embedding and the loss each counted as a layer
    (:func:`piper.frontend.score.megatron_split`): (7, 8 x 14, 7); interleaved (``vp`` chunks per stage,
    stages x vp entries in pipeline order) every chunk holds (layers + 2) / (stages vp) layers, the first
    and the last one fewer (v = 8: the first chunk only the embedding, the last only the output layer)."""
    from piper.frontend.score import megatron_split

    return megatron_split(layers, stages, vp, embedding=True, loss=True)


#: the virtual stages of the layout [L3] Section 3.3.2 describes, which the Llama 3 rows are scored
#: with: after one layer fewer in the first and the last stage, "the first model chunk on the first stage
#: has only the embedding, and the last model chunk on the last stage has only output projection and
#: loss calculation", which with 126 + 2 layers over 16 stages only chunks of one layer give
LLAMA3_STATED_VP = 8
#: the virtual stages a planner's default memory reserve lets the score choose among for a Llama 3 row
#: (:func:`llama3_reserve_reading`): 126 + 2 layers over 16 stages allow 1, 2, 4 or 8 chunks per stage
LLAMA3_VIRTUAL_STAGES = (1, 2, 4, 8)


def readme_virtual_stages(cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout) -> int:
    """v of a README row: 1 without pipelining; else the score's choice under ``hw`` (the catalog's
    constants): the least predicted batch time over the v > 1 Megatron-LM allows (v divides the
    layers per stage, ``--num-layers-per-virtual-pipeline-stage``) that are at most 8 (``plan``'s
    limit) or one layer per virtual stage (see ASSUMPTIONS)."""
    from piper.frontend.score import score_layout

    if layout.pp == 1:
        return 1
    per = cfg.layers // layout.pp
    best = (float("inf"), per)
    for v in range(2, per + 1):
        if per % v or (v > 8 and v != per):
            continue
        t = score_layout(cfg, hw, setup, replace(layout, vp=v))["batch_time_s"]
        if t is not None and t < best[0]:
            best = (t, v)
    return best[1]


def llama3_row(r: dict[str, str], hw: Hardware) -> tuple[int, int, int, int, int, TransformerConfig,
                                                           TrainingSetup, float, float]:
    """One row of [L3] Table 4 on ``hw``: gpus, TP, PP, DP, the global batch (sequences), Llama 3
    405B at the row's sequence length, the setup (the assumptions of every Llama 3 row; no memory
    reserve: a published run's memory is checked against the whole device), the published TFLOP/s per
    GPU and the iteration time it gives (Megatron's FLOP count)."""
    gpus, t, p, d = (int(r[k]) for k in ("gpus", "tensor_parallel", "pipeline_parallel", "data_parallel"))
    seq = int(r["sequence_length"])
    gb = d * int(r["batch_size_per_dp"])
    cfg = preset("llama3-405b").with_changes(seq_length=seq, micro_batch=1)
    setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=True,
                          grad_bytes=4, flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True,
                          shard_gradients=True, memory_reserve_bytes=0.0)
    tflops = float(r["tflops_per_gpu"])
    time_s = costs.model_flops_per_iteration(cfg, gb) / (tflops * 1e12 * gpus)
    return gpus, t, p, d, gb, cfg, setup, tflops, time_s


def llama3_case(table: str, name: str, cfg: TransformerConfig, hw: Hardware, setup: TrainingSetup, layout: Layout,
                time_s: float, tflops: float, gpus: int) -> Case:
    """A Llama 3 row as a :class:`Case`: ``layout`` at :data:`LLAMA3_STATED_VP` (the row's own), the
    layouts of :data:`LLAMA3_VIRTUAL_STAGES` for :func:`llama3_reserve_reading`, and the published time
    with the causal half of attention (the paper does not give its FLOP count)."""
    from piper.frontend.score import check_layout, model_flops

    def at(vp: int) -> Layout:
        lay = replace(layout, vp=vp, stage_layers=llama3_layout(cfg.layers, layout.pp, vp))
        check_layout(cfg, hw, setup, lay)  # a FrontendError here is a bug in the row's layout
        return lay

    causal_s = model_flops(cfg, setup.global_batch, causal=True) / (tflops * 1e12 * gpus)
    return Case(table, name, cfg, hw, setup, at(LLAMA3_STATED_VP), time_s, tflops, "h100-sxm-80gb",
                extra={"causal_time_s": causal_s, "reserve_variants": tuple((cfg, at(v)) for v in LLAMA3_VIRTUAL_STAGES)})


def llama3_cases() -> list[Case]:
    """[L3] Table 4's rows without context parallelism (8,192 and 16,384 GPUs)."""
    out = []
    hw = hardware("h100")
    for r in _read("llama3_table4.csv"):
        if int(r["context_parallel"]) != 1:
            continue
        gpus, t, p, d, _gb, cfg, setup, tflops, time_s = llama3_row(r, hw)
        lay = Layout(tp=t, pp=p, dp=d, recompute="none", sequence_parallel=True)
        out.append(llama3_case("llama3", f"llama3-405b-{gpus}", cfg, hw, setup, lay, time_s, tflops, gpus))
    return out


def llama3_reserve_reading(case: Case, params: tuple[float, float]) -> dict[str, Any]:
    """A Llama 3 row as a planner keeping the default memory reserve sees it, with (e_max, d0) =
    ``params``: the row's own layout against the default limit (``fits_default``), and the score's choice
    over ``case.extra["reserve_variants"]`` (v = 1, 2, 4, 8; per v the least recomputation that fits, the
    least predicted time winning) with its time and error (None when nothing fits)."""
    default = replace(case.setup, memory_reserve_bytes=None)
    own = score_case(replace(case, setup=default, extra={}), params)
    stated_fits = own["recompute"] == case.layout.recompute and own["batch_time_s"] is not None
    chosen = score_case(replace(case, setup=default, extra={"variants": case.extra["reserve_variants"]}), params)
    pred = chosen["batch_time_s"]
    return {"default_limit_gb": own["memory_limit_bytes"] / 1e9, "fits_default": stated_fits,
            "default_vp": chosen["vp"], "default_tmpc": chosen.get("tmpc"), "default_time_s": pred,
            "default_memory_gb": chosen["max_memory_bytes"] / 1e9,
            "default_error_percent": None if pred is None else 100 * (pred / case.published_time_s - 1)}


def all_cases() -> list[Case]:
    return sc21_cases() + readme_cases() + llama3_cases()


def with_gemm_efficiency(case: Case, e_max: float) -> Case:
    """``case`` with the matrix products' e_max replaced."""
    return replace(case, setup=replace(case.setup, efficiency=e_max))
