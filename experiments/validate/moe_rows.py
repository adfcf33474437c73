"""The mixture-of-experts rows: Megatron-Bridge's H100 runs of Qwen3 30B-A3B and GPT-OSS 120B
(``experiments/data/megatron_bridge_h100_moe.csv``), each scored by ``python -m piper score``'s
logic (:func:`piper.frontend.score.score_layout`) from the row's own settings, the error in
tokens/s per GPU (the published figure; Megatron-Bridge's TFLOP/s use its own FLOP count).

Settings a row does not state, and what is assumed (:data:`MOE_ASSUMPTIONS`): the presets'
shapes (their HF configs, sequence 4,096 as in the rows), no recomputation when it fits (else
selective, else full), the distributed optimizer, fp32 gradient reduction, the gradient reduce and
weight gather overlapped, flash attention, balanced routing (the benchmarks force-balance the load),
dropless (capacity factor: the documented default), FP8 for the FP8 / FP8-CS rows. The 25.09 row
("tokendrop", precision not stated) is left out: its capacity factor and precision are unknown.

``python -m experiments.validate.moe_rows [--json]`` prints the rows with the catalog's H100
constants and with the constants ``python -m experiments.validate`` fits on the Megatron-LM README
table (out of sample either way: nothing is fitted on these rows).
"""

from __future__ import annotations

import csv
import json
import sys
from dataclasses import replace
from typing import Any

from experiments.validate.rows import DATA_DIR, Case
from piper.frontend.hardware import hardware
from piper.frontend.presets import preset
from piper.frontend.score import Layout, score_layout
from piper.frontend.workload import TrainingSetup

__all__ = ["MOE_ASSUMPTIONS", "MOE_FILE", "markdown", "moe_cases", "moe_records"]

MOE_FILE = "megatron_bridge_h100_moe.csv"
#: the CSV's model names -> presets
MODELS = {"Qwen3_30B_a3B": "qwen3-30b-a3b", "GPT OSS 120B": "gpt-oss-120b"}
MOE_ASSUMPTIONS = [
    ("Megatron-Bridge does not state: recomputation (none when it fits, else selective, else full), the "
     "distributed optimizer (on), fp32 gradient reduction, --overlap-grad-reduce / --overlap-param-gather (on), "
     "flash attention (on); sequence parallelism is moot (t = 1 in every row)"),
    "balanced routing (the benchmarks force-balance the expert load), dropless; FP8 and FP8-CS rows: FP8 products",
    "GPT-OSS: full causal attention on every layer (its alternating 128-token sliding window is not modelled)",
    "the 25.09 'tokendrop' row is left out (capacity factor and precision not stated)",
]


def moe_cases() -> list[Case]:
    """The rows as cases (the published time = global batch x sequence / (tokens/s per GPU x GPUs))."""
    with open(DATA_DIR / MOE_FILE, newline="") as fh:
        raw = list(csv.DictReader(fh))
    hw = hardware("h100")
    out = []
    for r in raw:
        model = r["model"].strip()
        if model not in MODELS:
            continue  # the 25.09 "tokendrop" row (module docstring)
        gpus, t, p, e = (int(r[k]) for k in ("gpus", "tensor_parallel", "pipeline_parallel", "expert_parallel"))
        cp = int(r["context_parallel"])
        if cp != 1:
            continue
        vp = int(r["virtual_stages"]) if r["virtual_stages"].strip() else 1
        mb, gb, seq = int(r["micro_batch"]), int(r["global_batch"]), int(r["seq"])
        precision = "fp8" if r["precision"].upper().startswith("FP8") else "bf16"
        cfg = preset(MODELS[model]).with_changes(micro_batch=mb, seq_length=seq, precision=precision)
        setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=True,
                              grad_bytes=4, flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True)
        layout = Layout(tp=t, pp=p, dp=gpus // (t * p), recompute="none", sequence_parallel=t > 1, vp=vp, ep=e)
        tokens_per_gpu = float(r["tokens_per_s_per_gpu"])
        time_s = gb * seq / (tokens_per_gpu * gpus)
        out.append(Case("bridge-moe", f"{MODELS[model]} {r['release']}", cfg, hw, setup, layout, time_s,
                        float(r["tflops_per_gpu"]), "h100-sxm-80gb", notes=r["precision"],
                        extra={"published_tokens_per_s_per_gpu": tokens_per_gpu}))
    return out


def moe_records(params: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    """Every row scored (with ``params`` = (e_max, d0) replacing the catalog's, when given): the
    predicted tokens/s per GPU and its error against the published figure."""
    out = []
    for case in moe_cases():
        hw = case.hw if params is None else case.hw.with_changes(gemm_efficiency=params[0], gemm_half_dim=params[1])
        m: dict[str, Any] = {}
        for rc in ("none", "selective", "full"):
            m = score_layout(case.cfg, hw, case.setup, replace(case.layout, recompute=rc))
            if m["batch_time_s"] is not None:
                break
        pub = case.extra["published_tokens_per_s_per_gpu"]
        pred = m["tokens_per_s_per_gpu"]
        b = m.get("bottleneck", {}).get("seconds", {})
        out.append({
            "table": case.table, "row": case.name, "gpus": case.layout.gpus, "tp": case.layout.tp,
            "pp": case.layout.pp, "dp": case.layout.dp, "vp": case.layout.vp, "ep": case.layout.ep,
            "micro_batch": case.cfg.micro_batch, "global_batch": case.setup.global_batch,
            "precision": case.cfg.precision, "tmpc": m["tmpc"] if pred is None else m.get("tmpc"),
            "recompute": m["recompute"],
            "published_tokens_per_s_per_gpu": pub, "predicted_tokens_per_s_per_gpu": pred,
            "tokens_error_percent": None if pred is None else 100 * (pred / pub - 1),
            "published_time_s": case.published_time_s, "predicted_time_s": m["batch_time_s"],
            "max_memory_gb": m["max_memory_bytes"] / 1e9, "fits": m["fits"],
            **{f"{k}_s": v for k, v in b.items()},
        })
    return out


def markdown(records: list[dict[str, Any]], title: str) -> str:
    """The rows as a Markdown table."""
    lines = [f"### {title}", "",
             "| row | GPUs | t | p | v | e | b | B | prec | recompute | published tok/s/GPU | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        pred = "-" if r["predicted_tokens_per_s_per_gpu"] is None else f"{r['predicted_tokens_per_s_per_gpu']:.0f}"
        err = "-" if r["tokens_error_percent"] is None else f"{r['tokens_error_percent']:+.1f}%"
        lines.append(f"| {r['row']} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['vp']} | {r['ep']} | {r['micro_batch']} "
                     f"| {r['global_batch']} | {r['precision']} | {r['recompute']} | {r['published_tokens_per_s_per_gpu']:.0f} "
                     f"| {pred} | {err} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from experiments.validate.fit import fit, predict_time_s
    from experiments.validate.rows import readme_cases

    cases = readme_cases()
    fitted = fit(cases, predict_time_s, (cases[0].hw.gemm_efficiency, cases[0].hw.gemm_half_dim))
    res = {"catalog": moe_records(), "readme_fit": moe_records(fitted), "fitted": list(fitted),
           "assumptions": MOE_ASSUMPTIONS}
    if "--json" in argv:
        print(json.dumps(res))
    else:
        print(markdown(res["catalog"], "catalog H100 constants (e_max 0.70, d0 48)"))
        print()
        print(markdown(res["readme_fit"], f"README-fitted constants (e_max {fitted[0]:.3f}, d0 {fitted[1]:.0f})"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
