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


def test_exclusion_rule_and_dispatchers():
    from experiments.validate.moe_rows import excluded_rows, fit_cases

    cases = moe_cases()
    out = excluded_rows(cases)
    # 26.02 and 26.02.01 share a layout and differ by 1.77x: the earlier one is left out, nothing else
    assert list(out) == ["qwen3-30b-a3b 26.02"] and "26.02.01" in out["qwen3-30b-a3b 26.02"]
    assert len(fit_cases()) == 10
    flex = {c.name for c in cases if c.setup.token_dispatcher == "flex"}
    assert flex == {"qwen3-30b-a3b 26.06", "qwen3-30b-a3b 26.04.01", "qwen3-30b-a3b 26.04"}


def test_catalog_moe_constants_are_the_fits_optimum():
    """FITTED_MOE (what plan and score use) sits at the minimum of the fit's loss on its rows: moving
    d0 by 10, a fixed time by 2% of its value makes the loss larger (a drift after a model change
    fails here; ``python -m experiments.validate.moe_rows --fit`` then reports the new values)."""
    from experiments.validate.fit import log_error
    from experiments.validate.moe_rows import (
        MOE_PARAMS,
        catalog_params,
        fit_cases,
        predict_moe_time_s,
    )

    rows = fit_cases()
    at = catalog_params()

    def loss(x):
        return sum(log_error(predict_moe_time_s(c, x), c.published_time_s) ** 2 for c in rows) / len(rows)

    base = loss(at)
    steps = {"expert_gemm_half_dim": 10.0}
    for i, name in enumerate(MOE_PARAMS):
        step = steps.get(name, 0.02 * at[i])
        for sign in (1, -1):
            x = list(at)
            x[i] = max(0.0, x[i] + sign * step)
            if x[i] != at[i]:
                assert loss(x) > base, (name, x)
