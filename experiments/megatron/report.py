"""The result as Markdown tables, a CSV, a PNG and JSON."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from piper.frontend import preset
from piper.render.headless import headless_pyplot


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
    plt = headless_pyplot()
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

