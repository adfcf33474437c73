"""The experiment: sections 1-4 for the chosen rows of [SC21] Table 1 and [L3] Table 4, as one result."""

from __future__ import annotations

import math
import time
from typing import Any

from experiments.megatron.data import Table1Row
from experiments.megatron.llama3 import score_llama3
from experiments.megatron.model import calibrate_efficiency, flops_check, score_megatron
from experiments.megatron.planner import planner_summary, run_planner


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
                rec[key] = planner_summary(found, meg["problem"], meg["cfg"], meg["hw"], meg["setup"], row.gpus,
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
