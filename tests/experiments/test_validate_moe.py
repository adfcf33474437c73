"""experiments.validate.moe_rows: the Megatron-Bridge MoE rows read and scored (issue 31)."""

from dataclasses import replace

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
    # 26.02 and 26.02.01 share a layout and differ by 1.77x; 25.11 shares the parallel layout (t, p, d, e,
    # dispatcher, precision; b, B and v differ) and runs 1.72x slower per GPU: both left out, nothing else
    assert sorted(out) == ["qwen3-30b-a3b 25.11", "qwen3-30b-a3b 26.02"]
    assert "26.02.01 (same layout" in out["qwen3-30b-a3b 26.02"]
    assert "26.02.01 (same parallel layout, 9058 vs 5275" in out["qwen3-30b-a3b 25.11"]
    assert len(fit_cases()) == 9
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


def test_the_catalogs_micro_batch_range_is_the_fit_rows():
    """FITTED_MOE's max_micro_batch_tokens (the plan's caveat past it) is the largest micro-batch of the
    rows it was fitted on."""
    from experiments.validate.moe_rows import fit_cases
    from piper.frontend.hardware import FITTED_MOE

    rows = fit_cases()
    assert FITTED_MOE["h100-sxm-80gb"].max_micro_batch_tokens == max(c.cfg.micro_batch * c.cfg.seq_length for c in rows)


def test_the_fitted_forms_start_from_no_other_time():
    """Each form fits its own terms with the other MoE times at 0: the "layer" form's prediction at
    the catalog's d0 is the catalog's with the per-token time swapped for the fixed one."""
    from experiments.validate.moe_rows import MOE_FORMS, moe_cases, predict_moe_time_s
    from piper.frontend.score import score_layout

    case = next(c for c in moe_cases() if c.name == "qwen3-30b-a3b 26.06")
    names = MOE_FORMS["layer"].names
    got = predict_moe_time_s(case, (695.7, 2e-3), names)
    hw = case.hw.with_changes(expert_gemm_half_dim=695.7, moe_layer_overhead_s=2e-3, moe_token_overhead_s=0.0)
    assert got == pytest.approx(score_layout(case.cfg, hw, case.setup, case.layout)["batch_time_s"], rel=1e-12)
    # at b = 1, t = 1 the per-token time of 4,096 tokens x top-8 equal to the fixed one gives the same
    # iteration; at b = 2 the per-token form charges twice the time per pass
    token = MOE_FORMS["token"].names
    assert got == pytest.approx(predict_moe_time_s(case, (695.7, 2e-3 / (4096 * 8)), token), rel=1e-12)
    b2 = replace(case, cfg=case.cfg.with_changes(micro_batch=2))
    assert predict_moe_time_s(b2, (695.7, 2e-3 / (4096 * 8)), token) > predict_moe_time_s(b2, (695.7, 2e-3), names)


def test_rows_reduce_gradients_in_bf16():
    """Megatron-Bridge's benchmark recipes set grad_reduce_in_fp32 = False (moe_rows.GRAD_BYTES): every
    row's setup carries 2-byte gradients, and the expert gradients the resync moves are 2 bytes each."""
    from experiments.validate.moe_rows import GRAD_BYTES
    from piper.frontend.workload import build_workload

    assert GRAD_BYTES == 2
    cases = moe_cases()
    assert {c.setup.grad_bytes for c in cases} == {2}
    c = next(c for c in cases if c.name == "qwen3-30b-a3b 26.06")
    wl4 = build_workload(c.cfg, c.hw, replace(c.setup, grad_bytes=4))
    wl2 = build_workload(c.cfg, c.hw, c.setup)

    def expert_sizes(wl):
        return [(n["id"], t, e["id"], e["expertParameterSize"]) for n in wl["nodes"]
                for t, es in n.get("TMPCs", {}).items() for e in es if e.get("expertParameterSize")]

    two, four = expert_sizes(wl2), expert_sizes(wl4)
    assert two and [k[:3] for k in two] == [k[:3] for k in four]
    for a, b in zip(two, four):
        assert 2 * a[3] == pytest.approx(b[3])


