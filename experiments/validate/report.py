"""CSV, PNG and Markdown of a validation run."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

__all__ = ["markdown", "write_csv", "write_png"]

TABLE_TITLES = {"sc21": "SC'21 Table 1 (A100)", "readme": "Megatron-LM README, H100 weak scaling",
                "llama3": "Llama 3 405B, Table 4 (H100)"}


def write_csv(res: dict[str, Any], path: Path) -> None:
    rows = res["rows"]
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=keys)
        w.writeheader()
        for r in rows:
            w.writerow(r)


def write_png(res: dict[str, Any], path: Path) -> None:
    from piper.render.headless import headless_pyplot

    plt = headless_pyplot()
    fig, ax = plt.subplots(figsize=(6.5, 6))
    marks = {"sc21": "o", "readme": "s", "llama3": "^"}
    lo, hi = float("inf"), 0.0
    for table, mark in marks.items():
        pts = [(r["published_time_s"], r["predicted_time_s"]) for r in res["rows"]
               if r["table"] == table and r["predicted_time_s"] is not None]
        if not pts:
            continue
        xs, ys = zip(*pts)
        ax.scatter(xs, ys, marker=mark, label=TABLE_TITLES[table])
        lo, hi = min(lo, *xs, *ys), max(hi, *xs, *ys)
    ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
    for f in (0.95, 1.05):
        ax.plot([lo, hi], [lo * f, hi * f], "k:", lw=0.6)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("published iteration time (s)")
    ax.set_ylabel("predicted iteration time (s), in-sample constants")
    ax.set_title("piper score vs published runs (dotted: +-5%)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def _llama3_readings(rows: list[dict[str, Any]]) -> list[str]:
    """The Llama 3 rows' second readings: the error against the causal FLOP count, and the row as a
    planner with the default memory reserve sees it (the reserve's limit, whether the row's own layout
    fits under it, the score's choice of v under it and that choice's error)."""
    out = ["The same rows against the causal FLOP count, and under the planner's default memory reserve:", "",
           "| row | vs causal count | own layout's memory GB | default limit GB | fits it | "
           "score's choice under it (v, TMPC) | predicted s | error |",
           "|---|---:|---:|---:|---|---|---:|---:|"]
    for r in rows:
        if "default_limit_gb" not in r:
            continue
        pred = "OOM" if r["default_time_s"] is None else f"{r['default_time_s']:.3f}"
        out.append(f"| {r['row']} | {_pct(r['causal_error_percent'])} | {r['max_memory_gb']:.2f} | "
                   f"{r['default_limit_gb']:.2f} | {'yes' if r['fits_default'] else 'no'} | "
                   f"{r['default_vp']}, {r['default_tmpc']} | {pred} | {_pct(r['default_error_percent'])} |")
    return out


def _attention_kernels(res: dict[str, Any]) -> list[str]:
    """The Llama 3 rows read with another fused-attention efficiency, and the long-context row's
    break-even efficiencies (experiments/validate/context_rows.py ``attention_kernel_readings``)."""
    ak = res.get("attention_kernels")
    if not ak:
        return []
    out = ["The same rows with another fused-attention kernel (the paper names neither its kernel nor its FLOP count):", "",
           "| row | kernel | efficiency | predicted s | vs Megatron's count | vs causal count |",
           "|---|---|---:|---:|---:|---:|"]
    for r in ak["rows"]:
        pred = "OOM" if r["predicted_time_s"] is None else f"{r['predicted_time_s']:.3f}"
        out.append(f"| {r['row']} | {r['kernel']} | {r['flash_attention_efficiency']:.2f} | {pred} | "
                   f"{_pct(r['error_percent'])} | {_pct(r['error_causal_percent'])} |")

    def eff(x: float | None) -> str:
        return "outside 0.05-1" if x is None else f"{x:.3f}"

    for b in ak["break_even"]:
        out += ["", f"{b['row']}: the prediction meets the full-count time at a fused-attention efficiency of "
                    f"{eff(b['full_count'])} (10% short of it at {eff(b['full_count_minus_10_percent'])}), "
                    f"the causal-count time at {eff(b['causal_count'])}."]
    return out


def markdown(res: dict[str, Any]) -> str:
    lines = ["## Iteration time: predicted vs published", ""]
    for gpu, f in res["fitted"].items():
        lines.append(f"- {gpu}: e_max = {f['e_max']:.4f}, d0 = {f['d0']:.1f} (fitted on {TABLE_TITLES[f['table']]})")
    for gpu, d in res.get("drift", {}).items():
        state = "DRIFT: update FITTED_GEMM" if d["drift"] else "no drift"
        lines.append(f"- catalog (piper/frontend/hardware.py FITTED_GEMM) {gpu}: e_max = {d['catalog_e_max']}, "
                     f"d0 = {d['catalog_d0']}: {state}")
    lines.append("")
    for table, title in TABLE_TITLES.items():
        mine = [r for r in res["rows"] if r["table"] == table]
        if not mine:
            continue
        s = res["summary"][table]
        lines += [f"### {title}", "",
                  "| row | GPUs | t | p | d | v | b | TMPC | memory GB | published s | predicted s | in-sample | LOO |",
                  "|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
        for r in mine:
            pred = "OOM" if r["predicted_time_s"] is None else f"{r['predicted_time_s']:.3f}"
            lines.append(f"| {r['row']} | {r['gpus']} | {r['tp']} | {r['pp']} | {r['dp']} | {r['vp']} | "
                         f"{r['micro_batch']} | {r['tmpc']} | {r['max_memory_gb']:.1f} | {r['published_time_s']:.3f} | "
                         f"{pred} | {_pct(r['in_sample_error_percent'])} | {_pct(r['loo_error_percent'])} |")
        ins = s["in_sample_mae_percent"]
        in_sample = (f"in-sample {ins:.1f}%" if math.isfinite(ins) else
                     "no in-sample error (out of sample: no constant is fitted on these rows)")
        lines += ["", f"Mean absolute error: LOO **{s['loo_mae_percent']:.1f}%** (worst {s['loo_max_abs_percent']:.1f}%), "
                      f"{in_sample}.", ""]
        if table == "llama3":
            kernels = _attention_kernels(res)
            lines += _llama3_readings(mine) + [""] + (kernels + [""] if kernels else [])
        for a in res["assumptions"].get(table, []):
            lines.append(f"- assumed: {a}")
        lines.append("")
    if res.get("moe"):  # issue 31: experiments/validate/moe_rows.py
        from experiments.validate.moe_rows import markdown as moe_markdown, recipe_markdown

        lines += ["## Mixture of experts: Megatron-Bridge H100 (tokens/s per GPU, out of sample)", "",
                  moe_markdown(res["moe"]["catalog"], "catalog H100 constants"), "",
                  moe_markdown(res["moe"]["readme_fit"], "H100 constants fitted on the README table"), "",
                  *([recipe_markdown(res["moe"]["recipe_readings"]), ""] if res["moe"].get("recipe_readings") else []),
                  *(f"- assumed: {a}" for a in res["moe"]["assumptions"]), ""]
    lines += ["## Memory: [K22] Figure 1's four models (first stage, per GPU)", "",
              "| model | quantity | paper's formula GB | planner GB | difference |", "|---|---|---:|---:|---:|"]
    for m in res["memory"]:
        lines.append(f"| {m['model']} | {m['quantity']} | {m['paper_gb']:.2f} | {m['planner_gb']:.2f} | "
                     f"{m['difference_percent']:+.2f}% |")
    return "\n".join(lines)
