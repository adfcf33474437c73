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
