"""The per-operation cost model (issue 30): hand-computed kernel prices, the efficiency curve's
bounds and monotonicity (hypothesis), collectives, the layer's operation list, and bad hardware."""

import json
import re
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from piper.core.errors import HardwareError
from piper.frontend import hardware, hardware_from_file
from piper.frontend.config import TransformerConfig
from piper.frontend.hardware import Hardware
from piper.frontend.operations import (
    Kernels,
    collective_time_s,
    elementwise_time_s,
    gemm_efficiency,
    gemm_time_s,
    layer_ops,
    ops_time_s,
    optimizer_step_time_s,
)

HW = Hardware(name="toy", peak_flops=1000.0, memory_bytes=1e6, devices_per_node=2, nvlink_bandwidth=100.0,
              network_bandwidth=10.0, memory_bandwidth=50.0, memory_efficiency=0.5, gemm_efficiency=0.8,
              gemm_half_dim=10.0, nvlink_all_reduce_efficiency=0.5, nvlink_latency_s=1.0)


def test_gemm_efficiency_by_hand():
    # shape factor 0.8 * (10/20) * (10/20) * (30/40) = 0.15; roofline: 2*10*10*30 = 6000 FLOPs over
    # 2*(10*30 + 30*10) + 2*10*10 = 1400 bytes -> 4.2857 FLOP/B * 50 * 0.5 / 1000 = 0.10714: the roofline binds
    assert gemm_efficiency(HW, 10, 10, 30) == pytest.approx(min(0.15, 6000 / 1400 * 25 / 1000))
    ideal = HW.with_changes(memory_bandwidth=1e30)
    assert gemm_efficiency(ideal, 10, 10, 30) == pytest.approx(0.15)
    assert gemm_time_s(ideal, 10, 10, 30) == pytest.approx(6000 / (1000 * 0.15))
    assert gemm_time_s(ideal, 10, 10, 30, batch=3) == pytest.approx(3 * 6000 / 150)


def test_elementwise_collective_and_step_by_hand():
    assert elementwise_time_s(HW, 100.0) == pytest.approx(100 / 25)
    assert elementwise_time_s(Hardware("x", 1.0, 1.0, 1, 1.0, 1.0), 100.0) == 0.0  # no HBM bandwidth: free
    # all-reduce of 80 bytes over 2 ranks: latency 1 s + 2 * (1/2) * 80 / (100 * 0.5)
    assert collective_time_s(HW, "all_reduce", 80.0, 2) == pytest.approx(1 + 80 / 50)
    assert collective_time_s(HW, "all_gather", 80.0, 4) == pytest.approx(1 + 0.75 * 80 / 100)
    assert collective_time_s(HW, "all_reduce", 80.0, 1) == 0.0
    # Adam over 10 params, 2-byte weights, 4-byte grads: 10 * (8 + 24 + 2) bytes at 25 B/s
    assert optimizer_step_time_s(HW, 10, 2, 4) == pytest.approx(340 / 25)


@settings(max_examples=200, deadline=None)
@given(m=st.floats(1, 1e5), n=st.floats(1, 1e5), k=st.floats(1, 1e5), grow=st.floats(1, 100),
       gpu=st.sampled_from(["a100-80gb", "h100", "h200", "b200"]), fp8=st.booleans(), axis=st.integers(0, 2))
def test_gemm_efficiency_is_monotone_and_at_most_one(m, n, k, grow, gpu, fp8, axis):
    hw = hardware(gpu)
    prec = "fp8" if fp8 and hw.peak_flops_fp8 else "bf16"
    e = gemm_efficiency(hw, m, n, k, prec)
    assert 0 < e <= hw.gemm_efficiency <= 1
    dims = [m, n, k]
    dims[axis] *= grow
    assert gemm_efficiency(hw, *dims, prec) >= e * (1 - 1e-12)


TOY = TransformerConfig(name="toy", layers=2, hidden_size=8, attention_heads=2, kv_heads=2, ffn_hidden_size=32,
                        vocab_size=16, seq_length=4, micro_batch=2)


