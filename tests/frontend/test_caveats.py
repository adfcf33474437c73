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
    for term in ("moe_token_overhead_s", "moe_layer_overhead_s", "expert_overhead_s"):
        moe = prediction_caveats(preset("mixtral-8x7b"), hardware("a100-80gb", **{term: 1e-7}))
        assert moe == [], term
    assert any("MoE-block" in x for x in prediction_caveats(preset("mixtral-8x7b"), hardware("a100-80gb")))


def test_an_moe_micro_batch_beyond_the_fitted_rows_is_an_extrapolation() -> None:
    """FITTED_MOE's rows have at most 4 x 4,096 tokens per micro-batch (Megatron-Bridge's GPT-OSS 25.11
    row): beyond it the MoE time's growth with the micro-batch is extrapolated."""
    fitted = FITTED_MOE["h100-sxm-80gb"]
    assert fitted.max_micro_batch_tokens == 4 * 4096
    qwen = preset("qwen3-30b-a3b").with_changes(seq_length=4096)
    h100 = hardware("h100")

    def lines(cfg, hw):
        return [x for x in prediction_caveats(cfg, hw) if "extrapolated" in x]

    assert lines(qwen.with_changes(micro_batch=4), h100) == []
    (line,) = lines(qwen.with_changes(micro_batch=8), h100)
    assert "micro-batch 8 x 4096 = 32,768 tokens" in line and "16,384" in line
    assert lines(qwen.with_changes(micro_batch=8), h100.with_changes(moe_token_overhead_s=1e-8)) == []  # the user's own
    assert lines(preset("llama3-8b").with_changes(micro_batch=8, seq_length=4096), h100) == []  # dense
    assert lines(qwen.with_changes(micro_batch=8), hardware("a100-80gb")) == []  # no fitted constants: the other caveat


def test_the_moe_micro_batch_counts_the_tokens_of_one_context_parallel_rank() -> None:
    qwen = preset("qwen3-30b-a3b").with_changes(seq_length=32768, micro_batch=1)
    (line,) = [x for x in prediction_caveats(qwen, hardware("h100"), 1) if "extrapolated" in x]
    assert "32,768 tokens" in line
    assert not [x for x in prediction_caveats(qwen, hardware("h100"), 2) if "extrapolated" in x]  # 16,384 each
    (line,) = [x for x in prediction_caveats(qwen.with_changes(seq_length=65536), hardware("h100"), 2)
               if "extrapolated" in x]
    assert "65536 / c = 2 = 32,768 tokens" in line
