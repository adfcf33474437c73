"""The cost model against measured layer and matrix-product times (issue 30's device measurement).

    python -m experiments.device.compare_layer experiments/data/layer_timings_h200.json --out out/device

Reads what ``experiments/device/measure_layer.py`` wrote on a GPU and prices the same work with the
cost model (piper/frontend/operations.py):

* each layer row: the operations of one transformer layer at width t for one micro-batch
  (``layer_ops``: no recomputation, no sequence parallelism, fused attention, as measured), their
  forward and backward times without the collectives (kind "comm": the measurement runs one
  device's shard alone);
* each product row: the model's efficiency ``gemm_efficiency(m, n, k)`` and time ``gemm_time_s``
  against the measured time and FLOP/s / peak.

The hardware is the catalog's entry for the GPU the file names (H200, H100, A100, B200), or
``--hardware`` (a catalog name or a hardware JSON file, as for ``plan``). Error = predicted /
measured - 1, every row listed (``layers.csv``, ``gemms.csv``, ``README.md``, ``layers.png``
under ``--out``); ``--json`` prints one object on stdout. Nothing is fitted here: the rows are
out of sample for every constant of the catalog.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

from piper.core.errors import FrontendError
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware, hardware, hardware_from_file
from piper.frontend.operations import Kernels, gemm_efficiency, gemm_time_s, layer_ops
from piper.frontend.presets import preset

__all__ = ["compare", "catalog_name", "layer_config", "main"]

#: the catalog entry for a GPU name as ``torch.cuda.get_device_name()`` gives it (first match)
GPU_NAMES = (("H200", "h200"), ("H100", "h100-sxm-80gb"), ("A100", "a100-80gb"), ("B200", "b200"))
LAYER_KEYS = ("model", "t", "micro_batch", "seq", "precision", "heads", "kv_heads", "head_dim", "ffn", "hidden",
              "forward_s", "backward_s")
GEMM_KEYS = ("model", "t", "op", "m", "n", "k", "precision", "time_s", "flops_per_s")


def catalog_name(gpu: str | None) -> str | None:
    """The catalog's name for ``gpu`` (None when it has none)."""
    for key, name in GPU_NAMES:
        if gpu and key in gpu.upper():
            return name
    return None


def layer_config(row: dict[str, Any]) -> TransformerConfig:
    """The layer a row measured, as a model config: its preset's kind (MLP, norm, biases, dropout) with
    the row's widths (heads, KV heads and FFN of the whole layer: the row's per-device numbers x t)."""
    t = row["t"]
    base = preset(row["model"])
    return base.with_changes(hidden_size=row["hidden"], attention_heads=row["heads"] * t,
                             kv_heads=min(row["kv_heads"] * t, row["heads"] * t), ffn_hidden_size=row["ffn"] * t,
                             seq_length=row["seq"], micro_batch=row["micro_batch"], attention_head_dim=row["head_dim"])


#: fields that are whole numbers >= 1 (the rest but model, op and precision are numbers > 0)
COUNT_KEYS = ("t", "micro_batch", "seq", "heads", "kv_heads", "head_dim", "ffn", "hidden", "m", "n", "k")


def _check(rows: Any, keys: tuple[str, ...], what: str) -> list[dict[str, Any]]:
    if not isinstance(rows, list):
        raise FrontendError(f"{what}: expected a list of rows")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise FrontendError(f"{what} row {i}: expected an object")
        missing = [k for k in keys if k not in row]
        if missing:
            raise FrontendError(f"{what} row {i}: missing field {missing[0]!r}")
        for k in keys:
            v = row[k]
            if k in ("model", "op", "precision"):
                ok = isinstance(v, str)
            elif k in COUNT_KEYS:
                ok = isinstance(v, int) and not isinstance(v, bool) and v >= 1
            else:
                ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
            if not ok:
                raise FrontendError(f"{what} row {i}: field {k!r} = {v!r} is not a valid value")
    return rows


def _pct(pred: float, meas: float) -> float | None:
    return 100.0 * (pred / meas - 1.0) if meas > 0 and math.isfinite(pred) else None


def compare(data: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    """Every row of ``data`` (``measure_layer.py``'s object) priced by the model on ``hw``."""
    layers, gemms = [], []
    for row in _check(data.get("layers"), LAYER_KEYS, "layers"):
        cfg = layer_config(row)
        ops = [o for o in layer_ops(cfg, hw, row["t"], "none", False, Kernels(flash_attention=True)) if o.kind != "comm"]
        fwd = sum(o.time_s for o in ops if o.phase == "forward")
        bwd = sum(o.time_s for o in ops if o.phase == "backward")
        layers.append({**{k: row[k] for k in LAYER_KEYS}, "predicted_forward_s": fwd, "predicted_backward_s": bwd,
                       "forward_error_percent": _pct(fwd, row["forward_s"]),
                       "backward_error_percent": _pct(bwd, row["backward_s"]),
                       "total_error_percent": _pct(fwd + bwd, row["forward_s"] + row["backward_s"])})
    for row in _check(data.get("gemms"), GEMM_KEYS, "gemms"):
        precision = "fp8" if row["precision"] == "fp8" else "bf16"
        peak = hw.peak(precision)
        eff = gemm_efficiency(hw, row["m"], row["n"], row["k"], precision)
        pred = gemm_time_s(hw, row["m"], row["n"], row["k"], precision)
        gemms.append({**{k: row[k] for k in GEMM_KEYS}, "measured_efficiency": row["flops_per_s"] / peak,
                      "model_efficiency": eff, "predicted_time_s": pred,
                      "time_error_percent": _pct(pred, row["time_s"])})

    def mae(vals: list[float | None]) -> float | None:
        got = [abs(v) for v in vals if v is not None]
        return statistics.fmean(got) if got else None

    summary = {}
    for model in dict.fromkeys(r["model"] for r in layers):
        mine = [r for r in layers if r["model"] == model]
        summary[model] = {"rows": len(mine), "forward_mae_percent": mae([r["forward_error_percent"] for r in mine]),
                          "backward_mae_percent": mae([r["backward_error_percent"] for r in mine]),
                          "total_mae_percent": mae([r["total_error_percent"] for r in mine])}
    return {"hardware": hw.name, "environment": data.get("environment", {}), "complete": data.get("complete"),
            "layers": layers, "gemms": gemms, "summary": summary,
            "gemm_mae_percent": {p: mae([g["time_error_percent"] for g in gemms if g["precision"] == p])
                                 for p in dict.fromkeys(g["precision"] for g in gemms)}}


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="") as fh:
        if not rows:
            return
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def _fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1f}%"