def test_layer_ops_structure_and_recomputation():
    hw = hardware("a100-80gb")
    base = layer_ops(TOY, hw, 2, "none", False, Kernels(flash_attention=False))
    names = [o.name for o in base if o.phase == "forward"]
    assert names[:3] == ["norm1", "qkv", "qk"] and "ar.proj" in names and "ar.fc2" in names
    assert sum(1 for o in base if o.kind == "comm") == 4  # 2 forward + 2 backward all-reduces
    full = layer_ops(TOY, hw, 2, "full", False, Kernels(flash_attention=False))
    assert sum(1 for o in full if o.kind == "comm") == 6
    assert ops_time_s(full, "recompute") == pytest.approx(ops_time_s(base, "forward"))
    sp = layer_ops(TOY, hw, 2, "none", True, Kernels(flash_attention=False))
    assert sorted(o.name for o in sp if o.kind == "comm" and o.phase == "forward") == ["ag.fc1", "ag.qkv", "rs.fc2", "rs.proj"]
    # sequence parallelism moves the same bytes as the all-reduces ([K22] Section 4.2.2)
    assert sum(o.bytes for o in sp if o.kind == "comm") == pytest.approx(sum(o.bytes for o in base if o.kind == "comm"))
    # one device: no communication at all
    assert not [o for o in layer_ops(TOY, hw, 1, "none", False) if o.kind == "comm"]


def test_flash_attention_and_causal_flops():
    hw = hardware("h100")
    ops = layer_ops(TOY, hw, 1, "none", False, Kernels(flash_attention=True))
    flash = [o for o in ops if o.kind == "attention"]
    fwd = 4 * 2 * 4 * 4 * 8  # 4 b s^2 h
    assert [o.flops for o in flash] == [pytest.approx(fwd / 2), pytest.approx(2.5 * fwd / 2)]
    assert not [o for o in ops if o.name == "softmax"]


def test_fp8_uses_the_fp8_peak_and_casts():
    hw = hardware("h100")
    bf = layer_ops(TOY, hw, 1, "none", False)
    f8 = layer_ops(TOY.with_changes(precision="fp8"), hw, 1, "none", False)
    assert any(o.name.endswith(".cast") for o in f8) and not any(o.name.endswith(".cast") for o in bf)


def test_bad_hardware_fields_are_one_line_naming_the_field(tmp_path):
    f = tmp_path / "hw.json"
    for raw, field in [({"gpu": "h100", "gemm_efficiency": 1.5}, "gemm_efficiency"),
                       ({"gpu": "h100", "memory_bandwidth": "fast"}, "memory_bandwidth"),
                       ({"gpu": "h100", "nvlink_latency_s": -1}, "nvlink_latency_s"),
                       ({"gpu": "h100", "gemm_efficency": 0.5}, "gemm_efficency"),
                       ({"gpu": "a100", "peak_flops": 1}, "known GPUs")]:
        f.write_text(json.dumps(raw))
        with pytest.raises(HardwareError, match=field) as exc:
            hardware_from_file(f)
        assert "\n" not in str(exc.value)
    # rates and efficiencies with a floor (a millionth of peak, one per second): below them the
    # workload's times left its range and the error named a workload field; the file is named
    for raw, says in [({"gpu": "h100", "gemm_efficiency": 1e-300}, "gemm_efficiency must be in [1e-06, 1]"),
                      ({"gpu": "h100", "nvlink_bandwidth": 1e-30}, "nvlink_bandwidth must be at least 1 per second"),
                      ({"gpu": "h100", "peak_flops": 0.5}, "peak_flops must be at least 1 per second")]:
        f.write_text(json.dumps(raw))
        with pytest.raises(HardwareError, match=re.escape(says)) as exc:
            hardware_from_file(f)
        assert str(exc.value).startswith(f"{f}: ") and "\n" not in str(exc.value)
    # 0 means "none" for latencies, overheads and half dims, as the Hardware class has it
    f.write_text(json.dumps({"gpu": "h100", "kernel_overhead_s": 0, "nvlink_latency_s": 0, "gemm_half_dim": 0}))
    hw = hardware_from_file(f)
    assert (hw.kernel_overhead_s, hw.nvlink_latency_s, hw.gemm_half_dim) == (0, 0, 0)
    f.write_text(json.dumps({"gpu": "h100", "gemm_efficiency": 0.6, "gemm_half_dim": 256}))
    hw = hardware_from_file(f)
    assert (hw.gemm_efficiency, hw.gemm_half_dim, hw.memory_bandwidth) == (0.6, 256, 3350e9)
    with pytest.raises(HardwareError, match="peak_flops_fp8"):
        hardware("a100-80gb").peak("fp8")
    assert math.isclose(hardware("h100").peak("fp8"), 1979e12)
