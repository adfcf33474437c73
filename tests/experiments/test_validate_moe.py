"""experiments.validate.moe_rows: the Megatron-Bridge MoE rows read and scored (issue 31)."""

import pytest

from experiments.validate.moe_rows import markdown, moe_cases, moe_records


def test_rows_and_published_times():
    cases = moe_cases()
    assert len(cases) == 11  # 12 rows less the 25.09 "tokendrop" row
    c = next(c for c in cases if c.name == "qwen3-30b-a3b 26.06")
    # 1,024 sequences of 4,096 tokens at 8,826 tokens/s per GPU on 16 GPUs
    assert c.published_time_s == pytest.approx(1024 * 4096 / (8826 * 16))
    assert (c.layout.tp, c.layout.pp, c.layout.dp, c.layout.ep, c.cfg.precision) == (1, 1, 16, 16, "fp8")
    g = next(c for c in cases if c.name == "gpt-oss-120b 25.11")
    assert (g.layout.pp, g.layout.dp, g.layout.ep, g.cfg.micro_batch, g.setup.global_batch) == (4, 16, 8, 4, 512)
    assert g.cfg.precision == "bf16"
    v = next(c for c in cases if c.name == "qwen3-30b-a3b 26.02")
    assert v.layout.vp == 12 and v.layout.pp == 2


def test_every_row_is_scored():
    recs = moe_records()
    assert len(recs) == 11
    for r in recs:
        assert r["predicted_tokens_per_s_per_gpu"] is not None and r["fits"]
        assert r["tokens_error_percent"] == pytest.approx(
            100 * (r["predicted_tokens_per_s_per_gpu"] / r["published_tokens_per_s_per_gpu"] - 1))
    assert "| qwen3-30b-a3b 26.06 |" in markdown(recs, "t")
