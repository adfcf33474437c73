"""The MoE block's new terms (issue 31): the flex dispatcher's deduplicated all-to-all, the
experts' own d0, the fitted fixed times, and their catalog / hardware-file plumbing; each on a
hand-computed case."""

from __future__ import annotations

import json
import math

import pytest

from piper.core.errors import FrontendError, HardwareError
from piper.frontend.hardware import FITTED_MOE, hardware, hardware_from_file
from piper.frontend.moe_costs import (
    expected_destinations,
    flex_dispatch_time_s,
    special_layer_ops,
)
from piper.frontend.operations import gemm_time_s
from piper.frontend.presets import PRESETS
from piper.frontend.workload import TrainingSetup

#: an H100 with no fitted MoE constants (the pre-fit defaults)
PLAIN = hardware("h100", expert_gemm_half_dim=1097.3, expert_overhead_s=0.0, moe_layer_overhead_s=0.0,
                 moe_token_overhead_s=0.0)
QWEN = PRESETS["qwen3-30b-a3b"]


def test_expected_destinations_by_hand():
    # 4 experts in 2 groups of 2, top-2: both in the other group with probability C(2,2)/C(4,2) = 1/6
    assert expected_destinations(4, 2, 2) == pytest.approx(2 * (1 - 1 / 6))
    # one group holds all experts
    assert expected_destinations(128, 8, 1) == 1.0
    # every expert its own group: exactly k groups
    assert expected_destinations(16, 4, 16) == pytest.approx(4.0)


def test_flex_dispatch_time_by_hand():
    tokens = 1e8  # bytes of all the device's tokens, one copy each
    # inside one node (8 ranks, 128 experts, top-8): N (g - 1) P_dev copies over NVLink at 0.77
    p_dev = 1 - math.comb(112, 8) / math.comb(128, 8)
    inside = 15e-6 + tokens * 1 * 7 * p_dev / (450e9 * 0.77)
    assert flex_dispatch_time_s(PLAIN, tokens, 8, 128, 8) == pytest.approx(inside)
    # 16 ranks over 2 nodes: (N - 1) P_node copies over the network at 0.86, N (g - 1) P_dev over NVLink
    p_node = 1 - math.comb(64, 8) / math.comb(128, 8)
    p_dev = 1 - math.comb(120, 8) / math.comb(128, 8)
    nv = tokens * 2 * 7 * p_dev / (450e9 * 0.77)
    net = tokens * 1 * p_node / (50e9 * 0.86)
    assert flex_dispatch_time_s(PLAIN, tokens, 16, 128, 8) == pytest.approx(30e-6 + max(nv, net))
    assert net > nv  # the network is the bottleneck
    assert flex_dispatch_time_s(PLAIN, tokens, 1, 128, 8) == 0.0


def test_layer_uses_the_setup_dispatcher():
    cfg = QWEN.with_changes(precision="fp8")
    td, h = 4096, 2048
    flex = special_layer_ops(cfg, PLAIN, 1, "none", False, "moe", 16, 1, dispatcher="flex")
    a2a = [o for o in flex if o.name.startswith("a2a.")]
    assert len(a2a) == 4  # dispatch and combine, forward and backward
    want = flex_dispatch_time_s(PLAIN, td * h * 2, 16, 128, 8)
    assert all(o.time_s == pytest.approx(want) for o in a2a)
    plain = special_layer_ops(cfg, PLAIN, 1, "none", False, "moe", 16, 1)
    assert sum(o.time_s for o in plain if o.name.startswith("a2a.")) > 3 * sum(o.time_s for o in a2a)
    with pytest.raises(FrontendError, match="token_dispatcher"):
        TrainingSetup(token_dispatcher="deepep")
    with pytest.raises(FrontendError, match="expert_tensor_parallel"):
        TrainingSetup(token_dispatcher="flex", expert_tensor_parallel=True)


