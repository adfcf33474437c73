"""Run the validation: fit per accelerator, leave-one-out, score every row, the memory check."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from experiments.validate.context_rows import CONTEXT_ASSUMPTIONS, attention_kernel_readings, llama3_context_cases
from experiments.validate.fit import fit, leave_one_out, predict_time_s, score_case
from experiments.validate.memory import memory_rows
from experiments.validate.moe_rows import MOE_ASSUMPTIONS, moe_records, recipe_readings
from experiments.validate.rows import (
    ASSUMPTIONS,
    Case,
    llama3_cases,
    llama3_reserve_reading,
    readme_cases,
    sc21_cases,
)

__all__ = ["DRIFT_TOLERANCE", "catalog_drift", "row_record", "run", "summary"]

#: which table fits which accelerator's constants
FIT_TABLES = {"a100-80gb": "sc21", "h100-sxm-80gb": "readme"}


def row_record(case: Case, params: tuple[float, ...]) -> dict[str, Any]:
    """The row scored with ``params`` (e_max, d0): what ``python -m piper score`` prints, and the error."""
    r = score_case(case, params)
    pred = r["batch_time_s"]
    b = r.get("bottleneck", {}).get("seconds", {})
    return {
        "table": case.table, "row": case.name, "gpus": case.layout.gpus, "tp": case.layout.tp, "cp": case.layout.cp,
        "pp": case.layout.pp,
        "dp": case.layout.dp, "vp": r["vp"], "micro_batch": r["micro_batch"],
        "global_batch": case.setup.global_batch, "tmpc": r.get("tmpc"),
        "published_tflops_per_gpu": case.published_tflops_per_gpu,
        "published_time_s": case.published_time_s, "predicted_time_s": pred,
        "error_percent": None if pred is None else 100 * (pred / case.published_time_s - 1),
        "max_memory_gb": r["max_memory_bytes"] / 1e9, "memory_limit_gb": r["memory_limit_bytes"] / 1e9,
        "fits": r["fits"], "mfu": r.get("mfu"),
        **{f"{k}_s": v for k, v in b.items()},
    }


def run(quick: bool = False, loo: bool = True, log: Callable[[str], None] | None = None,
        time_limit_s: float | None = None) -> dict[str, Any]:
    """Every table: fitted constants, per-row in-sample and LOO errors; the memory check."""
    t0 = time.perf_counter()
    tables = {"sc21": sc21_cases(), "readme": readme_cases(), "llama3": llama3_cases() + llama3_context_cases()}
    if quick:
        tables = {k: v[:3] if k != "llama3" else v for k, v in tables.items()}
    fitted: dict[str, tuple[float, ...]] = {}
    rows: list[dict[str, Any]] = []
    for gpu, name in FIT_TABLES.items():
        cases = tables[name]
        start = (cases[0].hw.gemm_efficiency, cases[0].hw.gemm_half_dim)
        fitted[gpu] = fit(cases, predict_time_s, start, time_limit_s=time_limit_s)
        if log:
            log(f"{name}: fitted e_max {fitted[gpu][0]:.4f}, d0 {fitted[gpu][1]:.1f} on {len(cases)} rows")
        loo_out = leave_one_out(cases, predict_time_s, fitted[gpu], log=log, time_limit_s=time_limit_s) if loo else [None] * len(cases)
        for case, lo in zip(cases, loo_out):
            rec = row_record(case, fitted[gpu])
            rec["in_sample_error_percent"] = rec.pop("error_percent")
            rec["loo_error_percent"] = None if lo is None else lo["error_percent"]
            rec["loo_e_max"] = None if lo is None else lo["params"][0]
            rec["loo_d0"] = None if lo is None else lo["params"][1]
            rows.append(rec)
    for case in tables["llama3"]:
        rec = row_record(case, fitted[case.gpu])
        rec["in_sample_error_percent"] = None
        rec["loo_error_percent"] = rec.pop("error_percent")  # out of sample: fitted on another table
        rec["loo_e_max"], rec["loo_d0"] = fitted[case.gpu]
        causal = case.extra["causal_time_s"]  # the paper does not give its FLOP count
        rec["published_causal_time_s"] = causal
        rec["causal_error_percent"] = (None if rec["predicted_time_s"] is None
                                       else 100 * (rec["predicted_time_s"] / causal - 1))
        rec.update(llama3_reserve_reading(case, fitted[case.gpu]))
        rows.append(rec)
    return {"fitted": {g: {"e_max": p[0], "d0": p[1], "table": FIT_TABLES[g]} for g, p in fitted.items()},
            "drift": catalog_drift(fitted),
            "rows": rows, "summary": summary(rows), "memory": memory_rows(),
            # the Llama 3 rows under another fused-attention kernel (the paper names neither kernel nor count)
            "attention_kernels": attention_kernel_readings(tables["llama3"], fitted["h100-sxm-80gb"]),
            "assumptions": {**ASSUMPTIONS, "llama3": ASSUMPTIONS["llama3"] + CONTEXT_ASSUMPTIONS},
            # mixture of experts (issue 31; experiments/validate/moe_rows.py): out of sample, H100 constants
            "moe": {"catalog": moe_records(), "readme_fit": moe_records(fitted["h100-sxm-80gb"]),
                    "recipe_readings": recipe_readings(), "assumptions": MOE_ASSUMPTIONS},
            "quick": quick, "loo": loo, "elapsed_s": time.perf_counter() - t0}


#: how far a fit may land from the catalog's values before the run reports a drift (Nelder-Mead stops
#: within about 0.002 of e_max and 2 of d0: fit.py's xatol in its scaled units)
DRIFT_TOLERANCE = {"e_max": 0.005, "d0": 5.0}


def catalog_drift(fitted: dict[str, tuple[float, ...]]) -> dict[str, dict[str, Any]]:
    """Per fitted accelerator: the catalog's e_max and d0 (``piper.frontend.hardware.FITTED_GEMM``,
    what ``plan`` and ``score`` use), this run's fit, and ``drift`` True when they differ by more
    than :data:`DRIFT_TOLERANCE` (the catalog needs the new values)."""
    from piper.frontend.hardware import FITTED_GEMM

    out = {}
    for gpu, (e_max, d0) in fitted.items():
        cat = FITTED_GEMM.get(gpu)
        drift = cat is None or abs(cat.e_max - e_max) > DRIFT_TOLERANCE["e_max"] or abs(cat.d0 - d0) > DRIFT_TOLERANCE["d0"]
        out[gpu] = {"catalog_e_max": None if cat is None else cat.e_max, "catalog_d0": None if cat is None else cat.d0,
                    "fitted_e_max": e_max, "fitted_d0": d0, "drift": drift}
    return out


def summary(rows: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per table: mean absolute in-sample and LOO error (percent) and the worst LOO row."""
    out: dict[str, dict[str, float]] = {}
    for table in sorted({r["table"] for r in rows}):
        mine = [r for r in rows if r["table"] == table]
        loo = [abs(r["loo_error_percent"]) for r in mine if r["loo_error_percent"] is not None]
        ins = [abs(r["in_sample_error_percent"]) for r in mine if r["in_sample_error_percent"] is not None]
        out[table] = {"rows": len(mine), "loo_mae_percent": sum(loo) / len(loo) if loo else float("nan"),
                      "in_sample_mae_percent": sum(ins) / len(ins) if ins else float("nan"),
                      "loo_max_abs_percent": max(loo) if loo else float("nan")}
    return out
