"""experiments.validate's context-parallel row (issue 31): the row's settings and published time
from Table 4 and Megatron's FLOP count (written out here by hand), and its scoring."""

import pytest

from experiments.validate.context_rows import context_variants, llama3_context_cases
from experiments.validate.experiment import row_record


def test_long_context_row():
    (case,) = llama3_context_cases()
    lay = case.layout
    assert (lay.gpus, lay.tp, lay.cp, lay.pp, lay.dp, lay.vp) == (16384, 8, 16, 16, 8, 8)
    assert lay.stage_layers == (0,) + (1,) * 126 + (0,)  # [L3]: the first chunk only the embedding
    assert [lay.vp for _cfg, lay in case.extra["reserve_variants"]] == [1, 2, 4, 8]
    assert case.cfg.seq_length == 131072 and case.setup.global_batch == 128  # 128 x 131,072 = 16M tokens
    # Megatron's count per token: 6 x matrix-product weights (l layers + the V x h head) + 12 l s h (full attention)
    h, kv, f, v, l, s = 16384, 1024, 53248, 128256, 126, 131072
    per_layer = h * (h + 2 * kv) + h * h + 3 * h * f
    flops = 128 * s * (6 * (l * per_layer + v * h) + 12 * l * s * h)
    assert case.published_time_s == pytest.approx(flops / (380e12 * 16384), rel=1e-9)
    causal = 128 * s * (6 * (l * per_layer + v * h) + 6 * l * s * h)
    assert case.extra["causal_time_s"] == pytest.approx(causal / (380e12 * 16384), rel=1e-9)


def test_variants_and_row_record_agree():
    (case,) = llama3_context_cases()
    params = (case.hw.gemm_efficiency, case.hw.gemm_half_dim)
    rec = row_record(case, params)
    assert rec["cp"] == 16 and rec["fits"]
    variants = context_variants(case, params)
    assert [r["vp"] for r in variants] == [1, 2, 4, 8]
    # the row is scored as the dense Llama 3 rows: the paper's v = 8, which is also the fastest of them
    assert rec["vp"] == 8 and rec["predicted_time_s"] == variants[3]["predicted_time_s"]
    assert rec["predicted_time_s"] == min(r["predicted_time_s"] for r in variants if r["predicted_time_s"])
    one, two = variants[:2]
    assert two["predicted_time_s"] < one["predicted_time_s"]  # interleaving shrinks the 16-stage bubble


def test_attention_kernel_readings():
    """Each Llama 3 row under the catalog's fused-attention efficiency is the row's own prediction; under
    FlashAttention-2's 0.35 each is slower, the long-context row (attention most of its FLOPs) by far the most."""
    from experiments.validate.context_rows import attention_kernel_readings
    from experiments.validate.rows import llama3_cases

    cases = llama3_cases() + llama3_context_cases()
    params = (cases[0].hw.gemm_efficiency, cases[0].hw.gemm_half_dim)
    res = attention_kernel_readings(cases, params)
    by = {(r["row"], r["kernel"]): r for r in res["rows"]}
    assert len(by) == 2 * len(cases)
    slowdown = {}
    for case in cases:
        own = by[(case.name, "catalog")]
        assert own["flash_attention_efficiency"] == case.hw.flash_attention_efficiency == 0.5
        assert own["predicted_time_s"] == pytest.approx(row_record(case, params)["predicted_time_s"], rel=1e-12)
        fa2 = by[(case.name, "FlashAttention-2 on H100")]
        assert fa2["flash_attention_efficiency"] == 0.35
        slowdown[case.name] = fa2["predicted_time_s"] / own["predicted_time_s"]
        assert fa2["error_percent"] == pytest.approx(100 * (fa2["predicted_time_s"] / case.published_time_s - 1))
        assert fa2["error_causal_percent"] == pytest.approx(
            100 * (fa2["predicted_time_s"] / case.extra["causal_time_s"] - 1))
    long_row = "llama3-405b-16384-cp16"
    assert all(1.0 < s < 1.05 for name, s in slowdown.items() if name != long_row)
    assert slowdown[long_row] > 1.1
    (even,) = res["break_even"]
    assert even["row"] == long_row
    # the shorter the target, the faster the kernel it needs
    assert even["full_count"] < even["full_count_minus_10_percent"] < even["causal_count"]


def test_break_even_efficiency_meets_its_target():
    from dataclasses import replace

    from experiments.validate.context_rows import break_even_efficiency
    from experiments.validate.fit import score_case

    (case,) = llama3_context_cases()
    params = (case.hw.gemm_efficiency, case.hw.gemm_half_dim)
    eff = break_even_efficiency(case, params, case.published_time_s)
    assert 0.05 < eff < 0.5  # slower than the catalog's kernel: the catalog's prediction is short of it
    hw = case.hw.with_changes(flash_attention_efficiency=eff)
    assert score_case(replace(case, hw=hw), params)["batch_time_s"] == pytest.approx(case.published_time_s, rel=1e-6)
    # no efficiency in [0.05, 1] makes the row take 1 s, or a day
    assert break_even_efficiency(case, params, 1.0) is None
    assert break_even_efficiency(case, params, 86400.0) is None