def markdown(res: dict[str, Any]) -> str:
    env = res["environment"]
    lines = [f"# One transformer layer: model ({res['hardware']}) vs measured", "",
             f"Measured {env.get('date')} on {env.get('gpu') or env.get('cpu')} (driver {env.get('driver')}), "
             f"PyTorch {env.get('torch')}, CUDA {env.get('cuda')}, cuDNN {env.get('cudnn')}; "
             f"{'complete' if res['complete'] else 'NOT complete (rows skipped: see the JSON)'}.", "",
             "| model | t | b | s | forward ms (meas / model) | backward ms (meas / model) | forward | backward | total |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in res["layers"]:
        lines.append(f"| {r['model']} | {r['t']} | {r['micro_batch']} | {r['seq']} | "
                     f"{1e3 * r['forward_s']:.3f} / {1e3 * r['predicted_forward_s']:.3f} | "
                     f"{1e3 * r['backward_s']:.3f} / {1e3 * r['predicted_backward_s']:.3f} | "
                     f"{_fmt(r['forward_error_percent'])} | {_fmt(r['backward_error_percent'])} | "
                     f"{_fmt(r['total_error_percent'])} |")
    lines += ["", "Mean absolute error per model (forward / backward / total): " + "; ".join(
        f"{m} {_fmt(s['forward_mae_percent'])} / {_fmt(s['backward_mae_percent'])} / {_fmt(s['total_mae_percent'])}"
        for m, s in res["summary"].items()), "",
        "Matrix products, mean absolute error of the time: " + ", ".join(
            f"{p} {_fmt(v)}" for p, v in res["gemm_mae_percent"].items()), ""]
    return "\n".join(lines)


def write_png(res: dict[str, Any], path: Path) -> None:
    from piper.render.headless import headless_pyplot

    plt = headless_pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 5))
    for ax, what in zip(axes, ("layer forward + backward (ms)", "matrix product efficiency")):
        if what.startswith("layer"):
            for model in res["summary"]:
                pts = [(1e3 * (r["forward_s"] + r["backward_s"]),
                        1e3 * (r["predicted_forward_s"] + r["predicted_backward_s"]))
                       for r in res["layers"] if r["model"] == model]
                ax.scatter(*zip(*pts), label=model, s=14)
            ax.set_xscale("log")
            ax.set_yscale("log")
        else:
            for precision in res["gemm_mae_percent"]:
                pts = [(g["measured_efficiency"], g["model_efficiency"]) for g in res["gemms"]
                       if g["precision"] == precision]
                ax.scatter(*zip(*pts), label=precision, s=10)
        (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
        lo, hi = min(x0, y0), max(x1, y1)
        ax.plot([lo, hi], [lo, hi], "k-", lw=0.8)
        ax.set_xlabel(f"measured {what}")
        ax.set_ylabel(f"model {what}")
        ax.legend(fontsize=8)
    fig.suptitle(f"cost model ({res['hardware']}) vs measured on {res['environment'].get('gpu') or 'CPU'}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m experiments.device.compare_layer", description=__doc__.split("\n\n")[0])
    ap.add_argument("timings", help="the JSON file measure_layer.py wrote")
    ap.add_argument("--hardware", help="catalog name or hardware JSON (default: the file's GPU)")
    ap.add_argument("--out", help="folder for layers.csv, gemms.csv, README.md and layers.png")
    ap.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    args = ap.parse_args(argv)
    try:
        data = json.loads(Path(args.timings).read_text())
        if not isinstance(data, dict):
            raise FrontendError(f"{args.timings}: expected a JSON object")
        env = data.get("environment") or {}
        if not isinstance(env, dict):
            raise FrontendError(f"{args.timings}: 'environment' must be an object")
        gpu = env.get("gpu")
        name = args.hardware or catalog_name(gpu)
        if name is None:
            raise FrontendError(f"{args.timings}: GPU {gpu!r} has no catalog entry; give --hardware")
        hw = hardware_from_file(name) if name.endswith(".json") else hardware(name)
        res = compare(data, hw)
    except (OSError, ValueError, FrontendError, KeyError, TypeError) as exc:
        print(f"compare_layer: {exc}", file=sys.stderr)
        return 2
    if args.out:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        _write_csv(res["layers"], out / "layers.csv")
        _write_csv(res["gemms"], out / "gemms.csv")
        (out / "README.md").write_text(markdown(res))
        if res["layers"] and res["gemms"]:
            write_png(res, out / "layers.png")
    if args.json:
        print(json.dumps(res))
    else:
        print(markdown(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