def test_recipe_readings_change_only_what_the_recipe_says():
    """The 25.11 rows scored with their recipes' settings: GPT-OSS at micro-batch 1 (the table's 4
    needs full recomputation under the model), Qwen3 at v = 12 with no recomputation (the recipe's),
    which the model's memory does not fit: reported with the time as if it fitted, not dropped."""
    from experiments.validate.moe_rows import RECIPE_READINGS, recipe_markdown, recipe_readings

    recs = {r["row"]: r for r in recipe_readings()}
    assert set(recs) == {r.row for r in RECIPE_READINGS} == {"gpt-oss-120b 25.11", "qwen3-30b-a3b 25.11"}
    g, q = recs["gpt-oss-120b 25.11"], recs["qwen3-30b-a3b 25.11"]
    assert (g["micro_batch"], g["vp"], g["fits"]) == (1, 1, True)
    assert g["recompute"] == "selective"  # the recipe's (layernorm, moe_act), which fits at b = 1
    assert (q["micro_batch"], q["vp"], q["recompute"], q["fits"]) == (2, 12, "none", False)
    assert q["max_memory_gb"] > 79.1 and q["predicted_tokens_per_s_per_gpu"] > 0
    table = {r["row"]: r for r in moe_records()}
    # the table's own reading of GPT-OSS 25.11 (b = 4) only runs with full recomputation
    assert table["gpt-oss-120b 25.11"]["recompute"] == "full"
    for r in recs.values():
        assert r["tokens_error_percent"] == pytest.approx(
            100 * (r["predicted_tokens_per_s_per_gpu"] / r["published_tokens_per_s_per_gpu"] - 1))
    md = recipe_markdown(list(recs.values()))
    assert "no (time as if it fitted)" in md and "set_qwen3_common_configs" in md


def test_gpt_oss_rows_recompute_what_their_recipe_names():
    """Megatron-Bridge's H100 GPT-OSS recipes recompute layernorm and moe_act selectively (RECIPE_RECOMPUTE_MODULES):
    every GPT-OSS row is scored so, the newest releases fit with it, and the b = 4 row of 25.11 does not."""
    from experiments.validate.moe_rows import moe_cases, moe_records

    cases = [c for c in moe_cases() if c.cfg.name == "gpt-oss-120b"]
    assert len(cases) == 5
    for c in cases:
        assert (c.layout.recompute, c.setup.recompute_modules) == ("selective", ("layernorm", "moe_act"))
    qwen = [c for c in moe_cases() if c.cfg.name == "qwen3-30b-a3b"]
    assert {(c.layout.recompute, c.setup.recompute_modules) for c in qwen} == {("none", ("core_attn",))}
    recs = {r["row"]: r for r in moe_records()}
    assert {recs[c.name]["recompute"] for c in cases if c.setup.global_batch == 1280} == {"selective"}
    assert recs["gpt-oss-120b 25.11"]["recompute"] == "full"


def test_the_catalogs_runner_up_form_is_that_forms_optimum():
    """FITTED_MOE's alternative (what `plan` re-prices its answer with beyond the fit rows) is the
    per-token form fitted on the same rows: moving its d0 by 10 or its time by 2% makes that form's loss
    larger."""
    from experiments.validate.fit import log_error
    from experiments.validate.moe_rows import CATALOG_FORM, MOE_FORMS, fit_cases, predict_moe_time_s
    from piper.frontend.hardware import FITTED_MOE

    alt = dict(FITTED_MOE["h100-sxm-80gb"].alternative)
    names = MOE_FORMS["token"].names
    assert CATALOG_FORM != "token" and set(alt) == set(names)
    rows = fit_cases()
    at = [alt[n] for n in names]

    def loss(x):
        return sum(log_error(predict_moe_time_s(c, x, names), c.published_time_s) ** 2 for c in rows) / len(rows)

    base = loss(at)
    for i, name in enumerate(names):
        step = 10.0 if name == "expert_gemm_half_dim" else 0.02 * at[i]
        for sign in (1, -1):
            x = list(at)
            x[i] += sign * step
            assert loss(x) > base, (name, x)