def test_fixed_times_and_the_experts_d0_by_hand():
    cfg = QWEN.with_changes(precision="fp8")
    e, E = 8, 128
    hw = PLAIN.with_changes(expert_overhead_s=1e-4, moe_layer_overhead_s=2e-3, expert_gemm_half_dim=100.0,
                            moe_token_overhead_s=5e-8)
    ops = special_layer_ops(cfg, hw, 1, "full", False, "moe", e)
    base = special_layer_ops(cfg, PLAIN, 1, "full", False, "moe", e)
    for phase in ("forward", "backward", "recompute"):
        mine = {o.name: o.time_s for o in ops if o.phase == phase}
        assert mine["experts.overhead"] == pytest.approx(1e-4 * E / e)
        assert mine["moe.layer_overhead"] == pytest.approx(2e-3)
        # 4,096 tokens on the device (t = 1), each sent to its k = 8 experts: 32,768 copies at 50 ns
        assert mine["moe.token_overhead"] == pytest.approx(4096 * 8 * 5e-8)
    # at t = 2 (sequence parallelism) each device routes half the tokens
    half = {o.name: o.time_s for o in special_layer_ops(cfg, hw, 2, "full", True, "moe", e) if o.phase == "forward"}
    assert half["moe.token_overhead"] == pytest.approx(2048 * 8 * 5e-8)
    assert not any(o.name.endswith("overhead") for o in base)
    # the routed experts' forward FC1 (m = T k e / E rows per expert, E / e of them) at d0 = 100
    m = 4096 * 8 * e / E
    fc1 = next(o for o in ops if o.name == "experts.fc1" and o.phase == "forward")
    assert fc1.time_s == pytest.approx(gemm_time_s(PLAIN.with_changes(gemm_half_dim=100.0), m, 2 * 768, 2048, "fp8",
                                                   E / e))
    # the dense products keep the dense d0
    for name in ("qkv", "proj", "router"):
        a = next(o for o in ops if o.name == name and o.phase == "forward")
        b = next(o for o in base if o.name == name and o.phase == "forward")
        assert a.time_s == b.time_s


def test_catalog_and_hardware_file(tmp_path):
    h100 = hardware("h100")
    f = FITTED_MOE["h100-sxm-80gb"]
    assert (h100.expert_gemm_half_dim, h100.expert_overhead_s, h100.moe_layer_overhead_s,
            h100.moe_token_overhead_s) == (f.expert_gemm_half_dim, f.expert_overhead_s, f.moe_layer_overhead_s,
                                           f.moe_token_overhead_s)
    # the catalog's form (experiments.validate.moe_rows.CATALOG_FORM) sets exactly its time
    from experiments.validate.moe_rows import CATALOG_FORM, MOE_FORMS, MOE_TIMES

    for name in MOE_TIMES:
        assert (getattr(f, name) > 0) == (name in MOE_FORMS[CATALOG_FORM].names), name
    assert f.loo_mae_percent > 0 and "Megatron-Bridge" in f.rows
    # the other devices: the dense d0, no fixed time
    a100 = hardware("a100-80gb")
    assert (a100.expert_gemm_half_dim, a100.expert_overhead_s, a100.moe_layer_overhead_s,
            a100.moe_token_overhead_s) == (None, 0.0, 0.0, 0.0)
    path = tmp_path / "hw.json"
    path.write_text(json.dumps({"gpu": "h100", "expert_overhead_s": 1e-6, "network_all_to_all_efficiency": 0.5}))
    hw = hardware_from_file(path)
    assert (hw.expert_overhead_s, hw.network_all_to_all_efficiency) == (1e-6, 0.5)
    for key, value, msg in (("network_all_to_all_efficiency", 1.5, "network_all_to_all_efficiency must be in"),
                            ("expert_overhead_s", -1.0, "expert_overhead_s must be"),
                            ("moe_token_overhead_s", -1e-9, "moe_token_overhead_s must be"),
                            ("expert_overhead", 1.0, "expert_overhead")):
        path.write_text(json.dumps({"gpu": "h100", key: value}))
        with pytest.raises(HardwareError, match=msg):
            hardware_from_file(path)
