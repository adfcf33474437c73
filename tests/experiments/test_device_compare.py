"""experiments/device: the layer measurement script (a CPU smoke run when PyTorch is installed; it is
not a dependency) and the comparison of its rows with the cost model."""

from __future__ import annotations

import importlib.util
import json
import math

import pytest

from experiments.device.compare_layer import catalog_name, compare, layer_config, main
from piper.frontend.hardware import hardware
from piper.frontend.presets import preset


def _row(model: str, t: int, b: int, s: int, **times: float) -> dict:
    """A layer row as measure_layer.py writes it for the preset's real shapes."""
    cfg = preset(model)
    d = cfg.hidden_size // cfg.attention_heads
    return {"model": model, "t": t, "micro_batch": b, "seq": s, "precision": "bf16",
            "heads": cfg.attention_heads // t, "kv_heads": max(1, cfg.kv_heads // t), "head_dim": d,
            "ffn": cfg.ffn_hidden_size // t, "hidden": cfg.hidden_size,
            "forward_s": times.get("forward_s", 0.01), "backward_s": times.get("backward_s", 0.02)}


@pytest.mark.parametrize("model", ["llama3-8b", "llama3-70b", "gpt3-175b"])
@pytest.mark.parametrize("t", [1, 2, 4, 8])
def test_a_rows_layer_is_its_preset(model, t):
    cfg = layer_config(_row(model, t, 2, 4096))
    base = preset(model).with_changes(seq_length=4096, micro_batch=2)
    for field in ("hidden_size", "attention_heads", "kv_heads", "ffn_hidden_size", "ffn_kind", "norm",
                  "linear_bias", "dropout", "seq_length", "micro_batch"):
        assert getattr(cfg, field) == getattr(base, field), field


def test_catalog_names():
    assert catalog_name("NVIDIA H200") == "h200"
    assert catalog_name("NVIDIA H100 80GB HBM3") == "h100-sxm-80gb"
    assert catalog_name("NVIDIA A100-SXM4-80GB") == "a100-80gb"
    assert catalog_name("Tesla V100") is None and catalog_name(None) is None


def test_errors_and_a_hand_priced_product():
    hw = hardware("h200")
    m, n, k = 8192, 6144, 8192  # Llama 3 70B's QKV at t = 2, 8,192 tokens
    eta = hw.gemm_efficiency * (m / (m + hw.gemm_half_dim)) * (n / (n + hw.gemm_half_dim)) * (k / (k + hw.gemm_half_dim))
    flops = 2.0 * m * n * k
    measured_s = flops / (0.7 * hw.peak_flops)
    data = {"layers": [_row("llama3-70b", 2, 1, 8192, forward_s=0.02, backward_s=0.04)],
            "gemms": [{"model": "llama3-70b", "t": 2, "op": "qkv", "m": m, "n": n, "k": k, "precision": "bf16",
                       "time_s": measured_s, "flops_per_s": flops / measured_s}]}
    res = compare(data, hw)
    g = res["gemms"][0]
    assert g["measured_efficiency"] == pytest.approx(0.7, rel=1e-12)
    # the shape factor of the catalog's curve unless the roofline binds (it does not for this product)
    assert g["model_efficiency"] == pytest.approx(eta, rel=1e-9)
    pred = flops / (hw.peak_flops * eta) + hw.kernel_overhead_s
    assert g["time_error_percent"] == pytest.approx(100 * (pred / measured_s - 1), rel=1e-9)
    lay = res["layers"][0]
    assert lay["forward_error_percent"] == pytest.approx(100 * (lay["predicted_forward_s"] / 0.02 - 1), rel=1e-12)
    assert 0 < lay["predicted_forward_s"] < lay["predicted_backward_s"]
    # a 70B layer's forward at 8,192 tokens on half the widths: ~7 TFLOP of products, milliseconds on an H200
    assert 5e-3 < lay["predicted_forward_s"] < 5e-2


def test_bad_files_are_one_line(tmp_path, capsys):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"environment": {"gpu": "NVIDIA H200"}, "layers": [{"model": "llama3-8b"}], "gemms": []}))
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "'t'" in err
    bad.write_text(json.dumps({"environment": {"gpu": "Tesla V100"}, "layers": [], "gemms": []}))
    assert main([str(bad)]) == 2
    assert "--hardware" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="PyTorch is not installed (not a dependency)")
def test_the_measurement_runs_and_compares_on_a_cpu(tmp_path, capsys):
    from experiments.device.measure_layer import main as measure

    out = tmp_path / "tiny.json"
    assert measure(["--tiny", "--device", "cpu", "--out", str(out), "--warmup", "0", "--repeats", "1",
                    "--models", "llama3-8b"]) == 0
    data = json.loads(out.read_text())
    assert data["complete"] and len(data["layers"]) == 12 and data["environment"]["torch"]
    assert {g["precision"] for g in data["gemms"]} == {"fp32", "fp8"}
    assert main([str(out), "--hardware", "h200", "--json", "--out", str(tmp_path / "cmp")]) == 0
    res = json.loads(capsys.readouterr().out)
    assert len(res["layers"]) == 12 and all(math.isfinite(r["predicted_forward_s"]) for r in res["layers"])
    assert (tmp_path / "cmp" / "layers.png").stat().st_size > 0


def test_the_measurement_refuses_bad_knobs_in_one_line(tmp_path, capsys):
    from experiments.device.measure_layer import main as measure

    for argv, flag in ((["--repeats", "0"], "--repeats"), (["--warmup", "-1"], "--warmup"),
                       (["--budget-s", "nan"], "--budget-s")):
        assert measure(["--out", str(tmp_path / "x.json"), "--device", "cpu", *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and flag in err


@pytest.mark.parametrize("change, field", [({"t": 0}, "'t'"), ({"forward_s": -1.0}, "'forward_s'"),
                                           ({"model": 3}, "'model'"), ({"seq": 2.5}, "'seq'")])
def test_bad_row_values_are_one_line(tmp_path, capsys, change, field):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"environment": {"gpu": "NVIDIA H200"},
                               "layers": [{**_row("llama3-8b", 1, 1, 4096), **change}], "gemms": []}))
    assert main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and field in err
    bad.write_text(json.dumps({"environment": ["H200"], "layers": [], "gemms": []}))
    assert main([str(bad)]) == 2
    assert "environment" in capsys.readouterr().err
