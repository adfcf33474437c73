"""The caveats plan and score print (piper/frontend/caveats.py): unfitted matrix-product constants
and missing MoE-block constants, each only when the numbers are the catalog's unfitted ones."""

from __future__ import annotations

from piper.frontend.caveats import prediction_caveats
from piper.frontend.hardware import ACCELERATORS, FITTED_GEMM, FITTED_MOE, hardware
from piper.frontend.presets import preset


def test_fitted_devices_have_no_caveat_and_the_others_name_their_values() -> None:
    dense, moe = preset("llama3-8b"), preset("mixtral-8x7b")
    for name in ACCELERATORS:
        lines = prediction_caveats(dense, hardware(name))
        if name in FITTED_GEMM:
            assert lines == [], name
        else:
            assert len(lines) == 1 and lines[0].startswith(f"{name}'s matrix-product efficiency"), name
            assert f"e_max {ACCELERATORS[name].gemm_efficiency:g}" in lines[0]
        moe_lines = [x for x in prediction_caveats(moe, hardware(name)) if "MoE-block" in x]
        assert len(moe_lines) == (0 if name in FITTED_MOE else 1), name


def test_the_users_own_numbers_clear_the_caveats() -> None:
    assert prediction_caveats(preset("llama3-8b"), hardware("h200", gemm_efficiency=0.72)) == []
    assert prediction_caveats(preset("llama3-8b"), hardware("b200", gemm_half_dim=500.0)) == []
    moe = prediction_caveats(preset("mixtral-8x7b"), hardware("a100-80gb", moe_layer_overhead_s=2e-3))
    assert moe == []
